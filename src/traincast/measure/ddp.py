"""Data-parallel training timing with ``torch.distributed`` on this machine.

``time_ddp("resnet18", procs=2, batch_size=8)`` starts ``procs`` processes
(``python -m traincast.measure.worker``; backend gloo on CPU, nccl on CUDA with one
GPU per process), wraps the step's modules in ``DistributedDataParallel`` and
measures, per step:

  iteration    ``step.run()`` between two barriers, the slowest rank's time;
  comm hook    a DDP communication hook that does what the default one does
               (divide by world size, all-reduce each gradient bucket) and
               clocks each bucket from issue to completion (perf_counter on
               CPU, CUDA events on GPUs); summed over buckets per step. These
               overlap the backward pass, so they are not additive to compute.
  all-reduce   afterwards, a standalone all-reduce of buffers of exactly the
               bucket sizes DDP used, back to back, timed with the timing core:
               the communication cost alone, what a communication model
               (ring all-reduce over the link) should predict.

``batch_size`` is per process (the global batch is ``procs * batch_size``).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from traincast.errors import ConfigError
from traincast.measure.timing import Timing, summarize


@dataclass(frozen=True)
class DDPTiming:
    model: str
    procs: int
    batch_size: int  # per process
    backend: str
    device: str
    iteration: Timing  # slowest rank per step
    comm_hook_ms: float | None  # median per step of the summed bucket all-reduce spans
    allreduce: Timing | None  # standalone all-reduce of all buckets
    grad_bytes: int
    bucket_bytes: tuple[int, ...]
    threads_per_proc: int
    per_rank_median_ms: tuple[float, ...] = ()
    fingerprint_id: str | None = None
    fingerprint: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "model": self.model,
            "procs": self.procs,
            "batch_size": self.batch_size,
            "backend": self.backend,
            "device": self.device,
            "iteration": self.iteration.as_dict(with_samples=True),
            "comm_hook_ms": self.comm_hook_ms,
            "allreduce": self.allreduce.as_dict(with_samples=True) if self.allreduce else None,
            "grad_bytes": self.grad_bytes,
            "bucket_bytes": list(self.bucket_bytes),
            "threads_per_proc": self.threads_per_proc,
            "per_rank_median_ms": list(self.per_rank_median_ms),
            "fingerprint_id": self.fingerprint_id,
        }


def tiny_mlp_step(*, batch_size: int, device: str = "cpu", hidden: int = 64):
    """A small MLP training step (for tests and smoke runs); has ``run``, ``modules``, ``name``."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch_size, 32, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)

    class _Step:
        name = "tiny-mlp"
        modules = [model]

        def run(self) -> None:
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    return _Step()


def wrap_ddp(module, device_ids=None):
    """Make ``module(...)`` run through ``DistributedDataParallel`` in place.

    The step object keeps calling the module it built; we replace the module's
    ``forward`` (an instance attribute) by the DDP wrapper's, which calls the
    original class ``forward`` through a thin holder, so hooks still fire once.
    Returns the DDP object (for ``register_comm_hook``).
    """
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    original_forward = type(module).forward

    class _Holder(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args, **kwargs):
            return original_forward(self.inner, *args, **kwargs)

    ddp = DDP(_Holder(module), device_ids=device_ids)
    module.forward = ddp.forward
    return ddp


class _CommClock:
    """Clocks spans from bucket issue to completion; CUDA events on GPUs."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.spans: list = []

    def start(self):
        if self.cuda:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def stop(self, start) -> None:
        if self.cuda:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.spans.append((start, ev))
        else:
            self.spans.append((start, time.perf_counter()))

    def take_ms(self) -> float:
        """Sum of the spans since the last call (ms); syncs on CUDA."""
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            total = sum(a.elapsed_time(b) for a, b in self.spans)
        else:
            total = sum((b - a) * 1e3 for a, b in self.spans)
        self.spans = []
        return total


def _worker(rank: int, world: int, port: int, cfg: dict, destroy: bool = True) -> list | None:
    """One rank's DDP run; rank 0 returns every rank's timings. In a worker process ``destroy=False``: the
    process leaves without tearing the group down (see :mod:`traincast.measure.worker`)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(cfg["threads"])
    torch.set_flush_denormal(True)  # as measure.timing.flush_denormals: synthetic steps can stall on denormals
    cuda = cfg["device"].startswith("cuda")
    if cuda:
        torch.cuda.set_device(rank)
        torch.backends.cudnn.benchmark = True
    device = f"cuda:{rank}" if cuda else "cpu"
    dist.init_process_group(cfg["backend"], init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        factory = cfg["step_factory"]
        if isinstance(factory, str):
            import importlib

            mod_name, _, qual = factory.partition(":")
            obj = importlib.import_module(mod_name)
            for part in qual.split("."):
                obj = getattr(obj, part)
            factory = obj
        if factory is None:
            from traincast.workload import build_step

            step = build_step(cfg["model"], batch_size=cfg["batch_size"], device=device, optimizer=cfg["optimizer"],
                              precision=cfg["precision"], seq_len=cfg["seq_len"])
        else:
            step = factory(batch_size=cfg["batch_size"], device=device)
        clock = _CommClock(cuda)
        bucket_sizes: list[int] = []
        record = {"on": False}

        def hook(state, bucket):
            buf = bucket.buffer()
            if record["on"] is None:  # first step: learn the bucket sizes
                bucket_sizes.append(buf.numel() * buf.element_size())
            buf.div_(world)
            t0 = clock.start()
            fut = dist.all_reduce(buf, async_op=True).get_future()

            def done(f):
                clock.stop(t0)
                return f.value()[0]

            return fut.then(done)

        ddps = [wrap_ddp(m, device_ids=[rank] if cuda else None) for m in step.modules]
        for d in ddps:
            d.register_comm_hook(None, hook)
        grad_bytes = sum(p.numel() * p.element_size() for d in ddps for p in d.parameters() if p.requires_grad)
        iters: list[float] = []
        comm: list[float] = []
        for i in range(cfg["warmup"] + cfg["steps"]):
            record["on"] = None if i == 0 else True
            dist.barrier()
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            step.run()
            if cuda:
                torch.cuda.synchronize()
            dt = (time.perf_counter() - t0) * 1e3
            c = clock.take_ms()
            if i >= cfg["warmup"]:
                iters.append(dt)
                comm.append(c)
        # standalone all-reduce of the same buckets
        dtype = next((p.dtype for d in ddps for p in d.parameters()), torch.float32)
        elt = torch.tensor([], dtype=dtype).element_size()
        bufs = [torch.ones(max(1, b // elt), dtype=dtype, device=device) for b in bucket_sizes]
        ar: list[float] = []
        for i in range(cfg["ar_warmup"] + cfg["ar_repeats"]):
            dist.barrier()
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for b in bufs:
                dist.all_reduce(b)
            if cuda:
                torch.cuda.synchronize()
            if i >= cfg["ar_warmup"]:
                ar.append((time.perf_counter() - t0) * 1e3)
        mine = {"rank": rank, "iters": iters, "comm": comm, "allreduce": ar, "buckets": bucket_sizes,
                "grad_bytes": grad_bytes, "name": getattr(step, "name", str(cfg["model"]))}
        gathered: list = [None] * world
        dist.all_gather_object(gathered, mine)
        dist.barrier()  # every rank is done communicating before any tears down
        return gathered if rank == 0 else None
    finally:
        if destroy:
            dist.destroy_process_group()


def _launch(procs: int, cfg: dict) -> list[dict]:
    """Run the ``procs`` ranks, each in a fresh process (:mod:`traincast.measure.worker`); every rank's timings."""
    from traincast.measure import worker

    port = _free_port()
    ranks = []
    try:
        for r in range(procs):
            ranks.append(worker.start(_worker, (r, procs, port, cfg), {"destroy": False}, threads=cfg["threads"],
                                      name=f"DDP worker {r}"))
        return worker.wait_all(ranks, timeout=cfg.get("timeout_s", 600.0))[0]
    finally:
        for w in ranks:
            w.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_ddp(
    model: Any,
    *,
    procs: int = 2,
    batch_size: int = 8,
    steps: int = 10,
    warmup: int = 3,
    device: str = "cpu",
    backend: str | None = None,
    optimizer: str = "sgd",
    precision: str = "fp32",
    seq_len: int | None = None,
    threads_per_proc: int | None = None,
    allreduce_repeats: int = 10,
    step_factory: Callable[..., Any] | str | None = None,
    timeout_s: float = 600.0,
) -> DDPTiming:
    """Run ``procs`` DDP processes on this machine and time them (see module doc)."""
    import torch
    import torch.distributed as dist

    from traincast.measure.fingerprint import fingerprint
    from traincast.measure.timing import check_device

    device = check_device(device)
    cuda = device.startswith("cuda")
    if procs < 1:
        raise ConfigError(f"--procs must be at least 1, got {procs}")
    if batch_size < 1 or steps < 1 or warmup < 0:
        raise ConfigError(f"batch size and steps must be at least 1 (got {batch_size}, {steps}) and warmup >= 0")
    if cuda and procs > torch.cuda.device_count():
        raise ConfigError(f"--procs {procs} needs {procs} GPUs (one per process); this machine has {torch.cuda.device_count()}")
    backend = backend or ("nccl" if cuda else "gloo")
    if backend not in ("gloo", "nccl", "mpi"):
        raise ConfigError(f"backend must be gloo or nccl, got {backend!r}")
    if not dist.is_available() or (backend == "nccl" and not dist.is_nccl_available()) or (
            backend == "mpi" and not dist.is_mpi_available()):
        raise ConfigError(f"torch.distributed backend {backend!r} is not available in this torch build")
    if backend == "nccl" and not cuda:
        raise ConfigError("the nccl backend needs --device cuda; use gloo on CPU")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if not cuda and procs > 4 * cores:
        raise ConfigError(f"--procs {procs} CPU processes on {cores} cores would time contention, not DDP "
                          f"(and each holds a copy of the model); use at most {4 * cores}")
    threads = threads_per_proc or max(1, cores // procs)
    if step_factory is None:  # fail fast (unknown model, bad batch) before spawning
        from traincast.workload import build_step

        build_step(model, batch_size=batch_size, device="meta", optimizer=optimizer, precision=precision, seq_len=seq_len)
    cfg = dict(model=model if isinstance(model, str) else None, step_factory=step_factory, batch_size=batch_size,
               steps=steps, warmup=warmup, device=device, backend=backend, optimizer=optimizer, precision=precision,
               seq_len=seq_len, threads=threads, ar_warmup=2, ar_repeats=max(1, allreduce_repeats), timeout_s=timeout_s)
    if step_factory is None and not isinstance(model, str):
        raise ConfigError("time_ddp needs a model name or spec path (processes rebuild it), or a picklable step_factory")
    if step_factory is not None and not isinstance(step_factory, str):
        step_factory = f"{step_factory.__module__}:{step_factory.__qualname__}"
    cfg["step_factory"] = step_factory
    ranks = _launch(procs, cfg)
    n = len(ranks[0]["iters"])
    slowest = [max(r["iters"][i] for r in ranks) for i in range(n)]
    comm = [max(r["comm"][i] for r in ranks) for i in range(n)]
    ar = [max(r["allreduce"][i] for r in ranks) for i in range(len(ranks[0]["allreduce"]))]
    comm_t = summarize(comm) if any(comm) else None
    fp = fingerprint(device, threads)
    return DDPTiming(
        model=str(ranks[0]["name"]),
        procs=procs,
        batch_size=batch_size,
        backend=backend,
        device=device,
        iteration=summarize(slowest, warmup=warmup),
        comm_hook_ms=comm_t.median_ms if comm_t else None,
        allreduce=summarize(ar, warmup=2) if ar and ranks[0]["buckets"] else None,
        grad_bytes=int(ranks[0]["grad_bytes"]),
        bucket_bytes=tuple(int(b) for b in ranks[0]["buckets"]),
        threads_per_proc=threads,
        per_rank_median_ms=tuple(summarize(r["iters"]).median_ms for r in ranks),
        fingerprint_id=fp.id,
        fingerprint=fp.as_dict(),
    )


def save_ddp_timing(conn: sqlite3.Connection, t: DDPTiming) -> int:
    from traincast.measure.fingerprint import Fingerprint
    from traincast.measure.records import save_fingerprint

    if t.fingerprint:
        save_fingerprint(conn, Fingerprint(**{k: v for k, v in t.fingerprint.items() if k != "id"}))
    it, ar = t.iteration, t.allreduce
    cur = conn.execute(
        "INSERT INTO measure_ddp_timings (model, procs, batch_size, backend, device, warmup, n_steps, iter_median_ms, "
        "iter_iqr_ms, iter_cov, comm_hook_ms, allreduce_median_ms, allreduce_iqr_ms, grad_bytes, bucket_bytes_json, "
        "threads_per_proc, detail_json, fingerprint_id, created_s) VALUES (" + ",".join("?" * 19) + ")",
        (
            t.model, t.procs, t.batch_size, t.backend, t.device, it.warmup, it.n_repeats, it.median_ms, it.iqr_ms, it.cov,
            t.comm_hook_ms, ar.median_ms if ar else None, ar.iqr_ms if ar else None, t.grad_bytes,
            json.dumps(list(t.bucket_bytes)), t.threads_per_proc, json.dumps(t.as_dict()), t.fingerprint_id, time.time(),
        ),
    )
    return int(cur.lastrowid)


def load_ddp_timings(conn: sqlite3.Connection, model: str | None = None, procs: int | None = None) -> list[dict]:
    """Rows of ``measure_ddp_timings`` as dicts (``bucket_bytes`` and ``detail`` decoded), oldest first."""
    from traincast.measure.records import select_rows

    rows = select_rows(conn, "measure_ddp_timings", model=model, procs=procs)
    for d in rows:
        d["bucket_bytes"] = json.loads(d.pop("bucket_bytes_json") or "[]")
        d["detail"] = json.loads(d.pop("detail_json") or "{}")
    return rows
