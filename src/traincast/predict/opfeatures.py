"""Canonical op rows and their features: one mapping for measured rows and traced ops.

A *canonical op row* describes one timed op independently of where it came
from (a Justus/NeuSight CSV row or a traced :class:`OpRecord`):

| column | meaning |
|---|---|
| ``kind`` | ``matmul`` \\| ``conv`` \\| ``norm`` \\| ``softmax`` \\| ``elementwise`` |
| ``b, m, n, k`` | matmul: ``b`` batched (m,k) @ (k,n) products |
| ``cn, cin, cout, h, w, kh, kw, stride, pad, ho, wo`` | conv (NCHW, dilation 1, groups 1) |
| ``rows, cols`` | norm / softmax over the last dim (``cols``) of ``rows`` rows |
| ``numel, n_in`` | elementwise: output elements, full-size tensor inputs |
| ``train_step`` | 1: forward + backward + update of a TensorFlow layer (Justus), else 0 |
| ``framework_tf, optimizer_code, act, bias`` | Justus TensorFlow extras (0 for PyTorch ops) |

:func:`featurize` turns rows plus a device into the model's feature matrix:
log FLOPs, log bytes, arithmetic intensity, the roofline time on the device
(datasheet fp32 peak and bandwidth), shape dims, GEMM wave quantisation
(output tiles / SM count) and hardware features. Everything is fp32 (4-byte)
as in the data.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import pandas as pd

from traincast.hardware.records import Device
from traincast.predict.roofline import roofline_s, roofline_terms

KINDS = ("matmul", "conv", "norm", "softmax", "elementwise")
FAMILIES = {"matmul": "gemm", "conv": "conv", "norm": "memory", "softmax": "memory", "elementwise": "memory"}
SHAPE_COLUMNS = ("b", "m", "n", "k", "cn", "cin", "cout", "h", "w", "kh", "kw", "stride", "pad", "ho", "wo",
                 "rows", "cols", "numel", "n_in")
FLAG_COLUMNS = ("train_step", "framework_tf", "optimizer_code", "act", "bias")
ROW_COLUMNS = ("kind",) + SHAPE_COLUMNS + FLAG_COLUMNS
DEVICE_COLUMNS = ("dev_fp32_tflops", "dev_bw_gbps", "dev_sms", "dev_clock_mhz", "dev_mem_gib")
BYTES_PER_ELEMENT = 4  # fp32
# additive floor in the roofline time so that tiny ops do not give huge ratios
ROOF_FLOOR_MS = 2e-3

FEATURE_NAMES = (
    "kind_code", "log_flops", "log_bytes", "log_intensity", "log_roof_ms", "log_tc_ms", "log_tm_ms",
    "log_d1", "log_d2", "log_d3", "log_d4", "kernel", "stride", "log_waves128", "wave_eff128",
    "log_waves64", "wave_eff64", "mod32_m", "mod32_n", "mod32_k",
    "train_step", "framework_tf", "optimizer_code", "act", "bias",
    "log_peak_tflops", "log_bw_gbps", "sms", "clock_mhz", "log_mem_gib", "log_balance",
)


def device_columns(device: Device) -> dict:
    return {
        "dev_fp32_tflops": float(device.fp32_tflops),
        "dev_bw_gbps": float(device.memory_bandwidth_gb_per_s),
        "dev_sms": float(device.sm_count or 1),
        "dev_clock_mhz": float(device.boost_clock_mhz or 1000.0),
        "dev_mem_gib": float(device.memory_gib),
    }


def same_specs(a: Device, b: Device) -> bool:
    """Whether two devices are one GPU to the learned model: the same ``dev_*`` columns (catalog specs)."""
    return device_columns(a) == device_columns(b)


def named_same_specs(name: str, device: Device) -> bool | None:
    """Whether the catalog's GPU ``name`` has ``device``'s specs; None where the catalog does not know ``name``."""
    from traincast.errors import UnknownNameError

    try:
        return same_specs(_device_by_name(name), device)
    except UnknownNameError:
        return None


@lru_cache(maxsize=256)
def _device_by_name(name: str) -> Device:
    from traincast.hardware.catalog import get_catalog

    return get_catalog().device(name)


def attach_devices(rows: pd.DataFrame, device: Device | None = None) -> pd.DataFrame:
    """``rows`` with the ``dev_*`` columns of ``device`` (or of each row's ``gpu``)."""
    out = rows.copy()
    if device is not None:
        for k, v in device_columns(device).items():
            out[k] = v
        return out
    cols = {k: np.empty(len(out)) for k in DEVICE_COLUMNS}
    for gpu, idx in out.groupby("gpu").indices.items():
        d = device_columns(_device_by_name(str(gpu)))
        for k in DEVICE_COLUMNS:
            cols[k][idx] = d[k]
    for k in DEVICE_COLUMNS:
        out[k] = cols[k]
    return out


def gpu_group(name: str) -> str:
    """The GPU model a data file name stands for (A100-PCIE-40GB and A100 80GB PCIe -> A100)."""
    dev = _device_by_name(str(name))
    return dev.name.split("-")[0]


def _col(df: pd.DataFrame, name: str, default: float = 0.0) -> np.ndarray:
    if name in df.columns:
        return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=float)
    return np.full(len(df), default, dtype=float)


def costs(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, dict]:
    """(FLOPs, bytes, dims) of canonical rows; dims holds d1..d4 and GEMM-view m/n/k/batch."""
    kind = df["kind"].to_numpy()
    n = len(df)
    flops = np.zeros(n)
    nbytes = np.zeros(n)
    d = {f"d{i}": np.ones(n) for i in range(1, 5)}
    gm, gn, gk, gb = np.ones(n), np.ones(n), np.ones(n), np.ones(n)
    kern, strd = np.zeros(n), np.zeros(n)
    E = BYTES_PER_ELEMENT

    mm = kind == "matmul"
    if mm.any():
        b, m, nn, k = (_col(df, c, 1)[mm] for c in ("b", "m", "n", "k"))
        flops[mm] = 2 * b * m * nn * k
        nbytes[mm] = E * b * (m * k + k * nn + m * nn)
        d["d1"][mm], d["d2"][mm], d["d3"][mm], d["d4"][mm] = b, m, nn, k
        gm[mm], gn[mm], gk[mm], gb[mm] = m, nn, k, b
    cv = kind == "conv"
    if cv.any():
        cn, cin, cout, h, w, kh, kw, s, ho, wo = (
            _col(df, c, 1)[cv] for c in ("cn", "cin", "cout", "h", "w", "kh", "kw", "stride", "ho", "wo"))
        flops[cv] = 2 * cn * cout * ho * wo * cin * kh * kw
        nbytes[cv] = E * (cn * cin * h * w + cout * cin * kh * kw + cn * cout * ho * wo)
        d["d1"][cv], d["d2"][cv], d["d3"][cv], d["d4"][cv] = cn, cin, cout, h * w
        gm[cv], gn[cv], gk[cv] = cn * ho * wo, cout, cin * kh * kw
        kern[cv], strd[cv] = kh * kw, s
    rw = (kind == "norm") | (kind == "softmax")
    if rw.any():
        r, c = _col(df, "rows", 1)[rw], _col(df, "cols", 1)[rw]
        flops[rw] = np.where(kind[rw] == "norm", 8.0, 5.0) * r * c
        nbytes[rw] = E * 2 * r * c
        d["d1"][rw], d["d2"][rw] = r, c
        gm[rw], gn[rw] = r, c
    ew = kind == "elementwise"
    if ew.any():
        ne, nin = _col(df, "numel", 1)[ew], _col(df, "n_in", 1)[ew]
        flops[ew] = ne
        nbytes[ew] = E * ne * (nin + 1)
        d["d1"][ew], d["d2"][ew] = ne, nin
        gm[ew] = ne
    # Justus train rows: forward + backward (about twice the forward) + update
    train = _col(df, "train_step", 0) > 0
    flops = np.where(train, 3 * flops, flops)
    nbytes = np.where(train, 3 * nbytes, nbytes)
    extra = {"gm": gm, "gn": gn, "gk": gk, "gb": gb, "kernel": kern, "stride": strd}
    return flops, nbytes, {**d, **extra}


def winograd_rows(df: pd.DataFrame) -> np.ndarray:
    """Canonical conv rows cuDNN may run with a Winograd algorithm (3x3 kernel, stride 1; the rows are dense,
    dilation 1): the rows :func:`traincast.predict.roofline.winograd_eligible` picks among traced ops."""
    kind = df["kind"].to_numpy()
    return ((kind == "conv") & (_col(df, "kh", 0) == 3) & (_col(df, "kw", 0) == 3)
            & (_col(df, "stride", 1) == 1))


def roofline_ms(flops: np.ndarray, nbytes: np.ndarray, peak_tflops: np.ndarray, bw_gbps: np.ndarray):
    """(compute ms, memory ms, datasheet roofline ms + ``ROOF_FLOOR_MS``): the roofline at the datasheet peak
    and bandwidth, no efficiencies (:mod:`traincast.predict.roofline`)."""
    peak, bw = peak_tflops * 1e12, bw_gbps * 1e9
    tc, tm = roofline_terms(flops, nbytes, peak, bw)
    return tc * 1e3, tm * 1e3, roofline_s(flops, nbytes, peak, bw, over_s=ROOF_FLOOR_MS * 1e-3) * 1e3


def featurize(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(feature matrix, roofline ms) of canonical rows that carry ``dev_*`` columns."""
    flops, nbytes, d = costs(df)
    peak, bw = _col(df, "dev_fp32_tflops"), _col(df, "dev_bw_gbps")
    sms = _col(df, "dev_sms", 1)
    tc, tm, roof = roofline_ms(flops, nbytes, peak, bw)
    kind_code = pd.Categorical(df["kind"], categories=KINDS).codes.astype(float)
    l = np.log
    tiles128 = np.ceil(d["gm"] / 128) * np.ceil(d["gn"] / 128) * d["gb"]
    tiles64 = np.ceil(d["gm"] / 64) * np.ceil(d["gn"] / 64) * d["gb"]
    w128, w64 = tiles128 / sms, tiles64 / sms
    X = np.column_stack([
        kind_code, l(flops + 1), l(nbytes + 1), l((flops + 1) / (nbytes + 1)), l(roof), l(tc + 1e-9), l(tm + 1e-9),
        l(d["d1"]), l(d["d2"]), l(d["d3"]), l(d["d4"]), d["kernel"], d["stride"],
        l(w128), w128 / np.ceil(w128), l(w64), w64 / np.ceil(w64),
        d["gm"] % 32, d["gn"] % 32, d["gk"] % 32,
        _col(df, "train_step"), _col(df, "framework_tf"), _col(df, "optimizer_code"), _col(df, "act"), _col(df, "bias"),
        l(peak), l(bw), sms, _col(df, "dev_clock_mhz"), l(_col(df, "dev_mem_gib", 1)), l(peak * 1e3 / bw),
    ])
    return X, roof


def valid_mask(df: pd.DataFrame) -> np.ndarray:
    """Rows whose kind is known and whose shape fields are finite and positive."""
    kind = df["kind"].to_numpy()
    ok = np.isin(kind, KINDS)
    need = {
        "matmul": ("b", "m", "n", "k"),
        "conv": ("cn", "cin", "cout", "h", "w", "kh", "kw", "stride", "ho", "wo"),
        "norm": ("rows", "cols"),
        "softmax": ("rows", "cols"),
        "elementwise": ("numel", "n_in"),
    }
    for kd, cols in need.items():
        sel = kind == kd
        if not sel.any():
            continue
        for c in cols:
            v = _col(df, c, np.nan)
            ok &= ~sel | (np.isfinite(v) & (v > 0))
    return ok


# --- traced ops -> canonical rows -------------------------------------------------
MATMUL_ATEN = {"mm", "addmm", "bmm", "baddbmm"}
CONV_ATEN = {"convolution", "convolution_backward", "cudnn_convolution", "_convolution"}
NORM_ATEN = {"native_layer_norm", "native_layer_norm_backward"}
SOFTMAX_ATEN = {"_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data"}
ATTENTION_PREFIX = "_scaled_dot_product"


def _row(kind: str, **kw) -> dict:
    r = {"kind": kind, "train_step": 0, "framework_tf": 0, "optimizer_code": 0, "act": 0, "bias": 0}
    r.update(kw)
    return r


def _prod(shape) -> int:
    return int(math.prod(shape)) if shape else 1


def _pair(v, default):
    if v is None:
        return default
    if isinstance(v, (tuple, list)):
        return (int(v[0]), int(v[-1])) if v else default
    return (int(v), int(v))


def _conv_row(x_shape, w_shape, args, transposed_ok=True) -> dict | None:
    """Canonical conv row of a forward 2-D convolution (x NCHW, w OIHW); None if not a plain 2-D conv."""
    if len(x_shape) != 4 or len(w_shape) != 4:
        return None
    # args (after tensors): stride, padding, dilation, transposed, output_padding, groups
    a = list(args)
    if a and a[0] is None:  # bias=None recorded as a leading None
        a = a[1:]
    stride = _pair(a[0] if len(a) > 0 else None, (1, 1))
    pad = _pair(a[1] if len(a) > 1 else None, (0, 0))
    dil = _pair(a[2] if len(a) > 2 else None, (1, 1))
    transposed = bool(a[3]) if len(a) > 3 else False
    groups = int(a[5]) if len(a) > 5 and a[5] is not None else 1
    if dil != (1, 1) or groups != 1:
        return None
    n, c, h, w = x_shape
    if transposed:
        if not transposed_ok:
            return None
        # a transposed conv is the data-gradient of the conv that maps its output back to its input
        cin_t, cout_t, kh, kw = w_shape
        ho = (h - 1) * stride[0] - 2 * pad[0] + kh
        wo = (w - 1) * stride[1] - 2 * pad[1] + kw
        return _row("conv", cn=n, cin=cout_t, cout=cin_t, h=ho, w=wo, kh=kh, kw=kw, stride=stride[0],
                    pad=pad[0], ho=h, wo=w)
    cout, cin, kh, kw = w_shape
    ho = (h + 2 * pad[0] - kh) // stride[0] + 1
    wo = (w + 2 * pad[1] - kw) // stride[1] + 1
    return _row("conv", cn=n, cin=cin, cout=cout, h=h, w=w, kh=kh, kw=kw, stride=stride[0], pad=pad[0], ho=ho, wo=wo)


def op_rows(op) -> tuple[list[dict], list[float]] | None:
    """Canonical rows an OpRecord's time is the sum of, with a multiplier each; None: not covered.

    Only fp32 ops are covered (the data is fp32). Backward convolutions count
    one forward-equivalent conv per gradient computed (data, weight); layer-norm
    and softmax backward are their forward rows scaled by the bytes moved;
    fused attention is its eager decomposition (two batched matmuls and a
    softmax forward, four matmuls and a softmax backward).
    """
    if op.dtype != "fp32":
        return None
    name = op.aten.rstrip("_") if not op.aten.startswith("_") else op.aten
    ins, outs = op.input_shapes, op.output_shapes
    if name in MATMUL_ATEN:
        if name in ("mm", "addmm"):
            a, bmat = (ins[1], ins[2]) if name == "addmm" and len(ins) >= 3 else (ins[0], ins[1]) if len(ins) >= 2 else (None, None)
            if a is None or len(a) != 2 or len(bmat) != 2:
                return None
            return [_row("matmul", b=1, m=a[0], k=a[1], n=bmat[1], bias=int(name == "addmm"))], [1.0]
        a, bmat = (ins[1], ins[2]) if name == "baddbmm" and len(ins) >= 3 else (ins[0], ins[1]) if len(ins) >= 2 else (None, None)
        if a is None or len(a) != 3 or len(bmat) != 3:
            return None
        return [_row("matmul", b=a[0], m=a[1], k=a[2], n=bmat[2])], [1.0]
    if name in ("convolution", "_convolution", "cudnn_convolution"):
        if len(ins) < 2:
            return None
        r = _conv_row(ins[0], ins[1], op.args)
        return ([r], [1.0]) if r else None
    if name == "convolution_backward":
        if len(ins) < 3:
            return None
        # inputs: grad_out, input, weight; args: bias_sizes, stride, padding, dilation, transposed, output_padding, groups, mask
        args = list(op.args)
        mask = args[7] if len(args) > 7 and isinstance(args[7], (tuple, list)) else (True, True, False)
        r = _conv_row(ins[1], ins[2], args[1:7])
        if r is None:
            return None
        n_grads = int(bool(mask[0])) + int(bool(mask[1]))
        rows, mult = [r], [float(max(n_grads, 0))]
        if len(mask) > 2 and mask[2]:  # bias gradient: a reduction over grad_out
            rows.append(_row("elementwise", numel=_prod(ins[0]), n_in=1))
            mult.append(1.0)
        return rows, mult
    if name == "native_layer_norm":
        x = ins[0]
        normalized = args_shape(op.args)
        cols = _prod(normalized) if normalized else (x[-1] if x else 1)
        rows = max(_prod(x) // max(cols, 1), 1)
        return [_row("norm", rows=rows, cols=cols)], [1.0]
    if name == "native_layer_norm_backward":
        x = ins[1] if len(ins) > 1 else ins[0]
        normalized = args_shape(op.args)
        cols = _prod(normalized) if normalized else (x[-1] if x else 1)
        rows = max(_prod(x) // max(cols, 1), 1)
        return [_row("norm", rows=rows, cols=cols)], [2.0]
    if name in SOFTMAX_ATEN:
        x = ins[0]
        if not x:
            return None
        dim = op.args[0] if op.args and isinstance(op.args[0], int) else -1
        if dim not in (-1, len(x) - 1):
            return None
        cols = x[-1]
        rows = max(_prod(x) // max(cols, 1), 1)
        mult = 1.5 if name.endswith("backward_data") else 1.0
        return [_row("softmax", rows=rows, cols=cols)], [mult]
    if name.startswith(ATTENTION_PREFIX) and ins and len(ins[0]) == 4:
        bq, hq, sq, dq = ins[0]
        sk = ins[1][2] if len(ins) > 1 and len(ins[1]) == 4 else sq
        bh = bq * hq
        qk = _row("matmul", b=bh, m=sq, k=dq, n=sk)
        pv = _row("matmul", b=bh, m=sq, k=sk, n=dq)
        sm = _row("softmax", rows=bh * sq, cols=sk)
        drop = _row("elementwise", numel=bh * sq * sk, n_in=1)
        if "backward" in name:
            return [qk, pv, sm, drop], [2.0, 2.0, 1.5, 1.0]
        return [qk, pv, sm, drop], [1.0, 1.0, 1.0, 1.0]
    if op.op_class == "elementwise" and op.phase != "optimizer" and outs:
        numel = max(_prod(s) for s in outs)
        if numel <= 1:
            return None
        n_in = sum(1 for s in ins if _prod(s) == numel) or 1
        return [_row("elementwise", numel=numel, n_in=min(n_in, 2))], [1.0]
    return None


def args_shape(args) -> tuple | None:
    for a in args:
        if isinstance(a, (tuple, list)) and all(isinstance(x, int) for x in a):
            return tuple(a)
    return None
