"""Predict (and score) a CSV of layer/kernel timings for one GPU: ``traincast eval-layers``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from traincast.errors import DataError
from traincast.fit import datasets as D
from traincast.predict import opfeatures as F

FORMATS = ("justus", "neusight")


@dataclass(frozen=True)
class LayerEval:
    """Predictions for the rows of one CSV on one GPU."""

    gpu: str  # the catalog device name
    format: str
    frame: pd.DataFrame  # the input rows plus ``predicted_ms``
    rows: int
    predicted_rows: int
    skipped_rows: int  # NaN / malformed rows, not predicted
    measured_column: str | None
    mape_pct: float | None
    rmse_ms: float | None
    adapt_rows: int = 0  # measured rows that adapted the model to this GPU (left out of MAPE/RMSE)


def canonical_rows(df: pd.DataFrame, fmt: str, gpu: str) -> pd.DataFrame:
    if fmt == "justus":
        if "op" not in df.columns:
            raise DataError("a Justus CSV lacks column(s) op; it needs op (conv2d|dense) and the layer's fields, "
                            f"e.g. {', '.join(D.JUSTUS_CONV_COLUMNS)}")
        ops = set(df["op"].dropna().astype(str).str.lower())
        unknown = ops - {"conv2d", "dense"}
        if unknown:
            raise DataError(f"unknown Justus op(s) {', '.join(sorted(unknown))}; known: conv2d, dense")
        return D.justus_rows(df, gpu=gpu)
    if fmt == "neusight":
        if "OPName" not in df.columns:
            raise DataError("a NeuSight kernel CSV lacks column(s) OPName; it needs OPName and the op's "
                            "dimension columns (B,M,N,K for matmuls; B,H for norm/softmax/elementwise)")
        parts = []
        for op, sub in df.groupby(df["OPName"].astype(str).str.lower(), sort=False):
            parts.append(D.neusight_rows(sub, op, gpu))
        return pd.concat(parts).loc[df.index]
    raise DataError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")


def eval_layers(csv: str | Path, gpu: str, fmt: str = "justus", model=None, adapt: int = 0,
                seed: int = 0) -> LayerEval:
    """Predict every row of ``csv`` on ``gpu`` (a catalog name; need not be one the model saw).

    ``adapt=K``: first correct the model to this GPU with K of the CSV's measured rows drawn at random
    (:class:`~traincast.fit.learn.GpuAdapter`); those rows are marked in an ``adapt_row`` column and
    MAPE/RMSE are over the other measured rows only."""
    from traincast.fit.learn import GpuAdapter, adapt_predictions, adapter_coefs
    from traincast.hardware.catalog import get_catalog
    from traincast.predict.learned import LearnedPredictor

    device = get_catalog().device(gpu)
    if adapt < 0:
        raise DataError(f"--adapt must be >= 0 rows, got {adapt}")
    if fmt not in FORMATS:
        raise DataError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    df = D._read_csv(Path(csv))
    if df.empty:
        raise DataError(f"{str(csv)!r} has no rows")
    rows = canonical_rows(df, fmt, device.name)
    model = model if model is not None else LearnedPredictor.load_default().model
    rows = F.attach_devices(rows, device)
    pred = model.predict(rows)
    measured_col = D.JUSTUS_TIME if fmt == "justus" else D.NEUSIGHT_TIME
    ok_pred = np.isfinite(pred)
    y = (pd.to_numeric(df[measured_col], errors="coerce").to_numpy(dtype=float) if measured_col in df.columns
         else np.full(len(df), np.nan))
    use = np.zeros(len(df), bool)
    if adapt:
        can = np.flatnonzero(ok_pred & np.isfinite(y) & (y > 0))
        if len(can) < adapt:
            raise DataError(f"--adapt {adapt} needs {adapt} rows with a measured {measured_col}; "
                            f"{str(csv)!r} has {len(can)}")
        use[np.random.default_rng(seed).choice(can, size=adapt, replace=False)] = True
        cell = GpuAdapter.cells(rows)
        pred = adapt_predictions(pred, cell, adapter_coefs(pred[use], cell[use], y[use]))
    out = df.copy()
    out["predicted_ms"] = pred
    if adapt:
        out["adapt_row"] = use
    mape = rmse = None
    if measured_col in df.columns:
        ok = ok_pred & np.isfinite(y) & (y > 0) & ~use
        if ok.any():
            mape = float(np.mean(np.abs(pred[ok] - y[ok]) / y[ok]) * 100)
            rmse = float(np.sqrt(np.mean((pred[ok] - y[ok]) ** 2)))
    else:
        measured_col = None
    return LayerEval(device.name, fmt, out, len(df), int(ok_pred.sum()), int((~ok_pred).sum()), measured_col, mape, rmse,
                     int(use.sum()))
