"""Time to accuracy (after Optimus, Peng et al. 2018).

- ``LossCurveModel``: the training loss as a function of the step,
  ``l(k) = 1/(β0·k + β1) + β2`` with β ≥ 0, fitted robustly (soft-L1) on the
  binned curve; ``steps_to_target`` with a residual-bootstrap interval.
  ``form="power"`` fits ``l(k) = β2 + a·(k/K + d)^-α`` instead, for comparison.
- ``SpeedModel``: Optimus's speed of a parameter-server job with ``p`` servers
  and ``w`` workers: synchronous (Eq. 4) ``f = (θ0·M/w + θ1 + θ2·w/p + θ3·w +
  θ4·p)^-1`` (M the global batch), asynchronous ``f = w·(θ0 + θ1·w/p + θ2·w +
  θ3·p)^-1``; θ ≥ 0 by non-negative least squares.
- ``time_to_target``: steps to target / speed.
- ``converge``: the schedule-aware forecast ``traincast converge`` makes
  (``traincast.online.curves``: forms in the cumulative learning rate with an
  annealing term, averaged by rolling-origin backtests, 80% band), with the
  schedule from ``--lr-schedule`` or the logged learning rate.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from traincast.errors import ConfigError, DataError

MIN_POINTS = 8
FORMS = ("optimus", "power", "auto")
HOLDOUT_FRAC = 0.3  # form="auto": the last 30% of the points seen judge the candidate forms


@dataclass(frozen=True)
class StepsToTarget:
    target_loss: float
    steps: float  # inf when the fitted floor β2 is above the target
    low: float
    high: float
    reachable_fraction: float  # share of bootstrap fits that reach the target
    current_step: int


def _bin(steps: np.ndarray, losses: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    if len(steps) <= max_points:
        return steps.astype(float), losses.astype(float)
    edges = np.linspace(steps.min(), steps.max() + 1e-9, max_points + 1)
    idx = np.digitize(steps, edges) - 1
    xs, ys = [], []
    for b in range(max_points):
        m = idx == b
        if m.any():
            xs.append(float(np.median(steps[m])))
            ys.append(float(np.median(losses[m])))
    return np.array(xs), np.array(ys)


class LossCurveModel:
    """Optimus loss model ``l(k) = 1/(β0·k + β1) + β2`` (sklearn-style).

    Fitted attributes: ``beta_`` (β0, β1, β2), ``k_scale_``, ``noise_``,
    ``x_``/``y_`` (the binned points fitted), ``last_step_``.
    """

    def __init__(
        self, form: str = "optimus", log_space: bool = False, max_points: int = 200, robust: bool = True, skip_frac: float = 0.0
    ):
        if form not in FORMS:
            raise ConfigError(f"unknown loss-curve form {form!r}; known: {', '.join(FORMS)}")
        self.form = form
        self.form_ = form if form != "auto" else None
        self.log_space = log_space
        self.max_points = max_points
        self.robust = robust
        self.skip_frac = skip_frac

    # -- model functions on normalised steps x = k / k_scale
    def _f(self, p, x):
        if self.form_ == "optimus":
            a, b, c = p
            return 1.0 / (a * x + b) + c
        a, d, alpha, c = p
        return c + a * (x + d) ** (-alpha)

    def _fit_xy(self, x, y, p0=None):
        from scipy.optimize import least_squares

        lo_y, hi_y = float(np.min(y)), float(np.max(y))
        span = max(hi_y - lo_y, 1e-12)
        log = self.log_space and lo_y > 0
        yt = np.log(y) if log else y
        noise = float(np.median(np.abs(np.diff(yt)))) / math.sqrt(2) * 1.4826 if len(y) > 2 else 0.01
        f_scale = max(noise, (np.ptp(yt) or 1.0) * 1e-4)

        def resid(p):
            fx = self._f(p, x)
            return (np.log(np.maximum(fx, 1e-300)) if log else fx) - yt

        best = None
        if self.form_ == "optimus":
            bounds = ([0.0, 1e-9, 0.0], [np.inf, np.inf, max(lo_y, 0.0)])
            inits = []
            for frac in (0.0, 0.5, 0.9):
                c0 = frac * max(lo_y, 0.0)
                b0 = 1.0 / max(y[0] - c0, 1e-9)
                a0 = max(1.0 / max(y[-1] - c0, 1e-9) - b0, 1e-6) / max(x[-1], 1e-9)
                inits.append([a0, b0, c0])
        else:
            bounds = ([0.0, 1e-4, 0.05, 0.0], [np.inf, 10.0, 5.0, max(lo_y, 0.0)])
            inits = [
                [max(lo_y - frac * max(lo_y, 0.0), 1e-6), 0.05, alpha, frac * max(lo_y, 0.0)]
                for frac in (0.0, 0.5, 0.9)
                for alpha in (0.5, 1.5)
            ]
        if p0 is not None:  # a warm start (bootstrap refits)
            inits = [p0]
        for p0 in inits:
            p0 = np.clip(p0, bounds[0], np.array(bounds[1]) - 1e-12)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    r = least_squares(
                        resid,
                        p0,
                        bounds=bounds,
                        loss="soft_l1" if self.robust else "linear",
                        f_scale=f_scale,
                        max_nfev=2000,
                    )
                except (ValueError, FloatingPointError):
                    continue
            if np.all(np.isfinite(r.x)) and (best is None or r.cost < best.cost):
                best = r
        if best is None:
            raise DataError("the loss curve could not be fitted; check that the losses are finite numbers")
        return best.x, noise

    def fit(self, steps, losses) -> LossCurveModel:
        steps = np.asarray(steps, dtype=float)
        losses = np.asarray(losses, dtype=float)
        ok = np.isfinite(steps) & np.isfinite(losses)
        steps, losses = steps[ok], losses[ok]
        if self.skip_frac:
            keep = steps >= self.skip_frac * steps.max()
            steps, losses = steps[keep], losses[keep]
        if len(steps) < MIN_POINTS:
            raise DataError(f"need at least {MIN_POINTS} (step, loss) points to fit the loss curve, found {len(steps)}")
        o = np.argsort(steps)
        x, y = _bin(steps[o], losses[o], self.max_points)
        self.k_scale_ = float(max(x.max(), 1.0))
        if self.form == "auto":
            self.form_ = self._choose_form(x / self.k_scale_, y)
        self.params_, self.noise_ = self._fit_xy(x / self.k_scale_, y)
        self.x_, self.y_ = x, y
        self.last_step_ = int(steps.max())
        if self.form_ == "optimus":
            a, b, c = self.params_
            self.beta_ = (float(a / self.k_scale_), float(b), float(c))
        else:
            self.beta_ = None
        return self

    def _check(self):
        if not hasattr(self, "params_"):
            raise ConfigError("the loss-curve model is not fitted yet; call fit(steps, losses) first")

    def predict(self, steps) -> np.ndarray:
        self._check()
        return self._f(self.params_, np.asarray(steps, dtype=float) / self.k_scale_)

    def floor_loss(self) -> float:
        self._check()
        return float(self.params_[-1])

    def score(self, steps, losses) -> float:
        """R² on (steps, losses)."""
        y = np.asarray(losses, dtype=float)
        p = self.predict(steps)
        return float(1 - np.sum((y - p) ** 2) / max(np.sum((y - y.mean()) ** 2), 1e-300))

    def _choose_form(self, x, y) -> str:
        """The form that best extrapolates from the first 70% of the points to the rest."""
        n_fit = max(int(len(x) * (1 - HOLDOUT_FRAC)), MIN_POINTS)
        if len(x) - n_fit < 3:
            return "optimus"
        errs = {}
        for form in ("optimus", "power"):
            self.form_ = form
            try:
                p, _ = self._fit_xy(x[:n_fit], y[:n_fit])
            except DataError:
                continue
            pred = self._f(p, x[n_fit:])
            if self.log_space and np.all(y > 0):
                e = np.abs(np.log(np.maximum(pred, 1e-300)) - np.log(y[n_fit:]))
            else:
                e = np.abs(pred - y[n_fit:])
            errs[form] = float(np.median(e))
        return min(errs, key=errs.get) if errs else "optimus"

    def _steps_for(self, params, target) -> float:
        if self.form_ == "optimus":
            a, b, c = params
            if target <= c or a <= 0:
                return math.inf
            x = (1.0 / (target - c) - b) / a
        else:
            a, d, alpha, c = params
            if target <= c or a <= 0:
                return math.inf
            x = ((target - c) / a) ** (-1.0 / alpha) - d
        return max(x, 0.0) * self.k_scale_

    def steps_to_target(self, target_loss: float, n_boot: int = 100, seed: int = 0, level: float = 0.9) -> StepsToTarget:
        """Step at which the fitted curve reaches ``target_loss``, with a bootstrap interval."""
        self._check()
        if not (isinstance(target_loss, (int, float)) and math.isfinite(target_loss)):
            raise ConfigError(f"target loss must be a finite number, got {target_loss!r}")
        point = self._steps_for(self.params_, target_loss)
        rng = np.random.default_rng(seed)
        xn = self.x_ / self.k_scale_
        fitted = self._f(self.params_, xn)
        log = self.log_space and np.all(self.y_ > 0) and np.all(fitted > 0)
        resid = np.log(self.y_) - np.log(fitted) if log else self.y_ - fitted
        boots = []
        for _ in range(n_boot):
            e = rng.choice(resid, size=len(resid), replace=True)
            yb = fitted * np.exp(e) if log else fitted + e
            try:
                pb, _ = self._fit_xy(xn, yb, self.params_)
            except DataError:
                continue
            boots.append(self._steps_for(pb, target_loss))
        boots = np.array(boots) if boots else np.array([point])
        q = (1 - level) / 2
        srt = np.sort(boots)  # order statistics: quantiles that stay defined with infinite draws
        lo, hi = srt[int(math.floor(q * (len(srt) - 1)))], srt[int(math.ceil((1 - q) * (len(srt) - 1)))]
        return StepsToTarget(
            float(target_loss), float(point), float(lo), float(hi), float(np.mean(np.isfinite(boots))), self.last_step_
        )


class SpeedModel:
    """Optimus speed model f(p, w) in steps per second (sklearn-style; ``theta_`` fitted)."""

    def __init__(self, mode: str = "sync", global_batch: int | None = None):
        if mode not in ("sync", "async"):
            raise ConfigError(f"unknown speed-model mode {mode!r}; known: sync, async")
        if mode == "sync" and not global_batch:
            raise ConfigError("the synchronous speed model needs the global batch size M (global_batch=...)")
        self.mode = mode
        self.global_batch = global_batch

    def _features(self, p, w):
        p = np.asarray(p, dtype=float)
        w = np.asarray(w, dtype=float)
        if np.any(p <= 0) or np.any(w <= 0):
            raise ConfigError("parameter servers p and workers w must be positive")
        if self.mode == "sync":
            return np.column_stack([self.global_batch / w, np.ones_like(w), w / p, w, p])
        return np.column_stack([np.ones_like(w), w / p, w, p])

    def fit(self, p, w, speed_steps_per_s) -> SpeedModel:
        from scipy.optimize import nnls

        f = np.asarray(speed_steps_per_s, dtype=float)
        if np.any(f <= 0) or len(f) < 2:
            raise DataError("need at least 2 positive speed measurements to fit the speed model")
        X = self._features(p, w)
        y = 1.0 / f if self.mode == "sync" else np.asarray(w, dtype=float) / f
        # relative least squares: divide each row by its target
        self.theta_, _ = nnls(X / y[:, None], np.ones_like(y))
        return self

    def predict(self, p, w) -> np.ndarray:
        if not hasattr(self, "theta_"):
            raise ConfigError("the speed model is not fitted yet; call fit(p, w, speed) first")
        denom = self._features(p, w) @ self.theta_
        if self.mode == "sync":
            return 1.0 / denom
        return np.asarray(w, dtype=float) / denom


@dataclass(frozen=True)
class TimeToTarget:
    target_loss: float
    steps_left: float
    time_s: float
    low_s: float
    high_s: float


def time_to_target(stt: StepsToTarget, step_time_s: float) -> TimeToTarget:
    """Combine steps to target with a time per step (measured, or 1/SpeedModel.predict)."""
    if not step_time_s > 0:
        raise ConfigError(f"time per step must be positive, got {step_time_s!r}")

    def left(k):
        return max(k - stt.current_step, 0.0) if math.isfinite(k) else math.inf

    return TimeToTarget(
        stt.target_loss, left(stt.steps), left(stt.steps) * step_time_s, left(stt.low) * step_time_s, left(stt.high) * step_time_s
    )


# ------------------------------------------------------------ schedule-aware
@dataclass(frozen=True)
class ConvergeResult:
    """What ``traincast converge`` answers: the forecast, the schedule used, warnings, time to target."""

    forecast: object  # curves.ConvergenceForecast
    schedule: str | None
    schedule_source: str  # "given" | "logged" | "none"
    warnings: tuple[str, ...]
    step_time_s: float | None
    time_to_target: TimeToTarget | None
    draws: object = None  # curves.CurveDraws (for plots); None when the target was already reached
    epochs: dict | None = None  # epochs_dict: the passes over the data the forecast knows of


def resolve_schedule(series, lr_schedule: str | None = None, total_steps: int | None = None):
    """The learning-rate schedule of a job: ``lr_schedule`` (a spec) if given, else its logged learning rate.

    Returns (schedule or None, source, warnings). A logged learning rate that contradicts the
    given schedule is a warning, not an error: the logged values are used for the past.
    """
    from traincast.online.schedule import Schedule, check_against_log, parse_schedule

    total = total_steps or series.total_steps
    warns: list[str] = []
    lr = getattr(series, "lr", None)
    has_lr = lr is not None and np.isfinite(lr).sum() >= 2
    if lr_schedule is not None:
        sched = parse_schedule(lr_schedule, total)
        if has_lr:
            ok = np.isfinite(lr)
            w = check_against_log(sched, series.steps[ok], lr[ok])
            if w:
                warns.append(w)
                logged = Schedule.from_logged(series.steps[ok], lr[ok], total)
                last = float(series.steps[ok].max())
                given = sched

                def fn(k, logged=logged, given=given, last=last):
                    k = np.asarray(k, dtype=float)
                    return np.where(k <= last, logged.lr(k), given.lr(k))

                sched = Schedule(f"{given.spec} (logged before step {int(last)})", fn, given.total_steps or total)
        return sched, "given", tuple(warns)
    if has_lr:
        ok = np.isfinite(lr)
        sched = Schedule.from_logged(series.steps[ok], lr[ok], total)
        if sched.note and not sched.future_known:
            warns.append(sched.note)
        return sched, "logged", tuple(warns)
    return None, "none", ()


# The loss model drops at each epoch boundary (curves.EpochDrops); until a drop is measured, by a prior.
EPOCH_NOTE = ("the run starts epoch {next_epoch} of {epochs} at step {step:,}: a fine-tune's training loss often "
              "drops when its data come round again (by up to about 2x across those of public fine-tunes); until a "
              "drop is measured at a logged boundary ({why}) the forecast assumes about {prior:.2f}x a pass (a wide "
              "prior); if this run's loss does not drop when its data repeat, pass --steps-per-epoch 0")


def _epochs(series, total: int | None):
    """The run's passes over its data as the forecast sees them (curves.EpochDrops), or None (one pass, unknown)."""
    from traincast.online import curves

    if not total:
        return None
    return curves.EpochDrops.of(series.steps, series.loss, series.steps_per_epoch, total)


def epochs_dict(ep) -> dict | None:
    """What ``converge --json`` says of the epochs: steps a pass, passes done, the drop a pass and where it is from."""
    from traincast.online import curves

    if ep is None:
        return None
    g = ep.g_seen if ep.g_seen is not None else curves.EPOCH_PRIOR_G
    return {"steps_per_epoch": ep.steps_per_epoch, "passes_done": ep.now, "drop_per_pass": math.exp(g),
            "drop_source": "measured" if ep.g_seen is not None else "prior (median)"}


def _epoch_notes(ep, fc, total: int | None) -> list[str]:
    """A note when the forecast runs across epoch boundaries (``ep``: :func:`_epochs`) while the drop per pass is
    still the prior's."""
    from traincast.online import curves

    if ep is None or ep.g_seen is not None or fc.status == "reached":
        return []
    spe = ep.steps_per_epoch
    nxt = (ep.now + 1) * spe
    if nxt >= total:
        return []
    why = "none passed yet" if ep.now == 0 else "the log is too coarse around those passed"
    return [EPOCH_NOTE.format(next_epoch=ep.now + 2, epochs=math.ceil(total / spe), step=int(nxt), why=why,
                              prior=math.exp(curves.EPOCH_PRIOR_G))]


def converge(
    series, target_loss: float, lr_schedule: str | None = None, total_steps: int | None = None, *,
    form: str = "auto", n_draws: int = 120, seed: int = 0, step_time_s: float | None = None,
) -> ConvergeResult:
    """When the loss of ``series`` (a JobSeries) reaches ``target_loss``: steps, 80% band, time.

    The schedule comes from ``lr_schedule`` (a spec, see ``traincast.online.schedule``) or the
    logged learning rate; ``form`` is ``auto`` (the average of all forms) or one form's name
    (``traincast.online.curves.FORMS``). The time per step is measured from the series unless given.
    """
    from traincast.online import curves

    if not (isinstance(target_loss, (int, float)) and math.isfinite(target_loss)):
        raise ConfigError(f"target loss must be a finite number, got {target_loss!r}")
    if form != "auto" and form not in curves.FORMS:
        from traincast.errors import UnknownNameError

        raise UnknownNameError("loss-curve form", form, ["auto", *curves.FORMS])
    ok = np.isfinite(series.loss)
    if ok.sum() == 0:
        raise DataError(f"job/log {series.name!r} has no loss values; log the training loss to fit its curve")
    total = total_steps or series.total_steps
    sched, source, warns = resolve_schedule(series, lr_schedule, total)
    if total is None and sched is not None and sched.total_steps:
        total = sched.total_steps
    if form == "mpl" and sched is None:
        raise ConfigError("form 'mpl' needs a learning-rate schedule: pass --lr-schedule or log the learning rate")
    forms = None if form == "auto" else [form]
    k, y = series.steps[ok].astype(float), series.loss[ok]
    (fc,), draws = curves.forecast_many(k, y, [target_loss], sched, total, n_draws=n_draws, seed=seed, forms=forms,
                                        return_draws=True, steps_per_epoch=series.steps_per_epoch)
    ep = _epochs(series, total)
    warns = [*warns, *_epoch_notes(ep, fc, total)]
    tau = step_time_s
    if tau is None:
        from traincast.online.estimate import estimate_remaining

        try:
            tau = estimate_remaining(series, int(series.steps.max()) + 1).step_time_s
        except (DataError, ConfigError):
            tau = None
    ttt = None
    if tau:
        stt = StepsToTarget(fc.target_loss, fc.steps, fc.low, fc.high, fc.reach_probability, fc.current_step)
        ttt = time_to_target(stt, tau)
    return ConvergeResult(fc, sched.spec if sched is not None else None, source,
                          tuple(dict.fromkeys(tuple(warns) + fc.notes)), tau, ttt, draws,  # each said once
                          epochs_dict(ep))
