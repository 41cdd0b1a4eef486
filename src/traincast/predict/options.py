"""The forecast a user's options ask for: the one library call behind ``traincast predict`` and the service.

:func:`forecast_from_options` takes the options of ``traincast predict`` by their long names (``gpu``, ``gpus``,
``batch_size``, ``predictor``, ``adaptation``, ``profile``...), resolves the predictor and the hardware they
name, and returns :func:`~traincast.predict.compose.forecast`'s Forecast. The CLI and ``traincast serve`` both
call it, so the two give one answer.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import replace

from traincast.errors import ConfigError, TraincastError
from traincast.hardware.catalog import Catalog, get_catalog
from traincast.predict.compose import Forecast, WorkloadFamily, forecast, scale_by_measurement
from traincast.predict.registry import make_predictor


def strategy_from_options(gpus: int, nodes: int | None = None, instance: str | None = None,
                          catalog: Catalog | None = None, *, tp: int = 1, pp: int = 1, dp: int | None = None, ep: int = 1,
                          zero: int | None = None, fsdp: str | None = None, micro_batch: int | None = None,
                          schedule: str = "1f1b", recompute: str = "none", sequence_parallel: bool = False,
                          offload_optimizer: bool = False, cp: int = 1, cp_kind: str = "ring",
                          fp8_all_gather: bool = False, tp_comm_overlap: bool = False, cp_rotate: str = "allgather",
                          kv_repeat: bool = False):
    """The parallel layout the options ask for (None for plain data parallelism), and warnings."""
    from traincast.predict.parallel import resolve

    trivial = (tp == 1 and pp == 1 and dp in (None, gpus) and ep == 1 and zero in (None, 0) and fsdp is None
               and micro_batch is None and str(schedule).lower() == "1f1b" and str(recompute).lower() == "none"
               and not sequence_parallel and not offload_optimizer and cp == 1 and not fp8_all_gather
               and not tp_comm_overlap)
    if trivial:
        return None, []
    gpn = None
    if nodes:
        gpn = gpus // nodes if gpus % nodes == 0 else None
    elif instance:
        gpn = (catalog or get_catalog()).instance(instance).gpus
    return resolve(gpus, gpus_per_node=gpn, tp=tp, pp=pp, dp=dp, ep=ep, zero=zero, fsdp=fsdp, micro_batch=micro_batch,
                   schedule=schedule, recompute=recompute, sequence_parallel=sequence_parallel,
                   offload_optimizer=offload_optimizer, cp=cp, cp_kind=cp_kind, fp8_all_gather=fp8_all_gather,
                   tp_comm_overlap=tp_comm_overlap, cp_rotate=cp_rotate, kv_repeat=kv_repeat)


def forecast_from_options(model, *, gpu: str | None = None, gpus: int = 1, nodes: int | None = None, batch_size: int,
                          per_gpu_batch: bool = False, epochs: float = 1.0, dataset_size: int | None = None,
                          precision: str = "fp32", optimizer: str = "sgd", sync: str = "nccl", no_overlap: bool = False,
                          freeze: str | None = None, instance: str | None = None, seq_len: int | None = None,
                          network_gbit: float | None = None, device: str | None = None, profile: str | None = None,
                          predictor: str | None = None, adaptation: str = "none", catalog: Catalog | None = None,
                          family: WorkloadFamily | None = None, loader_workers: int | None = None, inputs=None,
                          fp8_attention: bool = False, kernels: str = "eager", memory_format: str = "contiguous",
                          task: str | None = None,
                          image_size: int | None = None, audio_seconds: float | None = None,
                          num_frames: int | None = None, measured_step_ms: float | None = None,
                          measured_on: str | None = None, steps: int | None = None,
                          tokens: str | float | None = None, best_layout: bool = False,
                          gpu_mtbf_hours: float | None = None, restart_minutes: float | None = None,
                          checkpoint_every: float | None = None, checkpoint_gb_per_s: float | None = None,
                          sdpa: str = "auto", **layout) -> Forecast:
    """``traincast predict``'s forecast for these options (see ``traincast predict --help``).

    ``device='local'`` or ``profile=NAME|FILE``: the calibrated device profile instead of a catalog GPU (they
    exclude ``gpu``, ``instance`` and another predictor; a ``calibrate --host-only`` profile takes ``gpu`` or
    ``instance``: its host's issue costs with that GPU). ``family``: reuse the traces of an earlier call.
    ``loader_workers``: data-loader worker processes per GPU (the image input pipeline, predict/inputs.py).
    ``kernels``: ``eager``, ``compiled`` (element-wise chains fused, as ``torch.compile`` runs them) or
    ``transformer-engine`` (the same, and cuDNN's fused attention; workload/fusion.py). ``memory_format``: ``contiguous`` or ``channels_last`` (workload/layout.py).
    ``layout``: the parallel options (``tp``, ``pp``, ``dp``, ``ep``, ``zero``, ``fsdp``, ``micro_batch``,
    ``schedule``, ``recompute``, ``sequence_parallel``, ``offload_optimizer``: :func:`strategy_from_options`).
    ``task``, ``image_size``, ``audio_seconds``, ``num_frames``: the head and inputs of a Hugging Face model
    (:func:`traincast.workload.hf.hf_options`); their notes join the forecast's.
    ``measured_step_ms`` on ``measured_on``: one training step of the same job (its per-GPU batch, one GPU) timed
    on another GPU; the forecast's compute is scaled by measured / forecast there (:func:`scale_by_measurement`).
    ``steps``: the job's optimizer steps in all; ``tokens``: training tokens per epoch, a number or text such as
    ``15T``, ``300B`` (:func:`parse_count`). ``best_layout``: the fastest layout that fits, found by the search
    ``traincast parallelize`` runs, instead of the ``layout`` options. ``gpu_mtbf_hours``, ``restart_minutes``,
    ``checkpoint_every`` (minutes of training) and ``checkpoint_gb_per_s`` (the job's checkpoint write bandwidth):
    the expected wall clock with failures and checkpoints (:mod:`traincast.predict.goodput`; defaults there)."""
    from traincast.predict.goodput import Reliability, with_wall_clock

    rel = Reliability.from_options(gpu_mtbf_hours, restart_minutes, checkpoint_every, checkpoint_gb_per_s)
    cat = catalog or get_catalog()
    if isinstance(tokens, str):
        tokens = parse_count(tokens, "--tokens")
    pred = None  # None: the default predictor (``auto``)
    host_note = None
    if predictor is not None or adaptation != "none":
        dev = cat.instance(instance).device if instance else cat.device(gpu) if gpu else None
        pred = make_predictor(predictor or "auto", dev, adaptation)
    if device is not None or profile is not None:
        from traincast.predict.profile import find_profile

        if device not in (None, "local"):
            raise ConfigError(f"--device takes 'local' (this machine, calibrated), got {device!r}; "
                              "for catalog hardware use --gpu")
        if pred is not None:
            raise ConfigError("--device/--profile exclude --predictor (a profile times with its own parameters; "
                              "a `calibrate --host-only` profile with the default predictor)")
        prof = find_profile(profile or "local")
        if gpu is None and instance is None:
            gpu, pred = prof.device_record(), prof.predictor()
        else:  # a host-only profile: the host measured, with the catalog GPU asked for
            from traincast.predict.registry import default_predictor

            pred, host_note = prof.host_predictor(default_predictor()), prof.host_note()
    strategy, warnings = strategy_from_options(gpus, nodes, instance, cat, **layout)
    if best_layout:
        if strategy is not None:
            raise ConfigError("--best-layout searches the layout itself; give it or the layout's options (--tp, "
                              "--pp, --zero, --micro-batch, ...), not both")
        if measured_step_ms is not None:
            raise ConfigError("--best-layout and --measured-step-ms: scale a layout you name, not a searched one")
        family = family or WorkloadFamily(model, optimizer=optimizer, precision=precision, seq_len=seq_len,
                                          freeze=freeze, inputs=inputs, fp8_attention=fp8_attention, kernels=kernels,
                                          memory_format=memory_format, sdpa=sdpa)
        with hf_inputs(task, image_size, audio_seconds, num_frames) as search_notes:
            strategy, found = _search_layout(model, family, cat, gpu=gpu, gpus=gpus, nodes=nodes, instance=instance,
                                             network_gbit=network_gbit, predictor=pred, precision=precision,
                                             global_batch=batch_size * gpus if per_gpu_batch else batch_size)
        if per_gpu_batch:
            batch_size, per_gpu_batch = batch_size * gpus, False
        warnings = list(warnings) + [found] + list(dict.fromkeys(search_notes))
    source = _measured_source(measured_step_ms, measured_on, cat, strategy, device or profile)
    with hf_inputs(task, image_size, audio_seconds, num_frames) as hf_notes:
        if source is not None and family is None:  # one family: the measured GPU's forecast reuses the traces
            family = WorkloadFamily(model, optimizer=optimizer, precision=precision, seq_len=seq_len, freeze=freeze,
                                    inputs=inputs, fp8_attention=fp8_attention, kernels=kernels,
                                    memory_format=memory_format, sdpa=sdpa)
        f = forecast(model, gpu=gpu, gpus=gpus, predictor=pred, nodes=nodes, batch_size=batch_size,
                     per_gpu_batch=per_gpu_batch, epochs=epochs, dataset_size=dataset_size, precision=precision,
                     optimizer=optimizer, instance=instance, seq_len=seq_len, sync=sync, overlap=not no_overlap,
                     freeze=freeze, network_gbit_per_s=network_gbit, catalog=cat, family=family, strategy=strategy,
                     fp8_attention=fp8_attention, loader_workers=loader_workers, inputs=inputs, kernels=kernels,
                     memory_format=memory_format, steps=steps, tokens=tokens, sdpa=sdpa)
        if source is not None:  # the same traces, one GPU of the measured kind, the same per-GPU batch
            src = forecast(model, gpu=source, gpus=1, predictor=pred, batch_size=f.per_gpu_batch, precision=precision,
                           optimizer=optimizer, seq_len=seq_len, freeze=freeze, catalog=cat, family=family,
                           fp8_attention=fp8_attention, inputs=inputs, kernels=kernels, memory_format=memory_format,
                           sdpa=sdpa)
            f = scale_by_measurement(f, src, measured_step_ms / 1e3)
    warnings = list(warnings) + list(dict.fromkeys(hf_notes)) + ([host_note] if host_note else [])
    if _device_kind(gpu, f.device, cat) != "cpu":  # GPU failures and checkpoints: not a CPU's
        f = with_wall_clock(f, rel)
    return replace(f, notes=tuple(warnings) + f.notes) if warnings else f


def _device_kind(gpu, name: str, cat: Catalog) -> str:
    """``gpu`` (a device record or a name) or the forecast's device ``name``: ``gpu`` or ``cpu``."""
    kind = getattr(gpu, "kind", None)
    if kind is None:
        try:
            kind = cat.device(name).kind
        except TraincastError:
            kind = "gpu"
    return kind


def _search_layout(model, family, cat, *, gpu, gpus, nodes, instance, network_gbit, predictor, precision,
                   global_batch):
    """The fastest layout that fits (``traincast parallelize``'s search), and a note saying how it was found."""
    from traincast.predict.parallel.search import parallelize

    res = parallelize(model, gpu=gpu, gpus=gpus, nodes=nodes, batch_size=global_batch, precision=precision,
                      instance=instance, network_gbit_per_s=network_gbit, predictor=predictor, catalog=cat,
                      family=family, top=1)
    if res.best is None:
        need = res.best_any.peak_memory_bytes / 2**30 if res.best_any is not None else float("nan")
        raise ConfigError(f"--best-layout: none of the {res.considered} layouts of {gpus} GPUs fits in "
                          f"{res.device}'s memory (the fastest needs {need:.1f} GiB per GPU); more GPUs, a GPU "
                          "with more memory or a smaller batch")
    cfg = res.best.config
    return cfg, (f"layout {cfg.label()}: the fastest that fits of {res.considered} searched ({res.out_of_memory} do "
                 "not fit), as `traincast parallelize` finds it")


_SCALE = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_count(text: str, what: str) -> float:
    """A count written as ``15T``, ``300B``, ``2.5e12``, ``1,000,000`` or ``500M`` (K, M, B or G, T: thousands to
    trillions, any case), checked positive and finite; else a one-line error naming ``what``."""
    t = str(text).strip().replace(",", "").replace("_", "")
    scale = _SCALE.get(t[-1:].lower()) if t and t[-1:].isalpha() else 1
    num = t[:-1] if t and t[-1:].isalpha() else t
    try:
        if scale is None:
            raise ValueError
        value = float(num) * scale
    except ValueError:
        raise ConfigError(f"{what} must be a count such as 15T, 300B, 2.5e12 or 1000000, got {text!r}") from None
    if math.isinf(value) and value > 0:
        raise ConfigError(f"{what} is too large to be a count: {text!r}")
    if not math.isfinite(value) or value < 1:
        raise ConfigError(f"{what} must be a positive count, got {text!r}")
    return value


def _measured_source(measured_step_ms, measured_on, cat: Catalog, strategy, profile) -> str | None:
    """The catalog name of the GPU a measured step was timed on (checked), or None without one."""
    if measured_step_ms is None and measured_on is None:
        return None
    if measured_step_ms is None or measured_on is None:
        raise ConfigError("--measured-step-ms and --measured-on go together: the step's time in milliseconds and "
                          "the GPU it was measured on")
    if isinstance(measured_step_ms, bool) or not isinstance(measured_step_ms, (int, float)) \
            or not math.isfinite(measured_step_ms) or measured_step_ms <= 0:
        raise ConfigError(f"--measured-step-ms must be a positive number of milliseconds, got {measured_step_ms!r}")
    if profile is not None:
        raise ConfigError("--measured-step-ms scales a catalog GPU's forecast; a device profile is a measurement "
                          "already (drop --device/--profile, or the measured step)")
    if strategy is not None and not strategy.is_plain_data_parallel:
        raise ConfigError("--measured-step-ms scales data-parallel forecasts (one replica per GPU); a step of a "
                          "sharded or model-parallel layout differs by more than its GPU")
    return cat.device(measured_on).name


@contextmanager
def hf_inputs(task=None, image_size=None, audio_seconds=None, num_frames=None):
    """While active, Hugging Face models are built with these input options; yields the notes they add."""
    from traincast.workload.hf import hf_options

    with hf_options(task, image_size, audio_seconds, num_frames) as opts:
        yield opts.notes
