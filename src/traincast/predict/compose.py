"""Compose per-op predictions into steps, epochs, jobs and costs.

Workload + Cluster + Predictor -> StepTime; StepTime + Job -> Forecast.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace

from traincast.errors import ConfigError, positive
from traincast.hardware.catalog import Catalog, get_catalog, system_table
from traincast.hardware.records import GIB, Cluster, Device
from traincast.predict.base import OpTimes, Predictor
from traincast.predict.comm import SYNC_METHODS, CommTime, gradient_sync
from traincast.predict.host import predict_with_host, slow_host_note
from traincast.predict.inputs import input_pipeline, workers_per_gpu
from traincast.predict.inputs import note as input_note
from traincast.predict.pages import fresh_pages_note
from traincast.predict.registry import default_predictor
from traincast.predict.rnn import with_cudnn_recurrent
from traincast.predict.roofline import check_precision, mfu_peak
from traincast.workload.precision import get_precision
from traincast.workload.records import PHASES, MemoryFootprint, Workload, repeated_blocks


@dataclass(frozen=True)
class StepTime:
    """One training step on one data-parallel cluster."""

    forward_s: float
    backward_s: float
    optimizer_s: float
    communication_s: float  # exposed (not hidden behind backward)
    communication_total_s: float
    overhead_s: float
    op_times: OpTimes
    comm: CommTime
    straggler_s: float = 0.0  # waiting for the slowest of the GPUs (parallel.yaml)

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s + self.optimizer_s

    @property
    def iteration_s(self) -> float:
        return self.compute_s + self.communication_s + self.overhead_s + self.straggler_s

    def bottleneck(self) -> str:
        by = {"compute": 0.0, "memory": 0.0, "latency": 0.0}
        for t, b in zip(self.op_times.times_s, self.op_times.bound):
            by[b] += t
        by["latency"] += self.overhead_s
        by["communication"] = self.communication_s
        return max(by, key=by.get)


def step_time(
    workload: Workload,
    cluster: Cluster,
    predictor: Predictor | None = None,
    precision: str = "fp32",
    sync: str = "nccl",
    overlap: bool = True,
) -> StepTime:
    """One data-parallel step: the ops timed by ``predictor``, the gradient synchronisation after the backward pass
    (bucketed, overlapped, the rest exposed), the optimizer after it, the fixed per-step overhead, and the wait for
    the slowest of the cluster's GPUs."""
    from traincast.predict.parallel.engine import straggler_share

    # whatever predictor is given, recurrent layers are timed as cuDNN runs them on GPUs
    predictor = with_cudnn_recurrent(predictor or default_predictor())
    ot = predict_with_host(predictor, workload, cluster.device, precision)
    phase = {p: 0.0 for p in PHASES}
    for op, t in zip(workload.ops, ot.times_s):
        phase[op.phase] += t
    comm = gradient_sync(workload.memory.gradient_bytes, cluster, sync, phase["backward"], overlap)
    straggle = (phase["forward"] + phase["backward"]) * straggler_share(cluster.gpus) if cluster.device.kind == "gpu" else 0.0
    copy_in = copy_out = 0.0
    if cluster.gpus > 1 and workload.memory.gradient_bytes > 0:
        copy_in, copy_out = ddp_copy_s(workload, cluster.device, predictor, precision)
        phase["backward"] += copy_in
        comm = replace(comm, total_s=comm.total_s + copy_out, exposed_s=comm.exposed_s + copy_out)
    return StepTime(
        forward_s=phase["forward"],
        backward_s=phase["backward"],
        optimizer_s=phase["optimizer"],
        communication_s=comm.exposed_s,
        communication_total_s=comm.total_s,
        overhead_s=ot.step_overhead_s,
        op_times=ot,
        comm=comm,
        straggler_s=straggle,
    )


def ddp_copy_s(workload: Workload, device: Device, predictor: Predictor, precision: str) -> tuple[float, float]:
    """Seconds of DDP's gradient copies (into the buckets during the backward pass, back after the all-reduce;
    ``parallel.yaml``), timed by ``predictor`` as copy ops of the gradients' bytes."""
    from traincast.predict.parallel.engine import parallel_table
    from traincast.workload.records import OpRecord

    n = int(parallel_table()["data_parallel"]["ddp_gradient_copies"])
    if n <= 0:
        return 0.0, 0.0
    g = int(workload.memory.gradient_bytes)
    op = OpRecord(aten="copy_", phase="backward", module="(ddp buckets)", op_class="copy", flops=0, bytes_read=g,
                  bytes_written=g, dtype="fp32", input_shapes=(), output_shapes=(),
                  n_tensors=max(1, workload.param_tensors))
    ot = predictor.predict(replace(workload, ops=(op,), recurrent_calls=()), device, precision)
    t = float(ot.times_s[0])
    return t, t * (n - 1)


# --- workloads at other batch sizes ------------------------------------------
def interpolate(a: Workload, b: Workload, batch: int) -> Workload | None:
    """The workload at ``batch`` from traces at two batch sizes, per op linearly.

    Op FLOPs and bytes are affine in the batch size for every op a training
    step runs (weights are fixed, activations scale); convolutions keep their
    shapes, interpolated per dimension; returns None when the two traces do
    not have the same op sequence.
    """
    if len(a.ops) != len(b.ops) or a.batch_size == b.batch_size:
        return None
    if any(x.aten != y.aten or x.phase != y.phase for x, y in zip(a.ops, b.ops)):
        return None
    if batch == a.batch_size:
        return a
    if batch == b.batch_size:
        return b
    f = (batch - a.batch_size) / (b.batch_size - a.batch_size)

    def lin(x: int, y: int) -> int:
        return max(0, int(round(x + (y - x) * f)))

    def shapes(sa, sb, op_class: str) -> tuple:
        """A convolution's shapes, each dimension interpolated like the counts (its weight's are the same in both
        traces and stay as they are; the batch dimension is affine in the batch): the roofline reads the weight
        (depthwise or not, kernel area, Winograd). Other ops' shapes are dropped (the parallel engine splits them
        by their traced anchor); () too when the two traces' shapes differ in structure."""
        if op_class != "conv" or len(sa) != len(sb):
            return ()
        out = []
        for u, v in zip(sa, sb):
            if u is None or v is None or len(u) != len(v):
                return ()
            out.append(tuple(lin(int(i), int(j)) for i, j in zip(u, v)))
        return tuple(out)

    ops = tuple(
        replace(
            x,
            flops=lin(x.flops, y.flops),
            bytes_read=lin(x.bytes_read, y.bytes_read),
            bytes_written=lin(x.bytes_written, y.bytes_written),
            input_shapes=shapes(x.input_shapes, y.input_shapes, x.op_class),
            output_shapes=shapes(x.output_shapes, y.output_shapes, x.op_class),
        )
        for x, y in zip(a.ops, b.ops)
    )
    ma, mb = a.memory, b.memory
    mem = MemoryFootprint(
        parameter_bytes=ma.parameter_bytes,
        gradient_bytes=ma.gradient_bytes,
        optimizer_state_bytes=ma.optimizer_state_bytes,
        activation_bytes=lin(ma.activation_bytes, mb.activation_bytes),
        transient_bytes=lin(ma.transient_bytes, mb.transient_bytes),
        batch_size=batch,
    )
    ca, cb = a.recurrent_calls, b.recurrent_calls
    calls = ca
    if ca and len(ca) == len(cb):  # recurrent calls: their batch follows the step's
        calls = tuple(replace(x, batch=max(1, lin(x.batch, y.batch))) for x, y in zip(ca, cb))
    return replace(a, batch_size=batch, ops=ops, memory=mem, samples_per_step=batch, recurrent_calls=calls,
                   interpolated_from=(a.batch_size, b.batch_size),
                   recomputed_bytes=max(0, lin(a.recomputed_bytes, b.recomputed_bytes)))


def kernel_notes_on(wl: Workload, device) -> list[str]:
    """``wl``'s kernel notes (:meth:`Workload.kernel_notes`), the attention line saying cuDNN's kernel where its SDPA
    kernels run as cuDNN's on ``device`` because current PyTorch prefers them there (``sdpa`` auto)."""
    from traincast.predict.roofline import cudnn_takes_sdpa_op, sdpa_runs_cudnn

    notes = wl.kernel_notes()
    if not sdpa_runs_cudnn(getattr(wl, "sdpa", "auto"), device):
        return notes
    if not any(o.op_class == "attention" and cudnn_takes_sdpa_op(o) for o in wl.ops):
        return notes
    line = (f"attention: cudnn, fused (on {device.name} PyTorch's SDPA runs cuDNN's kernel before flash, as on every "
            "Hopper and data-centre Blackwell GPU with cuDNN newer than 9.15, the CUDA 13 wheels; --sdpa flash for "
            "an older PyTorch or TORCH_CUDNN_SDPA_DEPRIORITIZED=1)")
    return [line if n.startswith("attention: ") and "fused" in n and "math path" not in n else n for n in notes]


class WorkloadFamily:
    """Traces of one model configuration at any per-device batch, with a cache."""

    def __init__(self, model, *, optimizer="sgd", precision="fp32", seq_len=None, freeze=None, inputs=None,
                 fp8_attention: bool = False, kernels: str = "eager", memory_format: str = "contiguous",
                 sdpa: str = "auto"):
        from traincast.workload.fusion import check_kernels, check_sdpa
        from traincast.workload.layout import check_memory_format

        self.model = model
        self.kw = dict(optimizer=optimizer, precision=precision, seq_len=seq_len, freeze=freeze, inputs=inputs)
        self.fp8_attention = fp8_attention  # FP8 precisions: the attention kernels in FP8 too
        self.kernels = check_kernels(kernels)  # eager | compiled | transformer-engine (workload/fusion.py)
        self.memory_format = check_memory_format(memory_format)  # contiguous | channels_last (workload/layout.py)
        self.sdpa = check_sdpa(sdpa)  # auto | flash | cudnn (workload/fusion.py): PyTorch SDPA's kernel
        self._traces: dict[int, Workload] = {}
        self._interpolated: dict[int, Workload] = {}

    def trace(self, batch: int) -> Workload:
        from traincast.workload import trace

        if batch not in self._traces:
            from traincast.workload.fusion import apply_kernels, apply_sdpa
            from traincast.workload.precision import apply_fp8

            # compiled kernels: element-wise chains fused (on the traced data flow, so before anything rewrites
            # the ops); FP8 precisions: the linear layers' GEMMs, casts and amax work as Transformer Engine runs them
            from traincast.workload.layout import apply_memory_format

            wl = apply_sdpa(apply_kernels(trace(self.model, batch_size=batch, **self.kw), self.kernels), self.sdpa)
            wl = apply_memory_format(wl, self.memory_format)
            self._traces[batch] = apply_fp8(wl, fp8_attention=self.fp8_attention)
        return self._traces[batch]

    def at(self, batch: int) -> Workload:
        """Exact trace if cached, else interpolated from two traces with the same op sequence, else traced.

        A trace at batch 1 can differ from larger ones by an op (a loss that skips a copy); then a further
        anchor is traced so that two anchors agree, and batch 1 is extrapolated from them (exact in FLOPs and
        bytes, which are affine in the batch)."""
        if batch in self._traces:
            return self._traces[batch]
        if batch in self._interpolated:
            return self._interpolated[batch]
        if not self._traces:
            return self.trace(batch)
        for _ in range(3):
            pair = self._aligned_pair()
            if pair is not None:
                break
            top = max(self._traces)
            nxt = top * 2 if top * 2 != batch else top * 4
            self.trace(nxt)
        if pair is None:
            return self.trace(batch)
        wl = interpolate(self._traces[pair[0]], self._traces[pair[1]], batch)
        if wl is None:
            return self.trace(batch)
        self._interpolated[batch] = wl
        return wl

    def _aligned_pair(self) -> tuple[int, int] | None:
        """The two traced batches furthest apart whose op sequences agree (None when no two agree)."""
        bs = sorted(self._traces)
        best = None
        for i in range(len(bs)):
            for j in range(i + 1, len(bs)):
                a, b = self._traces[bs[i]], self._traces[bs[j]]
                if len(a.ops) == len(b.ops) and all(x.aten == y.aten and x.phase == y.phase for x, y in zip(a.ops, b.ops)):
                    if best is None or bs[j] - bs[i] > best[1] - best[0]:
                        best = (bs[i], bs[j])
        return best

    def anchor_of(self, wl: Workload) -> Workload:
        """A traced workload (with shapes) whose ops are aligned with ``wl``'s: ``wl`` itself when traced, else the
        first trace it was interpolated from."""
        if wl.interpolated_from and wl.interpolated_from[0] in self._traces:
            return self._traces[wl.interpolated_from[0]]
        return wl


# --- the forecast --------------------------------------------------------------
@dataclass(frozen=True)
class ScalingRow:
    gpus: int
    nodes: int
    per_gpu_batch: int
    global_batch: int
    iteration_s: float
    communication_s: float
    samples_per_s: float
    epoch_s: float | None  # None: no dataset size given
    speedup: float
    efficiency: float


@dataclass(frozen=True)
class Forecast:
    model: str
    device: str
    gpus: int
    nodes: int
    instance: str | None
    precision: str
    optimizer: str
    predictor: str
    sync: str
    overlap: bool
    per_gpu_batch: int
    global_batch: int
    dataset_size: int | None  # None: one iteration forecast only (epoch, total and cost need it)
    epochs: float
    iteration_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    communication_s: float
    communication_total_s: float
    overhead_s: float
    steps_per_epoch: int | None
    epoch_s: float | None
    total_s: float | None
    usd_per_hour: float | None
    cost_usd: float | None
    peak_memory_bytes: int
    memory_capacity_bytes: int
    fits_in_memory: bool
    max_per_gpu_batch: int
    memory: dict
    flops: dict
    bytes: dict
    parameters: int
    trainable_parameters: int
    bottleneck: str
    top_modules: tuple = ()
    scaling: tuple[ScalingRow, ...] = ()
    notes: tuple[str, ...] = ()
    straggler_s: float = 0.0  # waiting for the slowest GPU
    # the image input pipeline (predict/inputs.py): None for models that read no images; input_wait_s is in
    # iteration_s (the step waits for the loader by that much)
    input_pipeline: dict | None = None
    input_wait_s: float = 0.0
    # parallel layouts (None / empty for plain data parallelism): the layout, per-stage times, the pipeline
    # bubble, exposed and total communication by kind (tensor, pipeline, data, sharding, expert)
    strategy: dict | None = None
    stages: tuple = ()
    bubble_share: float = 0.0
    comm_exposed_by_kind: dict = field(default_factory=dict)
    comm_total_by_kind: dict = field(default_factory=dict)
    # FP8 and context parallelism (issue 22): seconds per step of the busiest GPU and their shares of the
    # iteration: fp8_gemm, fp8_cast_amax (casts, transposes, amax passes and the amax-history update),
    # cp_comm_exposed, cp_comm_hidden (the key/value exchange hidden behind attention)
    shares: dict = field(default_factory=dict)
    # the expected wall clock with failures, restarts and checkpoints (predict/goodput.py, WallClock.to_dict):
    # None where there is no total
    wall_clock: dict | None = None
    # model FLOPs of one step on all GPUs (the traced forward and backward, recomputation not counted) and the
    # dense peak MFU is taken against (per GPU: model_peak_name's; roofline.mfu_peak)
    model_flops: float = 0.0
    model_peak_flops_per_s: float = 0.0
    model_peak_name: str = ""
    # scaled from a step the user measured on another GPU (scale_by_measurement): that GPU, the step measured
    # and forecast there, and their ratio, which multiplies this forecast's compute; None: not scaled
    measured: dict | None = None
    # a model that reads token sequences: its sequence length (tokens per step = this x global_batch)
    tokens_per_sample: int | None = None
    workload: Workload | None = field(default=None, compare=False, repr=False)

    @property
    def model_tflops_per_gpu(self) -> float:
        """Model TFLOP/s per GPU: the step's model FLOPs over the iteration and the GPUs."""
        return self.model_flops / self.iteration_s / self.gpus / 1e12 if self.iteration_s > 0 else 0.0

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilisation: model FLOP/s per GPU over the dense peak of ``model_peak_name``."""
        if not self.model_peak_flops_per_s:
            return None
        return self.model_tflops_per_gpu * 1e12 / self.model_peak_flops_per_s

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "workload"}
        d["model_tflops_per_gpu"] = self.model_tflops_per_gpu
        d["mfu"] = self.mfu
        d["iteration_ms"] = self.iteration_s * 1e3
        d["forward_ms"] = self.forward_s * 1e3
        d["backward_ms"] = self.backward_s * 1e3
        d["optimizer_ms"] = self.optimizer_s * 1e3
        d["communication_ms"] = self.communication_s * 1e3
        d["memory"] = dict(self.memory, peak_bytes=self.peak_memory_bytes,
                           capacity_bytes=self.memory_capacity_bytes)
        d["top_modules"] = [dict(m) for m in self.top_modules]
        d["scaling"] = [asdict(r) for r in self.scaling]
        d["stages"] = [dict(x) for x in self.stages]
        return d


def scale_by_measurement(f: Forecast, source: Forecast, measured_s: float) -> Forecast:
    """``f`` with its compute scaled by how a step measured on another GPU compares with the forecast of the same
    step there (``source``: that GPU, one GPU, ``f``'s per-GPU batch): ratio ``k = measured_s /
    source.iteration_s``. The forward, backward, optimizer, per-step overhead and straggler wait take ``k``; the
    exposed communication and the input pipeline's wait do not. Epoch, total, cost and the scaling table follow.
    Habitat's question (a step timed on one GPU, asked of another), answered with the whole step's ratio."""
    k = measured_s / source.iteration_s
    compute = f.forward_s + f.backward_s + f.optimizer_s + f.overhead_s + f.straggler_s
    it = f.iteration_s + (k - 1) * compute
    epoch = f.steps_per_epoch * it if f.steps_per_epoch is not None else None
    total = epoch * f.epochs if epoch is not None else None
    cost = total / 3600 * f.usd_per_hour if total is not None and f.usd_per_hour is not None else None
    rows, base = [], None
    for r in f.scaling:
        r_it = r.communication_s + k * (r.iteration_s - r.communication_s)
        rate = r.global_batch / r_it
        base = base or rate
        rows.append(replace(r, iteration_s=r_it, samples_per_s=rate,
                            epoch_s=r.epoch_s / r.iteration_s * r_it if r.epoch_s is not None else None,
                            speedup=rate / base, efficiency=rate / base / r.gpus))
    note = (f"scaled from a step measured on {source.device}: {1e3 * measured_s:.4g} ms measured, "
            f"{1e3 * source.iteration_s:.4g} ms forecast there (x{k:.3f}); the compute forecast here takes that "
            "ratio, the communication does not")
    return replace(f, iteration_s=it, forward_s=f.forward_s * k, backward_s=f.backward_s * k,
                   optimizer_s=f.optimizer_s * k, overhead_s=f.overhead_s * k, straggler_s=f.straggler_s * k,
                   epoch_s=epoch, total_s=total, cost_usd=cost, scaling=tuple(rows), notes=(note,) + f.notes,
                   top_modules=tuple(dict(m, time_s=m["time_s"] * k) for m in f.top_modules),
                   measured=dict(device=source.device, per_gpu_batch=source.per_gpu_batch, measured_s=measured_s,
                                 forecast_s=source.iteration_s, ratio=k))


def memory_capacity(device: Device) -> int:
    """Bytes of a device's memory that tensors can use: on GPUs, less the CUDA context and library workspaces
    and the caching allocator's fragmentation (``system.yaml``)."""
    if device.kind == "cpu":
        return device.memory_bytes
    mem = system_table()["memory"]
    return int((device.memory_bytes - int(mem["reserved_bytes"])) * float(mem["allocator_slack"]))


def _layout(gpus: int, nodes: int | None, per_node: int | None) -> tuple[int, int]:
    """(gpus per node, nodes) for ``gpus`` GPUs."""
    if nodes:
        if gpus % nodes:
            raise ConfigError(f"--gpus {gpus} does not split evenly over --nodes {nodes}")
        return gpus // nodes, nodes
    if per_node and gpus > per_node:
        if gpus % per_node:
            raise ConfigError(f"--gpus {gpus} is not a multiple of the {per_node} GPUs per node")
        return per_node, gpus // per_node
    return gpus, 1


def hardware_of(cat: Catalog, *, gpu=None, instance: str | None = None, gpus: int = 1, nodes: int | None = None,
                network_gbit_per_s: float | None = None):
    """(device, instance, GPUs per node, nodes, network Gb/s per node) of a job: ``instance`` names the VM (and
    the GPU), else ``gpu`` the device, priced and networked as the cheapest catalog instance carrying it."""
    positive("--gpus", gpus)
    if nodes is not None:
        positive("--nodes", nodes)
    if network_gbit_per_s is not None:
        positive("--network-gbit", network_gbit_per_s)
    inst = cat.instance(instance) if instance else None
    if inst is not None:
        if gpu is not None and (gpu if isinstance(gpu, Device) else cat.device(gpu)).name != inst.device.name:
            raise ConfigError(f"instance {inst.name} carries {inst.device.name}, not {gpu}")
        device = inst.device
    elif isinstance(gpu, Device):  # e.g. a calibrated local device
        device = gpu
    elif gpu is not None:
        device = cat.device(gpu)
    else:
        raise ConfigError("name the hardware: --gpu NAME or --instance NAME")
    per_node_max = inst.gpus if inst else None
    gpn, n_nodes = _layout(gpus, nodes, per_node_max)
    if inst is None:
        inst = cat.cheapest_instance(device, gpn) or cat.reference_system(device)
        if inst is not None and inst.gpus != gpn and n_nodes == 1 and gpn > inst.gpus:
            gpn, n_nodes = _layout(gpus, None, inst.gpus)
        elif inst is None and device.nvlink_domain_gpus and not nodes and gpn > device.nvlink_domain_gpus:
            gpn, n_nodes = _layout(gpus, None, device.nvlink_domain_gpus)
    net = network_gbit_per_s or (inst.network_gbit_per_s if inst and inst.network_gbit_per_s
                                 else float(system_table()["network"]["default_inter_node_gbit_per_s"]))
    return device, inst, gpn, n_nodes, net


def cluster_of(cat: Catalog, *, gpu=None, instance: str | None = None, gpus: int = 1, nodes: int | None = None,
               network_gbit_per_s: float | None = None) -> tuple[Device, Cluster, object]:
    """(device, Cluster, instance) of a job (:func:`hardware_of`)."""
    device, inst, gpn, n_nodes, net = hardware_of(cat, gpu=gpu, instance=instance, gpus=gpus, nodes=nodes,
                                                  network_gbit_per_s=network_gbit_per_s)
    return device, Cluster(device=device, gpus_per_node=gpn, nodes=n_nodes, inter_node_gbit_per_s=net,
                           instance=inst.name if inst else None), inst


FP8_OVERHEAD_ATENS = ("fp8_cast_transpose", "fp8_amax", "fp8_amax_scale_update")


def step_shares(iteration_s: float, fp8_gemm_s: float = 0.0, fp8_cast_s: float = 0.0, cp_exposed_s: float = 0.0,
                cp_total_s: float = 0.0) -> dict:
    """Seconds and shares of the iteration in FP8 GEMMs, FP8 casts/amax and context-parallel communication
    (exposed and hidden); empty when the step has none of them."""
    vals = {"fp8_gemm": fp8_gemm_s, "fp8_cast_amax": fp8_cast_s, "cp_comm_exposed": cp_exposed_s,
            "cp_comm_hidden": max(0.0, cp_total_s - cp_exposed_s)}
    if not any(vals.values()):
        return {}
    it = max(iteration_s, 1e-12)
    return {k: {"s": v, "share": v / it} for k, v in vals.items()}


def _fp8_times(ops, times) -> tuple[float, float]:
    gemm = cast = 0.0
    for o, t in zip(ops, times):
        if o.dtype == "fp8" and o.op_class == "matmul":
            gemm += t
        elif o.aten in FP8_OVERHEAD_ATENS:
            cast += t
    return gemm, cast


def _top_modules(wl: Workload, op_times: OpTimes, n: int = 10) -> tuple[dict, ...]:
    """The ``n`` costliest modules, a repeated block's copies summed into one row (``model.layers.*.mlp``,
    ``count`` 32: :func:`traincast.workload.records.repeated_blocks`)."""
    rows = repeated_blocks(wl.ops)
    agg: dict[str, dict] = {}
    for op, t in zip(wl.ops, op_times.times_s):
        name, count = rows[op.module] if op.phase != "optimizer" else ("(optimizer)", 1)
        d = agg.setdefault(name, {"module": name, "count": count, "time_s": 0.0, "flops": 0, "bytes": 0})
        d["time_s"] += t
        d["flops"] += op.flops
        d["bytes"] += op.bytes_total
    total = sum(op_times.times_s) or 1.0
    rows = sorted(agg.values(), key=lambda d: -d["time_s"])[:n]
    return tuple(dict(r, share=r["time_s"] / total) for r in rows)


def forecast(
    model,
    *,
    gpu: str | Device | None = None,
    gpus: int = 1,
    nodes: int | None = None,
    batch_size: int,
    per_gpu_batch: bool = False,
    epochs: float = 1.0,
    dataset_size: int | None = None,
    precision: str = "fp32",
    optimizer: str = "sgd",
    instance: str | None = None,
    seq_len: int | None = None,
    sync: str = "nccl",
    overlap: bool = True,
    freeze: str | None = None,
    inputs=None,
    network_gbit_per_s: float | None = None,
    predictor: Predictor | None = None,
    catalog: Catalog | None = None,
    scaling: bool = True,
    family: WorkloadFamily | None = None,
    exact_trace: bool = True,
    strategy=None,
    fp8_attention: bool = False,
    loader_workers: int | None = None,
    kernels: str = "eager",
    memory_format: str = "contiguous",
    steps: int | None = None,
    tokens: float | None = None,
    sdpa: str = "auto",
) -> Forecast:
    """Forecast a training job: step, epoch, total time, cost, memory.

    The job's length: ``epochs`` of ``dataset_size`` samples (default: the zoo model's data set), or ``steps``
    optimizer steps in all, or ``tokens`` training tokens per epoch (a model that reads token sequences: the
    samples are ``tokens`` / its sequence length).

    ``strategy``: a :class:`~traincast.predict.parallel.ParallelConfig` (tensor, pipeline, data degrees,
    ZeRO/FSDP, micro-batch, schedule, recomputation, ...; see :func:`traincast.predict.parallel.resolve`) or
    None for data parallelism over ``gpus`` replicas.

    ``batch_size`` is the global batch (strong scaling) unless ``per_gpu_batch``
    (weak scaling). ``gpu`` or ``instance`` names the hardware; with only a GPU,
    the price is that of the cheapest catalog instance carrying it. ``loader_workers``: data-loader worker
    processes per GPU decoding and augmenting images (default: from a named ``instance``'s vCPUs; with neither,
    the input pipeline is not counted and a note says how many cores would keep up).
    ``kernels``: ``eager`` (every op its own kernel), ``compiled`` (element-wise chains between GEMMs fused,
    as ``torch.compile`` and Megatron run them) or ``transformer-engine`` (the same, and cuDNN's fused attention;
    :mod:`traincast.workload.fusion`).
    ``sdpa``: the fused attention kernel PyTorch's SDPA runs (``auto``: cuDNN's on Hopper and data-centre
    Blackwell, as current PyTorch picks; ``flash``; ``cudnn``: :data:`traincast.workload.fusion.SDPA_CHOICES`).
    ``memory_format``: ``contiguous`` (PyTorch's default NCHW) or ``channels_last`` (convolutions on NHWC
    activations, no layout transposes around tensor-core convolutions; :mod:`traincast.workload.layout`); a
    ``family`` given carries its own, which must agree. With ``exact_trace=False`` the workload may be interpolated from a ``family``'s
    traces at other batch sizes (exact in FLOPs and bytes; used by planning).
    """
    cat = catalog or get_catalog()
    positive("--gpus", gpus)
    positive("--batch-size", batch_size)
    positive("--epochs", epochs)
    if nodes is not None:
        positive("--nodes", nodes)
    _check_length(epochs, dataset_size, steps, tokens)
    sync = SYNC_METHODS.canonical(sync)
    if loader_workers is not None and (isinstance(loader_workers, bool) or not isinstance(loader_workers, int)
                                       or loader_workers < 1):
        raise ConfigError(f"--loader-workers must be a positive integer, got {loader_workers!r}")
    notes: list[str] = []
    if strategy is not None and strategy.gpus != gpus:
        raise ConfigError(f"the layout {strategy.label()} uses {strategy.gpus} GPUs, not the {gpus} asked for")
    parallel = strategy is not None and not strategy.is_plain_data_parallel
    device, inst, gpn, n_nodes, net = hardware_of(cat, gpu=gpu, instance=instance, gpus=gpus, nodes=nodes,
                                                  network_gbit_per_s=network_gbit_per_s)
    check_precision(device, precision)
    if strategy is not None and strategy.fp8_all_gather and get_precision(precision).fp8 is None:
        raise ConfigError("--fp8-all-gather needs an FP8 precision (--precision fp8 | fp8-current | mxfp8)")
    if fp8_attention and get_precision(precision).fp8 is None:
        raise ConfigError("--fp8-attention needs an FP8 precision (--precision fp8 | fp8-current | mxfp8)")
    b = batch_size
    if not per_gpu_batch and not parallel:
        if batch_size < gpus:
            raise ConfigError(f"global batch {batch_size} is smaller than the {gpus} GPUs; each GPU needs at least one sample")
        b = math.ceil(batch_size / gpus)
        if batch_size % gpus:
            notes.append(f"global batch {batch_size} does not divide over {gpus} GPUs; {b} per GPU assumed")
    global_batch = b * gpus
    family = family or WorkloadFamily(model, optimizer=optimizer, precision=precision, seq_len=seq_len,
                                      freeze=freeze, inputs=inputs, fp8_attention=fp8_attention, kernels=kernels,
                                      memory_format=memory_format, sdpa=sdpa)
    from traincast.workload.fusion import check_sdpa
    from traincast.workload.layout import check_memory_format

    if check_sdpa(sdpa) != "auto" and getattr(family, "sdpa", "auto") != sdpa:
        raise ConfigError(f"--sdpa {sdpa} differs from the given traces' ({getattr(family, 'sdpa', 'auto')})")

    want, fam_fmt = check_memory_format(memory_format), getattr(family, "memory_format", "contiguous")
    if want != "contiguous" and fam_fmt != want:  # a family given carries its own format
        raise ConfigError(f"--memory-format {want} differs from the given traces' ({fam_fmt})")
    if fam_fmt == "channels_last":
        notes.append("memory format channels_last: convolutions on NHWC activations, no layout transposes around "
                     "tensor-core convolutions")
    predictor = predictor or default_predictor()
    exact = exact_trace or predictor.needs_shapes_on(device)
    wl = None if parallel else family.trace(b) if exact else family.at(b)
    if dataset_size is None and steps is None and tokens is None:
        dataset_size = default_dataset_size(model)
    if dataset_size is not None:
        positive("--dataset-size", dataset_size)

    def cluster_for(g: int, nn: int) -> Cluster:
        return Cluster(device=device, gpus_per_node=g, nodes=nn, inter_node_gbit_per_s=net,
                       instance=inst.name if inst else None)

    if parallel:
        if not overlap:
            strategy = replace(strategy, overlap_grad_sync=False)
        return _parallel_forecast(
            model, strategy, family=family, device=device, inst=inst, cluster=cluster_for(gpn, n_nodes), gpus=gpus,
            n_nodes=n_nodes, batch_size=batch_size, per_gpu_batch=per_gpu_batch, epochs=epochs,
            dataset_size=dataset_size, precision=precision, optimizer=optimizer, predictor=predictor,
            exact=exact, notes=notes, total_steps=steps, tokens=tokens)
    st = step_time(wl, cluster_for(gpn, n_nodes), predictor, precision, sync, overlap)
    notes.extend(predictor.notes(wl, device, precision))
    slow_host = slow_host_note(st.op_times, wl, predictor, device, st.iteration_s)
    if slow_host:
        notes.append(slow_host)
    fresh = fresh_pages_note(wl, predictor, device, st.iteration_s)
    if fresh:
        notes.append(fresh)
    notes.extend(kernel_notes_on(wl, device))
    ip = None
    if device.kind == "gpu":  # on a CPU the loader shares the cores that train: not modelled
        workers = loader_workers
        if workers is None and instance is not None and inst is not None:
            workers = workers_per_gpu(inst.vcpus, inst.gpus)
        ip = input_pipeline(wl, b, st.iteration_s, workers)
        if ip is not None:
            notes.append(input_note(ip, b, st.iteration_s))
    wait_s = ip.wait_s if ip is not None else 0.0
    dataset_size, tps, steps = _job_length(wl, global_batch, dataset_size, steps, tokens, notes)
    epoch_s = total_s = None
    if steps is not None:
        epoch_s = steps * (st.iteration_s + wait_s)
        total_s = epoch_s * epochs
    usd_h = None
    if inst is not None and inst.usd_per_hour is not None:
        per_gpu = inst.usd_per_hour / inst.gpus
        usd_h = per_gpu * gpus if n_nodes == 1 and gpus < inst.gpus else inst.usd_per_hour * max(1, math.ceil(gpus / inst.gpus))
        if gpus < inst.gpus:
            notes.append(f"cost counts {gpus} of the {inst.gpus} GPUs of {inst.name} (pro rata)")
    cost = total_s / 3600 * usd_h if usd_h is not None and total_s is not None else None
    if usd_h is None:
        notes.append(f"no priced instance with {device.name} in the catalog: cost unknown")

    cap = memory_capacity(device)
    # one GPU: the gradients are made in the backward pass as the activations are freed; data-parallel replicas
    # hold them in DDP's buckets through the step
    grads_held = gpus > 1
    peak = wl.memory.peak(grads_held)
    fits = peak <= cap
    max_b = wl.memory.max_batch(cap, grads_held)
    if not fits:
        notes.append(f"out of memory: needs {peak / GIB:.1f} GiB per GPU, {device.name} has {cap / GIB:.1f} GiB usable; largest per-GPU batch that fits: {max_b}; "
                     "a parallel layout may fit (--tp/--pp/--zero/--micro-batch/--recompute, or --best-layout to "
                     "forecast the fastest that fits, or `traincast parallelize` to list them)")

    rows: list[ScalingRow] = []
    if scaling:
        ps = [1]
        while ps[-1] * 2 <= gpus:
            ps.append(ps[-1] * 2)
        if ps[-1] != gpus:
            ps.append(gpus)
        base_rate = None
        for p in ps:
            g, nn = _layout(p, None, gpn if p > gpn else None)
            pb = b if per_gpu_batch else max(1, math.ceil(global_batch / p))
            if p == gpus and pb == b:
                s = st
            else:
                # predictors that read op shapes need exact traces, not interpolated ones
                w = family.trace(pb) if predictor.needs_shapes_on(device) else family.at(pb)
                s = step_time(w, cluster_for(g, nn), predictor, precision, sync, overlap)
            rate = pb * p / s.iteration_s
            base_rate = base_rate or rate
            speed = rate / base_rate
            rows.append(ScalingRow(p, nn, pb, pb * p, s.iteration_s, s.communication_s, rate,
                                   math.ceil(dataset_size / (pb * p)) * s.iteration_s if dataset_size else None,
                                   speed, speed / p))
    bw = wl.by_phase()
    mfu_pk = mfu_peak(wl, device, precision)
    return Forecast(
        tokens_per_sample=tps,
        model=wl.model, device=device.name, gpus=gpus, nodes=n_nodes, instance=inst.name if inst else None,
        precision=precision, optimizer=wl.optimizer, predictor=st.op_times.predictor,
        sync=sync, overlap=overlap, per_gpu_batch=b, global_batch=global_batch,
        dataset_size=None if dataset_size is None else int(dataset_size),
        epochs=epochs, iteration_s=st.iteration_s + wait_s, forward_s=st.forward_s, backward_s=st.backward_s,
        optimizer_s=st.optimizer_s, communication_s=st.communication_s,
        communication_total_s=st.communication_total_s, overhead_s=st.overhead_s,
        steps_per_epoch=steps, epoch_s=epoch_s, total_s=total_s, usd_per_hour=usd_h, cost_usd=cost,
        peak_memory_bytes=peak, memory_capacity_bytes=cap, fits_in_memory=fits, max_per_gpu_batch=max_b,
        memory=wl.memory.to_dict(), flops={p: bw[p]["flops"] for p in PHASES} | {"total": wl.flops()},
        bytes={p: bw[p]["bytes"] for p in PHASES} | {"total": wl.bytes()},
        parameters=wl.parameters, trainable_parameters=wl.trainable_parameters,
        bottleneck="input" if wait_s > 0 else st.bottleneck(), top_modules=_top_modules(wl, st.op_times),
        scaling=tuple(rows), notes=tuple(notes), straggler_s=st.straggler_s,
        input_pipeline=ip.to_dict() if ip is not None else None, input_wait_s=wait_s,
        strategy=strategy.to_dict() if strategy is not None else None, workload=wl,
        shares=step_shares(st.iteration_s, *_fp8_times(wl.ops, st.op_times.times_s)),
        model_flops=float(wl.model_flops()) * gpus,
        model_peak_name=mfu_pk[0], model_peak_flops_per_s=mfu_pk[1],
    )


def _usd_per_hour(inst, gpus: int, n_nodes: int, notes: list[str]) -> float | None:
    if inst is None or inst.usd_per_hour is None:
        return None
    if gpus < inst.gpus:
        notes.append(f"cost counts {gpus} of the {inst.gpus} GPUs of {inst.name} (pro rata)")
        if n_nodes == 1:
            return inst.usd_per_hour / inst.gpus * gpus
    return inst.usd_per_hour * max(1, math.ceil(gpus / inst.gpus))


def _parallel_forecast(model, cfg, *, family, device, inst, cluster, gpus, n_nodes, batch_size, per_gpu_batch,
                       epochs, dataset_size, precision, optimizer, predictor, exact, notes, total_steps=None,
                       tokens=None) -> Forecast:
    """The forecast of a parallel layout (:mod:`traincast.predict.parallel`)."""
    from traincast.predict.collectives import fabric_note
    from traincast.predict.parallel.engine import ParallelModel

    if per_gpu_batch:
        per_replica = batch_size
    else:
        if batch_size < cfg.dp:
            raise ConfigError(f"global batch {batch_size} is smaller than the {cfg.dp} data-parallel replicas")
        per_replica = math.ceil(batch_size / cfg.dp)
        if batch_size % cfg.dp:
            notes.append(f"global batch {batch_size} does not divide over {cfg.dp} data-parallel replicas; "
                         f"{per_replica} per replica assumed")
    global_batch = per_replica * cfg.dp
    pm = ParallelModel(family, device, cluster, predictor, precision, exact_traces=exact)
    step = pm.evaluate(cfg, per_replica)
    base, _ = pm.base()
    notes.extend(predictor.notes(base, device, precision))
    notes.extend(kernel_notes_on(base, device))
    notes.extend(step.notes)
    fn = fabric_note(device.link.type)
    if fn and (cfg.tp > 1 or cfg.dp > 1 or cfg.pp > 1):
        notes.append(fn)
    wl = pm.workload(step.micro_batch)
    dataset_size, tps, steps = _job_length(wl, global_batch, dataset_size, total_steps, tokens, notes)
    epoch_s = total_s = None
    if steps is not None:
        epoch_s = steps * step.iteration_s
        total_s = epoch_s * epochs
    usd_h = _usd_per_hour(inst, gpus, n_nodes, notes)
    cost = total_s / 3600 * usd_h if usd_h is not None and total_s is not None else None
    if usd_h is None:
        notes.append(f"no priced instance with {device.name} in the catalog: cost unknown")
    bw = wl.by_phase()
    mfu_pk = mfu_peak(wl, device, precision)
    compute = step.forward_s + step.backward_s + step.optimizer_s
    idle = step.pipeline_s * step.bubble_share
    by = {"compute": compute, "communication": step.communication_exposed_s, "pipeline bubble": idle}
    stages = tuple(dict(stage=x.stage, first=x.units[0], last=x.units[1], layers=x.layers,
                        forward_ms=x.forward_s * 1e3, backward_ms=x.backward_s * 1e3, recompute_ms=x.recompute_s * 1e3,
                        tensor_comm_ms=x.tensor_comm_s * 1e3, parameters=x.parameters, memory_bytes=x.memory_bytes,
                        in_flight=x.in_flight) for x in step.stages)
    strategy = step.config.to_dict() | {"micro_batches": step.micro_batches, "pipeline": step.pipeline_method}
    return Forecast(
        tokens_per_sample=tps,
        model=base.model, device=device.name, gpus=gpus, nodes=n_nodes, instance=inst.name if inst else None,
        precision=precision, optimizer=base.optimizer, predictor=step.predictor, sync="nccl", overlap=True,
        per_gpu_batch=per_replica, global_batch=global_batch,
        dataset_size=None if dataset_size is None else int(dataset_size), epochs=epochs,
        iteration_s=step.iteration_s, forward_s=step.forward_s, backward_s=step.backward_s,
        optimizer_s=step.optimizer_s, communication_s=step.communication_exposed_s,
        communication_total_s=step.communication_total_s, overhead_s=step.overhead_s,
        steps_per_epoch=steps, epoch_s=epoch_s, total_s=total_s, usd_per_hour=usd_h, cost_usd=cost,
        peak_memory_bytes=step.peak_memory_bytes, memory_capacity_bytes=step.memory_capacity_bytes,
        fits_in_memory=step.fits_in_memory, max_per_gpu_batch=step.max_micro_batch,
        memory=dict(step.memory), flops={p: bw[p]["flops"] for p in PHASES} | {"total": wl.flops()},
        bytes={p: bw[p]["bytes"] for p in PHASES} | {"total": wl.bytes()},
        parameters=base.parameters, trainable_parameters=base.trainable_parameters,
        bottleneck=max(by, key=by.get), top_modules=(), scaling=(), notes=tuple(notes),
        straggler_s=step.straggler_s, strategy=strategy, stages=stages, bubble_share=step.bubble_share,
        comm_exposed_by_kind=dict(step.comm_exposed_by_kind), comm_total_by_kind=dict(step.comm_total_by_kind),
        workload=wl,
        shares=step_shares(step.iteration_s, step.fp8_gemm_s, step.fp8_cast_s,
                           step.comm_exposed_by_kind.get("context", 0.0), step.comm_total_by_kind.get("context", 0.0)),
        model_flops=float(wl.model_flops()) * global_batch / step.micro_batch,
        model_peak_name=mfu_pk[0], model_peak_flops_per_s=mfu_pk[1],
    )


def _check_length(epochs, dataset_size, steps, tokens) -> None:
    """One clear line where the job's length is given twice or is not a count (:func:`forecast`'s docstring)."""
    if steps is not None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError(f"--steps must be a positive integer, got {steps!r}")
        given = [n for n, v in (("--dataset-size", dataset_size), ("--tokens", tokens)) if v is not None]
        if epochs != 1:
            given.append("--epochs")
        if given:
            raise ConfigError(f"--steps is the whole job's length; {' and '.join(given)} cannot be given with it")
    if tokens is not None:
        if isinstance(tokens, bool) or not isinstance(tokens, (int, float)) or not math.isfinite(tokens) or tokens < 1:
            raise ConfigError(f"--tokens must be a positive number of tokens, got {tokens!r}")
        if dataset_size is not None:
            raise ConfigError("--tokens and --dataset-size both give the size of an epoch; give one")


_TOKENS = re.compile(r"(\d+) tokens")


def tokens_per_sample(wl: Workload) -> int | None:
    """The sequence length of a model that reads token sequences (its traced input, ``2 x (8192 tokens, vocab
    128256)``), else None."""
    m = _TOKENS.search(wl.input_description or "")
    return int(m.group(1)) if m else None


def _job_length(wl, global_batch, dataset_size, total_steps, tokens, notes):
    """(samples per epoch, tokens per sample, steps per epoch) from the length the user gave."""
    tps = tokens_per_sample(wl)
    if tokens is not None:
        if tps is None:
            raise ConfigError(f"--tokens needs a model that reads token sequences; {wl.model} reads "
                              f"{wl.input_description or 'other inputs'}: give --dataset-size or --steps")
        dataset_size = math.ceil(tokens / tps)
        notes.append(f"{tokens:,.0f} tokens per epoch at {tps:,} per sample: {dataset_size:,} samples")
    if total_steps is not None:
        return total_steps * global_batch, tps, total_steps
    if dataset_size is None:
        notes.append("one iteration only: the epoch, total time and cost need --dataset-size (training samples "
                     "per epoch), --tokens or --steps")
        return None, tps, None
    return dataset_size, tps, math.ceil(dataset_size / global_batch)


def default_dataset_size(model) -> int | None:
    """The training set of a zoo model (ImageNet-1k for torchvision models, ...); None for other models."""
    from traincast.errors import UnknownNameError
    from traincast.workload import zoo

    if isinstance(model, str):
        try:
            return zoo.get(model).default_dataset_size
        except UnknownNameError:  # spec files, configs and modules have no default
            pass
    return None





def parse_hardware(text: str, catalog: Catalog | None = None) -> dict:
    """'4xA100', 'A100x4', 'A100', 'p4d.24xlarge', '2xp4d.24xlarge' -> forecast keyword arguments."""
    import re

    cat = catalog or get_catalog()
    t = str(text).strip()
    m = re.fullmatch(r"(\d+)\s*[x×*]\s*(.+)", t) or None
    count, name = (int(m.group(1)), m.group(2)) if m else (None, t)
    if count is None:
        m = re.fullmatch(r"(.+?)\s*[x×*]\s*(\d+)", t)
        if m and not m.group(1).endswith("."):
            count, name = int(m.group(2)), m.group(1)
    name = name.strip()
    if count is not None and count < 1:
        raise ConfigError(f"hardware {text!r}: the count must be at least 1")
    if not name:
        raise ConfigError(f"hardware {text!r} names no GPU or instance; write e.g. 4xA100 or p4d.24xlarge")
    if name.lower() in {k.lower() for k in cat.instances} or name in cat.instances:
        inst = cat.instance(name)
        return {"instance": inst.name, "gpus": inst.gpus * (count or 1)}
    return {"gpu": cat.device(name).name, "gpus": count or 1}


def speed_ratio(model, *, batch_size: int, current: str, target: str, per_gpu_batch: bool = False,
                seq_len: int | None = None, precision: str = "fp32", optimizer: str = "sgd",
                catalog: Catalog | None = None) -> tuple[float, float | None, str]:
    """(target time per sample / current time per sample, target $/h, target label) by the predictor.

    For moving a running job: the measured speed scaled by this ratio is the
    forecast speed on the target hardware.
    """
    fam = WorkloadFamily(model, optimizer=optimizer, precision=precision, seq_len=seq_len)
    kw = dict(batch_size=batch_size, per_gpu_batch=per_gpu_batch, dataset_size=batch_size, epochs=1,
              precision=precision, optimizer=optimizer, seq_len=seq_len, catalog=catalog, scaling=False, family=fam)
    a = forecast(model, **parse_hardware(current, catalog), **kw)
    b = forecast(model, **parse_hardware(target, catalog), **kw)
    # per sample, so weak-scaling moves (more samples per step) compare fairly
    ratio = (b.iteration_s / b.global_batch) / (a.iteration_s / a.global_batch)
    label = f"{b.gpus}x {b.device}" + (f" ({b.instance})" if b.instance else "")
    return ratio, b.usd_per_hour, label
