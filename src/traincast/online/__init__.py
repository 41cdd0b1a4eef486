"""Forecasts for running jobs: recorder and adapters, log parsers, remaining
time (AI Gauge), loss-curve and speed models (Optimus).

Framework adapters live in ``traincast.online.adapters.{huggingface,lightning,keras}``
and import their framework only when imported themselves.
"""

from traincast.online.converge import LossCurveModel, SpeedModel, StepsToTarget, TimeToTarget, time_to_target
from traincast.online.estimate import (
    DEFAULT_ESTIMATOR,
    ESTIMATORS,
    BacktestRow,
    RemainingEstimate,
    SeriesAnalysis,
    analyze,
    backtest,
    estimate_remaining,
    eta_history,
    summarize_backtest,
)
from traincast.online.jobs import get_job, list_jobs, load_series, save_parsed
from traincast.online.move import MoveEstimate, remaining_on_other_hardware
from traincast.online.parsers import FORMATS, detect_format, parse_log, parse_text
from traincast.online.records import Event, JobInfo, JobSeries, ParsedLog, StepRecord
from traincast.online.recorder import Tracker, track

__all__ = [
    "DEFAULT_ESTIMATOR",
    "ESTIMATORS",
    "FORMATS",
    "BacktestRow",
    "Event",
    "JobInfo",
    "JobSeries",
    "LossCurveModel",
    "MoveEstimate",
    "ParsedLog",
    "RemainingEstimate",
    "SeriesAnalysis",
    "SpeedModel",
    "StepRecord",
    "StepsToTarget",
    "TimeToTarget",
    "Tracker",
    "analyze",
    "backtest",
    "detect_format",
    "estimate_remaining",
    "eta_history",
    "get_job",
    "list_jobs",
    "load_series",
    "parse_log",
    "parse_text",
    "remaining_on_other_hardware",
    "save_parsed",
    "summarize_backtest",
    "time_to_target",
    "track",
]
