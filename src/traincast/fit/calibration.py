"""Calibrate the roofline (:mod:`traincast.predict.roofline`) to the local device.

``calibrate`` times real training steps of a few models at a few batch sizes on this machine (CPU or CUDA,
through ``traincast.measure``), traces the same steps on the meta device, and fits the roofline's own
named parameters by least squares on log step time: the compute efficiency of every (unit, key) the
traced ops run at -- on a GPU that is where the precision sends them, e.g. ``compute.tensor.conv`` for fp32
convolutions on TF32 tensor cores --, one scale on the memory efficiencies, the per-op and per-step
overheads and the skinny-GEMM sizes. Forecasts then use exactly the parameters that were fitted, through
the same compiled arrays (:func:`~traincast.predict.roofline.compile_ops`).

The result is a device profile (:class:`~traincast.predict.profile.DeviceProfile`: the device, the fitted
parameters, the measurement fingerprint, the date and the fit residuals) that ``traincast predict --profile
FILE`` or ``--device local`` uses. Validation against held-out models is :mod:`traincast.fit.validate`.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import asdict, dataclass

import numpy as np

from traincast.errors import ConfigError
from traincast.hardware.local import last_level_cache_bytes, local_device
from traincast.hardware.records import Device
from traincast.predict.host import predict_with_host
from traincast.predict.profile import DeviceProfile
from traincast.predict.roofline import COMPUTE_KEYS, UNITS, CompiledOps, RooflineParams, compile_ops, fresh_output_bytes, gemm_dims
from traincast.workload.records import Workload

DISTURBED_COV = 0.10  # robust CoV above which a timing counts as disturbed
# the calibration models: each adds op kinds (efficiency keys) the ones before lack -- dense convolutions, batch
# norm and pooling (resnet18), depthwise convolutions (mobilenet_v2), grouped convolutions (regnet_x_400mf),
# matmuls, layer norm, softmax and embeddings (bert-tiny), large dense convolutions and matmuls (vgg11)
CALIBRATION_POOL = ("resnet18", "mobilenet_v2", "regnet_x_400mf", "bert-tiny", "vgg11")
WARM = "warm_cache"  # layer samples' in-cache bandwidth factor: fitted beside the roofline, not part of it


def fused_attention_for(device: str) -> bool | None:
    """On CPUs PyTorch runs attention as its math decomposition, not a fused kernel."""
    return None if device.startswith("cuda") else False


# --- the parameters to fit ---------------------------------------------------------------
# lower bound of each compute key's efficiency (the upper is 1): grouped convolutions, norms, reductions and
# pooling reach a small fraction of the peak on CPUs
_EFF_LOW = {"matmul": 0.02, "conv": 0.02, "attention": 0.02, "other": 0.02, "conv_grouped": 0.002,
            "conv_depthwise": 0.0005, "norm": 0.002,
            "reduction": 0.002, "pool": 0.0005}
_SCALAR_BOUNDS = {"memory_scale": (0.05, 16.0), "op_overhead_us": (0.0, 500.0), "light_overhead_us": (0.0, 500.0),
                  "host_forward_us": (0.0, 500.0), "host_backward_us": (0.0, 500.0),
                  "step_overhead_ms": (0.0, 500.0), "gemm_half_dim": (0.0, 1024.0), "conv_half_dim": (0.0, 1024.0),
                  "dram_factor": (0.1, 2.0), "warm_cache": (0.5, 8.0)}
# parameters that may be 0 are fitted as log(x + offset)
_LOG_OFFSET = {"op_overhead_us": 1.0, "light_overhead_us": 1.0, "host_forward_us": 1.0, "host_backward_us": 1.0,
               "step_overhead_ms": 0.1, "gemm_half_dim": 1.0, "conv_half_dim": 1.0}
# three starting points of the least squares, per parameter (the best fit of the three is kept)
_STARTS = {"matmul": (0.5, 0.2, 0.8), "conv": (0.3, 0.6, 0.8), "conv_grouped": (0.05, 0.02, 0.2),
           "conv_depthwise": (0.02, 0.005, 0.1),
           "attention": (0.3, 0.1, 0.5), "other": (0.3, 0.1, 0.5), "pool": (0.05, 0.005, 0.3),
           "norm": (0.1, 0.03, 0.3), "reduction": (0.1, 0.02, 0.4), "memory_scale": (0.5, 1.0, 0.3),
           "op_overhead_us": (20.0, 5.0, 50.0), "light_overhead_us": (20.0, 5.0, 50.0),
           "host_forward_us": (15.0, 40.0, 5.0), "host_backward_us": (8.0, 25.0, 3.0),
           "step_overhead_ms": (1.0, 5.0, 0.5), "gemm_half_dim": (16.0, 4.0, 64.0), "conv_half_dim": (16.0, 4.0, 64.0),
           "dram_factor": (1.0, 0.5, 1.5), WARM: (1.0, 2.0, 4.0)}


def _bounds(name: str) -> tuple[float, float]:
    if name.startswith("compute."):
        return _EFF_LOW[name.rsplit(".", 1)[1]], 1.0
    return _SCALAR_BOUNDS[name]


def _start(name: str, i: int) -> float:
    return _STARTS[name.rsplit(".", 1)[1] if name.startswith("compute.") else name][i]


def base_params(dev: Device, fixed: dict | None = None) -> RooflineParams:
    """The catalog's parameters for ``dev`` with what was measured on it (``fixed``: ``fresh_alloc``,
    ``cache_bytes``, and the depthwise convolutions' weight-gradient rate and call costs) and no kernel floor
    (the per-op overhead carries the short ops' cost)."""
    p = RooflineParams.for_device(dev)
    values: dict = {"kernel_floor_us": 0.0}
    fixed = fixed or {}
    if "fresh_alloc" in fixed:
        values["fresh_alloc_min_bytes"] = float(fixed["fresh_alloc"].get("min_bytes") or 0.0)
        values["fresh_alloc_gb_per_s"] = float(fixed["fresh_alloc"].get("gb_per_s") or 0.0)
    if "cache_bytes" in fixed:
        values["cache_bytes"] = float(fixed["cache_bytes"] or 0.0)
    for name in ("depthwise_wgrad_gflops", "depthwise_call_us", "depthwise_grad_call_us"):
        if name in fixed:
            values[name] = float(fixed[name] or 0.0)
    return p.with_values(values)


def free_parameters(compiled: list[CompiledOps], base: RooflineParams) -> list[str]:
    """The parameters the measurements can say something about: the compute efficiency of every (unit, key)
    some op runs at, the memory scale, the overheads, the skinny-GEMM sizes of the kinds of GEMM present,
    and the DRAM factor where the cache size is known."""
    used = set()
    gemm = set()
    for c in compiled:
        used |= set(zip(c.unit.tolist(), c.key.tolist()))
        gemm |= set(c.gemm[np.isfinite(c.dmin)].tolist())
    names = [f"compute.{UNITS[u]}.{COMPUTE_KEYS[k]}" for u, k in sorted(used)]
    names += ["memory_scale", "op_overhead_us", "step_overhead_ms"]
    if base.light_overhead_us is not None:
        names.append("light_overhead_us")
    if base.host_forward_us or base.host_backward_us:  # GPUs: the host's issue cost, overlapped (predict/host.py)
        names += ["host_forward_us", "host_backward_us"]
    names += [n for g, n in ((1, "gemm_half_dim"), (2, "conv_half_dim")) if g in gemm]
    if base.cache_bytes:
        names.append("dram_factor")
    return names


# --- measuring ------------------------------------------------------------------
@dataclass(frozen=True)
class Measured:
    model: str
    batch_size: int
    measured_s: float
    iqr_s: float
    cov: float
    phases_s: dict  # forward/backward/optimizer from the profiler, when available
    seq_len: int | None = None  # of a text model, as measured


def _isolated_time_model(model, *, batch_size, **kw):
    from traincast.measure import worker
    from traincast.measure.model import time_model

    return worker.call(time_model, model, batch_size=batch_size, **kw)


def measure_steps(models, batch_sizes, *, device="cpu", steps=5, warmup=2, threads=None, seq_len=None,
                  progress=None, budget_s: float | None = None, retries: int = 2,
                  max_cov: float = DISTURBED_COV, isolate: bool = True) -> list[Measured]:
    """Time each (model, batch), every model at the first batch size before any at the second (so that a budget
    cut covers every model); with ``budget_s``, stop starting new ones once it is spent.

    A measurement whose steps spread more than ``max_cov`` (robust CoV) was
    disturbed (another process took the cores for part of it): it is taken
    again, up to ``retries`` times, and the run with the lowest median kept.

    ``isolate`` (default): time each (model, batch) in a fresh process
    (:mod:`traincast.measure.worker`), as a training job runs. In one
    long-lived process the heap an earlier model left behind changes how many
    of the next one's allocations fault fresh pages in from the OS: on a 2-core VM a ResNet-18 batch-8 step took 0.95 s in a process that had
    just run a calibration and 0.60-0.62 s in processes of their own a minute
    later; MobileNetV2 at batch 16 was timed at 0.82 s inside a long validation
    process and at 1.05-1.1 s in fresh ones."""
    import time

    from traincast.measure.model import time_model

    if isolate:
        time_model = _isolated_time_model  # noqa: F811
    out = []
    t0 = time.monotonic()
    for b in batch_sizes:
        for m in models:
            if budget_s is not None and out and time.monotonic() - t0 > budget_s:
                return out
            mt = None
            for _ in range(1 + max(0, retries)):
                run = time_model(m, batch_size=b, device=device, steps=steps, warmup=warmup, profile_steps=1,
                                 threads=threads, seq_len=seq_len)
                if mt is None or run.timing.median_ms < mt.timing.median_ms:
                    mt = run
                if run.timing.cov <= max_cov or (budget_s is not None and time.monotonic() - t0 > budget_s):
                    break
            ph = {}
            if mt.breakdown is not None:
                ph = {k: v / 1e3 for k, v in mt.breakdown.per_phase_ms.items()}
            out.append(Measured(str(m), b, mt.timing.median_ms / 1e3, mt.timing.iqr_ms / 1e3, mt.timing.cov, ph, seq_len))
            if progress:
                progress(out[-1])
    return out


def _trace_measured(m: Measured, fused: bool | None) -> Workload:
    from traincast.workload import trace

    return trace(m.model, batch_size=m.batch_size, fused_attention=fused, seq_len=m.seq_len)


CAMPAIGN_OPS = ("linear", "matmul", "bmm", "conv2d", "layernorm", "batchnorm", "maxpool", "softmax", "relu", "add")


def run_layer_campaign(n_samples: int = 160, *, device: str = "cpu", threads: int | None = None,
                       store=None, size: str = "medium", ops: tuple[str, ...] = CAMPAIGN_OPS) -> list[dict]:
    """Forward samples of a small single-op campaign, stored (resumable) and returned."""
    from traincast.measure.layers import CampaignConfig, load_samples, run_campaign
    from traincast.store import Store

    st = store or Store()
    cfg = CampaignConfig(ops=ops, n_samples=n_samples, phase="forward", device=device, size=size,
                         threads=threads, campaign_id=f"calibrate-{device}-{size}-{n_samples}-{len(ops)}ops")
    run_campaign(st.conn, cfg)
    return load_samples(st.conn, cfg.resolved_id())


def _sample_flops(r: dict) -> float:
    """A forward layer sample's FLOPs in the traced steps' convention. Formula ops stored by earlier versions,
    which counted a fixed constant per output (9 per max-pool output whatever the window), are recounted."""
    if r.get("flops_source") != "formula":
        return float(r["flops"] or 0)
    from traincast.measure.layers import traced_forward_flops

    try:
        return traced_forward_flops(r["op"], r.get("params") or {}, r.get("dtype") or "fp32")
    except Exception:  # noqa: BLE001 - an op this version cannot rebuild keeps its stored count
        return float(r["flops"] or 0)


def _sample_arrays(samples: list[dict], dev: Device, base: RooflineParams) -> tuple[CompiledOps, np.ndarray, list]:
    """Forward single-op samples of a layer campaign (``measure_layer_samples`` rows) as compiled ops, their
    log measured seconds and the rows kept. A sample timed alone in a loop pays the overhead of an op called
    alone (the light overhead on CPUs)."""
    fa_min = base.fresh_alloc_min_bytes if base.fresh_alloc_gb_per_s else 0.0
    keep, outs = [], []
    for r in samples:
        if r.get("phase") != "forward" or not r.get("median_ms") or r.get("flops") is None:
            continue
        out = json.loads(r["output_shape_json"]) if r.get("output_shape_json") else None
        # a single op timed alone in a loop gets its large output from whatever the allocator
        # kept from earlier samples, or freshly mapped: which depends on the campaign's history,
        # not on the op, so such a sample says nothing reliable about the op's efficiency
        # (the page-in rate is measured on its own, by measure.memory)
        if out and fa_min and fresh_output_bytes(r.get("op", ""), [out], float(r["bytes_written"] or 0), fa_min,
                                                 r.get("dtype") or ""):
            continue
        keep.append(r)
        outs.append(out)
    keys, dmin, taps = [], [], []
    for r, out in zip(keep, outs):
        k, prm = r["op_class"], (r.get("params") or {})
        groups = int(prm.get("groups", 1) or 1)
        if k == "conv" and groups > 1:
            k = "conv_depthwise" if groups == int(prm.get("in_channels", 0) or 0) else "conv_grouped"
        taps.append(int(prm.get("kernel", 0) or 0) ** 2 if k == "conv_depthwise" else 0)
        keys.append(k if k in COMPUTE_KEYS else "other")
        ins = json.loads(r["input_shapes_json"]) if r.get("input_shapes_json") else None
        d = gemm_dims(r.get("op", ""), ins, [out]) if ins and r["op_class"] in ("matmul", "conv") else None
        dmin.append(float(min(d)) if d else np.inf)
    c = CompiledOps.from_arrays(
        [_sample_flops(r) for r in keep], [float((r["bytes_read"] or 0) + (r["bytes_written"] or 0)) for r in keep],
        [r["op_class"] for r in keep], dev, dtype=[r.get("dtype") or "fp32" for r in keep], key=keys, dmin=dmin,
        light=np.ones(len(keep), dtype=bool), fresh_min_bytes=fa_min, taps=taps, dw_call=[int(t > 0) for t in taps])
    # a sample whose repeats spread widely was disturbed by other work on the cores:
    # its fastest repeat is nearer the op's own time than its median
    y = np.log(np.array([float(r["min_ms"] if (r.get("cov") or 0) > DISTURBED_COV and r.get("min_ms")
                               else r["median_ms"]) / 1e3 for r in keep]))
    return c, y, keep


@dataclass(frozen=True)
class CalibrationFit:
    """The fitted parameters and how well they fit."""

    params: RooflineParams
    free: tuple[str, ...]  # the parameters that were fitted
    rms_log_error: float  # of the steps
    warm_cache: float  # layer samples' in-cache bandwidth factor (a property of timing one op alone)


def fit_parameters(workloads: list[Workload], measured_s: list[float], dev: Device,
                   phases: list[dict] | None = None, phase_weight: float = 0.5,
                   prior_weight: float = 0.1, layer_samples: list[dict] | None = None,
                   layer_weight: float = 1.0, fixed: dict | None = None, precision: str = "fp32") -> CalibrationFit:
    """Least squares on log step time (and, where the profiler gave them, on log forward and backward shares
    of it) over the roofline's free parameters (:func:`free_parameters`).

    A weak prior (``prior_weight`` per parameter, in log space) holds parameters that the measured models
    cannot tell apart at the catalog's defaults: a set of CNNs says little about matmul efficiency, and would
    otherwise let it drift to whatever absorbs noise.

    ``layer_samples`` (forward single-op samples of a layer campaign) identify the per-class efficiencies
    directly, as Justus et al.'s layer benchmarks do; together they weigh ``layer_weight`` times one model
    step."""
    from scipy.optimize import least_squares

    if len(workloads) < 2:
        raise ConfigError("calibration needs at least 2 measured (model, batch) steps")
    base = base_params(dev, fixed)
    arrs = [compile_ops(w.ops, dev, precision, base) for w in workloads]
    phase_of = [np.array([o.phase for o in w.ops]) for w in workloads]
    # On a GPU the host issues kernels while earlier ones run: each op waits for the host only where the host is
    # behind (predict/host.py), so the host's cost is fitted through that overlap, as the forecast applies it, not
    # as a serial gap per op (which a set of small, host-bound calibration models would inflate and every large
    # model would then pay). Host time per op is linear in (forward, backward) microseconds: two fixed vectors.
    host_vec = None
    if base.host_forward_us or base.host_backward_us:
        from traincast.predict.host import host_seconds, issue_bound, recurrent_modules

        host_vec = []
        for w in workloads:
            rec = recurrent_modules(w)
            host_vec.append((host_seconds(w.ops, 1.0, 0.0, rec), host_seconds(w.ops, 0.0, 1.0, rec)))
    layers = _sample_arrays(layer_samples, dev, base) if layer_samples else None
    free = free_parameters(arrs + ([layers[0]] if layers and len(layers[0]) else []), base)
    names = free + ([WARM] if layers and len(layers[0]) else [])
    y = np.log(np.asarray(measured_s))
    # measured phase shares (profiler times carry profiler overhead: use them as fractions)
    share = []
    for i, ph in enumerate(phases or [{}] * len(arrs)):
        tot = sum(ph.get(p, 0.0) for p in ("forward", "backward", "optimizer"))
        share.append({p: ph[p] / tot * measured_s[i] for p in ("forward", "backward") if tot > 0 and ph.get(p, 0) > 0})
    lo = np.array([_bounds(n)[0] for n in names])
    hi = np.array([_bounds(n)[1] for n in names])
    off = np.array([_LOG_OFFSET.get(n, 0.0) for n in names])

    def unpack(z):
        return np.clip(np.exp(z) - off, lo, hi)

    prior_x = np.array([1.0 if n == WARM else base.value(n) for n in names])
    prior = np.log(np.clip(prior_x, lo, hi) + off)
    lw = layer_weight / np.sqrt(len(layers[0])) if layers and len(layers[0]) else 0.0
    n_free = len(free)

    def params_of(x) -> RooflineParams:
        return base.with_vector(free, x[:n_free])

    def resid(z, with_phases=True):
        x = unpack(z)
        p = params_of(x)
        times = [a.times(p) for a in arrs]
        if host_vec is not None:
            times = [issue_bound(t, p.host_forward_us * hf + p.host_backward_us * hb)
                     for t, (hf, hb) in zip(times, host_vec)]
        step = p.step_overhead_ms * 1e-3
        r = [np.log(t.sum() + step) - yy for t, yy in zip(times, y)]
        if with_phases and prior_weight:
            r += list(prior_weight * (z - prior))
        if with_phases and lw:
            t = layers[0].times(p, warm_cache=x[n_free])
            r += list(lw * (np.log(t) - layers[1]))
        if with_phases:
            for t, ph, sh in zip(times, phase_of, share):
                for k, v in sh.items():
                    r.append(phase_weight * (np.log(max(float(t[ph == k].sum()), 1e-9)) - np.log(v)))
        return np.asarray(r)

    best = None
    for i in range(3):
        z0 = np.log(np.clip([_start(n, i) for n in names], lo, hi) + off)
        r = least_squares(resid, z0, bounds=(np.log(lo + off), np.log(hi + off)), method="trf")
        if best is None or r.cost < best.cost:
            best = r
    x = unpack(best.x)
    rms = float(np.sqrt(np.mean(resid(best.x, with_phases=False) ** 2)))
    return CalibrationFit(params_of(x), tuple(free), rms, float(x[n_free]) if len(names) > n_free else 1.0)


def key_shares(model, batch_size: int = 8, device: str = "cpu") -> dict[str, float]:
    """Each (unit.key) efficiency's share of a model's step time on this device at the catalog's parameters
    (traced on meta)."""
    wl = _trace_measured(Measured(str(model), batch_size, 0.0, 0.0, 0.0, {}), fused_attention_for(device))
    dev = local_device(device)
    p = RooflineParams.for_device(dev)
    c = compile_ops(wl.ops, dev, "fp32", p)
    t = c.times(p)
    out: dict[str, float] = {}
    for u, k, s in zip(c.unit.tolist(), c.key.tolist(), t.tolist()):
        name = f"{UNITS[u]}.{COMPUTE_KEYS[k]}"
        out[name] = out.get(name, 0.0) + s
    total = sum(out.values()) or 1.0
    return {k: v / total for k, v in out.items()}


def calibration_models(targets=(), device: str = "cpu", pool=CALIBRATION_POOL, min_share: float = 0.05) -> tuple[str, ...]:
    """The calibration models for ``targets`` (the user's models): the first of the pool, then, greedily, the pool
    models in which the efficiencies that take at least ``min_share`` of a target's time also take that much
    (so that the fit can tell them); without targets, the whole pool (every kind of op of the zoo's models)."""
    if not targets:
        return tuple(pool)
    need = set().union(*({k for k, v in key_shares(t, device=device).items() if v >= min_share} for t in targets))
    shares = {m: {k for k, v in key_shares(m, device=device).items() if v >= min_share} for m in pool}
    chosen, have = [pool[0]], set(shares[pool[0]])
    while True:
        gain = {m: len((k & need) - have) for m, k in shares.items() if m not in chosen}
        best = max(gain, key=gain.get, default=None)
        if best is None or gain[best] == 0:
            return tuple(chosen)
        chosen.append(best)
        have |= shares[best]


def _slower_than_fitted(meas: list[Measured], predicted_s: list[float], ratio: float, n: int) -> list[int]:
    """Indices of at most ``n`` measured steps that took more than ``ratio`` x their fitted time, the worst
    first: the ones a disturbance may have slowed (a disturbance never makes a step faster)."""
    slow = [(m.measured_s / p, i) for i, (m, p) in enumerate(zip(meas, predicted_s)) if p > 0 and m.measured_s > ratio * p]
    return [i for _, i in sorted(slow, reverse=True)[:max(0, n)]]


def calibrate(models=CALIBRATION_POOL, batch_sizes=(2, 8, 16), *, device="cpu",
              steps=5, warmup=2, threads=None, name="local", measured: list[Measured] | None = None,
              progress=None, layer_samples: list[dict] | None = None, bandwidth=None,
              depthwise=None, isolate: bool = True, retime: int = 0, retime_ratio: float = 1.2) -> DeviceProfile:
    """Measure, trace, fit; return (not save) the profile.

    ``retime``: after the fit, time again (once each) up to that many steps that took more than ``retime_ratio``
    x their fitted time, keep the faster of the two timings, and fit again if any changed. On a shared machine a
    neighbour can slow a whole measurement evenly (its spread stays small, so :func:`measure_steps` keeps it), and
    one such step drags every efficiency the fit shares with it; a step the model really misfits times the same
    twice and changes nothing. What was re-timed is kept in the profile (``fit.retimed``).

    On CPUs the memory bandwidth and the cost of writing fresh pages are measured
    (``traincast.measure.memory``; pass ``bandwidth`` to reuse a measurement), not fitted, and so is the rate of
    the slow path of depthwise weight gradients above 3x3 (``traincast.measure.kernels``; pass ``depthwise``, a
    ``DepthwiseCosts``, to reuse one).
    ``isolate``: time the steps not given in ``measured`` each in a fresh process
    (see ``measure_steps``)."""
    from traincast.measure.fingerprint import fingerprint

    fixed = None
    if device.startswith("cuda"):
        dev = local_device(device, threads)
    else:
        if bandwidth is None:
            from traincast.measure.memory import measure_bandwidth

            bandwidth = measure_bandwidth(device, threads=threads)
        dev = local_device(device, threads, bandwidth_gb_per_s=bandwidth.stream_gb_per_s)
        rate = bandwidth.page_in_gb_per_s
        table = RooflineParams.for_device(dev).to_table()
        fa = dict(table.get("fresh_alloc") or {"min_bytes": 32 * 2**20})
        fa["gb_per_s"] = round(rate, 3) if math.isfinite(rate) else 0.0
        if depthwise is None:
            from traincast.measure.kernels import measure_depthwise

            depthwise = measure_depthwise(device, threads=threads)
        fixed = {"fresh_alloc": fa, "cache_bytes": last_level_cache_bytes(),
                 "depthwise_wgrad_gflops": round(depthwise.gflops_per_s, 3),
                 "depthwise_call_us": round(depthwise.call_us, 2),
                 "depthwise_grad_call_us": round(depthwise.grad_call_us, 2)}
    meas = measured or measure_steps(models, batch_sizes, device=device, steps=steps, warmup=warmup,
                                     threads=threads, progress=progress, isolate=isolate)
    fused = fused_attention_for(device)
    wls = [_trace_measured(m, fused) for m in meas]
    fp = fingerprint(device, threads).as_dict()
    date = _dt.datetime.now().isoformat(timespec="seconds")

    def fit(meas):
        fitted = fit_parameters(wls, [m.measured_s for m in meas], dev, [m.phases_s for m in meas],
                                layer_samples=layer_samples, fixed=fixed)
        prof = DeviceProfile(name=name, device=asdict(dev), overrides=fitted.params.to_table(), fingerprint=fp,
                             date=date)
        pred = prof.predictor()
        # as the forecast times each step: the host overlapped
        return fitted, prof, [predict_with_host(pred, w, dev).total_s() for w in wls]

    meas = list(meas)
    fitted, prof, predicted = fit(meas)
    retimed = []
    for i in _slower_than_fitted(meas, predicted, retime_ratio, retime):
        m = meas[i]
        again = measure_steps([m.model], [m.batch_size], device=device, steps=steps, warmup=warmup, threads=threads,
                              seq_len=m.seq_len, isolate=isolate)[0]
        retimed.append({"model": m.model, "batch_size": m.batch_size, "first_s": m.measured_s,
                        "again_s": again.measured_s, "fitted_s": predicted[i]})
        if again.measured_s < m.measured_s:
            meas[i] = again
    if any(r["again_s"] < r["first_s"] for r in retimed):
        fitted, prof, predicted = fit(meas)
    rows = [{"model": m.model, "batch_size": m.batch_size, "measured_s": m.measured_s, "predicted_s": p,
             "cov": m.cov} for m, p in zip(meas, predicted)]
    return DeviceProfile(
        name=name, device=asdict(dev), overrides=prof.overrides, fingerprint=fp, date=prof.date,
        fit={"parameters": {n: float(fitted.params.value(n)) for n in fitted.free} | {WARM: fitted.warm_cache},
             "rms_log_error": fitted.rms_log_error,
             "layer_samples": len(layer_samples or []),
             "bandwidth": asdict(bandwidth) if bandwidth is not None else None,
             "depthwise": asdict(depthwise) if depthwise is not None and fixed is not None else None,
             "models": sorted({m.model for m in meas}), "steps": rows}
            | ({"retimed": retimed} if retimed else {}),
    )


