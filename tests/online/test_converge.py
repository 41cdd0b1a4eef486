import math

import numpy as np
import pytest

from traincast.errors import ConfigError, DataError
from traincast.online import LossCurveModel, SpeedModel, time_to_target

BETA = (2e-3, 0.5, 0.3)


def _curve(n=4000, noise=0.05, seed=0, beta=BETA):
    rng = np.random.default_rng(seed)
    k = np.arange(1, n + 1)
    clean = 1 / (beta[0] * k + beta[1]) + beta[2]
    return k, clean * (1 + noise * rng.normal(size=n)), clean


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recovers_beta_on_noisy_data(seed):
    k, y, _ = _curve(seed=seed)
    m = LossCurveModel().fit(k, y)
    assert m.beta_[0] == pytest.approx(BETA[0], rel=0.1)
    assert m.beta_[1] == pytest.approx(BETA[1], rel=0.1)
    assert m.beta_[2] == pytest.approx(BETA[2], rel=0.05)
    assert m.score(k, y) > 0.8


def test_robust_to_outliers():
    k, y, _ = _curve(seed=4)
    y = y.copy()
    y[::50] *= 5  # loss spikes
    m = LossCurveModel().fit(k, y)
    assert m.beta_[2] == pytest.approx(BETA[2], rel=0.08)


def test_steps_to_target_from_a_quarter_of_the_run():
    k, y, _ = _curve(n=8000, seed=1)
    target = 1 / (BETA[0] * 6000 + BETA[1]) + BETA[2]
    m = LossCurveModel().fit(k[:2000], y[:2000])
    stt = m.steps_to_target(target, n_boot=50)
    assert stt.steps == pytest.approx(6000, rel=0.15)
    assert stt.low <= 6000 <= stt.high
    assert stt.current_step == 2000


def test_unreachable_target_is_infinite():
    k, y, _ = _curve(seed=2)
    m = LossCurveModel().fit(k, y)
    stt = m.steps_to_target(0.1, n_boot=20)
    assert math.isinf(stt.steps) and stt.reachable_fraction < 0.5


def test_power_form_fits_too():
    k, y, clean = _curve(seed=3)
    m = LossCurveModel(form="power").fit(k, y)
    assert np.max(np.abs(m.predict(k) - clean) / clean) < 0.05


def test_errors():
    with pytest.raises(DataError, match="at least"):
        LossCurveModel().fit([1, 2, 3], [1, 0.5, 0.3])
    with pytest.raises(ConfigError, match="not fitted"):
        LossCurveModel().predict([1])
    with pytest.raises(ConfigError, match="form"):
        LossCurveModel(form="cubic")
    with pytest.raises(ConfigError, match="global batch"):
        SpeedModel("sync")


def test_speed_model_recovers_theta_sync_and_async():
    p = np.array([1, 2, 4, 1, 2, 4, 8, 8, 2, 6])
    w = np.array([1, 2, 4, 4, 8, 8, 8, 16, 12, 6])
    theta = np.array([0.01, 0.05, 0.02, 0.01, 0.03])
    sm = SpeedModel("sync", global_batch=256)
    f = 1 / (sm._features(p, w) @ theta)
    rng = np.random.default_rng(0)
    sm.fit(p, w, f * (1 + 0.01 * rng.normal(size=len(f))))
    assert np.allclose(sm.predict([3], [10]), 1 / (sm._features([3], [10]) @ theta), rtol=0.05)
    am = SpeedModel("async")
    th = np.array([0.2, 0.05, 0.01, 0.02])
    fa = w / (am._features(p, w) @ th)
    am.fit(p, w, fa)
    assert am.theta_ == pytest.approx(th, rel=1e-3)


def test_time_to_target():
    k, y, _ = _curve(seed=0)
    stt = LossCurveModel().fit(k[:1000], y[:1000]).steps_to_target(0.45, n_boot=20)
    ttt = time_to_target(stt, 0.5)
    assert ttt.time_s == pytest.approx((stt.steps - 1000) * 0.5)
    with pytest.raises(ConfigError):
        time_to_target(stt, 0)


def test_auto_form_picks_power_for_a_fast_decaying_curve():
    rng = np.random.default_rng(0)
    k = np.arange(1, 3001)
    clean = 2.0 * (k / 100 + 0.5) ** -2.0 + 0.001  # decays like k^-2: the Optimus 1/k form cannot follow
    y = clean * np.exp(0.05 * rng.normal(size=k.size))
    m = LossCurveModel(form="auto", log_space=True).fit(k[:1000], y[:1000])
    assert m.form_ == "power"
    target = float(2.0 * (2500 / 100 + 0.5) ** -2.0 + 0.001)
    assert m.steps_to_target(target, n_boot=0).steps == pytest.approx(2500, rel=0.15)
    opt = LossCurveModel(form="optimus", log_space=True).fit(k[:1000], y[:1000])
    assert abs(opt.steps_to_target(target, n_boot=0).steps - 2500) > 0.3 * 2500


def test_auto_form_keeps_optimus_on_an_optimus_curve():
    k, y, _ = _curve(seed=5)
    assert LossCurveModel(form="auto").fit(k, y).form_ == "optimus"
