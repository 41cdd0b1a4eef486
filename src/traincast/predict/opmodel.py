"""The learned per-op time model at prediction time: inference, saving and loading.

``OpTimeModel`` predicts ``log(time_ms / base_ms)`` of canonical op rows (:mod:`traincast.predict.opfeatures`),
``base_ms`` a time computed from the target device's datasheet (``normalizer``): the roofline at the
datasheet peak and bandwidth, or for matmuls and convolutions the compute time alone (``compute``; under
``tf-compute`` only for the TensorFlow layer rows). One model per op family (``gemm``, ``conv``, ``memory``):
a scikit-learn regressor, or a :class:`FamilyBlend` of several with a choice per framework.

Fitting lives in :class:`traincast.fit.learn.OpTimeRegressor` (a subclass adding ``fit``); this module holds
what a forecast needs, so ``traincast.predict`` imports nothing from ``traincast.fit``. Models are saved as
data (:mod:`traincast.persist`): :meth:`OpTimeModel.save` and :func:`load_op_model`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from traincast.errors import DataError
from traincast.predict import opfeatures as F

FAMILY_OF = F.FAMILIES
NORMALIZERS = ("tf-compute", "compute", "roofline")
COMPUTE_FAMILIES = ("gemm", "conv")  # families whose ratio is taken to the compute time (all rows or TF rows)
HW_FEATURES = ("log_peak_tflops", "log_bw_gbps", "sms", "clock_mhz", "log_mem_gib", "log_balance")
FRAMEWORKS = {0: "torch", 1: "tf"}  # the framework_tf flag -> cell suffix
MODEL_KIND = "op-time"
REFIT = "traincast fit layers"
# hyperparameters (constructor arguments) and learned state (attributes ending in ``_``) a saved model keeps
PARAMS = ("max_iter", "learning_rate", "max_leaf_nodes", "min_samples_leaf", "l2_regularization", "loss",
          "hardware_features", "random_state", "estimator", "candidates", "cv_splits", "cv_max_rows", "n_threads",
          "normalizer")
STATE = ("n_train_", "choice_", "cv_scores_", "cv_group_scores_", "cv_groups_", "feature_names_", "gpus_", "kinds_",
         "min_time_ms_", "harness_floor_ms_", "n_rows_", "trained_on_groups_", "fit_seconds_")


def mape(pred, true) -> float:
    pred, true = np.asarray(pred, float), np.asarray(true, float)
    return float(np.mean(np.abs(pred - true) / true) * 100.0)


class FamilyBlend:
    """One op family's fitted members (``hgb``, ``mlp``, ``hgb_nohw``) and, per framework (``framework_tf`` feature
    column ``fw_col``: 0 torch, 1 tf), the candidate that predicts its rows' log(time / base time)."""

    def __init__(self, members: dict, choice: dict, constants: dict, fw_col: int, default: str,
                 known: tuple = ()):
        self.members = members      # name -> fitted scikit-learn regressor
        self.choice = choice        # framework code -> candidate name
        self.constants = constants  # framework code -> log ratio (the roofline candidate), None: whole family
        self.fw_col = fw_col
        self.default = default      # candidate for a framework the fit never saw
        # (device-spec column indices, the fitted GPUs' spec rows, candidate): rows of a GPU the fit saw use it
        self.known = known

    def _seen(self, X: np.ndarray) -> np.ndarray:
        """Rows whose device-spec columns are those of a GPU in the fit."""
        if not self.known:
            return np.zeros(len(X), bool)
        cols, specs, _ = self.known
        seen = np.zeros(len(X), bool)
        for spec in specs:
            seen |= (np.abs(X[:, cols] - spec) <= 1e-6 * (1 + np.abs(spec))).all(axis=1)
        return seen

    def predict(self, X: np.ndarray) -> np.ndarray:
        fw = (X[:, self.fw_col] > 0.5).astype(int)
        seen = self._seen(X)
        fw = np.where(seen, -1, fw)  # -1: a GPU of the fit, predicted by the known-GPU candidate
        out = np.full(len(X), np.nan)

        def member(name, sel):
            return self.members[name].predict(X[sel])

        for code in np.unique(fw):
            sel = fw == code
            name = self.known[2] if code == -1 else self.choice.get(int(code), self.default)
            if name == "roofline":
                out[sel] = self.constants.get(int(code), self.constants.get(None, 0.0))
            elif name == "ensemble":
                out[sel] = 0.5 * (member("hgb", sel) + member("mlp", sel))
            else:
                out[sel] = member(name, sel)
        return out

    # --- as data ----------------------------------------------------------------------
    def to_state(self, prefix: str) -> tuple[dict, dict]:
        """(JSON-able description, estimators by archive name)."""
        ests = {f"{prefix}.{name}": m for name, m in self.members.items()}
        known = None
        if self.known:
            cols, specs, cand = self.known
            known = {"cols": [int(c) for c in cols], "specs": np.asarray(specs, float).tolist(), "candidate": cand}
        return ({"type": "blend", "members": {name: f"{prefix}.{name}" for name in self.members},
                 "choice": {str(k): v for k, v in self.choice.items()},
                 "constants": {("all" if k is None else str(k)): float(v) for k, v in self.constants.items()},
                 "fw_col": int(self.fw_col), "default": self.default, "known": known}, ests)

    @classmethod
    def from_state(cls, d: dict, estimators: dict) -> "FamilyBlend":
        known = ()
        if d.get("known"):
            k = d["known"]
            known = (np.array(k["cols"], dtype=int), np.array(k["specs"], dtype=float), str(k["candidate"]))
        return cls(members={name: estimators[key] for name, key in d["members"].items()},
                   choice={int(k): v for k, v in d["choice"].items()},
                   constants={(None if k == "all" else int(k)): float(v) for k, v in d["constants"].items()},
                   fw_col=int(d["fw_col"]), default=str(d["default"]), known=known)


class OpTimeModel:
    """A fitted per-family model of log(time / base time) of canonical op rows (see the module docstring).

    ``predict(rows) -> time_ms`` (NaN where a row is invalid or its family was not fitted) and
    ``score(rows, time_ms) -> -MAPE``, as scikit-learn estimators. ``rows`` carry the ``dev_*`` hardware
    columns (:func:`~traincast.predict.opfeatures.attach_devices`)."""

    def __init__(self, max_iter: int = 300, learning_rate: float = 0.08, max_leaf_nodes: int = 48,
                 min_samples_leaf: int = 40, l2_regularization: float = 1.0, loss: str = "absolute_error",
                 hardware_features: bool = True, random_state: int = 0, estimator: str = "hgb",
                 candidates: tuple = ("hgb", "mlp", "ensemble", "hgb_nohw", "roofline"), cv_splits: int | None = None,
                 cv_max_rows: int | None = 20000, n_threads: int | None = 1, normalizer: str = "tf-compute"):
        self.estimator = estimator
        self.normalizer = normalizer
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.loss = loss
        self.hardware_features = hardware_features
        self.random_state = random_state
        self.candidates = candidates
        self.cv_splits = cv_splits
        self.cv_max_rows = cv_max_rows
        self.n_threads = n_threads

    # sklearn-style parameter access ------------------------------------------------
    def get_params(self, deep: bool = True) -> dict:
        return {k: getattr(self, k) for k in PARAMS}

    def set_params(self, **params) -> "OpTimeModel":
        bad = sorted(set(params) - set(PARAMS))
        if bad:
            raise ValueError(f"invalid parameter(s) {', '.join(bad)} for {type(self).__name__}; "
                             f"valid: {', '.join(PARAMS)}")
        for k, v in params.items():
            setattr(self, k, v)
        return self

    def _columns(self) -> np.ndarray:
        names = list(F.FEATURE_NAMES)
        keep = [i for i, n in enumerate(names) if self.hardware_features or n not in HW_FEATURES]
        return np.array(keep)

    def _base(self, X: np.ndarray, roof: np.ndarray, fam: np.ndarray) -> np.ndarray:
        """The time (ms) the log ratio is taken against, per row of the full feature matrix ``X``."""
        if self.normalizer == "roofline":
            return roof
        tc = np.exp(X[:, F.FEATURE_NAMES.index("log_tc_ms")]) + F.ROOF_FLOOR_MS
        use = np.isin(fam, COMPUTE_FAMILIES)
        if self.normalizer == "tf-compute":
            use &= X[:, F.FEATURE_NAMES.index("framework_tf")] > 0.5
        return np.where(use, tc, roof)

    def base_ms(self, rows: pd.DataFrame) -> np.ndarray:
        """Per row (canonical op rows with ``dev_*`` columns): the datasheet time whose ratio the model predicts."""
        X, roof = F.featurize(rows)
        return self._base(X, roof, rows["kind"].map(FAMILY_OF).to_numpy())

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
        fam = sub["kind"].map(FAMILY_OF).to_numpy()
        base = self._base(X, roof, fam)
        X = X[:, self._columns()]
        pred = np.full(len(sub), np.nan)
        with threadpool_limits(1 if len(sub) < 20000 else None):  # small batches: no OpenMP spin-up
            for f, m in self.models_.items():
                sel = fam == f
                if sel.any():
                    pred[sel] = base[sel] * np.exp(m.predict(X[sel]))
        out[np.flatnonzero(ok)] = pred
        return out

    def score(self, rows: pd.DataFrame, time_ms) -> float:
        """Negative MAPE (%) over rows with a prediction: higher is better, as scikit-learn expects."""
        y = np.asarray(time_ms, float)
        p = self.predict(rows)
        ok = np.isfinite(p) & np.isfinite(y) & (y > 0)
        return -mape(p[ok], y[ok])

    def summary(self) -> list[str]:
        """One line per cell: the model that predicts it and, under ``auto``, the grouped-CV MAPEs."""
        if not hasattr(self, "models_"):
            return ["not fitted"]
        out = []
        for cell in sorted(getattr(self, "choice_", {})):
            line = f"{cell:<13} {self.choice_[cell]}"
            known = getattr(self.models_.get(cell.split("/")[0]), "known", ())
            if known and known[2] != self.choice_[cell]:
                line += f" ({known[2]} on the {len(known[1])} GPUs of the fit)"
            sc = getattr(self, "cv_scores_", {}).get(cell)
            if sc:
                fam = cell.split("/")[0]
                gpus = self.cv_groups_.get(fam, ())
                line += ("  (GPU-grouped CV MAPE: " + ", ".join(f"{c} {v:.1f}%" for c, v in sc.items())
                         + f"; {len(gpus)} GPUs)")
            out.append(line)
        return out

    # --- saving as data ----------------------------------------------------------------
    def save(self, path: str | Path) -> int:
        """Write the fitted model to ``path`` (:mod:`traincast.persist`); returns the file's size in bytes."""
        from traincast.persist import save_model_archive

        if not hasattr(self, "models_"):
            raise DataError("the op-time model is not fitted; nothing to save")
        families, ests = {}, {}
        for fam, m in self.models_.items():
            if isinstance(m, FamilyBlend):
                families[fam], e = m.to_state(fam)
                ests.update(e)
            else:
                families[fam] = {"type": "single", "estimator": fam}
                ests[fam] = m
        params = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.get_params().items()}
        state = {k: _plain(getattr(self, k)) for k in STATE if hasattr(self, k)}
        return save_model_archive(path, MODEL_KIND, {"params": params, "state": state, "families": families}, ests)


def _plain(v):
    """JSON-able: tuples to lists, numpy scalars to Python numbers, non-string keys to strings."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


_TUPLES = ("feature_names_", "gpus_", "kinds_", "trained_on_groups_")


def load_op_model(path: str | Path) -> OpTimeModel:
    """A model written by :meth:`OpTimeModel.save` (DataError naming the problem otherwise)."""
    from traincast.persist import load_model_archive

    d, ests = load_model_archive(path, MODEL_KIND, REFIT)
    try:
        params = dict(d["params"])
        params["candidates"] = tuple(params.get("candidates") or ())
        model = OpTimeModel(**params)
        for k, v in (d.get("state") or {}).items():
            if k in STATE:
                setattr(model, k, tuple(v) if k in _TUPLES else v)
        if "cv_groups_" in (d.get("state") or {}):
            model.cv_groups_ = {f: tuple(g) for f, g in model.cv_groups_.items()}
        model.models_ = {fam: (FamilyBlend.from_state(f, ests) if f["type"] == "blend" else ests[f["estimator"]])
                         for fam, f in d["families"].items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{str(path)!r}: the model's manifest is incomplete ({type(exc).__name__}: {exc}); "
                        f"rebuild it with `{REFIT}`") from None
    return model
