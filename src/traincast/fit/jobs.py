"""End-to-end job regression (Gianniti/Ardagna 2018-19, AI Gauge offline).

Job-level records -- one row per training configuration (network, GPU type and
count, batch sizes, parallelism...) with a measured time (``epoch_s``,
``iteration_ms``, ``ttt_min``) -- are fitted with off-the-shelf regressors:

* feature augmentation for the linear models: the inverse ``1/x`` of every
  positive numeric feature and the pairwise cross-over products of the
  numeric features and their inverses (so ``batch/gpus`` is one column);
  categorical features are one-hot encoded;
* optional feature selection for the linear models: sequential forward
  selection by cross-validated MAPE, or Draper-Smith stepwise regression by
  partial-F p-values (statsmodels);
* model selection among linear regression (plain and augmented), ridge,
  decision tree, random forest, gradient boosting and an MLP, each with a small
  hyperparameter grid, by K-fold cross-validated mean absolute percentage
  error, fitted on the log of the target where that scores better;
* extrapolation tests (train on ``col <= threshold``, test above) and
  leave-one-group-out tests (e.g. an unseen GPU type).

Everything is a library call; ``traincast fit jobs`` and
``benchmarks/job_regression.py`` are thin wrappers.
"""

from __future__ import annotations

import glob
import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import pandas as pd

from traincast.errors import ConfigError, DataError

MIN_ROWS = 10

#: model families in the order they are listed
MODEL_NAMES = ("linear_plain", "linear", "ridge", "tree", "forest", "boosting", "mlp")
MODEL_LABELS = {
    "linear_plain": "Linear regression (plain)",
    "linear": "Linear regression (augmented)",
    "ridge": "Ridge (augmented)",
    "tree": "Decision tree",
    "forest": "Random forest",
    "boosting": "Gradient boosting",
    "mlp": "MLP (neural network)",
}
#: families fitted on the augmented (and possibly selected) features
AUGMENTED_MODELS = ("linear", "ridge")
#: feature selections of the augmented families (JobRegressor(select=...), `traincast fit jobs --select`)
SELECTIONS = ("none", "sfs", "stepwise")


# --------------------------------------------------------------------------- records


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


VTRAIN_COLUMNS = {
    "# GPUs": "gpus", "global batch": "global_batch", "micro batch": "micro_batch",
    "hidden size": "hidden", "attention heads": "heads", "# layers": "layers",
    "sequence length": "seq_len", "tensor parallelism": "tp", "data parallelism": "dp",
    "pipeline parallelism": "pp", "iteration time (ms)": "iteration_ms",
}


def vtrain_records(path: str | Path) -> pd.DataFrame:
    """Tidy job records from the vTrain Megatron-GPT A100 iterations (target ``iteration_ms``).

    Adds two derived features: ``microbatches`` per pipeline (global / (micro x dp))
    and ``gflop_per_gpu`` (6 x 12 L h^2 x tokens / GPUs, the dense training FLOPs).
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"no such file: {str(path)!r}")
    raw = pd.read_csv(p)
    missing = [c for c in VTRAIN_COLUMNS if c not in raw.columns]
    if missing:
        raise DataError(f"{p.name}: missing column(s) {', '.join(map(repr, missing))}")
    df = raw[list(VTRAIN_COLUMNS)].rename(columns=VTRAIN_COLUMNS).apply(pd.to_numeric, errors="coerce").dropna()
    df = df.astype({c: int for c in df.columns if c != "iteration_ms"})
    df.insert(10, "microbatches", df.global_batch // (df.micro_batch * df.dp))
    params = 12.0 * df.layers * df.hidden.astype(float) ** 2
    df.insert(11, "gflop_per_gpu", 6.0 * params * df.global_batch * df.seq_len / df.gpus / 1e9)
    return df.reset_index(drop=True)


#: dense fp16/bf16 peak TFLOP/s per accelerator, for a numeric handle on unseen GPU types
ACCEL_PEAK_TFLOPS = {"V100": 125.0, "A100": 312.0, "TPU-v3": 123.0}


def _accel_type(name) -> Optional[str]:
    if not isinstance(name, str) or not name.strip():
        return None
    s = name.lower()
    if "a100" in s:
        return "A100"
    if "v100" in s:
        return "V100"
    if re.search(r"tpu[\s-]*v3", s):
        return "TPU-v3"
    return None  # TPU of unknown generation, IPU, Ascend, Gaudi: too few rows, no peak figure


def mlperf_records(folder: str | Path) -> pd.DataFrame:
    """Tidy job records from the MLPerf training summaries (target ``ttt_min``, time to train).

    Keeps successful V100 / A100 / TPU-v3 rows with a known accelerator count and
    batch size; features: version, benchmark, gpu (type), gpus, nodes,
    global_batch, peak_tflops (per accelerator).
    """
    files = sorted(glob.glob(str(Path(folder) / "training_v*_summary.csv")))
    if not files:
        raise DataError(f"no training_v*_summary.csv files under {str(folder)!r}")
    rows = []
    for f in files:
        version = re.search(r"training_v([\d.]+)_summary", f).group(1)
        d = pd.read_csv(f)
        for _, r in d.iterrows():
            gpu = _accel_type(r.get("accelerator"))
            if gpu is None or "success" not in str(r.get("statuses", "")):
                continue
            total = pd.to_numeric(r.get("total_acc"), errors="coerce")
            if not total or total <= 0 or pd.isna(total):
                total = pd.to_numeric(r.get("nodes"), errors="coerce") * pd.to_numeric(r.get("acc_per_node"), errors="coerce")
            batch = pd.to_numeric(r.get("global_batch_size"), errors="coerce")
            ttt = pd.to_numeric(r.get("ttt_min_olympic"), errors="coerce")
            if not (total > 0 and batch > 0 and ttt > 0):
                continue
            bench = "maskrcnn" if r["benchmark"] == "mask" else str(r["benchmark"])
            rows.append({"version": f"v{version}", "benchmark": bench, "gpu": gpu, "gpus": int(total),
                         "nodes": max(1, int(pd.to_numeric(r.get("nodes"), errors="coerce") or 1)),
                         "global_batch": int(batch), "peak_tflops": ACCEL_PEAK_TFLOPS[gpu], "ttt_min": float(ttt)})
    return pd.DataFrame(rows)


def build_job_records(data_dir: str | Path, source: str = "vtrain") -> tuple[pd.DataFrame, str]:
    """The tidy records of ``source`` ('vtrain' or 'mlperf') under the shared data folder, and their target."""
    root = Path(data_dir)
    if not root.is_dir():
        raise DataError(f"data folder {str(data_dir)!r} does not exist")
    if source == "vtrain":
        return vtrain_records(root / "models" / "vtrain_a100_single_node.csv"), "iteration_ms"
    if source == "mlperf":
        return mlperf_records(root / "mlperf"), "ttt_min"
    raise ConfigError(f"unknown job-record source {source!r}; known: vtrain, mlperf")


#: target column of the job records made from `traincast bench model` timings (seconds per training step)
STORE_TARGET = "step_s"


@dataclass(frozen=True)
class StoreJobs:
    """Job records made from the whole-step timings in the store (``measure_model_timings``)."""

    frame: pd.DataFrame
    stored_rows: int
    skipped: dict  # reason -> rows


def store_job_records(conn, model: Optional[str] = None, device: Optional[str] = None) -> StoreJobs:
    """One job record per stored `traincast bench model` run (``traincast.measure.load_model_timings``).

    Columns: model, device, hardware (the CPU or GPU model of the run's fingerprint), optimizer,
    precision, batch_size, seq_len (only when some run has one; 0 for the others), threads,
    parameters and fwd_gflop_per_sample (from ``traincast.workload.trace`` of the model, traced once
    per model/optimizer/precision/sequence length at its smallest stored batch), and the target
    ``step_s`` (median seconds per training step). Runs whose model cannot be traced (an
    ``nn.Module`` timed directly, a spec file no longer there) are skipped and counted by reason.
    """
    from traincast.errors import TraincastError
    from traincast.measure.model import load_model_timings
    from traincast.workload import trace

    rows = load_model_timings(conn, model=model, device=device)
    if not rows:
        which = " and ".join(f"{k} {v!r}" for k, v in (("model", model), ("device", device)) if v)
        raise DataError("no whole-step timings in the store" + (f" for {which}" if which else "")
                        + "; record some with `traincast bench model MODEL --batch-size B`")
    hw = {r[0]: (r[1] or r[2]) for r in conn.execute("SELECT id, gpu_name, cpu_model FROM measure_fingerprints")}
    traced: dict[tuple, object] = {}
    min_batch: dict[tuple, int] = {}
    for r in rows:
        key = (r["model"], r["optimizer"] or "sgd", r["precision"] or "fp32", r["seq_len"])
        min_batch[key] = min(min_batch.get(key, r["batch_size"]), r["batch_size"])
    skipped: dict[str, int] = {}
    out = []
    for r in rows:
        key = (r["model"], r["optimizer"] or "sgd", r["precision"] or "fp32", r["seq_len"])
        if key not in traced:
            b = min_batch[key]
            try:
                wl = trace(key[0], batch_size=b, optimizer=key[1], precision=key[2], seq_len=key[3])
                traced[key] = (wl.parameters, wl.flops("forward") / b / 1e9)
            except TraincastError as exc:
                traced[key] = f"cannot trace {key[0]!r}: {str(exc).splitlines()[0]}"
        t = traced[key]
        if isinstance(t, str):
            skipped[t] = skipped.get(t, 0) + 1
            continue
        out.append({"model": r["model"], "device": r["device"], "hardware": hw.get(r["fingerprint_id"]) or "unknown",
                    "optimizer": key[1], "precision": key[2], "batch_size": int(r["batch_size"]),
                    "seq_len": r["seq_len"], "threads": r["threads"], "parameters": int(t[0]),
                    "fwd_gflop_per_sample": float(t[1]), STORE_TARGET: float(r["median_ms"]) / 1e3})
    frame = pd.DataFrame(out, columns=["model", "device", "hardware", "optimizer", "precision", "batch_size",
                                       "seq_len", "threads", "parameters", "fwd_gflop_per_sample", STORE_TARGET])
    if frame["seq_len"].isna().all():
        frame = frame.drop(columns=["seq_len"])
    else:
        frame["seq_len"] = frame["seq_len"].fillna(0).astype(int)
    if frame["threads"].notna().all():
        frame["threads"] = frame["threads"].astype(int)
    return StoreJobs(frame, len(rows), skipped)


# --------------------------------------------------------------------------- features


class JobFeatures:
    """Column transformer: numeric features, optional 1/x and pairwise products, one-hot categoricals
    (and, augmented, each indicator times each numeric and inverse column).

    Learned: ``numeric_``, ``categorical_``, ``categories_``, ``feature_names_``.
    """

    def __init__(self, numeric: Sequence[str], categorical: Sequence[str] = (), augment: bool = True):
        self.numeric = tuple(numeric)
        self.categorical = tuple(categorical)
        self.augment = augment

    def fit(self, X: pd.DataFrame, y=None) -> "JobFeatures":
        self.numeric_ = tuple(self.numeric)
        self.categorical_ = tuple(self.categorical)
        self.positive_ = tuple(c for c in self.numeric_ if (X[c] > 0).all()) if self.augment else ()
        self.categories_ = {c: tuple(sorted(X[c].astype(str).unique())) for c in self.categorical_}
        base = list(self.numeric_) + [f"1/{c}" for c in self.positive_]
        names = list(base)
        self.pairs_: list[tuple[int, int]] = []
        if self.augment:
            for i, j in itertools.combinations(range(len(base)), 2):
                a, b = base[i], base[j]
                if a == f"1/{b}" or b == f"1/{a}":
                    continue  # x * 1/x = 1
                self.pairs_.append((i, j))
                names.append(f"{a}*{b}")
        onehot = [f"{c}={v}" for c in self.categorical_ for v in self.categories_[c]]
        names += onehot
        if self.augment:  # indicator x numeric: a per-category slope (e.g. per-network time per sample)
            names += [f"{o}*{b}" for o in onehot for b in base]
        self.feature_names_ = tuple(names)
        return self

    def transform(self, X: pd.DataFrame) -> np.ndarray:
        cols = [X[c].to_numpy(dtype=float) for c in self.numeric_]
        cols += [1.0 / np.maximum(X[c].to_numpy(dtype=float), 1e-12) for c in self.positive_]
        base = np.column_stack(cols) if cols else np.zeros((len(X), 0))
        parts = [base]
        if self.pairs_:
            parts.append(np.column_stack([base[:, i] * base[:, j] for i, j in self.pairs_]))
        hots = [(X[c].astype(str).to_numpy() == k).astype(float) for c in self.categorical_ for k in self.categories_[c]]
        if hots:
            parts.append(np.column_stack(hots))
            if self.augment and base.shape[1]:
                parts.append(np.column_stack([h * base[:, i] for h in hots for i in range(base.shape[1])]))
        return np.hstack(parts)

    def fit_transform(self, X, y=None) -> np.ndarray:
        return self.fit(X).transform(X)


# --------------------------------------------------------------------------- metrics


def mape_pct(y_true, y_pred) -> float:
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    return float(np.mean(np.abs(y_pred - y_true) / np.abs(y_true)) * 100.0)


def rmse(y_true, y_pred) -> float:
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    return float(np.sqrt(np.mean((y_pred - y_true) ** 2)))


# --------------------------------------------------------------------------- models


def _grid(name: str, random_state: int, fast: bool) -> list[tuple[dict, bool]]:
    """(params, log_target) candidates of one family."""
    both = [False, True]
    # the linear families fit the time itself (relative-error weighted): the augmented terms model an
    # additive law, and a log-target fit over hundreds of products explodes when extrapolating
    if name == "linear_plain":
        return [({}, lg) for lg in both]
    if name == "linear":
        return [({}, False)]
    if name == "ridge":
        return [({"alpha": a}, False) for a in (1e-3, 1e-1, 10.0)]
    if name == "tree":
        return [({"max_depth": d, "random_state": random_state}, True) for d in (5, 10, None)]
    if name == "forest":
        n = 100 if fast else 300
        return [({"n_estimators": n, "max_features": m, "random_state": random_state, "n_jobs": -1}, True)
                for m in (1.0, 0.5)]
    if name == "boosting":
        return [({"n_estimators": n, "max_depth": d, "learning_rate": 0.1, "random_state": random_state}, True)
                for n, d in ((150, 3), (300, 5))]
    if name == "mlp":
        return [({"hidden_layer_sizes": h, "max_iter": 800, "alpha": 1e-3, "random_state": random_state,
                  "early_stopping": False, "learning_rate_init": 1e-3}, True) for h in ((64, 64), (128, 64, 32))]
    raise ConfigError(f"unknown model {name!r}; known: {', '.join(MODEL_NAMES)}")


def _estimator(name: str, params: dict):
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor
    from sklearn.linear_model import LinearRegression, Ridge
    from sklearn.neural_network import MLPRegressor
    from sklearn.tree import DecisionTreeRegressor

    return {"linear_plain": LinearRegression, "linear": LinearRegression, "ridge": Ridge,
            "tree": DecisionTreeRegressor, "forest": RandomForestRegressor,
            "boosting": GradientBoostingRegressor, "mlp": MLPRegressor}[name](**params)


class _Fitted:
    """One fitted candidate: scaler + estimator on raw or log target, over a column subset."""

    def __init__(self, name: str, params: dict, log_target: bool, columns: Optional[np.ndarray] = None):
        self.name, self.params, self.log_target, self.columns = name, params, log_target, columns

    def fit(self, X: np.ndarray, y: np.ndarray) -> "_Fitted":
        X = X if self.columns is None else X[:, self.columns]
        self.mu_ = X.mean(axis=0)
        sd = X.std(axis=0)
        self.sd_ = np.where(sd > 0, sd, 1.0)
        Z = (X - self.mu_) / self.sd_
        self.est_ = _estimator(self.name, self.params)
        if self.log_target:
            t = np.log(y)
            self.t_mu_, self.t_sd_ = t.mean(), (t.std() or 1.0)
            self.est_.fit(Z, (t - self.t_mu_) / self.t_sd_)
        else:
            self.t_mu_, self.t_sd_ = y.mean(), (y.std() or 1.0)
            kw = {}
            if self.name in ("linear_plain", "linear", "ridge"):
                kw["sample_weight"] = 1.0 / y ** 2  # least relative squared error, close to MAPE
            self.est_.fit(Z, (y - self.t_mu_) / self.t_sd_, **kw)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = X if self.columns is None else X[:, self.columns]
        p = self.est_.predict((X - self.mu_) / self.sd_) * self.t_sd_ + self.t_mu_
        if self.log_target:
            return np.exp(np.clip(p, -50, 50))
        return p


def _folds(n: int, k: int, random_state: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.model_selection import KFold

    k = max(2, min(k, n))
    return list(KFold(k, shuffle=True, random_state=random_state).split(np.arange(n)))


def _cv_predict(make: Callable[[], _Fitted], X: np.ndarray, y: np.ndarray, folds) -> np.ndarray:
    import warnings

    pred = np.empty_like(y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for tr, te in folds:
            pred[te] = make().fit(X[tr], y[tr]).predict(X[te])
    return pred


def forward_select(X: np.ndarray, y: np.ndarray, folds, max_features: int = 20, tol_pct: float = 0.05,
                   names: Optional[Sequence[str]] = None) -> list[int]:
    """Sequential forward selection for a linear model by cross-validated MAPE.

    Adds, one at a time, the column that lowers the K-fold MAPE of a
    relative-error-weighted least-squares fit the most; stops when no column
    lowers it by ``tol_pct`` percentage points or ``max_features`` are in.
    """
    n, p = X.shape
    w = 1.0 / y ** 2
    sd = X.std(0)
    ok = sd > 0
    Xs = np.column_stack([np.ones(n), (X - X.mean(0)) / np.where(ok, sd, 1.0)])  # column 0: intercept
    # per fold: weighted Gram matrix and moment vector of the training rows, so each candidate is a k x k solve
    grams = []
    for tr, te in folds:
        A = Xs[tr] * w[tr][:, None]
        grams.append((Xs[tr].T @ A, A.T @ y[tr], te))
    chosen: list[int] = []
    best = math.inf
    while len(chosen) < min(max_features, p):
        scores = {}
        for j in np.flatnonzero(ok):
            if j in chosen:
                continue
            cols = [0] + [c + 1 for c in chosen] + [j + 1]
            err = 0.0
            for G, b, te in grams:
                Gs = G[np.ix_(cols, cols)]
                try:
                    coef = np.linalg.solve(Gs + 1e-10 * np.trace(Gs) * np.eye(len(cols)), b[cols])
                except np.linalg.LinAlgError:
                    err = math.inf
                    break
                err += np.sum(np.abs(Xs[te][:, cols] @ coef - y[te]) / y[te])
            scores[j] = err / n * 100.0
        if not scores:
            break
        j, s = min(scores.items(), key=lambda kv: kv[1])
        if s > best - tol_pct:
            break
        chosen.append(int(j))
        best = s
    return chosen or [int(np.argmax(ok))]


def stepwise_select(X: np.ndarray, y: np.ndarray, alpha_in: float = 0.05, alpha_out: float = 0.10,
                    max_features: int = 20, weights: Optional[np.ndarray] = None,
                    max_steps: Optional[int] = None) -> list[int]:
    """Draper-Smith stepwise regression: the columns of ``X`` a linear model of ``y`` keeps.

    Starting from the intercept alone, each step (1) adds the candidate column
    whose partial F-test (the t-test of its coefficient in the model with it
    added; F = t^2) has the smallest p-value, if that is below ``alpha_in`` and
    fewer than ``max_features`` are in; then (2) drops, one at a time, the
    included column with the largest p-value while it is above ``alpha_out``.
    It stops when a step changes nothing. ``weights`` (e.g. ``1 / y**2``, the
    relative-error weighting the linear job models are fitted with) make the
    tests those of weighted least squares; the fits are statsmodels' OLS/WLS.
    A candidate that is a linear combination of the included columns (rank
    deficient design) is never added.
    """
    import warnings

    import statsmodels.api as sm

    if not 0 < alpha_in < 1 or not 0 < alpha_out < 1:
        raise ConfigError(f"alpha_in and alpha_out must lie in (0, 1), got {alpha_in} and {alpha_out}")
    if alpha_in > alpha_out:  # Draper-Smith: entering must be harder than staying, or a column can cycle
        raise ConfigError(f"alpha_in ({alpha_in}) must not exceed alpha_out ({alpha_out})")
    n, p = X.shape
    sd = X.std(0)
    ok = np.flatnonzero(sd > 0)
    Xs = (X - X.mean(0)) / np.where(sd > 0, sd, 1.0)  # p-values do not depend on the scale; conditioning does
    w = np.ones(n) if weights is None else np.asarray(weights, float)

    def fit(cols: list[int]):
        exog = np.column_stack([np.ones(n), Xs[:, cols]])
        with warnings.catch_warnings():  # a rank-deficient candidate warns; it is rejected below
            warnings.simplefilter("ignore")
            res = sm.WLS(y, exog, weights=w).fit()
        return res if res.model.rank == exog.shape[1] else None

    chosen: list[int] = []
    for _ in range(max_steps or 4 * p + 10):  # every step changes the set; a guard against any cycle
        changed = False
        if len(chosen) < min(max_features, n - 2):
            best_j, best_p = None, alpha_in
            for j in ok:
                if j in chosen:
                    continue
                res = fit(chosen + [int(j)])
                if res is None:
                    continue
                pv = float(res.pvalues[-1])
                if np.isfinite(pv) and pv < best_p:
                    best_j, best_p = int(j), pv
            if best_j is not None:
                chosen.append(best_j)
                changed = True
        while chosen:
            res = fit(chosen)
            if res is None:  # cannot happen (every addition kept the rank full); be safe
                break
            pv = np.nan_to_num(np.asarray(res.pvalues[1:], float), nan=1.0)
            worst = int(np.argmax(pv))
            if pv[worst] <= alpha_out:
                break
            chosen.pop(worst)
            changed = True
        if not changed:
            break
    return chosen


@dataclass(frozen=True)
class ModelScore:
    """Cross-validated (or held-out) error of one model family with its chosen hyperparameters."""

    model: str
    params: str
    log_target: bool
    mape_pct: float
    rmse: float  # in the target's unit
    n_features: int

    @property
    def label(self) -> str:
        return MODEL_LABELS.get(self.model, self.model)


class JobRegressor:
    """End-to-end job-time regressor with augmentation, selection and model selection (sklearn style).

    Parameters
    ----------
    models: families to try (default all of ``MODEL_NAMES``); the best by CV MAPE is refitted on all rows.
    select: which augmented features the linear families (``AUGMENTED_MODELS``) use: 'none' (all),
        'sfs' (sequential forward selection by CV MAPE) or 'stepwise' (Draper-Smith stepwise regression
        by partial-F p-values, ``stepwise_select``); the other families always see the plain features.
    cv: folds of the cross-validation.
    max_features: cap of the forward / stepwise selection.
    alpha_in, alpha_out: p-value to enter and to stay of the stepwise selection.
    fast: smaller forests.

    Learned: ``features_`` (JobFeatures, augmented), ``plain_features_`` (not augmented),
    ``selected_`` (indices into the augmented features), ``selected_features_`` (their names),
    ``ranking_`` (ModelScore per family, best first), ``best_`` (ModelScore), ``estimator_``.
    """

    def __init__(self, models: Optional[Sequence[str]] = None, select: str = "none", cv: int = 5,
                 max_features: int = 20, random_state: int = 0, fast: bool = True,
                 alpha_in: float = 0.05, alpha_out: float = 0.10):
        self.models = models
        self.select = select
        self.cv = cv
        self.max_features = max_features
        self.alpha_in = alpha_in
        self.alpha_out = alpha_out
        self.random_state = random_state
        self.fast = fast

    # -- helpers
    def _matrices(self, X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        return self.features_.transform(X), self.plain_features_.transform(X)

    def fit(self, X: pd.DataFrame | JobRecords, y=None, numeric: Optional[Sequence[str]] = None,
            categorical: Optional[Sequence[str]] = None, target: Optional[str] = None) -> "JobRegressor":
        if isinstance(X, JobRecords):
            numeric, categorical, y, target, X = X.numeric, X.categorical, X.y, X.target, X.X
        self.target_ = target  # the name of the predicted column, when known (for saved models)
        y = np.asarray(y, dtype=float)
        if numeric is None:
            numeric = [c for c in X.columns if pd.api.types.is_numeric_dtype(X[c])]
        if categorical is None:
            categorical = [c for c in X.columns if c not in set(numeric)]
        if len(y) < MIN_ROWS:
            raise DataError(f"too few rows to fit: {len(y)} (need at least {MIN_ROWS})")
        if not np.all(np.isfinite(y)) or np.any(y <= 0):
            raise DataError("the target must be positive and finite on every row")
        if self.select not in SELECTIONS:
            raise ConfigError(f"unknown feature selection {self.select!r}; known: {', '.join(SELECTIONS)}")
        models = tuple(self.models or MODEL_NAMES)
        for m in models:
            _grid(m, 0, True)  # raises on an unknown name
        self.feature_names_in_ = tuple(numeric) + tuple(categorical)
        self.features_ = JobFeatures(numeric, categorical, augment=True).fit(X)
        self.plain_features_ = JobFeatures(numeric, categorical, augment=False).fit(X)
        XA, XP = self._matrices(X)
        folds = _folds(len(y), self.cv, self.random_state)
        if self.select == "sfs":
            self.selected_ = np.array(forward_select(XA, y, folds, self.max_features))
        elif self.select == "stepwise":
            # the tests of the relative-error-weighted least squares the linear families fit
            chosen = stepwise_select(XA, y, self.alpha_in, self.alpha_out, self.max_features, weights=1.0 / y ** 2)
            self.selected_ = np.array(chosen, dtype=int)
            if not chosen:  # no augmented feature is significant: the linear families would be a constant
                models = tuple(m for m in models if m not in AUGMENTED_MODELS)
                if not models:
                    raise DataError(f"stepwise selection found no feature with p < {self.alpha_in:g}, so the "
                                    "linear models have nothing to fit; raise alpha_in or use another selection")
        else:
            self.selected_ = np.arange(XA.shape[1])
        self.selected_features_ = tuple(self.features_.feature_names_[i] for i in self.selected_)

        ranking: list[ModelScore] = []
        self._candidates = {}
        for m in models:
            Xm = XA if m in AUGMENTED_MODELS else XP
            cols = self.selected_ if m in AUGMENTED_MODELS else None
            best = None
            for params, lg in _grid(m, self.random_state, self.fast):
                pred = _cv_predict(lambda: _Fitted(m, params, lg, cols), Xm, y, folds)
                if not np.all(np.isfinite(pred)):
                    continue
                sc = ModelScore(m, _fmt_params(params), lg, mape_pct(y, pred), rmse(y, pred),
                                Xm.shape[1] if cols is None else len(cols))
                if best is None or sc.mape_pct < best[0].mape_pct:
                    best = (sc, params, lg, cols)
            if best is not None:
                ranking.append(best[0])
                self._candidates[m] = best[1:]
        if not ranking:
            raise DataError("no model could be fitted to these rows")
        ranking.sort(key=lambda s: s.mape_pct)
        self.ranking_ = tuple(ranking)
        self.best_ = ranking[0]
        self.estimator_ = self._refit(self.best_.model, XA, XP, y)
        return self

    def _refit(self, m: str, XA, XP, y) -> _Fitted:
        import warnings

        params, lg, cols = self._candidates[m]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _Fitted(m, params, lg, cols).fit(XA if m in AUGMENTED_MODELS else XP, y)

    def _check(self):
        if not hasattr(self, "estimator_"):
            raise ConfigError("this JobRegressor is not fitted yet; call fit() first")

    def predict(self, X: pd.DataFrame | JobRecords, model: Optional[str] = None) -> np.ndarray:
        """Predicted target for each row; ``model`` picks a family other than the best (refitted lazily)."""
        self._check()
        if isinstance(X, JobRecords):
            X = X.X
        missing = [c for c in self.feature_names_in_ if c not in X.columns]
        if missing:
            raise DataError(f"missing feature column(s) {', '.join(map(repr, missing))}")
        XA, XP = self._matrices(X)
        if model is None or model == self.best_.model:
            est, m = self.estimator_, self.best_.model
        else:
            if model not in self._candidates:
                raise ConfigError(f"model {model!r} was not fitted; fitted: {', '.join(self._candidates)}")
            est, m = self._fitted_family(model), model
        return est.predict(XA if m in AUGMENTED_MODELS else XP)

    def _fitted_family(self, m: str) -> _Fitted:
        cache = self.__dict__.setdefault("_family_fits", {})
        if m not in cache:
            if not hasattr(self, "_train_y"):
                raise ConfigError(f"only the best family ({self.best_.model}) was refitted on all rows; "
                                  f"use fit_all() to predict with {m!r}")
            cache[m] = self._refit(m, self._train_XA, self._train_XP, self._train_y)
        return cache[m]

    def fit_all(self, X: pd.DataFrame | JobRecords, y=None, **kw) -> "JobRegressor":
        """``fit`` and also refit every family on all rows, so ``predict(model=...)`` works for each."""
        self.fit(X, y, **kw)
        if isinstance(X, JobRecords):
            y, X = X.y, X.X
        self._train_XA, self._train_XP = self._matrices(X)
        self._train_y = np.asarray(y, float)
        for m in self._candidates:
            self._fitted_family(m)
        return self

    # -- persistence
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for k in ("_train_XA", "_train_XP", "_train_y"):  # training matrices: the fitted families are kept
            state.pop(k, None)
        return state

    def save(self, path: str | Path) -> Path:
        """Pickle the whole fitted regressor (features, selection, CV ranking, fitted estimators) to ``path``."""
        import pickle

        self._check()
        p = Path(path)
        try:
            with open(p, "wb") as fh:
                pickle.dump(self, fh, protocol=pickle.HIGHEST_PROTOCOL)
        except OSError as exc:
            raise ConfigError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
        return p

    @classmethod
    def load(cls, path: str | Path) -> "JobRegressor":
        """A regressor saved by ``save`` (a pickle: load only files you trust)."""
        import pickle

        p = Path(path)
        if not p.is_file():
            raise DataError(f"no such model file: {str(path)!r}")
        try:
            with open(p, "rb") as fh:
                obj = pickle.load(fh)
        except Exception as exc:  # whatever unpickling raises, the file is not a saved model
            raise DataError(f"{str(path)!r} is not a saved job model ({type(exc).__name__}); "
                            "save one with `traincast fit jobs ... --save FILE`") from None
        if not isinstance(obj, cls) or not hasattr(obj, "estimator_"):
            raise DataError(f"{str(path)!r} holds a {type(obj).__name__}, not a fitted JobRegressor; "
                            "save one with `traincast fit jobs ... --save FILE`")
        return obj

    def score(self, X: pd.DataFrame | JobRecords, y=None) -> float:
        """R^2 of the predictions (the sklearn regressor convention); see ``mape_pct`` for relative error."""
        if isinstance(X, JobRecords):
            y = X.y
        y = np.asarray(y, float)
        p = self.predict(X)
        return float(1.0 - np.sum((y - p) ** 2) / max(np.sum((y - y.mean()) ** 2), 1e-300))


def _fmt_params(params: dict) -> str:
    keep = {k: v for k, v in params.items() if k not in ("random_state", "n_jobs", "max_iter", "early_stopping",
                                                           "learning_rate_init")}
    return ", ".join(f"{k}={v}" for k, v in keep.items()) or "-"


# --------------------------------------------------------------------------- experiments


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


def ranking_rows(scores: Sequence[ModelScore]) -> list[dict]:
    """Plain dict rows of a ranking, for tables and JSON."""
    return [{"model": s.model, "label": s.label, "params": s.params, "log_target": s.log_target,
             "features": s.n_features, "mape_pct": round(s.mape_pct, 3), "rmse": round(s.rmse, 6)}
            for s in scores]


def format_ranking(scores: Sequence[ModelScore], unit: str = "") -> str:
    """A plain-text ranking table (model, RMSE, MAPE) like the AI Gauge slide."""
    lines = [f"{'model':32s} {'RMSE':>12s} {'MAPE %':>8s}  {'log y':5s} {'feat':>4s}  params"]
    for s in scores:
        lines.append(f"{s.label:32s} {s.rmse:12.4g} {s.mape_pct:8.2f}  {'yes' if s.log_target else 'no':5s} "
                     f"{s.n_features:4d}  {s.params}")
    return "\n".join(lines)


__all__ = [
    "JobRecords", "JobFeatures", "JobRegressor", "ModelScore", "HoldoutResult", "MODEL_NAMES",
    "load_jobs", "records_from_frame", "vtrain_records", "mlperf_records", "build_job_records",
    "extrapolate", "leave_one_group_out", "parse_extrapolation", "forward_select", "stepwise_select", "SELECTIONS",
    "mape_pct", "rmse", "ranking_rows", "format_ranking", "JobPredictions", "predict_jobs", "read_csv",
    "STORE_TARGET", "StoreJobs", "store_job_records",
]
