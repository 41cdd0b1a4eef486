import pytest


@pytest.fixture
def db_path(tmp_path, monkeypatch):
    path = tmp_path / "measure.db"
    monkeypatch.setenv("TRAINCAST_DB", str(path))
    return path


@pytest.fixture
def store(db_path):
    from traincast.store import Store

    s = Store(db_path)
    yield s
    s.close()
