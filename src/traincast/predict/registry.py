"""The predictors by name: ``analytical``, ``learned``, ``auto`` (a :class:`~traincast.registry.Registry`).

Each entry is a factory ``(device, adaptation) -> Predictor``; :func:`make_predictor` wraps what it makes in
:class:`~traincast.predict.rnn.CudnnRecurrent`, so every predictor times recurrent layers on GPUs as cuDNN
runs them.

``adaptation`` (learned predictors only): ``none`` (the default: one command gives one answer on every
machine), ``auto`` (the adaptation ``traincast fit adapt`` saved for the device, if any; the forecast's
notes name it) or an adaptation file, which must be of the device.
"""

from __future__ import annotations

from traincast.errors import ConfigError, DataError
from traincast.hardware.records import Device
from traincast.predict.analytical import AnalyticalPredictor
from traincast.predict.base import Predictor
from traincast.predict.rnn import with_cudnn_recurrent
from traincast.registry import Registry

PREDICTORS: Registry = Registry("predictor")
ADAPTATION_CHOICES = ("none", "auto")  # or a file


@PREDICTORS.register("analytical", help="roofline per op, efficiencies per GPU generation from the catalog")
def _analytical(device: Device | None = None, adaptation: str | None = None) -> Predictor:
    if adaptation not in (None, "none"):
        raise ConfigError("--adaptation goes with --predictor learned or auto")
    return AnalyticalPredictor()


def _learned_for(device: Device | None, adaptation: str | None, **kw) -> Predictor:
    from traincast.predict.adaptation import GpuAdaptation, find_adaptation
    from traincast.predict.learned import LearnedPredictor

    learned = LearnedPredictor.load_default(**kw)
    if adaptation in (None, "none") or device is None:
        return learned
    if adaptation == "auto":
        a = find_adaptation(device.name)
        if a is None:
            return learned
        try:
            return learned.with_adaptation(a)
        except DataError as exc:
            raise DataError(f"{exc} (or leave it out with --adaptation none)") from None
    a = GpuAdaptation.load(adaptation)
    if a.gpu != device.name:
        raise ConfigError(f"the adaptation {adaptation!r} is for {a.gpu}, not {device.name}")
    return learned.with_adaptation(a)


@PREDICTORS.register("learned", help="per-op model learned on measured NVIDIA GPU kernels; analytical for the rest")
def _learned(device: Device | None = None, adaptation: str | None = None) -> Predictor:
    return _learned_for(device, adaptation)


@PREDICTORS.register("auto", help="the default: learned on the NVIDIA GPUs whose kernels the learned model was "
                                   "fitted on (or adapted to), analytical elsewhere (docs/accuracy.md)")
def _auto(device: Device | None = None, adaptation: str | None = None) -> Predictor:
    from traincast.predict.learned import covers_device

    if device is not None and not covers_device(device):
        return AnalyticalPredictor()
    return _learned_for(device, adaptation, analytical_unseen=True)


def make_predictor(name: str = "analytical", device: Device | None = None, adaptation: str | None = "none") -> Predictor:
    """The predictor ``name`` (see ``PREDICTORS``) for ``device``, timing recurrent layers as cuDNN does."""
    return with_cudnn_recurrent(PREDICTORS.get(name)(device, adaptation))


DEFAULT_PREDICTOR = "auto"  # chosen by benchmarks/accuracy_report.py's decision rule (docs/accuracy.md)


def default_predictor() -> Predictor:
    """What a forecast uses unless told otherwise: ``auto`` (learned on the GPUs the learned model was fitted on,
    the analytical roofline with the catalog's parameters elsewhere), the outcome of the accuracy protocol's
    decision rule (benchmarks/accuracy_report.py, docs/accuracy.md)."""
    return make_predictor(DEFAULT_PREDICTOR)
