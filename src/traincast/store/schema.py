"""The one SQLAlchemy ``MetaData`` every ``schema_*`` module adds its tables to."""

from sqlalchemy import MetaData

metadata = MetaData()
