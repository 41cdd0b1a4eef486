from pathlib import Path

import numpy as np
import pytest

from traincast.errors import DataError, UnknownNameError
from traincast.online.parsers import detect_format, parse_log, parse_text

DATA = Path(__file__).parent / "data"


def test_keras2_progress_log_with_carriage_returns_and_truncation():
    p = parse_log(DATA / "keras2.log")
    assert p.format == "keras"
    assert p.steps_per_epoch == 100 and p.total_steps == 300
    steps = [r.step for r in p.records]
    assert steps == [20, 40, 60, 80, 100, 120, 140, 160, 180, 185, 200, 250]
    # epoch 1 ends at 500 ms/step * 100 = 50 s, but the total printed (55 s, with validation) wins
    by = {r.step: r for r in p.records}
    assert by[100].time_s == pytest.approx(55.0)
    assert by[20].time_s == pytest.approx(40 / 80 * 20)  # ETA 40 s for 80 steps left -> 0.5 s/step
    assert by[200].time_s == pytest.approx(55.0 + 52.0)
    assert by[100].loss == pytest.approx(1.2) and by[100].metric == pytest.approx(0.45)  # val_accuracy preferred
    assert [e.step for e in p.events if e.kind == "epoch_end"] == [100, 200]
    assert p.lines_skipped == 1  # the broken ' 9x/100 [=====' bar
    times = [r.time_s for r in p.records]
    assert times == sorted(times)



def test_keras3_epoch_time_is_max_of_total_and_per_step():
    p = parse_log(DATA / "keras3.log")
    by = {r.step: r for r in p.records}
    assert by[200].time_s == pytest.approx(3.0)
    assert by[400].time_s == pytest.approx(3.0 + 200 * 0.011)


def test_hf_console_log():
    p = parse_log(DATA / "hf_console.log")
    assert p.format == "hf" and p.total_steps == 500
    by = {r.step: r for r in p.records}
    assert by[100].time_s == pytest.approx(25.0) and by[100].loss == pytest.approx(1.0)
    assert by[300].time_s == pytest.approx(90.0)
    # the eval bar (x/63) is not a training step
    assert all(r.step % 25 == 0 or r.step == 305 for r in p.records)
    assert [e.kind for e in p.events] == ["eval_end"] and p.events[0].value == pytest.approx(0.81)
    assert p.lines_skipped == 1  # the truncated dict


def test_hf_trainer_state_json():
    p = parse_log(DATA / "trainer_state.json")
    assert p.format == "hf" and p.total_steps == 500 and p.steps_per_epoch == 250
    assert [r.step for r in p.records] == [50, 100, 150, 250, 300]
    assert all(r.time_s is None for r in p.records)
    assert p.lines_skipped == 2
    assert p.events[0].step == 250


def test_hf_trainer_state_truncated_is_a_data_error(tmp_path):
    f = tmp_path / "trainer_state.json"
    f.write_text((DATA / "trainer_state.json").read_text()[:300])
    with pytest.raises(DataError, match="not valid JSON"):
        parse_log(f, "hf")


def test_lightning_metrics_csv_sparse_rows_merged():
    p = parse_log(DATA / "lightning_metrics.csv")
    assert p.format == "csv"
    by = {r.step: r for r in p.records}
    assert by[99].loss == pytest.approx(2.0 / (1 + 99 / 50), abs=1e-4)
    assert by[99].metric == pytest.approx(0.7)  # val_acc from the sparse row
    assert p.lines_skipped == 2
    assert [e.step for e in p.events] == [99]  # epoch 0 -> 1


def test_tensorboard_export():
    p = parse_log(DATA / "tensorboard_loss.csv")
    assert p.format == "tensorboard"
    assert len(p.records) == 10 and p.lines_skipped == 1
    assert p.records[1].time_s - p.records[0].time_s == pytest.approx(50.0)
    assert p.records[-1].loss == pytest.approx(0.25)


def test_generic_csv_iso_timestamps():
    p = parse_log(DATA / "generic.csv")
    assert len(p.records) == 50 and p.lines_skipped == 2
    assert p.records[1].time_s - p.records[0].time_s == pytest.approx(1.0)
    assert p.records[-1].metric == pytest.approx(1.0)


def test_jsonl_with_garbage():
    p = parse_log(DATA / "metrics.jsonl")
    assert p.format == "jsonl"
    assert len(p.records) == 40 and p.lines_skipped == 4
    assert p.records[-1].time_s == pytest.approx(103.9)


def test_detect_and_errors(tmp_path):
    assert detect_format("step,time_s,loss\n1,2,3\n") == "csv"
    assert detect_format('{"step": 1, "time_s": 2}\n') == "jsonl"
    assert detect_format("Epoch 1/5\n") == "keras"
    with pytest.raises(DataError, match="--format"):
        detect_format("hello world\n")
    with pytest.raises(UnknownNameError, match="unknown log format .xml.; known: csv, hf, jsonl, keras"):
        parse_text("x", "xml")
    with pytest.raises(DataError, match="does not exist"):
        parse_log(tmp_path / "nope.log")
    with pytest.raises(DataError, match="folder"):
        parse_log(tmp_path)
    with pytest.raises(DataError, match="no step column"):
        parse_text("a,b\n1,2\n", "csv")


def test_partial_file_being_written(tmp_path):
    full = (DATA / "metrics.jsonl").read_text().splitlines(keepends=True)[:20]
    text = "".join(full) + '{"step": 20, "time_s": 10'
    p = parse_text(text, "jsonl")
    assert len(p.records) == 20 and p.lines_skipped == 1


def test_binary_garbage_never_fatal():
    import random

    rng = random.Random(0)
    junk = "".join(chr(rng.randrange(1, 0x2FF)) for _ in range(5000))
    for fmt in ("keras", "hf", "csv", "jsonl"):
        text = "step,time_s,loss\n" + junk if fmt == "csv" else junk
        p = parse_text(text, fmt)
        assert len(p.records) == 0 or fmt == "csv"


# ------------------------------------------------------------------- issue 20
def test_learning_rate_columns():
    p = parse_text("# exported by a script\nstep,time_s,loss,lr\n1,0.1,2.0,0.001\n2,0.2,1.9,0.0009\n", "auto", "x.csv")
    assert p.format == "csv" and [r.learning_rate for r in p.records] == [0.001, 0.0009]
    s = p.to_series()
    assert s.lr is not None and list(s.lr) == [0.001, 0.0009]
    lightning = parse_text("step,epoch,train_loss,lr-AdamW\n1,0,2.0,0.01\n2,0,1.8,0.02\n", "csv")
    assert [r.learning_rate for r in lightning.records] == [0.01, 0.02]
    jl = parse_text('{"step": 5, "time": 1.0, "loss": 1.0, "learning_rate": 3e-4}\n', "jsonl")
    assert jl.records[0].learning_rate == pytest.approx(3e-4)
    hf = parse_text("{'loss': 2.1, 'learning_rate': 5e-05, 'epoch': 0.1}\n", "hf")  # no bar yet: no step to attach to
    assert hf.records == ()


def test_trainer_state_learning_rate():
    p = parse_log(DATA / "trainer_state.json")
    assert [r.learning_rate for r in p.records] == [4.5e-05, 4e-05, 3.5e-05, None, None]  # the last two log none


def test_resume_in_a_csv_log_keeps_log_order():
    rows = ["step,time_s,loss"] + [f"{s},{s * 1.0},{1.0}" for s in range(1, 61)]
    rows += [f"{s},{(s - 50) * 1.0 + 0.5},{1.0}" for s in range(51, 101)]  # resumed from step 50, clock from 0
    p = parse_text("\n".join(rows) + "\n", "csv")
    assert len(p.records) == 110  # nothing merged away: the replay is kept in log order
    s = p.to_series(200)
    assert list(s.steps) == list(range(1, 101))
    assert [e.kind for e in s.events] == ["resume"] and s.events[0].step == 50
    assert np.all(np.diff(s.time_s) >= 0)


def test_sparse_lightning_rows_still_merge():
    text = "step,time,train_loss,val_loss\n10,1.0,0.5,\n10,,,0.6\n20,2.0,0.4,\n"
    p = parse_text(text, "csv")
    assert [(r.step, r.loss, r.metric) for r in p.records] == [(10, 0.5, 0.6), (20, 0.4, None)]
