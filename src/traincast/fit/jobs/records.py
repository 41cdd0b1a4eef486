"""Job-level records: the features and target of each row, read from CSV and checked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from traincast.errors import DataError

MIN_ROWS = 10  # rows below which no job regression is attempted

@dataclass(frozen=True)
class JobRecords:
    """Job-level records: the features and the target of each row."""

    frame: pd.DataFrame  # the features and the target, NaN rows dropped
    target: str
    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    skipped_rows: int = 0

    @property
    def features(self) -> tuple[str, ...]:
        return self.numeric + self.categorical

    @property
    def X(self) -> pd.DataFrame:
        return self.frame[list(self.features)]

    @property
    def y(self) -> np.ndarray:
        return self.frame[self.target].to_numpy(dtype=float)

    def subset(self, mask) -> "JobRecords":
        return JobRecords(self.frame[np.asarray(mask)].reset_index(drop=True), self.target,
                          self.numeric, self.categorical, 0)


def records_from_frame(frame: pd.DataFrame, target: str, features: Optional[Sequence[str]] = None,
                       drop: Sequence[str] = (), min_rows: int = MIN_ROWS) -> JobRecords:
    """Check ``frame`` and split its columns into numeric and categorical features.

    Rows with a missing or non-positive target or a missing feature are skipped
    (and counted). Constant columns carry no information and are dropped.
    """
    if target not in frame.columns:
        raise DataError(f"target column {target!r} is not in the data; columns: {', '.join(map(str, frame.columns))}")
    unknown = [c for c in drop if c not in frame.columns]
    if unknown:
        raise DataError(f"unknown column(s) to drop {', '.join(map(repr, unknown))}; columns: {', '.join(map(str, frame.columns))}")
    if features is None:
        features = [c for c in frame.columns if c != target and c not in set(drop)]
    else:
        missing = [c for c in features if c not in frame.columns]
        if missing:
            raise DataError(f"unknown column(s) {', '.join(map(repr, missing))}; columns: {', '.join(map(str, frame.columns))}")
        features = [c for c in features if c != target]
    y = pd.to_numeric(frame[target], errors="coerce")
    if y.notna().sum() == 0:
        raise DataError(f"target column {target!r} is not numeric (e.g. {frame[target].iloc[0]!r})")
    df = frame[list(features)].copy()
    numeric, categorical = [], []
    for c in features:
        as_num = pd.to_numeric(df[c], errors="coerce")
        if as_num.notna().sum() >= max(1, 0.9 * df[c].notna().sum()):
            df[c] = as_num
            numeric.append(c)
        else:
            df[c] = df[c].astype("string")
            categorical.append(c)
    df[target] = y
    n0 = len(df)
    df = df[(df[target] > 0) & np.isfinite(df[target])].dropna().reset_index(drop=True)
    skipped = n0 - len(df)
    numeric = [c for c in numeric if df[c].nunique() > 1]
    categorical = [c for c in categorical if df[c].nunique() > 1]
    if not numeric and not categorical:
        raise DataError("no feature column varies across the rows; nothing to learn from")
    if len(df) < min_rows:
        raise DataError(f"too few usable rows: {len(df)} (need at least {min_rows}; {skipped} skipped for a "
                        f"missing/non-positive target or missing features)")
    df = df[numeric + categorical + [target]]
    return JobRecords(df, target, tuple(numeric), tuple(categorical), skipped)


def load_jobs(path: str | Path, target: str, features: Optional[Sequence[str]] = None,
              drop: Sequence[str] = (), min_rows: int = MIN_ROWS) -> JobRecords:
    """Read job records from a CSV file (any numeric/categorical features plus ``target``)."""
    return records_from_frame(read_csv(path), target, features, drop, min_rows)


def read_csv(path: str | Path) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"no such file: {str(path)!r}")
    try:
        return pd.read_csv(p)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read {str(path)!r} as CSV: {str(exc).strip().splitlines()[0]}") from None


# --------------------------------------------------------------------------- shared data
