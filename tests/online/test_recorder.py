from types import SimpleNamespace

import pytest

from traincast.errors import ConfigError, UnknownNameError
from traincast.online import get_job, list_jobs, load_series, track
from traincast.store import Store


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _run(store, clock, n=300, job="j", **kw):
    with track(job=job, total_steps=n, store=store, clock=clock, steps_per_epoch=100, **kw) as t:
        for i in range(1, n + 1):
            clock.t += 0.5
            t.step(loss=1.0 / i, metric=i / n)
            if i % 100 == 0 and i < n:
                t.eval_start()
                clock.t += 7.0
                t.eval_end(metric=0.9)
                t.epoch_end()
            if i == 150:
                est = t.eta()
                assert est.remaining_steps == 150
                # 150 steps at 0.5 s + one more eval pause (after 200) of 7 s
                assert est.remaining_s == pytest.approx(150 * 0.5 + 7.0, rel=0.02)
    return t


def test_track_records_steps_events_and_metadata(tmp_path):
    store = Store(tmp_path / "t.db")
    _run(store, Clock(), model="resnet18", hardware="1xT4", batch_size=64)
    s = load_series(store, "j")
    assert list(s.steps) == list(range(0, 301))
    assert s.loss[10] == pytest.approx(0.1)
    assert sorted({e.kind for e in s.events}) == ["epoch_end", "eval_end", "eval_start"]
    info = get_job(store, "j")
    assert (info.model, info.hardware, info.batch_size, info.total_steps) == ("resnet18", "1xT4", 64, 300)
    (row,) = list_jobs(store)
    assert row[1] == 301 and row[2] == 300


def test_the_learning_rate_a_loop_records_reaches_converge(tmp_path):
    """Tracker.step(lr=...) stores each step's learning rate; the job's series carries it and converge reads the
    schedule from it (a cosine decay here), with no --lr-schedule."""
    import math

    from traincast.online.converge import resolve_schedule

    store = Store(tmp_path / "t.db")
    clock = Clock()
    total = 400
    with track("lr-job", total_steps=total, store=store, clock=clock) as t:
        for k in range(1, 201):
            clock.t += 0.5
            lr = 0.1 * 0.5 * (1 + math.cos(math.pi * k / total))
            t.step(loss=1.0 / k, lr=lr)
    s = load_series(store, "lr-job")
    assert s.lr is not None and s.lr[100] == pytest.approx(0.1 * 0.5 * (1 + math.cos(math.pi * 100 / total)))
    sched, source, _ = resolve_schedule(s)
    assert sched is not None and "log" in source
    assert sched.lr(300) < sched.lr(200) < sched.lr(100)  # the decay ahead is foreseen


def test_resume_appends_and_marks_a_resume(tmp_path):
    store = Store(tmp_path / "t.db")
    clock = Clock()
    with track("r", 100, store=store, clock=clock) as t:
        for _ in range(40):
            clock.t += 1
            t.step()
    clock.t += 3600  # down for an hour
    with track("r", 100, store=store, clock=clock) as t:
        assert t.current_step == 40
        for _ in range(40):
            clock.t += 1
            t.step()
        est = t.eta(estimator="mean")
    assert est.remaining_s == pytest.approx(20.0, rel=0.01)
    assert [e.kind for e in load_series(store, "r").events] == ["resume"]


def test_tracker_input_errors(tmp_path):
    store = Store(tmp_path / "t.db")
    with pytest.raises(ConfigError, match="total_steps"):
        track("x", total_steps=-5, store=store)
    with pytest.raises(ConfigError, match="non-empty"):
        track("", store=store)
    with track("x", 10, store=store) as t:
        t.step()
        with pytest.raises(ConfigError, match="not after"):
            t.step(step=1)
        with pytest.raises(ConfigError, match="number"):
            t.step(loss="abc")
    with pytest.raises(ConfigError, match="closed"):
        t.step()
    with pytest.raises(UnknownNameError, match="did you mean"):
        get_job(store, "xx")


def test_record_every_and_tensor_loss(tmp_path):
    torch = pytest.importorskip("torch")
    store = Store(tmp_path / "t.db")
    with track("e", 100, store=store, record_every=10) as t:
        for _ in range(100):
            t.step(loss=torch.tensor(0.5))
    s = load_series(store, "e")
    assert list(s.steps) == list(range(0, 101, 10))
    assert s.loss[-1] == pytest.approx(0.5)


def test_hf_trainer_callback_with_real_transformers_objects(tmp_path):
    pytest.importorskip("transformers")
    from transformers import TrainerControl, TrainerState

    from traincast.online.adapters.huggingface import TraincastCallback

    store = Store(tmp_path / "t.db")
    cb = TraincastCallback(job="hf", store=store)
    args = SimpleNamespace(num_train_epochs=2, per_device_train_batch_size=8)
    state = TrainerState(max_steps=40, is_world_process_zero=True)
    control = TrainerControl()
    cb.on_train_begin(args, state, control)
    for step in range(1, 41):
        state.global_step = step
        cb.on_step_end(args, state, control)
        if step % 10 == 0:
            cb.on_log(args, state, control, logs={"loss": 1.0 / step, "learning_rate": 1e-4})
        if step == 20:
            cb.on_epoch_end(args, state, control)
            cb.on_evaluate(args, state, control, metrics={"eval_loss": 0.3, "eval_accuracy": 0.8})
    cb.on_train_end(args, state, control)
    s = load_series(store, "hf")
    info = get_job(store, "hf")
    assert info.total_steps == 40 and info.steps_per_epoch == 20 and info.batch_size == 8
    assert list(s.steps) == list(range(41))
    assert s.loss[20] == pytest.approx(0.05)
    ev = {e.kind: e for e in s.events}
    assert ev["eval_end"].value == pytest.approx(0.8) and ev["epoch_end"].step == 20


# the Lightning and Keras callbacks (and the Trainer one) run in real training loops in test_adapters.py


def test_server_options_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="not both"):
        track("x", store=Store(tmp_path / "t.db"), server="http://127.0.0.1:9")
    with pytest.raises(ConfigError, match="http"):
        track("x", server="127.0.0.1:9")
    with pytest.raises(ConfigError, match="flush_every_s"):
        track("x", server="http://127.0.0.1:9", flush_every_s=0)


def test_a_tracker_to_a_server_never_raises_into_the_loop_and_spools_everything(tmp_path):
    from traincast.online.recorder import Spool

    # port 9 (discard) on loopback: nothing listens, every post is refused
    with track("x", 100, server="http://127.0.0.1:9", spool=tmp_path / "s.db", flush_every_s=0.01,
               close_timeout_s=0.2, token="t" * 20) as t:
        for i in range(100):
            t.step(loss=float("nan") if i == 50 else 1.0)
        t.epoch_end()
        with pytest.raises(ConfigError, match="ask the server"):
            t.eta()
        assert not t.flush(0.3)
    sp = Spool(tmp_path / "s.db")
    batches, rows = sp.count("http://127.0.0.1:9")
    assert rows == 101 and sp.last_step("http://127.0.0.1:9", "x") == 100
    payloads = [p for _, _, p in sp.oldest("http://127.0.0.1:9", 1000)]
    assert payloads[0]["meta"]["total_steps"] == 100 and sum(len(p["events"]) for p in payloads) == 1
    assert [r["loss"] for p in payloads for r in p["rows"] if r["step"] == 51] == [None]  # NaN is not JSON


def test_importing_online_does_not_import_frameworks():
    import subprocess
    import sys

    code = "import sys, traincast.online; print(any(m in sys.modules for m in ('transformers', 'lightning', 'keras', 'tensorflow')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
