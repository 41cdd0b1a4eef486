import math

import numpy as np
import pytest

from traincast.errors import ConfigError, DataError, UnknownNameError
from traincast.online.schedule import (
    SCHEDULES,
    Schedule,
    check_against_log,
    parse_schedule,
)


def lr(spec, steps, total=None):
    return parse_schedule(spec, total).lr(np.asarray(steps, dtype=float))


def test_specs_by_hand():
    assert lr("constant", [1, 500]) == pytest.approx([1, 1])
    assert lr("step:100:0.5", [99, 100, 250]) == pytest.approx([1, 0.5, 0.25])
    assert lr("cosine:1000", [0, 500, 1000, 2000]) == pytest.approx([1, 0.5, 0, 0])
    assert lr("cosine:1000:0.1", [500, 1000]) == pytest.approx([0.55, 0.1])
    # linear warm-up over 100 steps ((k+1)/100), then cosine from step 100 to 1100
    assert lr("warmup-cosine:100:1100", [0, 49, 100, 600, 1100]) == pytest.approx([0.01, 0.5, 1, 0.5, 0])
    assert lr("linear:100:1100", [600, 1100]) == pytest.approx([0.5, 0])
    assert lr("inverse-sqrt:100", [99, 400, 10000]) == pytest.approx([1, 0.5, 0.1])
    # WSD: stable to 800, then linear / cosine / 1-sqrt to 0 at 1000
    assert lr("wsd:0:1000:0.2", [500, 800, 900, 1000]) == pytest.approx([1, 1, 0.5, 0])
    assert lr("wsd:0:1000:0.2:cosine", [900]) == pytest.approx([0.5])
    assert lr("wsd:0:1000:0.2:1-sqrt", [850]) == pytest.approx([0.5])
    assert lr("wsd:0:1000:0.2:linear:0.1", [900, 1000]) == pytest.approx([0.55, 0.1])


def test_total_from_the_job():
    assert lr("cosine:", [500], total=1000) == pytest.approx([0.5])
    assert lr("wsd:10::0.5", [750], total=1000) == pytest.approx([0.5])
    with pytest.raises(ConfigError, match="TOTAL is empty"):
        parse_schedule("cosine:")


@pytest.mark.parametrize(
    "spec, err, msg",
    [
        ("cosin:100", UnknownNameError, "did you mean 'cosine'"),
        ("step:10", ConfigError, "expected step:EVERY:GAMMA"),
        ("step:0:0.5", ConfigError, "EVERY must be >= 1"),
        ("step:100:1.5", ConfigError, "GAMMA must be in"),
        ("step:100:x", ConfigError, "GAMMA must be a number"),
        ("cosine:-5", ConfigError, "whole number of steps"),
        ("cosine:10.5", ConfigError, "whole number"),
        ("warmup-cosine:2000:1000", ConfigError, "WARMUP (2000) must be shorter"),
        ("wsd:10:1000:1.5", ConfigError, "DECAY_FRAC must be in"),
        ("wsd:10:1000:0.2:sqrt", UnknownNameError, "did you mean '1-sqrt'"),
        ("wsd:900:1000:0.2", ConfigError, "runs into the cooldown"),
        ("", ConfigError, "empty learning-rate schedule"),
        ("nope.csv", DataError, "does not exist"),
    ],
)
def test_bad_specs(spec, err, msg):
    with pytest.raises(err) as e:
        parse_schedule(spec)
    assert msg in str(e.value)


def test_csv_schedule(tmp_path):
    f = tmp_path / "lr.csv"
    f.write_text("step,lr\n0,0.0\n100,0.001\n200,0.0005\n")
    s = parse_schedule(str(f))
    assert s.lr([50, 100, 150, 500]) == pytest.approx([0.5, 1, 0.75, 0.5])  # normalised to the peak, last held
    assert parse_schedule(f"csv:{f}").total_steps == 200
    bad = tmp_path / "bad.csv"
    bad.write_text("step,learning_rate\n0,0.1\n10,abc\n")
    with pytest.raises(DataError, match="line 3"):
        parse_schedule(str(bad))
    nocol = tmp_path / "nocol.csv"
    nocol.write_text("iteration,value\n1,2\n")
    with pytest.raises(DataError, match="needs 'step' and 'lr'"):
        parse_schedule(str(nocol))


def test_registry_has_the_families_of_the_issue():
    assert {"constant", "step", "cosine", "warmup-cosine", "linear", "inverse-sqrt", "wsd", "csv"} <= set(SCHEDULES)


@pytest.mark.parametrize("spec", ["warmup-cosine:100:2000:0.1", "linear:100:2000", "step:600:0.3", "inverse-sqrt:100"])
def test_logged_schedule_is_recognised_and_extrapolated(spec):
    true = parse_schedule(spec, 2000)
    k = np.arange(1, 901)
    logged = Schedule.from_logged(k, 3e-4 * true.lr(k), 2000)
    assert logged.future_known
    future = np.arange(901, 2001)
    assert np.max(np.abs(logged.lr(future) - true.lr(future))) < 0.03


def test_flat_logged_schedule_is_held_with_a_note():
    k = np.arange(1, 501)
    s = Schedule.from_logged(k, np.full(500, 1e-3), 2000)
    assert not s.future_known and "--lr-schedule" in s.note
    assert s.lr([1500]) == pytest.approx([1.0])


def test_check_against_log():
    sched = parse_schedule("cosine:1000")
    k = np.arange(1, 600)
    assert check_against_log(sched, k, 0.01 * sched.lr(k)) is None  # the same shape at another scale
    w = check_against_log(sched, k, np.full(len(k), 0.01))
    assert w is not None and "contradicts" in w and "cosine:1000" in w


def test_values_stay_finite_and_non_negative():
    for spec in ("cosine:100", "wsd:0:100:0.5:1-sqrt", "inverse-sqrt:1", "step:1:0.5"):
        v = lr(spec, np.arange(0, 10_000))
        assert np.all(np.isfinite(v)) and np.all(v >= 0) and math.isclose(float(np.max(v)), 1.0, rel_tol=1e-9)
