"""Remaining time (and cost) if a running job moved to other hardware now.

The measured speed is scaled by the ratio the predictor gives between the
current and the target configuration (``speed_ratio`` = target time per step /
current time per step; below 1 is faster). ``traincast.predict`` supplies the
ratio; here it is an input.
"""

from __future__ import annotations

from dataclasses import dataclass

from traincast.errors import ConfigError
from traincast.online.estimate import RemainingEstimate


@dataclass(frozen=True)
class MoveEstimate:
    target: str
    speed_ratio: float
    remaining_s: float
    low_s: float
    high_s: float
    restart_overhead_s: float = 0.0
    price_usd_per_hour: float | None = None
    cost_usd: float | None = None
    cost_low_usd: float | None = None
    cost_high_usd: float | None = None


def remaining_on_other_hardware(
    estimate: RemainingEstimate,
    speed_ratio: float,
    price_usd_per_hour: float | None = None,
    *,
    restart_overhead_s: float = 0.0,
    target: str = "target",
) -> MoveEstimate:
    """Scale ``estimate`` (steps and pauses alike) by ``speed_ratio``; add a restart overhead; price it."""
    if not (isinstance(speed_ratio, (int, float)) and speed_ratio > 0):
        raise ConfigError(f"speed ratio must be a positive number (target time per step / current), got {speed_ratio!r}")
    if price_usd_per_hour is not None and price_usd_per_hour < 0:
        raise ConfigError(f"price must be >= 0 $/hour, got {price_usd_per_hour!r}")
    if restart_overhead_s < 0:
        raise ConfigError(f"restart overhead must be >= 0 s, got {restart_overhead_s!r}")
    rem = estimate.remaining_s * speed_ratio + restart_overhead_s
    lo = estimate.low_s * speed_ratio + restart_overhead_s
    hi = estimate.high_s * speed_ratio + restart_overhead_s
    cost = lambda s: None if price_usd_per_hour is None else s / 3600.0 * price_usd_per_hour  # noqa: E731
    return MoveEstimate(target, float(speed_ratio), rem, lo, hi, restart_overhead_s, price_usd_per_hour, cost(rem), cost(lo), cost(hi))
