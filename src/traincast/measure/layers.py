"""Single-layer measurements and Justus-style layer campaigns.

``measure_op("conv2d", params, phase="train")`` times one op configuration.
``run_campaign(conn, CampaignConfig(...))`` draws configurations (sample ``idx``
of a campaign is a pure function of ``(seed, idx)``), times each one and
commits it to ``measure_layer_samples`` at once, so an interrupted campaign
(Ctrl-C, kill -9) loses no finished sample and a rerun with the same settings
continues where it stopped.

Phases
  forward  the op's forward as inside a training step: inputs and weights
           require grad, so autograd records its graph (then frees it).
  train    forward, backward from a ones-like output gradient, and a plain SGD
           step on the op's weights (if any); grads are set to None each time,
           as ``zero_grad(set_to_none=True)`` does.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from traincast.errors import ConfigError, UnknownNameError
from traincast.measure.ops import OPS, OpSpec, get_op, param_names, resolve_ops
from traincast.measure.timing import (
    QUICK,
    Timing,
    TimingPolicy,
    check_device,
    cudnn_benchmark,
    flush_denormals,
    pinned_threads,
    time_fn,
)

PHASES = ("forward", "train")
DTYPES = {"fp32": "float32", "float32": "float32", "fp16": "float16", "float16": "float16", "bf16": "bfloat16", "bfloat16": "bfloat16"}


@dataclass(frozen=True)
class SizeCap:
    """Upper bounds on a drawn configuration (forward pass)."""

    max_fwd_flops: float
    max_fwd_bytes: float  # bytes read + written by the forward


SIZES: dict[str, SizeCap] = {
    "small": SizeCap(5e7, 8 * 2**20),  # about a millisecond on a laptop core: >= 300 samples/min on 2 cores
    "medium": SizeCap(5e9, 512 * 2**20),
    "large": SizeCap(2e11, 8 * 2**30),  # for GPUs
}


@dataclass(frozen=True)
class OpCost:
    """What an op configuration computes and moves (from a meta-device build)."""

    op: str
    phase: str
    flops: float  # of the phase
    fwd_flops: float
    flops_source: str  # 'counter' | 'formula'
    bytes_read: float  # of the phase
    bytes_written: float
    fwd_bytes: float  # forward read + written
    weight_bytes: float
    input_shapes: tuple[tuple[int, ...], ...]  # activations, then weights
    output_shape: tuple[int, ...]


@dataclass(frozen=True)
class LayerSample:
    """One timed op configuration."""

    op: str
    op_class: str
    phase: str
    device: str
    dtype: str
    params: Mapping[str, object]
    cost: OpCost
    timing: Timing | None
    threads: int
    fingerprint_id: str | None = None
    campaign_id: str | None = None
    idx: int | None = None
    error: str | None = None

    @property
    def median_ms(self) -> float | None:
        return self.timing.median_ms if self.timing else None


def _dtype(name: str):
    import torch

    key = DTYPES.get(str(name).lower())
    if key is None:
        raise UnknownNameError("dtype", name, ["fp32", "fp16", "bf16"])
    return getattr(torch, key)


def _nbytes(t) -> int:
    return t.numel() * t.element_size()


def _check_params(spec: OpSpec, params: Mapping[str, object]) -> dict:
    known = param_names(spec.name)
    for k in params:
        if k not in known:
            raise UnknownNameError(f"parameter of {spec.name}", k, known)
    missing = [k for k in known if k not in params]
    if missing:
        raise ConfigError(f"{spec.name} needs the parameters {', '.join(missing)} (it takes {', '.join(known)})")
    out = dict(params)
    for k, v in out.items():
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v < 0:
            raise ConfigError(f"{spec.name}: {k} must not be negative, got {v}")
    return out


def traced_ops(op: str, params: Mapping[str, object], dtype: str = "fp32") -> list:
    """The dispatch-level ops (``OpRecord``s) one forward call of an op configuration runs, traced on
    meta as a training step traces them."""
    from traincast.workload.tracer import trace_call

    call, _, _ = get_op(op).build(dict(params), "meta", _dtype(dtype), True)
    return trace_call(call)[1]


def traced_forward_flops(op: str, params: Mapping[str, object], dtype: str = "fp32") -> float:
    """Forward FLOPs of one op configuration as a traced training step counts them (costed by
    ``traincast.workload.costs``): the convention the predictor's efficiencies are fitted in. (A 2x2 max
    pool is 4 FLOPs per output there, a 3x3 one 9.)"""
    return float(sum(o.flops for o in traced_ops(op, params, dtype)))


def op_cost(op: str, params: Mapping[str, object], phase: str = "forward", dtype: str = "fp32") -> OpCost:
    """FLOPs, bytes and shapes of one op configuration, from a build on the meta device.

    Raises ``ConfigError`` if the shapes are impossible (the message says why).
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from traincast.workload.tracer import trace_call

    spec = get_op(op)
    if phase not in PHASES:
        raise UnknownNameError("phase", phase, PHASES)
    params = _check_params(spec, params)
    tdtype = _dtype(dtype)
    try:
        call, inputs, weights = spec.build(params, "meta", tdtype, True)
        with FlopCounterMode(display=False) as fwd_counter:
            out, fwd_ops = trace_call(call)  # one forward, seen by both counters
        fwd_counted = fwd_counter.get_total_flops()
        train_counted = 0
        if phase == "train":
            with FlopCounterMode(display=False) as bwd_counter:
                out.backward(torch.empty_like(out))
            train_counted = fwd_counted + bwd_counter.get_total_flops()
    except (RuntimeError, ValueError, IndexError, ZeroDivisionError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"impossible {op} configuration {json.dumps(params)}: {msg}") from None
    if any(d == 0 for d in out.shape) or any(t.numel() == 0 for t in inputs):
        raise ConfigError(f"impossible {op} configuration {json.dumps(params)}: a tensor has a zero-sized dimension")
    float_inputs = [t for t in inputs if t.is_floating_point()]
    in_bytes = sum(_nbytes(t) for t in inputs)
    w_bytes = sum(_nbytes(t) for t in weights)
    w_numel = sum(t.numel() for t in weights)
    out_bytes = _nbytes(out)
    fwd_read, fwd_written = in_bytes + w_bytes, out_bytes
    if spec.counted:
        fwd_flops, source = float(fwd_counted), "counter"
    else:  # the FLOPs a traced step counts for the same op (traincast.workload.costs)
        fwd_flops, source = float(sum(o.flops for o in fwd_ops)), "formula"
    if phase == "forward":
        flops, read, written = fwd_flops, fwd_read, fwd_written
    else:
        opt_flops = 2.0 * w_numel  # p -= lr * g
        if spec.op_class == "conv":
            # grad input and grad weight each cost one forward. (FlopCounterMode's
            # convolution_backward formula ignores groups: ~groups/2 x too high for
            # depthwise convolutions in torch 2.x, so it is not used here.)
            flops = 3.0 * fwd_flops + opt_flops
        elif spec.counted:
            flops = float(train_counted) + opt_flops
        else:
            bwd = 2.0 * fwd_flops if spec.flops_per_elem else float(out.numel())
            flops = fwd_flops + bwd + opt_flops
        bwd_read = out_bytes + sum(_nbytes(t) for t in float_inputs) + w_bytes
        bwd_written = sum(_nbytes(t) for t in float_inputs) + w_bytes
        read = fwd_read + bwd_read + 2 * w_bytes
        written = fwd_written + bwd_written + w_bytes
    return OpCost(
        op=spec.name,
        phase=phase,
        flops=flops,
        fwd_flops=fwd_flops,
        flops_source=source,
        bytes_read=float(read),
        bytes_written=float(written),
        fwd_bytes=float(fwd_read + fwd_written),
        weight_bytes=float(w_bytes),
        input_shapes=tuple(tuple(int(d) for d in t.shape) for t in [*inputs, *weights]),
        output_shape=tuple(int(d) for d in out.shape),
    )


def make_runner(op: str, params: Mapping[str, object], phase: str, device: str, dtype: str = "fp32") -> Callable[[], None]:
    """A closure that runs the op once on real tensors on ``device`` (see module doc)."""
    import torch

    spec = get_op(op)
    call, inputs, weights = spec.build(dict(params), device, _dtype(dtype), True)
    if phase == "forward":

        def run_forward() -> None:
            call()

        return run_forward
    leaves = [t for t in [*inputs, *weights] if t.requires_grad]
    grad_out = torch.ones_like(call().detach())
    opt = torch.optim.SGD(weights, lr=1e-6) if weights else None

    def run_train() -> None:
        for t in leaves:
            t.grad = None
        call().backward(grad_out)
        if opt is not None:
            opt.step()

    return run_train


def measure_op(
    op: str,
    params: Mapping[str, object],
    *,
    phase: str = "forward",
    device: str = "cpu",
    dtype: str = "fp32",
    policy: TimingPolicy | None = None,
    threads: int | None = None,
) -> LayerSample:
    """Time one op configuration; the cost (FLOPs, bytes) comes from a meta build."""
    import torch

    device = check_device(device)
    cost = op_cost(op, params, phase, dtype)
    spec = get_op(op)
    with pinned_threads(threads) as n_threads, cudnn_benchmark(device), flush_denormals(), \
            torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        timing = time_fn(make_runner(op, params, phase, device, dtype), device=device, policy=policy or QUICK)
    return LayerSample(spec.name, spec.op_class, phase, device, dtype, dict(params), cost, timing, n_threads)


# --------------------------------------------------------------------------- drawing configurations


def _fits(cost: OpCost, cap: SizeCap) -> bool:
    return cost.fwd_flops <= cap.max_fwd_flops and cost.fwd_bytes <= cap.max_fwd_bytes


_MIN = {"height": 4, "width": 4, "seq": 8, "hidden": 16, "in_features": 8, "out_features": 8, "k": 8, "m": 1, "n": 8,
        "vocab": 64, "classes": 2, "cols": 8, "channels": 8, "heads": 1}


def _shrink(spec: OpSpec, params: dict, fixed: Mapping[str, object], turn: int) -> bool:
    """Halve the next shrinkable dimension; False when none is left."""
    keys = [k for k in spec.shrink_keys if k not in fixed and params.get(k)]
    for j in range(len(keys)):
        k = keys[(turn + j) % len(keys)]
        lo = _MIN.get(k, 1)
        if params[k] > lo:
            new = max(lo, params[k] // 2)
            if k == "height" and params.get("width") == params[k] and "width" not in fixed:
                params["width"] = new
            if spec.name in ("conv2d",) and k in ("in_channels", "out_channels") and params["groups"] > 1:
                continue
            params[k] = new
            return True
    return False


def draw_config(
    ops: tuple[str, ...], seed: int, idx: int, size: str = "small", fixed: Mapping[str, object] | None = None, dtype: str = "fp32"
) -> tuple[str, dict, OpCost]:
    """Configuration number ``idx`` of a campaign: (op, params, forward cost).

    Deterministic in (ops, seed, idx, size, fixed). Drawn shapes larger than the
    size cap are redrawn a few times, then shrunk (batch first) until they fit.
    Keys of ``fixed`` that an op takes are pinned to the given values.
    """
    cap = SIZES[size]
    fixed = dict(fixed or {})
    rng = np.random.default_rng([seed, idx])
    op = ops[int(rng.integers(len(ops)))]
    spec = OPS[op]
    params = None
    for attempt in range(8):
        p = spec.sample(rng)
        p.update({k: v for k, v in fixed.items() if k in p})
        if spec.name == "conv2d" and p["groups"] > 1 and ("in_channels" in fixed or "out_channels" in fixed):
            p["groups"] = 1
        params = p
        cost = op_cost(op, p, "forward", dtype)
        if _fits(cost, cap):
            return op, p, cost
    turn = 0
    while not _fits(cost, cap) and _shrink(spec, params, fixed, turn):
        turn += 1
        cost = op_cost(op, params, "forward", dtype)
    return op, params, cost


# --------------------------------------------------------------------------- campaigns


@dataclass(frozen=True)
class CampaignConfig:
    ops: tuple[str, ...] = tuple(OPS)
    n_samples: int = 300  # successful samples wanted in total (earlier runs count)
    phase: str = "forward"
    device: str = "cpu"
    dtype: str = "fp32"
    size: str = "small"
    seed: int = 0
    fixed: Mapping[str, object] = field(default_factory=dict)
    policy: TimingPolicy = QUICK
    threads: int | None = None
    campaign_id: str | None = None  # default: derived from the settings above

    def resolved_id(self) -> str:
        if self.campaign_id:
            return self.campaign_id
        key = json.dumps(
            [sorted(self.ops), self.phase, self.device, self.dtype, self.size, self.seed, sorted(dict(self.fixed).items())],
            default=str,
        )
        return f"{self.phase}-{self.device.replace(':', '')}-{self.size}-s{self.seed}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class CampaignResult:
    campaign_id: str
    n_total: int  # successful samples stored now
    n_new: int  # timed in this run
    n_failed_new: int
    n_before: int
    elapsed_s: float
    samples_per_min: float  # n_new / elapsed
    fingerprint_id: str
    interrupted: bool = False


def _validate_config(cfg: CampaignConfig) -> CampaignConfig:
    ops = resolve_ops(cfg.ops)
    if cfg.phase not in PHASES:
        raise UnknownNameError("phase", cfg.phase, PHASES)
    if cfg.size not in SIZES:
        raise UnknownNameError("size", cfg.size, SIZES)
    if cfg.n_samples < 0:
        raise ConfigError(f"--samples must be at least 0, got {cfg.n_samples}")
    _dtype(cfg.dtype)
    device = check_device(cfg.device)
    all_keys = {k for o in ops for k in param_names(o)}
    for k, v in dict(cfg.fixed).items():
        if k not in all_keys:
            raise UnknownNameError(f"parameter of {', '.join(ops)}", k, all_keys)
    # a pinned value every op taking it must accept: check on one draw per op
    for o in ops:
        pinned = {k: v for k, v in dict(cfg.fixed).items() if k in param_names(o)}
        if pinned:
            p = OPS[o].sample(np.random.default_rng(0))
            p.update(pinned)
            if o == "conv2d":
                p["groups"] = 1
            op_cost(o, p, cfg.phase, cfg.dtype)
    return CampaignConfig(**{**asdict_shallow(cfg), "ops": ops, "device": device})


def asdict_shallow(cfg) -> dict:
    return {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}


def _register_campaign(conn: sqlite3.Connection, cfg: CampaignConfig, cid: str) -> None:
    row = conn.execute("SELECT seed, ops, phase, device, dtype, size, fixed_json FROM measure_campaigns WHERE id=?", (cid,)).fetchone()
    fixed_json = json.dumps(dict(cfg.fixed), sort_keys=True)
    now = time.time()
    mine = (cfg.seed, ",".join(cfg.ops), cfg.phase, cfg.device, cfg.dtype, cfg.size, fixed_json)
    if row is None:
        conn.execute(
            "INSERT INTO measure_campaigns (id, seed, ops, phase, device, dtype, size, fixed_json, policy_json, n_target, created_s, updated_s) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (cid, *mine, json.dumps(asdict(cfg.policy)), cfg.n_samples, now, now),
        )
        return
    theirs = tuple(row)
    if theirs != mine:
        names = ("seed", "ops", "phase", "device", "dtype", "size", "fixed")
        diff = [f"{n}: stored {a!r}, now {b!r}" for n, a, b in zip(names, theirs, mine) if a != b]
        raise ConfigError(f"campaign {cid!r} was started with other settings ({'; '.join(diff)}); rerun with the same settings or choose another --campaign name")
    conn.execute("UPDATE measure_campaigns SET n_target=?, updated_s=? WHERE id=?", (cfg.n_samples, now, cid))


_INSERT = (
    "INSERT OR REPLACE INTO measure_layer_samples (campaign_id, idx, op, op_class, phase, device, dtype, params_json, "
    "input_shapes_json, output_shape_json, flops, fwd_flops, flops_source, bytes_read, bytes_written, weight_bytes, "
    "median_ms, iqr_ms, cov, mean_ms, min_ms, n_repeats, inner, n_outliers, threads, load_1m, error, fingerprint_id, created_s) "
    "VALUES (" + ",".join("?" * 29) + ")"
)


def load_1m() -> float | None:
    """The 1-minute load average (how busy the machine was), None where unknown."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def save_sample(conn: sqlite3.Connection, s: LayerSample) -> None:
    """Insert one sample (autocommit: it is on disk when this returns)."""
    t, c = s.timing, s.cost
    conn.execute(
        _INSERT,
        (
            s.campaign_id, s.idx, s.op, s.op_class, s.phase, s.device, s.dtype, json.dumps(dict(s.params), sort_keys=True),
            json.dumps([list(x) for x in c.input_shapes]), json.dumps(list(c.output_shape)),
            c.flops, c.fwd_flops, c.flops_source, c.bytes_read, c.bytes_written, c.weight_bytes,
            t.median_ms if t else None, t.iqr_ms if t else None, t.cov if t else None, t.mean_ms if t else None,
            t.min_ms if t else None, t.n_repeats if t else None, t.inner if t else None, t.n_outliers if t else None,
            s.threads, load_1m(), s.error, s.fingerprint_id, time.time(),
        ),
    )
    if conn.in_transaction:
        conn.commit()


def run_campaign(
    conn: sqlite3.Connection,
    cfg: CampaignConfig,
    *,
    on_sample: Callable[[LayerSample, int, int], None] | None = None,
    max_new: int | None = None,
) -> CampaignResult:
    """Time samples until ``cfg.n_samples`` good ones are stored (earlier runs count).

    ``on_sample(sample, n_done, n_target)`` is called after each commit.
    ``max_new`` stops after that many new samples (tests, time boxes).
    A ``KeyboardInterrupt`` stops the loop between samples; the result says so.
    """
    import torch

    from traincast.measure.fingerprint import fingerprint
    from traincast.measure.records import save_fingerprint

    cfg = _validate_config(cfg)
    cid = cfg.resolved_id()
    _register_campaign(conn, cfg, cid)
    done_rows = conn.execute("SELECT idx, error FROM measure_layer_samples WHERE campaign_id=?", (cid,)).fetchall()
    done_idx = {r[0] for r in done_rows}
    n_ok = sum(1 for r in done_rows if r[1] is None)
    n_before = n_ok
    n_new = n_failed = 0
    interrupted = False
    t0 = time.perf_counter()
    with pinned_threads(cfg.threads) as n_threads, cudnn_benchmark(cfg.device), flush_denormals():
        fp = fingerprint(cfg.device, n_threads)
        fid = save_fingerprint(conn, fp)
        idx = 0
        try:
            while n_ok < cfg.n_samples and (max_new is None or n_new < max_new):
                if idx in done_idx:
                    idx += 1
                    continue
                op, params, cost = draw_config(cfg.ops, cfg.seed, idx, cfg.size, cfg.fixed, cfg.dtype)
                spec = OPS[op]
                if cfg.phase != "forward":
                    cost = op_cost(op, params, cfg.phase, cfg.dtype)
                error = None
                timing = None
                torch.manual_seed(cfg.seed * 1_000_003 + idx)
                try:
                    runner = make_runner(op, params, cfg.phase, cfg.device, cfg.dtype)
                    timing = time_fn(runner, device=cfg.device, policy=cfg.policy)
                    del runner
                except (RuntimeError, MemoryError) as exc:  # out of memory, unsupported dtype on this device...
                    error = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                    if cfg.device.startswith("cuda"):
                        torch.cuda.empty_cache()
                sample = LayerSample(spec.name, spec.op_class, cfg.phase, cfg.device, cfg.dtype, params, cost, timing,
                                     n_threads, fid, cid, idx, error)
                save_sample(conn, sample)
                done_idx.add(idx)
                n_new += 1
                if error is None:
                    n_ok += 1
                else:
                    n_failed += 1
                if on_sample is not None:
                    on_sample(sample, n_ok, cfg.n_samples)
                idx += 1
        except KeyboardInterrupt:
            interrupted = True
    elapsed = time.perf_counter() - t0
    return CampaignResult(cid, n_ok, n_new, n_failed, n_before, elapsed, 60.0 * n_new / elapsed if elapsed > 0 else 0.0, fid, interrupted)


def load_samples(conn: sqlite3.Connection, campaign_id: str | None = None, *, ok_only: bool = True) -> list[dict]:
    """Rows of ``measure_layer_samples`` as dicts, with ``params`` decoded."""
    sql = "SELECT * FROM measure_layer_samples"
    args: list = []
    where = []
    if campaign_id is not None:
        where.append("campaign_id=?")
        args.append(campaign_id)
    if ok_only:
        where.append("error IS NULL")
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY campaign_id, idx"
    cur = conn.execute(sql, args)
    names = [d[0] for d in cur.description]
    out = []
    for row in cur.fetchall():
        d = dict(zip(names, row))
        d["params"] = json.loads(d["params_json"])
        out.append(d)
    return out
