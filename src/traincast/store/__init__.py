"""The embedded database (SQLite) and its schema.

``Store`` opens (and creates) the database and applies the DDL of every
``traincast.store.schema_*`` module it finds in this package.
"""

from traincast.store.db import Store, default_db_path, schema_modules

__all__ = ["Store", "default_db_path", "schema_modules"]
