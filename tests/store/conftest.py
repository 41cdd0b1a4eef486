import pytest

from traincast.store.pgserver import PostgresServer


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL server on loopback for the session (Debian's postgresql, installed by `make test`).
    Not installed is a failure, not a skip."""
    with PostgresServer() as pg:
        yield pg


@pytest.fixture
def pg_url(pg_server):
    """A fresh, empty database on the session's server."""
    import uuid

    import psycopg

    name = "t" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server.url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    return pg_server.url.rsplit("/", 1)[0] + "/" + name
