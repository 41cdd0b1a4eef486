"""The regressor families, their grids, and ``JobRegressor`` (augmentation, selection, model selection)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import pandas as pd

from traincast.errors import ConfigError, DataError
from traincast.fit.jobs.features import JobFeatures
from traincast.fit.jobs.records import MIN_ROWS, JobRecords
from traincast.fit.jobs.selection import _cv_predict, _folds, forward_select, stepwise_select
from traincast.registry import Registry


@dataclass(frozen=True)
class Family:
    """A regressor family: its label, its scikit-learn estimator, the (params, log_target) grid it is tried
    with (``grid(random_state, fast)``), whether it sees the augmented features, and whether it is fitted on
    the time itself with relative-error weights (the linear families)."""

    label: str
    estimator: str  # "module:Class" of scikit-learn
    grid: Callable[[int, bool], list[tuple[dict, bool]]]
    augmented: bool = False
    relative_weights: bool = False

    def make(self, params: dict):
        import importlib

        mod, _, cls = self.estimator.partition(":")
        return getattr(importlib.import_module(mod), cls)(**params)


# the linear families fit the time itself (relative-error weighted): the augmented terms model an additive
# law, and a log-target fit over hundreds of products explodes when extrapolating
FAMILIES: Registry[Family] = Registry("model")
FAMILIES.add("linear_plain", Family("Linear regression (plain)", "sklearn.linear_model:LinearRegression",
                                    lambda rs, fast: [({}, lg) for lg in (False, True)], relative_weights=True),
             help="linear regression on the plain features")
FAMILIES.add("linear", Family("Linear regression (augmented)", "sklearn.linear_model:LinearRegression",
                              lambda rs, fast: [({}, False)], augmented=True, relative_weights=True),
             help="linear regression on the augmented (and selected) features")
FAMILIES.add("ridge", Family("Ridge (augmented)", "sklearn.linear_model:Ridge",
                             lambda rs, fast: [({"alpha": a}, False) for a in (1e-3, 1e-1, 10.0)], augmented=True,
                             relative_weights=True), help="ridge regression on the augmented features")
FAMILIES.add("tree", Family("Decision tree", "sklearn.tree:DecisionTreeRegressor",
                            lambda rs, fast: [({"max_depth": d, "random_state": rs}, True) for d in (5, 10, None)]),
             help="a decision tree on log time")
FAMILIES.add("forest", Family("Random forest", "sklearn.ensemble:RandomForestRegressor",
                              lambda rs, fast: [({"n_estimators": 100 if fast else 300, "max_features": m,
                                                  "random_state": rs, "n_jobs": -1}, True) for m in (1.0, 0.5)]),
             help="a random forest on log time")
FAMILIES.add("boosting", Family("Gradient boosting", "sklearn.ensemble:GradientBoostingRegressor",
                                lambda rs, fast: [({"n_estimators": n, "max_depth": d, "learning_rate": 0.1,
                                                    "random_state": rs}, True) for n, d in ((150, 3), (300, 5))]),
             help="gradient-boosted trees on log time")
FAMILIES.add("mlp", Family("MLP (neural network)", "sklearn.neural_network:MLPRegressor",
                           lambda rs, fast: [({"hidden_layer_sizes": h, "max_iter": 800, "alpha": 1e-3,
                                               "random_state": rs, "early_stopping": False,
                                               "learning_rate_init": 1e-3}, True) for h in ((64, 64), (128, 64, 32))]),
             help="a multi-layer perceptron on log time")

#: model families in the order they are listed
MODEL_NAMES = FAMILIES.names()
MODEL_LABELS = {e.name: e.obj.label for e in FAMILIES.entries()}
#: families fitted on the augmented (and possibly selected) features
AUGMENTED_MODELS = tuple(e.name for e in FAMILIES.entries() if e.obj.augmented)
#: feature selections of the augmented families (JobRegressor(select=...), `traincast fit jobs --select`)
SELECTIONS = ("none", "sfs", "stepwise")


def mape_pct(y_true, y_pred) -> float:
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    return float(np.mean(np.abs(y_pred - y_true) / np.abs(y_true)) * 100.0)


def rmse(y_true, y_pred) -> float:
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    return float(np.sqrt(np.mean((y_pred - y_true) ** 2)))


# --------------------------------------------------------------------------- models


def _grid(name: str, random_state: int, fast: bool) -> list[tuple[dict, bool]]:
    """(params, log_target) candidates of one family (UnknownNameError for a family that is not registered)."""
    return FAMILIES.get(name).grid(random_state, fast)


def _estimator(name: str, params: dict):
    return FAMILIES.get(name).make(params)


MODEL_KIND = "job-regression"


def _jsonable(v):
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


class _Fitted:
    """One fitted candidate: scaler + estimator on raw or log target, over a column subset."""

    def __init__(self, name: str, params: dict, log_target: bool, columns: Optional[np.ndarray] = None):
        self.name, self.params, self.log_target, self.columns = name, params, log_target, columns

    def state(self) -> dict:
        """Everything but the estimator, as JSON."""
        return {"name": self.name, "params": _jsonable(self.params), "log_target": bool(self.log_target),
                "columns": None if self.columns is None else [int(c) for c in self.columns],
                "mu": self.mu_.tolist(), "sd": self.sd_.tolist(), "t_mu": float(self.t_mu_), "t_sd": float(self.t_sd_)}

    @classmethod
    def from_state(cls, d: dict, est) -> "_Fitted":
        f = cls(d["name"], d["params"], d["log_target"],
                None if d["columns"] is None else np.array(d["columns"], dtype=int))
        f.mu_, f.sd_ = np.array(d["mu"], dtype=float), np.array(d["sd"], dtype=float)
        f.t_mu_, f.t_sd_, f.est_ = float(d["t_mu"]), float(d["t_sd"]), est
        return f

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
            if FAMILIES.get(self.name).relative_weights:
                kw["sample_weight"] = 1.0 / y ** 2  # least relative squared error, close to MAPE
            self.est_.fit(Z, (y - self.t_mu_) / self.t_sd_, **kw)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = X if self.columns is None else X[:, self.columns]
        p = self.est_.predict((X - self.mu_) / self.sd_) * self.t_sd_ + self.t_mu_
        if self.log_target:
            return np.exp(np.clip(p, -50, 50))
        return p



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
    def save(self, path: str | Path) -> Path:
        """Save the fitted regressor as data (:mod:`traincast.persist`: a JSON manifest of the features,
        selection, CV ranking and scalings, and the fitted scikit-learn estimators by skops)."""
        from dataclasses import asdict

        from traincast.persist import save_model_archive

        self._check()
        fits = {"best": self.estimator_}
        fits.update({f"family.{m}": f for m, f in self.__dict__.get("_family_fits", {}).items()})
        state = {
            "params": {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.get_params().items()},
            "target": self.target_, "feature_names_in": list(self.feature_names_in_),
            "features": self.features_.state(), "plain_features": self.plain_features_.state(),
            "selected": [int(i) for i in self.selected_], "selected_features": list(self.selected_features_),
            "ranking": [asdict(r) for r in self.ranking_], "best": asdict(self.best_),
            "candidates": {m: {"params": _jsonable(pr), "log_target": bool(lg),
                               "columns": None if cols is None else [int(c) for c in cols]}
                           for m, (pr, lg, cols) in self._candidates.items()},
            "fits": {k: f.state() for k, f in fits.items()},
        }
        p = Path(path)
        if not p.resolve().parent.is_dir():
            raise ConfigError(f"cannot write {str(path)!r}: folder {str(p.parent)!r} does not exist")
        try:
            save_model_archive(p, MODEL_KIND, state, {k: f.est_ for k, f in fits.items()})
        except OSError as exc:
            raise ConfigError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
        return p

    def get_params(self, deep: bool = True) -> dict:
        return {k: getattr(self, k) for k in ("models", "select", "cv", "max_features", "alpha_in", "alpha_out",
                                               "random_state", "fast")}

    @classmethod
    def load(cls, path: str | Path) -> "JobRegressor":
        """A regressor saved by ``save``."""
        from traincast.persist import load_model_archive

        if not Path(path).is_file():
            raise DataError(f"no such model file: {str(path)!r}")
        d, ests = load_model_archive(path, MODEL_KIND, "traincast fit jobs ... --save FILE")
        try:
            params = dict(d["params"])
            if params.get("models") is not None:
                params["models"] = tuple(params["models"])
            reg = cls(**params)
            reg.target_ = d["target"]
            reg.feature_names_in_ = tuple(d["feature_names_in"])
            reg.features_ = JobFeatures.from_state(d["features"])
            reg.plain_features_ = JobFeatures.from_state(d["plain_features"])
            reg.selected_ = np.array(d["selected"], dtype=int)
            reg.selected_features_ = tuple(d["selected_features"])
            reg.ranking_ = tuple(ModelScore(**r) for r in d["ranking"])
            reg.best_ = ModelScore(**d["best"])
            reg._candidates = {m: (c["params"], c["log_target"],
                                   None if c["columns"] is None else np.array(c["columns"], dtype=int))
                               for m, c in d["candidates"].items()}
            fits = {k: _Fitted.from_state(f, ests[k]) for k, f in d["fits"].items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{str(path)!r}: the saved job model is incomplete ({type(exc).__name__}: {exc}); save "
                            "one with `traincast fit jobs ... --save FILE`") from None
        reg.estimator_ = fits.pop("best")
        reg._family_fits = {k.split(".", 1)[1]: f for k, f in fits.items()}
        return reg

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
