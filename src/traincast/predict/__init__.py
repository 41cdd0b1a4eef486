"""Predictors behind one interface, data-parallel communication, and job forecasts."""

from traincast.predict.analytical import AnalyticalPredictor
from traincast.predict.base import OpTimes, Predictor
from traincast.predict.comm import SYNC_METHODS, allreduce_s, gradient_sync
from traincast.predict.compose import Forecast, ScalingRow, StepTime, WorkloadFamily, forecast, step_time

PREDICTORS = ("analytical", "learned", "auto")


def make_predictor(name: str, device=None, adaptation: str | None = "auto"):
    """``analytical``, ``learned`` (shipped per-op model), or ``auto``: learned where it
    covers ``device``, analytical otherwise. Returns the predictor.

    ``adaptation`` (learned only): ``auto`` applies the adaptation ``traincast fit adapt`` saved for
    ``device`` if there is one, ``none`` (or None) none, anything else is an adaptation file, which must be
    of ``device``."""
    from traincast.errors import ConfigError, DataError, UnknownNameError

    if name == "analytical":
        return AnalyticalPredictor()
    if name not in ("learned", "auto"):
        raise UnknownNameError("predictor", name, PREDICTORS)
    from traincast.predict.learned import LearnedPredictor

    learned = LearnedPredictor.load_default()
    if name == "auto" and device is not None and not learned.covers(device):
        return AnalyticalPredictor()
    if adaptation in (None, "none") or device is None:
        return learned
    from traincast.fit.adapt import GpuAdaptation, find_adaptation

    if adaptation == "auto":
        a = find_adaptation(device.name)
        if a is None:
            return learned
        try:
            return learned.with_adaptation(a)
        except DataError as exc:
            raise DataError(f"{exc} (or leave it out with --adaptation none)") from None
    a = GpuAdaptation.load(adaptation)
    if a.gpu != device.name:
        raise ConfigError(f"the adaptation {adaptation!r} is for {a.gpu}, not {device.name}")
    return learned.with_adaptation(a)


__all__ = [
    "PREDICTORS", "make_predictor",
    "AnalyticalPredictor", "Forecast", "OpTimes", "Predictor", "SYNC_METHODS", "ScalingRow", "StepTime",
    "WorkloadFamily", "allreduce_s", "forecast", "gradient_sync", "step_time",
]
