"""Schedule-aware loss curves, averaged over forms, with bands measured on the run itself.

The training loss is modelled as a function of the *cumulative learning rate*
``S1(k) = sum_{j<=k} lr_j`` (the "forward area"), minus an *annealing* term
that grows when the learning rate falls:

- LR-annealing law (Tissue et al. 2024, "Scaling Law with Learning Rate
  Annealing"): ``L = L0 + A*S1^-alpha - C*S2`` with ``S2`` the annealing area
  with momentum, ``S2(k) = sum_i m_i``, ``m_i = lam*m_{i-1} + (lr_{i-1} - lr_i)``.
  ``S2 = (lr_peak - ema_lam(lr)) / (1 - lam)``, so ``C*S2`` is written here as
  ``C*D(k)``, ``D = lr_peak - ema(lr)`` (peak 1, time constant ``tau`` =
  ``TAU_FRAC`` of the run). Forms ``power``, ``optimus`` and ``exp`` take
  ``x = S1/S1(now)`` for the step and subtract ``C*D``; without a schedule
  (or with a constant one) they are the classic step forms: power law with
  offset, Optimus's ``1/(b0*k + b1) + b2`` (Peng et al. 2018), exponential.
- Multi-Power Law (Luo et al. 2025): ``L = L0 + A*(S1 + SW)^-alpha - LD``,
  ``LD(t) = B * sum_k (lr_{k-1} - lr_k) * G(lr_k^-gamma * S_k(t))``,
  ``G(u) = 1 - (Cm*u + 1)^-beta``, with ``beta = gamma = 0.6`` fixed (their
  fits give 0.58-0.66 at 25M-400M parameters).

Early in a run the annealing amplitude (``C``, ``B``) cannot be measured when
the learning rate has not fallen yet (WSD before its cooldown): it then comes
from a prior, ``C / L(now) ~ LogNormal(log 0.05, 1.0)``, and the band says
how little is known. (The median, 5%, lies between what a full cooldown gained
on the development runs of ``benchmarks/converge_runs.py`` (WSD vs constant,
same seeds: MLP 2.3-3.7%, CNN 3.6-6.3%, transformer -0.2%) and what published
LLM runs gain from their decay (Hägele et al. 2024: about 3-4% at 124M-360M;
MiniCPM, Hu et al. 2024: about 10% in its decay stage). It was 3% until
2026-11-26; 5% was chosen on the development runs and the first public set
(benchmarks/converge_validation.py) before the second public set was run.
The width spans 2-14%.) The exponent alpha of the forms in S1 (``power``,
``mpl``) has a prior too, ``log(alpha) ~ N(log 0.4, 0.7)``: from a noisy
quarter of a run alpha, the offset and the floor are degenerate (fits on the
development LLM logs gave 0.05 to 5 for the same run), and the forecast of
the stable phase swung with them; data that do tell alpha override the prior.
(Chosen 2026-11-26 on the development sets by the protocol in
benchmarks/converge_validation.py, over a tighter annealing prior.) Forms are fitted (MAP, the prior as one more residual) in log
space (relative errors, robust soft-L1) on the binned curve after the first
40% of the steps seen (``SKIP_FRAC``; 20% until 2026-11-28); each form's draws are randomized-MAP refits (the binned
curve perturbed by its own residuals, the prior's centre by a prior draw);
forms are weighted by inverse
mean-squared error of rolling-origin backtests on the part of the run already
seen (Bates & Granger), and the draws are widened by the extrapolation error
those backtests measured, growing with the horizon. The forecast step is the
median first step at which the draws reach the target; when only 10-50% of
them reach it by the horizon, it is the median over those (``COND_MEDIAN``),
and the reach probability says how likely the target is at all.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from traincast.errors import ConfigError, DataError, UnknownNameError
from traincast.online.schedule import Schedule

MIN_POINTS = 8
MAX_GRID_STEPS = 20_000_000  # the per-step learning-rate grid's length (8 bytes a step per array)
MAX_BINS = 60
# the first 40% of the steps seen (the fast early transient) are not fitted: since 2026-11-28 (night), candidate S4 of
# benchmarks/converge_validation.py's set-j protocol (pooled from a quarter of the run 27.4% -> 25.6% over the
# development sets a-i, from half 13.9% -> 11.1%, CPU runs 25.7% -> 22.3%; the LLM logs of dense-dev 11.1% -> 17.6%
# from a quarter); 0.2 before
SKIP_FRAC = 0.4
TAU_FRAC = 0.02  # time constant of the annealing EMA, as a share of the run
PRIOR_MU = math.log(0.05)  # annealing gain / current loss: median 5% ...
PRIOR_SIGMA = 1.0  # ... a factor e either way at 1 sigma
EXP_PRIOR_MU = math.log(0.4)  # exponent alpha of the forms in S1 (power, mpl): log(alpha) ~ N(EXP_PRIOR_MU, EXP_PRIOR_SIGMA)
EXP_PRIOR_SIGMA = 0.7  # chosen on the development sets (benchmarks/converge_validation.py); 0: no prior on the exponent
MPL_BETA = 0.6
ORIGINS = (0.5, 0.65, 0.8)  # rolling origins, as shares of the steps seen
BAND = (0.1, 0.9)  # the 80% band
# When 10-50% of the draws reach a target by the horizon, the point forecast is the median step of those that do
# ("if it is reached at all, about then"; the reach probability beside it), not "not reached". Chosen 2026-11-27 on
# the development sets by the protocol in benchmarks/converge_validation.py; 0: the median of all draws.
COND_MEDIAN = 1
# Epochs (a run that passes over its data several times, ``steps_per_epoch`` known): the training loss drops by a
# factor exp(g) each time the data come round again (benchmarks/converge_validation.py, set f). Once a boundary is
# seen, g is the drop measured there (the last one: on the development runs the drops grow from pass to pass),
# drawn with a log-sd of EPOCH_DRAW_SIGMA; until one is measured (none passed yet, or none logged finely enough: two
# points in each tenth of an epoch around it), from the prior g ~ LogNormal(log EPOCH_PRIOR_G, EPOCH_PRIOR_SIGMA)
# (since 2026-11-28, candidate E2 of benchmarks/converge_validation.py: from the 12 multi-pass development Trainer
# runs of sets f and g with a measurable boundary, the median of their per-run median drops, 1.04x, and log(q3/q1)/1.349
# of them, 1.79: ``converge_validation.epoch_drop_prior()``; before, LogNormal(log 0.1, 1.2) from the first boundaries
# of set f's development half). EPOCH_DROPS = 0 turns the epochs off.
EPOCH_DROPS = 1
EPOCH_PRIOR_G = 0.0392
EPOCH_PRIOR_SIGMA = 1.79
EPOCH_DRAW_SIGMA = 0.5
EPOCH_WINDOW = 0.1  # the windows either side of a boundary, as a share of an epoch
# once a boundary has been passed, a drop no boundary could measure (logged too coarsely) is 0: the passes are in the
# fitted trend (a 90-epoch run logged every 100 steps would otherwise draw the prior at each of its boundaries)
EPOCH_COARSE_ZERO = 0  # candidate epoch-coarse lost on the development rule twice (2026-11-28: 21.1% vs 18.2%; E1: 24.7% vs 23.1%)
# The step a sampled curve reaches a target is read from the curve plus the fluctuation the watched curve shows (on
# a flat stretch the noisy loss dips under a target before its trend does): the log-residuals of the binned curve
# about the form's fit, drawn with replacement, one per stretch of future steps as long as a bin of the curve seen.
# The floor stays that of the noise-free curves. 0: the crossing of the noise-free curves (candidate X1 of
# benchmarks/converge_validation.py, 2026-11-28: it lost, 36.3% vs 23.1% pooled from 25%; the bins' noise is far
# larger than that of the 5%-of-the-run average the protocol's targets are read from).
CROSS_NOISE = 0
# The forms' own drift, learned from the run itself: the rolling-origin backtests say, per form, by how much its
# extrapolation of the part already seen ran low or high in log-loss, per unit of log(1 + relative horizon) (least
# squares through the origin, the median over the origins); every sampled curve of that form is shifted by
# -DRIFT x that slope x log(1 + relative horizon). A form that ran ahead of the curve seen (forecast the loss falling
# faster than it did) is held back by as much, further out. 0: no shift (candidate of benchmarks/converge_validation.py,
# set i's protocol).
DRIFT = 0.0


# ------------------------------------------------------------------ the grid
@dataclass(frozen=True, eq=False)
class Grid:
    """Per-step learning-rate quantities on steps 1..horizon."""

    horizon: int
    lr: np.ndarray  # relative to the peak
    s1: np.ndarray  # cumulative lr
    d: np.ndarray  # annealing deficit, peak - ema(lr), 0 before the peak
    schedule: bool  # False: no schedule (lr = 1)
    drops_at: np.ndarray = field(default_factory=lambda: np.zeros(0))  # MPL: binned drop steps
    drops: np.ndarray = field(default_factory=lambda: np.zeros(0))  # ... and sizes
    lr_at_drop: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @staticmethod
    def build(horizon: int, schedule: Schedule | None, run_steps: int | None = None) -> Grid:
        h = int(max(horizon, 2))
        if h > MAX_GRID_STEPS:
            raise ConfigError(f"the forecast would run to step {h:,}; it holds runs of at most {MAX_GRID_STEPS:,} steps "
                              "(check --total-steps, the schedule's TOTAL and the log's step column)")
        k = np.arange(1, h + 1, dtype=float)
        if schedule is None:
            lr = np.ones(h)
        else:
            lr = schedule.lr(k)
            if not np.max(lr) > 0:
                raise ConfigError(f"schedule {schedule.spec!r} is zero everywhere up to step {h}")
            lr = lr / np.max(lr)
        s1 = np.cumsum(lr)
        ip = int(np.argmax(lr >= 0.999 * lr.max()))
        tau = max(TAU_FRAC * (run_steps or h), 5.0)
        a = 1.0 / tau
        ema = np.empty(h)
        e = lr[ip]
        ema[:ip] = lr[:ip]
        for i in range(ip, h):
            e += a * (lr[i] - e)
            ema[i] = e
        d = np.where(np.arange(h) >= ip, np.maximum(lr[ip] - ema, 0.0), 0.0)
        drop = np.r_[0.0, np.maximum(-np.diff(lr), 0.0)]
        drop[: ip + 1] = 0.0
        nz = np.nonzero(drop > 1e-12)[0]
        if len(nz):  # bin the drops (<= 48) for the MPL sum
            edges = np.unique(np.linspace(nz[0], nz[-1] + 1, min(len(nz), 48) + 1).astype(int))
            at, sz, lv = [], [], []
            for a0, b0 in zip(edges[:-1], edges[1:]):
                w = drop[a0:b0]
                if w.sum() > 0:
                    at.append(int(np.round(np.average(np.arange(a0, b0), weights=w))))
                    sz.append(float(w.sum()))
                    lv.append(float(lr[at[-1]]))
            drops_at, drops, lr_at = np.array(at), np.array(sz), np.maximum(np.array(lv), 1e-3)
        else:
            drops_at, drops, lr_at = np.zeros(0, int), np.zeros(0), np.zeros(0)
        return Grid(h, lr, s1, d, schedule is not None and not np.allclose(lr, 1.0), drops_at, drops, lr_at)

    def at(self, steps) -> tuple[np.ndarray, np.ndarray]:
        """(S1, D) at (possibly fractional) steps."""
        k = np.clip(np.asarray(steps, dtype=float), 1, self.horizon)
        grid = np.arange(1, self.horizon + 1, dtype=float)
        return np.interp(k, grid, self.s1), np.interp(k, grid, self.d)


@dataclass(frozen=True, eq=False)
class Ctx:
    """What a form needs at a set of steps: x = S1/S1(now), D, and the MPL terms."""

    x: np.ndarray
    d: np.ndarray
    k: np.ndarray
    grid: Grid
    s_now: float

    @staticmethod
    def make(grid: Grid, steps, k_now: float) -> Ctx:
        s, d = grid.at(steps)
        s_now = float(grid.at([k_now])[0][0])
        return Ctx(s / s_now, d, np.asarray(steps, dtype=float), grid, s_now)

    def ld_basis(self, cm: float) -> np.ndarray:
        """MPL's sum_k drop_k * G(lr_k^-gamma * S_k(t)) at each step t, for one Cm."""
        g = self.grid
        if not len(g.drops):
            return np.zeros_like(self.x)
        s_at = g.s1[g.drops_at] - g.lr[g.drops_at]  # S1 just before the drop step
        s_t = self.x * self.s_now
        u = np.maximum(s_t[:, None] - s_at[None, :], 0.0) / self.s_now * g.lr_at_drop[None, :] ** (-MPL_BETA)
        gu = 1.0 - (cm * u + 1.0) ** (-MPL_BETA)
        gu[self.k[:, None] < g.drops_at[None, :] + 1] = 0.0
        return gu @ g.drops


# ------------------------------------------------------------------- forms
@dataclass(frozen=True)
class Form:
    name: str
    help: str
    f: Callable  # (params, ctx) -> loss
    init: Callable  # (y) -> list of start params
    bounds: Callable  # (y) -> (lo, hi)
    anneal: int  # index of the annealing amplitude
    schedule_only: bool = False
    jac: Callable | None = None  # (params, ctx) -> d loss / d params, (n, p); None: finite differences
    exponent: int | None = None  # index of the power-law exponent in S1 (the exponent prior applies to it)


def _power(p, c):
    a, d, alpha, c_ann, amp = p
    return c_ann + amp + a * (c.x + d) ** (-alpha) - amp * c.d


def _optimus(p, c):
    b0, b1, c_ann, amp = p
    return 1.0 / (b0 * c.x + b1) + c_ann + amp - amp * c.d


def _exp(p, c):
    a, b, c_ann, amp = p
    return c_ann + amp + a * np.exp(-b * c.x) - amp * c.d


def _mpl(p, c):
    a, sw, alpha, l0, amp, lcm = p
    return l0 + a * (c.x + sw) ** (-alpha) - amp * c.ld_basis(math.exp(lcm))


def _power_jac(p, c):
    a, d, alpha, _, _ = p
    xd = c.x + d
    t = xd ** (-alpha)
    return np.column_stack([t, -alpha * a * t / xd, -a * t * np.log(xd), np.ones_like(t), 1.0 - c.d])


def _optimus_jac(p, c):
    b0, b1, _, _ = p
    q = (b0 * c.x + b1) ** -2
    return np.column_stack([-c.x * q, -q, np.ones_like(q), 1.0 - c.d])


def _exp_jac(p, c):
    a, b, _, _ = p
    e = np.exp(-b * c.x)
    return np.column_stack([e, -a * c.x * e, np.ones_like(e), 1.0 - c.d])


def _amp0(y):
    return 0.1 * float(np.median(y[-max(len(y) // 5, 1):]))


FORMS: dict[str, Form] = {}


def register_form(form: Form) -> None:
    FORMS[form.name] = form


register_form(Form(
    "power", "L0 + A*(x + d)^-alpha - C*S2 (Tissue et al. 2024 with an offset; a power law with offset without a schedule)",
    _power,
    lambda y: [[max(y[0] - f * y.min(), 1e-6), 0.05, al, f * y.min() * 0.9, _amp0(y)] for f in (0.0, 0.5, 0.9) for al in (0.5, 1.5)],
    lambda y: ([0.0, 1e-4, 0.05, 0.0, 0.0], [np.inf, 10.0, 5.0, max(float(y.min()), 1e-12), 10 * float(y.max())]),
    4,
    jac=_power_jac,
    exponent=2,
))
register_form(Form(
    "optimus", "1/(b0*x + b1) + b2 - C*S2 (Optimus, Peng et al. 2018, in the cumulative learning rate)",
    _optimus,
    lambda y: [[max(1 / max(y[-1] - f * y.min(), 1e-9) - 1 / max(y[0] - f * y.min(), 1e-9), 1e-6),
                1 / max(y[0] - f * y.min(), 1e-9), f * y.min() * 0.9, _amp0(y)] for f in (0.0, 0.5, 0.9)],
    lambda y: ([0.0, 1e-9, 0.0, 0.0], [np.inf, np.inf, max(float(y.min()), 1e-12), 10 * float(y.max())]),
    3,
    jac=_optimus_jac,
))
register_form(Form(
    "exp", "c + a*exp(-b*x) - C*S2 (exponential approach to a floor)",
    _exp,
    lambda y: [[max(y[0] - f * y.min(), 1e-6), b, f * y.min() * 0.9, _amp0(y)] for f in (0.0, 0.7) for b in (1.0, 4.0)],
    lambda y: ([0.0, 1e-3, 0.0, 0.0], [np.inf, 100.0, max(float(y.min()), 1e-12), 10 * float(y.max())]),
    3,
    jac=_exp_jac,
))
register_form(Form(
    "mpl", "L0 + A*(S1 + SW)^-alpha - LD(t) (Multi-Power Law, Luo et al. 2025; beta = gamma = 0.6)",
    _mpl,
    lambda y: [[max(y[0] - f * y.min(), 1e-6), 0.05, al, f * y.min() * 0.9, _amp0(y), math.log(10.0)]
               for f in (0.0, 0.8) for al in (0.5, 1.5)],
    lambda y: ([0.0, 1e-4, 0.05, 0.0, 0.0, math.log(0.1)],
               [np.inf, 10.0, 5.0, max(float(y.min()), 1e-12), 10 * float(y.max()), math.log(1e4)]),
    4,
    schedule_only=True,
    exponent=2,
))


def form_names(schedule: bool) -> list[str]:
    return [n for n, f in FORMS.items() if schedule or not f.schedule_only]


# ----------------------------------------------------------------- fitting
def usable(k: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The (step, loss) points a fit can use: finite, positive step and loss."""
    return np.isfinite(k) & np.isfinite(y) & (y > 0) & (k > 0)


def bin_curve(steps, losses, max_bins: int = MAX_BINS) -> tuple[np.ndarray, np.ndarray]:
    """Medians of (step, loss) in equal-width step bins; drops non-finite and non-positive losses."""
    k = np.asarray(steps, dtype=float)
    y = np.asarray(losses, dtype=float)
    ok = usable(k, y)
    k, y = k[ok], y[ok]
    o = np.argsort(k, kind="stable")
    k, y = k[o], y[o]
    if len(k) <= max_bins:
        return k, y
    edges = np.linspace(k.min(), k.max() + 1e-9, max_bins + 1)
    idx = np.digitize(k, edges) - 1
    xs, ys = [], []
    for b in range(max_bins):
        m = idx == b
        if m.any():
            xs.append(float(np.median(k[m])))
            ys.append(float(np.median(y[m])))
    return np.array(xs), np.array(ys)


def noise_log(y: np.ndarray) -> float:
    """Robust noise of log(y) between neighbouring points."""
    if len(y) < 3:
        return 0.05
    return max(float(np.median(np.abs(np.diff(np.log(y))))) / math.sqrt(2) * 1.4826, 1e-4)


@dataclass(frozen=True, eq=False)
class Fit:
    form: str
    params: np.ndarray
    cost: float
    jac: np.ndarray | None = None  # residual Jacobian at the optimum (data rows, then the prior row)
    resid: np.ndarray | None = None



def fit_form(name: str, ctx: Ctx, y: np.ndarray, l_ref: float, sigma: float, *, prior_mu: float | None = None,
             p0=None, use_prior: bool = True, max_starts: int | None = None, exp_mu: float | None = None) -> Fit | None:
    """MAP fit of one form in log space: robust residuals, the annealing prior and (when EXP_PRIOR_SIGMA > 0) the exponent prior."""
    from scipy.optimize import least_squares

    form = FORMS[name]
    prior_mu = PRIOR_MU if prior_mu is None else prior_mu
    exp_mu = EXP_PRIOR_MU if exp_mu is None else exp_mu
    exp_sd = EXP_PRIOR_SIGMA
    use_exp = use_prior and exp_sd > 0 and form.exponent is not None
    lo, hi = form.bounds(y)
    lo, hi = np.array(lo, float), np.array(hi, float)
    ly = np.log(y)

    def resid(p):
        fx = form.f(p, ctx)
        r = (np.log(np.maximum(fx, 1e-12)) - ly) / sigma
        if use_prior:
            amp = max(p[form.anneal], 1e-12 * l_ref)
            r = np.r_[r, (math.log(amp / l_ref) - prior_mu) / PRIOR_SIGMA]
        if use_exp:
            r = np.r_[r, (math.log(max(p[form.exponent], 1e-12)) - exp_mu) / exp_sd]
        return r

    def jac(p):
        fx = np.maximum(form.f(p, ctx), 1e-12)
        J = form.jac(p, ctx) / (fx[:, None] * sigma)
        if use_prior:
            row = np.zeros(len(p))
            amp = p[form.anneal]
            if amp > 1e-12 * l_ref:
                row[form.anneal] = 1.0 / (amp * PRIOR_SIGMA)
            J = np.vstack([J, row])
        if use_exp:
            row = np.zeros(len(p))
            row[form.exponent] = 1.0 / (max(p[form.exponent], 1e-12) * exp_sd)
            J = np.vstack([J, row])
        return J

    starts = [p0] if p0 is not None else form.init(y)[:max_starts]
    best = None
    for s in starts:
        top = np.where(np.isfinite(hi), hi - 1e-9 * (np.abs(np.where(np.isfinite(hi), hi, 0.0)) + 1e-12), np.inf)
        s = np.maximum(np.minimum(np.asarray(s, float), top), lo)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                tol = 1e-4 if p0 is not None else 1e-6
                r = least_squares(resid, s, jac=jac if form.jac is not None else "2-point", bounds=(lo, hi),
                                  loss="soft_l1", f_scale=2.0, x_scale="jac", ftol=tol, xtol=tol, gtol=tol,
                                  max_nfev=60 if p0 is not None else 300)
            except (ValueError, FloatingPointError, np.linalg.LinAlgError):
                continue
        if np.all(np.isfinite(r.x)) and np.isfinite(r.cost) and (best is None or r.cost < best.cost):
            best = r
    return None if best is None else Fit(name, best.x, float(best.cost), best.jac, best.fun)


# ---------------------------------------------------------------- forecast
@dataclass(frozen=True)
class ConvergenceForecast:
    """When the (smoothed) training loss reaches ``target_loss``, by model averaging.

    ``steps`` is the median step, ``low``/``high`` the 80% band (``inf``: not
    within the horizon); ``reach_probability`` the share of draws that reach
    the target by ``horizon_steps``. ``status``: ``ok``, ``reached``,
    ``unreachable`` (below the floor the run can reach: see ``floor_loss``) or
    ``not enough signal``.
    """

    target_loss: float
    current_step: int
    horizon_steps: int
    steps: float
    low: float
    high: float
    reach_probability: float
    floor_loss: float  # median lowest loss the draws reach by the horizon
    floor_low: float
    floor_high: float
    status: str
    weights: dict[str, float]
    schedule: str | None
    notes: tuple[str, ...] = ()
    level: float = 0.8


@dataclass(frozen=True, eq=False)
class CurveDraws:
    """Sampled loss curves on ``steps`` (rows: draws) with their forms."""

    steps: np.ndarray
    curves: np.ndarray
    forms: tuple[str, ...]
    weights: dict[str, float]
    fits: dict[str, Fit]
    current_step: int
    noise: float
    trend: float  # fall of the log-loss over the steps fitted, as a t-statistic
    fall: float = 0.0  # that fall, in log-loss
    last_loss: float = float("nan")  # the loss now (median of the last bins)
    jitter: np.ndarray | None = None  # CROSS_NOISE: the watched curve's fluctuation (log) added when crossings are read


def one_pass(steps_per_epoch: float | None, total_steps: int | None) -> bool:
    """Whether a run of ``total_steps`` makes a single pass over its data: an epoch ending within 1% of the run's
    end is the same pass (a trainer_state's epoch shares are rounded)."""
    return bool(steps_per_epoch and total_steps and steps_per_epoch >= 0.99 * total_steps)


def boundary_drops(k: np.ndarray, y: np.ndarray, steps_per_epoch: float) -> list[float]:
    """The drop of the log-loss at each epoch boundary of (``k``, ``y``) that can be measured (at least two points in
    each of the windows of ``EPOCH_WINDOW`` epochs before the boundary, before that, and after it), in order: the jump
    across the boundary beyond the fall the epoch was already making (0 at least)."""
    spe = float(steps_per_epoch)
    w = EPOCH_WINDOW * spe
    ly = np.log(y)
    out = []
    for j in range(1, int(np.max(k) // spe) + 1):
        b = j * spe
        pre2, pre, post = (ly[(k > b - 2 * w) & (k <= b - w)], ly[(k > b - w) & (k <= b)],
                           ly[(k > b) & (k <= b + w)])
        if min(len(pre2), len(pre), len(post)) >= 2:
            m2, m1, m0 = float(np.median(pre2)), float(np.median(pre)), float(np.median(post))
            out.append(max((m1 - m0) - max(m2 - m1, 0.0), 0.0))
    return out


@dataclass(frozen=True)
class EpochDrops:
    """The passes over the data: epoch index of a step and the drop of the log-loss per pass (``g``)."""

    steps_per_epoch: float
    g_seen: float | None  # the drop measured at the last boundary seen; None: no boundary seen (or measurable)
    now: int  # passes completed by the last step seen

    def index(self, k) -> np.ndarray:
        return np.floor((np.asarray(k, dtype=float) - 1.0) / self.steps_per_epoch)

    @staticmethod
    def measure(k: np.ndarray, y: np.ndarray, steps_per_epoch: float | None) -> EpochDrops | None:
        if not EPOCH_DROPS or not steps_per_epoch or steps_per_epoch <= 0 or not len(k):
            return None
        spe = float(steps_per_epoch)
        drops = boundary_drops(k, y, spe)
        g = drops[-1] if drops else None  # the last boundary measured
        now = int((np.max(k) - 1) // spe)
        if g is None and now >= 1 and EPOCH_COARSE_ZERO:
            g = 0.0
        return EpochDrops(spe, g, now)

    @staticmethod
    def of(steps, losses, steps_per_epoch: float | None, total_steps: int | None = None) -> EpochDrops | None:
        """:meth:`measure` on the usable points of a log; None for a run of one pass (:func:`one_pass`)."""
        if one_pass(steps_per_epoch, total_steps):
            return None
        k, y = np.asarray(steps, dtype=float), np.asarray(losses, dtype=float)
        ok = usable(k, y)
        return EpochDrops.measure(k[ok], y[ok], steps_per_epoch)

    def draw(self, rng) -> float:
        if self.g_seen is not None:
            return self.g_seen * math.exp(EPOCH_DRAW_SIGMA * rng.normal())
        return EPOCH_PRIOR_G * math.exp(EPOCH_PRIOR_SIGMA * rng.normal())


def _grid_steps(k_now: float, horizon: int, n: int = 400) -> np.ndarray:
    if horizon <= k_now:
        return np.array([float(horizon)])
    return np.unique(np.r_[np.linspace(k_now, horizon, n), float(horizon)])


def sample_curves(
    steps, losses, schedule: Schedule | None = None, horizon: int | None = None, *, n_draws: int = 120,
    seed: int = 0, forms=None, run_steps: int | None = None, steps_per_epoch: float | None = None,
) -> CurveDraws:
    """Fit every form, weight by rolling-origin backtests, and draw future curves up to ``horizon``.

    With ``steps_per_epoch`` (the run passes over its data more than once) the drops at the boundaries already
    seen are taken out before the fit, and each drawn curve drops at the boundaries to come (:class:`EpochDrops`).
    """
    k_all = np.asarray(steps, dtype=float)
    y_all = np.asarray(losses, dtype=float)
    ep = EpochDrops.of(k_all, y_all, steps_per_epoch)
    if ep is not None and ep.g_seen:  # the curve as it would run without the passes already made
        y_all = np.where(usable(k_all, y_all), y_all * np.exp(ep.g_seen * (ep.index(k_all) - ep.now)), y_all)
    k_last = float(np.nanmax(k_all)) if len(k_all) else 0.0
    keep = k_all >= SKIP_FRAC * k_last
    kb, yb = bin_curve(k_all[keep], y_all[keep])
    if len(kb) < MIN_POINTS:
        kb, yb = bin_curve(k_all, y_all)
    if len(kb) < MIN_POINTS:
        raise DataError(f"need at least {MIN_POINTS} (step, loss) points with a positive loss to fit the loss curve, found {len(kb)}")
    k_now = float(kb[-1])
    horizon = int(horizon or min(max(10 * k_now, k_now + 10), max(MAX_GRID_STEPS, k_now + 1)))
    if horizon <= k_now:
        horizon = int(k_now) + 1
    grid = Grid.build(horizon, schedule, run_steps or horizon)
    names = list(forms) if forms else form_names(grid.schedule)
    for n in names:
        if n not in FORMS:
            raise UnknownNameError("loss-curve form", n, FORMS)
    if not grid.schedule:
        names = [n for n in names if not FORMS[n].schedule_only]
    sigma = noise_log(yb)
    l_ref = float(np.median(yb[-max(len(yb) // 8, 2):]))
    ctx = Ctx.make(grid, kb, k_now)
    n5 = max(len(yb) // 5, 2)  # the fall of the log-loss from the first to the last fifth, as a t-statistic
    trend = float((np.mean(np.log(yb[:n5])) - np.mean(np.log(yb[-n5:]))) / (sigma * math.sqrt(2.0 / n5)))

    fits = {n: f for n in names if (f := fit_form(n, ctx, yb, l_ref, sigma)) is not None}
    if not fits:
        raise DataError("the loss curve could not be fitted by any form; check that the losses are finite positive numbers")

    # rolling-origin backtests on the run itself
    errs: dict[str, list[float]] = {n: [] for n in fits}
    drifts: dict[str, list[float]] = {n: [] for n in fits}
    horizons, ro_sq = [], []
    for o in ORIGINS:
        cut = int(np.searchsorted(kb, o * k_now, side="right"))
        start = int(np.searchsorted(kb, SKIP_FRAC * o * k_now, side="left"))
        if cut - start < MIN_POINTS or len(kb) - cut < 2:
            continue
        ko = float(kb[cut - 1])
        c_o = Ctx.make(grid, kb[start:cut], ko)
        c_rest = Ctx.make(grid, kb[cut:], ko)
        lref_o = float(np.median(yb[max(cut - max(cut // 8, 2), 0):cut]))
        preds = {}
        for n in fits:
            fo = fit_form(n, c_o, yb[start:cut], lref_o, noise_log(yb[start:cut]), max_starts=2)
            if fo is None:
                continue
            p = FORMS[n].f(fo.params, c_rest)
            e = np.log(np.maximum(p, 1e-12)) - np.log(yb[cut:])
            errs[n].append(float(np.mean(e**2)))
            r = np.log1p((kb[cut:] - ko) / ko)
            if float(np.sum(r * r)) > 0:
                drifts[n].append(float(np.sum(e * r) / np.sum(r * r)))
            preds[n] = e
        if preds:
            best = min(preds, key=lambda n: np.mean(preds[n] ** 2))
            ro_sq.append(float(np.mean(preds[best][-max(len(preds[best]) // 3, 1):] ** 2)))
            horizons.append((k_now - ko) / ko)
    mse = {n: float(np.mean(v)) for n, v in errs.items() if v}
    if mse:
        m0 = min(mse.values())
        keep = {n: v for n, v in mse.items() if v <= 9 * m0}
        inv = {n: 1.0 / max(v, sigma**2 * 1e-2) for n, v in keep.items()}
        tot = sum(inv.values())
        weights = {n: inv.get(n, 0.0) / tot for n in fits}
    else:
        weights = {n: 1.0 / len(fits) for n in fits}
    # extrapolation error beyond the noise, per unit of log(1 + relative horizon)
    if ro_sq:
        excess = [math.sqrt(max(e - sigma**2, 0.0)) / math.log1p(h) for e, h in zip(ro_sq, horizons)]
        s_ext = float(np.median(excess))
    else:
        s_ext = sigma
    rng = np.random.default_rng(seed)
    gs = _grid_steps(k_now, horizon)
    c_fut = Ctx.make(grid, gs, k_now)
    rel_h = np.log1p((gs - k_now) / k_now)
    curves, forms_used, jitter = [], [], []
    # the watched curve's fluctuation (CROSS_NOISE): one residual per stretch of a bin's length, own random stream
    if CROSS_NOISE:
        rng_x = np.random.default_rng(seed + 104729)
        stretch = np.floor((gs - k_now) / max(float(np.median(np.diff(kb))), 1e-9)).astype(int)
    # the passes to come: a separate random stream, so that runs without epochs draw as before
    rng_e = np.random.default_rng(seed + 7919)
    passes = np.maximum(ep.index(gs) - ep.now, 0.0) if ep is not None else None
    counts = {n: int(round(weights[n] * n_draws)) for n in fits}
    for n, cnt in counts.items():
        if cnt <= 0:
            continue
        f = fits[n]
        form = FORMS[n]
        fitted = form.f(f.params, ctx)
        resid = np.log(yb) - np.log(np.maximum(fitted, 1e-12))
        cur0 = form.f(f.params, c_fut)
        shift = np.exp(-DRIFT * float(np.median(drifts[n])) * rel_h) if DRIFT and drifts.get(n) else 1.0
        for _ in range(cnt):
            # randomized MAP: the data perturbed by their own residuals, the prior's centre by a prior draw
            yb_b = fitted * np.exp(rng.choice(resid, size=len(resid), replace=True))
            mu_b = PRIOR_MU + PRIOR_SIGMA * rng.normal()
            # (no draw without the prior: the random stream stays the method's without it)
            e_b = EXP_PRIOR_MU + EXP_PRIOR_SIGMA * rng.normal() if EXP_PRIOR_SIGMA > 0 else EXP_PRIOR_MU
            fb = fit_form(n, ctx, yb_b, l_ref, sigma, prior_mu=mu_b, p0=f.params, exp_mu=e_b)
            cur = form.f(fb.params, c_fut) if fb is not None else cur0
            cur = cur * np.exp(rng.normal() * s_ext * rel_h) * shift
            if passes is not None:
                cur = cur * np.exp(-ep.draw(rng_e) * passes)
            curves.append(cur)
            forms_used.append(n)
            if CROSS_NOISE:
                jitter.append(rng_x.choice(resid, size=int(stretch[-1]) + 1, replace=True)[stretch])
    fall = float(np.mean(np.log(yb[:n5])) - np.mean(np.log(yb[-n5:])))
    return CurveDraws(gs, np.array(curves), tuple(forms_used), weights, fits, int(k_now), sigma, trend, fall, l_ref,
                      np.array(jitter) if CROSS_NOISE else None)


def forecast_convergence(
    steps, losses, target_loss: float, schedule: Schedule | None = None, total_steps: int | None = None, *,
    horizon: int | None = None, n_draws: int = 120, seed: int = 0, forms=None, level: float = 0.8,
    steps_per_epoch: float | None = None,
) -> ConvergenceForecast:
    """Step at which the smoothed training loss reaches ``target_loss``, with an 80% band.

    ``schedule`` (see :mod:`traincast.online.schedule`) makes the forms aware of
    the learning rate to come; ``total_steps`` bounds the horizon (the run ends
    there). Without either the horizon is 10x the steps seen.
    """
    return forecast_many(steps, losses, [target_loss], schedule, total_steps, horizon=horizon, n_draws=n_draws,
                         seed=seed, forms=forms, level=level, steps_per_epoch=steps_per_epoch)[0]


def forecast_many(
    steps, losses, targets, schedule: Schedule | None = None, total_steps: int | None = None, *,
    horizon: int | None = None, n_draws: int = 120, seed: int = 0, forms=None, level: float = 0.8,
    return_draws: bool = False, steps_per_epoch: float | None = None,
):
    """:func:`forecast_convergence` for several targets from one set of draws (and the draws, when asked)."""
    for t in targets:
        if not (isinstance(t, (int, float)) and math.isfinite(t)):
            raise ConfigError(f"target loss must be a finite number, got {t!r}")
    if not 0 < level < 1:
        raise ConfigError(f"band level must be in (0, 1), got {level!r}")
    k = np.asarray(steps, dtype=float)
    y = np.asarray(losses, dtype=float)
    notes: list[str] = []
    if schedule is not None and not schedule.future_known and schedule.note:
        notes.append(schedule.note)
    total = total_steps or (schedule.total_steps if schedule is not None else None)
    if one_pass(steps_per_epoch, total):
        steps_per_epoch = None
    h = horizon or total
    kb, yb = bin_curve(k, y)
    if len(kb) < MIN_POINTS:
        raise DataError(f"need at least {MIN_POINTS} (step, loss) points with a positive loss to fit the loss curve, found {len(kb)}")
    k_now = int(kb[-1])
    if h is not None and h <= k_now:
        h = None
        notes.append(f"the run's {total} steps are already done; the horizon is 10x the steps seen")
    draws = None
    out = []
    for target_loss in targets:
        f = _reached(kb, yb, float(target_loss), h, schedule, notes, level)
        if f is None:
            if draws is None:
                draws = sample_curves(k, y, schedule, h, n_draws=n_draws, seed=seed, forms=forms, run_steps=total,
                                      steps_per_epoch=steps_per_epoch)
            f = forecast_from_draws(draws, float(target_loss), schedule, notes, level)
        out.append(f)
    # the fit works on binned steps (the last bin's median step); "now" is the last step logged, as `eta` says
    last = int(np.max(k[usable(k, y)]))
    out = [replace(f, current_step=max(f.current_step, last)) for f in out]
    return (out, draws) if return_draws else out


def _reached(kb, yb, target_loss, h, schedule, notes, level) -> ConvergenceForecast | None:
    """The forecast when the target is already reached (the median loss of the last tenth is at or below it)."""
    tail = yb[-max(len(yb) // 10, 2):]
    if float(np.median(tail)) > target_loss:
        return None
    sm = np.array([np.median(yb[max(0, i - 2):i + 1]) for i in range(len(yb))])  # trailing: what was seen
    i = int(np.argmax(sm <= target_loss))
    k_now = int(kb[-1])
    return ConvergenceForecast(target_loss, k_now, int(h or k_now), float(kb[i]), float(kb[i]), float(kb[i]), 1.0,
                               float(np.min(yb)), float(np.min(yb)), float(np.min(yb)), "reached", {},
                               schedule.spec if schedule is not None else None, tuple(notes), level)


def forecast_from_draws(draws: CurveDraws, target_loss: float, schedule: Schedule | None = None, notes=(),
                        level: float = 0.8) -> ConvergenceForecast:
    """Median step, 80% band, reach probability and floor for one target, from sampled curves."""
    notes = list(notes)
    k_now = draws.current_step
    hz = int(draws.steps[-1])
    watched = draws.curves if draws.jitter is None else draws.curves * np.exp(draws.jitter)
    hit = watched <= target_loss
    first = np.where(hit.any(axis=1), draws.steps[np.argmax(hit, axis=1)], np.inf)
    q_lo, q_hi = (1 - level) / 2, 1 - (1 - level) / 2
    srt = np.sort(first)
    n = len(srt)

    def q(p):
        return float(srt[min(int(math.floor(p * (n - 1) + 0.5)), n - 1)])

    floors = np.min(draws.curves, axis=1)
    p_reach = float(np.mean(np.isfinite(first)))
    med, lo, hi = q(0.5), q(q_lo), q(q_hi)
    if COND_MEDIAN and not math.isfinite(med) and p_reach >= 0.1:
        # "if it is reached at all, about then": the reach probability says how likely that is
        med = float(np.median(first[np.isfinite(first)]))
        lo = min(lo, med)  # the band's low end is of all draws: it may lie above the median of those that reach
        notes.append(f"only {p_reach:.0%} of the sampled curves reach the target; the step given is theirs")
    fl, fl_lo, fl_hi = (float(np.quantile(floors, p)) for p in (0.5, q_lo, q_hi))
    status = "ok"
    if draws.trend < 3.0:
        status = "not enough signal"
        notes.append(f"the loss has not fallen clearly yet (t = {draws.trend:.1f} over the steps seen)")
    elif p_reach < 0.1:
        status = "unreachable"
    elif math.isfinite(med) and draws.fall > 0:
        i = min(int(np.searchsorted(draws.steps, med)), len(draws.steps) - 1)
        ahead = float(np.log(draws.last_loss) - np.log(np.median(draws.curves[:, i])))
        if med > 4 * k_now and ahead > 3 * draws.fall:  # far ahead, and far beyond anything the curve has shown
            status = "not enough signal"
            notes.append(f"reaching the target needs a fall of the loss {ahead / draws.fall:.0f}x the fall seen so far")
    elif (not math.isfinite(hi) and p_reach < 0.5) or (
        math.isfinite(lo) and math.isfinite(hi) and (hi - k_now) > 8 * max(lo - k_now, 1)
    ):
        status = "not enough signal"
    if schedule is not None and draws.trend >= 3.0 and not _decay_seen(schedule, k_now) and _decays_later(schedule, k_now, hz):
        notes.append("the learning rate has not fallen yet: the effect of its decay comes from a prior (band widened)")
    return ConvergenceForecast(float(target_loss), k_now, hz, med, lo, hi, p_reach, fl, fl_lo, fl_hi, status,
                               {nm: round(w, 4) for nm, w in draws.weights.items()},
                               schedule.spec if schedule is not None else None, tuple(notes), level)


def _decay_seen(schedule: Schedule, k_now: int) -> bool:
    v = schedule.lr(np.arange(1, k_now + 1))
    return bool(len(v) and v[-1] < 0.95 * v.max())


def _decays_later(schedule: Schedule, k_now: int, horizon: int) -> bool:
    v = schedule.lr(np.arange(k_now, horizon + 1))
    return bool(len(v) and v.min() < 0.95 * v[0])
