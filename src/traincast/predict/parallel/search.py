"""The search for the best layout of a job: every valid (tensor, pipeline, data) degree, ZeRO/FSDP stage,
micro-batch, recomputation, sequence parallelism and schedule; those that do not fit dropped; the fastest first.

The model is traced once (and at a second micro-batch, to interpolate the others exactly in FLOPs and bytes);
each layout only transforms that trace (:class:`~traincast.predict.parallel.engine.ParallelModel` caches the
per-layer costs per tensor degree, sequence parallelism and micro-batch) and runs the pipeline's closed form; the
ten fastest are evaluated again with the pipeline simulated.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

from traincast.errors import ConfigError, TraincastError, positive
from traincast.predict.parallel.engine import ParallelModel, ParallelStep, check_against_model
from traincast.predict.parallel.strategy import CP_ROTATIONS, SHARDINGS, ParallelConfig
from traincast.predict.roofline import mfu_peak


@dataclass(frozen=True)
class Candidate:
    config: ParallelConfig
    iteration_s: float
    samples_per_s: float
    peak_memory_bytes: int
    memory_capacity_bytes: int
    fits_in_memory: bool
    bubble_share: float
    communication_exposed_s: float
    comm_exposed_by_kind: dict
    pipeline_method: str

    @classmethod
    def of(cls, step: ParallelStep, global_batch: int) -> "Candidate":
        return cls(step.config, step.iteration_s, global_batch / step.iteration_s, step.peak_memory_bytes,
                   step.memory_capacity_bytes, step.fits_in_memory, step.bubble_share, step.communication_exposed_s,
                   dict(step.comm_exposed_by_kind), step.pipeline_method)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["config"] = self.config.to_dict()
        d["iteration_ms"] = self.iteration_s * 1e3
        return d


@dataclass(frozen=True)
class SearchResult:
    model: str
    device: str
    gpus: int
    nodes: int
    global_batch: int
    candidates: tuple[Candidate, ...]  # the fastest that fit, fastest first
    considered: int
    out_of_memory: int
    best: Candidate | None
    best_any: Candidate | None  # the fastest layout, fitting or not (for when none fits)
    elapsed_s: float
    notes: tuple[str, ...] = ()
    # the step's model FLOPs (forward and backward of the global batch, recomputation not counted: the same for
    # every layout) and the peak MFU is taken against (roofline.mfu_peak)
    model_flops: float = 0.0
    peak_name: str = ""
    mfu_peak_flops: float = 0.0

    def mfu(self, c: Candidate) -> float | None:
        """Model FLOPs utilisation of candidate ``c``."""
        if not self.mfu_peak_flops or c.iteration_s <= 0:
            return None
        return self.model_flops / c.iteration_s / self.gpus / self.mfu_peak_flops

    def to_dict(self) -> dict:
        one = lambda c: None if c is None else c.to_dict() | {"mfu": self.mfu(c)}  # noqa: E731
        return {"model": self.model, "device": self.device, "gpus": self.gpus, "nodes": self.nodes,
                "global_batch": self.global_batch, "considered": self.considered, "out_of_memory": self.out_of_memory,
                "elapsed_s": self.elapsed_s, "model_flops": self.model_flops, "mfu_peak": self.peak_name,
                "best": one(self.best), "fastest_regardless_of_memory": one(self.best_any),
                "top": [one(c) for c in self.candidates], "notes": list(self.notes)}


def _even_enough(layers: int, parts: int) -> bool:
    """Whether ``layers`` split into ``parts`` pipeline stages (or interleaved chunks) closely enough to search:
    each part gets a layer, and where they do not divide, the fullest part holds at most 10% more than the mean
    (BLOOM's 70 layers on 12 stages: 6 vs 5.8; Llama 3 405B's 126 on 16 stages of 4 chunks: 2 vs 1.97). A more
    uneven split idles the rest of the pipeline, and the search has the even ones."""
    return 0 < parts <= layers and -(-layers // parts) <= 1.1 * layers / parts


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small) | {n // d for d in small})


def enumerate_layouts(model: ParallelModel, gpus: int, global_batch: int, *, max_tp: int | None = None,
                      shardings: tuple[str, ...] = ("none", "zero1", "zero3"),
                      recomputes: tuple[str, ...] = ("none", "selective", "selective-op", "full"),
                      virtual: tuple[int, ...] = (2, 4), micro_batches: tuple[int, ...] = (1, 2, 4, 8, 16),
                      sequence_parallel: tuple[bool, ...] = (False, True), offload: bool = False,
                      context: tuple[int, ...] | None = None, cp_kinds: tuple[str, ...] = ("ring",),
                      tp_comm_overlap: bool = False, cp_rotate: str = "allgather", kv_repeat: bool = False):
    """Every layout of ``gpus`` GPUs the model can take (degrees, sharding, micro-batch, recomputation, sequence
    parallelism, schedule, context-parallel degree, and for a mixture of experts the expert-parallel degree).
    ``context``: the context degrees to try (None: 1, and for
    sequences of at least ``LONG_SEQUENCE`` tokens every power of two up to the GPUs of a node / NVLink domain).
    ``tp_comm_overlap``: layouts with sequence parallelism overlap its collectives with the GEMMs (Megatron-Core).
    ``cp_rotate``, ``kv_repeat``: how PyTorch's ring attention moves K/V in every ring layout (``predict --cp-rotate``,
    ``--kv-repeat``)."""
    lay = model.layout
    g = model.cluster.gpus_per_node
    max_tp = max_tp or min(g, gpus)
    cp_rotate = CP_ROTATIONS.canonical(str(cp_rotate).strip().lower())
    layers = lay.layers
    if context is None:
        context = auto_context_degrees(lay, g, gpus)
    out = []
    for tp, cp in ((tp, cp) for cp in context for tp in _divisors(gpus)):
        if tp > max_tp or gpus % (tp * cp):
            continue
        for pp in _divisors(gpus // (tp * cp)):
            if pp > 1 and not _even_enough(layers, pp):
                continue
            dp = gpus // (tp * pp * cp)
            if global_batch % dp:
                continue
            per_replica = global_batch // dp
            # expert parallelism (mixture of experts with a known expert count): powers of two that divide the
            # experts and the data-parallel ranks, up to the GPUs of a node
            eps = [1] + [e for e in (2, 4, 8, 16, 32, 64) if lay.moe_layers and lay.experts and lay.experts % e == 0
                         and dp % e == 0 and e <= max(g, 8)]
            mbs = sorted({m for m in micro_batches if per_replica % m == 0} | ({per_replica} if pp == 1 else set()))
            for sh in shardings:
                if sh != "none" and dp == 1:
                    continue
                if SHARDINGS.get(sh).parameters and pp > 1:
                    continue  # ZeRO-3 under pipeline stages: gathers per micro-batch, never the best
                for mb in mbs:
                    m = per_replica // mb
                    scheds = [("1f1b", 1)]
                    if pp > 1:
                        scheds += [("interleaved", v) for v in virtual if _even_enough(layers, pp * v) and m % pp == 0]
                    for rc in recomputes:
                        for sp in (sequence_parallel if tp > 1 else (False,)):
                            for (sname, v), kind, ep in ((x, k, e) for x in scheds
                                                         for k in (cp_kinds if cp > 1 else ("ring",)) for e in eps):
                                cfg = ParallelConfig(tp=tp, pp=pp, dp=dp, ep=ep, sharding=sh, micro_batch=mb,
                                                     schedule=sname, virtual_stages=v, recompute=rc,
                                                     sequence_parallel=sp, offload_optimizer=offload, cp=cp,
                                                     cp_kind=kind, tp_comm_overlap=bool(tp_comm_overlap and sp),
                                                     cp_rotate=cp_rotate, kv_repeat=bool(kv_repeat))
                                try:
                                    check_against_model(lay, cfg)
                                except TraincastError:
                                    continue
                                out.append((cfg, per_replica))
    return out


LONG_SEQUENCE = 8192  # tokens from which `parallelize` also tries context parallelism
MAX_GPUS = 1 << 20  # the layout search's bound (the largest training clusters today: about 10^5 GPUs)


def auto_context_degrees(lay, gpus_per_node: int, gpus: int) -> tuple[int, ...]:
    """1, and for long sequences (``LONG_SEQUENCE``) of a model with fused attention every power of two up to the
    GPUs of a node (NVLink domain) that splits the sequence into 2 chunks per rank."""
    seq = lay.seq_len or 0
    if seq < LONG_SEQUENCE or not lay.heads or not any(lay.attention_ops):
        return (1,)
    out = [1]
    c = 2
    while c <= min(gpus_per_node, gpus):
        if seq % (2 * c) == 0 and gpus % c == 0:
            out.append(c)
        c *= 2
    return tuple(out)


def search(model: ParallelModel, gpus: int, global_batch: int, *, top: int = 10, progress=None, **kw) -> SearchResult:
    """Evaluate every layout (closed-form pipelines), keep those that fit, re-evaluate the ``top`` fastest with
    the pipeline simulated."""
    positive("--gpus", gpus)
    positive("--batch-size", global_batch)
    t0 = time.perf_counter()
    layouts = enumerate_layouts(model, gpus, global_batch, **kw)
    if not layouts:
        raise ConfigError(f"no layout of {gpus} GPUs divides the global batch {global_batch} and the model's "
                          f"{model.layout.layers} layers; try a batch that is a multiple of the GPUs")
    # cheapest first: shorter per-unit cost tables are shared
    layouts.sort(key=lambda x: (x[0].tp, x[0].cp, x[0].sequence_parallel, x[0].micro_batch))
    steps = []
    oom = 0
    for k, (cfg, per_replica) in enumerate(layouts):
        st = model.evaluate(cfg, per_replica, simulate_pipeline=False)
        steps.append(st)
        if not st.fits_in_memory:
            oom += 1
        if progress is not None:
            progress(k + 1, len(layouts))
    fit = sorted((s for s in steps if s.fits_in_memory), key=lambda s: s.iteration_s)
    any_best = min(steps, key=lambda s: s.iteration_s) if steps else None
    final = []
    for s in fit[: max(top, 1) * 2]:
        again = model.evaluate(s.config, s.per_replica_batch, simulate_pipeline=True)
        if again.fits_in_memory:
            final.append(again)
    final.sort(key=lambda s: s.iteration_s)
    final = final[:top]
    cands = tuple(Candidate.of(s, global_batch) for s in final)
    notes = []
    if not cands:
        notes.append("no layout fits in memory; the fastest regardless of memory is shown as fastest_regardless_of_memory")
    base, _ = model.base()
    peak_name, peak = mfu_peak(base, model.device, model.precision)
    return SearchResult(model=base.model, device=model.device.name, gpus=gpus, nodes=model.cluster.nodes,
                        global_batch=global_batch, candidates=cands, considered=len(layouts), out_of_memory=oom,
                        best=cands[0] if cands else None,
                        best_any=Candidate.of(any_best, global_batch) if any_best else None,
                        elapsed_s=time.perf_counter() - t0, notes=tuple(notes),
                        model_flops=base.model_flops() / base.batch_size * global_batch,
                        peak_name=peak_name, mfu_peak_flops=peak)


def parallelize(model_spec, *, gpu=None, gpus: int, nodes: int | None = None, batch_size: int,
                seq_len: int | None = None, precision: str = "fp32", optimizer: str = "adamw", instance: str | None = None,
                network_gbit_per_s: float | None = None, predictor=None, catalog=None, family=None, top: int = 10,
                progress=None, kernels: str = "eager", memory_format: str = "contiguous", sdpa: str = "auto",
                **kw) -> SearchResult:
    """``traincast parallelize``: the fastest layouts of ``model_spec`` on ``gpus`` GPUs with a global batch of
    ``batch_size`` (``kernels``: ``eager`` | ``compiled`` | ``transformer-engine``, workload/fusion.py; ``memory_format``: ``contiguous`` |
    ``channels_last``, workload/layout.py; ``sdpa``: PyTorch SDPA's attention kernel, workload/fusion.py)."""
    from traincast.hardware.catalog import get_catalog
    from traincast.predict.compose import WorkloadFamily, cluster_of
    from traincast.predict.registry import default_predictor

    cat = catalog or get_catalog()
    positive("--gpus", gpus)
    positive("--batch-size", batch_size)
    if gpus > MAX_GPUS:
        raise ConfigError(f"--gpus {gpus:,} is beyond the {MAX_GPUS:,} GPUs the layout search enumerates")
    if kw.get("max_tp") is not None:
        positive("--max-tp", kw["max_tp"])
    context = kw.get("context") or ()
    for c in context:
        positive("--cp entries", c)
    if context and not any(gpus % c == 0 for c in context):
        raise ConfigError(f"no --cp degree given ({', '.join(map(str, context))}) divides the {gpus} GPUs")
    device, cluster, _inst = cluster_of(cat, gpu=gpu, instance=instance, gpus=gpus, nodes=nodes,
                                        network_gbit_per_s=network_gbit_per_s)
    from traincast.predict.roofline import check_precision

    check_precision(device, precision)
    family = family or WorkloadFamily(model_spec, optimizer=optimizer, precision=precision, seq_len=seq_len,
                                      kernels=kernels, memory_format=memory_format, sdpa=sdpa)
    pm = ParallelModel(family, device, cluster, predictor or default_predictor(), precision)
    return search(pm, gpus, batch_size, top=top, progress=progress, **kw)


def best_layout(pm: ParallelModel, gpus: int, global_batch: int, **kw) -> ParallelStep | None:
    """The fastest layout that fits (closed-form pipelines, then simulated), for planning."""
    res = search(pm, gpus, global_batch, top=1, **kw)
    if res.best is None:
        return None
    per_replica = global_batch // res.best.config.dp
    return pm.evaluate(res.best.config, per_replica, simulate_pipeline=True)

