"""A learned op-time model's adaptation to one GPU, as saved and applied at prediction time.

``traincast fit adapt`` (:mod:`traincast.fit.adapt`) fits a :class:`~traincast.fit.learn.GpuAdapter` on rows
measured on a GPU and saves its coefficients as a :class:`GpuAdaptation` (JSON) under
``$TRAINCAST_HOME/adaptations/``. ``traincast predict --predictor learned --adaptation auto|FILE`` applies it
(never unasked: the forecast says when it does).

Two sources of rows, with different timing meanings:

``kernel``
    a CSV of PyTorch kernels in the NeuSight schema: harness latencies like the data the model was fitted
    on, so ``predict`` treats the adapted times as it does the model's own (the harness floor taken off, the
    per-op overhead put back).
``in-step``
    forward fp32 samples ``traincast bench layers --device cuda`` stored: one op called back to back, its
    time per call already holding what dispatching it costs. ``predict`` takes the adapted time as the op's
    time in a step (no floor taken off, no per-op overhead added).

The adapter corrects each cell of rows apart (:func:`adaptation_cells`); a traced PyTorch op is a forward
kernel row (cell 0).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from traincast.errors import ConfigError, DataError
from traincast.paths import adaptations_dir

TIMINGS = ("kernel", "in-step")
CELL_NAMES = {0: "torch forward", 1: "torch train step", 2: "tf forward", 3: "tf train step"}
TORCH_CELL = 0  # what a traced PyTorch op maps to (features.op_rows: framework_tf 0, train_step 0)


def _slug(gpu: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "gpu"


def adaptation_path(gpu: str) -> Path:
    return adaptations_dir() / f"{_slug(gpu)}.json"


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class GpuAdaptation:
    """A fitted :class:`~traincast.fit.learn.GpuAdapter` for one GPU, as saved and applied."""

    gpu: str  # catalog device name
    coef: dict  # cell -> (a, b, m, lo, hi), GpuAdapter.coef_
    rows: int  # measured rows it was fitted on
    timing: str  # one of TIMINGS
    source: str  # the CSV or database the rows came from
    model_sha256: str | None  # of the learned model file the base predictions came from
    base_mape_pct: float  # the base model on the rows
    fit_mape_pct: float  # adapted, on the same rows
    cv_mape_pct: float | None  # adapted, each row predicted by an adaptation fitted without it (5-fold)
    rows_per_cell: dict = field(default_factory=dict)
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S"))

    def __post_init__(self):
        if self.timing not in TIMINGS:
            raise DataError(f"adaptation timing must be one of {', '.join(TIMINGS)}, got {self.timing!r}")
        self.coef = {int(k): tuple(float(x) for x in v) for k, v in self.coef.items()}
        self.rows_per_cell = {int(k): int(v) for k, v in self.rows_per_cell.items()}

    @property
    def applies_to_torch(self) -> bool:
        return TORCH_CELL in self.coef

    def cell_summary(self) -> list[tuple[str, int, float, float]]:
        """(cell name, rows, factor at the rows' mean prediction, slope) per fitted cell."""
        return [(CELL_NAMES.get(c, str(c)), self.rows_per_cell.get(c, 0), float(np.exp(a - m)), b)
                for c, (a, b, m, lo, hi) in sorted(self.coef.items())]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["coef"] = {str(k): list(v) for k, v in self.coef.items()}
        d["rows_per_cell"] = {str(k): v for k, v in self.rows_per_cell.items()}
        return d

    def save(self, path: str | Path | None = None) -> Path:
        path = Path(path) if path else adaptation_path(self.gpu)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.to_dict(), indent=1))
        except OSError as exc:
            raise ConfigError(f"cannot write the adaptation to {str(path)!r}: {exc.strerror or exc}") from None
        return path

    @classmethod
    def load(cls, path: str | Path) -> "GpuAdaptation":
        path = Path(path)
        try:
            d = json.loads(path.read_text())
        except FileNotFoundError:
            raise DataError(f"no adaptation file {str(path)!r}; make one with `traincast fit adapt`") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DataError(f"{str(path)!r} is not an adaptation file ({exc})") from None
        try:
            return cls(**d)
        except (TypeError, ValueError, AttributeError) as exc:
            raise DataError(f"{str(path)!r} is not an adaptation file ({exc})") from None


def find_adaptation(gpu: str) -> GpuAdaptation | None:
    """The saved adaptation of catalog GPU ``gpu``, or None."""
    p = adaptation_path(gpu)
    return GpuAdaptation.load(p) if p.exists() else None


def list_adaptations() -> list[tuple[Path, GpuAdaptation]]:
    d = adaptations_dir()
    return [(p, GpuAdaptation.load(p)) for p in sorted(d.glob("*.json"))] if d.is_dir() else []


def adaptation_cells(rows: pd.DataFrame) -> np.ndarray:
    """Each canonical row's adaptation cell: 2 * framework_tf + (a training step rather than a forward pass)."""
    def flag(col):
        if col not in rows.columns:
            return np.zeros(len(rows), dtype=int)
        return (pd.to_numeric(rows[col], errors="coerce").fillna(0).to_numpy() > 0.5).astype(int)

    return 2 * flag("framework_tf") + flag("train_step")


def adapt_predictions(pred, cell, coef: dict) -> np.ndarray:
    """Base predictions corrected by :func:`adapter_coefs`' coefficients (rows of other cells unchanged)."""
    p, cell = np.asarray(pred, float), np.asarray(cell)
    out = p.copy()
    for code, (a, b, m, lo, hi) in coef.items():
        sel = (cell == code) & np.isfinite(p) & (p > 0)
        x = np.log(p[sel]) - m
        xc = np.clip(x, lo, hi)  # the tilt holds inside the range the rows covered; beyond it, the scale only
        out[sel] = np.exp(a + b * xc + (x - xc))
    return out


