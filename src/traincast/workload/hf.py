"""Hugging Face transformers models of every modality, built from a ``config.json`` on any device.

A config names its model type (and usually its head class in ``architectures``); the model is built from the
config alone, no weights downloaded. What goes in is read from the model's own ``forward`` signature and config:

- text: ``input_ids`` and ``attention_mask`` of ``batch x seq_len`` (``bbox`` boxes for layout models);
- images: ``pixel_values`` at the vision config's ``image_size`` and ``num_channels`` (``--image-size``);
  video: ``num_frames`` of them (``--num-frames``);
- audio: log-mel ``input_features`` (Whisper: its 30 s window) or raw ``input_values`` at the config's sampling
  rate (``--audio-seconds``);
- image and text together: the image placeholder tokens the model's projector fills (LLaVA, Gemma 3,
  Mistral 3, ...), or a contrastive pair with ``return_loss`` (CLIP, SigLIP);
- encoder-decoders: decoder inputs shifted from the labels;
- the labels each head needs (token ids, classes, spans, CTC transcripts), so its loss and backward are real.

``--task`` picks the head class where a model type has several (``TASKS``: one per transformers auto mapping,
e.g. ``causal-lm`` is ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``); the default is the config's ``architectures``,
else the first task of ``DEFAULT_TASK_ORDER`` the model type has (where the config cannot build that head, e.g. a
CTC head without a vocabulary, the next one it can, with a note saying so). Whatever goes wrong while a model is built or
traced becomes one ``TraincastError`` line naming the class and the part that stops it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.overrides
import torch.utils._python_dispatch
from torch import nn

from traincast.errors import ConfigError, SpecError, TraceError, TraincastError
from traincast.registry import Registry
from traincast.workload.steps import TrainingStep, supervised_step
from traincast.workload.selections import is_meta_device, unsized_selection


# --- options a user sets (``--task``, ``--image-size``, ...) -----------------------------------------------
@dataclass
class HFOptions:
    """Input options of Hugging Face models; ``None``: the config's own value. ``notes`` collects what a
    forecast should say about the inputs (assumed shapes, stand-in losses)."""

    task: str | None = None
    image_size: int | None = None
    audio_seconds: float | None = None
    num_frames: int | None = None
    notes: list[str] = field(default_factory=list)


_OPTIONS: contextvars.ContextVar[HFOptions | None] = contextvars.ContextVar("traincast_hf_options", default=None)


@contextlib.contextmanager
def hf_options(task=None, image_size=None, audio_seconds=None, num_frames=None):
    """While active, Hugging Face models are built with these input options (the CLI's ``--task``,
    ``--image-size``, ``--audio-seconds``, ``--num-frames``); yields the :class:`HFOptions`, whose ``notes``
    fill as models are built."""
    from traincast.errors import positive

    for name, v in (("--image-size", image_size), ("--audio-seconds", audio_seconds), ("--num-frames", num_frames)):
        if v is not None:
            positive(name, v)
    if task is not None:
        task = tasks().canonical(task)
    opts = HFOptions(task, image_size, audio_seconds, num_frames)
    token = _OPTIONS.set(opts)
    try:
        yield opts
    finally:
        _OPTIONS.reset(token)


def current_options() -> HFOptions:
    return _OPTIONS.get() or HFOptions()


# --- tasks: one per transformers auto mapping -------------------------------------------------------------
TASKS: Registry[str] = Registry("task")
_TASK_ALIASES = {
    "CAUSAL_LM": ("causal-lm", ("clm", "text-generation")),
    "MASKED_LM": ("masked-lm", ("mlm", "fill-mask")),
    "SEQ_TO_SEQ_CAUSAL_LM": ("seq2seq", ("seq2seq-lm", "translation", "summarization")),
    "SPEECH_SEQ_2_SEQ": ("speech-seq2seq", ("speech-recognition", "asr")),
    "ZERO_SHOT_IMAGE_CLASSIFICATION": ("contrastive", ("zero-shot-image-classification", "clip")),
    "CTC": ("ctc", ()),
    "IMAGE_TEXT_TO_TEXT": ("image-text-to-text", ("vlm", "vision-language")),
    "SEQUENCE_CLASSIFICATION": ("sequence-classification", ("text-classification",)),
    "MAPPING": ("base", ("backbone-features", "feature-extraction")),
}


def _mapping_names() -> dict[str, dict[str, str]]:
    from transformers.models.auto import modeling_auto as ma

    out = {}
    for var, mapping in vars(ma).items():
        if var == "MODEL_MAPPING_NAMES" or (var.startswith("MODEL_FOR_") and var.endswith("_MAPPING_NAMES")):
            key = "MAPPING" if var == "MODEL_MAPPING_NAMES" else var[len("MODEL_FOR_"):-len("_MAPPING_NAMES")]
            out[key] = {t: (c[0] if isinstance(c, (tuple, list)) else c) for t, c in mapping.items()}
    return out


def tasks() -> Registry[str]:
    """``TASKS``, filled from transformers' auto mappings on first use (transformers loads only when needed)."""
    if not TASKS.names():
        _register_tasks()
    return TASKS


def _register_tasks() -> None:
    maps = _mapping_names()
    for key, mapping in maps.items():
        name, aliases = _TASK_ALIASES.get(key, (key.lower().replace("_", "-"), ()))
        var = "MODEL_MAPPING_NAMES" if key == "MAPPING" else f"MODEL_FOR_{key}_MAPPING_NAMES"
        TASKS.add(name, key, help=f"transformers' {var} ({len(mapping)} model types)", aliases=aliases)


# the head a config without ``architectures`` gets: the first of these its model type has
DEFAULT_TASK_ORDER = ("image-text-to-text", "speech-seq2seq", "seq2seq", "causal-lm", "multimodal-lm", "masked-lm",
                      "ctc", "contrastive", "image-classification", "video-classification", "audio-classification",
                      "pretraining", "sequence-classification", "object-detection", "semantic-segmentation",
                      "depth-estimation", "time-series-prediction")


def task_classes(model_type: str) -> dict[str, str]:
    """Every task a model type has, with its head class name, in ``DEFAULT_TASK_ORDER`` first."""
    maps = _mapping_names()
    reg = tasks()
    found = {t: maps[reg.get(t)][model_type] for t in reg.names() if model_type in maps[reg.get(t)]}
    first = [t for t in DEFAULT_TASK_ORDER if t in found]
    rest = [t for t in found if t not in first and t != "base"]
    return {t: found[t] for t in first + rest + (["base"] if "base" in found else [])}


def _check_deps(cls) -> None:
    """A transformers class whose backend (timm, ...) is missing: a ConfigError naming the package."""
    try:
        from transformers.utils import import_utils
    except ImportError:
        return
    for backend in getattr(cls, "_backends", ()) or ():
        if isinstance(backend, str) and backend not in ("torch",):
            probe = getattr(import_utils, f"is_{backend.replace('-', '_')}_available", None)
            if probe is not None and not probe():
                raise ConfigError(f"{cls.__name__} needs the package {backend!r}: pip install {backend}")


def _did_you_mean(name: str, known) -> str:
    from traincast.errors import suggest

    hits = suggest(name, list(known))
    return f"; did you mean {', '.join(repr(h) for h in hits)}?" if hits else ""


def choose_class(cfg, model_type: str, archs, task: str | None, where: str):
    """The head class to build: ``task``'s class for the model type, else ``architectures[0]``, else the
    first task of ``DEFAULT_TASK_ORDER`` the model type has, else its base model."""
    import transformers as tf

    found = task_classes(model_type)
    if task is not None:
        task = tasks().canonical(task)
        if task not in found:
            raise ConfigError(f"--task {task} is not available for model_type {model_type!r}; it has: "
                              + (", ".join(found) or "none"))
        name = found[task]
    elif archs:
        name = archs[0]
        if not hasattr(tf, name):
            raise SpecError(f"{where}: architectures[0] {name!r} is not a model class of transformers "
                            f"{tf.__version__}" + _did_you_mean(name, list(found.values()) or
                                                                 [n for n in dir(tf) if n[:1].isupper()]))
    elif found:
        name = next(iter(found.values()))
    else:
        raise SpecError(f"{where}: model_type {model_type!r} has no model class in transformers {tf.__version__}; "
                        "name one in 'architectures'")
    try:
        cls = getattr(tf, name)
    except (ImportError, AttributeError, RuntimeError) as exc:
        raise ConfigError(f"{name} cannot be imported: {_first_line(exc)}; install what it names") from None
    if not hasattr(cls, "_from_config"):
        raise SpecError(f"{where}: {name!r} is not a model class of transformers {tf.__version__}")
    _check_deps(cls)
    return cls


# --- reading configs --------------------------------------------------------------------------------------
_SUB_TEXT = ("text_config", "decoder", "language_config", "llm_config", "text_encoder", "decoder_config",
             "qformer_config", "thinker_config", "talker_config")
_SUB_VISION = ("vision_config", "encoder", "vision_encoder", "image_config", "backbone_config", "visual",
               "vision_tower_config", "encoder_config", "vq_config")
_SUB_AUDIO = ("audio_config", "encoder", "speech_config", "audio_encoder", "encoder_config")


def _get(c, name, default=None):
    """``getattr`` that never raises (per-layer configs refuse some global reads; properties need fields)."""
    try:
        return getattr(c, name, default)
    except Exception:  # noqa: BLE001
        return default


def _subconfigs(cfg, prefer=()):
    """``cfg``'s nested configs, those named in ``prefer`` first (breadth first, cfg itself last)."""
    from transformers import PretrainedConfig

    seen, out = {id(cfg)}, []
    queue = [(cfg, False)]
    while queue:
        c, made = queue.pop(0)
        subs = []
        for k in list(prefer) + sorted(vars(c)):
            # a preferred name may be a property that builds a new config at each read (WavTokenizer's
            # ``encoder_config``): followed from stored configs only, so such chains end
            stored = k in vars(c)
            if made and not stored:
                continue
            v = _get(c, k)
            if isinstance(v, PretrainedConfig) and id(v) not in seen:
                seen.add(id(v))
                subs.append((v, made or not stored))
        out += [v for v, _ in subs]
        queue += subs
    return out


def find(cfg, *names, prefer=(), top_first=True):
    """The first non-None value of any of ``names`` in ``cfg`` (``top_first``) or its nested configs."""
    order = ([cfg] + _subconfigs(cfg, prefer)) if top_first else (_subconfigs(cfg, prefer) + [cfg])
    for c in order:
        for n in names:
            v = _get(c, n)
            if v is not None and not isinstance(v, bool):
                return v
    return None


def _hw(v) -> tuple[int, int] | None:
    if v is None:
        return None
    if isinstance(v, dict):
        h = v.get("height") or v.get("shortest_edge") or v.get("longest_edge")
        w = v.get("width") or h
        return (int(h), int(w)) if h else None
    if isinstance(v, (list, tuple)):
        v = [x for x in v if isinstance(x, (int, float))]
        return (int(v[-2]), int(v[-1])) if len(v) >= 2 else (int(v[0]), int(v[0])) if v else None
    if isinstance(v, (int, float)) and v > 0:
        return int(v), int(v)
    return None


def _position_limit(cfg) -> int | None:
    """The longest sequence a Hugging Face config's position embeddings take (None: no such limit)."""
    limit = (_get(cfg, "max_position_embeddings", None) or _get(cfg, "n_positions", None)
             or _get(cfg, "n_ctx", None) or _get(cfg, "max_target_positions", None))
    if limit is None:
        limit = find(cfg, "max_position_embeddings", "n_positions", prefer=_SUB_TEXT, top_first=False) \
            if any(_get(c, "vocab_size") is not None for c in _subconfigs(cfg, _SUB_TEXT)) and _get(cfg, "vocab_size") is None \
            else None
    return int(limit) if isinstance(limit, (int, float)) and limit > 0 else None


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:240]


def _empty_fields_used(exc: BaseException, cfg) -> list[str]:
    """Config fields left ``None`` (in ``cfg``, its sub-configs or a dict field such as ``rope_parameters``)
    whose names appear in the source of the last frames of ``exc``'s traceback: the ones the failing code read."""
    empty: list[str] = []
    for c in [cfg, *_subconfigs(cfg)]:
        for k, v in vars(c).items():
            if k.startswith("_"):
                continue
            if v is None:
                empty.append(k)
            elif isinstance(v, dict):
                empty += [f"{k}.{kk}" for kk, vv in v.items() if vv is None and isinstance(kk, str)]
    if not empty:
        return []
    import linecache
    import traceback

    frames = list(traceback.walk_tb(exc.__traceback__))
    # the model's own frames: not those of traincast's modes or torch's dispatch that the failing call went through
    skip = (str(Path(__file__).parent.parent), str(Path(torch.__file__).parent))
    frames = [f for f in frames if not f[0].f_code.co_filename.startswith(skip)] or frames
    if not frames:
        return []
    frame, line_no = frames[-1]
    line = linecache.getline(frame.f_code.co_filename, line_no)
    sources = []
    for f, _ in frames[-3:]:
        try:
            sources.append(inspect.getsource(f.f_code))
        except (OSError, TypeError):
            continue

    def used(text):
        return [f for f in empty if re.search(r"\b" + re.escape(f.split(".")[-1]) + r"\b", text)]

    def optional(f):  # fields that are None by design in most configs (no padding token, default dtype)
        return f.split(".")[-1] == "dtype" or f.endswith("_id")

    def via_attributes():  # ``self.top_k`` on the line, set as ``self.top_k = config.num_experts_per_tok``
        obj = frame.f_locals.get("self")
        try:
            init = inspect.getsource(type(obj).__init__) if obj is not None else ""
        except (OSError, TypeError):
            return []
        fields = {m.group(1) for a in set(re.findall(r"self\.(\w+)", line))
                  for m in [re.search(rf"self\.{a}\s*=\s*(?:\w+\.)*config\.(\w+)\b", init)] if m}
        # read through a config's alias (``attribute_map``: Dots1's num_local_experts for n_routed_experts)
        fields |= {getattr(type(c), "attribute_map", {}).get(f) for c in [cfg, *_subconfigs(cfg)] for f in fields}
        return [f for f in empty if f.split(".")[-1] in fields]

    on_line, in_code = used(line), used("\n".join(sources))
    for found in ([f for f in via_attributes() if not optional(f)], [f for f in on_line if not optional(f)],
                  [f for f in in_code if not optional(f)]):
        if found:
            return sorted(set(found))
    return []


def explain(exc: BaseException, cls_name: str, doing: str, cfg=None) -> str:
    """One line saying what stopped ``cls_name`` while ``doing`` (building / tracing), and what to do
    (``cfg``: the config, to name the fields left empty that the failing code read)."""
    msg = _first_line(exc)
    # (a None size among a factory's positional sizes: ``torch.empty(None, 2 * d, h)`` reads as too many arguments;
    # a None list made a tensor, ``torch.tensor(config.class_thresholds)`` on meta, then indexed: a 0-d tensor)
    if cfg is not None and ("NoneType" in msg or isinstance(exc, TypeError)
                            and re.match(r"(empty|zeros|ones|full|rand|randn)\(\) takes \d+ positional argument", msg)
                            or isinstance(exc, IndexError) and "tensor of dimension 0" in msg):
        fields = _empty_fields_used(exc, cfg)
        if fields:
            return (f"{cls_name} needs config fields this config leaves empty (None): {', '.join(fields)}; set them "
                    f"in the config.json (while {doing}: {msg})")
    if cfg is not None and "non-empty list" in msg:
        empty = sorted({k for c in [cfg, *_subconfigs(cfg)] for k, v in vars(c).items()
                        if not k.startswith("_") and isinstance(v, (list, tuple)) and not v})
        if empty:
            return (f"{cls_name} stops on an empty list while {doing} ({msg}); the config leaves these lists empty: "
                    f"{', '.join(empty)}; set them in the config.json")
    m = re.search(r"'(\w+Config)' object has no attribute '(\w+)'", msg)
    if m:
        return (f"{cls_name} needs the config field {m.group(2)!r}, which this {m.group(1)} lacks: "
                f"add \"{m.group(2)}\" to the config.json")
    m = re.search(r"forward\(\) missing \d+ required (?:positional|keyword-only) arguments?: (.+)", msg)
    if m:
        return (f"{cls_name}.forward needs the input(s) {m.group(1)}, which traincast cannot make for it; "
                "choose another head with --task or pass the model as an nn.Module with its inputs")
    if isinstance(exc, ImportError) or "requires the" in msg and "library" in msg:
        return f"{cls_name} needs a package that is not installed: {msg}"
    m = re.search(r"do not match, tokens: (\d+), features: (\d+)", msg)
    if m and m.group(1) == m.group(2):
        return (f"{cls_name}: its vision projector's output width does not fit the text model's hidden size (the "
                "config pairs towers of different widths, e.g. vision_config.out_hidden_size != "
                "text_config.hidden_size); make them equal in the config.json")
    if "nonzero" in msg:
        return unsized_selection(cls_name)
    if "Expected gradient function to be set" in msg:
        return (f"{cls_name} runs its layers inside a custom autograd Function (reversible layers that recompute "
                f"their activations in the backward), which traincast's module tracker cannot follow while {doing} "
                f"({msg})")
    if "data-dependent" in msg.lower() or "item()" in msg or "Cannot copy out of meta" in msg:
        return (f"{cls_name} takes a shape from tensor values while {doing} (e.g. a router or a dynamic mask), "
                f"which do not exist on the meta device ({msg})")
    return f"{cls_name} stops while {doing}: {type(exc).__name__}: {msg}"


# --- inputs -------------------------------------------------------------------------------------------------
_IMAGE_TOKEN_ID = ("image_token_id", "image_token_index", "image_token")
_VIDEO_TOKEN_ID = ("video_token_id", "video_token_index")  # the placeholders of a model that takes video only


@dataclass
class _Ctx:
    cfg: object
    model: nn.Module
    params: dict
    batch: int
    seq_len: int
    opts: HFOptions
    notes: list[str]
    desc: list[str] = field(default_factory=list)
    device: object = None
    real_ids: bool = False
    image_ids: tuple = _IMAGE_TOKEN_ID  # the config fields naming the placeholder token the pixels fill
    feature_frames: int = 0  # the frames of the audio features made last
    snapped: tuple | None = None  # the image size rounded to the projector's patch grid (variant ``snap``)
    processor_hw: tuple | None = None  # the image size of the model type's image processor (variant ``proc``)
    temporal: int | None = None  # frames per patch where the config names none (variant ``tps=N``)
    audio_tokens: int = 0  # the audio placeholders of a model that takes images and audio, after the image's

    @property
    def value_dev(self):
        """Where inputs whose values the model reads to shape its work (patch grids) live: the CPU when tracing on
        meta (or with no device), else the model's device."""
        return "cpu" if self.device is None or torch.device(self.device).type == "meta" else self.device

    @property
    def idev(self):
        """Where integer inputs (ids, masks, labels, grids) live. For a multimodal model on meta, or one whose forward
        reads its mask's values to choose a path (LED) (``real_ids``):
        on the CPU with real values, so that code reading them (placeholder counts, multimodal rotary positions)
        gets the answer real training gets; they move to meta where they meet the model's tensors."""
        if self.device is None:
            return "cpu"
        if torch.device(self.device).type == "meta" and not self.real_ids:
            return self.device
        return "cpu" if torch.device(self.device).type == "meta" else self.device


def _vocab(cfg) -> int:
    v = find(cfg, "vocab_size", prefer=_SUB_TEXT)
    if not isinstance(v, int) or v <= 0:
        return 32000
    return v


def _image_hw(ctx: _Ctx) -> tuple[int, int]:
    if ctx.snapped:
        return ctx.snapped
    if ctx.opts.image_size:
        return ctx.opts.image_size, ctx.opts.image_size
    if ctx.processor_hw:
        return ctx.processor_hw
    cfg = ctx.cfg
    for c in [*_subconfigs(cfg, _SUB_VISION), cfg] if _get(cfg, "image_size") is None else [cfg, *_subconfigs(cfg, _SUB_VISION)]:
        hw = _hw(_get(c, "image_size", None) or _get(c, "input_size", None) or _get(c, "img_size", None)
                 or _get(c, "crop_size", None) or _get(c, "vision_image_size", None))
        if hw:
            return hw
    return 224, 224


def _processor_class(cfg, kind: str = "image"):
    """The class of the model type's own preprocessor in transformers (``kind``: ``image``: its image processor,
    ``feature``: its audio feature extractor), None where it has none or it cannot be imported."""
    import transformers as tf

    model_type = _get(cfg, "model_type", None)
    try:
        if kind == "image":
            from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES as names
        else:
            from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES as names
    except ImportError:
        return None
    entry = names.get(model_type) if isinstance(model_type, str) else None
    if isinstance(entry, dict):
        entry = entry.get("torchvision") or entry.get("pil") or next(iter(entry.values()), None)
    elif isinstance(entry, (list, tuple)):
        entry = next((e for e in entry if e), None)
    if not isinstance(entry, str):
        return None
    try:
        cls = getattr(tf, entry)
        if "Placeholder" in getattr(cls, "__qualname__", ""):  # a placeholder for a missing backend (torchaudio): the class
            import importlib                          # itself, from its module, to read its defaults

            cls = getattr(importlib.import_module(cls.__module__), entry, None)
        return cls if isinstance(cls, type) else None
    except (ImportError, AttributeError, RuntimeError):
        return None


def _processor_hw(cfg) -> tuple[int, int] | None:
    """The size the model type's image processor makes its images by default (its ``crop_size`` where it crops,
    else its ``size``): for a model whose config names no image size of its own (text recognizers take 48x320
    lines, not squares)."""
    cls = _processor_class(cfg)
    if cls is None:
        return None
    size = getattr(cls, "crop_size", None) if getattr(cls, "do_center_crop", False) else None
    size = size or getattr(cls, "size", None)
    return _hw(size) if isinstance(size, dict) else None


_PATCH_COUNT_DICT = re.compile(r"patch_to_\w+_dict$")  # a projector's table keyed by patch counts (Aria's queries)


def _patch_count_hw(cfg) -> tuple[tuple[int, int], str, list[int]] | None:
    """Where the config maps patch counts to what its projector makes of them (``projector_patch_to_query_dict``:
    Aria's {1225: 128, 4900: 256}, queries by patch count) and takes no other count: the smallest square image whose
    grid of the vision tower's patches has a count the table holds; with the field and its counts. Else None."""
    patch = _patch_size(cfg)
    for _name, c in _sub_configs(cfg):
        for k, v in vars(c).items():
            if not (_PATCH_COUNT_DICT.search(k) and isinstance(v, dict) and v and patch):
                continue
            counts = sorted(int(n) for n in v if str(n).isdigit())
            sides = [math.isqrt(n) for n in counts if math.isqrt(n) ** 2 == n]
            if sides:
                return (sides[0] * patch, sides[0] * patch), k, counts
    return None


def _channels(cfg) -> int:
    v = find(cfg, "num_channels", "in_channels", "in_chans", "input_channels", prefer=_SUB_VISION)
    return int(v) if isinstance(v, int) and 0 < v <= 64 else 3


def _is_video(ctx: _Ctx) -> bool:
    return find(ctx.cfg, "num_frames") is not None and "pixel_values" in ctx.params and not _takes_text(ctx)


def _takes_text(ctx: _Ctx) -> bool:
    return "input_ids" in ctx.params


def _pixel_values(ctx: _Ctx):
    h, w = _image_hw(ctx)
    c = _channels(ctx.cfg)
    if _is_video(ctx):
        t = ctx.opts.num_frames or int(find(ctx.cfg, "num_frames"))
        ctx.desc.append(f"{t} frames of {c}x{h}x{w}")
        return torch.randn(ctx.batch, t, c, h, w)
    ctx.desc.append(f"{c}x{h}x{w} images")
    return torch.randn(ctx.batch, c, h, w)


def _audio_seconds(ctx: _Ctx, default: float) -> float:
    return float(ctx.opts.audio_seconds or default)


def _first_conv1d_in(model: nn.Module) -> int | None:
    for m in model.modules():
        if isinstance(m, nn.Conv1d):
            return m.in_channels
    return None


_FEATURE_MASKS = ("input_features_mask", "feature_attention_mask")  # which audio frames are real: all of them
_SAMPLE_LENGTHS = ("chunk_sample_lengths", "audio_sample_lengths")  # waveform samples per chunk of features
_MEL_FIELDS = ("num_mel_bins", "feature_size", "n_mels", "input_feat_per_channel", "num_mel_filters", "input_feat_size",
               "feature_projection_input_dim")


def _feature_widths(cfg) -> list[int]:
    """The feature widths a config names (its fields of ``_MEL_FIELDS``), the first the one tried first."""
    out = []
    for n in _MEL_FIELDS:
        v = find(cfg, n, prefer=_SUB_AUDIO)
        if isinstance(v, int) and v > 0 and v not in out:
            out.append(v)
    return out


# feature extractors that stack consecutive log-mel frames into one row, by the names of their fields (the
# defaults of their ``__init__`` or class attributes): (frames stacked per row, frames advanced per row, further
# factors of the row's width)
_FRAME_STACKING = (
    ("num_frames_lfr", "stride_lfr", ()),  # FunASR's low frame rate: 7 frames every 6
    ("frame_stacking", "frame_stacking", ("delta_expansion",)),  # Granite Speech 5: frames and their deltas, in pairs
)


def _extractor_defaults(cls) -> dict:
    """A feature extractor's default settings without building it (building may need torchaudio): the defaults
    of its ``__init__`` and its integer class attributes."""
    out = {}
    for klass in reversed(cls.__mro__):
        out.update({k: v for k, v in vars(klass).items() if isinstance(v, int) and not isinstance(v, bool)})
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return out
    out.update({n: q.default for n, q in sig.parameters.items()
                if isinstance(q.default, int) and not isinstance(q.default, bool)})
    return out


def _extractor_widths(cfg) -> list[int]:
    """The feature widths the model type's feature extractor makes by default (its mel bins, its feature size)."""
    cls = _processor_class(cfg, "feature")
    if cls is None:
        return []
    d = _extractor_defaults(cls)
    out = []
    for n in ("num_mel_bins", "n_mels", "feature_size"):
        v = d.get(n)
        if isinstance(v, int) and v > 1 and v not in out:
            out.append(v)
    return out


def _stacked_frames(cfg) -> tuple[int, int, int] | None:
    """(mel bins, frames advanced per row, row width) of the model type's feature extractor where it stacks
    consecutive frames into rows (:data:`_FRAME_STACKING`); None for any other."""
    cls = _processor_class(cfg, "feature")
    if cls is None:
        return None
    d = _extractor_defaults(cls)
    mel = d.get("num_mel_bins") or d.get("n_mels") or d.get("feature_size")
    for stacked, stride, factors in _FRAME_STACKING:
        if isinstance(mel, int) and mel > 0 and d.get(stacked, 0) > 0 and d.get(stride, 0) > 0:
            width = mel * d[stacked]
            for f in factors:
                width *= d.get(f, 1) or 1
            return mel, d[stride], width
    return None


def _input_features(ctx: _Ctx, width: int | None = None):
    """Log-mel features, ``batch x frames x width`` (or channels first for a conv stem that takes them so);
    ``width``: another width the config names (one that is k times its mel bins: k frames stacked per row,
    so a k-th of the rows for the same seconds)."""
    cfg = ctx.cfg
    if width == -1:  # as the model type's feature extractor stacks its frames into rows
        mel, stride, width = _stacked_frames(cfg)
        frames = max(1, int(round(_audio_seconds(ctx, 10.0) * 100)) // stride)
        ctx.desc.append(f"{frames * stride / 100:g} s of {mel} log-mel features in rows of {width} (stacked as "
                        f"its feature extractor stacks them, a row every {stride} frames)")
        ctx.feature_frames = frames
        return torch.randn(ctx.batch, frames, width)
    mel = find(cfg, *_MEL_FIELDS, prefer=_SUB_AUDIO)
    mel = int(mel) if isinstance(mel, int) and mel > 0 else 80
    stacked = 1
    if width is not None and width != mel:
        base = find(cfg, "num_mel_bins", "n_mels", "num_mel_filters", prefer=_SUB_AUDIO)
        stacked = width // base if isinstance(base, int) and base > 0 and width % base == 0 and width > base else 1
        if stacked > 1:
            frames = max(1, int(round(_audio_seconds(ctx, 10.0) * 100)) // stacked)
            ctx.desc.append(f"{frames * stacked / 100:g} s of {base} log-mel features, "
                            f"{stacked} frames stacked per row")
            ctx.feature_frames = frames
            return torch.randn(ctx.batch, frames, width)
        mel = width
    chans = find(cfg, "input_channels", prefer=_SUB_AUDIO)
    feat = mel * chans if isinstance(chans, int) and chans > 1 and find(cfg, "input_feat_per_channel") else mel
    src = find(cfg, "max_source_positions", prefer=_SUB_AUDIO)
    whisper_like = isinstance(src, int) and _first_conv1d_in(ctx.model) == feat and "whisper" in type(cfg).__name__.lower() \
        or (isinstance(src, int) and src == 1500)
    if whisper_like and ctx.opts.audio_seconds is None:
        frames = 2 * src  # Whisper's fixed 30 s window of 10 ms frames
    else:
        frames = max(1, int(round(_audio_seconds(ctx, 10.0) * 100)))  # 10 ms hop
        if whisper_like and frames != 2 * src:
            raise ConfigError(f"{type(ctx.model).__name__} takes exactly {2 * src} mel frames "
                              f"({2 * src / 100:g} s); leave --audio-seconds out")
    if find(cfg, *_MEL_FIELDS[:-1], prefer=_SUB_AUDIO) is None and width is None:  # only the projection's width
        ctx.desc.append(f"{frames} frames of {feat} speech features (the config names no mel bins: 10 ms a frame "
                        "assumed)")
    else:
        ctx.desc.append(f"{frames / 100:g} s of {feat} log-mel features")
    ctx.feature_frames = frames
    if _first_conv1d_in(ctx.model) == feat:
        return torch.randn(ctx.batch, feat, frames)  # channels first (Whisper's conv stem)
    return torch.randn(ctx.batch, frames, feat)


def _input_values(ctx: _Ctx):
    mel, length = find(ctx.cfg, "num_mel_bins", prefer=_SUB_AUDIO), find(ctx.cfg, "max_length", prefer=_SUB_AUDIO)
    if isinstance(mel, int) and isinstance(length, int) and mel > 0 and length > 0:  # a spectrogram (AST)
        frames = int(round(ctx.opts.audio_seconds * 100)) if ctx.opts.audio_seconds else length
        ctx.desc.append(f"{frames / 100:g} s of {mel} log-mel features")
        return torch.randn(ctx.batch, frames, mel)
    rate = find(ctx.cfg, "sampling_rate", "sample_rate", prefer=_SUB_AUDIO)
    rate = int(rate) if isinstance(rate, (int, float)) and rate > 0 else 16000
    secs = _audio_seconds(ctx, 10.0)
    ctx.desc.append(f"{secs:g} s of {rate} Hz audio")
    return torch.randn(ctx.batch, int(round(secs * rate)))


def _seq(ctx: _Ctx) -> int:
    return ctx.seq_len


def _plain_token(cfg) -> int:
    """A token id that is none of the config's special tokens (image, audio, pad, bos, ...)."""
    special = set()
    for c in [cfg, *_subconfigs(cfg)]:
        for k, v in vars(c).items():
            if ("token" in k or k.endswith("_id") or k.endswith("_index")) and isinstance(v, int):
                special.add(v)
            elif "token" in k and isinstance(v, (list, tuple)):
                special.update(x for x in v if isinstance(x, int))
    vocab = _vocab(cfg)
    return next((i for i in range(min(100, vocab - 1), vocab) if i not in special), 0)


def _ids(ctx: _Ctx, n: int | None = None, shape=None):
    """Token ids: for a multimodal model on meta, a plain token throughout, on the CPU (real values)."""
    if ctx.real_ids and ctx.device is not None and torch.device(ctx.device).type == "meta":
        return torch.full(shape or (ctx.batch, n or _seq(ctx)), _plain_token(ctx.cfg), dtype=torch.long, device="cpu")
    return torch.randint(0, _vocab(ctx.cfg), shape or (ctx.batch, n or _seq(ctx)), device=ctx.idev)


# image placeholder tokens a vision-language model's projector fills, from its config
_AUDIO_TOKEN_ID = ("audio_token_id", "audio_token_index")


def _patch_size(cfg, default: int | None = None) -> int | None:
    """The vision tower's patch side (the first of a (h, w) pair), ``default`` where the config names none."""
    patch = find(cfg, "patch_size", prefer=_SUB_VISION)
    patch = patch[0] if isinstance(patch, (list, tuple)) and patch else patch
    return int(patch) if isinstance(patch, int) and not isinstance(patch, bool) and patch > 0 else default


def _grid(ctx: _Ctx) -> tuple[int, int, int, int, int]:
    """The patch grid of a Qwen2-VL-style model for the image size: (patch, temporal patch, spatial merge,
    grid height, grid width), the grid's sides a multiple of the merge."""
    cfg = ctx.cfg
    patch = _patch_size(cfg, 14)
    tps = int(find(cfg, "temporal_patch_size", prefer=_SUB_VISION) or ctx.temporal or 2)
    merge = int(find(cfg, "spatial_merge_size", "merge_size", prefer=_SUB_VISION) or 2)
    h, w = _image_hw(ctx)
    gh = max(merge, (h // patch) // merge * merge)
    gw = max(merge, (w // patch) // merge * merge)
    return patch, tps, merge, gh, gw


def _grid_patches(ctx: _Ctx, images, frames: int | None = None):
    """Qwen2-VL-style inputs: the images cut into ``temporal x patch x patch`` patches, flattened to one row
    each (``sum(t*h*w) x C*temporal*patch^2``), with their grid ``image_grid_thw`` (one (t, h, w) per image);
    h and w a multiple of the spatial merge. ``frames``: the temporal patch size where the model's inputs fix it."""
    patch, tps, merge, gh, gw = _grid(ctx)
    tps = frames or tps
    b, c, h, w = images.shape
    ctx.desc[-1] = f"{c}x{gh * patch}x{gw * patch} images in {patch}px patches"
    rows = torch.randn(b * gh * gw, c * tps * patch * patch)
    # the grid on the CPU: the model reads its values (.tolist()) to split the patches, as in real training
    return rows, torch.tensor([[1, gh, gw]] * b, device=ctx.idev)


def _flat_patches(ctx: _Ctx, images):
    """NaFlex-style inputs (SigLIP 2): each image cut into ``patch x patch`` patches, one row each
    (``batch x patches x C*patch^2``), with its grid ``spatial_shapes`` (patch rows, patch columns; read by
    the model, so with real values) and a mask of the valid patches (all of them)."""
    patch = _patch_size(ctx.cfg, 16)
    b, c, h, w = images.shape
    gh, gw = max(1, h // patch), max(1, w // patch)
    limit = find(ctx.cfg, "num_patches", prefer=_SUB_VISION)
    if isinstance(limit, int) and 0 < limit < gh * gw:
        raise ConfigError(f"a {h}x{w} image is {gh * gw} patches of {patch} px, more than the {limit} the vision "
                          "config takes (num_patches); pass a smaller --image-size")
    ctx.desc[-1] = f"{c}x{gh * patch}x{gw * patch} images in {gh * gw} patches of {patch}px"
    dev = ctx.value_dev
    shapes = torch.tensor([[gh, gw]] * b, dtype=torch.long, device=dev)
    mask = torch.ones(b, gh * gw, dtype=torch.long, device=dev)
    return torch.randn(b, gh * gw, c * patch * patch), shapes, mask


def _packed_patches(ctx: _Ctx, images):
    """NaViT-packed inputs as MiniCPM-V's image processor makes them: every image's ``patch x patch`` patches side
    by side in one row, ``1 x C x patch x (patches * patch)``, with each image's grid ``target_sizes`` (patch rows,
    patch columns; read by the model, so with real values), the grid's sides a multiple of the kernels that merge
    or window it (``merge_kernel_size``, ``window_kernel_size``)."""
    patch = _patch_size(ctx.cfg, 14)
    step = 1
    for n in ("merge_kernel_size", "window_kernel_size"):
        k = find(ctx.cfg, n, prefer=_SUB_VISION)
        k = k[0] if isinstance(k, (list, tuple)) and k else k
        step *= k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else 1
    b, c, h, w = images.shape
    gh, gw = max(step, h // patch // step * step), max(step, w // patch // step * step)
    ctx.desc[-1] = f"{c}x{gh * patch}x{gw * patch} images packed in {gh * gw} patches of {patch}px"
    dev = ctx.value_dev
    sizes = torch.tensor([[gh, gw]] * b, dtype=torch.int32, device=dev)
    return torch.randn(1, c, patch, b * gh * gw * patch), sizes


def _patch_rows(ctx: _Ctx, images):
    """Images as rows of flattened patches, ``batch x patches x patch*patch*C`` (a model whose projector is a
    linear layer over raw patches: Fuyu), the patches of the config's ``patch_size``."""
    patch = _patch_size(ctx.cfg, 16)
    b, c, h, w = images.shape
    gh, gw = max(1, h // patch), max(1, w // patch)
    ctx.desc[-1] = f"{c}x{gh * patch}x{gw * patch} images as {gh * gw} rows of {patch}px patches"
    if _documents_flat_patches(ctx.model):  # every image's rows in one axis, as its forward documents them (NeoMME)
        ctx.desc[-1] += ", all images' rows in one axis"
        return torch.randn(b * gh * gw, c * patch * patch)
    return torch.randn(b, gh * gw, c * patch * patch)


_FLAT_PATCHES = re.compile(r"pixel_values \(`torch\.\w+` of shape `\(num_patches,")


def _documents_flat_patches(model) -> bool:
    """Whether the model's forward, or its base model's, documents ``pixel_values`` as patch rows without a batch
    axis (``(num_patches, 3 * patch_size ** 2)``: the rows of every image in one axis, as NeoMME's processor
    makes them; its head's generic docstring says images)."""
    for m in (model, getattr(model, "base_model", None), getattr(model, "model", None)):
        doc = getattr(getattr(m, "forward", None), "__doc__", None) or ""
        if isinstance(m, nn.Module) and _FLAT_PATCHES.search(" ".join(doc.split())):
            return True
    return False


def _tiles(ctx: _Ctx) -> int:
    """Tiles per image for LLaVA-NeXT-style "AnyRes" models (a config with ``image_grid_pinpoints``): the base
    image plus the crops of the grid resolution transformers' own preprocessing picks for the image size."""
    pins = find(ctx.cfg, "image_grid_pinpoints")
    size = find(ctx.cfg, "image_size", prefer=_SUB_VISION)
    if not isinstance(pins, list) or not pins or not isinstance(size, int) or size <= 0:
        return 1
    try:
        from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

        return max(1, int(image_size_to_num_patches(list(_image_hw(ctx)), pins, size)))
    except (ImportError, TypeError, ValueError):
        return 1


def _image_tokens_guess(ctx: _Ctx) -> int:
    cfg = ctx.cfg
    for n in ("mm_tokens_per_image", "image_seq_length", "num_image_tokens", "num_query_tokens", "image_seq_len",
              "latent_query_num"):
        v = _get(cfg, n, None)
        if isinstance(v, int) and v > 0:
            return v
    if "image_grid_thw" in ctx.params:  # a patch grid: one token per merge x merge patches
        _patch, _tps, merge, gh, gw = _grid(ctx)
        return (gh // merge) * (gw // merge)
    h, _w = _image_hw(ctx)
    patch = _patch_size(cfg)
    if patch:
        n = (h // patch) ** 2
        if _get(cfg, "vision_feature_select_strategy", "default") == "full":
            n += 1
        return n
    return 256


# config fields of the factor by which a projector merges the vision tower's patch grid (pixel shuffle), or a
# backbone splits it into windows (windows per side: RF-DETR's windowed DINOv2): the grid's sides must be
# multiples of it
_GRID_FACTORS = ("pixel_shuffle_factor", "scale_factor", "downsample_factor", "spatial_merge_size", "merge_size",
                 "num_windows_side", "num_windows")
_WINDOW_FACTORS = ("num_windows_side", "num_windows")


def _snapped_hw(ctx: _Ctx) -> tuple[tuple[int, int], str, str, int] | None:
    """The image size rounded down so that its patch grid's sides are multiples of the factor by which the
    projector merges patches (Idefics3's pixel shuffle: a 224 px image in 32 px patches is a 7x7 grid, which a
    shuffle by 2 cannot split; 192 px is 6x6) or the backbone splits the grid into windows, as an image processor
    resizes images for such a model; with the note saying so, what is wrong with the size, and the multiple it
    needs. None where the image size fits already (or the config names no patch and merge factor)."""
    patch = _patch_size(ctx.cfg)
    field_, factor = next(((n, v) for n, v in ((n, find(ctx.cfg, n, prefer=_SUB_VISION)) for n in _GRID_FACTORS)
                           if isinstance(v, int) and not isinstance(v, bool) and v >= 2), (None, None))
    pooled = find(ctx.cfg, "mm_tokens_per_image")  # Gemma 3: the grid pooled to n x n tokens (sides multiples of n)
    side = math.isqrt(pooled) if isinstance(pooled, int) and not isinstance(pooled, bool) and pooled >= 4 else 0
    if not factor and side * side == pooled and side >= 2:
        field_, factor = "mm_tokens_per_image", side
    if not (patch and factor):
        return None
    h, w = _image_hw(ctx)
    step = patch * factor
    hw = (max(step, h // step * step), max(step, w // step * step))
    if hw == (h, w):
        return None
    what = (f"the backbone's {factor} attention windows per side ({field_})" if field_ in _WINDOW_FACTORS
            else f"the {factor}x{factor} grid of tokens the projector pools them to ({field_} {pooled})"
            if field_ == "mm_tokens_per_image" else f"the projector's merge factor {factor}")
    return hw, (f"the {h}x{w} images are resized to {hw[0]}x{hw[1]} so that their grid of {patch} px patches "
                f"divides by {what} (as the model's image processor resizes them)"), \
        (f"its {h}x{w} images in {patch} px patches make a {h // patch}x{w // patch} grid, which {what} "
         "does not divide"), step


# features of N positions added to a text of S: "broadcast a dimension of length N at -2 ... had torch.Size([B, N, H])
# ... broadcastable to [B, S, H]"
_ALIGNED = re.compile(r"broadcast a dimension of length (\d+) at -2!.*?torch\.Size\(\[\d+, (\d+), \d+\]\).*?"
                      r"broadcastable to \[\d+, (\d+), \d+\]")
# a vector of N (one value per stream) added to ids of batch x seq: "broadcast a dimension of length N at -1 ...
# had torch.Size([N]) ... broadcastable to [B, S]"
_STREAMS = re.compile(r"broadcast a dimension of length (\d+) at -1!.*?torch\.Size\(\[\d+\]\).*?"
                      r"broadcastable to \[(\d+), (\d+)\]$")
_FEATURE_MISMATCH = re.compile(r"(?:image|video|audio) (?:features and (?:image|video|audio) )?tokens?"
                               r".*?features:? (\d+)", re.I)


# --- labels by head -----------------------------------------------------------------------------------------
def _num_labels(cfg) -> int:
    v = _get(cfg, "num_labels", None)
    return int(v) if isinstance(v, int) and v > 0 else 2


def _head_kind(cls) -> str:
    n = cls.__name__
    for suffix, kind in (("ForSequenceClassification", "class"), ("ForImageClassification", "class"),
                         ("ForAudioClassification", "class"), ("ForVideoClassification", "class"),
                         ("ForMultipleChoice", "choice"), ("ForTokenClassification", "token"),
                         ("ForQuestionAnswering", "span"), ("ForCTC", "ctc"),
                         ("ForAudioFrameClassification", "frame"), ("ForXVector", "class"),
                         ("ForImageClassificationWithTeacher", "none"), ("ForMaskedImageModeling", "none"),
                         ("ForPreTraining", "lm"), ("ForCausalLM", "lm"), ("LMHeadModel", "lm"),
                         ("ForMaskedLM", "lm"), ("ForConditionalGeneration", "lm"), ("WithLMHead", "lm"),
                         ("ForSpeechSeq2Seq", "lm")):
        if n.endswith(suffix):
            return kind
    if "LM" in n or "Generation" in n:
        return "lm"
    maps = _mapping_names()  # a language-model head by its task (MarianMTModel: a seq2seq LM)
    lm = any(n in maps.get(k, {}).values()
             for k in ("CAUSAL_LM", "MASKED_LM", "SEQ_TO_SEQ_CAUSAL_LM", "SPEECH_SEQ_2_SEQ"))
    return "lm" if lm else "none"


_REGIONS = 36  # detected regions per image of region-feature models (bottom-up attention's usual 36 boxes)


def _video(ctx: _Ctx):
    """A video clip: ``batch x frames x C x H x W`` at the config's frame count (``num_frames``,
    ``frames_per_clip``; ``--num-frames``) and image size."""
    h, w = _image_hw(ctx)
    c = _channels(ctx.cfg)
    t = ctx.opts.num_frames or find(ctx.cfg, "num_frames", "frames_per_clip", prefer=_SUB_VISION)
    t = int(t) if isinstance(t, int) and t > 0 else 16
    ctx.desc.append(f"{t} frames of {c}x{h}x{w}")
    return torch.randn(ctx.batch, t, c, h, w)


def _tiled(ctx: _Ctx, images) -> dict:
    """Images cut into tiles (Mllama): each image as the grid of tiles of the config's ``max_num_tiles`` among
    its ``supported_aspect_ratios`` (a 2x2 grid of four tiles where supported), ``batch x 1 image x tiles x C x
    H x W``, with that grid's ``aspect_ratio_ids`` (its place in the list, from 1) and a mask of the tiles."""
    b, c, h, w = images.shape
    tiles = find(ctx.cfg, "max_num_tiles", prefer=_SUB_VISION)
    tiles = int(tiles) if isinstance(tiles, int) and tiles > 0 else 1
    ratios = find(ctx.cfg, "supported_aspect_ratios", prefer=_SUB_VISION) or [[1, 1]]
    grids = [tuple(r) for r in ratios if isinstance(r, (list, tuple)) and len(r) == 2 and r[0] * r[1] <= tiles]
    grid = max(grids or [(1, 1)], key=lambda r: (r[0] * r[1], -abs(r[0] - r[1])))
    rid = [tuple(r) for r in ratios].index(grid) + 1 if grid in [tuple(r) for r in ratios] else 1
    n = grid[0] * grid[1]
    ctx.desc[-1] = f"{c}x{h * grid[0]}x{w * grid[1]} images in {n} tiles of {h}x{w}"
    mask = torch.zeros(b, 1, tiles, dtype=torch.long, device=ctx.idev)
    mask[:, :, :n] = 1
    pix = torch.randn(b, 1, tiles, c, h, w)
    return {"pixel_values": pix, "aspect_ratio_ids": torch.full((b, 1), rid, dtype=torch.long, device=ctx.idev),
            "aspect_ratio_mask": mask}


def _time_series(ctx: _Ctx, cls, kw: dict) -> str:
    """A time-series batch: ``past_values`` of the config's ``context_length`` steps (``batch x steps x
    channels`` where the config has ``num_input_channels``, else ``batch x steps``), and its targets:
    ``future_values`` over the forecast horizon, or ``target_values`` (classes or regression targets).
    Returns the label kind."""
    cfg, p, B = ctx.cfg, ctx.params, ctx.batch
    steps = _get(cfg, "context_length", None)
    steps = int(steps) if isinstance(steps, int) and steps > 0 else 512
    ch = _get(cfg, "num_input_channels", None)
    shape = (B, steps, int(ch)) if isinstance(ch, int) and ch > 0 else (B, steps)
    kw["past_values"] = torch.randn(*shape)
    ctx.desc.append(f"{steps} time steps" + (f" of {shape[2]} channels" if len(shape) == 3 else ""))
    n = cls.__name__
    if "target_values" in p:
        targets = _get(cfg, "num_targets", None)
        targets = int(targets) if isinstance(targets, int) and targets > 0 else 1
        if "Classification" in n:
            kw["target_values"] = torch.randint(0, max(2, targets), (B,), device=ctx.idev)
            return "own"
        if "Regression" in n:
            kw["target_values"] = torch.randn(B, targets)
            return "own"
    horizon = _get(cfg, "horizon_length", None) or _get(cfg, "prediction_length", None)
    if "future_values" in p and isinstance(horizon, int) and horizon > 0:
        kw["future_values"] = torch.randn(B, horizon, *shape[2:])
        ctx.desc.append(f"{horizon} steps ahead")
        return "own"
    return "none"


def _robot_state(ctx: _Ctx, kw: dict) -> str | None:
    """A robot policy's batch (a forward taking ``state`` and the ``actions`` it learns: PI0): the state vector of
    the config's ``max_state_dim`` (or ``state_dim``) and a chunk of ``chunk_size`` actions of ``max_action_dim``
    (or ``action_dim``) as its targets, both sizes the config's own; None (nothing made) where it names them not."""
    cfg, B = ctx.cfg, ctx.batch

    def size(*names):
        v = find(cfg, *names)
        return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

    state, action, chunk = size("max_state_dim", "state_dim"), size("max_action_dim", "action_dim"), \
        size("chunk_size", "n_action_steps")
    if state is None or action is None or chunk is None:
        return None
    kw["state"] = torch.randn(B, state)
    kw["actions"] = torch.randn(B, chunk, action)
    ctx.desc.append(f"robot state of {state}, {chunk} actions of {action} as targets")
    note = (f"{_get(cfg, 'model_type', 'the model')}: a robot policy: trained on a state of {state} values and a chunk "
            f"of {chunk} actions of {action} as its targets, the config's sizes (max_state_dim, chunk_size, "
            "max_action_dim)")
    if note not in ctx.notes:
        ctx.notes.append(note)
    return "own"


def _no_tower(ctx: _Ctx, field_: str, name: str) -> bool:
    """Whether the model takes the optional input ``name`` (``pixel_values``, ``input_features``) for a tower its
    config leaves out (``field_``, a ``vision_config`` or ``audio_config``, None: the model builds no such tower,
    as transformers' default Gemma 4 config); the forecast then says it trains without that input (once)."""
    p = ctx.params.get(name)
    if p is None or p.default is inspect.Parameter.empty or field_ not in vars(ctx.cfg) \
            or vars(ctx.cfg)[field_] is not None:
        return False
    note = (f"{_get(ctx.cfg, 'model_type', 'the model')}: the config has no {field_.split('_')[0]} tower ({field_} "
            f"None: the model builds none), so no {name} are passed")
    if note not in ctx.notes:
        ctx.notes.append(note)
    return True


def _make_inputs(ctx: _Ctx, cls, image_tokens: int | None, variant: frozenset = frozenset()) -> tuple[dict, str]:
    """The keyword inputs of one training batch for ``cls``'s forward, and the head's label kind.
    ``image_tokens``: the placeholders of the image (or audio) features; ``variant``: forms some models want
    (``sizes``: ``image_sizes`` passed; ``5d``: images as ``batch x 1 x C x H x W``)."""
    p = ctx.params
    cfg = ctx.cfg
    kw: dict = {}
    kind = _head_kind(cls)
    ctx.snapped = None
    ctx.processor_hw = _processor_hw(cfg) if "proc" in variant else None
    if "patch-count" in variant:  # a size whose patch count the projector's table holds (:func:`_patch_count_hw`)
        ctx.processor_hw = _patch_count_hw(cfg)[0]
    ctx.temporal = _variant_int(variant, "tps", None)
    if "snap" in variant:
        snap = _snapped_hw(ctx)
        ctx.snapped = snap[0] if snap else None
    B, S = ctx.batch, _seq(ctx)
    text = "input_ids" in p and "no-text" not in variant  # no-text: features in place of the text (Pop2Piano)
    no_vision = text and _no_tower(ctx, "vision_config", "pixel_values")
    no_audio = text and _no_tower(ctx, "audio_config", "input_features")
    if "pixel_values" in p and not no_vision and (
            not text or find(cfg, *ctx.image_ids) is not None or p["pixel_values"].default
            is inspect.Parameter.empty or "vision_config" in vars(cfg) or _needs_pixels(cls, cfg)):
        kw["pixel_values"] = _pixel_values(ctx)
        hr = _get(cfg, "high_res_vision_config", None)
        if "high_res_pixel_values" in p and hr is not None:  # the same images for the high-resolution tower
            hh, hw = (ctx.opts.image_size,) * 2 if ctx.opts.image_size else (_hw(_get(hr, "image_size", None))
                                                                          or _image_hw(ctx))
            kw["high_res_pixel_values"] = torch.randn(B, _channels(hr), hh, hw)
            ctx.desc.append(f"{_channels(hr)}x{hh}x{hw} high-resolution images")
        if "spatial_shapes" in p and kw["pixel_values"].dim() == 4:  # NaFlex (SigLIP 2): rows of patches
            kw["pixel_values"], kw["spatial_shapes"], mask = _flat_patches(ctx, kw["pixel_values"])
            if "pixel_attention_mask" in p:
                kw["pixel_attention_mask"] = mask
        elif "target_sizes" in p and kw["pixel_values"].dim() == 4:  # NaViT-packed patches (MiniCPM-V)
            kw["pixel_values"], kw["target_sizes"] = _packed_patches(ctx, kw["pixel_values"])
        elif "aspect_ratio_ids" in p and kw["pixel_values"].dim() == 4:  # tiled images (Mllama)
            kw.update(_tiled(ctx, kw["pixel_values"]))
        elif cls.__name__.endswith("ForKeypointMatching") and kw["pixel_values"].dim() == 4:  # pairs of images
            kw["pixel_values"] = torch.stack([kw["pixel_values"]] * 2, 1)
            ctx.desc[-1] = "pairs of " + ctx.desc[-1]
        elif "image_grid_hw" in p and "image_grid_thw" not in p and kw["pixel_values"].dim() == 4:
            # the same rows with a (rows, columns) grid per image, one frame each (Nemotron-H Omni)
            kw["pixel_values"], grid = _grid_patches(ctx, kw["pixel_values"], frames=1)
            kw["image_grid_hw"] = grid[:, 1:].contiguous()
        elif "image_grid_thw" in p and kw["pixel_values"].dim() == 4:
            kw["pixel_values"], kw["image_grid_thw"] = _grid_patches(ctx, kw["pixel_values"])
            if "per-image" in variant:  # each image's rows in a batch axis, padded to the longest (ColQwen2)
                kw["pixel_values"] = kw["pixel_values"].view(B, -1, kw["pixel_values"].shape[-1])
            if "patch-images" in variant:  # each patch as a small image, ``patches x C x P x P`` (Kimi K2.5)
                patch = _grid(ctx)[0]
                kw["pixel_values"] = kw["pixel_values"].view(-1, _channels(cfg), patch, patch)
            if "token-blocks" in variant:  # each token's merge x merge patches as one channels-last block, the
                # grid counted in tokens (Inkling 2: ``tokens x P*M x P*M x C``)
                patch, _tps, merge, gh, gw = _grid(ctx)
                kw["pixel_values"] = torch.randn(B * (gh // merge) * (gw // merge), patch * merge, patch * merge,
                                                 _channels(cfg))
                kw["image_grid_thw"] = torch.tensor([[1, gh // merge, gw // merge]] * B, device=ctx.idev)
                ctx.desc[-1] += f", each token's {merge}x{merge} patches as one {patch * merge}px block, channels last"
            if "image_merge_sizes" in p:  # each image's spatial merge (VideoLLaMA 3), the config's
                kw["image_merge_sizes"] = torch.full((kw["image_grid_thw"].shape[0],), _grid(ctx)[2],
                                                     dtype=torch.long, device=ctx.idev)
        elif "pixel-mask" in variant and kw["pixel_values"].dim() == 4:  # every pixel real, the mask on the CPU
            # with its values (ViLT picks its patches by the mask's nonzero entries: counts the forward reads)
            kw["pixel_mask"] = torch.ones(B, *kw["pixel_values"].shape[-2:], dtype=torch.long, device=ctx.value_dev)
            ctx.desc[-1] += " with their pixel mask (all real)"
        elif "rows" in variant:  # rows of flattened patches (Fuyu: ``batch x patches x patch*patch*C``)
            kw["pixel_values"] = _patch_rows(ctx, kw["pixel_values"])
        elif "5d" in variant:
            x = kw["pixel_values"]
            tiles = _tiles(ctx)
            kw["pixel_values"] = x.unsqueeze(1).expand(x.shape[0], tiles, *x.shape[1:]).contiguous()
            if tiles > 1:
                ctx.desc.append(f"{tiles} tiles per image (AnyRes grid)")
            if "tile-mask" in variant:  # which tiles are real (Granite Docling: ``batch x tiles``, all of them)
                kw["pixel_attention_mask"] = torch.ones(B, tiles, dtype=torch.bool, device=ctx.idev)
    elif "pixel_values" not in p and "flattened_patches" in p:
        kw["flattened_patches"] = torch.randn(B, S, 2 + _channels(cfg) * 16 * 16)
    elif "pixel_values" not in p and "pixel_values_videos" in p:  # a video model
        kw["pixel_values_videos"] = _video(ctx)
    for name, dim in (("visual_embeds", "visual_embedding_dim"), ("visual_feats", "visual_feat_dim")):
        width = find(cfg, dim)
        if name in p and text and isinstance(width, int) and width > 0:  # region features of a detector
            kw[name] = torch.randn(B, _REGIONS, width)
            ctx.desc.append(f"{_REGIONS} regions of {width} features")
            if "visual_attention_mask" in p:
                kw["visual_attention_mask"] = torch.ones(B, _REGIONS, dtype=torch.long, device=ctx.idev)
            pos = find(cfg, "visual_pos_dim")
            if "visual_pos" in p and isinstance(pos, int) and pos > 0:
                kw["visual_pos"] = torch.rand(B, _REGIONS, pos)
    if "past_values" in p and not kw:
        kind = _time_series(ctx, cls, kw)
    if "state" in p and "actions" in p:  # a robot policy: its state, and the chunk of actions it learns to predict
        kind = _robot_state(ctx, kw) or kind
    task_len = find(cfg, "task_seq_len")
    if "task_inputs" in p and "pixel_values" in kw and isinstance(task_len, int) and not isinstance(task_len, bool) \
            and task_len > 0:
        # the tokenized task prompt of a task-conditioned segmenter ("the task is panoptic": OneFormer), as long as
        # the config's task_seq_len, ids of its text vocabulary
        vocab = find(cfg, "text_encoder_vocab_size", "vocab_size")
        vocab = int(vocab) if isinstance(vocab, int) and vocab > 0 else 2
        kw["task_inputs"] = torch.randint(0, vocab, (B, task_len), device=ctx.idev)
        ctx.desc.append(f"a task prompt of {task_len} tokens")
        note = (f"{_get(cfg, 'model_type', 'the model')}: each image with a task prompt of {task_len} token ids "
                "(task_seq_len), as its processor tokenizes \"the task is ...\"")
        if note not in ctx.notes:
            ctx.notes.append(note)
    encoder_input = getattr(getattr(ctx.model, "encoder", None), "main_input_name", None)
    if "input_features" in p and not no_audio and not ("input_values" in p and encoder_input == "input_values"):
        # (a speech encoder-decoder takes whichever its encoder does: wav2vec2's raw audio, ...)
        width = _variant_int(variant, "width", None)
        kw["input_features"] = _input_features(ctx, width)
        if "flip" in variant and kw["input_features"].dim() == 3:  # the other layout (frames first / features first)
            kw["input_features"] = kw["input_features"].transpose(1, 2).contiguous()
        frames = ctx.feature_frames
        # (variant ``mask-len=N``: a mask over the N features the projector makes, not the frames: the IndexError
        # of a mask that does not fit them says N; Granite Speech's input_features_mask)
        mask_len = _variant_int(variant, "mask-len", None) or frames
        for mask in _FEATURE_MASKS:
            if mask in p:  # (booleans where the model inverts them with ``~``: variant ``bool-mask``, Gemma 3n)
                kw[mask] = torch.ones(B, mask_len, dtype=torch.bool if "bool-mask" in variant else torch.long,
                                      device=ctx.idev)
        lens = [n for n in _SAMPLE_LENGTHS if n in p]
        if lens and kw["input_features"].dim() == 3:
            # how many waveform samples each chunk of features holds (Dots 3 Note's ``chunk_sample_lengths``): all of
            # its frames real, a hop of the config's hop_length (10 ms at 16 kHz where it names none)
            hop = find(cfg, "hop_length", prefer=_SUB_AUDIO)
            hop = int(hop) if isinstance(hop, int) and not isinstance(hop, bool) and hop > 0 else 160
            kw[lens[0]] = torch.full((kw["input_features"].shape[0],), frames * hop, dtype=torch.long,
                                     device=ctx.idev)
    elif "input_values" in p and ("input_ids" not in p or encoder_input == "input_values"):
        kw["input_values"] = _input_values(ctx)
        if "channel" in variant and kw["input_values"].dim() == 2:  # raw audio with its channel axis (B x 1 x T)
            kw["input_values"] = kw["input_values"].unsqueeze(1)
            ctx.desc[-1] += ", one channel"
    if text and ("pixel_values" in kw or "pixel_values_videos" in kw or not kw
                 or p["input_ids"].default is inspect.Parameter.empty
                 or kind in ("lm", "token", "span", "choice") or not any(k in p for k in ("input_features", "input_values"))):
        n_img, what = 0, "image"
        tok = find(cfg, *ctx.image_ids) if "pixel_values" in kw else None
        if tok is None and "input_features" in kw:
            tok, what = find(cfg, *_AUDIO_TOKEN_ID), "audio"
        if isinstance(tok, int) and image_tokens is not None:
            n_img = image_tokens
        # where the image features go by a mask rather than a placeholder token (Kosmos-2): as many positions as
        # the projector makes features
        by_mask = "image_embeds_position_mask" in p and "pixel_values" in kw and not n_img
        if by_mask:
            n_img = image_tokens or _image_tokens_guess(ctx)
        # the audio's own placeholders after the image's, where the model takes both (Gemma 3n: counted by the check
        # the dry run passed over, :attr:`_Ctx.audio_tokens`)
        n_audio = ctx.audio_tokens if what == "image" and n_img > 0 and "input_features" in kw else 0
        audio_tok = find(cfg, *_AUDIO_TOKEN_ID) if n_audio else None
        n_audio = n_audio if isinstance(audio_tok, int) and not isinstance(audio_tok, bool) else 0
        seq = max(S, n_img + n_audio + 8) if n_img else S  # room for the placeholders and some text
        if kind == "choice":
            n_choices = 2
            kw["input_ids"] = _ids(ctx, shape=(B, n_choices, seq))
            kw["attention_mask"] = (torch.ones(B, n_choices, seq, dtype=torch.long, device=ctx.idev)
                                  if "attention_mask" in p else None)
        elif _codebooks(ctx):  # one row of audio codes per codebook (MusicGen's decoder)
            k = _codebooks(ctx)
            kw["input_ids"] = _ids(ctx, shape=(B * k, seq))
            if "attention_mask" in p:
                kw["attention_mask"] = torch.ones(B, seq, dtype=torch.long, device=ctx.idev)
            what = f"x {k} codebooks"
        else:
            streams = _variant_int(variant, "streams")
            ids = _ids(ctx, shape=(B, seq, streams)) if streams else _ids(ctx, seq)
            if streams:  # a token per stream at each step (the text and the audio codebooks: Kyutai's STT)
                what = f"x {streams} streams"
            latent = _latent_frames(ctx)
            if latent:  # the text, then the audio: its BOS and one frame token per frame, the frames the labels
                frames = seq // 2
                ids[:, seq - frames - 1] = latent[0]
                ids[:, seq - frames:] = latent[1]
                kw["labels"] = torch.randn(B, frames, latent[2])
                if "labels_mask" in p:  # every frame a target (real values: the model selects by them)
                    kw["labels_mask"] = torch.ones(B, frames, dtype=torch.long, device=ctx.idev)
                what = f"audio: {frames} frames of {latent[2]} latents as labels"
                n_img = -1
            if n_img > 0 and not by_mask:
                ids[:, :n_img] = tok  # meta: shapes only; the placeholders' count is what the model checks
                if n_audio:
                    ids[:, n_img:n_img + n_audio] = audio_tok
            kw["input_ids"] = ids
            patch = _get(cfg, "patch_size", None)
            if _takes(ctx, "patch_lengths") and isinstance(patch, int) and not isinstance(patch, bool) and patch > 0 \
                    and ids.dim() == 2:
                # dynamic patches (BLT: where a small LM's entropy rises) at the config's mean patch size, the
                # expected shape; the patcher's own forward is not run (BLT's data pipeline patches)
                n = ids.shape[1]
                lengths = [patch] * (n // patch) + ([n % patch] if n % patch else [])
                kw["patch_lengths"] = torch.tensor([lengths] * B, dtype=torch.long, device=ctx.idev)
                ctx.desc.append(f"{len(lengths)} patches of {patch} bytes")
                ctx.notes.append(f"{_get(cfg, 'model_type', cls.__name__)}: patches of {patch} tokens (the config's "
                                 "patch_size) stand in for the entropy patcher's, which depend on the text's values; "
                                 "the patcher's own forward is not counted")
            if "attention_mask" in p:
                kw["attention_mask"] = torch.ones(B, seq, dtype=torch.long, device=ctx.idev)
            if by_mask:  # the positions after the first token
                kw["image_embeds_position_mask"] = torch.zeros(B, seq, dtype=torch.long, device=ctx.idev)
                kw["image_embeds_position_mask"][:, 1:1 + n_img] = 1
            if "mm_token_type_ids" in p:  # 1 where the image placeholders are (multimodal RoPE), 0 for text (Molmo 2
                # requires it in training even with no image)
                kw["mm_token_type_ids"] = torch.zeros(B, seq, dtype=torch.long, device=ctx.idev)
                if n_img > 0:
                    kw["mm_token_type_ids"][:, :n_img] = 1
        pv = kw.get("pixel_values")
        if "image_attention_mask" in p and pv is not None and pv.dim() == 5 and kw["input_ids"].dim() == 2:
            # which images each text token attends to (IDEFICS' cross-attention): all of its example's
            kw["image_attention_mask"] = torch.ones(B, seq, pv.shape[1], dtype=torch.long, device=ctx.idev)
        if "qformer_input_ids" in p:  # the instruction the Q-Former reads (InstructBLIP): the text's length
            qcfg = _get(cfg, "qformer_config", None) or cfg
            qv = _get(qcfg, "vocab_size", None)
            qv = int(qv) if isinstance(qv, int) and qv > 0 else _vocab(cfg)
            qlen = min(S, _position_limit(qcfg) or S)
            kw["qformer_input_ids"] = torch.randint(0, qv, (B, qlen), device=ctx.idev)
            if "qformer_attention_mask" in p:
                kw["qformer_attention_mask"] = torch.ones(B, qlen, dtype=torch.long, device=ctx.idev)
            ctx.desc.append(f"{qlen} instruction tokens for the Q-Former")
        if "cross_attention_mask" in p and "aspect_ratio_mask" in kw:  # every token attends to every tile
            kw["cross_attention_mask"] = kw["aspect_ratio_mask"][:, None].expand(B, seq, *kw["aspect_ratio_mask"]
                                                                                  .shape[1:]).contiguous()
        if "question_positions" in p and kw["input_ids"].dim() == 2 and kind != "span":
            # span pre-training (Splinter): one question token per example, at position 1, with its span's ends
            # (given, the model does not find them by the token's values, which a trace on meta cannot read)
            kw["question_positions"] = torch.ones(B, 1, dtype=torch.long, device=ctx.idev)
            if "start_positions" in p and "end_positions" in p:
                kw["start_positions"] = torch.full((B, 1), 2, dtype=torch.long, device=ctx.idev)
                kw["end_positions"] = torch.full((B, 1), 3, dtype=torch.long, device=ctx.idev)
                kind = "own"
        if "lang_ids" in p:  # per-example language of a language-adapter model (X-MOD): the first one
            kw["lang_ids"] = torch.zeros(B, dtype=torch.long, device=ctx.idev)
        if "token_type_ids" in p and find(cfg, "type_vocab_size") not in (None, 0):
            kw["token_type_ids"] = torch.zeros_like(kw["input_ids"])
        if "bbox" in p:  # integer boxes (0-1000), or normalized float ones where the model takes those (UDOP)
            kw["bbox"] = torch.zeros(*kw["input_ids"].shape, 4, dtype=torch.float if "float-boxes" in variant
                                     else torch.long, device=ctx.idev)
        ctx.desc.insert(0, f"{seq} tokens" + (f" ({n_img} {what}" + (f" and {n_audio} audio" if n_audio else "")
                                              + " placeholders)" if n_img > 0 else
                                              f" ({what})" if n_img < 0 else "")
                        + (f" {what}" if what.startswith("x ") else "")
                        + (" with boxes" if "bbox" in kw else "") + f", vocab {_vocab(cfg)}")
        if "image_sizes" in p and "pixel_values" in kw and "sizes" in variant:
            h, w = _image_hw(ctx)
            kw["image_sizes"] = torch.tensor([[h, w]] * B, device=ctx.idev)
    kw = {k: v for k, v in kw.items() if v is not None}
    if "return_loss" in p:
        kw["return_loss"] = True
        kind = "own"
    if _get(cfg, "is_encoder_decoder", False) and "decoder_input_ids" in p and "input_ids" not in kw and kind != "lm":
        kw["decoder_input_ids"] = _ids(ctx)
    dec_k = _variant_int(variant, "dec-codebooks")
    if dec_k and "decoder_input_ids" in p:  # audio codes, one row per codebook (Dia's decoder), and their labels
        dec_vocab = find(cfg, "vocab_size", prefer=("decoder_config", "decoder"), top_first=False) or _vocab(cfg)
        # the decoder's own layout, batch x frames x codebooks; the labels flattened as its logits are, one row
        # per example and codebook
        kw["decoder_input_ids"] = torch.randint(0, int(dec_vocab), (B, S, dec_k), device=ctx.idev)
        kw["labels"] = kw["decoder_input_ids"].transpose(1, 2).reshape(B * dec_k, S)
        ctx.desc.append(f"{S} audio frames x {dec_k} codebooks (vocab {dec_vocab}) for the decoder")
    if _takes_durations(ctx) and "input_ids" in kw and kw["input_ids"].dim() == 2:
        kw.update(_duration_targets(ctx, kw["input_ids"].shape[1]))
        kind = "own"
    n_labels = _variant_int(variant, "labels")
    if "labels" in kw:  # made with the inputs they align with
        kind = "own"
    elif "labels" in p:
        lab = _labels(ctx, kind, kw)
        if lab is not None:
            kw["labels"] = lab
            kind = "own"
    if "labels3d" in variant and "input_ids" in kw and kw["input_ids"].dim() == 3:  # every codebook's codes
        kw["labels"] = kw["input_ids"].clone()
    if n_labels and "labels" in kw and kw["labels"].dim() == 2:  # as many as the head predicts (Perceiver's decoder)
        kw["labels"] = torch.randint(0, _vocab(cfg), (B, n_labels), device=ctx.idev)
    if kind == "span" and "start_positions" in p:
        kw["start_positions"] = torch.zeros(B, dtype=torch.long, device=ctx.idev)
        kw["end_positions"] = torch.zeros(B, dtype=torch.long, device=ctx.idev)
        kind = "own"
    return kw, kind


# the targets of a duration-based text-to-speech model (FastSpeech 2): per-token durations in frames that expand the
# text to the spectrogram's length (its length regulator), the spectrogram, and per-token variances
_DURATION_TARGETS = ("duration_labels", "spectrogram_labels")
_VARIANCE_TARGETS = ("pitch_labels", "energy_labels")
_FRAMES_PER_SECOND = 100  # log-mel frames a second where a config names no rate (the 10 ms hop of the audio inputs)


def _takes_durations(ctx: _Ctx) -> bool:
    """Whether the forward takes the targets of a duration-based text-to-speech model (:data:`_DURATION_TARGETS`)."""
    return all(n in ctx.params for n in _DURATION_TARGETS)


def _duration_targets(ctx: _Ctx, tokens: int) -> dict:
    """The training targets of a text-to-speech model whose length regulator repeats each token's hidden state for
    its duration (FastSpeech 2): ``--audio-seconds`` (10 s by default) of the config's mel bins at 100 frames a
    second, each of the ``tokens`` tokens lasting an equal whole number of frames (at least 1), the durations real
    (the regulator reads them to size the spectrogram), pitch and energy one value per token."""
    B, cfg = ctx.batch, ctx.cfg
    mel = find(cfg, *_MEL_FIELDS, prefer=_SUB_AUDIO)
    mel = int(mel) if isinstance(mel, int) and not isinstance(mel, bool) and mel > 0 else 80
    secs = _audio_seconds(ctx, 10.0)
    per_token = max(1, round(secs * _FRAMES_PER_SECOND / tokens))
    frames = per_token * tokens
    out = {"duration_labels": torch.full((B, tokens), per_token, dtype=torch.long, device=ctx.value_dev),
           "spectrogram_labels": torch.randn(B, frames, mel)}
    for n in _VARIANCE_TARGETS:
        if n in ctx.params:
            out[n] = torch.randn(B, tokens, 1)
    ctx.desc.append(f"targets: {frames} frames of {mel} mel bins, {per_token} per token")
    variances = [n.split("_")[0] for n in _VARIANCE_TARGETS if n in ctx.params]
    ctx.notes.append(f"{_get(cfg, 'model_type', 'the model')}: trained on spectrograms of {frames} frames of {mel} mel "
                     f"bins ({frames / _FRAMES_PER_SECOND:g} s at {_FRAMES_PER_SECOND} frames a second: --audio-seconds "
                     f"{secs:g} in whole frames per token), each of the {tokens} tokens lasting {per_token} frames (the "
                     "durations its length regulator expands the text by)"
                     + (f", with per-token {' and '.join(variances)} targets" if variances else ""))
    return out


def _takes(ctx: _Ctx, name: str) -> bool:
    """Whether the forward takes the input ``name``: in its signature, or passed on through ``**kwargs`` to its
    base model's forward that names it (BltForCausalLM -> BltModel's ``patch_lengths``)."""
    if name in ctx.params:
        return True
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ctx.params.values()):
        return False
    base = getattr(ctx.model, "base_model", None)
    try:
        return base is not None and base is not ctx.model and name in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return False


def _variant_int(variant, key: str, default: int | None = 0) -> int | None:
    """The number an input-form variant carries as ``key=N`` (``width=560``, ``streams=33``), else ``default``."""
    return next((int(v[len(key) + 1:]) for v in variant if v.startswith(key + "=")), default)


# text-to-speech models trained on continuous latents of their audio tokenizer (Pocket TTS): the config fields of
# (the token that opens the audio, the token of each audio frame, a frame's width)
_LATENT_FRAMES = (("audio_bos_token_id", "audio_latent_token_id", "latent_dim"),)


def _latent_frames(ctx: _Ctx) -> tuple[int, int, int] | None:
    """(audio BOS token, frame token, frame width) of a model whose labels are frames of continuous latents, each
    at a position of its frame token in ``input_ids`` (:data:`_LATENT_FRAMES`); None for any other."""
    if "labels" not in ctx.params or "input_ids" not in ctx.params:
        return None
    for fields in _LATENT_FRAMES:
        vals = [_get(ctx.cfg, f, None) for f in fields]
        if all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in vals) and vals[2] > 0:
            return tuple(vals)
    return None


# config fields whose factors multiply to the one sequence length a model trains at, with the flag that turns
# them on: Reformer's axial position embeddings (``axial_pos_shape`` (64, 64): 4096 tokens)
_FIXED_LENGTH = (("axial_pos_shape", "axial_pos_embds"),)


def _fixed_length(cfg) -> tuple[int, str] | None:
    """(the length, what says so) where the config fixes the training sequence length (:data:`_FIXED_LENGTH`)."""
    for shape_field, flag in _FIXED_LENGTH:
        shape = _get(cfg, shape_field, None)
        if _get(cfg, flag, True) and isinstance(shape, (list, tuple)) and shape \
                and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape):
            n = math.prod(shape)
            return n, f"its {shape_field} {tuple(shape)} multiply to {n}"
    return None


def _codebooks(ctx: _Ctx) -> int:
    """The codebooks of a model whose forward documents its ids as ``(batch_size * num_codebooks,
    sequence_length)`` (audio-code decoders such as MusicGen's); 0 for any other."""
    k = _get(ctx.cfg, "num_codebooks", None)
    doc = getattr(ctx.model.forward, "__doc__", None) or ""
    if isinstance(k, int) and k > 1 and "input_ids (`torch.LongTensor` of shape `(batch_size * num_codebooks" in doc:
        return k
    return 0


def _needs_pixels(cls, cfg=None) -> bool:
    """Whether a model that takes text too trains on its images: by its class name, or a config of one stream
    with its own image geometry (``image_size`` and ``patch_size`` beside the text fields: ViLT, UDOP)."""
    n = cls.__name__
    if any(w in n for w in ("Vision", "Image", "Visual", "Video", "Pix", "Vit", "ViT")):
        return True
    return cfg is not None and "image_size" in vars(cfg) and "patch_size" in vars(cfg)


def _labels(ctx: _Ctx, kind: str, kw: dict):
    B, cfg = ctx.batch, ctx.cfg
    if kind == "lm":
        k = _codebooks(ctx)
        if "input_ids" in kw and k and "(batch_size, sequence_length, num_codebooks)" in (ctx.model.forward.__doc__ or ""):
            return kw["input_ids"].reshape(B, k, -1).transpose(1, 2).contiguous()  # batch x seq x codebooks
        if "input_ids" in kw and k:
            return None  # a layout of labels not documented: the stand-in loss
        if "input_ids" in kw:
            regions = next((kw[n].shape[1] for n in ("visual_embeds", "visual_feats") if n in kw), 0)
            if regions and "total_sequence_length" in (ctx.model.forward.__doc__ or ""):
                # labels over the text and the regions together (VisualBERT's pre-training): none on the regions
                pad = torch.full((B, regions), -100, dtype=torch.long, device=kw["input_ids"].device)
                return torch.cat([kw["input_ids"], pad], 1)
            if kw["input_ids"].dim() == 3 and kw["input_ids"].dtype == torch.long:  # streams: the first (text) one
                return kw["input_ids"][..., 0].clone()
            return kw["input_ids"].clone()
        if _get(cfg, "is_encoder_decoder", False) or "decoder_input_ids" in ctx.params:
            return _ids(ctx)  # the decoder's target text (speech or image in, text out)
        return None
    if kind == "class":
        return torch.randint(0, _num_labels(cfg), (B,), device=ctx.idev)
    if kind == "choice":
        return torch.randint(0, 2, (B,), device=ctx.idev)
    if kind == "token" and "input_ids" in kw:
        return torch.randint(0, _num_labels(cfg), kw["input_ids"].shape[:2], device=ctx.idev)
    return None  # CTC: aten's ctc_loss has no meta kernel; loss_fn prices it as a frame-wise log-softmax


def _standin_loss(out):
    """The mean of every floating tensor a head returns: a loss of negligible cost through all of them."""
    vals = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else [out]
    total = None
    for v in vals:
        if isinstance(v, (tuple, list, dict)):
            v = _standin_loss(v)
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.requires_grad:
            m = v.float().mean()
            total = m if total is None else total + m
    return total


# --- the step ---------------------------------------------------------------------------------------------
def _no_specaugment(cfg, device, notes: list[str]) -> None:
    """SpecAugment (wav2vec2, HuBERT, SEW...) draws its time and feature masks with numpy on the CPU, which
    meta tensors cannot index; its masked fill costs next to nothing, so the built model's forward skips it
    (the model keeps its mask embedding: its parameters are the config's)."""
    if device.type != "meta":
        return
    off = [k for k in ("mask_time_prob", "mask_feature_prob") if (_get(cfg, k, 0) or 0) > 0]
    for k in off:
        setattr(cfg, k, 0.0)
    if off:
        notes.append("SpecAugment's masking (" + ", ".join(off) + ") is left out: it is drawn on the CPU with "
                     "numpy, and its masked fill costs next to nothing")


def _no_layerdrop(model, notes: list[str]) -> None:
    """LayerDrop skips each layer with probability ``layerdrop`` by a draw of ``torch.rand([])`` on the CPU (a
    real random number even on meta): two traces of one model would differ. The built model runs every layer;
    the note says by how much real training runs fewer on average."""
    drops = {}
    for m in model.modules():
        p = getattr(m, "layerdrop", None)
        if isinstance(p, float) and not isinstance(p, bool) and p > 0:
            drops[type(m).__name__] = p
            m.layerdrop = 0.0
    # layers that read their probability from the config at each step (SeamlessM4T's
    # ``config.speech_encoder_layerdrop``)
    cfg = getattr(model, "config", None)
    for c in [cfg, *_subconfigs(cfg)] if cfg is not None else []:
        for k, p in list(vars(c).items()):
            if k.endswith("layerdrop") and isinstance(p, float) and not isinstance(p, bool) and p > 0:
                drops[f"config.{k}"] = p
                setattr(c, k, 0.0)
    if drops:
        notes.append("LayerDrop is left out (every layer runs; real training skips each with probability "
                     + ", ".join(f"{p:g} in {n}" for n, p in sorted(drops.items())) + ", on average that share of "
                     "those layers' work less)")


def _prepare_config(cfg, notes: list[str]) -> None:
    for c in [cfg, *_subconfigs(cfg)]:
        if _get(c, "use_cache") is not None:
            c.use_cache = False
    if _get(cfg, "is_encoder_decoder", False) and _get(cfg, "decoder_start_token_id", None) is None:
        cfg.decoder_start_token_id = _get(cfg, "pad_token_id", None) or 0  # labels shift right from it
    dec = _get(cfg, "decoder", None)
    if dec is not None and _get(cfg, "decoder_start_token_id", None) is None and _get(cfg, "decoder") is not None:
        cfg.decoder_start_token_id = _get(dec, "decoder_start_token_id", None) or _get(dec, "bos_token_id", None) or 0
    if _get(cfg, "pad_token_id", 0) is None and _get(cfg, "is_encoder_decoder", False):
        cfg.pad_token_id = 0
    if hasattr(dec, "to_dict") and _get(cfg, "pad_token_id", None) is None:  # labels shift with the decoder's padding id
        cfg.pad_token_id = _get(dec, "pad_token_id", None) or 0


_DERIVED_WHY = {
    "head_dim": "(hidden_size / num_attention_heads)",
    "num_key_value_heads": "(num_attention_heads)",
    "vocabulary_map": "(a map of token ids, which sizes nothing)",
    "layer_types": "(every layer full attention: the type transformers' configs give a layer the config does not "
                   "name otherwise, Lfm2Config's where it names no attention layers)",
    "class_thresholds": "(a detector's score threshold per label, which selects boxes but sizes nothing: 0.5, "
                        "the usual one, for each of its num_labels labels)",
    "class_order": "(a reading-order priority per label, which sizes nothing: the labels' own order)",
    "mlp_layer_types": "(the first first_k_dense_replace layers dense, the rest mixture-of-experts: the convention of "
                       "transformers' configs that derive the list, DeepSeek-V3's, Kimi Linear's, Cohere 2 MoE's, "
                       "with their default of one dense layer where the config names none)",
}


def _image_vocabulary(vocab: int, codes: int) -> dict[str, int]:
    """A tokenizer's map of image tokens as Chameleon's names them, for a config that leaves it out: ``<image>`` on
    the vocabulary's last id (the id traincast's image placeholders take where a config names none) and one
    ``IMGIMG<code in letters A-J>Z`` token per code of the image tokenizer on the ids before it. Only ids: which
    ids the image codes take sizes nothing."""
    digits = {str(i): chr(ord("A") + i) for i in range(10)}
    out = {"<image>": vocab - 1}
    for code in range(codes):
        out["IMGIMG" + "".join(digits[d] for d in str(code)) + "Z"] = vocab - 1 - codes + code
    return out


def _derived_fields(cfg) -> dict[str, tuple[object, str, object]]:
    """Config fields left ``None`` that follow from the config's own other fields by transformers' convention:
    ``head_dim`` (``hidden_size / num_attention_heads``), ``num_key_value_heads`` (``num_attention_heads``:
    no grouped-query attention), a detector's per-label ``class_thresholds`` (0.5) and ``class_order`` (the labels'
    order), values that size nothing, the per-layer type lists ``layer_types`` (every layer ``full_attention``) and
    ``mlp_layer_types`` (``dense`` for the first ``first_k_dense_replace`` layers, default 1, then ``sparse``), as
    the transformers configs that derive them do; and a tokenizer's ``vocabulary_map`` of image tokens (Chameleon),
    which holds only ids: :func:`_image_vocabulary`, one token per code of the config's image tokenizer
    (``vq_config``).
    Keyed by field name: (the config holding it, its name, the value)."""
    out: dict[str, tuple[object, str, object]] = {}
    for c in [cfg, *_subconfigs(cfg)]:
        fields = vars(c)
        vq, vocab = fields.get("vq_config"), fields.get("vocab_size")
        codes = vars(vq).get("num_embeddings") if hasattr(vq, "to_dict") else None
        if "vocabulary_map" in fields and fields["vocabulary_map"] is None and isinstance(vocab, int) \
                and isinstance(codes, int) and not isinstance(codes, bool) and 0 < codes < vocab - 1:
            out.setdefault("vocabulary_map", (c, "vocabulary_map", _image_vocabulary(vocab, codes)))
        layers = fields.get("num_hidden_layers")
        if isinstance(layers, int) and not isinstance(layers, bool) and 0 < layers <= _HF_LIMITS["layers"]:
            if "layer_types" in fields and fields["layer_types"] is None:
                out.setdefault("layer_types", (c, "layer_types", ["full_attention"] * layers))
            dense = fields.get("first_k_dense_replace", 1)
            if "mlp_layer_types" in fields and fields["mlp_layer_types"] is None and isinstance(dense, int) \
                    and not isinstance(dense, bool) and dense >= 0:
                out.setdefault("mlp_layer_types", (c, "mlp_layer_types",
                                                   ["dense" if i < dense else "sparse" for i in range(layers)]))
        labels = fields.get("id2label")
        if isinstance(labels, dict) and labels:
            if "class_thresholds" in fields and fields["class_thresholds"] is None:
                out.setdefault("class_thresholds", (c, "class_thresholds", [0.5] * len(labels)))
            if "class_order" in fields and fields["class_order"] is None:
                out.setdefault("class_order", (c, "class_order", list(range(len(labels)))))
        heads, hidden = fields.get("num_attention_heads"), fields.get("hidden_size")
        if not (isinstance(heads, int) and not isinstance(heads, bool) and heads > 0):
            continue
        if "head_dim" in fields and fields["head_dim"] is None and isinstance(hidden, int) and hidden % heads == 0:
            out.setdefault("head_dim", (c, "head_dim", hidden // heads))
        if "num_key_value_heads" in fields and fields["num_key_value_heads"] is None:
            out.setdefault("num_key_value_heads", (c, "num_key_value_heads", heads))
    return out


def _runs(values: list) -> str:
    """A per-layer list said by its runs: ``dense x 1, sparse x 26``."""
    import itertools

    return ", ".join(f"{v} x {len(list(g))}" for v, g in itertools.groupby(values))


def _fill_derived(exc: BaseException, cfg, notes: list[str] | None) -> bool:
    """Fill the derivable fields (:func:`_derived_fields`) that the code ``exc`` stopped in read; True if any."""
    m = re.search(r"'(\w+Config)' object has no attribute 'num_key_value_heads'", str(exc))
    if isinstance(exc, AttributeError) and m:
        # a config class without the field at all (Moonshine Streaming's decoder): transformers' documented default
        # for it, "if it is not specified, will default to num_attention_heads" (multi-head attention)
        for c in [cfg, *_subconfigs(cfg)]:
            heads = vars(c).get("num_attention_heads")
            if type(c).__name__ == m.group(1) and "num_key_value_heads" not in vars(c) \
                    and isinstance(heads, int) and not isinstance(heads, bool) and heads > 0:
                c.num_key_value_heads = heads
                if notes is not None:
                    notes.append(f"the config's {m.group(1)} has no num_key_value_heads; it is taken as {heads} "
                                 "(num_attention_heads, transformers' default where it is not specified: no "
                                 "grouped-query attention)")
                return True
    derived = _derived_fields(cfg)
    used = [f for f in _empty_fields_used(exc, cfg) if f in derived]
    said = _set_derived(derived, used)
    if notes is not None:
        notes.extend(said)
    return bool(used)


def _set_derived(derived: dict, used: list[str]) -> list[str]:
    """Set the fields ``used`` of :func:`_derived_fields`' answer ``derived``; the notes that say so."""
    said = []
    for f in used:
        c, k, v = derived[f]
        setattr(c, k, v)
        said.append(_derived_note(k, v))
    return said


_DERIVED_TOGETHER = ("class_thresholds", "class_order")  # a detector's per-label post-processing values


def _derived_note(k: str, v) -> str:
    shown = v if not isinstance(v, (dict, list)) else _runs(v) if isinstance(v, list) else (
        f"one made for it: <image> and {len(v) - 1:,} image codes on the vocabulary's last ids")
    return f"the config leaves {k} empty; it is taken as {shown} {_DERIVED_WHY[k]}"


def _derived_fix(exc, cfg):
    """Where a forward stops reading derivable fields the config leaves empty (:func:`_derived_fields`): the repair
    that fills them, as :func:`_fill_derived` does for a constructor. Else None."""
    if exc is None:
        return None
    derived = _derived_fields(cfg)
    used = [f for f in _empty_fields_used(exc, cfg) if f in derived]
    if not used:
        return None
    used += [f for f in _DERIVED_TOGETHER if f in derived and f not in used
             and any(g in used for g in _DERIVED_TOGETHER)]  # filled at once: one repair, not two

    return lambda _cfg: "; ".join(_set_derived(derived, used))


_ROPE_THETA = 10000.0  # RoPE's base where a config names none (the RoFormer / Llama default)


def _fill_rope(exc: BaseException, cfg, notes: list[str] | None) -> bool:
    """Fill the RoPE fields a constructor stopped on (``exc``) where the config leaves them out: a sub-config
    without ``rope_theta`` (DBRX's attention config) takes the one the config names elsewhere; a layer type
    without ``rope_parameters`` (Cohere Compass's default config names none) takes default RoPE at that base.
    The rotary frequencies do not change what a step computes, so the forecast is that of the model; a note
    says what was filled. True if anything was."""
    configs = [cfg, *_subconfigs(cfg)]

    def theta() -> tuple[float, bool]:  # the base the config names elsewhere (True), else the stand-in (False)
        for c in configs:
            rp = _get(c, "rope_parameters")
            for v in ([rp] + list(rp.values()) if isinstance(rp, dict) else []):
                if isinstance(v, dict) and isinstance(v.get("rope_theta"), (int, float)):
                    return float(v["rope_theta"]), True
            if isinstance(vars(c).get("rope_theta"), (int, float)):
                return float(vars(c)["rope_theta"]), True
        return _ROPE_THETA, False

    msg = str(exc)
    m = re.search(r"'(\w+Config)' object has no attribute 'rope_theta'", msg)
    if isinstance(exc, AttributeError) and m:
        for c in configs:
            if type(c).__name__ == m.group(1) and "rope_theta" not in vars(c):
                c.rope_theta, named = theta()
                if notes is not None:
                    whence = "the base the config names elsewhere" if named else "the stand-in"
                    notes.append(f"the config's {m.group(1)} names no rope_theta: it takes {c.rope_theta:g}, {whence} "
                                 "(RoPE's base does not change the step's cost)")
                return True
    if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str):
        kind = exc.args[0]
        for c in configs:
            rp, types = _get(c, "rope_parameters"), _get(c, "layer_types")
            if isinstance(rp, dict) and isinstance(types, (list, tuple)) and kind in types and kind not in rp:
                base, _named = theta()  # (a new dict: default configs may share one rope_parameters dict)
                c.rope_parameters = {**rp, kind: {"rope_type": "default", "rope_theta": base}}
                if notes is not None:
                    notes.append(f"the config names no rope_parameters for its {kind} layers: default RoPE of base "
                                 f"{base:g} stands in (RoPE's parameters do not change the step's cost)")
                return True
    return False


# a constructor's refusal of a width its attention heads do not divide, in transformers' wordings: "embed_dim must be
# divisible by num_heads (got `embed_dim`: 1152 and `num_heads`: 14)", "The hidden size (768) is not a multiple of the
# number of attention heads (10)", "embed_dim (d_model) must be divisible by num_heads, but got 512 and 6"
_HEADS_REFUSAL = re.compile(r"(?:must be divisible by num_heads|is not a multiple of the number of attention heads)")
_HEADS_FIELDS = ("num_attention_heads", "num_heads", "n_head", "n_heads", "encoder_attention_heads",
                 "decoder_attention_heads", "attention_heads")


def _fill_heads(exc: BaseException, cfg, notes: list[str] | None) -> bool:
    """Where a constructor refused a width ``w`` that its ``h`` attention heads do not divide (transformers' default
    Aya Vision config: a SigLIP tower 1152 wide with 14 heads; SigLIP so400m has 16): each config holding that width
    and that head count takes the head count nearest ``h`` that divides ``w`` (the larger of two as near). The heads
    only split the width: the projections' and the attention products' FLOPs are those of the width whatever the
    count; only the softmax over the scores grows with it. A note says so. True if any config changed."""
    if not isinstance(exc, ValueError) or not _HEADS_REFUSAL.search(str(exc)):
        return False
    numbers = [int(x) for x in re.findall(r"\d+", str(exc))]
    if len(numbers) < 2:
        return False
    width, heads = numbers[0], numbers[1]
    if not (0 < heads and width % heads):
        return False
    divisors = {d for k in range(1, math.isqrt(width) + 1) if width % k == 0 for d in (k, width // k)}
    fit = min(divisors, key=lambda d: (abs(d - heads), -d))
    changed = []
    for name, c in _sub_configs(cfg):
        fields = vars(c)
        if not any(fields.get(f) == width and not isinstance(fields.get(f), bool)
                   for f in (*_TOWER_WIDTH_FIELDS, "dim")):
            continue
        for f in _HEADS_FIELDS:
            if fields.get(f) == heads and not isinstance(fields.get(f), bool):
                setattr(c, f, fit)
                changed.append(f"{name}.{f}" if name else f)
    if changed and notes is not None:
        notes.append(f"the config splits a width of {width} over {heads} attention heads ({', '.join(changed)}), which "
                     f"its model refuses: forecast with {fit} heads of {width // fit}, the nearest count that divides "
                     "the width (the heads only split it: the projections and the attention's products cost the same "
                     "whatever the count, the softmax over the scores in proportion to it; set the heads your model "
                     "has in the config.json)")
    return bool(changed)


_LIST_PLUS_TUPLE = 'can only concatenate list (not "tuple") to list'


def _fill_lists(exc: BaseException, cfg, notes: list[str] | None) -> bool:
    """Where a constructor stopped adding a list to a config field that the default config holds as a tuple
    (VitMatte's ``[hidden_size] + config.fusion_hidden_sizes``): the config's tuple fields become lists, the form
    a config.json gives every sequence (the same values). True if any did."""
    if not (isinstance(exc, TypeError) and _LIST_PLUS_TUPLE in str(exc)):
        return False
    changed = []
    for name, c in _sub_configs(cfg):
        for k, v in list(vars(c).items()):
            if isinstance(v, tuple) and not k.startswith("_"):
                setattr(c, k, list(v))
                changed.append(f"{name}.{k}" if name else k)
    if changed and notes is not None:
        notes.append(f"the default config holds {', '.join(changed)} as tuples, which its model adds to lists: read "
                     "as lists, as a config.json gives them (the same values)")
    return bool(changed)


def _config_for(cls, cfg):
    """The config ``cls`` is built from: ``cfg``, or the one sub-config of ``cls``'s own config class where
    ``cfg`` is a composite holding it (MusicGen's decoder for ``MusicgenForCausalLM``)."""
    want = getattr(cls, "config_class", None)
    if not isinstance(want, type) or isinstance(cfg, want):
        return cfg
    subs = [c for c in _subconfigs(cfg) if isinstance(c, want)]
    return subs[0] if len(subs) == 1 else cfg


class BuildError(ConfigError):
    """The head class cannot be built from the config (its constructor refuses it)."""


def _build(cls, cfg, device, name, notes: list[str] | None = None):
    for _ in range(3):  # fields a failure shows the model reads, filled from the config's own (then once more)
        try:
            return _build_once(cls, cfg, device, name)
        except ConfigError as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, Exception) and (_fill_derived(cause, cfg, notes) or _fill_rope(cause, cfg, notes)
                                                 or _fill_lists(cause, cfg, notes) or _fill_heads(cause, cfg, notes)):
                continue
            if _get(cfg, "is_decoder", None) is False and "is_decoder" in str(exc) \
                    and cls.__name__ in _mapping_names().get("CAUSAL_LM", {}).values():
                cfg.is_decoder = True  # a causal-LM head trains its model as a decoder (causal attention)
                if notes is not None:
                    notes.append(f"{cls.__name__} is a causal language model: built with is_decoder=True")
                continue
            raise
    return _build_once(cls, cfg, device, name)


def _build_once(cls, cfg, device, name):
    model = _build_on(cls, cfg, device, name)
    if torch.device(device).type == "meta":
        # parameters made by factories that ignore the device context (``torch.normal(mean, std, size=...)``:
        # DiffLlama's lambdas) join the rest on meta, where the backward's gradients are (a CPU parameter's
        # gradient would be copied out of meta)
        moved: dict[int, nn.Parameter] = {}  # one meta parameter for each shared (tied) one
        for mod in model.modules():
            for k, p in list(mod._parameters.items()):
                if p is not None and p.device.type != "meta":
                    if id(p) not in moved:
                        moved[id(p)] = nn.Parameter(p.to("meta"), requires_grad=p.requires_grad)
                    mod._parameters[k] = moved[id(p)]
    return model


def _build_on(cls, cfg, device, name):
    chose_sdpa = _get(cfg, "_attn_implementation_internal", None) is None
    if chose_sdpa:
        try:
            cfg._attn_implementation = "sdpa"
        except Exception:  # noqa: BLE001 - a config that refuses: its own default
            chose_sdpa = False
    try:
        try:
            with torch.device(device):
                return cls(cfg)
        except (ValueError, ImportError) as exc:
            if not (chose_sdpa and ("scaled_dot_product_attention" in str(exc) or "sdpa" in str(exc).lower()
                                    or "attn_implementation" in str(exc))):
                raise
            cfg._attn_implementation = "eager"  # a class without fused attention: its own matmul-softmax-matmul
            with torch.device(device):
                return cls(cfg)
    except TraincastError:
        raise
    except (ValueError, ArithmeticError) as exc:  # e.g. a hidden size its heads do not divide
        raise BuildError(f"cannot build {name}: {_first_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - any failure of a model's constructor is the config's
        raise BuildError(f"cannot build {name}: {explain(exc, cls.__name__, 'building', cfg)}") from None


def _real_mask(t) -> bool:
    """A boolean tensor on the CPU: a mask whose values traincast made real (see :class:`_MixedDevices`)."""
    return isinstance(t, torch.Tensor) and t.dtype == torch.bool and t.device.type == "cpu"


# ``x.expand_as(other)`` and its kin: the same as by ``other``'s shape
_SHAPED_LIKE = {torch.Tensor.expand_as: torch.Tensor.expand, torch.Tensor.view_as: torch.Tensor.view,
                torch.Tensor.reshape_as: torch.Tensor.reshape}


# set on a config (by :func:`_real_tensors_fix`) whose model reads back integers it wrote onto its device
_REAL_TENSORS = "_traincast_real_tensors"


def _wants_real_tensors(cfg) -> bool:
    return cfg is not None and bool(vars(cfg).get(_REAL_TENSORS))


class _MixedDevices(torch.overrides.TorchFunctionMode):
    """A call that meets meta tensors and CPU tensors (positions a model computes on the CPU from values it
    read, e.g. Qwen2-VL's patch grid; anchors made from numpy) runs on meta: the CPU ones are moved there
    (before autograd records them, so the backward agrees).

    With ``real_tensors`` (a model that reads back what it wrote: :func:`_real_tensors_fix`), integer tensors it
    makes from Python values on its own device (``torch.tensor([[1, h, w]], device=x.device)``) are made on the
    CPU, with their values."""

    def __init__(self, real_tensors: bool = False):
        super().__init__()
        self.real_tensors = real_tensors

    def __torch_function__(self, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_leaves, tree_map

        kwargs = kwargs or {}
        if self.real_tensors and func is torch.tensor and is_meta_device(kwargs.get("device")) and args \
                and not any(isinstance(t, torch.Tensor) for t in tree_leaves(args[0])):
            # integers a model writes from Python values onto its own device (Step 3.7's vision tower:
            # ``torch.tensor([[1, grid_h, grid_w]], device=hidden.device)``, then read with ``.tolist()``): made on
            # the CPU, where the values the model just wrote exist, like the integer values above; floating ones
            # stay on meta
            try:
                made = func(*args, **{**kwargs, "device": "cpu"})
            except Exception:  # noqa: BLE001 - data the CPU refuses (None): as on meta, where it was asked for
                made = None
            if made is not None and not (made.is_floating_point() or made.is_complex()):
                return made
            return func(*args, **kwargs)
        if self.real_tensors and func is torch.arange and is_meta_device(kwargs.get("device")) \
                and all(isinstance(a, int) and not isinstance(a, bool) for a in args) \
                and (kwargs.get("dtype") is None or not (kwargs["dtype"].is_floating_point or kwargs["dtype"].is_complex)):
            # likewise the positions it counts on its own device (RADIO's packed images: ``torch.arange(n,
            # device=hidden.device)`` less each image's start, compared with the prefix length to select the patch
            # rows): on the CPU, so that the mask made of them holds its values and selects its real count
            return func(*args, **{**kwargs, "device": "cpu"})
        if func in (torch.Tensor.to, torch.Tensor.cpu) and args and isinstance(args[0], torch.Tensor) \
                and args[0].device.type == "meta":
            # a meta tensor sent to where the ids live (``.to(input_ids.device)``): the ids are on the CPU only
            # because traincast keeps their values there; in training both are on the GPU, so it stays on meta
            def on_meta(x):
                if isinstance(x, torch.Tensor):  # .to(other): other's dtype, here
                    return x.dtype if x.device.type == "cpu" else x
                if (isinstance(x, torch.device) and x.type == "cpu") or (isinstance(x, str) and x == "cpu"):
                    return torch.device("meta")
                return x

            if func is torch.Tensor.cpu:
                return args[0]
            args = tuple(on_meta(a) for a in args)
            kwargs = {k: on_meta(v) for k, v in kwargs.items()}
            return func(*args, **kwargs)
        if func in (torch.Tensor.to, torch.as_tensor, torch.asarray) and args and isinstance(args[0], torch.Tensor) \
                and args[0].device.type == "cpu" and not args[0].is_floating_point() and not args[0].is_complex():
            # integer values kept on the CPU (sizes, grids, ids) sent to the model's device, to be read
            # (``torch.as_tensor(image_sizes, device=features.device).tolist()``): they stay on the CPU, where
            # their values exist; they join meta tensors in the calls that meet them
            def on_cpu(x):
                if isinstance(x, torch.device) and x.type == "meta" or isinstance(x, str) and x == "meta":
                    return torch.device("cpu")
                if isinstance(x, torch.Tensor) and x.device.type == "meta":  # .to(other): other's dtype, here
                    return x.dtype
                return x

            args = (args[0], *(on_cpu(a) for a in args[1:]))
            kwargs = {k: on_cpu(v) for k, v in kwargs.items()}
            return func(*args, **kwargs)
        if func in _SHAPED_LIKE and len(args) == 2 and _real_mask(args[0]) and isinstance(args[1], torch.Tensor) \
                and args[1].device.type == "meta":
            # a real mask shaped like a meta tensor (``mask.unsqueeze(-1).expand_as(inputs_embeds)``) reads only the
            # other's shape: it keeps its values, on the CPU, so that what it selects is counted exactly
            return _SHAPED_LIKE[func](args[0], args[1].shape)

        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and len(args) >= 2 \
                and isinstance(args[0], torch.Tensor) and args[0].device.type == "meta" \
                and (_real_mask(args[1]) or isinstance(args[1], tuple) and sum(map(_real_mask, args[1])) == 1):
            # a boolean mask with real values (where the image features go) selects its real count: as the
            # indices it holds, so that the backward of the selection has the forward's shape; in a tuple
            # (``hidden[mask, :]``), its indices spliced in its place
            # (only the count matters on meta: indices of that length, without listing a B x S x H mask's)
            parts = args[1] if isinstance(args[1], tuple) else (args[1],)
            idx = tuple(x for part in parts for x in (
                tuple(torch.zeros(int(part.sum()), dtype=torch.long, device="meta") for _ in range(part.dim()))
                if _real_mask(part) else (part,)))
            args = (args[0], idx, *args[2:])
        if func in (torch.repeat_interleave, torch.Tensor.repeat_interleave) and len(args) >= 2 \
                and isinstance(args[0], torch.Tensor) and args[0].device.type == "meta" \
                and isinstance(args[1], torch.Tensor) and args[1].device.type == "cpu" and args[1].dim() == 1 \
                and not args[1].is_floating_point() and kwargs.get("output_size") is None:
            # repeats with real values (durations a length regulator expands by): the output is as long as they sum to
            kwargs = {**kwargs, "output_size": int(args[1].sum())}
        leaves = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        # a CPU scalar tensor mixes with any device, except as the fill value of masked_fill (SEW-D's mask)
        scalar_ok = func not in (torch.Tensor.masked_fill, torch.Tensor.masked_fill_, torch.masked_fill)
        if any(t.device.type == "meta" for t in leaves) and any(t.device.type == "cpu" and (t.dim() > 0 or not scalar_ok)
                                                                for t in leaves):
            args, kwargs = tree_map(lambda t: t.detach().to("meta") if isinstance(t, torch.Tensor)
                                    and t.device.type == "cpu" else t, (args, kwargs))
        return func(*args, **kwargs)


class _DryRun(torch.utils._python_dispatch.TorchDispatchMode):
    """A forward without autograd on meta tensors: value reads answer as the tracer answers them (checks
    true, counts one), and ``masked_scatter`` (how vision-language models put image features into the
    placeholder tokens' embeddings) records how many embedding rows the features fill."""

    def __init__(self, masks=()):
        super().__init__()
        self.scattered_rows: list[int] = []
        self.widths: tuple[int, int] | None = None  # (features, embeddings) where a scatter's widths differ
        self.masks = {tuple(m.shape) for m in masks}  # the shapes of the integer feature masks given to the forward

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.index.Tensor and self.masks and any(
                isinstance(i, torch.Tensor) and not i.is_floating_point() and i.dtype != torch.bool
                and tuple(i.shape) in self.masks for i in args[1]):
            # an integer feature mask (all ones) used as an index: gathers row 1 again and again, where the model
            # means a boolean mask (Granite Speech: audio_features[input_features_mask], its processor's booleans)
            raise IndexError("a feature mask indexes the features: it takes a bool mask")
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
            t = args[0]
            return True if t.dtype == torch.bool else (1.0 if t.is_floating_point() else 1)
        if func in (torch.ops.aten.masked_scatter.default, torch.ops.aten.masked_scatter_.default):
            dest, src = args[0], args[2]
            if dest.dim() >= 2 and dest.shape[-1] > 0:
                if src.dim() >= 2 and src.shape[-1] != dest.shape[-1]:  # meta's masked_scatter does not check
                    self.widths = (int(src.shape[-1]), int(dest.shape[-1]))
                self.scattered_rows.append(src.numel() // dest.shape[-1])
        return func(*args, **kwargs)


@contextlib.contextmanager
def _checks_off():
    """transformers' ``torch_compilable_check`` (placeholder count == feature count, ...) passes: the dry run
    is there to learn the counts the model makes. Yields the messages of the checks that failed on values that
    exist (a count that a later step then trips over: :func:`_dry_run` hands them on with its exception)."""
    import sys

    failed: list[str] = []

    def passes(cond=True, msg="", *_a, **_k):
        try:
            value = cond() if callable(cond) else cond
            if isinstance(value, torch.Tensor):
                if value.device.type == "meta":
                    return None
                value = bool(value.all())
            if not value:
                failed.append(str(msg() if callable(msg) else msg))
        except Exception:  # noqa: BLE001 - a check whose condition has no value here: passed
            pass
        return None

    patched = []
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("transformers") and callable(
                getattr(mod, "torch_compilable_check", None)):
            patched.append((mod, mod.torch_compilable_check))
            mod.torch_compilable_check = passes
    try:
        yield failed
    finally:
        for mod, fn in patched:
            mod.torch_compilable_check = fn


_LAST_CHECKS: list[str] = []  # the checks the last dry run that ran to its end passed over (:func:`_checks_off`)
_NO_PLACEHOLDERS = re.compile(r"tokens:? 0\b.*?features:? (\d+)", re.I)  # a count check naming no modality
_AUDIO_MISMATCH = re.compile(r"audio (?:features and audio )?tokens?.*?tokens:? 0\b.*?features:? (\d+)", re.I)


# PyTorch's (and :mod:`selections`') IndexError for a boolean mask of another shape than what it indexes
_MASK_SHAPE = re.compile(r"shape of the mask \[([\d, ]+)\] at index \d+ does not match the shape of the indexed tensor "
                         r"\[([\d, ]+)\] at index (\d+)")


# a forward that computes everything, then reads a field the output of one of its parts lacks (transformers' Llama 4
# of this release: ``Llama4ForConditionalGeneration`` reads ``outputs.image_outputs`` off its text model's
# ``MoeCausalLMOutputWithPast``, which has no such field, so every training step stops at its end)
_OUTPUT_FIELDS_ADDED: dict[type, set[str]] = {}  # model class -> the fields read as None for it


def _output_bug(exc) -> bool:
    """Whether ``exc`` is a forward reading a field a transformers output dataclass lacks (``exc.obj`` a
    ``ModelOutput``, ``exc.name`` the field) that is not a field of that class."""
    from transformers.utils import ModelOutput

    obj, field_ = getattr(exc, "obj", None), getattr(exc, "name", None)
    return (isinstance(exc, AttributeError) and isinstance(obj, ModelOutput) and isinstance(field_, str)
            and field_.isidentifier() and not hasattr(type(obj), field_)
            and field_ not in getattr(type(obj), "__dataclass_fields__", {}))


def _dry_run(model, kw) -> tuple[Exception | None, list[int]]:
    """Run the forward once without autograd on the meta device: the exception it raises (None: it ran), and
    the rows each ``masked_scatter`` filled."""
    from traincast.workload.selections import ExpectedSelections
    from traincast.workload.tracer import BalancedExperts

    mode = _DryRun([v for k, v in kw.items() if k in _FEATURE_MASKS and isinstance(v, torch.Tensor)
                    and v.dtype != torch.bool and not v.is_floating_point()])
    _LAST_CHECKS.clear()
    failed: list[str] = []
    selections = ExpectedSelections()
    try:
        real = _wants_real_tensors(getattr(model, "config", None))
        with torch.no_grad(), BalancedExperts(), mode, _MixedDevices(real), selections, _checks_off() as failed:
            model(**kw)
    except Exception as exc:  # noqa: BLE001 - judged by the caller
        if _output_bug(exc):  # the forward ran, then read a field its text model's output lacks: read as None
            setattr(type(exc.obj), exc.name, None)
            _OUTPUT_FIELDS_ADDED.setdefault(type(model), set()).add(f"{type(exc.obj).__name__}.{exc.name}")
            return _dry_run(model, kw)
        try:  # the selections it sized as full on its way (a count of rows that real values would have made smaller)
            exc.dense_selections = selections.dense
        except Exception:  # noqa: BLE001 - an exception that takes no attributes
            pass
        if mode.widths is None:
            try:  # the checks it passed over on its way (a placeholder count it then tripped over)
                exc.failed_checks = list(failed)
            except Exception:  # noqa: BLE001 - an exception that takes no attributes
                pass
            return exc, mode.scattered_rows
    _LAST_CHECKS[:] = failed
    if mode.widths is not None:  # features of one width put into embeddings of another: the config's towers
        # (which come first where the forward then stops: rows counted in the wrong width mislead what follows)
        f, e = mode.widths
        return _WidthMismatch(f"the image/audio features are {f} wide but the text embeddings they fill are {e} "
                              "wide", (f, e)), mode.scattered_rows
    return None, mode.scattered_rows


class _WidthMismatch(ValueError):
    """A projector whose features do not fit the text model's embeddings (found in the dry run); ``widths``:
    (the features', the embeddings')."""

    def __init__(self, message: str, widths: tuple[int, int]):
        super().__init__(message)
        self.widths = widths


# the config fields naming the width of the features a vision or audio tower hands the text model, most specific
# first; ``hidden_size`` last (Qwen2-VL's vision config: its ``embed_dim`` is the tower's, ``hidden_size`` the
# merger's output; Ovis2's top-level ``hidden_size``: its visual embedding table's)
_OUT_WIDTH_FIELDS = ("out_hidden_size", "output_hidden_size", "output_dim", "projector_hidden_size",
                     "projection_dim", "hidden_size")


def _align_widths(features: int | None, embeddings: int | None, cfg) -> str | None:
    """Set the field that makes a vision/audio tower's features ``features`` wide to ``embeddings`` (the text
    model's width), where a field outside the text model's config holds that value; the note saying so, or
    None (nothing evident to change). Widths None (the forward said only that the features do not fit): the
    text config's ``hidden_size``, and the first output-width field that differs from it (a ``hidden_size``
    only where its config names the tower's own width apart, as ``embed_dim``)."""
    named = [(k, v) for k, v in _sub_configs(cfg) if k]  # every config inside cfg, by its dotted name
    text = [v for k, v in named if k.rsplit(".", 1)[-1] in _SUB_TEXT]
    if embeddings is None:
        embeddings = _get(text[0], "hidden_size") if len(text) == 1 else None
        if not isinstance(embeddings, int) or isinstance(embeddings, bool):
            return None
    places = [(k + ".", v) for k, v in named if all(v is not t for t in text)] + [("", cfg)]
    for field_ in _OUT_WIDTH_FIELDS:
        for prefix, c in places:
            v = vars(c).get(field_)
            if not isinstance(v, int) or isinstance(v, bool):
                continue
            if features is None and v != embeddings and (field_ != "hidden_size" or "embed_dim" in vars(c)):
                features = v
            if v == features:
                setattr(c, field_, embeddings)
                return (f"the config pairs a tower whose features are {features} wide with a text model {embeddings} "
                        f"wide, which cannot run; forecast with {prefix}{field_} = {embeddings} (set the widths your "
                        "model has in the config.json)")
    return None


def _rebuild_at(snap, cfg) -> str | None:
    """Build the vision tower for the snapped image size (as ``--image-size`` would); the note saying so."""
    (h, w), _, why, _step = snap
    if h != w or not _set_image_size(cfg, h):  # (a config naming no image size: nothing to build it for)
        return None
    return f"{why}, and its vision tower takes no other size: it is built for {h}x{w} images (as --image-size {h} would)"


_SECTIONS = re.compile(r"split_with_sizes expects split_sizes to sum exactly to (\d+).*?split_sizes=\[([\d, ]+)\]")


_NO_SECTIONS = re.compile(r"expects at least (\d+) multimodal RoPE axes, got 0")


def _rope_sections_missing(exc, cfg):
    """Where a forward needs ``k`` multimodal RoPE sections and the config names none (transformers' default
    HunYuan-VL config: no ``mrope_section`` at all), the repair that splits the rotary half-dimensions (``head_dim
    // 2``, what the sections must sum to) into ``k`` near-equal sections, or None. As above, how the rotary
    dimensions are split between the axes does not change the step's cost."""
    m = _NO_SECTIONS.search(str(exc)) if exc is not None else None
    if not m:
        return None
    k = int(m.group(1))

    def repair(cfg):
        for c in [*_subconfigs(cfg, _SUB_TEXT), cfg]:
            rp = _get(c, "rope_parameters")
            heads, width = _get(c, "num_attention_heads"), _get(c, "hidden_size")
            head_dim = _get(c, "head_dim") or (width // heads if isinstance(width, int) and heads else None)
            if isinstance(rp, dict) and "mrope_section" not in rp and isinstance(head_dim, int) and head_dim >= 2 * k:
                half = head_dim // 2
                sections = [half // k + (1 if i < half % k else 0) for i in range(k)]
                c.rope_parameters = {**rp, "mrope_section": sections}  # a new dict (defaults may share one)
                return (f"the config names no multimodal RoPE sections and the model needs {k}: forecast with "
                        f"mrope_section {sections}, the {half} rotary half-dimensions split evenly (the split does "
                        "not change the step's cost)")
        return None

    return repair


def _rope_sections_fix(exc, cfg):
    """Where a forward stops splitting the rotary dimensions by the config's multimodal RoPE sections
    (``mrope_section``) that sum to a fraction of them (transformers' default GLM-4V config: [8, 12, 12] of 64):
    the repair that scales the sections to the dimensions they split (in proportion, rounded to whole dimensions
    that sum to them: [8, 12, 12] of 11 -> [3, 4, 4]), or None. The split of the rotary
    dimensions between time, height and width does not change the step's cost."""
    m = _SECTIONS.search(str(exc)) if exc is not None and not _dense_split(exc) else None
    if not m:
        return _rope_sections_missing(exc, cfg)
    total, sections = int(m.group(1)), [int(x) for x in m.group(2).split(",")]
    if sum(sections) <= 0 or total < len(sections) or any(x <= 0 for x in sections):
        return None
    # in proportion, rounded to whole dimensions that sum to the total (largest remainders first), each at least 1
    exact = [x * total / sum(sections) for x in sections]
    scaled = [max(1, int(x)) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: int(exact[i]) - exact[i]):  # largest remainder first
        if sum(scaled) >= total:
            break
        scaled[i] += 1
    while sum(scaled) > total:  # (only where a section rounded up to 1): from the largest
        scaled[scaled.index(max(scaled))] -= 1

    def repair(cfg):
        configs = [*_subconfigs(cfg, _SUB_TEXT), cfg]
        # the config's own sections, else (the model's code defaults them) the first RoPE parameters naming none
        for named in (True, False):
            for c in configs:
                for field_ in ("rope_parameters", "rope_scaling"):
                    rp = _get(c, field_)
                    if isinstance(rp, dict) and (rp.get("mrope_section") == sections if named
                                                 else "mrope_section" not in rp):
                        setattr(c, field_, {**rp, "mrope_section": scaled})  # a new dict (defaults may share one)
                        return (f"the multimodal RoPE sections {sections} sum to {sum(sections)}, not the {total} "
                                f"rotary dimensions the model splits by them: forecast with mrope_section {scaled} "
                                "(the split does not change the step's cost)")
        return None

    return repair


def _backbone_widths(cfg) -> tuple[int, int] | None:
    """(the head's ``hidden_size``, the backbone's ``hidden_size``) of a model built on a backbone (a config with
    ``backbone_config``) where the two differ (transformers' default VitMatte config: a decoder taking 384 channels
    after a ViTDet backbone 768 wide); else None."""
    back = vars(cfg).get("backbone_config")
    own, width = vars(cfg).get("hidden_size"), vars(back).get("hidden_size") if back is not None else None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (own, width)) or own == width:
        return None
    return own, width


def _backbone_width_fix(exc, cfg):
    """Where a head narrower or wider than its backbone (:func:`_backbone_widths`) stops the forward on a
    convolution's channels: the repair that sets the head's ``hidden_size`` to the width the backbone makes, or
    None."""
    widths = _backbone_widths(cfg)
    if widths is None or exc is None or "Invalid channel dimensions" not in str(exc):
        return None
    own, width = widths

    def repair(cfg):
        cfg.hidden_size = width
        return (f"the config's head takes features {own} wide (hidden_size) from a backbone {width} wide "
                f"(backbone_config.hidden_size), which cannot run: forecast with hidden_size = {width} (set the "
                "widths your model has in the config.json)")

    return repair


def _field_repair(config, field_: str, value, note: str):
    """The repair that sets ``config.field_`` to ``value`` and returns ``note`` (what the forecast says)."""
    def repair(_cfg):
        setattr(config, field_, value)
        return note

    return repair


_UNBOUND_CLAMP = "clamp called but both min and max are none"


def _unset_bounds(cfg) -> list[tuple[str, object, str]]:
    """The config fields named as a clamp's bound (``clip``/``clamp`` in the name: DBRX's ``attn_config.clip_qkv``)
    that the config leaves None: (dotted name, the config holding it, the field)."""
    return [(f"{k}.{f}" if k else f, c, f) for k, c in _sub_configs(cfg) for f, v in list(vars(c).items())
            if v is None and re.search(r"clip|clamp", f) and not f.startswith("_")]


def _unbound_clamp_fix(exc, cfg):
    """Where a forward clamps by a bound the config leaves None (``x.clamp(min=-c, max=c)``: ``clamp called but
    both min and max are none``; transformers' default DBRX config), and exactly one config field named as a
    clamp's bound is None: the repair that sets it to infinity, a bound that never binds (the forward a config
    that clips nothing would run; a clamp costs the same whatever its bounds). Else None."""
    unset = _unset_bounds(cfg)
    if exc is None or _UNBOUND_CLAMP not in str(exc).lower() or len(unset) != 1:
        return None
    dotted, c, field_ = unset[0]
    return _field_repair(c, field_, float("inf"),
                         f"the model clamps by {dotted}, which the config leaves None (the forward stops: clamp called "
                         f"but both min and max are none): forecast with {dotted} = inf, a bound that never binds (a "
                         "clamp costs the same whatever its bound; set the model's own in the config.json)")


def _family_token_default(exc, cfg) -> tuple[object, str, int, str] | None:
    """Where ``exc`` is a config class lacking a token id the model reads (``'XConfig' object has no attribute
    'vision_start_token_id'``: transformers' Qwen2.5-Omni thinker config declares none, its rotary positions read
    it): (the config, the field, the default another config class of the same configuration module declares for
    it, that class's name), where exactly one value is declared there; else None. Token ids size nothing."""
    m = re.search(r"'(\w+Config)' object has no attribute '(\w+_token_(?:id|index))'", str(exc))
    if not (isinstance(exc, AttributeError) and m):
        return None
    import sys

    owner, field_ = m.group(1), m.group(2)
    for c in [cfg, *_subconfigs(cfg)]:
        if type(c).__name__ != owner or field_ in vars(c):
            continue
        module = sys.modules.get(type(c).__module__)
        found = {k.__name__: k.__dict__[field_] for k in vars(module or object).values()
                 if isinstance(k, type) and k.__module__ == type(c).__module__ and field_ in k.__dict__
                 and isinstance(k.__dict__[field_], int) and not isinstance(k.__dict__[field_], bool)}
        if len(set(found.values())) == 1:
            other, value = next(iter(found.items()))
            return c, field_, value, other
    return None


def _family_token_fix(exc, cfg):
    """The repair that gives a config the token id it lacks from its model family (:func:`_family_token_default`),
    or None."""
    found = _family_token_default(exc, cfg)
    if found is None:
        return None
    c, field_, value, other = found
    return _field_repair(c, field_, value,
                         f"the config's {type(c).__name__} has no {field_}, which its forward reads: it takes {value}, "
                         f"the default its model family's {other} declares (a token id: it sizes nothing)")


_META_VALUES = "cannot copy out of meta tensor"


_ROW_SPLIT = re.compile(r"split_with_sizes expects split_sizes to sum exactly to (\d+) \(input tensor's size at "
                        r"dimension 0\), but got split_sizes=\[([\d, ]+)\]")


def _dense_split(exc) -> bool:
    """Whether ``exc`` is a split of rows by real counts (``image_grid_hw.prod(-1).tolist()``) that sum to fewer than
    the rows a selection sized as full made (RADIO's packed images: the patch rows selected by comparing positions
    made on the device, less each image's 10 class and register tokens): real values would have selected fewer."""
    m = _ROW_SPLIT.search(str(exc)) if exc is not None else None
    return bool(m) and getattr(exc, "dense_selections", 0) > 0 and sum(map(int, m.group(2).split(","))) < int(m.group(1))


def _real_tensors_fix(exc, cfg):
    """Where a forward reads the values of a tensor on meta (``Cannot copy out of meta tensor``: Step 3.7's vision
    tower writes its patch grid with ``torch.tensor([[1, h, w]], device=hidden.device)`` and reads it back with
    ``.tolist()``): the repair that has integer tensors the model makes from Python values on its device made on
    the CPU with those values (:class:`_MixedDevices`), or None (done already, or another stop). Only then: a
    model that never reads them back keeps them on meta, where using them costs no copy from the CPU."""
    if exc is None or _wants_real_tensors(cfg) or not (_META_VALUES in str(exc).lower() or _dense_split(exc)):
        return None

    def repair(cfg):
        setattr(cfg, _REAL_TENSORS, True)
        return ("the forward reads back integers it writes onto its device (torch.tensor(..., device=...) of Python "
                "values: grids, sizes), which meta tensors do not hold: they were made on the CPU with those values, "
                "what training reads")

    return repair


_UNSET_WINDOW = "could not find a `sliding_window` argument in the config, or it is not set"


def _unused_windows(cfg) -> list[tuple[str, object, int]]:
    """The (sub-)configs that leave ``sliding_window`` None while their ``layer_types`` name no sliding layer (a
    window no layer uses): (dotted name, the config, its position limit: a window that never binds)."""
    out = []
    for k, c in _sub_configs(cfg):
        fields = vars(c)
        types, limit = fields.get("layer_types"), fields.get("max_position_embeddings")
        if "sliding_window" in fields and fields["sliding_window"] is None and isinstance(types, (list, tuple)) \
                and types and not any("sliding" in str(t) for t in types) \
                and isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            out.append((f"{k}.sliding_window" if k else "sliding_window", c, limit))
    return out


def _unused_window_fix(exc, cfg):
    """Where a forward builds the mask of sliding-window layers (transformers' ``create_sliding_window_causal_mask``)
    that the config has none of, and stops because the config leaves ``sliding_window`` None (Step 3.7's text
    model: every layer full attention): the repair that sets the window of each such config to its position limit,
    a window that never binds (no layer attends through the mask it makes; a checkpoint names its own). Else None."""
    unset = _unused_windows(cfg)
    if exc is None or _UNSET_WINDOW not in str(exc).lower() or not unset:
        return None

    def repair(_cfg):
        for _dotted, c, limit in unset:
            c.sliding_window = limit
        return (f"the forward builds a sliding-window mask, but the config leaves "
                f"{', '.join(d for d, _c, _l in unset)} None and names no sliding layer (layer_types): forecast with "
                f"{', '.join(f'{d} = {lim}' for d, _c, lim in unset)}, the position limit, a window that never binds "
                "(no layer uses it)")

    return repair


_REDUCTION = re.compile(r"a and b must have same reduction dim, but got \[\d+, (\d+)\] X \[(\d+), \d+\]")
_ENCODER_WIDTH_FIELDS = ("encoder_hidden_size",)  # the width of the encoder states a cross-attention takes
_TOWER_WIDTH_FIELDS = ("hidden_size", "hidden_dim", "d_model", "embed_dim")


def _reduction_widths(exc) -> tuple[int, int] | None:
    """(``x``, ``w``) where a forward stopped on a product whose input is ``x`` wide and whose weight takes ``w``
    (``a and b must have same reduction dim, but got [N, x] X [w, M]``) and the two differ; else None."""
    m = _REDUCTION.search(str(exc)) if exc is not None else None
    if not m or m.group(1) == m.group(2):
        return None
    return int(m.group(1)), int(m.group(2))


def _cross_width_fix(exc, cfg):
    """Where a forward stops on a product whose input is ``x`` wide and whose weight takes ``w`` (``a and b must have
    same reduction dim, but got [N, x] X [w, M]``), exactly one config field naming the width of the encoder states
    a cross-attention takes (``encoder_hidden_size``) holds ``w``, and another config names a tower ``x`` wide
    (transformers' default Granite Speech config: a Blip-2 Q-Former projector built for 1408-wide states,
    ``encoder_hidden_size``, after a 1024-wide audio encoder, ``hidden_dim``, where Blip2Config itself aligns them):
    the repair that sets that field to ``x``. Else None."""
    widths = _reduction_widths(exc)
    if widths is None:
        return None
    got, want = widths
    named = list(_sub_configs(cfg))
    fields = [(f"{k}.{f}" if k else f, c, f) for k, c in named for f in _ENCODER_WIDTH_FIELDS
              if vars(c).get(f) == want and not isinstance(vars(c).get(f), bool)]
    towers = [c for _k, c in named for f in _TOWER_WIDTH_FIELDS if vars(c).get(f) == got]
    if len(fields) != 1 or not towers or any(t is fields[0][1] for t in towers):
        return None
    dotted, c, field_ = fields[0]
    return _field_repair(c, field_, got,
                         f"the config's cross-attention takes encoder states {want} wide ({dotted}) from a tower that "
                         f"makes them {got} wide, which cannot run: forecast with {dotted} = {got} (set the widths your "
                         "model has in the config.json)")


def _pixel_shuffle_fix(exc, cfg):
    """Where a forward stops on a product whose input is ``x`` wide and whose weight takes ``w``, and a (vision)
    config with a ``pixel_shuffle_ratio`` r feeds its adapter ``hidden_size / r**2`` = ``x`` features while the
    adapter is built for ``intermediate_size`` = ``w`` (transformers' default Llama 4 config: a vision tower 768 wide,
    shuffled to 3072, before an adapter built for 5632 = 1408 / 0.5**2, Llama 4's own tower): the repair that sets
    that config's ``hidden_size`` to ``w * r**2`` (where its attention heads divide it). Else None."""
    widths = _reduction_widths(exc)
    if widths is None:
        return None
    got, want = widths
    found = []
    for k, c in _sub_configs(cfg):
        r, h, inter = (vars(c).get(f) for f in ("pixel_shuffle_ratio", "hidden_size", "intermediate_size"))
        if not (isinstance(r, float) and 0 < r < 1 and isinstance(h, int) and inter == want
                and round(h / r**2) == got):
            continue
        width = want * r**2
        heads = vars(c).get("num_attention_heads")
        if width == int(width) and (not isinstance(heads, int) or heads <= 0 or int(width) % heads == 0):
            found.append((k, c, h, int(width), r))
    if len(found) != 1:
        return None
    k, c, h, width, r = found[0]
    where = f"{k}." if k else ""
    return _field_repair(c, "hidden_size", width,
                         f"the config's vision adapter takes {want} features a patch ({where}intermediate_size) after "
                         f"a pixel shuffle by {r} of a tower {h} wide ({where}hidden_size), which makes {got}: forecast "
                         f"with {where}hidden_size = {width} (set the widths your model has in the config.json)")


def _adapter_output_fix(exc, cfg):
    """Where a forward stops on a product whose input is ``x`` wide and whose weight takes ``w``, and one (vision)
    config says its adapter makes ``projector_output_dim`` = ``x`` features while the projector after it is built
    for ``vision_output_dim`` = ``w`` (transformers' default Llama 4 config: 4096 and 7680): the repair that sets
    ``vision_output_dim`` to ``x``. Else None."""
    widths = _reduction_widths(exc)
    if widths is None:
        return None
    got, want = widths
    found = [(k, c) for k, c in _sub_configs(cfg)
             if vars(c).get("projector_output_dim") == got and vars(c).get("vision_output_dim") == want]
    if len(found) != 1:
        return None
    where = f"{found[0][0]}." if found[0][0] else ""
    return _field_repair(found[0][1], "vision_output_dim", got,
                         f"the config's projector takes {want} features ({where}vision_output_dim) from a vision "
                         f"adapter that makes {got} ({where}projector_output_dim), which cannot run: forecast with "
                         f"{where}vision_output_dim = {got} (set the widths your model has in the config.json)")


def _one_edit(a: str, b: str) -> bool:
    """``a`` and ``b`` differ by exactly one typing slip: a letter changed, added, dropped, or two neighbours
    swapped."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
                                  and a[diff[1]] == b[diff[0]])
    short, long_ = sorted((a, b), key=len)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


def _misspelt_fields(cfg) -> list[tuple[str, object, str, str]]:
    """The fields a config holds that its class does not declare and that are one typing slip (:func:`_one_edit`)
    from one it does, which the config leaves at its class default while the slip holds a value of the same type
    (transformers' default EdgeTAM config: its timm backbone named as ``archirecture: repvit_m1``, so the
    ``architecture`` built is the default ``resnet50``, whose channels its neck does not take): (dotted name of the
    config, the config, the slip, the field)."""
    found = []
    for name, c in _sub_configs(cfg):
        declared = set(getattr(c, "attribute_map", None) or {})
        for k in type(c).__mro__:
            declared |= set(getattr(k, "__annotations__", {}))
        for key, value in list(vars(c).items()):
            if key.startswith("_") or key in declared or len(key) < 6 or value is None:
                continue
            near = [f for f in declared if not f.startswith("_") and _one_edit(key, f)]
            if len(near) != 1:
                continue
            default = getattr(type(c), near[0], None)
            if default is not None and vars(c).get(near[0], default) == default and type(value) is type(default) \
                    and value != default:
                found.append((name, c, key, near[0]))
    return found


def _misspelt_fix(exc, cfg):
    """Where a forward stops and the config holds fields misspelt (:func:`_misspelt_fields`): the repair that gives
    each declared field the value its slip holds. Else None."""
    found = _misspelt_fields(cfg) if exc is not None else []
    if not found:
        return None

    def repair(_cfg):
        said = []
        for name, c, key, field_ in found:
            setattr(c, field_, vars(c)[key])
            where = f"{name}." if name else ""
            said.append(f"{where}{key} ({vars(c)[key]!r}) as {where}{field_} (was its default, "
                        f"{getattr(type(c), field_)!r})")
        return ("the config names fields its class does not have, one letter from ones it has: read "
                + "; ".join(said) + " (correct the names in the config.json)")

    return repair


def _config_fix(exc, cfg):
    """The first repair a forward's stop ``exc`` shows for the config as a whole: derivable fields it leaves empty
    (:func:`_derived_fields`), a window for a sliding-window mask no layer uses, a token id the config class lacks,
    integers made with their values, a cross-attention built for encoder states of another width, a vision adapter
    or projector built for another width than what comes before it, a field's name misspelt; else None."""
    return (_derived_fix(exc, cfg) or _unused_window_fix(exc, cfg) or _family_token_fix(exc, cfg)
            or _real_tensors_fix(exc, cfg) or _cross_width_fix(exc, cfg) or _pixel_shuffle_fix(exc, cfg)
            or _adapter_output_fix(exc, cfg) or _misspelt_fix(exc, cfg))


def _set_image_size(cfg, size: int) -> bool:
    """The model built for ``size`` px images: every (vision) config's ``image_size`` (position embeddings and
    patch grids follow it). False where no config names one."""
    found = False
    for c in [cfg, *_subconfigs(cfg, _SUB_VISION)]:
        if isinstance(_get(c, "image_size", None), (int, list, tuple)):
            c.image_size = size
            found = True
    return found


def _one_line(fn):
    """``fn`` whose unexpected failures become one TraceError line (no traceback reaches a user)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kw):
        try:
            return fn(*args, **kw)
        except TraincastError:
            raise
        except Exception as exc:  # noqa: BLE001 - a model's config or code can fail in any way
            cls = args[2].__name__ if len(args) > 2 and isinstance(args[2], type) else "the model"
            raise TraceError(f"cannot build {args[0] if args else 'the model'}: "
                             f"{explain(exc, cls, 'making its training step')}") from None

    return wrapper


class _NoInputs(TraceError):
    """The head class's forward takes no input traincast can make (a composite that only generates with its
    parts: Qwen2.5-Omni's thinker and talker)."""


def _trainable_part(cfg, model_type: str, cls, where: str):
    """Where the head class ``cls`` of ``model_type`` is a composite whose forward takes nothing traincast can make:
    the one part it holds that trains for the same task, (the sub-config's field, the sub-config, its head class),
    that is the one direct sub-config whose model type has a head class in a task mapping that lists ``cls`` too
    (Qwen2.5-Omni, ``multimodal-lm``: its thinker; its talker and vocoder have none); else None."""
    own = [t for t, c in task_classes(model_type).items() if c == cls.__name__ and t != "base"]
    found = []
    for k, sub in vars(cfg).items():
        sub_type = getattr(sub, "model_type", None) if hasattr(sub, "to_dict") else None
        if k.startswith("_") or not isinstance(sub_type, str) or sub_type == model_type:
            continue
        heads = task_classes(sub_type)
        task = next((t for t in own if t in heads), None)
        if task is not None:
            found.append((k, sub, task))
    if len(found) != 1:
        return None
    k, sub, task = found[0]
    try:
        return k, sub, choose_class(sub, sub.model_type, None, task, where)
    except TraincastError:
        return None


class _Repairable(TraceError):
    """The config cannot run as given, but one evident change makes it run (a default config pairing a vision
    tower and a text model of different widths; a vision tower built for an image size its projector cannot
    pool): ``repair(cfg)`` makes the change and returns the note that says so."""

    def __init__(self, message: str, repair):
        super().__init__(message)
        self.repair = repair


@_one_line
def hf_step(name: str, cfg, cls, **kw) -> TrainingStep:
    """:func:`_hf_step_once`, repaired where the config cannot run as given but one evident change to it makes it
    run (:class:`_Repairable`: at most two changes, each said in the forecast's notes). The notes of every attempt
    are kept (an attempt changes the config before a repair's retry: LayerDrop off, fields filled), once each. A
    config that still does not run is refused with the last reason, naming the changes already made."""
    repairs: list[str] = []
    attempts: list[list[str]] = []
    while True:  # ends: at most two repairs, then the next _Repairable is refused
        attempts.append([])
        try:
            step = _hf_step_once(name, cfg, cls, notes=attempts[-1], **kw)
        except _Repairable as exc:
            note = exc.repair(cfg) if exc.repair is not None and len(repairs) < 2 else None
            if note is None or note in repairs:  # nothing (new) to change: refused
                raise TraceError(_after(str(exc), repairs)) from None
            repairs.append(note)
            continue
        except TraincastError as exc:
            if repairs:  # stopped by something else once repaired: say what was changed first
                raise TraceError(_after(str(exc), repairs)) from None
            raise
        merged = list(dict.fromkeys(n for a in attempts for n in a))
        current_options().notes.extend(merged + [f"{name}: {r}" for r in repairs])
        return step


def _after(reason: str, repairs: list[str]) -> str:
    """``reason``, naming the repairs the config had already been given (none: as it is)."""
    return reason if not repairs else f"{reason} (after changing the config first: {'; '.join(repairs)})"


def _hf_step_once(name: str, cfg, cls, *, notes: list[str], batch_size, device, optimizer, precision, freeze,
                  seq_len) -> TrainingStep:
    """A training step of the Hugging Face model ``cls(cfg)`` built on ``device`` (no weights downloaded),
    with the inputs its forward and config ask for and the labels its head needs (module docstring).

    Attention is PyTorch's fused ``scaled_dot_product_attention`` unless the config names another
    ``attn_implementation`` (``eager``: the explicit matmul-softmax-matmul of the model's own code) or the
    class has no fused attention (then ``eager``). A head without a loss of its own trains on the mean of its
    outputs (a stand-in loss of negligible cost; the forecast says so). What the forecast should say is appended to
    ``notes`` (:func:`hf_step` adds them to the options' notes)."""
    opts = current_options()
    cfg = _config_for(cls, cfg)
    _prepare_config(cfg, notes)
    if opts.image_size:  # the model built for this image size (position embeddings, patch grids follow it)
        _set_image_size(cfg, opts.image_size)
    limit = _position_limit(cfg)
    if limit and seq_len > limit:
        raise ConfigError(f"--seq-len {seq_len} exceeds {name}'s {limit} positions")
    model = _build(cls, cfg, device, name, notes)
    _no_specaugment(getattr(model, "config", cfg), device, notes)
    _no_layerdrop(model, notes)
    try:
        params = dict(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        params = {}
    ctx = _Ctx(cfg, model, params, batch_size, seq_len, opts, notes, device=device)
    token_fields = [n for n in (*_IMAGE_TOKEN_ID, *_VIDEO_TOKEN_ID, *_AUDIO_TOKEN_ID)
                    if any(n in vars(c) for c in [cfg, *_subconfigs(cfg)])]
    if not any(n in _IMAGE_TOKEN_ID for n in token_fields):  # a video-text model: its pixels fill video tokens
        ctx.image_ids = _VIDEO_TOKEN_ID
    multimodal = "input_ids" in params and (
        ("pixel_values" in params and (any(n in ctx.image_ids for n in token_fields)
                                       or "image_embeds_position_mask" in params))
        or ("input_features" in params and any(n in _AUDIO_TOKEN_ID for n in token_fields)))
    for group in (ctx.image_ids, _AUDIO_TOKEN_ID):
        if multimodal and any(n in token_fields for n in group) and find(cfg, *group) is None:
            for n in group:
                if n in vars(cfg) and n != "image_token":
                    setattr(cfg, n, _vocab(cfg) - 1)
                    for mod in model.modules():  # the copies the model took at build time (``self.image_token_id =
                        if getattr(mod, n, 0) is None:  # config.image_token_id``: Nemotron-H Omni)
                            setattr(mod, n, _vocab(cfg) - 1)
                    break
            notes.append(f"{name}: the config names no {group[0].split('_')[0]} token id; the last id of the "
                         "vocabulary stands in")
    image_tokens = _image_tokens_guess(ctx) if multimodal else None
    # real values also where the forward reads the mask's to choose its path (LED: global attention only where the
    # mask says so; none in plain training, where the tracer's all-true answer would take it. Longformer rebuilds
    # its mask on meta before reading it: still refused)
    ctx.real_ids = multimodal or _latent_frames(ctx) is not None or "global_attention_mask" in params

    def inputs(n_img, variant=frozenset()):
        ctx.desc.clear()
        try:
            with torch.device(device):
                return _make_inputs(ctx, cls, n_img, variant)
        except TraincastError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise TraceError(f"{name}: cannot make the inputs of {cls.__name__}: "
                             f"{explain(exc, cls.__name__, 'making inputs')}") from None

    kw, kind = inputs(image_tokens)
    fixed = _fixed_length(cfg)
    text_only = "input_ids" in kw and not multimodal and not any(
        k in kw for k in ("pixel_values", "input_features", "input_values", "bbox"))
    if device.type == "meta" and text_only and (
            (fixed and fixed[0] != seq_len)
            or ("labels" in kw and cls.__name__ not in _mapping_names().get("CAUSAL_LM", {}).values())):
        # a text model's forward without autograd, where its labels may not be its tokens' shape (a head that
        # predicts its own number of positions) or its length is fixed: the forms below only where this fails
        kw, kind, settled = _text_forms(name, model, kw, kind, ctx, cls, image_tokens, inputs, fixed, notes)
    else:
        settled = False
    if device.type == "meta" and kw and (_unset_bounds(cfg) or _backbone_widths(cfg)):
        # a clamp whose bound the config leaves None, a head of another width than its backbone: one dry run shows
        # whether the forward stops on it
        exc, _rows = _dry_run(model, kw)
        fix = _unbound_clamp_fix(exc, cfg) or _backbone_width_fix(exc, cfg) or _config_fix(exc, cfg)
        if fix is not None:
            raise _Repairable(f"cannot trace {name}: {explain(exc, cls.__name__, 'running its forward')}", fix)
    if not kw:
        need = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in ("self", "kwargs")]
        tasks = f"choose another head with --task ({', '.join(task_classes(_get(cfg, 'model_type', '')))})"
        if getattr(type(model).forward, "__name__", "") == "_forward_unimplemented":  # Bark's BarkModel
            raise _NoInputs(f"{name}: {cls.__name__} has no forward pass in transformers (it only generates); {tasks} "
                            "or pass an nn.Module with its inputs and loss")
        raise _NoInputs(f"{name}: {cls.__name__}.forward takes no input traincast knows how to make "
                        f"({', '.join(need or list(params)[:6])}); {tasks} or pass an nn.Module with its inputs")
    if device.type == "meta" and not settled and (multimodal or "pixel_values" in kw or "input_features" in kw or "bbox" in kw
                                  or "input_values" in kw or (_get(cfg, "num_codebooks", 0) or 0) > 1):
        # the forms the model takes (image_sizes or not, a frame axis or not), and how many placeholders its
        # projector fills: as the model itself says in a forward without autograd
        forms = [frozenset(), frozenset({"sizes"}), frozenset({"5d"}), frozenset({"sizes", "5d"})]
        if "pixel_values" not in kw:  # both layouts, at each feature width the config names
            forms = [frozenset(), frozenset({"flip"})] if "input_features" in kw else [frozenset()]
            if "input_values" in kw and kw["input_values"].dim() == 2:  # raw audio, then with a channel axis
                forms.append(frozenset({"channel"}))
            for w in _feature_widths(cfg)[1:] if "input_features" in kw else ():
                forms += [frozenset({f"width={w}"}), frozenset({f"width={w}", "flip"})]
            if "input_features" in kw and _stacked_frames(cfg):  # then the rows of stacked frames its extractor makes
                forms.append(frozenset({"width=-1"}))
            if "input_features" in kw and "input_ids" in kw:  # then the features in place of the text, at the
                forms.append(frozenset({"no-text"}))       # widths its feature extractor makes (Pop2Piano's encoder)
                forms += [frozenset({"no-text", f"width={w}"}) for w in _extractor_widths(cfg)]
        if "bbox" in kw:
            forms += [f | {"float-boxes"} for f in forms]
        if "image_grid_thw" in kw:  # then the rows of each image in a batch axis, as ColQwen2's processor pads them
            forms.append(frozenset({"per-image"}))
            if find(cfg, "temporal_patch_size", prefer=_SUB_VISION) is None:  # where the config names none:
                forms.append(frozenset({"tps=1"}))  # patches of one frame (VideoLLaMA 3)
                forms.append(frozenset({"tps=1", "patch-images"}))  # each such patch as a small image (Kimi K2.5)
        if "input_features" in kw and kw["input_features"].dim() == 3 and "pixel_values" in kw:
            # images and audio: each image form again with the features in the other layout (mel bins first, for a
            # 2-d conv stem over mel x frames: Dots 3 Note), as an audio-only model's forms try them
            forms += [f | {"flip"} for f in forms]
        if "pixel_attention_mask" in params and "pixel_values" in kw:  # then tiles with the mask of the real ones
            forms += [frozenset({"5d", "tile-mask"}), frozenset({"sizes", "5d", "tile-mask"})]
        if "pixel_values" in kw and kw["pixel_values"].dim() == 4 and isinstance(
                find(cfg, "patch_size", prefer=_SUB_VISION), int):
            forms.append(frozenset({"rows"}))
        proc = _processor_hw(cfg) if "pixel_values" in kw and kw["pixel_values"].dim() == 4 and not opts.image_size \
            else None
        if proc and proc != _image_hw(ctx):  # after those: the size the model type's image processor makes
            forms.append(frozenset({"proc"}))
        counted = _patch_count_hw(cfg) if "pixel_values" in kw and kw["pixel_values"].dim() == 4 \
            and not opts.image_size else None
        if counted and counted[0] != _image_hw(ctx):  # then a size whose patch count the projector's table holds
            forms.append(frozenset({"patch-count"}))
        snap = _snapped_hw(ctx) if "pixel_values" in kw else None
        if snap:  # last: the images resized to the projector's patch grid
            forms += [f | {"snap"} for f in forms]
        if "image_grid_thw" in kw:  # after all those: each token's patches as one block, channels last (Inkling 2)
            forms.append(frozenset({"token-blocks", "snap"} if snap else {"token-blocks"}))
        if "pixel_values" in kw and "pixel_mask" in params and "pixel_mask" not in kw:
            forms.append(frozenset({"pixel-mask"}))  # last: the pixels' mask with its values (ViLT selects by it)
        rope_fix = None  # a repair of the multimodal RoPE sections, from the first form that stops on them
        other_fix = None  # a window for a sliding-window mask no layer uses, a token id the config lacks, integers
        # made with their values: likewise
        for variant in forms:
            kw, kind = inputs(image_tokens, variant)
            exc, rows = _dry_run(model, kw)
            if exc is not None and "bool" in str(exc) and "bool-mask" not in variant \
                    and any(m in kw for m in _FEATURE_MASKS):  # a form to try later: the feature mask as booleans
                forms.append(variant | {"bool-mask"})
            m = _MASK_SHAPE.search(str(exc)) if isinstance(exc, IndexError) else None
            if m and not any(v.startswith("mask-len=") for v in variant):
                # a feature mask that does not fit what the forward indexes with it (the features its projector makes,
                # not the frames): a form to try later, the mask as long as that dimension
                mask_shape = [int(x) for x in m.group(1).split(",")]
                shape, at = [int(x) for x in m.group(2).split(",")], int(m.group(3))
                if any(list(kw[k].shape) == mask_shape for k in _FEATURE_MASKS if k in kw) and len(mask_shape) == 2 \
                        and at < len(shape):
                    forms.append(variant | {f"mask-len={shape[at]}"})
            rope_fix = rope_fix or _rope_sections_fix(exc, cfg)
            other_fix = other_fix or _config_fix(exc, cfg)
            m = _FEATURE_MISMATCH.search(str(exc)) if exc is not None else None
            if exc is not None and not m and not rows:  # a count check it passed over, then stopped before scattering
                m = next(filter(None, map(_FEATURE_MISMATCH.search, getattr(exc, "failed_checks", ()))), None)
            n = (int(m.group(1)) if m else rows[0] if rows else 0) // max(1, batch_size) if multimodal else 0
            first_other = (exc is None and not _LAST_CHECKS and multimodal and image_tokens and len(rows) > 1
                           and rows[0] != image_tokens * max(1, batch_size) and image_tokens * max(1, batch_size)
                           in rows[1:])
            if first_other:
                # it ran, every count check passed, and a later scatter filled the guessed placeholders: the guess
                # stands; the first scatter put another modality's features in (Qwen2.5-Omni: its audio before
                # its images). Where it takes audio too, as many audio placeholders as that scatter's rows
                n = image_tokens
                if "pixel_values" in kw and "input_features" in kw and not ctx.audio_tokens:
                    ctx.audio_tokens = rows[0] // max(1, batch_size)
                    kw2, kind2 = inputs(image_tokens, variant)
                    exc2, rows2 = _dry_run(model, kw2)
                    if exc2 is None and not _LAST_CHECKS and rows2 == rows:
                        kw, kind = kw2, kind2
                        notes.append(f"{name}: its forward puts the audio's features in before the images' ({rows[0]} "
                                     f"rows for {batch_size} examples): {ctx.audio_tokens} audio placeholders per "
                                     f"example after the {image_tokens} image ones")
                    else:
                        ctx.audio_tokens = 0
            if n and n != image_tokens:  # the projector makes another number of features than guessed
                kw, kind = inputs(n, variant)
                exc, _rows = _dry_run(model, kw)
                same = re.search(r"do not match, tokens: (\d+), features: (\d+)", str(exc)) if exc else None
                rope_fix = rope_fix or _rope_sections_fix(exc, cfg)  # a stop that only the right count reaches
                if same and same.group(1) == same.group(2):
                    raise _Repairable(f"cannot trace {name}: {explain(exc, cls.__name__, 'running its forward')}",
                                      functools.partial(_align_widths, None, None))
                image_tokens = n if exc is None else image_tokens
            m = _STREAMS.search(str(exc)) if exc is not None and "input_ids" in kw else None
            if m and kw["input_ids"].dim() == 2 and [int(m.group(2)), int(m.group(3))] == list(kw["input_ids"].shape) \
                    and int(m.group(1)) > 1 and not any(v.startswith("streams=") for v in variant):
                # a per-stream offset added to ids of one stream: the model takes a token per stream at each step
                variant = variant | {f"streams={m.group(1)}"}
                kw, kind = inputs(image_tokens, variant)
                exc, rows = _dry_run(model, kw)
            m = _ALIGNED.search(str(exc)) if exc is not None and "input_features" in kw and "input_ids" in kw else None
            if m and m.group(1) == m.group(2) and int(m.group(3)) == kw["input_ids"].shape[-1] != int(m.group(1)):
                # audio added to the text position by position (a streaming recognizer: one audio frame per
                # token): as many tokens as the audio encoder makes frames
                ctx.seq_len = int(m.group(1))
                kw, kind = inputs(image_tokens, variant)
                exc, rows = _dry_run(model, kw)
                if exc is None:
                    notes.append(f"{name}: {ctx.seq_len} tokens, one per frame its audio encoder makes of the audio "
                                 f"(the model adds the audio to the text position by position), not --seq-len {seq_len}")
                else:
                    ctx.seq_len = seq_len
            m = next(filter(None, map(_AUDIO_MISMATCH.search, _LAST_CHECKS)), None) if exc is None else None
            if m is None and exc is None and len(rows) > 1 and "input_features" in kw:
                # a check that names no modality ("Multimodal features and placeholder tokens do not match, tokens: 0,
                # features: N": Dots 3 Note) whose N is what a later scatter (the audio's, after the images') filled
                m = next((x for x in map(_NO_PLACEHOLDERS.search, _LAST_CHECKS) if x and int(x.group(1)) in rows[1:]),
                         None)
            if m and multimodal and "pixel_values" in kw and "input_features" in kw and not ctx.audio_tokens:
                # images and audio, the audio's placeholders missing (its check, passed over, names its features):
                # as many audio placeholders as it makes features
                ctx.audio_tokens = int(m.group(1)) // max(1, batch_size)
                kw2, kind2 = inputs(image_tokens, variant)
                if _dry_run(model, kw2)[0] is None and not any(map(_AUDIO_MISMATCH.search, _LAST_CHECKS)) \
                        and not any(map(_NO_PLACEHOLDERS.search, _LAST_CHECKS)):
                    kw, kind = kw2, kind2
                else:
                    ctx.audio_tokens = 0
            if exc is None and not rows and "cross_attention_mask" in kw and image_tokens != 1:
                # the text attends to the images across (Mllama) instead of taking their features in placeholders:
                # one image token marks each image
                image_tokens = 1
                kw, kind = inputs(image_tokens, variant)
            if exc is None:
                if "snap" in variant:
                    notes.append(f"{name}: {snap[1]}")
                if "proc" in variant:
                    notes.append(f"{name}: the images are {proc[0]}x{proc[1]}, the size its image processor "
                                 f"({_processor_class(cfg).__name__}) makes them by default (the config names none "
                                 "that runs)")
                if "patch-count" in variant:
                    (h, w), field_, counts = counted
                    notes.append(f"{name}: the images are {h}x{w}, a grid of {h // _patch_size(cfg)}x"
                                 f"{w // _patch_size(cfg)} patches, the smallest count its projector takes ({field_} "
                                 f"holds {', '.join(map(str, counts))} patches; the config's own image size makes "
                                 "another count)")
                break
            if isinstance(exc, _WidthMismatch):
                raise _Repairable(f"cannot trace {name}: {cls.__name__}: {exc}: its projector's output width does "
                                  "not fit the text model's hidden size (the config pairs towers of different "
                                  "widths, e.g. vision_config.out_hidden_size != text_config.hidden_size); make "
                                  "them equal in the config.json", functools.partial(_align_widths, *exc.widths))
        else:
            if rope_fix is not None or other_fix is not None:
                raise _Repairable(f"cannot trace {name}: {explain(exc, cls.__name__, 'running its forward')}",
                                  rope_fix or other_fix)
            if snap:  # no form runs, resized or not: the vision tower's own size does not fit the projector
                why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}" if exc is not None else "no form runs"
                raise _Repairable(f"cannot trace {name}: {cls.__name__}: {snap[2]}, and no other image size runs "
                                  f"(the forward stops with {why}); set the image size (--image-size, or the vision "
                                  f"config's image_size) to a multiple of {snap[3]}",
                                  None if opts.image_size else functools.partial(_rebuild_at, snap))
            kw, kind = inputs(image_tokens)
    desc = f"{batch_size} x (" + ", ".join(ctx.desc) + ")"
    if kind == "ctc":
        notes.append(f"{name}: the CTC loss is priced as a frame-wise log-softmax and NLL over the logits "
                     "(PyTorch's ctc_loss has no meta kernel; its cost is small beside the model's)")
    elif kind != "own":
        notes.append(f"{name}: {cls.__name__} computes no loss of its own here; the step trains on the mean of its "
                     "outputs (a stand-in loss of negligible cost)")
    if type(model) in _OUTPUT_FIELDS_ADDED:
        notes.append(f"{name}: its forward reads a field the output of one of its parts lacks in this transformers "
                     f"release ({', '.join(sorted(_OUTPUT_FIELDS_ADDED[type(model)]))}), which stops it after everything is "
                     "computed; traced with that field read as None")
    cls_name = cls.__name__

    def make_batch(dev):
        return (), kw, None

    def loss_fn(out, _target):
        logits = getattr(out, "logits", None)
        if kind == "ctc" and isinstance(logits, torch.Tensor) and logits.dim() == 3:
            lp = torch.log_softmax(logits.float(), -1).flatten(0, 1)
            return torch.nn.functional.nll_loss(lp, torch.zeros(lp.shape[0], dtype=torch.long, device=lp.device))
        loss = getattr(out, "loss", None) if kind == "own" else None
        if loss is None and isinstance(out, dict):
            loss = out.get("loss")
        if loss is None or not isinstance(loss, torch.Tensor) or not loss.requires_grad:
            loss = _standin_loss(out)
        if loss is None:
            raise TraceError(f"{name}: {cls_name} returns no tensor a loss can be taken of")
        return loss

    step = supervised_step(name, model, make_batch, loss_fn, batch_size=batch_size, device=device,
                           optimizer=optimizer, precision=precision, freeze=freeze, input_description=desc)
    step.stages = [(phase, _guarded(fn, name, cls_name, phase, device, cfg)) for phase, fn in step.stages]
    return step


# a head whose loss compares predictions of N rows with labels of M: "Expected input batch_size (N) to match target
# batch_size (M)"
_LABEL_ROWS = re.compile(r"Expected input batch_size \((\d+)\) to match target batch_size \((\d+)\)")


def _text_forms(name, model, kw, kind, ctx: _Ctx, cls, image_tokens, inputs, fixed, notes: list[str]):
    """The inputs of a text model whose forward does not run with the plain ones (a dry run says), in the first
    other form that runs: the one sequence length it trains at (:func:`_fixed_length`); the decoder's audio codes
    one row per codebook, as its forward documents them (Dia); labels of as many positions as its head predicts
    (Perceiver's decoder: its ``max_position_embeddings``, whatever the input's length). Else the plain ones."""
    exc, _rows = _dry_run(model, kw)
    if exc is None:
        return kw, kind, False
    seq_len, B = ctx.seq_len, ctx.batch
    if fixed and fixed[0] != seq_len:
        ctx.seq_len = fixed[0]
        kw2, kind2 = inputs(image_tokens)
        if _dry_run(model, kw2)[0] is None:
            notes.append(f"{name}: {fixed[0]} tokens, the one length it trains at ({fixed[1]}), not --seq-len "
                         f"{seq_len} (the forward stops with: {_first_line(exc)[:120]})")
            return kw2, kind2, True
        ctx.seq_len = seq_len
    doc = getattr(model.forward, "__doc__", None) or ""
    k = find(ctx.cfg, "num_codebooks", "num_channels", prefer=("decoder_config", "decoder"), top_first=False)
    flat = " ".join(doc.split())
    if "decoder_input_ids (`torch.LongTensor` of shape `(batch_size * num_codebooks" in flat \
            and "(batch_size, target_sequence_length, num_codebooks)" in flat and isinstance(k, int) \
            and not isinstance(k, bool) and k > 1 and "decoder_input_ids" in ctx.params:
        kw2, kind2 = inputs(image_tokens, frozenset({f"dec-codebooks={k}"}))
        if _dry_run(model, kw2)[0] is None:
            return kw2, kind2, True
    k = _get(ctx.cfg, "num_codebooks", None)
    if "input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length, num_codebooks)" in flat \
            and isinstance(k, int) and not isinstance(k, bool) and k > 1 and kw["input_ids"].dim() == 2:
        # a token per codebook at each step, as its forward documents them (CSM's audio frames), the labels the same
        # codes (then: the first codebook's)
        for variant in (frozenset({f"streams={k}", "labels3d"}), frozenset({f"streams={k}"})):
            kw2, kind2 = inputs(image_tokens, variant)
            if _dry_run(model, kw2)[0] is None:
                return kw2, kind2, True
    m = _LABEL_ROWS.search(str(exc))
    if m and "labels" in kw and kw["labels"].dim() == 2 and int(m.group(2)) == kw["labels"].numel() \
            and "decoder_input_ids" not in ctx.params \
            and int(m.group(1)) % B == 0 and int(m.group(1)) != int(m.group(2)):
        n = int(m.group(1)) // B
        kw2, kind2 = inputs(image_tokens, frozenset({f"labels={n}"}))
        if _dry_run(model, kw2)[0] is None:
            notes.append(f"{name}: its head predicts {n} positions per example whatever the input's length: the "
                         f"labels are {n} tokens (the input stays {kw['labels'].shape[1]} tokens)")
            return kw2, kind2, True
    return (*inputs(image_tokens), False)


@contextlib.contextmanager
def _on_meta(phase: str, device, real_tensors: bool = False):
    """On the meta device: CPU tensors a model makes (positions from values it read, anchors from numpy) meet
    meta ones on meta, and in the backward a boolean-mask index (whose forward ran) takes every element, as the
    tracer answers value reads for a dense batch. (Selections in the forward take their expected sizes:
    :mod:`traincast.workload.selections`.)"""
    if device.type != "meta":
        yield
        return
    import torch.fx.experimental._config as fx_config

    with contextlib.ExitStack() as stack:
        if phase in ("forward", "backward"):
            stack.enter_context(_MixedDevices(real_tensors))
        if phase == "backward":
            stack.enter_context(fx_config.patch(meta_nonzero_assume_all_nonzero=True))
        yield


def _guarded(fn, name, cls_name, phase, device, cfg=None):
    """``fn`` whose failures become one TraceError line naming the class and what stopped it."""
    doing = {"forward": "running its forward", "backward": "running its backward",
             "optimizer": "stepping the optimizer"}.get(phase, phase)

    def run():
        try:
            with _on_meta(phase, device, _wants_real_tensors(cfg)):
                fn()
        except TraincastError:
            raise
        except Exception as exc:  # noqa: BLE001 - a model's own code can fail in any way; the user gets one line
            raise TraceError(f"cannot trace {name}: {explain(exc, cls_name, doing, cfg)}") from None

    return run


# --- config.json ------------------------------------------------------------------------------------------
def is_hf_config(source) -> bool:
    """Whether ``source`` is a Hugging Face ``config.json`` (a JSON mapping with a ``model_type``)."""
    path = Path(str(source))
    if path.suffix != ".json" or not path.is_file():
        return False
    try:
        data = json.loads(path.read_text())
    except (ValueError, OSError):
        return False
    return isinstance(data, dict) and "model_type" in data


# size fields of Hugging Face configs that must be positive where a config has them
_HF_SIZES = ("vocab_size", "hidden_size", "n_embd", "d_model", "num_hidden_layers", "n_layer", "num_layers",
             "num_attention_heads", "n_head", "num_heads", "intermediate_size", "d_ff", "n_inner",
             "max_position_embeddings", "n_positions")


# sizes beyond any model a GPU cluster trains (the largest published models: about 200 layers, widths of
# tens of thousands, vocabularies under a million, contexts of ~10M tokens): refused from the config, before a
# model of 2**40 layers is built (that would never end) or a width overflows a tensor's size
_HF_LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "decoder_layers")
_HF_LIMITS = {"layers": 4096, "size": 2**26}
_HF_MAX_PARAMETERS = 2e14  # 200T: 100x the largest model trained to date


def _sub_configs(cfg, name: str = "", depth: int = 0):
    """(dotted name, config) of ``cfg`` ("") and the configs stored inside it, three levels deep."""
    yield name, cfg
    if depth >= 3:
        return
    for k, v in vars(cfg).items():
        if hasattr(v, "to_dict") and hasattr(v, "model_type") and v is not cfg:
            yield from _sub_configs(v, f"{name}.{k}" if name else k, depth + 1)


def _check_sizes(path, cfg) -> None:
    for _, c in _sub_configs(cfg):
        where = path if c is cfg else f"{path} ({getattr(c, 'model_type', 'sub-config')} part)"
        sizes = {}
        for name in _HF_SIZES + _HF_LAYER_FIELDS:
            try:
                v = getattr(c, name, None)
            except Exception:  # noqa: BLE001 - a property that needs other fields
                continue
            if isinstance(v, bool) or v is None or isinstance(v, (list, tuple, dict)):  # per-layer lists: the model's
                continue
            if name in ("max_position_embeddings", "n_positions") and v == -1:  # -1: no position limit (XLNet)
                continue
            if not isinstance(v, (int, float)) or not v > 0:
                raise SpecError(f"{where}: {name} must be a positive integer, got {v!r}")
            limit = _HF_LIMITS["layers" if name in _HF_LAYER_FIELDS else "size"]
            if v > limit:
                raise SpecError(f"{where}: {name} = {v:,} is beyond any model a GPU cluster trains (at most {limit:,}); "
                                "is it a typo?")
            sizes[name] = v
        width = next((sizes[k] for k in ("hidden_size", "n_embd", "d_model") if k in sizes), 0)
        depth = next((sizes[k] for k in _HF_LAYER_FIELDS if k in sizes), 0)
        est = 12 * depth * width ** 2 + sizes.get("vocab_size", 0) * width
        if est > _HF_MAX_PARAMETERS:
            raise SpecError(f"{where}: about {est:.2g} parameters ({depth:g} layers of width {width:g}) is beyond any "
                            f"model a GPU cluster trains (at most {_HF_MAX_PARAMETERS:.0e}); is a size a typo?")


def load_config(data: dict, where: str = "config"):
    """A transformers config object from the content of a ``config.json`` (validated)."""
    import transformers as tf

    tf.logging.set_verbosity_error()  # no config chatter on the user's terminal
    model_type = data.get("model_type")
    rest = {k: v for k, v in data.items() if k != "model_type"}
    if not isinstance(model_type, str):
        raise SpecError(f"{where}: model_type must be a string such as \"gpt2\", got {model_type!r}")
    if model_type not in tf.CONFIG_MAPPING:
        raise SpecError(f"{where}: model_type {model_type!r} is not one transformers {tf.__version__} knows"
                        + _did_you_mean(model_type, tf.CONFIG_MAPPING.keys()))
    try:
        cfg = tf.AutoConfig.for_model(model_type, **rest)
    except Exception as exc:  # noqa: BLE001 - transformers validates fields with its own error types
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [type(exc).__name__]
        raise SpecError(f"{where}: not a valid {model_type} config: {lines[-1][:160]}") from None
    _check_sizes(where, cfg)
    return cfg


@_one_line
def hf_config_step(source, *, batch_size, device, optimizer, precision, freeze, seq_len=None, task=None,
                   **_) -> TrainingStep:
    """A training step of the model a Hugging Face ``config.json`` describes, built from the config alone.

    The class is ``task``'s (or ``--task``'s, :func:`hf_options`) head for the model type, else the config's
    first ``architectures`` entry, else the first head of ``DEFAULT_TASK_ORDER`` the model type has (else, where the
    config cannot build that one, the next that it can: a note says which and why; never for a head the user named).
    ``seq_len`` defaults to the config's position limit (512 where it has none). ``source`` may also be the
    config's content, a dict (a named model of ``data/llms.yaml``), named by its ``_name_or_path``."""
    if isinstance(source, dict):
        data = source
        path = Path(str(data.get("_name_or_path") or "config"))
    else:
        path = Path(str(source))
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            raise SpecError(f"{path}: not JSON: {exc}") from None
    cfg = load_config(data, str(path))
    archs = data.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise SpecError(f"{path}: architectures must be a list of class names, e.g. [\"GPT2LMHeadModel\"]; "
                        f"got {archs!r}")
    task = task or current_options().task
    cls = choose_class(cfg, data["model_type"], archs, task, str(path))
    seq_len = seq_len or _position_limit(cfg) or 512
    stem = path.parent.name if path.stem == "config" and path.parent.name else path.stem  # a model folder's name
    name = str(data.get("_name_or_path") or stem).rsplit("/", 1)[-1] or stem
    step = functools.partial(hf_step, name, batch_size=batch_size, device=device, optimizer=optimizer,
                             precision=precision, freeze=freeze, seq_len=seq_len)
    try:
        return step(cfg, cls)
    except _NoInputs:
        # a composite that only generates with its parts (Qwen2.5-Omni): the part that trains for the same task
        part = _trainable_part(cfg, data["model_type"], cls, str(path))
        if part is None:
            raise
        field_, sub, sub_cls = part
        at = len(current_options().notes)
        built = step(sub, sub_cls)
        current_options().notes.insert(at, 
            f"{name}: {cls.__name__}.forward takes no input to train on (it generates with its parts); its part "
            f"that trains for the same task, {sub_cls.__name__} ({field_}), is forecast")
        return built
    except BuildError as exc:
        if archs or task is not None:  # the user named the head: theirs or nothing
            raise
        first = exc
    # the head picked by default cannot be built from this config (wav2vec2-BERT's CTC head: the default config
    # defines no vocabulary): the model type's next trainable head that can, in DEFAULT_TASK_ORDER
    for other_task, other in task_classes(data["model_type"]).items():
        if other_task == "base" or other == cls.__name__:
            continue
        at = len(current_options().notes)
        try:
            other_cls = choose_class(cfg, data["model_type"], None, other_task, str(path))
            built = step(load_config(data, str(path)), other_cls)
        except BuildError:
            continue
        current_options().notes.insert(at, 
            f"{name}: the default head {cls.__name__} cannot be built from this config "
            f"({str(first).split(': ', 1)[-1]}); "
            f"{other_cls.__name__} (--task {other_task}) is forecast instead; name the head with --task or "
            "'architectures' to choose another")
        return built
    raise first
