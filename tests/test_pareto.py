"""One-job planning: Pareto front, feasibility, the CLI."""

import json

import pytest

from traincast.cli.main import _register_all, run
from traincast.errors import ConfigError, UnknownNameError
from traincast.plan.pareto import parse_duration_s, pareto_flags, plan

_register_all()


def test_pareto_flags_by_hand():
    pts = [(1, 10), (2, 5), (3, 6), (4, 1), (2, 5)]
    # (3, 6) is beaten by (2, 5); the two equal (2, 5) points do not beat each other
    assert pareto_flags(pts) == [True, True, False, True, True]


def test_plan_marks_front_deadline_budget_and_memory():
    res = plan("resnet18", epochs=10, dataset_size=100_000, batch_size=256, gpus=(1, 8),
               instances=("p3.2xlarge", "p3.16xlarge", "g5.xlarge", "p4d.24xlarge"),
               deadline_s=3600, budget_usd=50)
    assert {c.instance for c in res.configs} == {"p3.2xlarge", "p3.16xlarge", "g5.xlarge", "p4d.24xlarge"}
    # p3.16xlarge has 8 GPUs: the 1-GPU count is not offered on it
    assert all(c.gpus % 8 == 0 for c in res.configs if c.instance in ("p3.16xlarge", "p4d.24xlarge"))
    front = res.front
    assert front and all(c.fits_in_memory for c in front)
    for c in res.configs:  # nothing on the front is dominated; judged by the expected wall clock and its cost
        assert c.total_s < c.wall_s and c.cost_usd < c.wall_cost_usd
        assert c.wall_cost_usd == pytest.approx(c.wall_s / 3600 * c.usd_per_hour)
        for f in front:
            assert not (c.wall_s < f.wall_s and c.wall_cost_usd < f.wall_cost_usd)
        assert c.meets_deadline == (c.wall_s <= 3600)
        assert 0 < c.mfu < 1
        assert c.within_budget == (c.wall_cost_usd <= 50)
    best = res.cheapest_feasible
    if best is not None:
        assert best.feasible and best.wall_cost_usd == min(c.wall_cost_usd for c in res.configs if c.feasible)
    assert res.fastest.wall_s == min(c.wall_s for c in res.configs)


def test_a_deadline_counts_the_failures_of_many_gpus():
    """Where GPUs fail often, the configuration whose training alone meets the deadline may not: the plan judges
    by the expected wall clock. 64 GPUs at 200 GPU-hours between failures: one every 3.1 hours of the job."""
    from traincast.predict.goodput import Reliability

    kw = dict(steps=400_000, batch_size=64, seq_len=128, gpus=(8, 64), instances=("p4d.24xlarge",),
              optimizer="adamw", precision="amp-bf16")
    calm = plan("gpt2", **kw)
    c64 = next(c for c in calm.configs if c.gpus == 64)
    deadline = c64.total_s * 1.03  # the training alone meets it, with 3% to spare
    calm = plan("gpt2", deadline_s=deadline, **kw)
    stormy = plan("gpt2", deadline_s=deadline, reliability=Reliability.from_options(gpu_mtbf_hours=200,
                                                                                    restart_minutes=15), **kw)
    c_calm = next(c for c in calm.configs if c.gpus == 64)
    c_storm = next(c for c in stormy.configs if c.gpus == 64)
    assert c_calm.total_s == pytest.approx(c_storm.total_s)
    assert c_calm.meets_deadline and c_calm.goodput > 0.99
    assert not c_storm.meets_deadline and "misses the deadline" in c_storm.reason and c_storm.goodput < 0.95


def test_out_of_memory_configurations_are_flagged():
    res = plan("gpt2-large", epochs=1, dataset_size=1000, batch_size=64, seq_len=1024, gpus=(1,),
               instances=("g4dn.xlarge", "a2-ultragpu-8g"), optimizer="adam", layouts="data-parallel")
    t4 = [c for c in res.configs if c.instance == "g4dn.xlarge"]
    assert t4 and not t4[0].fits_in_memory and "out of memory" in t4[0].reason and not t4[0].pareto


def test_deadlines_as_people_give_them():
    """Durations, dates and times, dates (the end of the day) and weekdays (the end of the coming one), from a fixed
    moment: Wednesday 2026-12-02 10:00 UTC."""
    import datetime as dt

    from traincast.plan.pareto import parse_deadline_s

    now = dt.datetime(2026, 12, 2, 10, 0, tzinfo=dt.timezone.utc)
    assert parse_deadline_s("36h", now) == 36 * 3600
    assert parse_deadline_s("2026-12-04T17:00", now) == (2 * 24 + 7) * 3600
    assert parse_deadline_s("2026-12-04 17:00+01:00", now) == (2 * 24 + 6) * 3600
    assert parse_deadline_s("2026-12-04", now) == (2 * 24 + 14) * 3600  # the end of Friday
    assert parse_deadline_s("friday", now) == parse_deadline_s("Fri", now) == (2 * 24 + 14) * 3600
    assert parse_deadline_s("wednesday", now) == 14 * 3600  # today is Wednesday: the end of today
    assert parse_deadline_s("tuesday", now) == (6 * 24 + 14) * 3600  # the coming Tuesday
    with pytest.raises(ConfigError, match="already past"):
        parse_deadline_s("2026-12-01T09:00", now)
    with pytest.raises(ConfigError, match="cannot read deadline 'next week'"):
        parse_deadline_s("next week", now)


def test_durations():
    assert parse_duration_s("36h") == 36 * 3600
    assert parse_duration_s("1h30m") == 5400
    assert parse_duration_s("2d") == 172800
    with pytest.raises(ConfigError, match="cannot read duration"):
        parse_duration_s("friday")


def test_plan_cli_json_and_bad_input(capsys, tmp_path):
    code = run(["plan", "resnet18", "--epochs", "1", "--dataset-size", "10000", "--batch-size", "64",
                "--gpus", "1,2", "--gpu-types", "T4,L4", "--plot", str(tmp_path / "p.png"), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    d = json.loads(out)
    assert d["pareto_front"] and (tmp_path / "p.png").stat().st_size > 1000
    assert run(["plan", "resnet18", "--epochs", "1", "--batch-size", "64", "--deadline", "soon"]) == 2
    assert "cannot read deadline 'soon'" in capsys.readouterr().err
    assert run(["plan", "resnet18", "--epochs", "1", "--batch-size", "64", "--deadline", "2001-01-01"]) == 2
    assert "is already past" in capsys.readouterr().err
    assert run(["plan", "resnet18", "--epochs", "1", "--batch-size", "64", "--gpus", "1,x"]) == 2
    assert run(["plan", "resnet18", "--epochs", "1", "--batch-size", "64", "--gpu-types", "Z99"]) == 2


def test_plan_times_each_gpu_with_the_predictor_asked_for(capsys, tmp_path):
    from traincast.hardware import get_catalog
    from traincast.predict import forecast, make_predictor

    kw = dict(epochs=1, dataset_size=10_000, batch_size=32, gpus=(1,), instances=("g4dn.xlarge", "p3.2xlarge"))
    auto, ana = plan("resnet18", **kw), plan("resnet18", predictor="analytical", **kw)
    # the default (auto): the T4 is in the learned model's data; the V100-SXM2 of a p3.2xlarge is not (analytical)
    assert {c.device: c.predictor for c in auto.configs} == {"T4": "learned", "V100-SXM2-16GB": "analytical"}
    learned = plan("resnet18", predictor="learned", **kw)  # learned everywhere: its mean with analytical off its fit
    assert {c.device: c.predictor for c in learned.configs} == {"T4": "learned", "V100-SXM2-16GB": "learned+analytical"}
    assert {c.predictor for c in ana.configs} == {"analytical"}
    cat = get_catalog()
    differs = []
    for c in learned.configs:  # the same figure as a forecast with that GPU's learned predictor
        dev = cat.instance(c.instance).device
        f = forecast("resnet18", instance=c.instance, gpus=1, batch_size=32, epochs=1, dataset_size=10_000,
                     predictor=make_predictor("learned", dev), scaling=False)
        assert c.iteration_s == pytest.approx(f.iteration_s, rel=1e-6)
        other = next(a for a in ana.configs if a.instance == c.instance)
        differs.append(c.iteration_s != pytest.approx(other.iteration_s, rel=1e-3))
    assert any(differs)  # (ResNet-18 b32 on the T4 happens to be within 0.1% in both)
    with pytest.raises(UnknownNameError, match="unknown predictor 'oracle'; known: analytical, auto, learned"):
        plan("resnet18", predictor="oracle", **kw)
    args = ["plan", "resnet18", "--epochs", "1", "--dataset-size", "10000", "-b", "32", "--gpus", "1",
            "--instances", "g4dn.xlarge"]
    assert run(args + ["--predictor", "oracle"]) == 2
    assert "unknown predictor 'oracle'" in capsys.readouterr().err
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert run(args + ["--predictor", "auto", "--plot", ""]) == 0
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "timed by the learned predictor: T4" in out and "plot:" not in out
    assert list(tmp_path.iterdir()) == []  # --plot "" draws nothing


def test_plan_with_a_host_only_profile_issues_every_gpu_from_that_host(capsys):
    """plan --profile HOST: each configuration's step equals `predict --gpu ... --profile HOST`'s (the default
    predictor per GPU, issued by the measured host), slower than without it on a host-bound model; a profile fitted
    to its own device is refused with exit 2."""
    from pathlib import Path

    from traincast.predict.options import forecast_from_options

    data = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "gpu_campaign"
    host = str(data / "h200_host_profile_2026-11-27.yaml")
    kw = dict(epochs=1, dataset_size=10_000, batch_size=8, gpus=(1,), instances=("a2-highgpu-1g", "p3.2xlarge"))
    res, plain = plan("mobilenet_v2", host_profile=host, **kw), plan("mobilenet_v2", **kw)
    for c in res.configs:
        f = forecast_from_options("mobilenet_v2", instance=c.instance, batch_size=8, epochs=1, dataset_size=10_000,
                                  profile=host)
        assert c.iteration_s == pytest.approx(f.iteration_s, rel=1e-6)
        assert c.iteration_s > 1.2 * next(p for p in plain.configs if p.instance == c.instance).iteration_s
    assert {c.predictor for c in res.configs} == {c.predictor for c in plain.configs}
    args = ["plan", "mobilenet_v2", "--epochs", "1", "--dataset-size", "10000", "-b", "8", "--gpus", "1",
            "--instances", "a2-highgpu-1g", "--plot", ""]
    assert run(args + ["--profile", str(data / "h100_calibrated_profile_2026-11-27.yaml")]) == 2
    assert "only a `calibrate --host-only` profile goes with another GPU" in capsys.readouterr().err
    assert run(args + ["--profile", host]) == 0
    assert "profile 'host-lease' (38.71 / 36.98 us" in capsys.readouterr().out
