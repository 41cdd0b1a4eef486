"""The expected wall clock of a long job with failures, restarts and checkpoints (predict/goodput.py)."""

import json
import math

import pytest
from scipy.optimize import minimize_scalar

from traincast.cli.main import _register_all, run
from traincast.errors import ConfigError
from traincast.hardware import get_catalog
from traincast.predict.goodput import Reliability, optimal_interval, wall_clock
from traincast.predict.options import forecast_from_options

_register_all()


def _wall(t, tau, delta, r, m):
    """The first-order wall clock, written out again here: T (1 + delta/tau) / (1 - (R + (tau + delta)/2) / M)."""
    return t * (1 + delta / tau) / (1 - (r + (tau + delta) / 2) / m)


@pytest.mark.parametrize("delta,m,r", [(3.3, 89_000.0, 600.0), (120.0, 11_000.0, 600.0), (600.0, 40_000.0, 1800.0),
                                       (0.5, 3_600.0, 30.0)])
def test_the_interval_is_the_minimum_of_the_wall_clock(delta, m, r):
    tau = optimal_interval(delta, m, r)
    best = minimize_scalar(lambda x: _wall(1e6, x, delta, r, m), bounds=(delta / 10, m), method="bounded",
                           options={"xatol": 1e-6})
    assert tau == pytest.approx(best.x, rel=1e-4)
    # Young's first-order interval where the checkpoint and the restart are short against the time between failures
    if delta / m < 1e-4 and r / m < 1e-2:
        assert tau == pytest.approx(math.sqrt(2 * delta * m), rel=0.02)


def test_a_job_by_hand():
    """2,048 GPUs at 50,000 GPU-hours between failures: one every 24.41 h. 1,000 h of training, checkpoints of
    1 TB at 100 GB/s (10 s) every 30 min, 15-minute restarts."""
    rel = Reliability(gpu_mtbf_hours=50_000, restart_s=900, checkpoint_gb_per_s_per_gpu=0.1,
                      checkpoint_gb_per_s=100.0, checkpoint_every_s=1800)
    w = wall_clock(3.6e6, gpus=2048, iteration_s=2.0, state_bytes=10**12, rel=rel, usd_per_hour=1000.0)
    m = 50_000 * 3600 / 2048
    assert w.job_mtbf_s == pytest.approx(m)
    assert w.checkpoint_write_s == pytest.approx(10.0)
    assert (w.checkpoint_every_s, w.checkpoint_every_steps) == (1800, 900)
    expected = 3.6e6 * (1 + 10 / 1800) / (1 - (900 + 905) / m)
    assert w.wall_s == pytest.approx(expected)
    assert w.wall_s / 3600 == pytest.approx(1026.6, abs=0.1)  # 1000 h x 1.00556 / (1 - 1805 s / 87,891 s)
    assert w.checkpoint_s == pytest.approx(2000 * 10)  # 2,000 checkpoints of 10 s
    assert w.interruptions == pytest.approx(w.wall_s / m)
    # the wall clock is training + checkpoints + restarts + lost work, nothing else
    assert w.training_s + w.checkpoint_s + w.restart_s + w.lost_work_s == pytest.approx(w.wall_s)
    assert w.lost_work_s == pytest.approx(w.interruptions * 905)
    assert w.goodput == pytest.approx(3.6e6 / expected)
    assert w.cost_usd == pytest.approx(w.wall_s / 3600 * 1000)


def test_llama_3s_interruptions_come_back_from_the_default_rate():
    """The default rate is Llama 3's: 419 unexpected interruptions in 54 days on 16,384 H100s."""
    rel = Reliability.defaults()
    w = wall_clock(54 * 86400.0, gpus=16384, iteration_s=10.0, state_bytes=0, rel=rel)
    assert w.job_mtbf_s / 3600 == pytest.approx(54 * 24 / 419, rel=1e-3)
    assert w.training_s / w.job_mtbf_s == pytest.approx(419, rel=1e-3)


def test_more_gpus_fail_more_often_and_lose_more():
    rel = Reliability.defaults()
    small = wall_clock(30 * 86400.0, gpus=64, iteration_s=1.0, state_bytes=10**11, rel=rel)
    big = wall_clock(30 * 86400.0, gpus=8192, iteration_s=1.0, state_bytes=10**11, rel=rel)
    assert big.job_mtbf_s == pytest.approx(small.job_mtbf_s / 128)
    assert big.goodput < small.goodput < 1
    assert small.goodput > 0.99


def test_a_job_that_fails_faster_than_it_restarts_never_finishes():
    rel = Reliability.from_options(gpu_mtbf_hours=1000, restart_minutes=60)
    w = wall_clock(86400.0, gpus=4096, iteration_s=1.0, state_bytes=10**9, rel=rel)  # one failure every 14.6 min
    assert math.isinf(w.wall_s) and w.goodput == 0
    d = w.to_dict()
    assert d["wall_s"] is None and d["cost_usd"] is None
    json.dumps(d, allow_nan=False)


def test_a_short_job_writes_no_checkpoint():
    w = wall_clock(600.0, gpus=8, iteration_s=0.5, state_bytes=10**10, rel=Reliability.defaults())
    assert w.checkpoint_s == 0 and w.checkpoint_every_s == 600.0
    assert w.wall_s == pytest.approx(600.0 / (1 - (600 + 300) / w.job_mtbf_s))


@pytest.mark.parametrize("kw,flag", [({"gpu_mtbf_hours": 0}, "--gpu-mtbf-hours"), ({"restart_minutes": -1}, "--restart-minutes"),
                                     ({"checkpoint_every_minutes": 0}, "--checkpoint-every"),
                                     ({"checkpoint_gb_per_s": float("nan")}, "--checkpoint-gb-per-s")])
def test_bad_reliability_options_are_one_line_errors(kw, flag):
    with pytest.raises(ConfigError, match=f"{flag} must be a positive number"):
        Reliability.from_options(**kw)


def test_the_forecast_checkpoints_the_whole_training_state():
    """gpt2 (124,439,808 parameters) with AdamW: 4 + 8 bytes a parameter under autocast (fp32 weights, two fp32
    moments); 2 + 12 with the model in bf16 (half weights; fp32 masters and moments)."""
    n = 124_439_808
    for precision, per in (("amp-bf16", 12), ("bf16", 14)):
        f = forecast_from_options("gpt2", gpu="A100", gpus=16, batch_size=64, seq_len=128, precision=precision,
                                  optimizer="adamw", steps=10_000)
        assert f.parameters == n
        w = f.wall_clock
        assert w["checkpoint_bytes"] == per * n
        assert w["training_s"] == pytest.approx(f.total_s)
        assert w["job_mtbf_s"] == pytest.approx(50_677 * 3600 / 16)
        assert w["checkpoint_write_s"] == pytest.approx(per * n / (0.122e9 * 16))
        assert f.total_s < w["wall_s"]


def test_predict_shows_and_takes_the_reliability_options(capsys):
    args = ["predict", "gpt2", "--gpu", "A100", "--gpus", "16", "-b", "64", "--seq-len", "128", "--steps",
            "2000000", "--optimizer", "adamw", "--gpu-mtbf-hours", "200", "--restart-minutes", "20",
            "--checkpoint-every", "30"]
    assert run(args + ["--json"]) == 0
    w = json.loads(capsys.readouterr().out)["wall_clock"]
    assert w["job_mtbf_s"] == pytest.approx(200 * 3600 / 16)
    assert w["optimal_interval"] is False
    assert w["interruptions"] > 1
    assert run(args) == 0
    out = capsys.readouterr().out
    assert "wall clock with failures" in out and "interruptions" in out and "as given" in out
    for bad, msg in ((["--gpu-mtbf-hours", "-3"], "--gpu-mtbf-hours must be a positive number"),
                     (["--checkpoint-every", "0"], "--checkpoint-every must be a positive number")):
        assert run(["predict", "gpt2", "--gpu", "A100", "-b", "8", "--seq-len", "32", *bad]) == 2
        assert msg in capsys.readouterr().err


def test_a_cpu_forecast_has_no_gpu_failures():
    cpu = next(d.name for d in get_catalog().devices.values() if d.kind == "cpu")
    f = forecast_from_options("resnet18", gpu=cpu, batch_size=8, steps=100)
    assert f.total_s is not None and f.wall_clock is None
