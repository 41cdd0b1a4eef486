"""Calibrate the analytical predictor to the local device, and validate it.

``calibrate`` times real training steps of a few models at a few batch sizes
on this machine (CPU or CUDA, through ``traincast.measure``), traces the same
steps on the meta device, and fits the roofline's free parameters by least
squares on log step time:

    compute efficiency of matmuls, convolutions and attention/other,
    memory efficiency (one factor on the per-class table),
    per-op overhead (dispatch, launch) and per-step fixed overhead.

The result is a device profile (YAML: the device, the fitted overrides, the
measurement fingerprint, the date and the fit residuals) that ``traincast
predict --profile FILE`` or ``--device local`` uses.

``validate`` measures held-out models, predicts them with a profile fitted on
the calibration models only, and reports error and MAPE on the held-out ones.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import yaml

from traincast.errors import ConfigError, DataError
from traincast.hardware.records import GIB, Device, Link
from traincast.predict.analytical import (
    AnalyticalPredictor,
    efficiencies_for,
    gemm_factors,
    is_light,
    launches_of,
    measured_terms,
    roofline_s,
)
from traincast.workload.records import Workload

PARAM_NAMES = ("eff_matmul", "eff_conv", "eff_conv_grouped", "eff_other", "mem_scale", "op_overhead_us",
               "step_overhead_ms", "gemm_half_dim", "conv_half_dim", "eff_pool", "eff_norm", "dram_factor",
               "eff_reduction", "warm_cache", "light_overhead_us")
_BOUNDS = {
    "eff_matmul": (0.02, 1.0),
    "eff_conv": (0.02, 1.0),
    "eff_conv_grouped": (0.002, 1.0),
    "eff_other": (0.02, 1.0),
    "mem_scale": (0.05, 16.0),
    "op_overhead_us": (0.0, 500.0),
    "step_overhead_ms": (0.0, 500.0),
    "gemm_half_dim": (0.0, 1024.0),
    "conv_half_dim": (0.0, 1024.0),
    "eff_pool": (0.0005, 1.0),
    "eff_norm": (0.002, 1.0),
    "dram_factor": (0.1, 2.0),
    "eff_reduction": (0.002, 1.0),
    "warm_cache": (0.5, 8.0),
    "light_overhead_us": (0.0, 500.0),
}
# fit in log space of the parameters; those that may be 0 get an offset
_LOG_OFFSET = np.array([0, 0, 0, 0, 0, 1.0, 0.1, 1.0, 1.0, 0, 0, 0, 0, 0, 1.0])


def profiles_dir() -> Path:
    base = os.environ.get("TRAINCAST_HOME") or os.path.join(
        os.environ.get("XDG_DATA_HOME", os.path.expanduser("~/.local/share")), "traincast")
    return Path(base) / "profiles"


# --- the local device ---------------------------------------------------------
def _cpu_info() -> tuple[str, float, set[str]]:
    name, mhz, flags = "cpu", 0.0, set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            k, _, v = line.partition(":")
            k, v = k.strip(), v.strip()
            if k == "model name" and name == "cpu":
                name = v
            elif k == "cpu MHz" and not mhz:
                mhz = float(v)
            elif k == "flags" and not flags:
                flags = set(v.split())
    except OSError:
        pass
    return name, mhz or 2500.0, flags


def local_device(device: str = "cpu", threads: int | None = None, bandwidth_gb_per_s: float | None = None) -> Device:
    """A Device record for this machine's CPU (nominal peak; the memory bandwidth
    measured where given, else a nominal 20 GB/s) or its CUDA GPU (from the catalog)."""
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError("--device cuda was asked for but no CUDA GPU is present here; use --device cpu")
        from traincast.hardware import get_catalog

        return get_catalog().device(torch.cuda.get_device_name(0))
    name, mhz, flags = _cpu_info()
    cores = threads or torch.get_num_threads()
    per_cycle = 64 if "avx512f" in flags else 32 if ("avx2" in flags and "fma" in flags) else 16
    return Device(
        name=f"local-cpu ({name}, {cores} threads)", kind="cpu", vendor="", generation="cpu",
        fp32_tflops=cores * mhz * 1e6 * per_cycle / 1e12, tf32_tflops=None, fp16_tflops=None, bf16_tflops=None,
        memory_bytes=int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) if hasattr(os, "sysconf") else 8 * GIB,
        memory_bandwidth_gb_per_s=round(bandwidth_gb_per_s, 2) if bandwidth_gb_per_s else 20.0, sm_count=cores, boost_clock_mhz=mhz, link=Link("none", 0.0),
        source=f"this machine: {cores} threads x {mhz:.0f} MHz x {per_cycle} FLOP/cycle (nominal); bandwidth "
               + ("measured (STREAM add)" if bandwidth_gb_per_s else "nominal"),
        date=_dt.date.today().isoformat(),
    )


def last_level_cache_bytes() -> int:
    """The largest CPU cache of cpu0 (sysfs), 0 when unknown: working sets above it stream from DRAM."""
    best = 0
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            txt = (d / "size").read_text().strip().upper()
            mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(txt[-1:], 1)
            best = max(best, int(txt.rstrip("KMG")) * mult)
        except (OSError, ValueError):
            continue
    return best


# --- the model to fit -------------------------------------------------------------
# the fitted compute efficiencies: an op's compute key -> its kind (0-5) -> its slot in theta
_KIND_INDEX = {"matmul": 0, "conv": 1, "conv_grouped": 2, "pool": 4, "norm": 5, "reduction": 6}  # else 3 ("other")
_EFF_SLOTS = np.array([0, 1, 2, 3, 9, 10, 12])
DISTURBED_COV = 0.10  # robust CoV above which a timing counts as disturbed


def _fused_attention_for(device: str) -> bool | None:
    """On CPUs PyTorch runs attention as its math decomposition, not a fused kernel."""
    return None if device.startswith("cuda") else False

def _halves(kind: np.ndarray, th: np.ndarray) -> np.ndarray:
    """Each op's GEMM half-efficiency size: matmuls (kind 0) th[7], dense convolutions (kind 1) th[8]."""
    return np.where(kind == 0, th[7], np.where(kind == 1, th[8], 0.0))


def _measured_terms(fixed: dict | None, base: dict) -> tuple[float, float, float]:
    """(fresh-page threshold bytes, page-in rate B/s, last-level cache bytes): measured on the
    device (``fixed``: ``fresh_alloc`` and ``cache_bytes``), else the efficiency table's."""
    p = dict(base)
    fixed = fixed or {}
    if "fresh_alloc" in fixed:
        p["fresh_alloc"] = fixed["fresh_alloc"]
    if "cache_bytes" in fixed:
        p["cache"] = {"bytes": fixed["cache_bytes"]}
    fa_min, fa_rate, cache, _ = measured_terms(p)
    return fa_min, fa_rate, cache


def _rates(a, th: np.ndarray, in_cache: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-op attainable FLOP/s and bytes/s of ``a`` (``_Arrays`` or ``_LayerArrays``) under parameters ``th``:
    the op kind's fitted efficiency times the skinny-GEMM factor, and the table's memory efficiency times
    mem_scale, times the DRAM factor for working sets above the cache (``in_cache`` for the others)."""
    eff = th[_EFF_SLOTS][a.kind] * gemm_factors(a.dmin, _halves(a.kind, th))
    return a.peak * eff, a.bw * a.mem_eff * th[4] * np.where(a.big, th[11], in_cache)


class _Arrays:
    """One workload as arrays, for fast repeated prediction (the analytical
    predictor's per-op formula, with the fitted parameters as a vector)."""

    def __init__(self, wl: Workload, dev: Device, fixed: dict | None = None):
        from traincast.predict.analytical import fresh_output_bytes, gemm_min_dim

        base = efficiencies_for(dev)
        fa_min, fa_rate, cache = _measured_terms(fixed, base)
        self.dmin = np.array([gemm_min_dim(o) for o in wl.ops], dtype=float)
        self.fresh_s = np.array([fresh_output_bytes(o.aten, o.output_shapes, o.bytes_written, fa_min, o.dtype) / fa_rate
                                 if fa_rate else 0.0 for o in wl.ops])
        self.flops = np.array([o.flops for o in wl.ops], dtype=float)
        self.bytes = np.array([o.bytes_total for o in wl.ops], dtype=float)
        from traincast.predict.analytical import compute_key

        cls = [o.op_class for o in wl.ops]
        keys = [compute_key(o) for o in wl.ops]
        self.kind = np.array([_KIND_INDEX.get(k, 3) for k in keys])
        self.mem_eff = np.array([base["memory"].get(c, base["memory"]["default"]) for c in cls])
        chunk = max(1, int(base.get("foreach_chunk", 64)))
        self.launches = np.array([launches_of(o, chunk) for o in wl.ops], dtype=float)
        # the light overhead is a CPU term (the table of the device's generation has it): on GPUs a
        # foreach launch is a real kernel and every op pays the one overhead
        self.light = np.array([is_light(o) and "light_overhead_us" in base for o in wl.ops], dtype=bool)
        self.peak = dev.peak_flops_per_s("fp32")
        self.bw = dev.memory_bandwidth_bytes_per_s
        self.big = (self.bytes > cache) if cache else np.zeros(len(self.bytes), dtype=bool)
        self.phase = np.array([o.phase for o in wl.ops])

    def op_times(self, th: np.ndarray) -> np.ndarray:
        flops_s, bw = _rates(self, th, in_cache=1.0)
        over = np.where(self.light, th[14], th[5]) * 1e-6
        return roofline_s(self.flops, self.bytes, flops_s, bw, 0.0, self.launches, over, self.fresh_s)

    def predict_s(self, th: np.ndarray) -> float:
        return float(self.op_times(th).sum() + th[6] * 1e-3)

    def phases_s(self, th: np.ndarray) -> dict[str, float]:
        t = self.op_times(th)
        return {p: float(t[self.phase == p].sum()) for p in ("forward", "backward", "optimizer")}


def overrides_from(theta, dev: Device, fixed: dict | None = None) -> dict:
    th = dict(zip(PARAM_NAMES, (float(x) for x in theta)))
    base = efficiencies_for(dev)
    fixed = fixed or {}
    extra = {"fresh_alloc": fixed["fresh_alloc"]} if "fresh_alloc" in fixed else {}
    cache = fixed.get("cache_bytes", (base.get("cache") or {}).get("bytes", 0))
    if cache:
        extra["cache"] = {"bytes": int(cache), "dram_factor": th["dram_factor"]}
    return extra | {
        "compute": {"simt": {"matmul": th["eff_matmul"], "conv": th["eff_conv"],
                             "conv_grouped": th["eff_conv_grouped"], "attention": th["eff_other"],
                             "pool": th["eff_pool"], "norm": th["eff_norm"], "reduction": th["eff_reduction"],
                             "other": th["eff_other"]}},
        "memory": {k: v * th["mem_scale"] for k, v in base["memory"].items()},
        "op_overhead_us": th["op_overhead_us"],
        **({"light_overhead_us": th["light_overhead_us"]} if "light_overhead_us" in base else {}),
        "kernel_floor_us": 0.0,
        "step_overhead_ms": th["step_overhead_ms"],
        "gemm_half_dim": th["gemm_half_dim"],
        "conv_half_dim": th["conv_half_dim"],
    }


def prior_theta(dev: Device) -> np.ndarray:
    """The catalog's defaults for ``dev``'s generation, as a parameter vector."""
    p = efficiencies_for(dev)
    c = p["compute"]["simt"]
    other = c.get("other", 0.5)
    return np.array([c["matmul"], c["conv"], c.get("conv_grouped", c["conv"]), other, 1.0,
                     p["op_overhead_us"], p["step_overhead_ms"], p.get("gemm_half_dim", 0) or 0,
                     p.get("conv_half_dim", 0) or 0, c.get("pool", other), c.get("norm", other),
                     (p.get("cache") or {}).get("dram_factor", 1.0), c.get("reduction", other), 1.0,
                     p.get("light_overhead_us", p["op_overhead_us"])], dtype=float)


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


class _LayerArrays:
    """Forward single-op samples of a layer campaign (``measure_layer_samples`` rows)."""

    def __init__(self, samples: list[dict], dev: Device, fixed: dict | None = None):
        import json

        from traincast.predict.analytical import fresh_output_bytes, gemm_dims

        base = efficiencies_for(dev)
        fa_min, fa_rate, cache = _measured_terms(fixed, base)
        keep, outs = [], []
        for r in samples:
            if r.get("phase") != "forward" or not r.get("median_ms") or r.get("flops") is None:
                continue
            out = json.loads(r["output_shape_json"]) if r.get("output_shape_json") else None
            # a single op timed alone in a loop gets its large output from whatever the allocator
            # kept from earlier samples, or freshly mapped: which depends on the campaign's history,
            # not on the op, so such a sample says nothing reliable about the op's efficiency
            # (the page-in rate is measured on its own, by measure.memory)
            if out and fa_min and fa_rate and fresh_output_bytes(
                    r.get("op", ""), [out], float(r["bytes_written"] or 0), fa_min, r.get("dtype") or ""):
                continue
            keep.append(r)
            outs.append(out)
        self.rows = keep
        self.n = len(keep)
        self.flops = np.array([_sample_flops(r) for r in keep])
        self.bytes = np.array([float((r["bytes_read"] or 0) + (r["bytes_written"] or 0)) for r in keep])
        kinds = []
        for r in keep:
            k = r["op_class"]
            if k == "conv" and int((r.get("params") or {}).get("groups", 1) or 1) > 1:
                k = "conv_grouped"
            kinds.append(k)
        self.kind = np.array([_KIND_INDEX.get(k, 3) for k in kinds])
        self.mem_eff = np.array([base["memory"].get(r["op_class"], base["memory"]["default"]) for r in keep])
        dmin = []
        for r, out in zip(keep, outs):
            ins = json.loads(r["input_shapes_json"]) if r.get("input_shapes_json") else None
            d = gemm_dims(r.get("op", ""), ins, [out]) if ins and r["op_class"] in ("matmul", "conv") else None
            dmin.append(float(min(d)) if d else np.inf)
        self.dmin = np.array(dmin)
        # a sample whose repeats spread widely was disturbed by other work on the cores:
        # its fastest repeat is nearer the op's own time than its median
        self.y = np.log(np.array([float(r["min_ms"] if (r.get("cov") or 0) > DISTURBED_COV and r.get("min_ms")
                                        else r["median_ms"]) / 1e3 for r in keep]))
        self.peak = dev.peak_flops_per_s("fp32")
        self.bw = dev.memory_bandwidth_bytes_per_s
        self.big = (self.bytes > cache) if cache else np.zeros(len(self.bytes), dtype=bool)

    def resid(self, th: np.ndarray) -> np.ndarray:
        # an op timed alone in a loop finds its inputs in cache where they fit (warm_cache, th[13]);
        # inside a model step they were written long before and come from further away. With the
        # cache size unknown (no sysfs) every sample counts as fitting. A sample's overhead is that
        # of a forward op called alone (th[14]), the light overhead of steps.
        flops_s, bw = _rates(self, th, in_cache=th[13])
        t = roofline_s(self.flops, self.bytes, flops_s, bw, 0.0, 1.0, th[14] * 1e-6, 0.0)
        return np.log(t) - self.y


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


def fit_parameters(workloads: list[Workload], measured_s: list[float], dev: Device,
                   phases: list[dict] | None = None, phase_weight: float = 0.5,
                   prior_weight: float = 0.1, layer_samples: list[dict] | None = None,
                   layer_weight: float = 1.0, fixed: dict | None = None) -> tuple[np.ndarray, float]:
    """Least squares on log step time (and, where the profiler gave them, on log
    forward and backward shares of it); returns (theta, rms log error of steps).

    A weak prior (``prior_weight`` per parameter, in log space) holds parameters
    that the measured models cannot tell apart at the catalog's defaults: a set
    of CNNs says little about matmul efficiency, and would otherwise let it
    drift to whatever absorbs noise.

    ``layer_samples`` (forward single-op samples of a layer campaign) identify
    the per-class efficiencies directly, as Justus et al.'s layer benchmarks do;
    together they weigh ``layer_weight`` times one model step."""
    from scipy.optimize import least_squares

    if len(workloads) < 2:
        raise ConfigError("calibration needs at least 2 measured (model, batch) steps")
    arrs = [_Arrays(w, dev, fixed) for w in workloads]
    y = np.log(np.asarray(measured_s))
    # measured phase shares (profiler times carry profiler overhead: use them as fractions)
    share = []
    for i, ph in enumerate(phases or [{}] * len(arrs)):
        tot = sum(ph.get(p, 0.0) for p in ("forward", "backward", "optimizer"))
        share.append({p: ph[p] / tot * measured_s[i] for p in ("forward", "backward") if tot > 0 and ph.get(p, 0) > 0})
    lo = np.array([_BOUNDS[n][0] for n in PARAM_NAMES])
    hi = np.array([_BOUNDS[n][1] for n in PARAM_NAMES])
    off = _LOG_OFFSET

    def unpack(z):
        return np.clip(np.exp(z) - off, lo, hi)

    prior = np.log(np.clip(prior_theta(dev), lo, hi) + off)
    layers = _LayerArrays(layer_samples, dev, fixed) if layer_samples else None
    lw = layer_weight / np.sqrt(layers.n) if layers is not None and layers.n else 0.0

    def resid(z, with_phases=True):
        th = unpack(z)
        r = [np.log(a.predict_s(th)) - yy for a, yy in zip(arrs, y)]
        if with_phases and prior_weight:
            r += list(prior_weight * (z - prior))
        if with_phases and lw:
            r += list(lw * layers.resid(th))
        if with_phases:
            for a, sh in zip(arrs, share):
                if sh:
                    pr = a.phases_s(th)
                    r += [phase_weight * (np.log(max(pr[p], 1e-9)) - np.log(v)) for p, v in sh.items()]
        return np.asarray(r)

    best = None
    for start in ([0.5, 0.3, 0.05, 0.3, 0.5, 20.0, 1.0, 16.0, 16.0, 0.05, 0.1, 1.0, 0.1, 1.0, 20.0],
                  [0.2, 0.6, 0.02, 0.1, 1.0, 5.0, 5.0, 4.0, 4.0, 0.005, 0.03, 0.5, 0.02, 2.0, 5.0],
                  [0.8, 0.8, 0.2, 0.5, 0.3, 50.0, 0.5, 64.0, 64.0, 0.3, 0.3, 1.5, 0.4, 4.0, 50.0]):
        z0 = np.log(np.clip(np.asarray(start), lo, hi) + off)
        r = least_squares(resid, z0, bounds=(np.log(lo + off), np.log(hi + off)), method="trf")
        if best is None or r.cost < best.cost:
            best = r
    th = unpack(best.x)
    rms = float(np.sqrt(np.mean(resid(best.x, with_phases=False) ** 2)))
    return th, rms


# --- profiles -------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceProfile:
    name: str
    device: dict  # Device fields
    overrides: dict
    fingerprint: dict
    date: str
    fit: dict = field(default_factory=dict)  # residuals, parameters, the measurements used

    def device_record(self) -> Device:
        d = dict(self.device)
        d["link"] = Link(**d["link"])
        d["aliases"] = tuple(d.get("aliases", ()))
        return Device(**d)

    def predictor(self) -> AnalyticalPredictor:
        ov = dict(self.overrides)
        if "op_overhead_us" in ov and "light_overhead_us" not in ov:
            # a profile fitted before the light overhead existed charged every op alike
            ov["light_overhead_us"] = ov["op_overhead_us"]
        return AnalyticalPredictor(overrides=ov, name=f"analytical (profile {self.name})")

    def save(self, path: str | Path | None = None) -> Path:
        path = Path(path) if path else profiles_dir() / f"{self.name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        import json

        plain = json.loads(json.dumps(asdict(self), default=str))  # str subclasses, tuples -> plain YAML
        path.write_text(yaml.safe_dump(plain, sort_keys=False))
        return path

    @classmethod
    def load(cls, path: str | Path) -> DeviceProfile:
        p = Path(path)
        if not p.exists():
            raise DataError(f"device profile {str(p)!r} does not exist; run `traincast calibrate` first")
        try:
            d = yaml.safe_load(p.read_text())
            return cls(**d)
        except Exception as exc:  # malformed YAML or fields
            raise DataError(f"{p}: not a traincast device profile ({str(exc).splitlines()[0]})") from None


def find_profile(name: str = "local") -> DeviceProfile:
    p = Path(name)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return DeviceProfile.load(p)
    cand = profiles_dir() / f"{name}.yaml"
    if not cand.exists():
        raise DataError(f"no device profile {name!r} in {profiles_dir()}; run `traincast calibrate` "
                        "or pass --profile FILE")
    return DeviceProfile.load(cand)


def list_profiles() -> list[DeviceProfile]:
    d = profiles_dir()
    return [DeviceProfile.load(p) for p in sorted(d.glob("*.yaml"))] if d.exists() else []


# --- measuring and fitting ------------------------------------------------------
@dataclass(frozen=True)
class Measured:
    model: str
    batch_size: int
    measured_s: float
    iqr_s: float
    cov: float
    phases_s: dict  # forward/backward/optimizer from the profiler, when available


def _isolated_time_model(model, *, batch_size, **kw):
    from traincast.measure import worker
    from traincast.measure.model import time_model

    return worker.call(time_model, model, batch_size=batch_size, **kw)


def measure_steps(models, batch_sizes, *, device="cpu", steps=5, warmup=2, threads=None, seq_len=None,
                  progress=None, budget_s: float | None = None, retries: int = 2,
                  max_cov: float = DISTURBED_COV, isolate: bool = True) -> list[Measured]:
    """Time each (model, batch); with ``budget_s``, stop starting new ones once it is spent.

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
    for m in models:
        for b in batch_sizes:
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
            out.append(Measured(str(m), b, mt.timing.median_ms / 1e3, mt.timing.iqr_ms / 1e3, mt.timing.cov, ph))
            if progress:
                progress(out[-1])
    return out


def _trace_measured(m: Measured, fused: bool | None) -> Workload:
    from traincast.workload import trace

    return trace(m.model, batch_size=m.batch_size, fused_attention=fused)


def calibrate(models=("resnet18", "vgg11", "mobilenet_v2"), batch_sizes=(2, 8, 16), *, device="cpu",
              steps=5, warmup=2, threads=None, name="local", measured: list[Measured] | None = None,
              progress=None, layer_samples: list[dict] | None = None, bandwidth=None,
              isolate: bool = True) -> DeviceProfile:
    """Measure, trace, fit; return (not save) the profile.

    On CPUs the memory bandwidth and the cost of writing fresh pages are measured
    (``traincast.measure.memory``; pass ``bandwidth`` to reuse a measurement), not fitted.
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
        fa = dict(efficiencies_for(dev).get("fresh_alloc") or {"min_bytes": 32 * 2**20})
        fa["gb_per_s"] = round(rate, 3) if math.isfinite(rate) else 0.0
        fixed = {"fresh_alloc": fa, "cache_bytes": last_level_cache_bytes()}
    meas = measured or measure_steps(models, batch_sizes, device=device, steps=steps, warmup=warmup,
                                     threads=threads, progress=progress, isolate=isolate)
    fused = _fused_attention_for(device)
    wls = [_trace_measured(m, fused) for m in meas]
    theta, rms = fit_parameters(wls, [m.measured_s for m in meas], dev, [m.phases_s for m in meas],
                                layer_samples=layer_samples, fixed=fixed)
    ov = overrides_from(theta, dev, fixed)
    pred = AnalyticalPredictor(overrides=ov)
    rows = []
    for m, w in zip(meas, wls):
        p = pred.predict(w, dev).total_s()
        rows.append({"model": m.model, "batch_size": m.batch_size, "measured_s": m.measured_s, "predicted_s": p})
    fp = fingerprint(device, threads).as_dict()
    return DeviceProfile(
        name=name, device=asdict(dev), overrides=ov, fingerprint=fp, date=_dt.datetime.now().isoformat(timespec="seconds"),
        fit={"parameters": dict(zip(PARAM_NAMES, map(float, theta))), "rms_log_error": rms,
             "layer_samples": len(layer_samples or []),
             "bandwidth": asdict(bandwidth) if bandwidth is not None else None,
             "models": sorted({m.model for m in meas}), "steps": rows},
    )


def predict_measured(profile: DeviceProfile, meas: list[Measured], device: str = "cpu") -> list[dict]:
    """Predicted vs measured for each measurement, with the per-phase split."""
    from traincast.predict.compose import step_time
    from traincast.hardware.records import Cluster

    dev = profile.device_record()
    pred = profile.predictor()
    rows = []
    fused = _fused_attention_for(device)
    for m in meas:
        wl = _trace_measured(m, fused)
        st = step_time(wl, Cluster(dev), pred)
        rows.append({
            "model": m.model, "batch_size": m.batch_size, "measured_s": m.measured_s, "iqr_s": m.iqr_s,
            "predicted_s": st.iteration_s, "error_pct": (st.iteration_s - m.measured_s) / m.measured_s * 100,
            "predicted_phases_s": {"forward": st.forward_s, "backward": st.backward_s, "optimizer": st.optimizer_s},
            "measured_phases_s": m.phases_s,
        })
    return rows


@dataclass(frozen=True)
class StepComparison:
    """A measured step (``traincast bench model``) beside a device profile's forecast of it, op by op."""

    measured_ms: float  # median step
    predicted_ms: float
    phases: dict  # phase -> (measured ms, predicted ms); measured from the profiler's phase ranges
    ops: list  # (aten, phase, count, measured ms, predicted ms), largest |difference| first
    framework_ms: float  # measured self time outside aten ops (Python, autograd engine, hooks)
    step_overhead_ms: float  # predicted per-step fixed cost


def compare_step(mt, profile: "DeviceProfile") -> StepComparison:
    """Compare a profiled :class:`~traincast.measure.model.ModelTiming` with ``profile``'s forecast of the same
    step. Measured op times are profiler self times (kernels rolled up into the op a dispatch mode sees);
    predicted op times include each op's share of the per-op overhead, which on the measured side is mostly in
    ``framework_ms``."""
    from collections import defaultdict

    from traincast.workload import trace

    b = mt.breakdown
    if b is None:
        raise ConfigError("the step was not profiled (--profile-steps 0): nothing to compare op by op")
    wl = trace(mt.model, batch_size=mt.batch_size, optimizer=mt.optimizer or "sgd", precision=mt.precision or "fp32",
               seq_len=mt.seq_len, fused_attention=_fused_attention_for(mt.device))
    ot = profile.predictor().predict(wl, profile.device_record(), mt.precision or "fp32")
    pred, count, phase_pred = defaultdict(float), defaultdict(int), defaultdict(float)
    for op, t in zip(wl.ops, ot.times_s):
        pred[(op.aten, op.phase)] += t * 1e3
        count[(op.aten, op.phase)] += 1
        phase_pred[op.phase] += t * 1e3
    keys = set(pred)
    for a, d in b.per_aten.items():
        keys |= {(a, k[:-3]) for k, v in d.items() if k.endswith("_ms") and k != "total_ms" and v > 0}
    ops = [(a, ph, count.get((a, ph), 0), float(b.per_aten.get(a, {}).get(ph + "_ms", 0.0)), pred.get((a, ph), 0.0))
           for a, ph in keys]
    ops.sort(key=lambda r: -abs(r[3] - r[4]))
    phases = {ph: (float(b.per_phase_ms.get(ph, 0.0)), phase_pred.get(ph, 0.0))
              for ph in dict.fromkeys(list(b.per_phase_ms) + list(phase_pred))}
    framework = sum(v.get("overhead_ms", 0.0) for v in b.per_module.values())
    return StepComparison(float(mt.timing.median_ms), ot.total_s() * 1e3, phases, ops, float(framework),
                          ot.step_overhead_s * 1e3)


def mape(rows: list[dict]) -> float:
    if not rows:
        return float("nan")
    return float(np.mean([abs(r["error_pct"]) for r in rows]))


def plot_validation(cal_rows: list[dict], held_rows: list[dict], path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    for rows, label, mk in ((cal_rows, "calibration models", "o"), (held_rows, "held-out models", "s")):
        if rows:
            ax.scatter([r["measured_s"] * 1e3 for r in rows], [r["predicted_s"] * 1e3 for r in rows], marker=mk,
                       label=label)
            for r in rows:
                ax.annotate(f"{r['model']}/{r['batch_size']}", (r["measured_s"] * 1e3, r["predicted_s"] * 1e3),
                            fontsize=6, xytext=(2, 2), textcoords="offset points")
    allv = [r["measured_s"] * 1e3 for r in cal_rows + held_rows] + [r["predicted_s"] * 1e3 for r in cal_rows + held_rows]
    lo, hi = min(allv) * 0.7, max(allv) * 1.4
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="exact")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.15, label="±10%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured step (ms)")
    ax.set_ylabel("predicted step (ms)")
    ax.set_title(f"held-out MAPE {mape(held_rows):.1f}%")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- the summed-layer gap (the practicum report's 1.5x) ------------------------
@dataclass(frozen=True)
class LayerSum:
    """Whole step against the sum of its layers timed one by one (Justus et al.).

    ``layer_sum_s``: each leaf module's forward + backward + SGD update, timed
    alone on its real input, summed. ``harness_s``: what timing a layer alone
    costs beyond the layer (a loss, a backward-pass start, an optimizer call),
    measured on a layer that does nothing, times the number of layers.
    ``step_fixed_s``: the per-step fixed cost of the whole step (from the
    calibrated profile). ``residual_s``: what is left — cache effects (a layer
    alone finds its weights and inputs in cache) and ops outside modules.
    """

    model: str
    batch_size: int
    n_layers: int
    measured_s: float
    layer_sum_s: float
    harness_s: float
    step_fixed_s: float

    @property
    def corrected_sum_s(self) -> float:
        return self.layer_sum_s - self.harness_s + self.step_fixed_s

    @property
    def ratio_before(self) -> float:
        return self.layer_sum_s / self.measured_s

    @property
    def ratio_after(self) -> float:
        return self.corrected_sum_s / self.measured_s

    @property
    def residual_s(self) -> float:
        return self.measured_s - self.corrected_sum_s

    def to_dict(self) -> dict:
        return asdict(self) | {"corrected_sum_s": self.corrected_sum_s, "ratio_before": self.ratio_before,
                               "ratio_after": self.ratio_after, "residual_s": self.residual_s}


def _isolated_runner(mod, inputs):
    import torch

    params = [p for p in mod.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9) if params else None
    ins = [x.detach().clone().requires_grad_(x.is_floating_point()) if isinstance(x, torch.Tensor) else x
           for x in inputs]

    def run():
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        out = mod(*ins)
        out = out[0] if isinstance(out, (tuple, list)) else out
        if out.requires_grad:
            out.float().sum().backward()
        if opt is not None:
            opt.step()

    return run


def layer_sum(model, batch_size: int, measured_s: float, *, step_fixed_s: float = 0.0, threads: int | None = None,
              seq_len: int | None = None) -> LayerSum:
    """Time every leaf module of ``model``'s step alone on CPU and compare the sum with ``measured_s``."""
    import torch

    from traincast.measure.timing import QUICK, pinned_threads, time_fn
    from traincast.workload import build_step

    with pinned_threads(threads):
        step = build_step(model, batch_size=batch_size, device="cpu", seq_len=seq_len)
        leaves, seen = [], set()

        def hook(mod, args):
            if id(mod) not in seen and args and all(isinstance(a, torch.Tensor) for a in args):
                seen.add(id(mod))
                leaves.append((mod, tuple(a.detach().clone() for a in args)))

        handles = [m.register_forward_pre_hook(hook) for root in step.modules for m in root.modules()
                   if not any(True for _ in m.children())]
        try:
            step.run()
        finally:
            for h in handles:
                h.remove()
        total = 0.0
        for mod, ins in leaves:
            inplace = getattr(mod, "inplace", False)
            if inplace:  # an in-place activation cannot work on a leaf input that needs a gradient
                mod.inplace = False
            try:
                total += time_fn(_isolated_runner(mod, ins), policy=QUICK).median_ms / 1e3
            finally:
                if inplace:
                    mod.inplace = True
        # the harness alone: a layer that does no work (a 1x1 linear on one number)
        tiny = torch.nn.Linear(1, 1)
        harness = time_fn(_isolated_runner(tiny, (torch.randn(1, 1),)), policy=QUICK).median_ms / 1e3
    return LayerSum(str(getattr(step, "name", model)), batch_size, len(leaves), measured_s, total,
                    harness * len(leaves), step_fixed_s)


def fit_layer_sum_correction(sums: list[LayerSum]) -> tuple[float, float]:
    """Per-device correction of summed layer times: measured ~= a x (sum - harness) + b, a, b >= 0.

    ``a`` absorbs what layers cost inside a model rather than alone (cache
    effects, gradients a layer alone computes for its input), ``b`` the
    per-step fixed cost; the practicum report used a = 1/1.5, b = 0 by hand.
    """
    from scipy.optimize import nnls

    if len(sums) < 2:
        raise ConfigError("fitting the summed-layer correction needs at least 2 measured steps")
    A = np.array([[s.layer_sum_s - s.harness_s, 1.0] for s in sums])
    y = np.array([s.measured_s for s in sums])
    w = 1.0 / y  # relative error
    (a, b), _ = nnls(A * w[:, None], y * w)
    return float(a), float(b)
