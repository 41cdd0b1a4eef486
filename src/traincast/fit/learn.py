"""The learned per-op time model: gradient-boosted trees on log(measured / roofline).

``OpTimeRegressor`` is a scikit-learn style estimator: hyperparameters in the
constructor, ``fit(rows, time_ms)``, ``predict(rows) -> time_ms``,
``score(rows, time_ms) -> -MAPE``, learned state in attributes ending in ``_``.
``rows`` are canonical op rows (:mod:`traincast.fit.features`) that carry the
``dev_*`` hardware columns (:func:`~traincast.fit.features.attach_devices`).

One HistGradientBoosting model per op family (``gemm``, ``conv``,
``memory``) predicts ``log(time_ms / roofline_ms)`` where the roofline uses
the target device's datasheet fp32 peak and bandwidth. Predicting the ratio
rather than the time is what lets it carry over to GPUs it never saw: the
device enters through the roofline and through hardware features, never
through its name.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traincast.errors import DataError
from traincast.fit import features as F

FAMILY_OF = F.FAMILIES


def mape(pred, true) -> float:
    pred, true = np.asarray(pred, float), np.asarray(true, float)
    return float(np.mean(np.abs(pred - true) / true) * 100.0)


class OpTimeRegressor:
    """Per-family regressor on log(time / roofline): HistGradientBoosting (``estimator="hgb"``,
    the default) or a multi-layer perceptron as in Justus et al. (``estimator="mlp"``: the op
    kind one-hot, other features standardised)."""

    def __init__(self, max_iter: int = 300, learning_rate: float = 0.08, max_leaf_nodes: int = 48,
                 min_samples_leaf: int = 40, l2_regularization: float = 1.0, loss: str = "absolute_error",
                 hardware_features: bool = True, random_state: int = 0, estimator: str = "hgb"):
        self.estimator = estimator
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.loss = loss
        self.hardware_features = hardware_features
        self.random_state = random_state

    # sklearn-style parameter access ------------------------------------------------
    def get_params(self, deep: bool = True) -> dict:
        return {k: getattr(self, k) for k in ("max_iter", "learning_rate", "max_leaf_nodes", "min_samples_leaf",
                                              "l2_regularization", "loss", "hardware_features", "random_state",
                                              "estimator")}

    def set_params(self, **params) -> "OpTimeRegressor":
        for k, v in params.items():
            setattr(self, k, v)
        return self

    def _columns(self) -> np.ndarray:
        names = list(F.FEATURE_NAMES)
        keep = [i for i, n in enumerate(names)
                if self.hardware_features or n not in ("log_peak_tflops", "log_bw_gbps", "sms", "clock_mhz",
                                                       "log_mem_gib", "log_balance")]
        return np.array(keep)

    def fit(self, rows: pd.DataFrame, time_ms) -> "OpTimeRegressor":
        from sklearn.ensemble import HistGradientBoostingRegressor

        y = np.asarray(time_ms, dtype=float)
        ok = F.valid_mask(rows) & np.isfinite(y) & (y > 0)
        if not ok.any():
            raise DataError("no valid rows to fit on (every row has a missing shape field or time)")
        rows, y = rows[ok], y[ok]
        X, roof = F.featurize(rows)
        cols = self._columns()
        target = np.log(y) - np.log(roof)
        fam = rows["kind"].map(FAMILY_OF).to_numpy()
        self.models_ = {}
        self.n_train_ = {}
        if getattr(self, "estimator", "hgb") not in ("hgb", "mlp"):
            raise DataError(f"estimator must be 'hgb' or 'mlp', got {self.estimator!r}")
        for f in sorted(set(fam)):
            sel = fam == f
            if getattr(self, "estimator", "hgb") == "mlp":
                m = self._mlp()
            else:
                m = HistGradientBoostingRegressor(
                    max_iter=self.max_iter, learning_rate=self.learning_rate, max_leaf_nodes=self.max_leaf_nodes,
                    min_samples_leaf=self.min_samples_leaf, l2_regularization=self.l2_regularization,
                    loss=self.loss, categorical_features=[0], random_state=self.random_state, early_stopping=False,
                )
            m.fit(X[sel][:, cols], target[sel])
            self.models_[f] = m
            self.n_train_[f] = int(sel.sum())
        self.feature_names_ = tuple(np.array(F.FEATURE_NAMES)[cols])
        self.gpus_ = tuple(sorted(map(str, rows["gpu"].unique()))) if "gpu" in rows.columns else ()
        self.kinds_ = tuple(sorted(set(rows["kind"])))
        return self

    def _mlp(self):
        from sklearn.compose import ColumnTransformer
        from sklearn.neural_network import MLPRegressor
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import OneHotEncoder, StandardScaler

        n = len(self._columns())
        prep = ColumnTransformer([("kind", OneHotEncoder(handle_unknown="ignore"), [0]),
                                  ("num", StandardScaler(), list(range(1, n)))])
        net = MLPRegressor(hidden_layer_sizes=(128, 64, 32), alpha=1e-3, learning_rate_init=1e-3,
                           max_iter=self.max_iter, early_stopping=True, random_state=self.random_state)
        return make_pipeline(prep, net)

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        """Predicted ms per row (NaN where the row is invalid or its family was not fitted)."""
        if not hasattr(self, "models_"):
            raise DataError("the op-time model is not fitted; call fit() first")
        out = np.full(len(rows), np.nan)
        ok = F.valid_mask(rows)
        if not ok.any():
            return out
        from threadpoolctl import threadpool_limits

        sub = rows[ok]
        X, roof = F.featurize(sub)
        X = X[:, self._columns()]
        fam = sub["kind"].map(FAMILY_OF).to_numpy()
        pred = np.full(len(sub), np.nan)
        with threadpool_limits(1 if len(sub) < 20000 else None):  # small batches: no OpenMP spin-up
            for f, m in self.models_.items():
                sel = fam == f
                if sel.any():
                    pred[sel] = roof[sel] * np.exp(m.predict(X[sel]))
        out[np.flatnonzero(ok)] = pred
        return out

    def score(self, rows: pd.DataFrame, time_ms) -> float:
        """Negative MAPE (%) over rows with a prediction: higher is better, as scikit-learn expects."""
        y = np.asarray(time_ms, float)
        p = self.predict(rows)
        ok = np.isfinite(p) & np.isfinite(y) & (y > 0)
        return -mape(p[ok], y[ok])


# --- training data -------------------------------------------------------------------
def training_rows(data_dir=None, max_rows_per_file: int | None = 4000, seed: int = 0,
                  exclude_groups=()) -> pd.DataFrame:
    """Justus + NeuSight canonical rows with device columns, subsampled per file."""
    from traincast.fit.datasets import load_justus, load_neusight

    j = load_justus(data_dir, max_rows_per_file=max_rows_per_file, seed=seed)
    n = load_neusight(data_dir, max_rows_per_file=max_rows_per_file, seed=seed)
    rows = pd.concat([j, n], ignore_index=True)
    rows = rows[F.valid_mask(rows) & np.isfinite(rows["time_ms"]) & (rows["time_ms"] > 0)]
    rows = F.attach_devices(rows.reset_index(drop=True))
    rows["gpu_group"] = rows["gpu"].map(F.gpu_group)
    if exclude_groups:
        rows = rows[~rows["gpu_group"].isin(exclude_groups)].reset_index(drop=True)
    return rows


@dataclass(frozen=True)
class HeldOutResult:
    gpu: str
    dataset: str
    n_rows: int
    mape_pct: float
    rmse_ms: float
    analytical_mape_pct: float
    per_kind_mape_pct: dict


def analytical_ms(rows: pd.DataFrame) -> np.ndarray:
    """The analytical roofline baseline on canonical rows (catalog efficiencies per generation)."""
    from traincast.predict.analytical import efficiencies_for

    flops, nbytes, _ = F.costs(rows)
    out = np.empty(len(rows))
    for gpu, idx in rows.groupby("gpu").indices.items():
        dev = F._device_by_name(str(gpu))
        p = efficiencies_for(dev)
        kinds = rows["kind"].to_numpy()[idx]
        cls = np.where(kinds == "softmax", "reduction", kinds)
        eff_c = np.array([p["compute"]["simt"].get(c, p["compute"]["simt"].get("other", 0.5)) for c in cls])
        eff_m = np.array([p["memory"].get(c, p["memory"]["default"]) for c in cls])
        tc = flops[idx] / (dev.fp32_tflops * 1e12 * eff_c)
        tm = nbytes[idx] / (dev.memory_bandwidth_bytes_per_s * eff_m)
        out[idx] = (np.maximum(np.maximum(tc, tm), p["kernel_floor_us"] * 1e-6) + p["op_overhead_us"] * 1e-6) * 1e3
    return out


def leave_one_gpu_out(rows: pd.DataFrame, dataset: str, groups=None, estimator: OpTimeRegressor | None = None,
                      log=print) -> list[HeldOutResult]:
    """For each GPU group of ``dataset`` rows (``justus2018``/``neusight``): fit on every row of
    the other GPU groups (both datasets), predict the held-out group's ``dataset`` rows."""
    est = estimator or OpTimeRegressor()
    test_all = rows[rows["source"] == dataset]
    groups = groups or sorted(test_all["gpu_group"].unique())
    results = []
    for g in groups:
        t0 = time.perf_counter()
        train = rows[rows["gpu_group"] != g]
        test = test_all[test_all["gpu_group"] == g]
        m = OpTimeRegressor(**est.get_params()).fit(train, train["time_ms"].to_numpy())
        p = m.predict(test)
        y = test["time_ms"].to_numpy()
        a = analytical_ms(test)
        kinds = test["op"].fillna(test["kind"]) if "op" in test.columns else test["kind"]
        kinds = np.where(test["source"] == "justus2018",
                         np.where(test["kind"] == "conv", "conv2d", "dense") + np.where(test["train_step"] > 0, "+train", ""),
                         kinds)
        per = {str(k): mape(p[kinds == k], y[kinds == k]) for k in sorted(set(kinds))}
        r = HeldOutResult(g, dataset, len(test), mape(p, y), float(np.sqrt(np.mean((p - y) ** 2))), mape(a, y), per)
        results.append(r)
        if log:
            log(f"  held out {g:<12} n={len(test):6d}  learned MAPE {r.mape_pct:5.1f}%  RMSE {r.rmse_ms:8.3f} ms"
                f"  analytical MAPE {r.analytical_mape_pct:6.1f}%  ({time.perf_counter() - t0:.0f} s)")
    return results
