"""Predictors behind one interface, data-parallel communication, and job forecasts."""

from traincast.predict.analytical import AnalyticalPredictor
from traincast.predict.base import OpTimes, Predictor
from traincast.predict.comm import SYNC_METHODS, allreduce_s, gradient_sync
from traincast.predict.compose import Forecast, ScalingRow, StepTime, WorkloadFamily, forecast, step_time
from traincast.predict.registry import ADAPTATION_CHOICES, PREDICTORS, default_predictor, make_predictor

__all__ = [
    "ADAPTATION_CHOICES", "PREDICTORS", "default_predictor", "make_predictor",
    "AnalyticalPredictor", "Forecast", "OpTimes", "Predictor", "SYNC_METHODS", "ScalingRow", "StepTime",
    "WorkloadFamily", "allreduce_s", "forecast", "gradient_sync", "step_time",
]
