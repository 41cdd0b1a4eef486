"""The forecast a user's options ask for: the one library call behind ``traincast predict`` and the service.

:func:`forecast_from_options` takes the options of ``traincast predict`` by their long names (``gpu``, ``gpus``,
``batch_size``, ``predictor``, ``adaptation``, ``profile``...), resolves the predictor and the hardware they
name, and returns :func:`~traincast.predict.compose.forecast`'s Forecast. The CLI and ``traincast serve`` both
call it, so the two give one answer.
"""

from __future__ import annotations

from traincast.errors import ConfigError
from traincast.hardware.catalog import Catalog, get_catalog
from traincast.predict.compose import Forecast, WorkloadFamily, forecast
from traincast.predict.registry import make_predictor


def forecast_from_options(model, *, gpu: str | None = None, gpus: int = 1, nodes: int | None = None, batch_size: int,
                          per_gpu_batch: bool = False, epochs: float = 1.0, dataset_size: int | None = None,
                          precision: str = "fp32", optimizer: str = "sgd", sync: str = "ring", no_overlap: bool = False,
                          freeze: str | None = None, instance: str | None = None, seq_len: int | None = None,
                          network_gbit: float | None = None, device: str | None = None, profile: str | None = None,
                          predictor: str = "analytical", adaptation: str = "none", catalog: Catalog | None = None,
                          family: WorkloadFamily | None = None) -> Forecast:
    """``traincast predict``'s forecast for these options (see ``traincast predict --help``).

    ``device='local'`` or ``profile=NAME|FILE``: the calibrated device profile instead of a catalog GPU (they
    exclude ``gpu``, ``instance`` and another predictor). ``family``: reuse the traces of an earlier call."""
    cat = catalog or get_catalog()
    pred = None
    if predictor != "analytical" or adaptation != "none":
        dev = cat.instance(instance).device if instance else cat.device(gpu) if gpu else None
        pred = make_predictor(predictor, dev, adaptation)
    if device is not None or profile is not None:
        from traincast.predict.profile import find_profile

        if device not in (None, "local"):
            raise ConfigError(f"--device takes 'local' (this machine, calibrated), got {device!r}; "
                              "for catalog hardware use --gpu")
        if gpu is not None or instance is not None or pred is not None:
            raise ConfigError("--device/--profile exclude --gpu, --instance and --predictor")
        prof = find_profile(profile or "local")
        gpu, pred = prof.device_record(), prof.predictor()
    return forecast(model, gpu=gpu, gpus=gpus, predictor=pred, nodes=nodes, batch_size=batch_size,
                    per_gpu_batch=per_gpu_batch, epochs=epochs, dataset_size=dataset_size, precision=precision,
                    optimizer=optimizer, instance=instance, seq_len=seq_len, sync=sync, overlap=not no_overlap,
                    freeze=freeze, network_gbit_per_s=network_gbit, catalog=cat, family=family)
