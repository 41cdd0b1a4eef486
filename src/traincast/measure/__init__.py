"""Measurements on this machine: timers, layer campaigns, whole steps, data-parallel runs.

    >>> from traincast.measure import time_fn, measure_op, run_campaign, time_model, time_ddp

See docs/measure.md for the stored tables and what each figure means.
"""

from traincast.measure.fingerprint import Fingerprint
from traincast.measure.fingerprint import fingerprint as collect_fingerprint
from traincast.measure.layers import (
    PHASES,
    SIZES,
    CampaignConfig,
    CampaignResult,
    LayerSample,
    OpCost,
    draw_config,
    load_samples,
    measure_op,
    op_cost,
    run_campaign,
)
from traincast.measure.ops import GROUPS, OPS, resolve_ops
from traincast.measure.records import open_store, save_fingerprint, select_rows
from traincast.measure.timing import (
    QUICK,
    CpuClock,
    CudaClock,
    Timing,
    TimingPolicy,
    check_device,
    pinned_threads,
    summarize,
    time_fn,
)


def __getattr__(name):  # heavier modules on first use
    if name in ("time_model", "time_step", "profile_step", "ModelTiming", "Breakdown", "save_model_timing", "aten_key",
                "load_model_timings", "dispatch_names"):
        from traincast.measure import model

        return getattr(model, name)
    if name in ("time_ddp", "DDPTiming", "save_ddp_timing", "tiny_mlp_step", "wrap_ddp", "load_ddp_timings"):
        from traincast.measure import ddp

        return getattr(ddp, name)
    raise AttributeError(f"module 'traincast.measure' has no attribute {name!r}")


__all__ = [
    "PHASES", "SIZES", "GROUPS", "OPS", "QUICK",
    "Fingerprint", "collect_fingerprint", "CampaignConfig", "CampaignResult", "LayerSample", "OpCost",
    "draw_config", "load_samples", "measure_op", "op_cost", "run_campaign", "resolve_ops",
    "open_store", "save_fingerprint", "CpuClock", "CudaClock", "Timing", "TimingPolicy", "check_device",
    "pinned_threads", "summarize", "time_fn",
    "time_model", "time_step", "profile_step", "ModelTiming", "Breakdown", "save_model_timing", "aten_key",
    "time_ddp", "DDPTiming", "save_ddp_timing", "tiny_mlp_step", "wrap_ddp",
    "load_model_timings", "load_ddp_timings", "dispatch_names", "select_rows",
]
