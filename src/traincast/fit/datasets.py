"""Loaders of the shared real-GPU measurements, mapped onto traincast's op rows.

Both public datasets become one table of *canonical op rows* (see
:mod:`traincast.predict.opfeatures`): one row per timed op with its kind
(``matmul``, ``conv``, ``norm``, ``softmax``, ``elementwise``), its shape
fields, the GPU name (as the catalog resolves it) and ``time_ms``.

- ``layers/justus2018/<GPU>_{conv2d,dense}.csv.gz`` (Justus et al. 2018,
  TensorFlow 1.10, NHWC): ``dense`` -> ``matmul`` (m=batch, k=dim_input,
  n=dim_output); ``conv2d`` -> ``conv`` with the TensorFlow output size of
  SAME/VALID padding. ``optimizer == none`` rows time the forward pass only
  (``train_step=0``); the others forward + backward + update (``train_step=1``).
- ``kernels/neusight/<op>/<GPU>.csv.gz`` (NeuSight, PyTorch 2.1): ``linear``
  and ``bmm`` -> ``matmul`` (B x (M,K) @ (K,N)); ``conv`` (square input and
  kernel) -> ``conv``; ``ln`` -> ``norm``; ``softmax`` -> ``softmax``; the
  elementwise ops (``add, mul, div, pow`` binary; ``addu, mulu, divu, powu,
  gelu, relu, tanh`` unary) -> ``elementwise`` over a (B, H) tensor.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd

from traincast.errors import DataError

JUSTUS_CONV_COLUMNS = ("batchsize", "matsize", "kernelsize", "channels_in", "channels_out", "strides", "padding")
JUSTUS_DENSE_COLUMNS = ("batchsize", "dim_input", "dim_output")
JUSTUS_TIME = "time_ms_median"
NEUSIGHT_COLUMNS = {
    "matmul": ("B", "M", "N", "K"),
    "conv": ("B", "Input_Channel", "Output_Channel", "Kernel_Szie", "Input_Size", "Stride", "Padding"),
    "rows": ("B", "H"),
}
NEUSIGHT_TIME = "Latency"
NEUSIGHT_BINARY = ("add", "mul", "div", "pow", "sub")
NEUSIGHT_UNARY = ("addu", "mulu", "divu", "powu", "gelu", "relu", "tanh", "subu", "sigmoid")
NEUSIGHT_KIND = {"linear": "matmul", "bmm": "matmul", "conv": "conv", "ln": "norm", "softmax": "softmax"}
_OPTIMIZERS = {"none": 0, "sgd": 1, "momentum": 2, "rmsprop": 3, "adam": 4}
_ACTIVATIONS = {"none", "relu", "tanh", "sigmoid"}


def default_data_dir() -> Path:
    """``../shared/data`` next to the repository (or ``$TRAINCAST_SHARED_DATA``)."""
    import os

    env = os.environ.get("TRAINCAST_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3].parent / "shared" / "data"


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except FileNotFoundError:
        raise DataError(f"no such file: {str(path)!r}") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, gzip.BadGzipFile, OSError) as exc:
        raise DataError(f"cannot read {str(path)!r} as CSV: {str(exc).splitlines()[0]}") from None


def require_columns(df: pd.DataFrame, columns, what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DataError(
            f"{what} lacks column(s) {', '.join(missing)}; it has {', '.join(map(str, df.columns))}"
        )


def _empty_frame(n: int) -> dict:
    return {}


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(df[col], errors="coerce")


def justus_rows(df: pd.DataFrame, gpu: str | None = None, op: str | None = None) -> pd.DataFrame:
    """Canonical rows of a Justus-schema frame (``op`` column or the ``op`` argument: conv2d|dense).

    Rows whose shape fields are missing or not numbers become NaN rows (the
    caller counts and skips them with :func:`valid_mask`).
    """
    if "op" not in df.columns and op is None:
        # infer from the columns
        op = "conv2d" if "kernelsize" in df.columns else "dense"
    ops = df["op"].astype(str).str.lower() if "op" in df.columns else pd.Series([op] * len(df), index=df.index)
    opt = (df["optimizer"].astype(str).str.lower() if "optimizer" in df.columns else pd.Series("none", index=df.index))
    act = (df["activation"].astype(str).str.lower() if "activation" in df.columns else pd.Series("none", index=df.index))
    out = pd.DataFrame(index=df.index)
    out["source"] = "justus2018"
    out["framework_tf"] = 1
    out["gpu"] = df["gpu"].astype(str) if ("gpu" in df.columns and gpu is None) else gpu
    out["train_step"] = (opt != "none").astype(int)
    out["optimizer_code"] = opt.map(_OPTIMIZERS).fillna(1).astype(int)
    out["act"] = act.isin(_ACTIVATIONS - {"none"}).astype(int)
    out["bias"] = (df["use_bias"].astype(str).str.lower() == "true").astype(int) if "use_bias" in df.columns else 1
    is_conv = ops == "conv2d"
    out["kind"] = np.where(is_conv, "conv", "matmul")
    if is_conv.any():
        require_columns(df, JUSTUS_CONV_COLUMNS, "a Justus conv2d CSV")
        n, h, k = _num(df, "batchsize"), _num(df, "matsize"), _num(df, "kernelsize")
        s = _num(df, "strides")
        same = df["padding"].astype(str).str.upper() == "SAME"
        ho = np.where(same, np.ceil(h / s), np.ceil((h - k + 1) / s))
        pad_total = np.where(same, np.maximum((ho - 1) * s + k - h, 0), 0)
        c = is_conv
        out.loc[c, "cn"] = n[c]
        out.loc[c, "cin"] = _num(df, "channels_in")[c]
        out.loc[c, "cout"] = _num(df, "channels_out")[c]
        out.loc[c, "h"] = h[c]
        out.loc[c, "w"] = h[c]
        out.loc[c, "kh"] = k[c]
        out.loc[c, "kw"] = k[c]
        out.loc[c, "stride"] = s[c]
        out.loc[c, "pad"] = (pd.Series(pad_total, index=df.index) / 2.0)[c]
        out.loc[c, "ho"] = pd.Series(ho, index=df.index)[c]
        out.loc[c, "wo"] = pd.Series(ho, index=df.index)[c]
    d = ~is_conv
    if d.any():
        require_columns(df, JUSTUS_DENSE_COLUMNS, "a Justus dense CSV")
        out.loc[d, "b"] = 1
        out.loc[d, "m"] = _num(df, "batchsize")[d]
        out.loc[d, "k"] = _num(df, "dim_input")[d]
        out.loc[d, "n"] = _num(df, "dim_output")[d]
    out["time_ms"] = _num(df, JUSTUS_TIME) if JUSTUS_TIME in df.columns else np.nan
    return out


def neusight_rows(df: pd.DataFrame, op: str, gpu: str) -> pd.DataFrame:
    """Canonical rows of one NeuSight kernel frame (``op`` is its folder name)."""
    op = op.lower()
    out = pd.DataFrame(index=df.index)
    out["source"] = "neusight"
    out["framework_tf"] = 0
    out["gpu"] = gpu
    out["train_step"] = 0
    out["optimizer_code"] = 0
    out["act"] = 0
    out["bias"] = 1 if op == "linear" else 0
    if op in ("linear", "bmm"):
        require_columns(df, NEUSIGHT_COLUMNS["matmul"], f"a NeuSight {op} CSV")
        out["kind"] = "matmul"
        out["b"], out["m"], out["n"], out["k"] = (_num(df, c) for c in NEUSIGHT_COLUMNS["matmul"])
    elif op == "conv":
        require_columns(df, NEUSIGHT_COLUMNS["conv"], "a NeuSight conv CSV")
        out["kind"] = "conv"
        n, cin, cout, k, h, s, p = (_num(df, c) for c in NEUSIGHT_COLUMNS["conv"])
        out["cn"], out["cin"], out["cout"] = n, cin, cout
        out["h"], out["w"], out["kh"], out["kw"], out["stride"], out["pad"] = h, h, k, k, s, p
        ho = np.floor((h + 2 * p - k) / s) + 1
        out["ho"], out["wo"] = ho, ho
    elif op in ("ln", "softmax"):
        require_columns(df, NEUSIGHT_COLUMNS["rows"], f"a NeuSight {op} CSV")
        out["kind"] = NEUSIGHT_KIND[op]
        out["rows"], out["cols"] = _num(df, "B"), _num(df, "H")
    elif op in NEUSIGHT_BINARY or op in NEUSIGHT_UNARY:
        require_columns(df, NEUSIGHT_COLUMNS["rows"], f"a NeuSight {op} CSV")
        out["kind"] = "elementwise"
        out["numel"] = _num(df, "B") * _num(df, "H")
        out["n_in"] = 2 if op in NEUSIGHT_BINARY else 1
    else:
        raise DataError(
            f"unknown NeuSight kernel op {op!r}; known: "
            + ", ".join(sorted(set(NEUSIGHT_KIND) | set(NEUSIGHT_BINARY) | set(NEUSIGHT_UNARY)))
        )
    out["time_ms"] = _num(df, NEUSIGHT_TIME) if NEUSIGHT_TIME in df.columns else np.nan
    return out


def load_justus(data_dir: str | Path | None = None, gpus=None, max_rows_per_file: int | None = None,
                seed: int = 0) -> pd.DataFrame:
    """All Justus 2018 layer rows (optionally only ``gpus``, subsampled per file)."""
    root = Path(data_dir or default_data_dir()) / "layers" / "justus2018"
    files = sorted(root.glob("*.csv*"))
    if not files:
        raise DataError(f"no Justus 2018 CSVs under {str(root)!r}")
    frames = []
    for f in files:
        gpu, op = f.name.split(".")[0].rsplit("_", 1)
        if gpus is not None and gpu not in gpus:
            continue
        df = _read_csv(f)
        if max_rows_per_file and len(df) > max_rows_per_file:
            df = df.sample(max_rows_per_file, random_state=seed)
        frames.append(justus_rows(df, gpu=gpu, op=op))
    return pd.concat(frames, ignore_index=True)


def load_neusight(data_dir: str | Path | None = None, gpus=None, ops=None, max_rows_per_file: int | None = None,
                  seed: int = 0) -> pd.DataFrame:
    """All NeuSight kernel rows (optionally only ``gpus`` / ``ops`` folders, subsampled per file)."""
    root = Path(data_dir or default_data_dir()) / "kernels" / "neusight"
    if not root.is_dir():
        raise DataError(f"no NeuSight kernel folder {str(root)!r}")
    frames = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if ops is not None and folder.name not in ops:
            continue
        for f in sorted(folder.glob("*.csv*")):
            gpu = f.name.split(".")[0]
            if gpus is not None and gpu not in gpus:
                continue
            df = _read_csv(f)
            if max_rows_per_file and len(df) > max_rows_per_file:
                df = df.sample(max_rows_per_file, random_state=seed)
            rows = neusight_rows(df, folder.name, gpu)
            rows["op"] = folder.name
            frames.append(rows)
    if not frames:
        raise DataError(f"no NeuSight kernel CSVs under {str(root)!r} for the GPUs/ops asked")
    return pd.concat(frames, ignore_index=True)


def justus_gpus(data_dir=None) -> list[str]:
    root = Path(data_dir or default_data_dir()) / "layers" / "justus2018"
    return sorted({f.name.split(".")[0].rsplit("_", 1)[0] for f in root.glob("*.csv*")})


def neusight_gpus(data_dir=None) -> list[str]:
    root = Path(data_dir or default_data_dir()) / "kernels" / "neusight"
    return sorted({f.name.split(".")[0] for f in root.glob("*/*.csv*")})
