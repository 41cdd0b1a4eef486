"""Feature selection for the linear families: forward selection by CV MAPE, Draper-Smith stepwise."""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np

from traincast.errors import ConfigError

def _folds(n: int, k: int, random_state: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.model_selection import KFold

    k = max(2, min(k, n))
    return list(KFold(k, shuffle=True, random_state=random_state).split(np.arange(n)))


def _cv_predict(make: Callable[[], object], X: np.ndarray, y: np.ndarray, folds) -> np.ndarray:
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
