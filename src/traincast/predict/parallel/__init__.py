"""Parallel training beyond one replica per GPU: tensor, pipeline, sharded data parallelism and their mixes.

- :mod:`.strategy`: the layout (:class:`ParallelConfig`) and the registries of shardings, schedules and
  recomputations; :func:`resolve` builds a layout from user options.
- :mod:`.layout`: what each traced op is to a strategy (its layer, its tensor-parallel role).
- :mod:`.engine`: one step of a layout (split ops, communication, schedule, memory).
- :mod:`.schedule`: pipeline schedules, simulated and in closed form.
- :mod:`.search`: every valid layout of a job, the fastest that fit (``traincast parallelize``).
"""

from traincast.predict.parallel.engine import ParallelModel, ParallelStep, evaluate, straggler_share
from traincast.predict.parallel.layout import ModelLayout, analyse
from traincast.predict.parallel.strategy import (
    CONTEXT_PARALLEL, RECOMPUTATIONS, SCHEDULES, SHARDINGS, ParallelConfig, parse_schedule, resolve,
)

__all__ = ["CONTEXT_PARALLEL", "ModelLayout", "ParallelConfig", "ParallelModel", "ParallelStep", "RECOMPUTATIONS", "SCHEDULES",
           "SHARDINGS", "analyse", "evaluate", "parse_schedule", "resolve", "straggler_share"]
