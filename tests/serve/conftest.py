import pytest
import typer
from fastapi.testclient import TestClient

from traincast.serve import ServeSettings, create_app
from traincast.store import Store

TOKEN = "test-token-" + "x" * 24


@pytest.fixture
def cli_app():
    """The commands the API answers for (predict, plan, parallelize; eta, converge, jobs), as a typer app."""
    from traincast.cli import commands, online, parallel, serve

    a = typer.Typer()
    commands.register(a)
    online.register(a)
    parallel.register(a)
    serve.register(a)
    return a


def make_client(tmp_path, **kw):
    settings = ServeSettings(db=str(tmp_path / "srv.db"), tokens=(TOKEN,), uploads_dir=tmp_path / "uploads", **kw)
    app = create_app(settings)
    return TestClient(app), app


@pytest.fixture
def client(tmp_path):
    c, app = make_client(tmp_path)
    with c:
        yield c
    app.state.store.close()


@pytest.fixture
def auth():
    return {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL server on loopback (Debian's postgresql, installed by `make test`); missing is a failure."""
    from traincast.store.pgserver import PostgresServer

    with PostgresServer() as pg:
        yield pg


def fresh_pg_db(pg_server) -> str:
    import uuid

    import psycopg

    name = "t" + uuid.uuid4().hex[:12]
    base = pg_server.url.rsplit("/", 1)[0]
    with psycopg.connect(base + "/postgres", autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    return f"{base}/{name}"


__all__ = ["Store", "TOKEN", "make_client", "fresh_pg_db"]
