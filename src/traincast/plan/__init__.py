"""Planning: which hardware for one job, and capacity planning + scheduling for many.

Many jobs (``traincast simulate``):

- ``traincast.plan.scenario``: scenario files (VM types, job classes, Poisson
  arrivals, deadlines, tardiness weights); ``load_scenario("ardagna2019")``.
- ``traincast.plan.durations``: job durations per (VM type, GPUs) from
  traincast's forecasts, tables or estimates; ``OptionTable``.
- ``traincast.plan.simulate``: the event simulator (``simulate``) and the
  replicated policy comparison (``compare``).
- ``traincast.plan.policies``: FIFO, EDF, priority rules and the greedy placer.
- ``traincast.plan.milp``: the optimising policy (MILP, HiGHS via scipy).

Submodules are imported on use; importing this package stays cheap.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "load_scenario": "traincast.plan.scenario",
    "parse_scenario": "traincast.plan.scenario",
    "Scenario": "traincast.plan.scenario",
    "compare": "traincast.plan.simulate",
    "make_policy": "traincast.plan.policies",
    "MilpPolicy": "traincast.plan.milp",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'traincast.plan' has no attribute {name!r}")
