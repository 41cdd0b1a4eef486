"""The learned per-op predictor: per-op times from a model fitted on real GPU kernel/layer timings.

Behind the one predictor interface (``predict(workload, device, precision) -> OpTimes``). Each traced op
is mapped onto canonical op rows (:func:`traincast.predict.opfeatures.op_rows`: matmul/linear/bmm, conv and
its backward, layer norm, softmax, elementwise, fused attention as its eager decomposition); the
:class:`~traincast.predict.opmodel.OpTimeModel` predicts their kernel times on the device from its catalog
specs, so the device need not be one the model saw. Ops it does not cover (batch norm, pooling,
embeddings, reductions, optimizer updates, copies, half-precision ops, fp32 ops the precision sends to
tensor cores) fall back to the analytical predictor; :meth:`LearnedPredictor.coverage` says how many.

The measured kernel latencies include the timing harness's launch and event cost (no op in the data is
shorter); inside a training step kernels queue back to back, so that floor is taken off each learned op
and the analytical per-op overhead put back.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from traincast.errors import DataError
from traincast.hardware.records import Device
from traincast.predict import opfeatures as F
from traincast.predict.adaptation import GpuAdaptation, adapt_predictions, adaptation_cells, file_sha256
from traincast.predict.analytical import AnalyticalPredictor
from traincast.predict.base import OpTimes, Predictor
from traincast.predict.opmodel import OpTimeModel, load_op_model
from traincast.predict.roofline import compute_unit, op_overheads_s
from traincast.workload.records import Workload

DEFAULT_MODEL_FILE = "learned_ops.tcm"


def default_model_path() -> Path:
    return Path(str(resources.files("traincast.predict").joinpath("data", DEFAULT_MODEL_FILE)))


FLOOR_KEYS = ("linear", "bmm", "conv", "ln", "softmax", "elementwise")  # NeuSight ops with a floor of their own


def harness_floor_keys(rows: pd.DataFrame) -> np.ndarray:
    """The kind of measured kernel whose harness floor applies to each canonical row: a NeuSight row's own
    op (``linear``, ``bmm``, ``conv``, ``ln``, ``softmax``, else ``elementwise``); a traced row by its kind
    (a matmul with one batch is a ``linear``, more is a ``bmm``)."""
    kind = rows["kind"].astype(str).to_numpy()
    b = pd.to_numeric(rows["b"], errors="coerce").fillna(1).to_numpy() if "b" in rows.columns else np.ones(len(rows))
    out = np.select([kind == "matmul", kind == "conv", kind == "norm", kind == "softmax"],
                    [np.where(b > 1, "bmm", "linear"), "conv", "ln", "softmax"], "elementwise").astype(object)
    if "op" in rows.columns:
        op = rows["op"].astype(str).str.lower().to_numpy(dtype=object)
        out = np.where(np.isin(op, FLOOR_KEYS[:-1]), op, out)
    return out


def covers_device(device: Device) -> bool:
    """Whether the learned data speaks for ``device``: NVIDIA GPUs (the data is NVIDIA fp32; other vendors and
    CPUs get the analytical predictor)."""
    return device.kind == "gpu" and device.vendor.lower() == "nvidia" and bool(device.sm_count)


@lru_cache(maxsize=4)
def _read_model(path: str, mtime_ns: int, size: int) -> tuple[OpTimeModel, str]:
    """The model file at ``path`` and its sha256, cached by path, modification time and size."""
    return load_op_model(path), file_sha256(path)


@dataclass(eq=False)
class LearnedPredictor(Predictor):
    """Learned per-op times where covered, analytical elsewhere.

    The learned times are harness latencies (the kernel data's timing adds a floor to every kernel); the
    harness floor of each kind of kernel (``harness_floor_ms``), less the analytical kernel floor, is
    subtracted from each learned kernel time (never below the analytical kernel floor).
    ``measurement_floor_ms`` sets one floor for every kind instead.

    On a GPU the fit never saw (its catalog specs are no training GPU's) and that no adaptation covers,
    each covered op takes the geometric mean of the learned and the analytical time (``blend_unseen``; the
    forecast's predictor reads ``learned+analytical``): there the learned model carries the training GPUs'
    average efficiency and the analytical one the datasheet's, and their errors differ (docs/learned.md,
    "Whole models").
    """

    needs_shapes: ClassVar[bool] = True

    model: OpTimeModel
    fallback: AnalyticalPredictor = field(default_factory=AnalyticalPredictor)
    measurement_floor_ms: float | None = None
    name: str = "learned"
    adaptation: GpuAdaptation | None = None  # applied on its GPU only; set by `with_adaptation`
    model_sha256: str | None = None  # of the file the model was loaded from
    blend_unseen: bool = True
    # on a GPU the fit never saw (and no adaptation covers): the analytical times instead (``--predictor auto``,
    # the choice of benchmarks/accuracy_report.py's protocol, docs/accuracy.md)
    analytical_unseen: bool = False
    _known: dict = field(default_factory=dict, repr=False, compare=False)  # device specs -> seen by the fit

    # --- loading ---------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, **kw) -> "LearnedPredictor":
        model = load_op_model(path)
        kw.setdefault("model_sha256", file_sha256(path))
        return cls(model=model, **kw)

    @classmethod
    def load_default(cls, **kw) -> "LearnedPredictor":
        """The model shipped in ``traincast/predict/data/`` (rebuilt by ``traincast fit layers``); read once per
        process and file version (the default predictor loads it for every forecast)."""
        path = default_model_path()
        st = path.stat()
        model, sha = _read_model(str(path), st.st_mtime_ns, st.st_size)
        kw.setdefault("model_sha256", sha)
        return cls(model=model, **kw)

    def with_adaptation(self, adaptation: GpuAdaptation) -> "LearnedPredictor":
        """This predictor with ``adaptation`` applied on its GPU.

        Refused (DataError) when the adaptation was fitted against another model file, or corrects no
        PyTorch kernel (TensorFlow layer rows only): it would change nothing or the wrong thing."""
        if adaptation.model_sha256 and self.model_sha256 and adaptation.model_sha256 != self.model_sha256:
            raise DataError(f"the adaptation to {adaptation.gpu} was fitted against another learned model "
                            f"(sha256 {adaptation.model_sha256[:12]}, this one {self.model_sha256[:12]}); "
                            "refit it with `traincast fit adapt`")
        if not adaptation.applies_to_torch:
            raise DataError(f"the adaptation to {adaptation.gpu} was fitted on TensorFlow layer rows only and "
                            "corrects no PyTorch kernel; fit one on NeuSight-schema kernels or `traincast bench "
                            "layers` samples")
        return replace(self, adaptation=adaptation)

    # --- what it knows and covers ------------------------------------------------------
    def knows(self, device: Device) -> bool:
        """Whether the fit saw this GPU: its catalog specs are those of a GPU in the training data."""
        key = tuple(sorted(F.device_columns(device).items()))
        if key not in self._known:  # a training GPU name the catalog no longer resolves counts as not this one
            self._known[key] = any(F.named_same_specs(g, device) for g in getattr(self.model, "gpus_", ()))
        return self._known[key]

    def covers(self, device: Device) -> bool:
        return covers_device(device)

    def needs_shapes_on(self, device: Device) -> bool:
        """Shapes are read only where the learned model times ops: not on a device outside the learned data or
        one it defers to the analytical predictor (``auto`` on a GPU outside its fit)."""
        return self.covers(device) and not self.defers(device)

    def blends(self, device: Device) -> bool:
        """Whether covered ops on ``device`` are the geometric mean of learned and analytical times."""
        return (self.blend_unseen and not self.analytical_unseen and self.covers(device) and not self._adapts(device)
                and not self.knows(device))

    def defers(self, device: Device) -> bool:
        """Whether ``device`` gets the analytical predictor's times (``analytical_unseen`` on a GPU outside the fit)."""
        return self.analytical_unseen and self.covers(device) and not self._adapts(device) and not self.knows(device)

    def _adapts(self, device: Device) -> bool:
        return self.adaptation is not None and self.adaptation.gpu == device.name

    def _map(self, workload: Workload, device: Device, precision: str):
        rows, owner, mult = [], [], []
        covered = np.zeros(len(workload.ops), dtype=bool)
        units: dict[tuple[str, str], str] = {}
        for i, op in enumerate(workload.ops):
            if op.fusion:  # a fused kernel's share (workload/fusion.py): its bytes, not its shapes, say what it moves
                continue
            mapped = F.op_rows(op)
            if mapped is None:
                continue
            key = (op.op_class, op.dtype)
            if key not in units:
                units[key] = compute_unit(op.op_class, op.dtype, device, precision)[1]
            if units[key] != "simt":
                continue  # tensor-core math (TF32, half precision): not in the fp32 data
            rs, ms = mapped
            covered[i] = True
            rows.extend(rs)
            owner.extend([i] * len(rs))
            mult.extend(ms)
        return rows, np.array(owner, dtype=int), np.array(mult, dtype=float), covered

    def coverage(self, workload: Workload, device: Device, precision: str = "fp32") -> dict:
        """How many ops the learned model times and which fall back to the analytical predictor."""
        _, _, _, covered = self._map(workload, device, precision)
        fb = Counter(op.aten for op, c in zip(workload.ops, covered) if not c)
        return {"ops": len(workload.ops), "learned": int(covered.sum()), "fallback": int((~covered).sum()),
                "fallback_by_aten": dict(fb.most_common())}

    def notes(self, workload: Workload, device: Device, precision: str = "fp32") -> list[str]:
        if not self.covers(device):
            return [f"{self.name} predictor: {device.name} is outside the learned data (NVIDIA GPUs); "
                    "every op timed by the analytical predictor"]
        if self.defers(device):
            return [f"{device.name} is outside the learned model's fit: every op timed by the analytical predictor "
                    "(on such GPUs it was the more accurate, docs/accuracy.md)"]
        cov = self.coverage(workload, device, precision)
        out = [f"{self.name} predictor: {cov['learned']} of {cov['ops']} ops learned, {cov['fallback']} analytical"]
        if self._adapts(device):
            a = self.adaptation
            out.append(f"learned predictor adapted to {a.gpu} with {a.rows} measured rows ({a.timing} timings, "
                       f"cross-validated MAPE {'n/a' if a.cv_mape_pct is None else f'{a.cv_mape_pct:.1f}%'}; "
                       f"{a.source})")
        elif self.blends(device):
            out.append(f"{device.name} is outside the learned model's fit: each learned op is the geometric mean "
                       "of the learned and analytical times")
        return out

    # --- the timing harness of the training data ---------------------------------------
    def harness_floor_ms(self, rows: pd.DataFrame, device: Device) -> np.ndarray:
        """Per canonical row, the latency the kernel data's timing harness adds to a kernel: the smallest
        measured latency of that kind of kernel (``harness_floor_keys``) on ``device`` where the data has
        it, else the median over the data's GPUs. ``measurement_floor_ms`` overrides it; models fitted
        before the per-kind floors existed use their single smallest latency."""
        if self.measurement_floor_ms is not None:
            return np.full(len(rows), float(self.measurement_floor_ms))
        floors = getattr(self.model, "harness_floor_ms_", None)
        if not floors:
            return np.full(len(rows), float(getattr(self.model, "min_time_ms_", 0.0)))
        keys = harness_floor_keys(rows)
        out = np.empty(len(rows))
        for key in set(keys):
            f = floors.get(key) or floors.get("elementwise") or {}
            out[keys == key] = f.get(device.name, f.get("default", getattr(self.model, "min_time_ms_", 0.0)))
        return out

    # --- the interface ---------------------------------------------------------------
    def predict(self, workload: Workload, device: Device, precision: str = "fp32") -> OpTimes:
        base = self.fallback.predict(workload, device, precision)
        if self.defers(device):
            return base
        if not self.covers(device) or not workload.ops:
            return OpTimes(self.name + "(analytical)", base.times_s, base.bound, base.step_overhead_s)
        rows, owner, mult, covered = self._map(workload, device, precision)
        times = list(base.times_s)
        adapted, blend = self._adapts(device), self.blends(device)
        if rows:
            p = self.fallback.params(device)
            df = F.attach_devices(pd.DataFrame(rows), device)
            floor_ms = np.maximum(self.harness_floor_ms(df, device) - p.kernel_floor_us * 1e-3, 0.0)
            pred_ms = self.model.predict(df)
            in_step = adapted and self.adaptation.timing == "in-step"
            if adapted:
                pred_ms = adapt_predictions(pred_ms, adaptation_cells(df), self.adaptation.coef)
            # in-step adapted times are per-call times inside a stream of ops: no harness floor to take off
            kernel_ms = pred_ms if in_step else np.maximum(pred_ms - floor_ms, p.kernel_floor_us * 1e-3)
            per_op = np.zeros(len(workload.ops))
            np.add.at(per_op, owner, np.nan_to_num(kernel_ms, nan=0.0) * mult)
            bad = np.zeros(len(workload.ops), dtype=bool)
            np.logical_or.at(bad, owner, ~np.isfinite(pred_ms))
            over_s = np.zeros(len(workload.ops)) if in_step else op_overheads_s(workload.ops, p)
            for i in np.flatnonzero(covered & ~bad):
                t = per_op[i] * 1e-3 + over_s[i]
                times[i] = float(np.sqrt(t * base.times_s[i])) if blend and base.times_s[i] > 0 else t
        suffix = "+adapted" if adapted else "+analytical" if blend else ""
        return OpTimes(self.name + suffix, tuple(times), base.bound, base.step_overhead_s)
