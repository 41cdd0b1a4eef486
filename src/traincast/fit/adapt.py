"""Fit a learned op-time model's adaptation to one GPU from a few of its measurements (``traincast fit adapt``).

:func:`fit_adaptation` fits a :class:`~traincast.fit.learn.GpuAdapter` on rows measured on the GPU; the record
it returns and ``predict`` applies is :class:`traincast.predict.adaptation.GpuAdaptation`, which also says what
its two sources of rows mean: ``kernel`` (a NeuSight-schema CSV of PyTorch kernels, :func:`rows_from_csv`) and
``in-step`` (forward fp32 samples ``traincast bench layers --device cuda`` stored, :func:`rows_from_store`; only
samples that are one learned kernel are used). A traced PyTorch op is a forward kernel row, so TensorFlow layer
rows (the Justus schema) would correct nothing ``predict`` times and are not taken here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from traincast.errors import DataError
from traincast.predict import opfeatures as F
from traincast.predict.adaptation import (  # noqa: F401  (re-exported for the fit commands)
    CELL_NAMES,
    TIMINGS,
    TORCH_CELL,
    GpuAdaptation,
    adaptation_path,
    adaptations_dir,
    file_sha256,
    find_adaptation,
    list_adaptations,
)


# --- fitting ------------------------------------------------------------------------------
def fit_adaptation(rows: pd.DataFrame, time_ms, model, gpu: str, *, timing: str, source: str,
                   model_sha256: str | None = None, folds: int = 5, seed: int = 0) -> GpuAdaptation:
    """Fit the adapter of ``model`` (an OpTimeRegressor) to ``gpu`` on measured ``rows`` (device columns
    attached) and their times; the cross-validated error is over ``folds`` folds (from 10 rows up)."""
    from traincast.fit.learn import GpuAdapter, adapt_predictions, adapter_coefs, mape

    y = np.asarray(time_ms, dtype=float)
    pred = np.asarray(model.predict(rows), dtype=float)
    cell = GpuAdapter.cells(rows)
    ok = np.isfinite(pred) & (pred > 0) & np.isfinite(y) & (y > 0)
    if ok.sum() < 2:
        raise DataError(f"an adaptation needs at least 2 rows with a measured time and a prediction; got {int(ok.sum())}")
    p, c, t = pred[ok], cell[ok], y[ok]
    coef = adapter_coefs(p, c, t)
    cv = None
    if len(t) >= 10:
        fold = np.random.default_rng(seed).permutation(len(t)) % folds
        out = p.copy()
        for f in range(folds):
            tr, te = fold != f, fold == f
            out[te] = adapt_predictions(p[te], c[te], adapter_coefs(p[tr], c[tr], t[tr]))
        cv = mape(out, t)
    per_cell = {int(k): int(v) for k, v in zip(*np.unique(c, return_counts=True))}
    return GpuAdaptation(gpu=gpu, coef=coef, rows=int(len(t)), timing=timing, source=source,
                         model_sha256=model_sha256, base_mape_pct=mape(p, t),
                         fit_mape_pct=mape(adapt_predictions(p, c, coef), t), cv_mape_pct=cv,
                         rows_per_cell=per_cell)


def rows_from_csv(csv: str | Path, device) -> tuple[pd.DataFrame, np.ndarray]:
    """Canonical rows (device columns attached) and measured times (ms) of a NeuSight-schema kernel CSV."""
    from traincast.fit import datasets as D
    from traincast.fit.evaluate import canonical_rows

    df = D._read_csv(Path(csv))
    if df.empty:
        raise DataError(f"{str(csv)!r} has no rows")
    if "OPName" not in df.columns and "op" in df.columns:
        raise DataError(f"{str(csv)!r} looks like Justus TensorFlow layer rows: an adaptation from them would "
                        "correct no PyTorch op `predict` times; give PyTorch kernels in the NeuSight schema")
    if D.NEUSIGHT_TIME not in df.columns:
        raise DataError(f"{str(csv)!r} has no measured time column {D.NEUSIGHT_TIME!r}: nothing to adapt to")
    if "Device" in df.columns:  # the GPU the kernels were timed on, as torch.cuda.get_device_name says
        # a GPU the catalog does not know (None) is not refused: the user's --gpu says what it is
        others = sorted(n for n in {str(v) for v in df["Device"].dropna().unique()}
                        if F.named_same_specs(n, device) is False)
        if others:
            raise DataError(f"{str(csv)!r} holds kernels timed on {', '.join(others)}, not on {device.name}: an "
                            "adaptation corrects the model to the GPU its rows were measured on")
    rows = F.attach_devices(canonical_rows(df, "neusight", device.name), device)
    return rows, pd.to_numeric(df[D.NEUSIGHT_TIME], errors="coerce").to_numpy(dtype=float)


@dataclass(frozen=True)
class StoreRows:
    rows: pd.DataFrame  # canonical rows, device columns attached
    time_ms: np.ndarray
    gpu_names: tuple[str, ...]  # what the samples' fingerprints call the GPU
    skipped: dict  # reason -> samples


def sample_row(sample: dict) -> dict | None:
    """The canonical row of a stored forward fp32 layer sample that is one learned kernel, else None."""
    from traincast.measure.layers import traced_ops

    try:
        ops = traced_ops(sample["op"], sample["params"])
    except Exception:  # noqa: BLE001 - a sample of an op this version cannot rebuild is skipped, not fatal
        return None
    mapped = [F.op_rows(o) for o in ops]
    if len(mapped) != 1 or mapped[0] is None:
        return None
    rows, mult = mapped[0]
    return rows[0] if len(rows) == 1 and mult[0] == 1.0 else None


def rows_from_store(conn, device, *, campaign: str | None = None, device_prefix: str = "cuda") -> StoreRows:
    """Canonical rows and per-call times of the forward fp32 samples ``traincast bench layers`` stored on a
    ``device_prefix`` device (``cuda``: any GPU index), optionally of one campaign."""
    from traincast.measure.layers import load_samples

    samples = load_samples(conn, campaign)
    fps = {r[0]: r[1] for r in conn.execute("SELECT id, gpu_name FROM measure_fingerprints")}
    skipped: dict[str, int] = {}

    def skip(why):
        skipped[why] = skipped.get(why, 0) + 1

    rows, ys, names = [], [], set()
    for s in samples:
        if not str(s.get("device", "")).startswith(device_prefix):
            continue
        if s.get("phase") != "forward" or s.get("dtype") not in ("fp32", "float32"):
            skip("not a forward fp32 sample")
            continue
        r = sample_row(s)
        if r is None:
            skip("not one learned kernel (e.g. batch norm, pooling, attention)")
            continue
        rows.append(r)
        ys.append(float(s["median_ms"]))
        names.add(fps.get(s.get("fingerprint_id")) or "unknown GPU")
    if not rows:
        where = f"campaign {campaign!r}" if campaign else "the database"
        raise DataError(f"no forward fp32 {device_prefix} layer sample of a learned op kind in {where}"
                        + (f" ({', '.join(f'{n} {k}' for k, n in skipped.items())})" if skipped else "")
                        + f"; measure some with `traincast bench layers --device {device_prefix} --phase forward`")
    if len(names) > 1:
        raise DataError(f"the samples come from several GPUs ({', '.join(sorted(names))}); pick one with --campaign")
    frame = F.attach_devices(pd.DataFrame(rows), device)
    return StoreRows(frame, np.array(ys), tuple(sorted(names)), skipped)
