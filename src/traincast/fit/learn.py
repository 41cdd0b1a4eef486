"""The learned per-op time model: regressors on log(measured / a datasheet time).

``OpTimeRegressor`` is a scikit-learn style estimator: hyperparameters in the
constructor, ``fit(rows, time_ms)``, ``predict(rows) -> time_ms``,
``score(rows, time_ms) -> -MAPE``, learned state in attributes ending in ``_``.
``rows`` are canonical op rows (:mod:`traincast.predict.opfeatures`) that carry the
``dev_*`` hardware columns (:func:`~traincast.predict.opfeatures.attach_devices`).

One model per op family (``gemm``, ``conv``, ``memory``) predicts
``log(time_ms / base_ms)``, the ratio to a time computed from the target
device's datasheet (``normalizer``): the roofline max(FLOPs / peak, bytes /
bandwidth), except for the TensorFlow matmul and convolution layers (Justus
et al.) under the default ``"tf-compute"``, whose ratio is to the fp32 compute
time FLOPs / peak; ``"compute"`` takes the compute time for every matmul and
convolution, ``"roofline"`` the roofline for every row (the models fitted
before the parameter existed, 2026-11-24, read as this). Predicting the ratio
rather than the time is what lets it carry over to GPUs it never saw: the
device enters through that time and through hardware features, never through
its name. Why the compute time for the TensorFlow layers: their small-batch
matmuls and convolutions are not held by DRAM bandwidth (the largest
memory-bound forward dense layers reach 13-55% of the datasheet bandwidth, a
4.1x spread over the six GPUs; per fp32 TFLOPS they reach 11-18 GB/s, a 1.7x
spread: ``benchmarks/justus_bandwidth.py``), so the ratio to the compute time
carries across GPUs and the ratio to the roofline does not: leaving a GPU
out, the M60 went from 89-102% to 41-46% MAPE over three row samples. The
PyTorch rows keep the roofline: with the compute time for them too, the
NeuSight whole models with the target GPU left out read 19.8% against
17.1-18.2% (``docs/learned.md``).

The model of a family is HistGradientBoosting (``estimator="hgb"``), an MLP as
in Justus et al. (``"mlp"``), the mean of both log-ratio predictions
(``"ensemble"``), ``"hybrid"`` (``hgb`` on the GPUs of the fit; on other GPUs HistGradientBoosting with
the device-spec features on TensorFlow layer rows and without them on PyTorch rows: see ``hgb_nohw`` below),
or chosen by cross-validation grouped by GPU (``"auto"``):
for each *cell* (op family x framework: ``tf`` for the Justus TensorFlow
layers, ``torch`` for the NeuSight PyTorch kernels and traced ops) the
candidate (``hgb``, ``mlp``, ``ensemble``, ``hgb_nohw`` = HistGradientBoosting
without the device-spec features, ``roofline`` = a fitted constant times the
base time above) with the lowest mean held-out-GPU MAPE predicts.

Why ``hgb_nohw``: with a handful of GPUs in a family, the device-spec columns
(peak, bandwidth, SMs, clock, memory, balance) identify the GPU, and trees
split on them as on a name; a GPU they never saw then inherits one training
GPU's ratios. Without them the device enters through the roofline times and
the wave features only. On the NeuSight elementwise kernels that took the
leave-one-GPU-out MAPE of the P4 from 39% to 10% (``docs/learned.md``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traincast.errors import DataError
from traincast.predict import opfeatures as F

from traincast.predict.adaptation import adapt_predictions, adaptation_cells  # noqa: F401  (re-exported)
from traincast.predict.opmodel import (  # noqa: F401  (re-exported: the estimator's vocabulary)
    COMPUTE_FAMILIES,
    FAMILY_OF,
    FRAMEWORKS,
    HW_FEATURES,
    NORMALIZERS,
    FamilyBlend,
    OpTimeModel,
    mape,
)

ESTIMATORS = ("hgb", "mlp", "ensemble", "hgb_nohw", "hybrid", "auto")
CANDIDATES = ("hgb", "mlp", "ensemble", "hgb_nohw", "roofline")
# ``hybrid``: for a GPU the fit saw, ``hgb`` (the device-spec columns pick out its own ratios); for any other
# GPU, the device-spec columns where the rows come from six GPUs of three generations (the TensorFlow layers),
# not where a handful of GPUs makes them a GPU's name (the PyTorch kernels and traced ops)
HYBRID_CHOICE = {0: "hgb_nohw", 1: "hgb"}
_NEEDS = {"hgb": ("hgb",), "mlp": ("mlp",), "ensemble": ("hgb", "mlp"), "hgb_nohw": ("hgb_nohw",), "roofline": ()}


def ratio_constant(log_ratio) -> float:
    """The constant c (as log c) whose ``c * base`` has the least MAPE on these log(time/base):
    the median of the ratios t weighted by 1/t, since sum |c/t - 1| = sum (1/t) |c - t|."""
    t = np.exp(np.asarray(log_ratio, float))
    order = np.argsort(t)
    w = 1.0 / t[order]
    i = int(np.searchsorted(np.cumsum(w), 0.5 * w.sum()))
    return float(np.log(t[order][min(i, len(t) - 1)]))


class OpTimeRegressor(OpTimeModel):
    """Per-family regressor on log(time / base time) (``normalizer``): HistGradientBoosting (``estimator="hgb"``,
    the default), a multi-layer perceptron as in Justus et al. (``"mlp"``: the op kind one-hot,
    other features standardised), their mean in log space (``"ensemble"``), HistGradientBoosting without
    the device-spec features (``"hgb_nohw"``), ``"hybrid"`` (``hgb`` on the GPUs of the fit and on TensorFlow
    rows, ``hgb_nohw`` on PyTorch rows of other GPUs), or ``"auto"``: per op
    family and framework, the candidate of ``candidates`` with the lowest cross-validated MAPE,
    the folds grouped by GPU (``cv_splits=None``: leave one GPU model out; an int: that many
    GroupKFold folds), on at most ``cv_max_rows`` rows of each family (the final fit uses all).
    ``n_threads``: OpenMP/BLAS threads while fitting (``None``: the libraries' defaults).

    After ``fit``: ``choice_`` (cell -> candidate, a cell is ``"<family>/<tf|torch>"``),
    ``cv_scores_`` (cell -> candidate -> mean held-out-GPU MAPE %, empty unless auto),
    ``cv_group_scores_`` (cell -> candidate -> GPU -> MAPE %), ``cv_groups_`` (family -> GPUs)."""

    def __init__(self, max_iter: int = 300, learning_rate: float = 0.08, max_leaf_nodes: int = 48,
                 min_samples_leaf: int = 40, l2_regularization: float = 1.0, loss: str = "absolute_error",
                 hardware_features: bool = True, random_state: int = 0, estimator: str = "hgb",
                 candidates: tuple = CANDIDATES, cv_splits: int | None = None, cv_max_rows: int | None = 20000,
                 n_threads: int | None = 1, normalizer: str = "tf-compute"):
        super().__init__(max_iter=max_iter, learning_rate=learning_rate, max_leaf_nodes=max_leaf_nodes,
                         min_samples_leaf=min_samples_leaf, l2_regularization=l2_regularization, loss=loss,
                         hardware_features=hardware_features, random_state=random_state, estimator=estimator,
                         candidates=candidates, cv_splits=cv_splits, cv_max_rows=cv_max_rows, n_threads=n_threads,
                         normalizer=normalizer)

    def _member(self, name: str):
        """A fresh regressor for the feature matrix of ``_columns()`` (``hgb_nohw``: without the device-spec
        columns; the op-kind column stays first, as the categorical feature)."""
        from sklearn.ensemble import HistGradientBoostingRegressor

        if name == "mlp":
            return self._mlp()
        if name == "hgb_nohw":
            from sklearn.compose import ColumnTransformer
            from sklearn.pipeline import make_pipeline

            names = np.array(F.FEATURE_NAMES)[self._columns()]
            keep = [i for i, n in enumerate(names) if n not in HW_FEATURES]
            return make_pipeline(ColumnTransformer([("no_hw", "passthrough", keep)]), self._member("hgb"))
        return HistGradientBoostingRegressor(
            max_iter=self.max_iter, learning_rate=self.learning_rate, max_leaf_nodes=self.max_leaf_nodes,
            min_samples_leaf=self.min_samples_leaf, l2_regularization=self.l2_regularization,
            loss=self.loss, categorical_features=[0], random_state=self.random_state, early_stopping=False,
        )

    def _check(self) -> tuple:
        p = self.get_params()
        if p["estimator"] not in ESTIMATORS:
            raise DataError(f"estimator must be one of {', '.join(ESTIMATORS)}, got {p['estimator']!r}")
        cands = tuple(p["candidates"] or ())
        bad = [c for c in cands if c not in CANDIDATES]
        if p["estimator"] == "auto" and (bad or not cands):
            raise DataError(f"candidates must be a non-empty subset of {', '.join(CANDIDATES)}, got {cands!r}")
        if p["normalizer"] not in NORMALIZERS:
            raise DataError(f"normalizer must be one of {', '.join(NORMALIZERS)}, got {p['normalizer']!r}")
        if p["cv_splits"] is not None and (int(p["cv_splits"]) != p["cv_splits"] or p["cv_splits"] < 2):
            raise DataError(f"cv_splits must be None (leave one GPU out) or an integer >= 2, got {p['cv_splits']!r}")
        return cands

    def fit(self, rows: pd.DataFrame, time_ms) -> "OpTimeRegressor":
        import sklearn.ensemble  # noqa: F401  load the OpenMP and BLAS libraries before limiting their threads
        import sklearn.neural_network  # noqa: F401
        from threadpoolctl import threadpool_limits

        # n_threads=1 by default: on a machine shared with other work, two OpenMP/BLAS threads that wait on
        # each other at every barrier made fits 10-30x slower than one thread (2-core machine, one busy)
        with threadpool_limits(self.get_params()["n_threads"]):
            return self._fit(rows, time_ms)

    def _fit(self, rows: pd.DataFrame, time_ms) -> "OpTimeRegressor":
        cands = self._check()
        y = np.asarray(time_ms, dtype=float)
        ok = F.valid_mask(rows) & np.isfinite(y) & (y > 0)
        if not ok.any():
            raise DataError("no valid rows to fit on (every row has a missing shape field or time)")
        rows, y = rows[ok], y[ok]
        X, roof = F.featurize(rows)
        fam = rows["kind"].map(FAMILY_OF).to_numpy()
        target = np.log(y) - np.log(self._base(X, roof, fam))
        cols = self._columns()
        X = X[:, cols]
        fw_col = list(np.array(F.FEATURE_NAMES)[cols]).index("framework_tf")
        fw = (X[:, fw_col] > 0.5).astype(int)
        groups = (rows["gpu_group"] if "gpu_group" in rows.columns
                  else rows["gpu"] if "gpu" in rows.columns else pd.Series("?", index=rows.index))
        groups = groups.astype(str).to_numpy()
        est = self.get_params()["estimator"]
        self.models_, self.n_train_ = {}, {}
        self.choice_, self.cv_scores_, self.cv_group_scores_, self.cv_groups_ = {}, {}, {}, {}
        for f in sorted(set(fam)):
            sel = fam == f
            Xf, tf, fwf, gf = X[sel], target[sel], fw[sel], groups[sel]
            codes = sorted(int(c) for c in np.unique(fwf))
            cells = {c: f"{f}/{FRAMEWORKS[c]}" for c in codes}
            if _NEEDS.get(est) == (est,):  # a single-member estimator: no blend
                m = self._member(est).fit(Xf, tf)
                self.choice_.update({cells[c]: est for c in codes})
            else:
                if est == "auto":
                    choice = self._choose(f, Xf, tf, fwf, gf, cells, cands)
                elif est == "hybrid":
                    choice = {c: HYBRID_CHOICE[c] for c in codes}
                else:
                    choice = {c: "ensemble" for c in codes}
                need = sorted({m for c in codes for m in _NEEDS[choice[c]]} | ({"hgb"} if est == "hybrid" else set()))
                members = {name: self._member(name).fit(Xf, tf) for name in need}
                consts = {c: ratio_constant(tf[fwf == c]) for c in codes}
                consts[None] = ratio_constant(tf)
                big = max(codes, key=lambda c: int((fwf == c).sum()))
                known = ()
                if est == "hybrid":  # the GPUs of the fit keep the model that knows their specs
                    names = list(np.array(F.FEATURE_NAMES)[cols])
                    hw = np.array([names.index(n) for n in HW_FEATURES if n in names])
                    if len(hw):
                        known = (hw, np.unique(Xf[:, hw], axis=0), "hgb")
                m = FamilyBlend(members, choice, consts, fw_col, default=choice[big], known=known)
                self.choice_.update({cells[c]: choice[c] for c in codes})
            self.models_[f] = m
            self.n_train_[f] = int(sel.sum())
        self.feature_names_ = tuple(np.array(F.FEATURE_NAMES)[cols])
        self.gpus_ = tuple(sorted(map(str, rows["gpu"].unique()))) if "gpu" in rows.columns else ()
        self.kinds_ = tuple(sorted(set(rows["kind"])))
        return self

    def _choose(self, family, X, target, fw, groups, cells, cands) -> dict:
        """Grouped-by-GPU CV of the candidates on one family; returns framework code -> candidate and
        records the scores in ``cv_scores_``/``cv_group_scores_``. A family with fewer than two GPUs
        cannot be cross-validated across GPUs and gets ``hgb``; a cell with one GPU is scored on that
        GPU's rows predicted by models fitted on the family's other GPUs."""
        from sklearn.model_selection import GroupKFold, LeaveOneGroupOut

        p = self.get_params()
        n_max = p["cv_max_rows"]
        idx = np.arange(len(X))
        if n_max and len(X) > n_max:
            idx = np.sort(np.random.default_rng(p["random_state"]).choice(len(X), int(n_max), replace=False))
        X, target, fw, groups = X[idx], target[idx], fw[idx], groups[idx]
        uniq = sorted(set(groups))
        self.cv_groups_[family] = tuple(uniq)
        codes = sorted(cells)
        if len(uniq) < 2:
            for c in codes:
                self.cv_scores_[cells[c]], self.cv_group_scores_[cells[c]] = {}, {}
            return {c: "hgb" for c in codes}
        splitter = (LeaveOneGroupOut() if p["cv_splits"] is None
                    else GroupKFold(n_splits=min(int(p["cv_splits"]), len(uniq))))
        need = sorted({m for c in cands for m in _NEEDS[c]})
        pred = {c: np.full(len(X), np.nan) for c in cands}
        for tr, te in splitter.split(X, target, groups):
            got = {name: self._member(name).fit(X[tr], target[tr]).predict(X[te]) for name in need}
            for c in cands:
                if c == "roofline":
                    whole = ratio_constant(target[tr])
                    k = {code: ratio_constant(target[tr][fw[tr] == code]) if (fw[tr] == code).any() else whole
                         for code in codes}
                    pred[c][te] = np.array([k[int(v)] for v in fw[te]])
                elif c == "ensemble":
                    pred[c][te] = 0.5 * (got["hgb"] + got["mlp"])
                else:
                    pred[c][te] = got[c]
        choice = {}
        for code in codes:
            cell = cells[code]
            in_cell = fw == code
            gs = sorted(set(groups[in_cell]))
            per = {c: {g: float(np.mean(np.abs(np.expm1(pred[c][in_cell & (groups == g)]
                                                          - target[in_cell & (groups == g)]))) * 100.0)
                       for g in gs} for c in cands}
            score = {c: float(np.mean(list(per[c].values()))) for c in cands}
            self.cv_group_scores_[cell], self.cv_scores_[cell] = per, score
            choice[code] = min(cands, key=lambda c: (score[c], cands.index(c)))
        return choice

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


# --- adapting to one GPU from a few of its measurements --------------------------------
class GpuAdapter:
    """Few-shot correction of a fitted op-time model to one GPU from a handful of its measured rows.

    Specs do not predict a machine's per-op overheads (framework session, driver, host CPU): held out,
    the Justus M60 and Quadro P2000 miss by 45-100% whatever the estimator. A few measured rows do.
    Per cell -- framework (``framework_tf``) x phase (forward pass or training step; held out, the
    Quadro P2000's convolution training steps run at a median 1.6-3.2x the prediction, its forward
    passes 0.6-1.2x) -- the adapter fits ``log t = a + b * (log p - m)`` on the rows' measured times
    ``t`` and the base model's predictions ``p`` (``m`` their mean log) by robust least squares
    (soft-L1 loss, scale 0.2 in log units).

    The slope ``b`` (a tilt: small, overhead-bound ops against large ones) is fitted only where a
    cross-validation on the adaptation rows prefers it to a plain scale (``tilt=None``; four rows at
    least), shrunk toward 1 by a penalty worth about ``prior`` rows, and it holds only over the range of
    predictions the rows covered: beyond it the scale alone applies. Without that clamp, ten A100
    kernel rows with one large bmm among small elementwise ops tilted the large kernels' predictions
    to 202% MAPE. Cells without adaptation rows keep the base prediction. scikit-learn style:
    ``fit(rows, time_ms)``, ``predict(rows)``, ``coef_`` (cell -> a, b, m, lo, hi).
    """

    def __init__(self, base, prior: float = 3.0, tilt: bool | None = None):
        self.base = base
        self.prior = prior
        self.tilt = tilt

    def get_params(self, deep: bool = True) -> dict:
        return {"base": self.base, "prior": self.prior, "tilt": self.tilt}

    @staticmethod
    def cells(rows: pd.DataFrame) -> np.ndarray:
        """Each row's adaptation cell (:func:`traincast.predict.adaptation.adaptation_cells`)."""
        return adaptation_cells(rows)

    def fit(self, rows: pd.DataFrame, time_ms) -> "GpuAdapter":
        self.coef_ = adapter_coefs(self.base.predict(rows), self.cells(rows), time_ms, self.prior, self.tilt)
        self.n_rows_ = len(rows)
        return self

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        if not hasattr(self, "coef_"):
            raise DataError("the GPU adapter is not fitted; call fit() first")
        return adapt_predictions(self.base.predict(rows), self.cells(rows), self.coef_)


def _adapter_cell(x, ly, prior):
    """(a, b) of ``log t = a + b x`` on centred log predictions ``x``: ``prior=None`` holds b at 1 (a scale)."""
    from scipy.optimize import least_squares

    start = float(np.median(ly - x))
    if prior is None:
        return float(least_squares(lambda z: z[0] + x - ly, [start], loss="soft_l1", f_scale=0.2).x[0]), 1.0
    w = np.sqrt(prior) * (float(x.std()) or 1.0)  # a unit of b moves predictions by ~ x.std() (log units)
    z = least_squares(lambda z: np.append(z[0] + z[1] * x - ly, w * (z[1] - 1.0)), [start, 1.0],
                      loss="soft_l1", f_scale=0.2).x
    return float(z[0]), float(z[1])


def _tilt_helps(x, ly, prior, folds: int = 10) -> bool:
    """Whether the scale-and-slope form beats the scale alone on held-out adaptation rows (leave-one-out up
    to ``folds`` rows, else ``folds``-fold; mean absolute log error). Fewer than four rows: never."""
    n = len(x)
    if n < 4:
        return False
    fold = np.random.default_rng(0).permutation(n) % min(n, folds)
    err = {None: 0.0, prior: 0.0}
    for f in range(min(n, folds)):
        tr, te = fold != f, fold == f
        for cand in err:
            a, b = _adapter_cell(x[tr], ly[tr], cand)
            err[cand] += float(np.abs(a + b * x[te] - ly[te]).sum())
    return err[prior] < err[None]


def adapter_coefs(pred, cell, time_ms, prior: float = 3.0, tilt: bool | None = None) -> dict:
    """:class:`GpuAdapter`'s fit on given base predictions and cells (:meth:`GpuAdapter.cells`):
    cell -> (a, b, m, lo, hi).
    ``tilt``: fit the slope (True), hold it at 1 (False), or choose by cross-validation on the rows (None)."""
    if prior < 0:
        raise DataError(f"prior must be >= 0, got {prior}")
    p, y, cell = np.asarray(pred, float), np.asarray(time_ms, float), np.asarray(cell)
    ok = np.isfinite(p) & (p > 0) & np.isfinite(y) & (y > 0)
    if not ok.any():
        raise DataError("no adaptation row has both a measured time and a prediction")
    coef = {}
    for code in np.unique(cell[ok]):
        sel = ok & (cell == code)
        lp, ly = np.log(p[sel]), np.log(y[sel])
        m = float(lp.mean())
        x = lp - m
        use_tilt = _tilt_helps(x, ly, prior) if tilt is None else tilt
        a, b = _adapter_cell(x, ly, prior if use_tilt else None)
        coef[int(code)] = (a, b, m, float(x.min()), float(x.max()))
    return coef


# --- training data -------------------------------------------------------------------
SOURCES = ("justus2018", "neusight")


def training_rows(data_dir=None, max_rows_per_file: int | None = 4000, seed: int = 0,
                  exclude_groups=(), exclude_sources=()) -> pd.DataFrame:
    """Justus + NeuSight canonical rows with device columns, subsampled per file (``exclude_sources``: leave a
    whole data source out, e.g. ``("neusight",)``)."""
    from traincast.fit.datasets import load_justus, load_neusight

    bad = [s for s in exclude_sources if s not in SOURCES]
    if bad:
        raise DataError(f"unknown data source(s) {', '.join(bad)}; known: {', '.join(SOURCES)}")
    parts = []
    if "justus2018" not in exclude_sources:
        parts.append(load_justus(data_dir, max_rows_per_file=max_rows_per_file, seed=seed))
    if "neusight" not in exclude_sources:
        parts.append(load_neusight(data_dir, max_rows_per_file=max_rows_per_file, seed=seed))
    if not parts:
        raise DataError("every data source was left out: nothing to fit")
    rows = pd.concat(parts, ignore_index=True)
    rows = rows[F.valid_mask(rows) & np.isfinite(rows["time_ms"]) & (rows["time_ms"] > 0)]
    rows = F.attach_devices(rows.reset_index(drop=True))
    rows["gpu_group"] = rows["gpu"].map(F.gpu_group)
    return exclude_gpu_groups(rows, exclude_groups)


def exclude_gpu_groups(rows: pd.DataFrame, groups=()) -> pd.DataFrame:
    """``rows`` without those of the GPU groups named (``gpu_group`` column); a name of no group in the rows is
    a DataError, so that a typo does not leave the GPU in the fit."""
    if not groups:
        return rows
    known = sorted(map(str, rows["gpu_group"].unique()))
    unknown = [g for g in groups if g not in known]
    if unknown:
        raise DataError(f"--exclude {', '.join(unknown)}: no such GPU group in the data; groups: {', '.join(known)}")
    return rows[~rows["gpu_group"].isin(groups)].reset_index(drop=True)


@dataclass(frozen=True)
class HeldOutResult:
    gpu: str
    dataset: str
    n_rows: int
    mape_pct: float
    rmse_ms: float
    analytical_mape_pct: float
    per_kind_mape_pct: dict
    choice: dict = field(default_factory=dict)  # cell -> candidate of the model fitted without this GPU
    # K -> MAPE % of each draw: K random rows of the held-out GPU adapt the model (GpuAdapter), the rest score it
    adapted_mape_pct: dict = field(default_factory=dict)


def analytical_ms(rows: pd.DataFrame) -> np.ndarray:
    """The analytical roofline (:mod:`traincast.predict.roofline`, catalog parameters per generation) on canonical
    rows, as the fp32 data ran them (no TF32)."""
    from traincast.predict.roofline import CompiledOps, RooflineParams

    flops, nbytes, _ = F.costs(rows)
    kinds = rows["kind"].to_numpy()
    wino = F.winograd_rows(rows)
    out = np.empty(len(rows))
    for gpu, idx in rows.groupby("gpu").indices.items():
        dev = F._device_by_name(str(gpu))
        cls = np.where(kinds[idx] == "softmax", "reduction", kinds[idx])
        c = CompiledOps.from_arrays(flops[idx], nbytes[idx], cls, dev, precision="fp32-strict", winograd=wino[idx])
        out[idx] = c.times(RooflineParams.for_device(dev)) * 1e3
    return out


def leave_one_gpu_out(rows: pd.DataFrame, dataset: str, groups=None, estimator: OpTimeRegressor | None = None,
                      log=print, adapt=(), draws: int = 5, seed: int = 0) -> list[HeldOutResult]:
    """For each GPU group of ``dataset`` rows (``justus2018``/``neusight``): fit on every row of
    the other GPU groups (both datasets), predict the held-out group's ``dataset`` rows.
    With ``adapt=(K, ...)``: also, ``draws`` times per K, adapt the fitted model to the held-out GPU
    with K of its rows drawn at random (:class:`GpuAdapter`) and score it on its other rows."""
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
        cell = GpuAdapter.cells(test)
        rng = np.random.default_rng(seed)
        adapted = {}
        for k in adapt:
            if not 0 < k < len(test):
                raise DataError(f"cannot adapt with {k} of the {len(test)} rows of {g}")
            scores = []
            for _ in range(draws):
                use = np.zeros(len(test), bool)
                use[rng.choice(len(test), size=k, replace=False)] = True
                pa = adapt_predictions(p, cell, adapter_coefs(p[use], cell[use], y[use]))
                scores.append(mape(pa[~use], y[~use]))
            adapted[int(k)] = scores
        r = HeldOutResult(g, dataset, len(test), mape(p, y), float(np.sqrt(np.mean((p - y) ** 2))), mape(a, y), per,
                          dict(m.choice_), adapted)
        results.append(r)
        if log:
            log(f"  held out {g:<12} n={len(test):6d}  learned MAPE {r.mape_pct:5.1f}%  RMSE {r.rmse_ms:8.3f} ms"
                f"  analytical MAPE {r.analytical_mape_pct:6.1f}%  ({time.perf_counter() - t0:.0f} s)"
                + "".join(f"  adapted K={k} {np.median(v):.1f}%" for k, v in adapted.items()))
            if m.cv_scores_:
                for line in m.summary():
                    log(f"      {line}")
    return results
