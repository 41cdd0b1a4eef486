"""Request bodies of the API (pydantic): the CLI's options by their long names, with underscores."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from traincast.online.records import EVENT_KINDS

_STRICT = ConfigDict(extra="forbid")


def _zoo_name(v: str | None) -> str | None:
    """A model by zoo name or ``timm:NAME``: never a path, a spec file, or a package factory from a request (a
    ``timm:`` name only selects one of timm's own constructors; nothing the request names is imported)."""
    if v is None:
        return v
    from traincast.workload import zoo
    from traincast.workload.sources import TIMM_PREFIX

    if v.startswith(TIMM_PREFIX):
        import timm

        from traincast.errors import UnknownNameError
        from traincast.workload.sources import timm_names

        name = v[len(TIMM_PREFIX):]
        if not timm.is_model(name):
            raise UnknownNameError("timm model", name, timm_names())
        return v

    from traincast.workload import llms

    if llms.resolve(v):  # a named language model, or its hub id (meta-llama/Llama-3.1-70B): no file is read
        return v
    if any(ch in v for ch in "/\\:") or v.lower().endswith((".yaml", ".yml", ".json")) or v.startswith("."):
        raise ValueError("must be a model of the zoo (GET /api/v1/models) or timm:NAME; the server never reads files named in "
                         "a request: send a Hugging Face config.json as hf_config instead")
    zoo.get(v)  # UnknownNameError with did-you-mean; the validator makes it a ValueError
    return v


class ModelChoice(BaseModel):
    model_config = _STRICT
    model: str | None = Field(None, description="zoo name (GET /api/v1/models)", examples=["resnet50"])
    hf_config: dict | None = Field(None, description="the content of a Hugging Face config.json (with model_type)")

    @field_validator("model")
    @classmethod
    def _model(cls, v):
        from traincast.errors import UnknownNameError

        try:
            return _zoo_name(v)
        except UnknownNameError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("hf_config")
    @classmethod
    def _hf(cls, v):
        if v is not None and not isinstance(v.get("model_type"), str):
            raise ValueError("a Hugging Face config needs a string model_type, e.g. \"gpt2\"")
        return v

    @model_validator(mode="after")
    def _one(self):
        if (self.model is None) == (self.hf_config is None):
            raise ValueError("give model (a zoo name) or hf_config (a Hugging Face config), one of them")
        return self


Pos = Annotated[int, Field(gt=0)]
# workload/fusion.py's KERNEL_MODES (a test keeps the two the same; importing it here would load torch)
KernelMode = Literal["eager", "compiled", "compiled-blocks", "transformer-engine"]


class WallClockOptions(BaseModel):
    """The expected wall clock with failures, restarts and checkpoints (``--gpu-mtbf-hours``, ``--restart-minutes``,
    ``--checkpoint-every``, ``--checkpoint-gb-per-s``; predict/goodput.py): None takes the default."""

    gpu_mtbf_hours: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(
        None, description="GPU-hours between job-interrupting failures, per GPU (default: Llama 3's 50,677)")
    restart_minutes: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        None, description="from a failure to training again (default 10)")
    checkpoint_every: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(
        None, description="minutes of training between checkpoints (default: the interval that minimises the wall clock)")
    checkpoint_gb_per_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(
        None, description="the job's checkpoint write bandwidth, GB/s (default 0.122 per GPU)")


class ForecastRequest(ModelChoice, WallClockOptions):
    """The options of ``traincast predict``; the answer is what ``predict --json`` prints."""

    gpu: str | None = Field(None, examples=["A100-SXM4-80GB"])
    gpus: Pos = 1
    nodes: Pos | None = None
    batch_size: Annotated[int, Field(gt=0, lt=2**31)]
    per_gpu_batch: bool = False
    epochs: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    dataset_size: Pos | None = None
    tokens: Annotated[float, Field(ge=1, allow_inf_nan=False)] | None = Field(
        None, description="training tokens per epoch (models that read token sequences; traincast predict --tokens)")
    steps: Pos | None = Field(None, description="optimizer steps of the whole job (traincast predict --steps)")
    precision: str = "fp32"
    optimizer: str = "sgd"
    sync: str = "nccl"
    no_overlap: bool = False
    freeze: str | None = None
    instance: str | None = None
    seq_len: Pos | None = None
    network_gbit: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    predictor: Literal["analytical", "learned", "auto"] | None = Field(None, description="default: auto")
    adaptation: Literal["none", "auto"] = Field("none", description="learned predictor: none, or the saved "
                                                                    "adaptation of the GPU (auto); files are not read")
    # the parallel layout (traincast predict --tp ... ; docs/parallel.md)
    tp: Pos = 1
    pp: Pos = 1
    dp: Pos | None = None
    ep: Pos = 1
    zero: Annotated[int, Field(ge=0, le=3)] | None = None
    fsdp: Literal["full", "grad-op", "hybrid"] | None = None
    micro_batch: Pos | None = None
    schedule: str = Field("1f1b", examples=["1f1b", "gpipe", "interleaved:2"])
    recompute: Literal["none", "selective", "selective-op", "full"] = "none"
    sequence_parallel: bool = False
    offload_optimizer: bool = False
    best_layout: bool = Field(False, description="the fastest layout that fits, as parallelize finds it "
                                                 "(traincast predict --best-layout)")
    cp: Pos = 1
    cp_kind: Literal["ring", "all-to-all"] = "ring"
    # PyTorch's ring attention: how K/V go round (traincast predict --cp-rotate), and K/V repeated to the query
    # heads before SDPA (--kv-repeat)
    cp_rotate: Literal["allgather", "alltoall"] = "allgather"
    kv_repeat: bool = False
    tp_comm_overlap: bool = False
    fp8_all_gather: bool = False
    # how the kernels run (traincast predict --kernels / --memory-format; workload/fusion.py, workload/layout.py)
    kernels: KernelMode = "eager"
    memory_format: Literal["contiguous", "channels_last"] = "contiguous"
    # a step of this job timed on another GPU (traincast predict --measured-step-ms/--measured-on): the compute
    # is scaled by measured / forecast there
    measured_step_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    measured_on: str | None = Field(None, examples=["A100-SXM4-80GB"])


class ParallelizeRequest(ModelChoice):
    """The options of ``traincast parallelize``; the answer is what ``parallelize --json`` prints."""

    gpu: str | None = Field(None, examples=["H100-SXM5-80GB"])
    gpus: Annotated[int, Field(gt=0, le=65536)]
    nodes: Pos | None = None
    batch_size: Annotated[int, Field(gt=0, lt=2**31)]
    seq_len: Pos | None = None
    precision: str = "amp-bf16"
    optimizer: str = "adamw"
    instance: str | None = None
    network_gbit: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    shardings: Annotated[list[str], Field(min_length=1, max_length=16)] = ["none", "zero1", "zero3"]
    recomputes: Annotated[list[str], Field(min_length=1, max_length=4)] = ["none", "selective", "selective-op", "full"]
    micro_batches: Annotated[list[Pos], Field(min_length=1, max_length=16)] = [1, 2, 4, 8, 16]
    max_tp: Pos | None = None
    top: Annotated[int, Field(gt=0, le=100)] = 10
    kernels: KernelMode = "eager"


def _csv(v, cast):
    if isinstance(v, str):
        return [cast(x.strip()) for x in v.split(",") if x.strip()]
    return v


class PlanRequest(ModelChoice, WallClockOptions):
    """The options of ``traincast plan``; the answer is what ``plan --json`` prints."""

    epochs: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    dataset_size: Pos | None = None
    tokens: Annotated[float, Field(ge=1, allow_inf_nan=False)] | None = Field(
        None, description="training tokens per epoch (models that read token sequences; traincast plan --tokens)")
    steps: Pos | None = Field(None, description="optimizer steps of the whole job (traincast plan --steps)")
    batch_size: Annotated[int, Field(gt=0, lt=2**31)]
    per_gpu_batch: bool = False
    deadline: str | None = Field(None, examples=["24h"], description="e.g. 24h, 90m, 2d, 2026-12-04T17:00, "
                                  "2026-12-04 (the end of that day), friday (the end of the coming one)")
    budget: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    gpus: Annotated[list[Pos], Field(min_length=1, max_length=16)] = [1, 2, 4, 8, 16, 32, 64]
    gpu_types: Annotated[list[str], Field(min_length=1, max_length=64)] | None = None
    instances: Annotated[list[str], Field(min_length=1, max_length=128)] | None = None
    precision: str = "fp32"
    optimizer: str = "sgd"
    seq_len: Pos | None = None
    predictor: Literal["analytical", "learned", "auto"] | None = Field(None, description="default: auto")
    adaptation: Literal["none", "auto"] = "none"
    kernels: KernelMode = "eager"

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, v):
        try:
            return _csv(v, int)
        except ValueError:
            raise ValueError("must be a list of GPU counts or a comma-separated string such as \"1,2,4,8\"") from None

    @field_validator("gpu_types", "instances", mode="before")
    @classmethod
    def _names(cls, v):
        return _csv(v, str)

    @field_validator("deadline")
    @classmethod
    def _deadline(cls, v):
        if v is not None:
            from traincast.errors import TraincastError
            from traincast.plan.pareto import parse_deadline_s

            try:
                parse_deadline_s(v)
            except TraincastError as exc:
                raise ValueError(str(exc)) from None
        return v


class CompareRequest(ModelChoice):
    """One model on several GPUs: a forecast for each (``predict`` options apart from the hardware)."""

    gpu_types: Annotated[list[str], Field(min_length=1, max_length=32)]
    gpus: Pos = 1
    batch_size: Annotated[int, Field(gt=0, lt=2**31)]
    per_gpu_batch: bool = False
    epochs: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    dataset_size: Pos | None = None
    precision: str = "fp32"
    optimizer: str = "sgd"
    seq_len: Pos | None = None

    @field_validator("gpu_types", mode="before")
    @classmethod
    def _names(cls, v):
        return _csv(v, str)


def _finite_or_none(v):
    if v is None:
        return None
    return v if math.isfinite(v) else None  # a diverged loss (NaN) is kept as unknown, as the recorder does


class MetricRow(BaseModel):
    """One step: ``{"step": 120, "time": 1732500000.5, "loss": 0.71}`` (``time`` or ``time_s``: Unix seconds)."""

    model_config = _STRICT
    step: Annotated[int, Field(ge=0, lt=2**31)]
    time_s: float | None = Field(None, validation_alias=AliasChoices("time_s", "time"))
    loss: float | None = None
    metric: float | None = None
    epoch: float | None = None
    learning_rate: float | None = Field(None, validation_alias=AliasChoices("learning_rate", "lr"))

    @field_validator("time_s", "loss", "metric", "epoch", "learning_rate")
    @classmethod
    def _finite(cls, v):
        return _finite_or_none(v)


class EventIn(BaseModel):
    model_config = _STRICT
    kind: Literal[EVENT_KINDS]  # type: ignore[valid-type]
    step: Annotated[int, Field(ge=0, lt=2**31)]
    time_s: float | None = Field(None, validation_alias=AliasChoices("time_s", "time"))
    value: float | None = None

    @field_validator("time_s", "value")
    @classmethod
    def _finite(cls, v):
        return _finite_or_none(v)


class JobMeta(BaseModel):
    """A job's metadata (as ``track(...)`` takes it)."""

    model_config = _STRICT
    model: Annotated[str, Field(max_length=200)] | None = None
    hardware: Annotated[str, Field(max_length=200)] | None = None
    batch_size: Pos | None = None
    total_steps: Pos | None = None
    total_epochs: Pos | None = None
    steps_per_epoch: Pos | None = None
    price_usd_per_hour: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    source: Annotated[str, Field(max_length=200)] | None = None


class MetricBatch(BaseModel):
    """What the recorder posts: metadata, rows and events of one job, written in one transaction."""

    model_config = _STRICT
    meta: JobMeta | None = None
    rows: Annotated[list[MetricRow], Field(max_length=20_000)] = []
    events: Annotated[list[EventIn], Field(max_length=20_000)] = []
