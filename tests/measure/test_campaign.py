import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from traincast.errors import ConfigError, UnknownNameError
from traincast.measure import CampaignConfig, draw_config, load_samples, run_campaign
from traincast.measure.timing import TimingPolicy

FAST = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, budget_s=0.1)
SRC = str(Path(__file__).resolve().parents[2] / "src")


def cfg(**kw):
    base = dict(ops=("relu", "add", "linear"), n_samples=6, seed=7, policy=FAST, threads=1)
    base.update(kw)
    return CampaignConfig(**base)


def test_campaign_stores_every_sample_with_features(store):
    res = run_campaign(store.conn, cfg())
    assert res.n_new == 6 and res.n_total == 6 and res.n_before == 0 and not res.interrupted
    assert res.samples_per_min > 0
    rows = load_samples(store.conn, res.campaign_id)
    assert [r["idx"] for r in rows] == list(range(6))
    for r in rows:
        assert r["op"] in ("relu", "add", "linear") and r["phase"] == "forward" and r["device"] == "cpu"
        assert r["median_ms"] > 0 and r["iqr_ms"] >= 0 and r["cov"] >= 0 and r["n_repeats"] == 3
        assert r["flops"] > 0 and r["bytes_read"] > 0 and r["bytes_written"] > 0
        assert r["fingerprint_id"] and r["threads"] == 1 and r["error"] is None
        op, params, _ = draw_config(("relu", "add", "linear"), 7, r["idx"], "small")
        assert (r["op"], r["params"]) == (op, json.loads(json.dumps(params)))
    fp = store.conn.execute("SELECT num_threads FROM measure_fingerprints WHERE id=?", (rows[0]["fingerprint_id"],)).fetchone()
    assert fp[0] == 1


def test_rerun_continues_and_settings_must_match(store):
    first = run_campaign(store.conn, cfg(n_samples=10), max_new=4)
    assert first.n_total == 4
    again = run_campaign(store.conn, cfg(n_samples=10))
    assert again.campaign_id == first.campaign_id
    assert again.n_before == 4 and again.n_new == 6 and again.n_total == 10
    done = run_campaign(store.conn, cfg(n_samples=10))
    assert done.n_new == 0
    n = store.conn.execute("SELECT COUNT(*), COUNT(DISTINCT idx) FROM measure_layer_samples").fetchone()
    assert tuple(n) == (10, 10)
    with pytest.raises(ConfigError, match="other settings"):
        run_campaign(store.conn, cfg(campaign_id=first.campaign_id, phase="train"))
    other = run_campaign(store.conn, cfg(phase="train", n_samples=2))
    assert other.campaign_id != first.campaign_id and other.n_new == 2


def test_bad_campaign_settings(store):
    with pytest.raises(UnknownNameError):
        run_campaign(store.conn, cfg(ops=("relu", "gelux")))
    with pytest.raises(UnknownNameError):
        run_campaign(store.conn, cfg(phase="backward"))
    with pytest.raises(UnknownNameError):
        run_campaign(store.conn, cfg(fixed={"kernal": 3}, ops=("conv2d",)))
    with pytest.raises(ConfigError, match="impossible"):
        run_campaign(store.conn, cfg(fixed={"kernel": 301, "padding": 0}, ops=("conv2d",)))


CHILD = """
import sys
from traincast.measure import CampaignConfig, run_campaign
from traincast.measure.timing import TimingPolicy
from traincast.store import Store
s = Store(sys.argv[1])
run_campaign(s.conn, CampaignConfig(ops=("relu", "add", "mul"), n_samples=100000, seed=11, threads=1,
             policy=TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, budget_s=0.05)))
"""


def test_sigkill_loses_no_finished_sample_and_rerun_continues(db_path, store):
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(db_path)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        n = 0
        while time.time() < deadline:
            try:
                n = store.conn.execute("SELECT COUNT(*) FROM measure_layer_samples").fetchone()[0]
            except Exception:
                n = 0
            if n >= 8:
                break
            time.sleep(0.05)
        assert n >= 8, "child stored no samples"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(10)
    rows = store.conn.execute("SELECT campaign_id, idx FROM measure_layer_samples ORDER BY idx").fetchall()
    k = len(rows)
    assert k >= n
    assert [r[1] for r in rows] == list(range(k))  # committed one by one, in order, none half-written
    cid = rows[0][0]
    res = run_campaign(store.conn, CampaignConfig(ops=("relu", "add", "mul"), n_samples=k + 3, seed=11, threads=1,
                                                  policy=FAST))
    assert res.campaign_id == cid
    assert res.n_before == k and res.n_new == 3 and res.n_total == k + 3
    idx = [r[0] for r in store.conn.execute("SELECT idx FROM measure_layer_samples ORDER BY idx")]
    assert idx == list(range(k + 3))
