"""Remaining time of a running job (after AI Gauge's online estimation).

The series of (step, wall time) records becomes intervals with a time per
step. The warm-up at the start is trimmed; pauses (epoch ends, evaluations,
checkpoints, unexplained stalls) are found, classed by the events that fall
inside them and accounted separately; the steady intervals give the time per
step by one of several estimators; future pauses are projected from their
period (steps per epoch, eval interval) and observed duration. Remaining time
= remaining steps × time per step + future pauses, with a band from the spread
of the step time across blocks of the run.

Estimators (``ESTIMATORS``): ``robust`` (the pace since the last lasting
change of pace, pauses included, warm-ups at the start and after each resume
left out; its band widens with the size of a change seen and with a trend),
``mean`` (steady mean since warm-up), ``median``,
``window`` (moving average over the last part of the run, AI Gauge),
``ewma`` (exponentially weighted), ``naive`` (elapsed / steps done, as tqdm),
``naive_trim`` (the same after warm-up, pauses included in the rate).
``DEFAULT_ESTIMATOR`` was chosen by ``benchmarks/online_backtest.py``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from traincast.errors import ConfigError, DataError
from traincast.online.records import JobSeries

ESTIMATORS = ("robust", "mean", "median", "window", "ewma", "naive", "naive_trim")
# Chosen by benchmarks/online_backtest.py (--seeds 5 --real 3, 2026-11-25: 11 synthetic scenarios incl.
# compilation, a crash and resume on a new clock and a batch change; 6 recorded digits jobs; 9 real CPU logs
# with evaluations, checkpoints, a crash + resume and a batch change; the public modded-nanogpt log): `robust`
# had the lowest median error over all jobs and progress points (3.61%, mean 8.19%; naive_trim 4.02% / 8.48%,
# mean 4.17% / 9.82%). It equals naive_trim until a lasting change of pace, and follows the new pace after one.
DEFAULT_ESTIMATOR = "robust"
BAND_Z = 1.645  # ~90% two-sided band under normality
MIN_RECORDS = 3

_PAUSE_KIND = {"epoch_end": "epoch", "eval_start": "eval", "eval_end": "eval", "checkpoint": "checkpoint"}


@dataclass(frozen=True)
class Pause:
    """An interval much slower than the steady pace: ``excess_s`` beyond it."""

    step: int  # the step logged just before the pause
    kind: str  # epoch | eval | checkpoint | other
    excess_s: float


@dataclass(frozen=True)
class Stationarity:
    adf_pvalue: float
    kpss_pvalue: float
    stationary: bool  # ADF rejects a unit root and KPSS does not reject stationarity


@dataclass(frozen=True)
class SeriesAnalysis:
    """What the time series of a job looks like."""

    n_intervals: int
    warmup_steps: int  # steps trimmed at the start
    warmup_excess_s: float
    step_time_s: float  # median steady time per step
    cov: float  # coefficient of variation of the steady time per step
    pauses: tuple[Pause, ...]
    stationarity: Stationarity | None = None


@dataclass(frozen=True)
class RemainingEstimate:
    estimator: str
    step: int
    total_steps: int
    elapsed_s: float
    remaining_steps: int
    remaining_s: float
    low_s: float
    high_s: float
    step_time_s: float
    future_pause_s: float
    cov: float
    stationary: bool | None = None
    last_time_s: float | None = None  # wall time of the last record (unix seconds when the log had a clock)

    @property
    def progress(self) -> float:
        return self.step / self.total_steps if self.total_steps else float("nan")

    @property
    def rate_steps_per_s(self) -> float:
        return 1.0 / self.step_time_s if self.step_time_s > 0 else float("inf")

    @property
    def total_s(self) -> float:
        return self.elapsed_s + self.remaining_s


# ------------------------------------------------------------------ analysis
@dataclass(frozen=True, eq=False)
class _Intervals:
    start: np.ndarray  # step before
    end: np.ndarray  # step after
    ds: np.ndarray
    dt: np.ndarray
    kind: np.ndarray  # object: '' | epoch | eval | checkpoint | resume

    @property
    def rate(self) -> np.ndarray:
        return self.dt / self.ds


def _intervals(series: JobSeries) -> _Intervals:
    s = series.timed()
    steps, t = s.steps, s.time_s
    if len(steps) < MIN_RECORDS:
        raise DataError(
            f"need at least {MIN_RECORDS} timed step records to estimate, found {len(steps)}"
            + ("" if len(series) == len(steps) else f" ({len(series)} records without a clock)")
        )
    t = np.maximum.accumulate(t)
    start, end = steps[:-1], steps[1:]
    ds = (end - start).astype(float)
    dt = np.diff(t)
    kind = np.array([""] * len(ds), dtype=object)
    if series.events:
        ev_steps = np.array([e.step for e in series.events])
        for e, es in zip(series.events, ev_steps):
            k = "resume" if e.kind == "resume" else _PAUSE_KIND.get(e.kind)
            if k is None:
                continue
            idx = np.searchsorted(end, es, side="right")  # first interval with end > es
            if idx < len(ds) and start[idx] <= es:
                if k == "resume" or kind[idx] == "":
                    kind[idx] = k
                elif kind[idx] != "resume" and k not in kind[idx].split("+"):
                    kind[idx] = kind[idx] + "+" + k
    return _Intervals(start, end, ds, dt, kind)


def _weighted_median(x: np.ndarray, w: np.ndarray) -> float:
    o = np.argsort(x)
    cw = np.cumsum(w[o])
    return float(x[o][np.searchsorted(cw, 0.5 * cw[-1])])


def _split(iv: _Intervals, regime: bool = False):
    """Return (warm-up count, steady mask, pauses, median step time, mad).

    Warm-up (compilation, autotuning, caches) is trimmed at the start and again
    after every resume (a new process warms up again); it is neither steady
    nor a pause.
    """
    n = len(iv.ds)
    r = iv.rate
    usable = iv.kind != "resume"
    m_all = _weighted_median(r[usable], iv.ds[usable]) if usable.any() else float(np.median(r))
    # warm-up: leading intervals clearly slower than the typical pace
    nw = 0
    limit = max(1, int(0.25 * n))
    while nw < limit and r[nw] > 1.15 * m_all and iv.kind[nw] == "":
        nw += 1
    warm = np.arange(n) < nw
    for j in np.nonzero(iv.kind == "resume")[0]:
        i = j + 1
        while i < min(n, j + 1 + max(1, int(0.05 * n))) and r[i] > 1.15 * m_all and iv.kind[i] == "":
            warm[i] = True
            i += 1
    body = ~warm
    base = body & usable & (iv.kind == "")
    start = 0
    if regime and base.sum() >= 12:
        # a lasting change of pace (a new batch size, another job on the node): judge by the pace after it
        idx = np.nonzero(base)[0]
        cp = change_point(iv.ds[idx], iv.dt[idx])
        if cp is not None:
            start = int(idx[cp])
            body = body & (np.arange(n) >= start)
            base = base & body
    m = _weighted_median(r[base], iv.ds[base]) if base.any() else m_all
    mad = float(np.median(np.abs(r[base] - m))) * 1.4826 if base.any() else 0.0
    pause = np.zeros(n, dtype=bool)
    pauses = []
    for i in np.nonzero(body & usable)[0]:
        excess = iv.dt[i] - iv.ds[i] * m
        # the noise of a mean over ds steps shrinks as sqrt(ds); a pause is an excess beyond it
        thr = max(5 * mad / math.sqrt(iv.ds[i]), 0.3 * m) * iv.ds[i]
        if iv.kind[i]:
            pause[i] = True
            pauses.append((i, iv.kind[i], max(excess, 0.0)))
        elif excess > thr:
            pause[i] = True
            pauses.append((i, "other", excess))
    steady = body & usable & ~pause
    if not steady.any():
        steady = body & usable
    if not steady.any():
        steady = usable
    if regime:
        return nw, steady, pauses, m, mad, warm, start
    return nw, steady, pauses, m, mad, warm


def change_point(ds: np.ndarray, dt: np.ndarray, min_rel: float = 0.1, min_t: float = 5.0) -> int | None:
    """Index of the interval where the pace last changed for good (a new batch size, another job
    on the node), or None. Binary split of the block log-paces (<= 40 blocks) on the largest
    t-statistic, kept when the pace moved by more than ``min_rel`` and t > ``min_t``; applied again
    to the part after the split."""
    if len(ds) < 12:
        return None
    cs = np.cumsum(ds)
    nb = min(40, len(ds) // 3)
    edges = np.searchsorted(cs, np.linspace(0, cs[-1], nb + 1)[1:-1], side="left")
    bounds = np.unique(np.r_[0, edges, len(ds)])
    rate = dt / ds
    pairs = [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a and dt[a:b].sum() > 0]
    # block medians: a pause inside a block does not move it, a lasting change does
    lp = np.array([math.log(max(_weighted_median(rate[a:b], ds[a:b]), 1e-300)) for a, b in pairs])
    starts = [a for a, _ in pairs]
    found = None
    off = 0
    while len(lp) - off >= 8:
        seg = lp[off:]
        best, best_t = None, 0.0
        for j in range(3, len(seg) - 2):
            a, b = seg[:j], seg[j:]
            sd = math.sqrt(np.var(a) / len(a) + np.var(b) / len(b)) + 1e-12
            t = abs(a.mean() - b.mean()) / sd
            if t > best_t and abs(math.expm1(b.mean() - a.mean())) > min_rel:
                best, best_t = j, t
        if best is None or best_t < min_t:
            break
        off += best
        found = int(starts[off])
    return found


def stationarity(x: np.ndarray, max_points: int = 400) -> Stationarity | None:
    """ADF and KPSS tests (statsmodels) on a time-per-step series."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) < 20 or np.ptp(x) == 0:
        return None
    if len(x) > max_points:
        x = x[np.linspace(0, len(x) - 1, max_points).astype(int)]
    from statsmodels.tsa.stattools import adfuller, kpss

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            adf_p = float(adfuller(x, autolag="AIC")[1])
            kpss_p = float(kpss(x, regression="c", nlags="auto")[1])
        except (ValueError, np.linalg.LinAlgError):
            return None
    return Stationarity(adf_p, kpss_p, adf_p < 0.05 and kpss_p > 0.05)


def analyze(series: JobSeries, tests: bool = True) -> SeriesAnalysis:
    """Warm-up, pauses, steady step time, CoV and stationarity of a job's series."""
    iv = _intervals(series)
    nw, steady, pauses, m, _, _ = _split(iv)
    r = iv.rate[steady]
    cov = float(np.std(r) / np.mean(r)) if len(r) > 1 and np.mean(r) > 0 else 0.0
    warm_steps = int(iv.ds[:nw].sum())
    warm_excess = float(max(iv.dt[:nw].sum() - warm_steps * m, 0.0))
    ps = tuple(Pause(int(iv.start[i]), k, float(e)) for i, k, e in pauses)
    return SeriesAnalysis(len(iv.ds), warm_steps, warm_excess, m, cov, ps, stationarity(r) if tests else None)


# ---------------------------------------------------------------- estimators
def _block_rates(ds: np.ndarray, dt: np.ndarray, n_blocks: int = 10) -> np.ndarray:
    if len(ds) < 2:
        return np.array([dt.sum() / ds.sum()])
    cs = np.cumsum(ds)
    edges = np.linspace(0, cs[-1], min(n_blocks, len(ds)) + 1)
    idx = np.searchsorted(cs, edges[1:-1], side="left")
    out = []
    for a, b in zip(np.r_[0, idx], np.r_[idx, len(ds)]):
        if b > a:
            out.append(dt[a:b].sum() / ds[a:b].sum())
    return np.array(out)


def _tail(ds: np.ndarray, n_steps: float) -> int:
    """Index from which the last ``n_steps`` steps start."""
    cs = np.cumsum(ds[::-1])
    k = int(np.searchsorted(cs, n_steps)) + 1
    return max(len(ds) - k, 0)


def _step_time(name: str, ds, dt, window_frac: float, halflife_frac: float) -> tuple[float, np.ndarray, np.ndarray]:
    """Time per step by estimator ``name`` and the (ds, dt) it stands on."""
    total = ds.sum()
    if name == "mean":
        return dt.sum() / total, ds, dt
    if name == "median":
        return _weighted_median(dt / ds, ds), ds, dt
    if name == "window":
        a = _tail(ds, max(window_frac * total, 1))
        return dt[a:].sum() / ds[a:].sum(), ds[a:], dt[a:]
    if name == "ewma":
        h = max(halflife_frac * total, 1.0)
        age = total - np.cumsum(ds) + ds / 2  # steps from the interval's middle to now
        w = 0.5 ** (age / h)
        return float((w * dt).sum() / (w * ds).sum()), ds, dt
    raise ConfigError(f"unknown estimator {name!r}; known: {', '.join(ESTIMATORS)}")


def _trend(blocks: np.ndarray) -> float:
    """Relative change of the pace from the first to the last block, when it moves one way (else 0)."""
    if len(blocks) < 5:
        return 0.0
    x = np.arange(len(blocks), dtype=float)
    a, b = np.polyfit(x, np.log(blocks), 1)
    fit = a * x + b
    resid = np.log(blocks) - fit
    se = math.sqrt(np.sum(resid**2) / max(len(x) - 2, 1) / np.sum((x - x.mean()) ** 2))
    return abs(math.expm1(a * (len(x) - 1))) if abs(a) > 3 * se else 0.0


def _count_ahead(last: int, period: int, step: int, total: int) -> int:
    """How many of last + j*period (j >= 0) lie in [step, total)."""
    if period <= 0:
        return 0
    j0 = max(0, -(-(step - last) // period))  # ceil
    j1 = (total - 1 - last) // period
    return max(0, j1 - j0 + 1)


def _future_pauses(pauses, iv: _Intervals, step: int, total: int, series: JobSeries, observed_steps: float):
    """Expected pause time over the remaining steps, and its standard deviation (s).

    Tagged pauses (an event inside) get a duration per kind by non-negative
    least squares (an interval may hold an epoch end and an evaluation); each
    kind recurs with its period (steps per epoch, or the spacing of its
    events). Untagged stalls recur with their period when regular, else as a
    rate per step.
    """
    from scipy.optimize import nnls

    kinds = ("epoch", "eval", "checkpoint")
    tagged = [(i, k.split("+"), e) for i, k, e in pauses if k != "other"]
    exp_s, var_s = 0.0, 0.0
    if tagged:
        X = np.array([[1.0 if kk in ks else 0.0 for kk in kinds] for _, ks, _ in tagged])
        y = np.array([e for _, _, e in tagged])
        d, _ = nnls(X, y)
        resid = y - X @ d
        for j, kind in enumerate(kinds):
            has = X[:, j] > 0
            if not has.any():
                continue  # never observed: its duration is unknown
            ev = sorted({e.step for e in series.events if _PAUSE_KIND.get(e.kind) == kind})
            if kind == "epoch" and series.steps_per_epoch:
                period = series.steps_per_epoch
                last = ev[-1] if ev else (step // period) * period
            elif ev:
                diffs = np.diff([0, *ev])
                period = int(np.median(diffs[diffs > 0])) if (diffs > 0).any() else 0
                last = ev[-1]
            else:
                continue
            n_future = _count_ahead(last, period, step, total)
            exp_s += n_future * d[j]
            sd = float(np.sqrt(np.mean(resid[has] ** 2))) if has.sum() >= 3 else 0.5 * d[j]
            var_s += (n_future * sd) ** 2
    other = [(int(iv.start[i]), e) for i, k, e in pauses if k == "other"]
    if other:
        occ = np.array([s for s, _ in other])
        durs = np.array([e for _, e in other])
        diffs = np.diff(occ)
        if len(other) >= 2 and np.std(diffs) <= 0.2 * np.mean(diffs):
            period = int(np.median(diffs))
            n_future = _count_ahead(int(occ[-1]) + period, period, step, total)
            exp_s += n_future * float(np.median(durs))
            sd = float(np.std(durs)) if len(durs) >= 3 else 0.5 * float(np.median(durs))
            var_s += (n_future * sd) ** 2
        else:  # irregular stalls: a rate per step
            per_step = float(durs.sum()) / max(observed_steps, 1.0)
            exp_s += per_step * (total - step)
            var_s += (per_step * (total - step)) ** 2
    return exp_s, math.sqrt(var_s)


def estimate_remaining(
    series: JobSeries,
    total_steps: int | None = None,
    estimator: str | None = None,
    *,
    window_frac: float = 0.3,
    halflife_frac: float = 0.15,
    tests: bool = False,
) -> RemainingEstimate:
    """Remaining wall time of the job whose records are ``series``.

    ``total_steps`` overrides the series' own. ``window_frac`` is the share of
    the steady steps the ``window`` average covers and ``halflife_frac`` the
    half-life of ``ewma`` in the same unit. ``tests`` runs ADF/KPSS.
    """
    estimator = estimator or DEFAULT_ESTIMATOR
    if estimator not in ESTIMATORS:
        raise ConfigError(f"unknown estimator {estimator!r}; known: {', '.join(ESTIMATORS)}")
    total = total_steps or series.total_steps
    if not total:
        raise ConfigError("the total number of steps is not known; pass it (--total-steps N or total_steps=N)")
    if total <= 0:
        raise ConfigError(f"total steps must be positive, got {total}")
    timed = series.timed()
    if len(timed.time_s) >= 2 and not float(np.max(timed.time_s)) > float(timed.time_s[0]):
        raise DataError(f"the log's times never pass its first (step {int(timed.steps[0])} at {timed.time_s[0]:g} s) "
                        f"up to step {int(timed.steps[-1])}: no speed to extrapolate; check its time column")
    if len(timed.steps) and int(timed.steps[-1]) > total:
        raise ConfigError(f"the log is already at step {int(timed.steps[-1])}, past the {total} total steps given")
    iv = _intervals(series)
    step = int(timed.steps[-1])
    t_last = float(np.max(timed.time_s))
    elapsed = t_last - float(timed.time_s[0])
    remaining_steps = max(int(total) - step, 0)
    nw, steady, pauses, m, _, warm = _split(iv)
    r_steady = iv.rate[steady]
    cov = float(np.std(r_steady) / np.mean(r_steady)) if len(r_steady) > 1 and np.mean(r_steady) > 0 else 0.0
    stat = stationarity(r_steady) if tests else None
    shift_rel = 0.0

    if estimator in ("naive", "naive_trim"):
        a = 0 if estimator == "naive" else nw
        usable = (iv.kind[a:] != "resume") & ~warm[a:] if estimator == "naive_trim" else iv.kind[a:] != "resume"
        if not usable.any():
            usable = iv.kind[a:] != "resume"
        tau = float(iv.dt[a:][usable].sum() / iv.ds[a:][usable].sum())
        blocks = _block_rates(iv.ds[a:][usable], iv.dt[a:][usable])
        fut, fut_sd = 0.0, 0.0
    elif estimator == "robust":
        # the pace since the last lasting change of pace (a new batch size, another job on the node), pauses
        # included as in naive_trim, warm-ups (at the start and after every resume) and resumes left out
        _, _, _, m_r, _, _, start = _split(iv, regime=True)
        after = np.arange(len(iv.ds)) >= start
        use = (iv.kind != "resume") & ~warm & after
        if not use.any():
            use = (iv.kind != "resume") & after
        if start > 0:
            before = (iv.kind != "resume") & ~warm & ~after
            if before.any():
                shift_rel = abs(m_r / (iv.dt[before].sum() / iv.ds[before].sum()) - 1.0)
        tau = float(iv.dt[use].sum() / iv.ds[use].sum())
        blocks = _block_rates(iv.ds[use], iv.dt[use])
        fut, fut_sd = 0.0, 0.0
    else:
        tau, ds_b, dt_b = _step_time(estimator, iv.ds[steady], iv.dt[steady], window_frac, halflife_frac)
        blocks = _block_rates(ds_b, dt_b)
        fut, fut_sd = _future_pauses(pauses, iv, step, int(total), series, float(iv.ds[nw:].sum()))
    if not (math.isfinite(tau) and tau > 0):
        raise DataError("no interval of the log gives a pace (every interval is a warm-up, a pause or a resume); "
                        "log more steps")
    rel = float(np.std(blocks) / np.mean(blocks)) if len(blocks) > 1 else 0.1
    rel = max(rel, 0.01)
    if estimator == "robust":
        # the band widens when the pace is not stationary: a change seen may come again, a trend goes on
        trend = _trend(blocks)
        rel = math.sqrt(rel**2 + shift_rel**2 + trend**2)
    rem = remaining_steps * tau + fut
    half = BAND_Z * math.hypot(remaining_steps * tau * rel, fut_sd)
    if remaining_steps == 0:
        rem, half, fut = 0.0, 0.0, 0.0
    rem, half = max(float(rem), 0.0), max(float(half), 0.0)
    return RemainingEstimate(
        estimator=estimator,
        step=step,
        total_steps=int(total),
        elapsed_s=elapsed,
        remaining_steps=remaining_steps,
        remaining_s=float(rem),
        low_s=float(max(rem - half, 0.0)),
        high_s=float(rem + half),
        step_time_s=float(tau),
        future_pause_s=float(fut),
        cov=cov,
        stationary=stat.stationary if stat else None,
        last_time_s=t_last,
    )


def eta_history(series: JobSeries, total_steps: int | None = None, estimator: str | None = None, points: int = 40):
    """Estimates made as the job went: a list of RemainingEstimate at growing prefixes."""
    timed = series.timed()
    if len(timed) < MIN_RECORDS:
        raise DataError(f"need at least {MIN_RECORDS} timed step records, found {len(timed)}")
    idx = np.unique(np.linspace(MIN_RECORDS - 1, len(timed) - 1, points).astype(int))
    out = []
    for i in idx:
        try:
            out.append(estimate_remaining(timed.upto(int(timed.steps[i])), total_steps, estimator))
        except DataError:
            continue
    return out


# ----------------------------------------------------------------- backtest
@dataclass(frozen=True)
class BacktestRow:
    job: str
    estimator: str
    fraction: float
    true_remaining_s: float
    remaining_s: float
    low_s: float
    high_s: float

    @property
    def rel_error(self) -> float:
        return abs(self.remaining_s - self.true_remaining_s) / self.true_remaining_s

    @property
    def covered(self) -> bool:
        return self.low_s <= self.true_remaining_s <= self.high_s


def backtest(
    jobs: list[JobSeries], estimators=ESTIMATORS, fractions=(0.1, 0.25, 0.5), **kwargs
) -> list[BacktestRow]:
    """Estimate each finished job's remaining time at ``fractions`` of its steps, vs the truth."""
    rows = []
    for j in jobs:
        timed = j.timed()
        total = int(j.total_steps or timed.steps[-1])
        t_end = float(timed.time_s[-1])
        for f in fractions:
            k = int(np.searchsorted(timed.steps, f * total, side="right")) - 1
            if k < MIN_RECORDS - 1:
                continue
            cut = timed.upto(int(timed.steps[k]))
            truth = t_end - float(timed.time_s[k])
            if truth <= 0:
                continue
            for e in estimators:
                est = estimate_remaining(cut, total, e, **kwargs)
                rows.append(BacktestRow(j.name, e, f, truth, est.remaining_s, est.low_s, est.high_s))
    return rows


def summarize_backtest(rows: list[BacktestRow]) -> dict[str, dict[float, dict[str, float]]]:
    """Per estimator and fraction: median and p90 relative error (%), band coverage (%)."""
    out: dict[str, dict[float, dict[str, float]]] = {}
    for e in sorted({r.estimator for r in rows}):
        out[e] = {}
        for f in sorted({r.fraction for r in rows}):
            sel = [r for r in rows if r.estimator == e and r.fraction == f]
            if not sel:
                continue
            err = np.array([r.rel_error for r in sel]) * 100
            out[e][f] = {
                "n": len(sel),
                "median_pct": float(np.median(err)),
                "mean_pct": float(np.mean(err)),
                "p90_pct": float(np.percentile(err, 90)),
                "coverage_pct": float(np.mean([r.covered for r in sel]) * 100),
            }
    return out
