import numpy as np
import pytest

from traincast.errors import ConfigError, DataError
from traincast.online import (
    ESTIMATORS,
    Event,
    JobSeries,
    StepRecord,
    analyze,
    backtest,
    estimate_remaining,
    eta_history,
    remaining_on_other_hardware,
    summarize_backtest,
)
from traincast.online.estimate import stationarity
from traincast.online.synthetic import SyntheticJob


def _truth(series, step):
    t = series.timed()
    k = int(np.searchsorted(t.steps, step))
    return float(t.time_s[-1] - t.time_s[k])


def test_constant_rate_with_noise_and_warmup():
    j = SyntheticJob(total_steps=2000, step_s=0.1, cov=0.1, warmup_steps=50, warmup_factor=5, steps_per_epoch=None).generate(3)
    cut = j.upto(500)
    for name in ESTIMATORS:
        est = estimate_remaining(cut, estimator=name)
        assert est.remaining_steps == 1500
        if name != "naive":  # naive keeps the warm-up and over-estimates
            assert est.remaining_s == pytest.approx(_truth(j, 500), rel=0.03), name
    naive = estimate_remaining(cut, estimator="naive").remaining_s
    assert naive > _truth(j, 500) * 1.03
    an = analyze(cut)
    assert 10 <= an.warmup_steps <= 125
    assert an.step_time_s == pytest.approx(0.1, rel=0.03)
    assert an.cov == pytest.approx(0.1, abs=0.03)


def test_epoch_and_eval_pauses_are_accounted():
    job = SyntheticJob(total_steps=3000, step_s=0.2, steps_per_epoch=500, epoch_pause_s=10, eval_every=1000, eval_pause_s=20, log_every=10)
    j = job.generate(1)
    an = analyze(j)
    kinds = sorted(p.kind for p in an.pauses)
    assert kinds == ["epoch", "epoch", "epoch", "epoch+eval", "epoch+eval"]
    est = estimate_remaining(j.upto(1500), estimator="mean")
    # 1500 steps at 0.2 s + epoch pauses after 1500, 2000, 2500 + an eval after 2000
    assert est.future_pause_s == pytest.approx(3 * 10 + 20, rel=0.15)
    assert est.remaining_s == pytest.approx(_truth(j, 1500), rel=0.02)
    assert est.low_s <= _truth(j, 1500) <= est.high_s


def test_untagged_regular_pauses_are_projected_by_period():
    j = SyntheticJob(total_steps=3000, steps_per_epoch=500, epoch_pause_s=10, emit_events=False, log_every=5).generate(2)
    est = estimate_remaining(j.upto(1250), estimator="mean")
    assert est.future_pause_s == pytest.approx(30, rel=0.2)  # after 1500, 2000, 2500
    assert est.remaining_s == pytest.approx(_truth(j, 1250), rel=0.03)


def test_recent_estimators_follow_a_change_of_pace():
    j = SyntheticJob(total_steps=2000, step_s=0.1, cov=0.05, steps_per_epoch=None, shift_at=0.3, shift_factor=1.5).generate(5)
    cut = j.upto(1000)
    truth = _truth(j, 1000)
    err = {e: abs(estimate_remaining(cut, estimator=e).remaining_s - truth) / truth for e in ("mean", "window", "ewma")}
    assert err["window"] < 0.03 and err["ewma"] < 0.05
    assert err["mean"] > 0.1


def test_stationarity_tests():
    rng = np.random.default_rng(0)
    st = stationarity(0.1 + 0.01 * rng.normal(size=300))
    assert st is not None and st.stationary
    walk = stationarity(0.1 + 0.01 * np.cumsum(rng.normal(size=300)))
    assert walk is not None and not walk.stationary
    assert stationarity(np.ones(50)) is None


def test_resume_gap_is_not_a_pause():
    recs = [StepRecord(i, i * 1.0) for i in range(100)] + [StepRecord(i, 5000 + i * 1.0) for i in range(100, 200)]
    from traincast.online import Event

    j = JobSeries.from_records(recs, [Event("resume", 99, 5000.0)], total_steps=400)
    est = estimate_remaining(j, estimator="mean")
    assert est.remaining_s == pytest.approx(201.0, rel=0.01)
    assert est.future_pause_s == 0


def test_errors():
    j = SyntheticJob(total_steps=100, steps_per_epoch=None).generate(0)
    with pytest.raises(ConfigError, match="total number of steps"):
        estimate_remaining(JobSeries(j.steps, j.time_s, j.loss, j.metric))
    with pytest.raises(ConfigError, match="unknown estimator"):
        estimate_remaining(j, estimator="magic")
    with pytest.raises(DataError, match="at least 3"):
        estimate_remaining(j.upto(1))
    untimed = JobSeries.from_records([StepRecord(i, None, 1.0) for i in range(10)], total_steps=20)
    with pytest.raises(DataError, match="without a clock"):
        estimate_remaining(untimed)


def test_finished_job_has_zero_remaining():
    j = SyntheticJob(total_steps=100, steps_per_epoch=None).generate(0)
    est = estimate_remaining(j)
    assert est.remaining_s == 0 and est.remaining_steps == 0 and est.progress == 1.0


def test_backtest_and_history():
    jobs = [SyntheticJob(total_steps=1000, steps_per_epoch=250, epoch_pause_s=5, log_every=5).generate(s, f"j{s}") for s in range(3)]
    rows = backtest(jobs, estimators=("mean", "naive"))
    assert len(rows) == 3 * 3 * 2
    summ = summarize_backtest(rows)
    assert set(summ) == {"mean", "naive"} and set(summ["mean"]) == {0.1, 0.25, 0.5}
    assert summ["mean"][0.5]["median_pct"] < 5
    hist = eta_history(jobs[0], points=10)
    assert 5 <= len(hist) <= 10 and hist[-1].remaining_s == 0


def test_move_to_other_hardware():
    j = SyntheticJob(total_steps=2000, step_s=0.5, steps_per_epoch=None).generate(0)
    est = estimate_remaining(j.upto(1000))
    mv = remaining_on_other_hardware(est, 0.25, price_usd_per_hour=36.0, restart_overhead_s=60, target="4xA100")
    assert mv.remaining_s == pytest.approx(est.remaining_s * 0.25 + 60)
    assert mv.cost_usd == pytest.approx(mv.remaining_s / 3600 * 36.0)
    assert mv.low_s <= mv.remaining_s <= mv.high_s
    with pytest.raises(ConfigError, match="speed ratio"):
        remaining_on_other_hardware(est, 0)
    with pytest.raises(ConfigError, match="price"):
        remaining_on_other_hardware(est, 1.0, -1)


# ------------------------------------------------------------ robustness (issue 20)
def _steps(n0, n1, t0, dt, loss=1.0):
    return [StepRecord(i, t0 + (i - n0) * dt, loss) for i in range(n0, n1)]


def test_resume_with_replayed_steps_and_a_clock_that_starts_again():
    # steps 0..599 at 1 s/step; the process dies; a new one resumes from the checkpoint at 500, its clock at 0
    recs = _steps(0, 600, 0.0, 1.0) + _steps(500, 800, 0.0, 1.0)
    j = JobSeries.from_records(recs, total_steps=1000)
    assert [e.kind for e in j.events] == ["resume"] and j.events[0].step == 499
    assert np.all(np.diff(j.steps) > 0) and np.all(np.diff(j.time_s) >= 0)  # one step each, times going on
    for name in ("robust", "mean", "naive_trim"):
        est = estimate_remaining(j, estimator=name)
        assert est.remaining_s == pytest.approx(200.0, rel=0.02), name
        assert 0 <= est.low_s <= est.remaining_s <= est.high_s < float("inf")


def test_warm_up_after_a_resume_is_trimmed():
    # a new process compiles again: its first 20 steps take 5 s each
    recs = _steps(0, 400, 0.0, 1.0) + [StepRecord(400 + i, 10.0 + 5.0 * i) for i in range(1, 21)]
    recs += _steps(421, 700, 10.0 + 100.0, 1.0)
    j = JobSeries.from_records(recs, [Event("resume", 400, 400.0)], total_steps=1000)
    est = estimate_remaining(j, estimator="robust")
    assert est.step_time_s == pytest.approx(1.0, rel=0.02)
    assert est.remaining_s == pytest.approx(300.0, rel=0.05)


def test_a_lasting_change_of_pace_is_followed_and_widens_the_band():
    steady = SyntheticJob(total_steps=3000, step_s=0.2, cov=0.05, steps_per_epoch=None).generate(4)
    changed = SyntheticJob(total_steps=3000, step_s=0.2, cov=0.05, steps_per_epoch=None, shift_at=0.5, shift_factor=2.0).generate(4)
    e_steady = estimate_remaining(steady.upto(2000), estimator="robust")
    e_changed = estimate_remaining(changed.upto(2000), estimator="robust")
    assert e_changed.step_time_s == pytest.approx(0.4, rel=0.05)  # the new pace (a doubled batch), not the average
    assert e_changed.remaining_s == pytest.approx(_truth(changed, 2000), rel=0.05)
    rel_band = lambda e: (e.high_s - e.low_s) / e.remaining_s  # noqa: E731
    assert rel_band(e_changed) > 3 * rel_band(e_steady)


def test_never_negative_or_infinite():
    odd = [StepRecord(0, 0.0), StepRecord(1, 0.0), StepRecord(2, 5.0), StepRecord(3, 5.0), StepRecord(10, 6.0), StepRecord(11, 6.5)]
    j = JobSeries.from_records(odd, total_steps=50)
    for name in ESTIMATORS:
        est = estimate_remaining(j, estimator=name)
        for v in (est.remaining_s, est.low_s, est.high_s):
            assert 0 <= v < float("inf"), (name, est)


def test_robust_estimator_counts_pauses_in_its_pace():
    job = SyntheticJob(total_steps=3000, step_s=0.2, steps_per_epoch=500, epoch_pause_s=10, eval_every=1000, eval_pause_s=20, log_every=10)
    j = job.generate(1)
    est = estimate_remaining(j.upto(1500), estimator="robust")
    assert est.future_pause_s == 0  # the pauses seen are in the pace: (1500 s of steps + 60 s of pauses) / 1500 steps
    assert est.step_time_s == pytest.approx(0.2 + 3 * 10 / 1500 + 20 / 1500, rel=0.05)
    assert est.remaining_s == pytest.approx(_truth(j, 1500), rel=0.05)
