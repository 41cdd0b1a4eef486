"""Extrapolation and leave-one-group-out experiments, and predictions of a saved model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from traincast.errors import ConfigError, DataError
from traincast.fit.jobs.models import JobRegressor, ModelScore, mape_pct, rmse
from traincast.fit.jobs.records import MIN_ROWS, JobRecords, read_csv

@dataclass(frozen=True)
class HoldoutResult:
    """Error of every family when trained on one part of the rows and tested on the rest."""

    description: str
    n_train: int
    n_test: int
    scores: tuple[ModelScore, ...]  # best first
    selected_features: tuple[str, ...] = ()  # the linear families' features, when selected on the training rows

    def best(self) -> ModelScore:
        return self.scores[0]

    def score_of(self, model: str) -> ModelScore:
        return next(s for s in self.scores if s.model == model)


def _holdout(records: JobRecords, train_mask, description: str, models, select, cv, random_state,
             **reg_kw) -> HoldoutResult:
    train, test = records.subset(train_mask), records.subset(~np.asarray(train_mask))
    if len(train.frame) < MIN_ROWS:
        raise DataError(f"{description}: only {len(train.frame)} training rows (need {MIN_ROWS})")
    if len(test.frame) == 0:
        raise DataError(f"{description}: no rows left to test on")
    reg = JobRegressor(models=models, select=select, cv=cv, random_state=random_state, **reg_kw)
    reg.fit_all(train.X, train.y, numeric=records.numeric, categorical=records.categorical)
    scores = []
    y = test.y
    for s in reg.ranking_:
        p = reg.predict(test.X, model=s.model)
        scores.append(ModelScore(s.model, s.params, s.log_target, mape_pct(y, p), rmse(y, p), s.n_features))
    scores.sort(key=lambda s: s.mape_pct)
    selected = reg.selected_features_ if select != "none" else ()
    return HoldoutResult(description, len(train.frame), len(test.frame), tuple(scores), tuple(selected))


def parse_extrapolation(spec: str) -> tuple[str, float]:
    """'COL:THRESHOLD' -> (COL, THRESHOLD)."""
    col, sep, thr = spec.rpartition(":")
    try:
        value = float(thr)
    except ValueError:
        value = None
    if not sep or not col or value is None:
        raise ConfigError(f"--extrapolate wants COL:THRESHOLD (e.g. gpus:4), got {spec!r}")
    return col, value


def check_extrapolation_column(records: JobRecords, column: str) -> None:
    if column not in records.frame.columns:
        raise DataError(f"unknown column {column!r}; features: {', '.join(records.features)}")
    if column not in records.numeric:
        raise DataError(f"column {column!r} is not numeric; cannot extrapolate on it")


def extrapolate(records: JobRecords, column: str, threshold: float, models=None, select: str = "none",
                cv: int = 5, random_state: int = 0, **reg_kw) -> HoldoutResult:
    """Train on rows with ``column <= threshold``, test on the rows above.

    ``reg_kw`` go to ``JobRegressor`` (``max_features``, ``alpha_in``, ``alpha_out``, ``fast``).
    """
    check_extrapolation_column(records, column)
    mask = (records.frame[column] <= threshold).to_numpy()
    return _holdout(records, mask, f"train {column} <= {threshold:g}, test {column} > {threshold:g}",
                    models, select, cv, random_state, **reg_kw)


def leave_one_group_out(records: JobRecords, column: str, models=None, select: str = "none", cv: int = 5,
                        random_state: int = 0, **reg_kw) -> tuple[HoldoutResult, ...]:
    """For each value of ``column`` (e.g. the GPU type): train on the other rows, test on it."""
    if column not in records.frame.columns:
        raise DataError(f"unknown column {column!r}; features: {', '.join(records.features)}")
    values = records.frame[column].astype(str)
    groups = sorted(values.unique())
    if len(groups) < 2:
        raise DataError(f"column {column!r} has a single value; nothing to hold out")
    out = []
    for g in groups:
        out.append(_holdout(records, (values != g).to_numpy(), f"hold out {column} = {g}",
                            models, select, cv, random_state, **reg_kw))
    return tuple(out)


# --------------------------------------------------------------------------- saved models


@dataclass(frozen=True)
class JobPredictions:
    """A saved (or just fitted) JobRegressor's predictions for the rows of a table."""

    frame: pd.DataFrame  # the input rows plus ``column`` (NaN where skipped)
    column: str  # predicted_<target>
    rows: int
    predicted_rows: int
    skipped_rows: int  # a feature missing, non-numeric, or <= 0 where the model uses its inverse
    unseen_rows: int  # predicted, but with a category value the model never saw (one-hot all zero)
    target: Optional[str]  # the model's target, when the rows have that column
    scored_rows: int  # rows with a positive measured target, compared with the prediction
    mape_pct: Optional[float]
    rmse: Optional[float]


def predict_jobs(reg: JobRegressor, rows: pd.DataFrame | str | Path) -> JobPredictions:
    """Predict every row of ``rows`` (a frame or CSV path) that has usable values for the model's features;
    score the predictions against the model's target column when the rows have it."""
    reg._check()
    df = rows if isinstance(rows, pd.DataFrame) else read_csv(rows)
    if df.empty:
        raise DataError("the rows to predict are empty")
    missing = [c for c in reg.feature_names_in_ if c not in df.columns]
    if missing:
        raise DataError(f"missing feature column(s) {', '.join(map(repr, missing))}; the model was fitted on "
                        f"{', '.join(reg.feature_names_in_)}")
    feats = reg.features_
    X = pd.DataFrame(index=df.index)
    ok = np.ones(len(df), dtype=bool)
    for c in feats.numeric_:
        X[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
        ok &= np.isfinite(X[c].to_numpy())
        if c in feats.positive_:
            ok &= X[c].to_numpy() > 0
    unseen = np.zeros(len(df), dtype=bool)
    for c in feats.categorical_:
        ok &= df[c].notna().to_numpy()
        X[c] = df[c].astype(str)
        unseen |= ~X[c].isin(feats.categories_[c]).to_numpy()
    if not ok.any():
        raise DataError(f"none of the {len(df)} rows has usable values for every feature "
                        f"({', '.join(reg.feature_names_in_)}): missing, non-numeric or non-positive")
    pred = np.full(len(df), np.nan)
    pred[ok] = reg.predict(X[ok].reset_index(drop=True))
    target = reg.__dict__.get("target_")
    column = f"predicted_{target}" if target else "predicted"
    out = df.copy()
    out[column] = pred
    mape = err = None
    scored = 0
    if target and target in df.columns:
        y = pd.to_numeric(df[target], errors="coerce").to_numpy(dtype=float)
        sc = ok & np.isfinite(y) & (y > 0)
        scored = int(sc.sum())
        if scored:
            mape, err = mape_pct(y[sc], pred[sc]), rmse(y[sc], pred[sc])
    else:
        target = None
    return JobPredictions(out, column, len(df), int(ok.sum()), int((~ok).sum()), int((unseen & ok).sum()),
                          target, scored, mape, err)
