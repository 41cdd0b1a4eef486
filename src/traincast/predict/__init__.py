"""Predictors behind one interface, data-parallel communication, and job forecasts."""

from traincast.predict.analytical import AnalyticalPredictor
from traincast.predict.base import OpTimes, Predictor
from traincast.predict.comm import SYNC_METHODS, allreduce_s, gradient_sync
from traincast.predict.compose import Forecast, ScalingRow, StepTime, WorkloadFamily, forecast, step_time

PREDICTORS = ("analytical", "learned", "auto")


def make_predictor(name: str, device=None):
    """``analytical``, ``learned`` (shipped per-op model), or ``auto``: learned where it
    covers ``device``, analytical otherwise. Returns the predictor."""
    from traincast.errors import UnknownNameError

    if name == "analytical":
        return AnalyticalPredictor()
    if name not in ("learned", "auto"):
        raise UnknownNameError("predictor", name, PREDICTORS)
    from traincast.predict.learned import LearnedPredictor

    learned = LearnedPredictor.load_default()
    if name == "auto" and device is not None and not learned.covers(device):
        return AnalyticalPredictor()
    return learned


__all__ = [
    "PREDICTORS", "make_predictor",
    "AnalyticalPredictor", "Forecast", "OpTimes", "Predictor", "SYNC_METHODS", "ScalingRow", "StepTime",
    "WorkloadFamily", "allreduce_s", "forecast", "gradient_sync", "step_time",
]
