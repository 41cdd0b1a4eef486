"""The traincast database: SQLite embedded by default, PostgreSQL for a team.

``Store`` opens (and creates) the database and migrates it to the head schema
(:mod:`traincast.store.migrations`); the tables are SQLAlchemy Core tables in
the ``traincast.store.schema_*`` modules.
"""

from traincast.store.db import Store, default_db, default_db_path, is_url, schema_modules

__all__ = ["Store", "default_db", "default_db_path", "is_url", "schema_modules"]
