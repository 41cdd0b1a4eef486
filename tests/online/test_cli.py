import json
import math
from pathlib import Path

import numpy as np
import pytest
import typer

from traincast.cli.main import run
from traincast.cli.online import register
from traincast.online import track
from traincast.online.synthetic import SyntheticJob
from traincast.store import Store

DATA = Path(__file__).parent / "data"


@pytest.fixture
def app():
    a = typer.Typer()
    register(a)
    return a


@pytest.fixture
def db(tmp_path, monkeypatch):
    p = tmp_path / "t.db"
    monkeypatch.setenv("TRAINCAST_DB", str(p))
    return p


def _csv_log(path, n=600, total=None):
    j = SyntheticJob(total_steps=total or n, step_s=0.1, steps_per_epoch=200, epoch_pause_s=3).generate(0)
    j = j.upto(n)
    lines = ["step,time_s,loss"] + [f"{s},{t:.4f},{l:.5f}" for s, t, l in zip(j.steps, j.time_s, j.loss)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_watch_once_json(app, tmp_path, capsys):
    log = _csv_log(tmp_path / "train.csv", n=300, total=1000)
    assert run(["watch", str(log), "--total-steps", "1000", "--once", "--json"], the_app=app) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["step"] == 300 and d["total_steps"] == 1000 and d["format"] == "csv"
    assert d["remaining_s"] == pytest.approx(700 * 0.1 + 3 * 3, rel=0.1)
    assert d["low_s"] <= d["remaining_s"] <= d["high_s"]


def test_watch_follow_stops_at_end_and_saves(app, tmp_path, db, capsys):
    log = _csv_log(tmp_path / "train.csv", n=500)
    assert run(["watch", str(log), "--total-steps", "500", "--interval", "0.01", "--json", "--save-as", "w1"], the_app=app) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[-1]["remaining_steps"] == 0
    assert run(["jobs", "--json"], the_app=app) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["name"] == "w1" and rows[0]["last_step"] == 500


def test_watch_needs_total_steps(app, tmp_path, capsys):
    log = _csv_log(tmp_path / "train.csv", n=100)
    assert run(["watch", str(log), "--once"], the_app=app) == 2
    assert "--total-steps" in capsys.readouterr().err


def test_eta_on_a_log_with_move_and_plot(app, tmp_path, capsys):
    log = _csv_log(tmp_path / "train.csv", n=400, total=1000)
    png = tmp_path / "eta.png"
    code = run(
        ["eta", str(log), "--total-steps", "1000", "--speed-ratio", "0.5", "--price-usd-per-hour", "36",
         "--target-name", "4xA100", "--plot", str(png), "--json"],
        the_app=app,
    )
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["move"]["remaining_s"] == pytest.approx(d["remaining_s"] * 0.5)
    assert d["move"]["cost_usd"] == pytest.approx(d["move"]["remaining_s"] / 3600 * 36)
    assert d["pauses"].get("other") == 1  # one epoch pause at step 200, no events in a bare CSV
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"


def test_eta_human_output(app, tmp_path, capsys):
    log = _csv_log(tmp_path / "train.csv", n=400, total=1000)
    assert run(["eta", str(log), "--total-steps", "1000", "--speed-ratio", "0.5", "--tests"], the_app=app) == 0
    out = capsys.readouterr().out
    assert "remaining" in out and "if moved to target now" in out and "stationary" in out


def test_eta_on_a_tracked_job(app, db, capsys):
    clock = iter(range(10**6))
    with track("live", 200, store=Store(db), clock=lambda: float(next(clock))) as t:
        for _ in range(50):
            t.step(loss=1.0)
    assert run(["eta", "live", "--json", "--estimator", "mean"], the_app=app) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["remaining_s"] == pytest.approx(150.0, rel=0.01)


def test_user_errors_exit_2(app, tmp_path, db, capsys):
    backwards = tmp_path / "back.csv"
    backwards.write_text("step,time_s,loss\n" + "".join(f"{i},{100 - i},1.0\n" for i in range(1, 50)))
    cases = [
        (["eta", "nojob"], "unknown job"),
        (["eta", str(tmp_path / "missing.log")], "does not exist"),
        (["eta", str(DATA / "keras2.log"), "--estimator", "magic"], "unknown estimator"),
        (["eta", str(DATA / "keras2.log"), "--format", "xml"], "unknown log format"),
        (["eta", str(DATA / "lightning_metrics.csv"), "--total-steps", "400"], "timed step records"),
        (["eta", str(DATA / "keras2.log"), "--speed-ratio", "-1"], "speed ratio"),
        (["eta", str(DATA / "keras2.log"), "--plot", str(tmp_path / "x.jpg")], ".png"),
        (["converge", str(DATA / "lightning_metrics.csv"), "--target-loss", "nan"], "finite"),
        (["watch", str(DATA / "keras2.log"), "--total-steps", "0", "--once"], "positive"),
        (["eta", str(backwards), "--total-steps", "100"], "times never pass its first"),
        (["eta", str(DATA / "keras2.log"), "--total-steps", "5"], "past the 5 total steps"),
        (["eta", str(DATA / "keras2.log"), "--speed-ratio", "2", "--price-usd-per-hour", "-3"], "a price of 0 or more"),
        (["eta", str(DATA / "keras2.log"), "--speed-ratio", "2", "--restart-overhead-s", "-100"], "0 or more seconds"),
        (["eta", ""], "name is empty"),
        (["converge", str(DATA / "lightning_metrics.csv"), "--target-loss", "0.5", "--lr-schedule", f"csv:{tmp_path}"],
         "is a folder"),
        (["converge", str(DATA / "lightning_metrics.csv"), "--target-loss", "0.5", "--lr-schedule", "csv:"],
         "give a file"),
    ]
    for argv, msg in cases:
        assert run(argv, the_app=app) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and msg in err, (argv, err)
        assert "Traceback" not in err


def test_converge_json_and_plot(app, tmp_path, capsys):
    log = _csv_log(tmp_path / "train.csv", n=1500, total=4000)
    png = tmp_path / "fit.png"
    target = 1 / (1e-3 * 3000 + 0.5) + 0.1
    assert run(["converge", str(log), "--target-loss", str(target), "--boot", "30", "--plot", str(png), "--json"], the_app=app) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["steps"] == pytest.approx(3000, rel=0.2)
    # the default estimator's time per step includes the epoch pauses: 0.1 s + 3 s / 200 steps
    assert d["time_to_target"]["time_s"] == pytest.approx((d["steps"] - 1500) * 0.115, rel=0.05)
    assert png.exists()
    assert run(["converge", str(log), "--target-loss", "0.01", "--boot", "10"], the_app=app) == 0
    assert "below the fitted floor" in capsys.readouterr().out


def test_converge_on_trainer_state(app, capsys):
    assert run(["converge", str(DATA / "trainer_state.json"), "--target-loss", "0.45", "--draws", "20", "--json"], the_app=app) == 2
    assert "at least" in capsys.readouterr().err  # 5 points only


def _trainer_state(path, epochs: int, max_steps: int = 3000, upto: int = 700, drop: float = 0.0):
    spe = max_steps / epochs
    hist = [{"epoch": k * epochs / max_steps, "learning_rate": 5e-5 * (1 - k / max_steps),
             "loss": (0.5 + 2.0 * (k / 10) ** -0.5) * math.exp(-drop * ((k - 1) // spe)), "step": k}
            for k in range(10, upto + 10, 10)]
    path.write_text(json.dumps({"global_step": upto, "log_history": hist, "max_steps": max_steps,
                                "num_train_epochs": epochs, "logging_steps": 10}))
    return path


def test_converge_warns_when_the_forecast_crosses_an_epoch_not_yet_seen(app, tmp_path, capsys):
    """A Trainer run of 3 epochs seen to step 700 starts its second pass at step 1,000: fine-tunes' losses drop
    there (set f of benchmarks/converge_validation.py), so the forecast says so; one epoch: no such warning."""
    three = _trainer_state(tmp_path / "three.json", epochs=3)
    assert run(["converge", str(three), "--target-loss", "0.7", "--draws", "20", "--json"], the_app=app) == 0
    d = json.loads(capsys.readouterr().out)
    assert any("starts epoch 2 of 3 at step 1,000" in w for w in d["warnings"])
    assert d["epochs"]["passes_done"] == 0 and d["epochs"]["drop_source"] == "prior (median)"
    seen = _trainer_state(tmp_path / "seen.json", epochs=3, upto=1500, drop=0.3)  # one drop of e^0.3 logged
    assert run(["converge", str(seen), "--target-loss", "0.45", "--draws", "20", "--json"], the_app=app) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["epochs"]["passes_done"] == 1 and d["epochs"]["drop_source"] == "measured"
    assert d["epochs"]["drop_per_pass"] == pytest.approx(math.exp(0.3), rel=0.1)
    assert not any("starts epoch" in w for w in d["warnings"])
    assert run(["converge", str(three), "--target-loss", "0.7", "--draws", "20", "--steps-per-epoch", "0", "--json"],
               the_app=app) == 0  # the user's word: this loss does not drop when the data repeat
    d = json.loads(capsys.readouterr().out)
    assert d["epochs"] is None and not any("epoch" in w for w in d["warnings"])
    assert run(["converge", str(three), "--target-loss", "0.7", "--steps-per-epoch", "-1"], the_app=app) == 2
    assert "--steps-per-epoch must be a number >= 0" in capsys.readouterr().err
    one = _trainer_state(tmp_path / "one.json", epochs=1)
    assert run(["converge", str(one), "--target-loss", "0.7", "--draws", "20", "--json"], the_app=app) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["steps"] > 700 and not any("epoch" in w for w in d["warnings"]) and d["epochs"] is None


def test_ingest_then_jobs_table(app, db, capsys):
    assert run(["ingest", str(DATA / "keras2.log"), "--job", "k2", "--model", "cnn"], the_app=app) == 0
    assert "stored 12 records" in capsys.readouterr().out
    assert run(["jobs"], the_app=app) == 0
    out = capsys.readouterr().out
    assert "k2" in out and "cnn" in out
    assert run(["eta", "k2", "--json"], the_app=app) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["total_steps"] == 300 and d["remaining_s"] > 0


def test_watch_follows_a_file_being_written(app, tmp_path, capsys):
    import threading
    import time as _time

    log = tmp_path / "live.csv"
    log.write_text("step,time_s,loss\n")

    def writer():
        for s in range(1, 201):
            with log.open("a") as f:
                row = f"{s},{s * 0.1:.3f},{1.0 / s:.4f}\n"
                if s % 50 == 0:  # a row written in two parts: the reader may see half of it
                    f.write(row[:3])
                    f.flush()
                    _time.sleep(0.01)
                    f.write(row[3:])
                else:
                    f.write(row)
            if s % 20 == 0:
                _time.sleep(0.15)

    th = threading.Thread(target=writer)
    th.start()
    code = run(["watch", str(log), "--total-steps", "200", "--interval", "0.02", "--timeout", "20", "--json"], the_app=app)
    th.join()
    assert code == 0
    reads = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(reads) >= 3
    assert reads[-1]["step"] == 200 and reads[-1]["remaining_steps"] == 0
    with_est = [r for r in reads if "remaining_s" in r and r["remaining_steps"] > 0]
    assert with_est and all(r["remaining_s"] == pytest.approx(r["remaining_steps"] * 0.1, rel=0.05) for r in with_est)


# ------------------------------------------------------------------- issue 20
def _lr_log(path, n=1200, total=4000, lr=lambda k: 1e-3):
    j = SyntheticJob(total_steps=total, step_s=0.1, steps_per_epoch=None).generate(0).upto(n)
    lines = ["step,time_s,loss,lr"] + [f"{s},{t:.4f},{l:.5f},{lr(s):.6g}" for s, t, l in zip(j.steps, j.time_s, j.loss)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_converge_bad_schedules_exit_2(app, tmp_path, capsys):
    log = _csv_log(tmp_path / "train.csv", n=1500, total=4000)
    cases = [
        (["--lr-schedule", "cosin:4000"], "unknown learning-rate schedule 'cosin'; did you mean 'cosine'"),
        (["--lr-schedule", "wsd:100:4000"], "expected wsd:WARMUP:TOTAL:DECAY_FRAC"),
        (["--lr-schedule", "step:100:2"], "GAMMA must be in"),
        (["--lr-schedule", str(tmp_path / "nope.csv")], "does not exist"),
        (["--form", "mpl"], "needs a learning-rate schedule"),
        (["--form", "cubic"], "unknown loss-curve form"),
    ]
    for extra, msg in cases:
        assert run(["converge", str(log), "--target-loss", "0.4", "--draws", "10", *extra], the_app=app) == 2, extra
        err = capsys.readouterr().err
        assert err.startswith("error: ") and msg in err and "Traceback" not in err, (extra, err)
        assert len(err.strip().splitlines()) == 1


def test_converge_warns_when_the_log_contradicts_the_schedule(app, tmp_path, capsys):
    log = _lr_log(tmp_path / "lr.csv")  # a constant learning rate logged ...
    code = run(["converge", str(log), "--target-loss", "0.36", "--draws", "20", "--lr-schedule", "cosine:4000", "--json"],
               the_app=app)  # ... and a cosine schedule claimed
    assert code == 0
    out = capsys.readouterr()
    assert "warning: the logged learning rate contradicts --lr-schedule 'cosine:4000'" in out.err
    d = json.loads(out.out)
    assert d["schedule_source"] == "given" and "logged before step" in d["schedule"]


def test_converge_uses_the_logged_learning_rate(app, tmp_path, capsys):
    log = _lr_log(tmp_path / "lr.csv", lr=lambda k: 1e-3 * 0.5 * (1 + np.cos(np.pi * k / 4000)))
    assert run(["converge", str(log), "--target-loss", "0.36", "--draws", "20", "--total-steps", "4000", "--json"], the_app=app) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schedule_source"] == "logged" and "cosine" in d["schedule"]


def test_converge_unreachable_is_one_line_with_the_floor(app, tmp_path, capsys):
    log = _csv_log(tmp_path / "train.csv", n=1500, total=4000)
    assert run(["converge", str(log), "--target-loss", "0.01", "--draws", "20", "--total-steps", "4000"], the_app=app) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("unreachable: target loss 0.01 is below the fitted floor")
    assert "by step 4,000" in out[0]
