"""Whole-model training-step timing, with a per-module and per-aten-op breakdown.

``time_model("resnet18", batch_size=8)`` builds the training step with
``traincast.workload.build_step`` (synthetic data, the optimizer and precision
``predict`` uses), times ``steps`` steps after ``warmup`` ones with the timing
core, then runs ``profile_steps`` more under ``torch.profiler`` to split the
step by phase, by module and by aten op.

Keys of the breakdown follow ``traincast.workload`` ``OpRecord``:
  module  ``<RootClass>.<path>`` as ``torch.utils.module_tracker`` names it
          (``ResNet.layer1.0.conv1``), the root alone for ops of the root's
          own forward, ``(step)`` for ops outside the model (the loss),
          ``(optimizer)`` for the optimizer step. Backward ops are put on the
          module whose forward op created their autograd node (sequence number).
  aten    the overload-packet name a ``TorchDispatchMode`` sees
          (``convolution``, ``addmm``, ``native_batch_norm_backward``). The
          profiler also records the kernels those ops call internally
          (``mkldnn_convolution``); their time is rolled up into the op the
          dispatch mode sees, so measured and traced op lists line up.
Times are self times (no double counting): CPU time on CPU, CUDA kernel time
on GPUs. A module's ``total_ms`` counts its aten ops only; the self time of
everything else (Python, hooks, autograd-engine bookkeeping) is its
``overhead_ms``. The profiler adds overhead; ``profiled_step_ms`` says how much.
"""

from __future__ import annotations

import inspect
import json
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from traincast.errors import ConfigError
from traincast.measure.timing import (
    Timing,
    TimingPolicy,
    check_device,
    cudnn_benchmark,
    flush_denormals,
    pinned_threads,
    time_fn,
)

PHASE_PREFIX = "traincast::phase::"
MODULE_PREFIX = "traincast::module::"


@dataclass(frozen=True)
class Breakdown:
    """Where a profiled step's time went (ms per step, averaged over profiled steps)."""

    per_phase_ms: dict[str, float]
    # module -> {"forward_ms","backward_ms","optimizer_ms","other_ms","total_ms" (aten ops), "overhead_ms" (the rest)}
    per_module: dict[str, dict[str, float]]
    per_aten: dict[str, dict[str, float]]  # aten name -> {... phases ..., "total_ms", "count"}
    profiled_steps: int
    profiled_step_ms: float


@dataclass(frozen=True)
class ModelTiming:
    model: str
    batch_size: int
    device: str
    optimizer: str | None
    precision: str | None
    seq_len: int | None
    timing: Timing  # of one whole step
    breakdown: Breakdown | None
    threads: int
    fingerprint_id: str | None = None
    fingerprint: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = {
            "model": self.model,
            "batch_size": self.batch_size,
            "device": self.device,
            "optimizer": self.optimizer,
            "precision": self.precision,
            "seq_len": self.seq_len,
            "threads": self.threads,
            "fingerprint_id": self.fingerprint_id,
            "step": self.timing.as_dict(with_samples=True),
        }
        if self.breakdown is not None:
            b = self.breakdown
            d.update(
                profiled_steps=b.profiled_steps,
                profiled_step_ms=b.profiled_step_ms,
                per_phase_ms=b.per_phase_ms,
                per_module=b.per_module,
                per_aten=b.per_aten,
            )
        return d


def aten_key(name: str) -> str:
    """``aten::addmm`` / ``aten.addmm.default`` -> ``addmm`` (the OpRecord.aten form)."""
    if name.startswith("aten::"):
        return name[6:]
    if name.startswith("aten."):
        parts = name.split(".")
        return parts[1] if len(parts) > 1 else name
    return name


# --------------------------------------------------------------------------- hooks


def _root_modules(step) -> list:
    return list(getattr(step, "modules", []) or [])


class _ModuleRanges:
    """Forward pre/post hooks that open/close a profiler range per module call."""

    def __init__(self, roots: list):
        import torch

        self._rf = torch.autograd.profiler.record_function
        self._stack: list = []
        self._handles: list = []
        self.names: dict[int, str] = {}
        for root in roots:
            rname = type(root).__name__
            for path, mod in root.named_modules():
                self.names[id(mod)] = f"{rname}.{path}" if path else rname
                self._handles.append(mod.register_forward_pre_hook(self._pre))
                self._handles.append(mod.register_forward_hook(self._post))

    def _pre(self, mod, args):
        rf = self._rf(MODULE_PREFIX + self.names.get(id(mod), type(mod).__name__))
        rf.__enter__()
        self._stack.append(rf)

    def _post(self, mod, args, out):
        if self._stack:
            self._stack.pop().__exit__(None, None, None)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        while self._stack:
            self._stack.pop().__exit__(None, None, None)


def _run_with_phases(step) -> None:
    """``step.run()``, with a profiler range per phase when the step says its phases."""
    import torch

    try:
        takes_cb = "on_phase" in inspect.signature(step.run).parameters
    except (TypeError, ValueError):
        takes_cb = False
    if not takes_cb:
        step.run()
        return
    current: list = []

    def on_phase(phase: str) -> None:
        if current:
            current.pop().__exit__(None, None, None)
        rf = torch.autograd.profiler.record_function(PHASE_PREFIX + phase)
        rf.__enter__()
        current.append(rf)

    try:
        step.run(on_phase=on_phase)
    finally:
        if current:
            current.pop().__exit__(None, None, None)


def dispatch_names(step) -> set[str]:
    """Names of the aten ops a ``TorchDispatchMode`` sees in one step (runs one step)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    names: set[str] = set()

    class _Names(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "aten":
                names.add(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with _Names():
        step.run()
    return names


# --------------------------------------------------------------------------- profile analysis


def _self_ms(evt, use_device: bool) -> float:
    if use_device:
        v = getattr(evt, "self_device_time_total", None)
        if v is None:
            v = getattr(evt, "self_cuda_time_total", 0.0)
        return float(v) / 1e3
    return float(evt.self_cpu_time_total) / 1e3


def analyze_events(events, *, visible: set[str] | None, use_device: bool, n_steps: int) -> tuple[dict, dict, dict]:
    """Attribute profiler events to (phase, module, aten op). Returns per-step ms dicts."""
    phase_ms: dict[str, float] = defaultdict(float)
    module_ms: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    aten_ms: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    seq_module: dict[int, str] = {}
    events = sorted(events, key=lambda e: e.time_range.start)

    def context(e):
        """(phase, module, backward_seq, aten attribution) from the ancestors of e."""
        phase = module = None
        bwd_seq = None
        in_opt = False
        top_visible = None
        node = e
        while node is not None:
            name = node.name
            if name.startswith("aten::") and visible is not None and aten_key(name) in visible:
                top_visible = aten_key(name)  # keeps climbing: the outermost visible op wins
            if module is None and name.startswith(MODULE_PREFIX):
                module = name[len(MODULE_PREFIX):]
            if phase is None and name.startswith(PHASE_PREFIX):
                phase = name[len(PHASE_PREFIX):]
            if bwd_seq is None and name.startswith("autograd::engine::evaluate_function"):
                bwd_seq = node.sequence_nr
            if name.startswith("Optimizer.step#"):
                in_opt = True
            node = node.cpu_parent
        if phase is None:  # step without phase callbacks: infer
            phase = "optimizer" if in_opt else "backward" if bwd_seq is not None else "forward" if module else "other"
        return phase, module, bwd_seq, top_visible

    # pass 1: forward sequence numbers -> module
    ctx = {}
    for e in events:
        c = context(e)
        ctx[id(e)] = c
        phase, module, bwd_seq, _ = c
        if bwd_seq is None and module is not None and e.sequence_nr is not None and e.sequence_nr >= 0:
            seq_module.setdefault(e.sequence_nr, module)
    # pass 2: attribute self times
    for e in events:
        if e.name.startswith(PHASE_PREFIX) and not use_device:
            phase_ms[e.name[len(PHASE_PREFIX):]] += float(e.cpu_time_total) / 1e3
        ms = _self_ms(e, use_device)
        if ms == 0.0:
            continue
        phase, module, bwd_seq, top_visible = ctx[id(e)]
        if phase == "optimizer":
            mod = "(optimizer)"
        elif phase == "backward" and bwd_seq is not None:
            mod = seq_module.get(bwd_seq, "(step)")
        else:
            mod = module or "(step)"
        if use_device:
            phase_ms[phase] += ms
        if not e.name.startswith("aten::"):
            # python, hooks, autograd-engine bookkeeping: kept apart from op time
            module_ms[mod]["overhead_ms"] += ms
            continue
        module_ms[mod][f"{phase}_ms"] += ms
        module_ms[mod]["total_ms"] += ms
        if True:
            key = top_visible or aten_key(e.name)
            aten_ms[key][f"{phase}_ms"] += ms
            aten_ms[key]["total_ms"] += ms
            if key == aten_key(e.name):
                aten_ms[key]["count"] += 1
    n = max(1, n_steps)

    def per_step(d: dict, keys: tuple[str, ...]) -> dict:
        return {k: round(d.get(k, 0.0) / n, 6) for k in keys}

    mod_keys = ("forward_ms", "backward_ms", "optimizer_ms", "other_ms", "total_ms", "overhead_ms")
    aten_keys = ("forward_ms", "backward_ms", "optimizer_ms", "other_ms", "total_ms", "count")

    return (
        {k: round(v / n, 6) for k, v in phase_ms.items()},
        {m: per_step(v, mod_keys) for m, v in sorted(module_ms.items())},
        {a: per_step(v, aten_keys) for a, v in sorted(aten_ms.items(), key=lambda kv: -kv[1]["total_ms"])},
    )


def profile_step(step, *, device: str = "cpu", steps: int = 2, align: bool = True) -> Breakdown:
    """Run ``steps`` steps (after one profiled warm-up) under torch.profiler; see module doc."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    use_device = str(device).startswith("cuda")
    visible = dispatch_names(step) if align else None
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if use_device else [])
    ranges = _ModuleRanges(_root_modules(step))
    try:
        sched = schedule(wait=0, warmup=1, active=steps, repeat=1)
        t_total = 0.0
        with profile(activities=activities, schedule=sched) as prof:
            for i in range(steps + 1):
                t0 = time.perf_counter()
                _run_with_phases(step)
                if use_device:
                    torch.cuda.synchronize()
                if i >= 1:
                    t_total += time.perf_counter() - t0
                prof.step()
        events = [e for e in prof.events() if not e.name.startswith("ProfilerStep#")]
    finally:
        ranges.remove()
    phase, module, aten = analyze_events(events, visible=visible, use_device=use_device, n_steps=steps)
    return Breakdown(phase, module, aten, steps, t_total / steps * 1e3)


# --------------------------------------------------------------------------- whole steps


def time_step(
    step,
    *,
    device: str = "cpu",
    steps: int = 10,
    warmup: int = 3,
    profile_steps: int = 2,
    threads: int | None = None,
) -> tuple[Timing, Breakdown | None, int]:
    """Time ``step.run()`` (any object with ``run()`` and ``modules``)."""
    if steps < 1:
        raise ConfigError(f"--steps must be at least 1, got {steps}")
    if warmup < 0 or profile_steps < 0:
        raise ConfigError("--warmup and --profile-steps must not be negative")
    policy = TimingPolicy(warmup=max(1, warmup), min_repeats=steps, max_repeats=steps, target_cov=0.0,
                          budget_s=1e9, min_sample_ms=0.0, batch=steps)
    with pinned_threads(threads) as n_threads, cudnn_benchmark(device), flush_denormals():
        timing = time_fn(step.run, device=device, policy=policy)
        breakdown = profile_step(step, device=device, steps=profile_steps) if profile_steps else None
    return timing, breakdown, n_threads


def time_model(
    model: Any,
    *,
    batch_size: int,
    device: str = "cpu",
    steps: int = 10,
    warmup: int = 3,
    profile_steps: int = 2,
    optimizer: str = "sgd",
    precision: str = "fp32",
    seq_len: int | None = None,
    freeze: str | None = None,
    threads: int | None = None,
    inputs: Any = None,
    step_factory: Callable[..., Any] | None = None,
) -> ModelTiming:
    """Build the training step of ``model`` and time it (see module doc).

    ``inputs`` is passed to ``build_step`` for an ``nn.Module`` (its per-sample
    input shape or a callable); ``step_factory(batch_size=, device=)`` replaces
    ``build_step`` altogether.
    """
    from traincast.measure.fingerprint import fingerprint

    device = check_device(device)
    with pinned_threads(threads):
        if step_factory is None:
            from traincast.workload import build_step

            extra = {"inputs": inputs} if inputs is not None else {}
            step = build_step(model, batch_size=batch_size, device=device, optimizer=optimizer,
                              precision=precision, seq_len=seq_len, freeze=freeze, **extra)
        else:
            step = step_factory(batch_size=batch_size, device=device)
        timing, breakdown, n_threads = time_step(step, device=device, steps=steps, warmup=warmup,
                                                 profile_steps=profile_steps, threads=threads)
    fp = fingerprint(device, n_threads)
    name = getattr(step, "name", None) or (model if isinstance(model, str) else type(model).__name__)
    return ModelTiming(str(name), batch_size, device, optimizer, precision, seq_len, timing, breakdown, n_threads,
                       fp.id, fp.as_dict())


def save_model_timing(conn: sqlite3.Connection, mt: ModelTiming) -> int:
    """Insert into ``measure_model_timings`` (and the fingerprint); return the row id."""
    from traincast.measure.fingerprint import Fingerprint
    from traincast.measure.layers import load_1m
    from traincast.measure.records import save_fingerprint

    if mt.fingerprint:
        fields = {k: v for k, v in mt.fingerprint.items() if k != "id"}
        save_fingerprint(conn, Fingerprint(**fields))
    t, b = mt.timing, mt.breakdown
    cur = conn.execute(
        "INSERT INTO measure_model_timings (model, batch_size, seq_len, device, optimizer, precision, warmup, n_steps, "
        "median_ms, iqr_ms, cov, mean_ms, min_ms, step_ms_json, profiled_steps, profiled_step_ms, per_phase_json, "
        "per_module_json, per_aten_json, threads, load_1m, fingerprint_id, created_s) VALUES (" + ",".join("?" * 23) + ")",
        (
            mt.model, mt.batch_size, mt.seq_len, mt.device, mt.optimizer, mt.precision, t.warmup, t.n_repeats,
            t.median_ms, t.iqr_ms, t.cov, t.mean_ms, t.min_ms, json.dumps(list(t.samples_ms)),
            b.profiled_steps if b else 0, b.profiled_step_ms if b else None,
            json.dumps(b.per_phase_ms) if b else None, json.dumps(b.per_module) if b else None,
            json.dumps(b.per_aten) if b else None, mt.threads, load_1m(), mt.fingerprint_id, time.time(),
        ),
    )
    return int(cur.lastrowid)


def load_model_timings(conn: sqlite3.Connection, model: str | None = None, device: str | None = None) -> list[dict]:
    """Rows of ``measure_model_timings`` as dicts, JSON columns decoded (``step_ms``, ``per_phase_ms``,
    ``per_module``, ``per_aten``), oldest first."""
    from traincast.measure.records import select_rows

    rows = select_rows(conn, "measure_model_timings", model=model, device=device)
    for d in rows:
        d["step_ms"] = json.loads(d.pop("step_ms_json"))
        for col, key in (("per_phase_json", "per_phase_ms"), ("per_module_json", "per_module"), ("per_aten_json", "per_aten")):
            raw = d.pop(col)
            d[key] = json.loads(raw) if raw else None
    return rows
