"""Import the shared layer/kernel measurements into the store, and read them back."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from traincast.errors import DataError
from traincast.fit import datasets as D
from traincast.predict import opfeatures as F

_COLUMNS = ("source", "gpu", "op", "kind") + F.SHAPE_COLUMNS + F.FLAG_COLUMNS + ("time_ms",)


@dataclass(frozen=True)
class ImportSummary:
    files: int
    rows: int
    skipped_rows: int
    by_source: dict


def _files(data_dir: Path):
    for f in sorted((data_dir / "layers" / "justus2018").glob("*.csv*")):
        gpu, op = f.name.split(".")[0].rsplit("_", 1)
        yield f, "justus2018", gpu, op
    for f in sorted((data_dir / "kernels" / "neusight").glob("*/*.csv*")):
        yield f, "neusight", f.name.split(".")[0], f.parent.name


def import_data(store, data_dir: str | Path, log=None) -> ImportSummary:
    """Import every Justus 2018 and NeuSight CSV under ``data_dir`` into ``store``.

    Rows with missing or non-numeric shape fields or times are counted and skipped.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"no such folder: {str(data_dir)!r} (give the shared data folder, e.g. ../shared/data)")
    found = list(_files(data_dir))
    if not found:
        raise DataError(f"{str(data_dir)!r} holds neither layers/justus2018/*.csv.gz nor kernels/neusight/*/*.csv.gz")
    total = skipped = 0
    by_source: dict[str, int] = {}
    for path, source, gpu, op in found:
        raw = D._read_csv(path)
        rows = D.justus_rows(raw, gpu=gpu, op=op) if source == "justus2018" else D.neusight_rows(raw, op, gpu)
        rows["op"] = op
        ok = F.valid_mask(rows) & np.isfinite(rows["time_ms"].to_numpy()) & (rows["time_ms"].to_numpy() > 0)
        good = rows[ok]
        rel = str(path.relative_to(data_dir))
        cols = [c for c in _COLUMNS]
        frame = pd.DataFrame({c: good[c] if c in good.columns else None for c in cols})
        records = [tuple(None if (isinstance(v, float) and np.isnan(v)) else v for v in r)
                   for r in frame.itertuples(index=False, name=None)]
        with store.transaction() as conn:
            conn.execute("DELETE FROM data_op_timings WHERE file = ?", (rel,))
            conn.execute(
                "INSERT OR REPLACE INTO data_imports(file, source, gpu, op, rows, skipped_rows, imported_s) VALUES (?,?,?,?,?,?,?)",
                (rel, source, gpu, op, int(ok.sum()), int((~ok).sum()), time.time()))
            conn.executemany(
                f"INSERT INTO data_op_timings(file, {', '.join(cols)}) VALUES ({', '.join('?' * (len(cols) + 1))})",
                [(rel,) + r for r in records])
        total += int(ok.sum())
        skipped += int((~ok).sum())
        by_source[source] = by_source.get(source, 0) + int(ok.sum())
        if log:
            log(f"{rel}: {int(ok.sum())} rows" + (f", {int((~ok).sum())} skipped" if (~ok).any() else ""))
    return ImportSummary(len(found), total, skipped, by_source)


def load_from_store(store, gpus=None) -> pd.DataFrame:
    """Canonical rows imported with :func:`import_data` (optionally only ``gpus``)."""
    q = "SELECT * FROM data_op_timings"
    params: tuple = ()
    if gpus:
        q += f" WHERE gpu IN ({', '.join('?' * len(gpus))})"
        params = tuple(gpus)
    df = pd.read_sql_query(q, store.conn, params=params)
    if df.empty:
        raise DataError("the store holds no imported layer/kernel data; run `traincast data import ../shared/data`")
    return df.drop(columns=["file"])
