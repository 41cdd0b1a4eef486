"""Parallel training strategies: the degrees, the sharding, the pipeline schedule, the recomputation.

Every choice is a registry entry (names, help and did-you-mean come from it): :data:`SHARDINGS` (data-parallel
replicas, ZeRO-1/2/3, PyTorch FSDP full / grad-op / hybrid), :data:`SCHEDULES` (GPipe, 1F1B, interleaved 1F1B
with V virtual stages), :data:`RECOMPUTATIONS` (none, selective as in Korthikanti et al. 2022, PyTorch's op-level
selective checkpointing as torchtitan applies it, full).
:class:`ParallelConfig` holds one layout; :func:`resolve` builds it from what a user typed and checks what can
be checked without the model (the model's layers and heads are checked by :func:`check_against_model`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from traincast.errors import ConfigError
from traincast.registry import Registry


@dataclass(frozen=True)
class Sharding:
    """What the data-parallel ranks shard (ZeRO stages / FSDP modes), and over which ranks."""

    optimizer: bool  # optimizer states (ZeRO-1)
    gradients: bool  # gradients (ZeRO-2, FSDP SHARD_GRAD_OP)
    parameters: bool  # parameters, gathered layer by layer (ZeRO-3, FSDP FULL_SHARD)
    within_node: bool = False  # shard inside a node, replicate across nodes (FSDP HYBRID_SHARD)
    framework: str = "ddp"

    @property
    def stage(self) -> int:
        return 3 if self.parameters else 2 if self.gradients else 1 if self.optimizer else 0


SHARDINGS: Registry[Sharding] = Registry("sharding")
SHARDINGS.add("none", Sharding(False, False, False), help="replicas: every data-parallel rank holds everything")
SHARDINGS.add("zero1", Sharding(True, False, False, framework="zero"), aliases=("zero-1",),
              help="ZeRO-1 / Megatron distributed optimizer: optimizer states sharded")
SHARDINGS.add("zero2", Sharding(True, True, False, framework="zero"), aliases=("zero-2",),
              help="ZeRO-2: optimizer states and gradients sharded (reduce-scatter)")
SHARDINGS.add("zero3", Sharding(True, True, True, framework="zero"), aliases=("zero-3",),
              help="ZeRO-3: parameters too, all-gathered layer by layer")
SHARDINGS.add("fsdp-full", Sharding(True, True, True, framework="fsdp"), aliases=("full", "fsdp"),
              help="PyTorch FSDP FULL_SHARD (as ZeRO-3, with prefetch of the next unit's parameters)")
SHARDINGS.add("fsdp-grad-op", Sharding(True, True, False, framework="fsdp"), aliases=("grad-op", "shard-grad-op"),
              help="PyTorch FSDP SHARD_GRAD_OP (as ZeRO-2)")
SHARDINGS.add("fsdp-hybrid", Sharding(True, True, True, within_node=True, framework="fsdp"), aliases=("hybrid",),
              help="PyTorch FSDP HYBRID_SHARD: full shard inside a node, replicas across nodes")


@dataclass(frozen=True)
class Schedule:
    """A pipeline schedule; ``interleaved`` takes V virtual stages per GPU (``interleaved:V``)."""

    interleaved: bool = False
    all_forward_first: bool = False  # GPipe


SCHEDULES: Registry[Schedule] = Registry("pipeline schedule")
SCHEDULES.add("1f1b", Schedule(), help="one forward, one backward (PipeDream-Flush / Megatron default)")
SCHEDULES.add("gpipe", Schedule(all_forward_first=True), help="all forwards, then all backwards (GPipe)")
SCHEDULES.add("interleaved", Schedule(interleaved=True),
              help="interleaved 1F1B with V model chunks per GPU: interleaved:V (Narayanan et al. 2021)")


@dataclass(frozen=True)
class Recomputation:
    attention_core: bool  # recompute the attention core (scores, softmax, dropout, attention over V)
    whole_layers: bool  # recompute every layer's forward in the backward pass
    # op-level selective checkpointing (torch.utils.checkpoint policies, torchtitan's "selective op"): each
    # layer keeps its input and the outputs of the ops its policy saves (every other aten.mm, the attention
    # kernels), and recomputes every other forward op in the backward pass
    op_level: bool = False


RECOMPUTATIONS: Registry[Recomputation] = Registry("recomputation")
RECOMPUTATIONS.add("none", Recomputation(False, False), help="keep every activation")
RECOMPUTATIONS.add("selective", Recomputation(True, False),
                   help="recompute the attention core only (Korthikanti et al. 2022)")
RECOMPUTATIONS.add("selective-op", Recomputation(False, False, op_level=True), aliases=("op", "op-sac"),
                   help="PyTorch op-level selective checkpointing, torchtitan's 'selective op' policy: keep every "
                        "other matmul's output and the attention kernels', recompute the rest of each layer")
RECOMPUTATIONS.add("full", Recomputation(False, True), help="keep each layer's input, recompute the layer")


@dataclass(frozen=True)
class ContextParallel:
    """How the attention of a sequence split over ``cp`` ranks sees the whole sequence.

    ``ring``: ring attention with causal load balancing (Megatron-LM / Transformer Engine: the sequence cut into
    2 x cp chunks, rank r holding chunks r and 2cp-1-r), the key/value chunks passed around the ring in cp - 1
    send/recv steps, each overlapped with the attention of the chunk already there; ``all-to-all``: DeepSpeed-
    Ulysses, an all-to-all turns the sequence split into a heads split around the attention (cp divides the
    heads)."""

    ring: bool
    chunks_per_rank: int  # sequence chunks per rank (causal load balancing: 2)
    heads_split: bool  # the attention runs on heads / cp with the whole sequence (Ulysses)


CONTEXT_PARALLEL: Registry[ContextParallel] = Registry("context parallelism")
CONTEXT_PARALLEL.add("ring", ContextParallel(True, 2, False), aliases=("p2p", "ring-attention"),
                     help="ring attention, 2 chunks per rank (causal load balancing), KV send/recv overlapped with "
                          "attention (Megatron-LM / Transformer Engine, torchtitan)")
CONTEXT_PARALLEL.add("all-to-all", ContextParallel(False, 1, True), aliases=("ulysses", "a2a"),
                     help="DeepSpeed-Ulysses: all-to-all from sequence to heads split around attention (cp divides "
                          "the heads)")

# How PyTorch's ring attention (torch/distributed/tensor/experimental/_attention.py, _cp_options.rotate_method;
# torchtitan's --parallelism.context_parallel_rotate_method) moves the K/V chunks round the ring. The backward
# passes dK/dV round by all-to-all either way (its dkv_rotater), in FP32 (convert_to_f32). Transformer Engine's
# own ring (--kernels transformer-engine) is a P2P ring whatever this says.
CP_ROTATIONS: Registry[str] = Registry("ring rotation")
CP_ROTATIONS.add("allgather", "allgather", aliases=("all-gather", "all_gather"),
                 help="PyTorch's default (2024 to now): one all-gather of the C ranks' K/V issued before step 0's "
                      "attention and waited for at step 1 (forward, and again in the backward)")
CP_ROTATIONS.add("alltoall", "alltoall", aliases=("all-to-all", "all_to_all", "p2p"),
                 help="each step's K/V sent to the next rank (ft_c.permute_tensor) under that step's attention")


@dataclass(frozen=True)
class ParallelConfig:
    """One layout of a training job over ``tp x pp x dp`` GPUs (``ep`` expert-parallel ranks inside the data-
    parallel ones). ``micro_batch``: samples per micro-batch per replica (None: the whole per-replica batch)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    sharding: str = "none"
    micro_batch: int | None = None
    schedule: str = "1f1b"
    virtual_stages: int = 1
    recompute: str = "none"
    sequence_parallel: bool = False
    offload_optimizer: bool = False
    overlap_grad_sync: bool = True  # data-parallel gradient buckets overlap the last backward pass (DDP)
    cp: int = 1  # context-parallel degree: the sequence split over cp ranks (they share the samples)
    cp_kind: str = "ring"  # CONTEXT_PARALLEL entry
    cp_rotate: str = "allgather"  # CP_ROTATIONS entry: PyTorch's ring attention's K/V rotation
    # the model repeats its K/V heads to the query heads before SDPA (torchtitan's Llama: repeat_kv), so a ring
    # exchanges (and merges) K/V at the query heads
    kv_repeat: bool = False
    fp8_all_gather: bool = False  # ZeRO-3/FSDP gathers the layers' weights in FP8 (FP8 precisions)
    # Megatron-Core/Transformer Engine --tp-comm-overlap: each sequence-parallel all-gather / reduce-scatter runs in
    # chunks under the column-/row-parallel GEMM that consumes / produces it (userbuffers)
    tp_comm_overlap: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def cp_spec(self) -> ContextParallel:
        return CONTEXT_PARALLEL.get(self.cp_kind)

    @property
    def sharding_spec(self) -> Sharding:
        return SHARDINGS.get(self.sharding)

    @property
    def schedule_spec(self) -> Schedule:
        return SCHEDULES.get(self.schedule)

    @property
    def recompute_spec(self) -> Recomputation:
        return RECOMPUTATIONS.get(self.recompute)

    @property
    def is_plain_data_parallel(self) -> bool:
        """Replicas only, no micro-batching, no recomputation: the data-parallel forecast of ``step_time``."""
        return (self.tp == 1 and self.pp == 1 and self.ep == 1 and self.cp == 1 and self.sharding == "none"
                and self.recompute == "none" and not self.offload_optimizer and self.micro_batch is None)

    @property
    def schedule_label(self) -> str:
        return f"interleaved:{self.virtual_stages}" if self.schedule == "interleaved" else self.schedule

    def label(self) -> str:
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        if self.cp > 1:
            parts.insert(2, f"cp{self.cp}" + ("" if self.cp_kind == "ring" else f"-{self.cp_kind}")
                         + ("-alltoall" if self.cp_kind == "ring" and self.cp_rotate == "alltoall" else ""))
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.sharding != "none":
            parts.append(self.sharding)
        if self.micro_batch is not None:
            parts.append(f"mb{self.micro_batch}")
        if self.pp > 1:
            parts.append(self.schedule_label)
        if self.recompute != "none":
            parts.append(f"recompute-{self.recompute}")
        if self.sequence_parallel:
            parts.append("sp")
        if self.offload_optimizer:
            parts.append("offload")
        if not self.overlap_grad_sync:
            parts.append("no-overlap")
        if self.fp8_all_gather:
            parts.append("fp8-all-gather")
        if self.tp_comm_overlap:
            parts.append("tp-overlap")
        return " ".join(parts)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["schedule"] = self.schedule_label
        d["gpus"] = self.gpus
        d["label"] = self.label()
        return d


def parse_schedule(text: str) -> tuple[str, int]:
    """``1f1b`` / ``gpipe`` / ``interleaved:V`` -> (registered name, V)."""
    t = str(text).strip().lower()
    name, _, v = t.partition(":")
    name = SCHEDULES.canonical(name)
    if SCHEDULES.get(name).interleaved:
        if not v:
            raise ConfigError("--schedule interleaved needs the virtual stages per GPU: interleaved:V (e.g. interleaved:2)")
        try:
            vs = int(v)
        except ValueError:
            raise ConfigError(f"--schedule {text!r}: V must be a whole number, as in interleaved:2") from None
        if vs < 2:
            raise ConfigError(f"--schedule {text!r}: interleaved needs V >= 2 virtual stages per GPU (V=1 is 1f1b)")
        return name, vs
    if v:
        raise ConfigError(f"--schedule {text!r}: only interleaved takes :V")
    return name, 1


def resolve(gpus: int, *, tp: int = 1, pp: int = 1, dp: int | None = None, ep: int = 1, zero: int | None = None,
            fsdp: str | None = None, sharding: str | None = None, micro_batch: int | None = None,
            schedule: str = "1f1b", recompute: str = "none", sequence_parallel: bool = False,
            offload_optimizer: bool = False, gpus_per_node: int | None = None, cp: int = 1,
            cp_kind: str = "ring", fp8_all_gather: bool = False,
            tp_comm_overlap: bool = False, cp_rotate: str = "allgather",
            kv_repeat: bool = False) -> tuple[ParallelConfig, list[str]]:
    """A :class:`ParallelConfig` from the options a user gives, and warnings. ``dp`` defaults to gpus / (tp x pp);
    degrees that do not multiply to ``gpus``, ZeRO and FSDP both, and other impossible choices raise
    ConfigError naming them."""
    warnings: list[str] = []
    for name, v in (("--tp", tp), ("--pp", pp), ("--ep", ep), ("--cp", cp)):
        if not isinstance(v, int) or v < 1:
            raise ConfigError(f"{name} must be a whole number >= 1, got {v!r}")
    if dp is not None and (not isinstance(dp, int) or dp < 1):
        raise ConfigError(f"--dp must be a whole number >= 1, got {dp!r}")
    if micro_batch is not None and (not isinstance(micro_batch, int) or micro_batch < 1):
        raise ConfigError(f"--micro-batch must be a whole number >= 1, got {micro_batch!r}")
    cp_label = f" x --cp {cp}" if cp > 1 else ""
    if gpus % (tp * pp * cp):
        raise ConfigError(f"--tp {tp} x --pp {pp}{cp_label} = {tp * pp * cp} does not divide the {gpus} GPUs")
    if dp is None:
        dp = gpus // (tp * pp * cp)
    if tp * pp * cp * dp != gpus:
        raise ConfigError(f"--tp {tp} x --pp {pp}{cp_label} x --dp {dp} = {tp * pp * cp * dp}, not the {gpus} GPUs")
    cp_kind = CONTEXT_PARALLEL.canonical(str(cp_kind).strip().lower())
    cp_rotate = CP_ROTATIONS.canonical(str(cp_rotate).strip().lower())
    if gpus_per_node and cp > 1 and tp * cp > gpus_per_node:
        warnings.append(f"context parallelism across nodes: --tp {tp} x --cp {cp} spans more than the "
                        f"{gpus_per_node} GPUs of a node (NVLink domain); its key/value exchange goes over the network")
    if ep > 1 and dp % ep:
        raise ConfigError(f"--ep {ep} does not divide the data-parallel degree {dp} (experts are spread over "
                          "data-parallel ranks)")
    given = [x for x in (zero is not None and "--zero", fsdp is not None and "--fsdp", sharding is not None and
                         "--sharding") if x]
    if len(given) > 1:
        raise ConfigError(f"{' and '.join(given)} both shard the data-parallel state; give one of them")
    if zero is not None:
        if zero not in (0, 1, 2, 3):
            raise ConfigError(f"--zero takes 0 (no sharding), 1, 2 or 3, got {zero!r}")
        sharding = "none" if zero == 0 else f"zero{zero}"
    elif fsdp is not None:
        f = str(fsdp).strip().lower()
        sharding = {"full": "fsdp-full", "grad-op": "fsdp-grad-op", "hybrid": "fsdp-hybrid"}.get(f)
        if sharding is None:
            raise ConfigError(f"--fsdp takes full, grad-op or hybrid, got {fsdp!r}")
    sharding = SHARDINGS.canonical(sharding or "none")
    if sharding != "none" and dp == 1:
        warnings.append(f"{sharding} with one data-parallel rank shards nothing")
    sched, v = parse_schedule(schedule)
    if sched == "interleaved" and pp == 1:
        raise ConfigError("--schedule interleaved needs pipeline stages (--pp >= 2)")
    recompute = RECOMPUTATIONS.canonical(str(recompute).strip().lower())
    if sequence_parallel and tp == 1:
        raise ConfigError("--sequence-parallel splits the sequence over tensor-parallel ranks; it needs --tp >= 2")
    if gpus_per_node and tp > gpus_per_node:
        warnings.append(f"tensor parallelism across nodes: --tp {tp} spans {-(-tp // gpus_per_node)} nodes of "
                        f"{gpus_per_node} GPUs; its all-reduces go over the network every layer")
    if tp_comm_overlap and not (tp > 1 and sequence_parallel):
        raise ConfigError("--tp-comm-overlap overlaps the sequence-parallel all-gathers and reduce-scatters with the "
                          "GEMMs (as Megatron-Core requires): it needs --tp >= 2 and --sequence-parallel")
    if fp8_all_gather and not SHARDINGS.get(sharding).parameters:
        raise ConfigError("--fp8-all-gather gathers sharded parameters: it needs --zero 3 or --fsdp full|hybrid")
    if offload_optimizer and SHARDINGS.get(sharding).parameters:
        warnings.append("optimizer offload with parameter sharding: the offloaded step works on each rank's shard")
    return ParallelConfig(tp=tp, pp=pp, dp=dp, ep=ep, sharding=sharding, micro_batch=micro_batch, schedule=sched,
                          virtual_stages=v, recompute=recompute, sequence_parallel=bool(sequence_parallel),
                          offload_optimizer=bool(offload_optimizer), cp=cp, cp_kind=cp_kind,
                          fp8_all_gather=bool(fp8_all_gather), tp_comm_overlap=bool(tp_comm_overlap),
                          cp_rotate=cp_rotate, kv_repeat=bool(kv_repeat)), warnings


def with_micro_batch(cfg: ParallelConfig, micro_batch: int) -> ParallelConfig:
    return replace(cfg, micro_batch=micro_batch)
