"""Feature augmentation (1/x, pairwise products, one-hot, per-category slopes) of job records."""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np
import pandas as pd


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

    def state(self) -> dict:
        """The fitted transformer as JSON (``from_state`` reads it back)."""
        return {"numeric": list(self.numeric), "categorical": list(self.categorical), "augment": self.augment,
                "positive": list(self.positive_), "categories": {k: list(v) for k, v in self.categories_.items()},
                "pairs": [list(p) for p in self.pairs_], "feature_names": list(self.feature_names_)}

    @classmethod
    def from_state(cls, d: dict) -> "JobFeatures":
        f = cls(d["numeric"], d["categorical"], augment=d["augment"])
        f.numeric_, f.categorical_ = tuple(d["numeric"]), tuple(d["categorical"])
        f.positive_ = tuple(d["positive"])
        f.categories_ = {k: tuple(v) for k, v in d["categories"].items()}
        f.pairs_ = [tuple(p) for p in d["pairs"]]
        f.feature_names_ = tuple(d["feature_names"])
        return f


# --------------------------------------------------------------------------- metrics
