"""track(server=...) against a real `traincast serve` process: batches, a server that is down, killed with
SIGKILL and restarted, a wrong token; the spool keeps every row until the server has it."""

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from traincast.online import track
from traincast.online.recorder import Spool
from traincast.serve.runner import ServerProcess
from traincast.store import Store
from traincast.store.pgserver import free_port

from .conftest import TOKEN, fresh_pg_db

SRC = str(Path(__file__).resolve().parents[2] / "src")


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def steps_in(db, job):
    with Store(db) as s:
        return [r[0] for r in s.conn.execute(
            "SELECT step FROM online_steps s JOIN online_jobs j ON j.id = s.job_id WHERE j.name = ? ORDER BY step",
            (job,))]


@pytest.fixture
def server(tmp_path):
    with ServerProcess(tmp_path / "srv.db", TOKEN, home=tmp_path / "home", log=tmp_path / "serve.log") as srv:
        yield srv


def test_steps_and_events_arrive_in_batches(server, tmp_path):
    with track("b", 400, server=server.url, token=TOKEN, spool=tmp_path / "sp.db", flush_every_s=0.1,
               model="resnet18", price_usd_per_hour=1.0) as t:
        for i in range(1, 401):
            t.step(loss=1.0 / i)
            if i % 100 == 0:
                t.eval_start()
                t.eval_end(metric=0.5)
                t.epoch_end()
        assert t.flush(20)
    assert steps_in(server.db, "b") == list(range(401))
    job = get(server.url + "/api/v1/jobs/b")
    assert (job["last_step"], job["model"], job["total_steps"]) == (400, "resnet18", 400)
    eta = get(server.url + "/api/v1/jobs/b/eta")
    assert eta["rows"] == 401 and eta["step"] == 400 and eta["pauses"]
    with Store(server.db) as s:
        assert s.conn.execute("SELECT COUNT(*) FROM online_events").fetchone()[0] == 12
    assert Spool(tmp_path / "sp.db").count() == (0, 0)


def test_a_server_that_is_down_gets_every_row_once_it_is_up(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    spool = tmp_path / "sp.db"
    t = track("down", 300, server=url, token=TOKEN, spool=spool, flush_every_s=0.05, close_timeout_s=1)
    for i in range(1, 201):
        t.step(loss=1.0 / i)
    time.sleep(0.5)
    batches, rows = Spool(spool).count(url)
    assert batches >= 1 and rows == 201  # nothing lost, all waiting
    with ServerProcess(tmp_path / "srv.db", TOKEN, port=port, home=tmp_path / "home") as srv:
        for i in range(201, 301):
            t.step(loss=1.0 / i)
        assert t.flush(30)
        t.close()
        assert steps_in(srv.db, "down") == list(range(301))
    assert Spool(spool).count(url) == (0, 0)


def test_a_server_killed_mid_run_and_restarted_loses_no_row(tmp_path):
    port = free_port()
    srv = ServerProcess(tmp_path / "srv.db", TOKEN, port=port, home=tmp_path / "home").start()
    try:
        with track("crash", 3000, server=srv.url, token=TOKEN, spool=tmp_path / "sp.db", flush_every_s=0.05) as t:
            for i in range(1, 3001):
                t.step(loss=1.0 / i)
                if i == 1000:
                    time.sleep(0.3)
                    srv.kill()  # SIGKILL: no goodbye
                if i == 2000:
                    srv.start()  # the same port and database
                time.sleep(0.0005)
            assert t.flush(30)
        assert steps_in(srv.db, "crash") == list(range(3001))
    finally:
        srv.stop()


def test_a_wrong_token_keeps_the_rows_in_the_spool_until_pushed(server, tmp_path, capfd):
    spool = tmp_path / "sp.db"
    with track("tok", 50, server=server.url, token="wrong-" + "z" * 20, spool=spool, flush_every_s=0.05,
               close_timeout_s=0.5) as t:
        for i in range(50):
            t.step(loss=1.0)  # no exception reaches the loop
    err = capfd.readouterr().err
    assert "HTTP 401" in err and "spool" in err and err.count("HTTP 401") == 1
    assert Spool(spool).count(server.url)[1] == 51
    p = subprocess.run([sys.executable, "-m", "traincast", "spool", "push", "--server", server.url, "--spool",
                        str(spool)], env={"PYTHONPATH": SRC, "TRAINCAST_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "0 left" in p.stdout
    assert steps_in(server.db, "tok") == list(range(51))


def test_resume_continues_from_the_servers_last_step(server, tmp_path):
    kw = dict(server=server.url, token=TOKEN, spool=tmp_path / "sp.db", flush_every_s=0.05)
    with track("r", 100, **kw) as t:
        for _ in range(40):
            t.step()
        assert t.flush(10)
    with track("r", 100, **kw) as t:
        assert t.current_step == 40
        for _ in range(10):
            t.step()
        assert t.flush(10)
    assert steps_in(server.db, "r")[-1] == 50
    with track("r", 100, resume=False, **kw) as t:
        assert t.current_step == 0
        t.step()
        assert t.flush(10)
    assert steps_in(server.db, "r") == [0, 1]


def test_a_server_on_postgres(pg_server, tmp_path):
    url = fresh_pg_db(pg_server)
    with ServerProcess(url, TOKEN, home=tmp_path / "home") as srv:
        with track("pg", 200, server=srv.url, token=TOKEN, spool=tmp_path / "sp.db", flush_every_s=0.05) as t:
            for i in range(1, 201):
                t.step(loss=1.0 / i)
            assert t.flush(20)
        assert get(srv.url + "/api/v1/health")["db"] == "postgresql"
        assert get(srv.url + "/api/v1/jobs/pg/eta")["rows"] == 201
    assert steps_in(url, "pg") == list(range(201))
