"""Scheduling policies: the rules (FIFO, EDF, priority) and the greedy placer.

A policy sees the cluster at an event (``ClusterState``) and returns the jobs to
start now as ``Placement`` records; it never changes the state itself. Jobs do
not migrate and are not pre-empted once started.

Rules, after the first-principle baselines of Jahani et al. (ICCCS 2019):
the queue is ordered (FIFO by arrival, EDF by deadline, priority by tardiness
weight) and served strictly in that order (the head blocks the queue when it
cannot start); the forecast picks each job's VM type and GPU count - the
cheapest option that meets the deadline, else the one with least tardiness.
By default each job gets a VM of its own (``pack=False``, as the talk's rules);
``pack=True`` (names ``fifo-pack`` ...) also lets a job use free GPUs of an
active VM, charged only for the time it keeps the VM up longer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from traincast.errors import UnknownNameError
from traincast.plan.durations import Option, OptionTable
from traincast.plan.scenario import Job, VMType
from traincast.registry import Registry


@dataclass(frozen=True)
class Placement:
    """Start job ``job_id`` now on node ``node`` (a VM of type ``vm``) with ``gpus`` GPUs."""

    job_id: int
    node: int
    vm: str
    gpus: int
    duration_s: float


@dataclass
class NodeState:
    """One node slot. ``vm`` is None while the node is off (not paid)."""

    index: int
    vm: VMType | None = None
    free_gpus: int = 0
    busy_until_s: float = 0.0
    active_since_s: float = 0.0
    running: dict[int, tuple[int, float]] = field(default_factory=dict)  # job -> (gpus, end_s)


@dataclass
class ClusterState:
    """What a policy sees at an event. Policies must treat it as read-only."""

    now_s: float
    waiting: list[Job]
    nodes: list[NodeState]
    table: OptionTable
    running_jobs: dict[int, Job] = field(default_factory=dict)

    def options(self, job: Job) -> tuple[Option, ...]:
        return self.table.options(job.job_class)

    def active_count(self, vm_name: str) -> int:
        return sum(1 for n in self.nodes if n.vm is not None and n.vm.name == vm_name)


class Policy(Protocol):
    name: str
    period_s: float | None  # re-plan every period_s while jobs wait (None: only on events)

    def decide(self, state: ClusterState) -> list[Placement]: ...


def tardiness_s(finish_s: float, job: Job) -> float:
    return max(0.0, finish_s - job.deadline_s)


def greedy_place(state: ClusterState, ordered: Sequence[Job], *, pack: bool,
                 strict: bool = True) -> list[Placement]:
    """Serve ``ordered`` jobs one by one, each on its best option now.

    Best = least tardiness, then least cost, then shortest. Cost is the whole
    VM's price x duration on a fresh VM, or, when packing onto an active VM,
    its price x the time the job keeps the VM up beyond its current end.
    With ``strict`` the first job that cannot start stops the pass (no
    overtaking); otherwise later jobs may start around it (back-filling).
    """
    now = state.now_s
    free = {n.index: n.free_gpus for n in state.nodes if n.vm is not None}
    busy = {n.index: n.busy_until_s for n in state.nodes if n.vm is not None}
    vm_of = {n.index: n.vm for n in state.nodes if n.vm is not None}
    empty = [n.index for n in state.nodes if n.vm is None]
    counts: dict[str, int] = {}
    for v in vm_of.values():
        counts[v.name] = counts.get(v.name, 0) + 1
    used_alone: set[int] = set()  # nodes started by this pass for unpacked rules
    out: list[Placement] = []
    for job in ordered:
        best = None
        best_key = None
        for opt in state.options(job):
            vm = opt.vm
            finish = now + opt.duration_s
            tard = tardiness_s(finish, job)
            if pack:
                for idx, f in free.items():
                    if f >= opt.gpus and vm_of[idx].name == vm.name:
                        cost = vm.usd_per_s * max(0.0, finish - busy[idx])
                        key = (tard, cost, opt.duration_s, f - opt.gpus)
                        if best_key is None or key < best_key:
                            best_key, best = key, (opt, idx)
            if empty and (vm.max_count is None or counts.get(vm.name, 0) < vm.max_count):
                key = (tard, opt.alone_cost_usd, opt.duration_s, vm.gpus - opt.gpus)
                if best_key is None or key < best_key:
                    best_key, best = key, (opt, None)
        if best is None:
            if strict:
                break
            continue
        opt, idx = best
        if idx is None:
            idx = empty.pop(0)
            vm_of[idx] = opt.vm
            free[idx] = opt.vm.gpus
            busy[idx] = now
            counts[opt.vm.name] = counts.get(opt.vm.name, 0) + 1
            if not pack:
                used_alone.add(idx)
        free[idx] -= opt.gpus
        busy[idx] = max(busy[idx], now + opt.duration_s)
        if not pack:
            free[idx] = 0  # one job per VM: the rest of the VM stays unused
        out.append(Placement(job.id, idx, opt.vm.name, opt.gpus, opt.duration_s))
    return out


_ORDERS: dict[str, Callable[[Job], tuple]] = {
    "fifo": lambda j: (j.arrival_s, j.id),
    "edf": lambda j: (j.deadline_s, j.arrival_s, j.id),
    "priority": lambda j: (-j.weight_usd_per_h, j.deadline_s, j.id),
}


class RulePolicy:
    """A queue order + the forecast choosing VM type and GPUs for each job."""

    period_s = None

    def __init__(self, order: str, *, pack: bool = False):
        if order not in _ORDERS:
            raise UnknownNameError("rule", order, _ORDERS)
        self.order = order
        self.pack = pack
        self.name = order + ("-pack" if pack else "")
        self._key = _ORDERS[order]

    def decide(self, state: ClusterState) -> list[Placement]:
        return greedy_place(state, sorted(state.waiting, key=self._key), pack=self.pack)


# name -> factory(**milp_options) -> a fresh policy
POLICIES: Registry = Registry("policy")
_RULE_HELP = {"fifo": "first in, first out", "edf": "earliest deadline first",
              "priority": "highest tardiness weight first"}
for _order, _help in _RULE_HELP.items():
    POLICIES.add(_order, lambda _o=_order, **_: RulePolicy(_o), help=f"{_help}, one job per VM")
    POLICIES.add(f"{_order}-pack", lambda _o=_order, **_: RulePolicy(_o, pack=True),
                 help=f"{_help}, jobs share the free GPUs of active VMs")


@POLICIES.register("milp", help="mixed-integer program over the queue (HiGHS), re-solved each period")
def _milp(**milp_options):
    from traincast.plan.milp import MilpPolicy

    return MilpPolicy(**milp_options)


POLICY_NAMES = POLICIES.names()


def make_policy(name: str, **milp_options) -> Policy:
    """A fresh policy by name (see ``POLICIES``): fifo, edf, priority (one job per VM), the ``-pack``
    variants (jobs share VMs), or milp (``milp_options`` go to ``MilpPolicy``)."""
    return POLICIES.get(name)(**milp_options)
