import math

import numpy as np
import pytest

from traincast.errors import ConfigError, DataError
from traincast.online.curves import (
    FORMS,
    Grid,
    forecast_convergence,
    forecast_many,
    form_names,
)
from traincast.online.schedule import parse_schedule

T = 4000


def tissue_curve(spec, c_frac=0.1, noise=0.01, seed=0, l0=2.0, a=2.0, alpha=0.5, tau_frac=0.02):
    """L = L0 + A*S1^-alpha - C*(peak - EMA(lr)) (Tissue et al.'s law), written out independently of curves.py."""
    rng = np.random.default_rng(seed)
    k = np.arange(1, T + 1)
    lr = parse_schedule(spec, T).lr(k)
    lr = lr / lr.max()
    s1 = np.cumsum(lr)
    ema = np.empty(T)
    e = 1.0
    for i in range(T):
        e += (lr[i] - e) / (tau_frac * T)
        ema[i] = min(e, 1.0)
    d = 1.0 - ema
    base = l0 + a * (s1 / 100.0) ** (-alpha)
    c = c_frac * float(base[T // 2])
    clean = base - c * d
    return k, clean * np.exp(noise * rng.normal(size=T)), clean


def true_step(k, clean, target):
    return float(k[np.argmax(clean <= target)])


def test_grid_quantities():
    g = Grid.build(1000, parse_schedule("wsd:0:1000:0.2", 1000))
    assert g.s1[99] == pytest.approx(100.0)  # constant lr = 1 for the first 800 steps
    assert np.all(g.d[:800] == 0) and g.d[-1] > 0.5  # no annealing before the cooldown, most of it at the end
    assert g.s1[-1] == pytest.approx(800 + 100, rel=0.01)  # the linear cooldown adds half its length
    flat = Grid.build(500, None)
    assert not flat.schedule and np.all(flat.d == 0) and len(flat.drops) == 0


def test_wsd_cooldown_is_foreseen_before_it_starts():
    """From 50% of a WSD run (cooldown over the last 20%), a target that only the cooldown reaches.

    The cooldown gains 5% of the loss here, the prior's median: the test is of the mechanism, not of the prior.
    """
    spec = "wsd:100:4000:0.2"
    k, y, clean = tissue_curve(spec, c_frac=0.05)
    target = float(clean[int(0.9 * T)])
    truth = true_step(k, clean, target)
    cut = T // 2
    fc = forecast_convergence(k[:cut], y[:cut], target, parse_schedule(spec, T), T, n_draws=30)
    assert fc.status == "ok"
    assert abs(fc.steps - truth) / truth < 0.12
    assert fc.low <= truth <= fc.high
    blind = forecast_convergence(k[:cut], y[:cut], target, None, T, n_draws=30)
    # no schedule: the drop is not seen (the target not reached, or reached by few of the sampled curves, or far off)
    assert (not math.isfinite(blind.steps) or blind.reach_probability < 0.5
            or abs(blind.steps - truth) / truth > 0.15)
    assert fc.reach_probability > 0.5


def test_annealing_amplitude_is_learnt_when_the_decay_is_seen():
    """Cosine decay from the start: by 60% the data, not the prior, set the amplitude (3x the prior's median)."""
    spec = "cosine:4000:0.05"
    k, y, clean = tissue_curve(spec, c_frac=0.3, seed=1)
    target = float(clean[int(0.9 * T)])
    truth = true_step(k, clean, target)
    fc = forecast_convergence(k[: int(0.6 * T)], y[: int(0.6 * T)], target, parse_schedule(spec, T), T, n_draws=30)
    assert abs(fc.steps - truth) / truth < 0.1
    assert sum(fc.weights.values()) == pytest.approx(1.0, abs=1e-3)


def test_statuses():
    spec = "constant"
    k, y, clean = tissue_curve(spec, c_frac=0.0, seed=2)
    sched = parse_schedule(spec, T)
    cut = T // 4
    many = forecast_many(k[:cut], y[:cut], [float(clean[0]), 0.5, float(clean[int(0.6 * T)])], sched, T, n_draws=30)
    reached, unreachable, ok = many
    assert reached.status == "reached" and reached.steps <= cut
    assert unreachable.status == "unreachable" and not math.isfinite(unreachable.steps)
    assert unreachable.floor_loss > 0.5 and unreachable.reach_probability < 0.1
    assert ok.status == "ok" and math.isfinite(ok.steps)
    noise = np.random.default_rng(3).normal(size=400)
    flat = forecast_convergence(np.arange(1, 401), 1.0 + 0.05 * noise, 0.9, None, 4000, n_draws=20)
    assert flat.status == "not enough signal"


def test_now_is_the_last_logged_step_not_the_last_bins_median():
    """The fit bins the curve (MAX_BINS medians); the step the user is told "now at" and the steps still to go
    count from the last step logged: 1,000 logged steps in 60 bins would otherwise say "now at step 992"."""
    spec = "constant"
    k, y, clean = tissue_curve(spec, c_frac=0.0, seed=4)
    sched = parse_schedule(spec, T)
    reached, ok = forecast_many(k[:1000], y[:1000], [float(clean[0]), float(clean[2000])], sched, T, n_draws=20)
    assert reached.current_step == 1000 and ok.current_step == 1000
    assert ok.status == "ok" and ok.steps > 1000


def test_epoch_drops_are_measured_and_foreseen(monkeypatch):
    """A run of 3 passes whose loss falls by exp(0.3) at each boundary (every 1,000 steps), seen to step 1,500:
    the drop at step 1,000 is measured (within 0.1 of 0.3) and the forecast of a level only the third pass
    reaches lands just after step 2,000; without the epochs (EPOCH_DROPS = 0) the smooth forms, bent by the
    drop they saw, put it hundreds of steps later. Before any boundary is seen the drop is a prior's."""
    from traincast.online import curves

    rng = np.random.default_rng(1)
    k = np.arange(10, 3001, 10).astype(float)
    passes = np.floor((k - 1) / 1000)
    y = (0.8 + 2.0 * (k / 10) ** -0.5) * np.exp(-0.3 * passes) * np.exp(0.01 * rng.normal(size=len(k)))
    seen = k <= 1500
    ep = curves.EpochDrops.measure(k[seen], y[seen], 1000)
    assert ep.now == 1 and abs(ep.g_seen - 0.3) < 0.1
    assert curves.EpochDrops.measure(k[k <= 900], y[k <= 900], 1000).g_seen is None
    target = 1.05 * float(np.median(y[(k > 2100) & (k <= 2300)]))  # a level only the third pass reaches
    true = float(k[np.argmax(y <= target)])
    assert 2000 < true < 2050
    sched = parse_schedule("constant", 3000)
    fc = forecast_convergence(k[seen], y[seen], target, sched, 3000, n_draws=40, steps_per_epoch=1000)
    assert fc.status == "ok" and abs(fc.steps - true) < 0.03 * true
    monkeypatch.setattr(curves, "EPOCH_DROPS", 0)
    flat = forecast_convergence(k[seen], y[seen], target, sched, 3000, n_draws=40, steps_per_epoch=1000)
    assert not math.isfinite(flat.steps) or flat.steps > 1.08 * true


def test_bad_input():
    k, y, _ = tissue_curve("constant")
    with pytest.raises(ConfigError, match="finite"):
        forecast_convergence(k[:100], y[:100], float("nan"))
    with pytest.raises(DataError, match="at least 8"):
        forecast_convergence(k[:5], y[:5], 1.0)
    with pytest.raises(ConfigError, match="level"):
        forecast_convergence(k[:100], y[:100], 1.0, level=1.5)


def test_form_registry():
    assert {"power", "optimus", "exp", "mpl"} == set(FORMS)
    assert "mpl" not in form_names(schedule=False) and "mpl" in form_names(schedule=True)
    assert all(f.help for f in FORMS.values())


def _fit_power(k, y, spec, cut, exp_sd, monkeypatch):
    import traincast.online.curves as C

    monkeypatch.setattr(C, "EXP_PRIOR_SIGMA", exp_sd)
    grid = C.Grid.build(T, parse_schedule(spec, T), T)
    keep = (k <= cut) & (k >= 0.2 * cut)
    kb, yb = C.bin_curve(k[keep], y[keep])
    ctx = C.Ctx.make(grid, kb, kb[-1])
    fit = C.fit_form("power", ctx, yb, float(np.median(yb[-5:])), C.noise_log(yb))
    return fit.params


def test_exponent_prior_steadies_the_exponent_of_a_noisy_quarter(monkeypatch):
    """From a noisy quarter of a run the exponent of L0 + A*S1^-alpha is barely identified; the prior narrows its spread."""
    spec = "warmup-cosine:100:4000:0.1"
    spread = {}
    for sd in (0.0, 0.7):
        alphas = []
        for seed in range(6):
            k, y, _ = tissue_curve(spec, c_frac=0.04, noise=0.03, seed=seed, alpha=0.4)
            alphas.append(_fit_power(k, y, spec, T // 4, sd, monkeypatch)[2])
        spread[sd] = float(np.std(np.log(alphas)))
    assert spread[0.7] < spread[0.0]


def test_exponent_prior_gives_way_to_the_data(monkeypatch):
    """A clean full curve from the law with alpha = 0.9 (the prior's median is 0.4): the data set the exponent."""
    spec = "warmup-cosine:100:4000:0.1"
    k, y, _ = tissue_curve(spec, c_frac=0.04, noise=0.002, seed=4, alpha=0.9)
    a_fit = _fit_power(k, y, spec, T, 0.7, monkeypatch)[2]
    assert 0.7 < a_fit < 1.2


def test_a_target_few_curves_reach_gets_their_median_step_and_its_reach_probability(monkeypatch):
    """3 of 10 sampled curves reach the target (at steps 300, 500, 700): the answer is 500 "if reached", p = 0.3;
    with COND_MEDIAN off it is "not reached" (the median of all draws is infinite). With 3 of 20 the band's
    low end of all draws (700) lies above that median: the band is widened down to it."""
    import traincast.online.curves as C
    from traincast.cli.online import converge_line

    steps = np.linspace(100.0, 1000.0, 10)
    curves = np.full((10, 10), 2.0)
    for row, hit in zip(range(3), (2, 4, 6)):  # steps[2] = 300, steps[4] = 500, steps[6] = 700
        curves[row, hit:] = 0.9
    draws = C.CurveDraws(steps, curves, ("power",) * 10, {"power": 1.0}, {}, 100, 0.01, trend=10.0, fall=0.5,
                         last_loss=2.0)
    fc = C.forecast_from_draws(draws, 1.0)
    assert fc.steps == 500.0 and fc.reach_probability == pytest.approx(0.3)
    assert fc.low == 500.0 and not math.isfinite(fc.high)  # q10 of the ten first steps (3 finite), q90 inf
    assert any("30%" in n for n in fc.notes)
    assert "if it is reached at all" in converge_line(fc) and "30% reach it" in converge_line(fc)
    monkeypatch.setattr(C, "COND_MEDIAN", 0)
    assert not math.isfinite(C.forecast_from_draws(draws, 1.0).steps)
    monkeypatch.setattr(C, "COND_MEDIAN", 1)
    twenty = C.CurveDraws(steps, np.vstack([curves, np.full((10, 10), 2.0)]), ("power",) * 20, {"power": 1.0}, {},
                          100, 0.01, trend=10.0, fall=0.5, last_loss=2.0)
    fc20 = C.forecast_from_draws(twenty, 1.0)
    assert fc20.steps == 500.0 and fc20.low == 500.0 and fc20.reach_probability == pytest.approx(0.15)


def test_crossings_are_read_with_the_watched_curves_fluctuation():
    """CROSS_NOISE: a sampled curve flat at 1.02 never reaches 1.0, but with its watched fluctuation (log-jitter of
    -0.03 from step 500 on) it does, there; the floor stays that of the noise-free curves."""
    import traincast.online.curves as C

    steps = np.linspace(100.0, 1000.0, 10)
    curves = np.full((10, 10), 1.02)
    jitter = np.zeros((10, 10))
    jitter[:, 4:] = -0.03  # steps[4] = 500
    kw = dict(trend=10.0, fall=0.5, last_loss=1.1)
    quiet = C.CurveDraws(steps, curves, ("power",) * 10, {"power": 1.0}, {}, 100, 0.01, **kw)
    noisy = C.CurveDraws(steps, curves, ("power",) * 10, {"power": 1.0}, {}, 100, 0.01, **kw, jitter=jitter)
    assert C.forecast_from_draws(quiet, 1.0).status == "unreachable"
    fc = C.forecast_from_draws(noisy, 1.0)
    assert fc.steps == 500.0 and fc.reach_probability == 1.0
    assert fc.floor_loss == pytest.approx(1.02)


def test_cross_noise_jitter_is_the_fits_residuals_by_stretches_of_a_bin(monkeypatch):
    """With CROSS_NOISE on, the sampled curves are the same as without (the jitter has its own random stream); the
    jitter is piecewise constant over stretches one bin long, of the size of the binned curve's residuals (2% noise,
    medians of 26 points a bin), and on a noisy plateau it brings the step forward."""
    import traincast.online.curves as C

    rng = np.random.default_rng(3)
    k = np.arange(1, 4001, dtype=float)
    y = (2.0 + 1.0 * (k / 100 + 1) ** -0.5) * np.exp(0.02 * rng.normal(size=k.size))
    seen = k <= 2000
    monkeypatch.setattr(C, "CROSS_NOISE", 0)
    off = C.sample_curves(k[seen], y[seen], None, 4000, n_draws=30)
    assert off.jitter is None
    monkeypatch.setattr(C, "CROSS_NOISE", 1)
    on = C.sample_curves(k[seen], y[seen], None, 4000, n_draws=30)
    np.testing.assert_array_equal(on.curves, off.curves)
    assert on.jitter.shape == on.curves.shape
    kb, _ = C.bin_curve(k[seen][k[seen] >= C.SKIP_FRAC * 2000], y[seen][k[seen] >= C.SKIP_FRAC * 2000])
    width = float(np.median(np.diff(kb)))
    stretch = np.floor((on.steps - on.steps[0]) / width)  # the grid starts at the last bin's step
    for row in on.jitter[:5]:
        for s in np.unique(stretch):
            assert np.ptp(row[stretch == s]) == 0  # one value a stretch
    assert np.unique(on.jitter).size > 20 and np.max(np.abs(on.jitter)) < 0.1  # residuals of 2% noise, binned
    target = 2.0 + 1.0 * (3000 / 100 + 1) ** -0.5  # the trend reaches it at step 3,000
    assert C.forecast_from_draws(on, target).steps < C.forecast_from_draws(off, target).steps


def test_epoch_drop_prior_is_what_the_development_trainer_runs_measure():
    """The prior of the drop a pass (EPOCH_PRIOR_G, EPOCH_PRIOR_SIGMA) is derived, as documented, from the boundaries
    of the development Trainer runs (sets f and g) that EpochDrops' rule can measure: the median of the per-run median
    drops and log(q3/q1)/1.349 of them (benchmarks/converge_validation.py, candidate E2 of 2026-11-28)."""
    import importlib.util
    from pathlib import Path

    import traincast.online.curves as C

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "converge_validation.py"
    spec = importlib.util.spec_from_file_location("converge_validation", path)
    cv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cv)
    g, sd = cv.epoch_drop_prior()
    assert C.EPOCH_PRIOR_G == pytest.approx(g, rel=0.01) and C.EPOCH_PRIOR_SIGMA == pytest.approx(sd, rel=0.01)
    # the rule's inputs: a drop measured where the windows hold two points each, none where the log is too coarse
    k = np.arange(10, 3001, 10).astype(float)
    y = 2.0 * np.exp(-0.2 * np.floor((k - 1) / 1000))
    run = dict(steps=k, loss=y, epoch=k / 1000, total=3000)
    assert cv.boundary_drops(run) == pytest.approx([0.2, 0.2], abs=1e-9)
    coarse = dict(steps=k[::10], loss=y[::10], epoch=k[::10] / 1000, total=3000)  # one point in each window
    assert cv.boundary_drops(coarse) == []


def test_a_run_not_yet_at_its_first_boundary_expects_the_priors_drop_at_each_boundary_to_come():
    """A 3-pass run seen to step 900 (no boundary yet), flat at 2.0 with 0.5% noise: the sampled curves drop at
    steps 1,000 and 2,000 by the prior's factor, so the median floor by the end of the run is about
    2.0 / exp(2 * EPOCH_PRIOR_G) and no level is forecast before the first boundary."""
    import traincast.online.curves as C

    rng = np.random.default_rng(5)
    k = np.arange(10, 901, 10).astype(float)
    y = (2.0 + 0.3 * (k / 10) ** -1.0) * np.exp(0.005 * rng.normal(size=len(k)))
    draws = C.sample_curves(k, y, parse_schedule("constant", 3000), 3000, n_draws=60, run_steps=3000,
                            steps_per_epoch=1000)
    end = draws.curves[:, -1]
    assert float(np.median(end)) == pytest.approx(2.0 * math.exp(-2 * C.EPOCH_PRIOR_G), rel=0.02)
    fc = C.forecast_from_draws(draws, 1.99)  # just under the plateau: reached at a boundary, not before
    assert fc.steps >= 1000


def test_drift_shifts_each_forms_curves_by_one_factor_growing_with_the_horizon(monkeypatch):
    """DRIFT (a candidate, off by default): the same draws as without it (the shift is deterministic), each multiplied
    by exp(-DRIFT x b_form x log(1 + relative horizon)) with one slope b per form; 1 at the step now."""
    import traincast.online.curves as C

    rng = np.random.default_rng(5)
    k = np.arange(1, 4001, dtype=float)
    y = (1.5 + 2.0 * (k / 50 + 1) ** -0.7) * np.exp(0.01 * rng.normal(size=k.size))
    seen = k <= 1000
    off = C.sample_curves(k[seen], y[seen], None, 4000, n_draws=24)
    monkeypatch.setattr(C, "DRIFT", 1.0)
    on = C.sample_curves(k[seen], y[seen], None, 4000, n_draws=24)
    assert on.forms == off.forms
    rel = np.log1p((on.steps - on.steps[0]) / on.steps[0])  # the grid starts at the step now
    slopes = {}
    for i, form in enumerate(on.forms):
        ratio = np.log(on.curves[i] / off.curves[i])
        b = -ratio[1:] / rel[1:]
        np.testing.assert_allclose(b, b[0], rtol=1e-9, atol=1e-12)  # one factor, linear in log(1 + horizon)
        assert ratio[0] == pytest.approx(0.0, abs=1e-12)
        slopes.setdefault(form, set()).add(round(float(b[0]), 12))
    assert all(len(v) == 1 for v in slopes.values())  # one slope a form
    assert any(abs(next(iter(v))) > 1e-6 for v in slopes.values())  # and it does shift
