"""Model sources: every way a user can name a model, recognised by its prefix or shape (a registry).

``build_step(model, ...)`` asks :data:`SOURCES` which source a model's text belongs to, in the order they are
registered, and lets that source build the training step:

============== ===================================== ==================================================
source         the text                              the step
============== ===================================== ==================================================
``timm``       ``timm:NAME`` (any ``timm.list_models()``) image classification at the model's own
                                                     ``pretrained_cfg['input_size']``, cross-entropy
``python``     ``package.module:factory``             the user's ``nn.Module`` (the factory's return),
                                                     inputs from ``example_inputs(batch_size, device)``
                                                     in the same module or ``--input-shape``
``diffusers``  a JSON config with ``_class_name``     noise prediction: latents, timesteps, text
                                                     embeddings of the config's width, MSE on the noise
``hf-config``  a Hugging Face ``config.json`` (or     the model's head and loss (``workload.zoo``)
               a folder holding one)
``llm``        a named language model or its hub id  the same, from its published config
               (``workload/data/llms.yaml``)           (``workload.llms``)
``spec``       a ``.yaml``/``.json`` layer spec       ``workload.spec``
``zoo``        a zoo name or any torchvision model    ``workload.zoo`` (other tasks than classification:
                                                     ``workload.tvtasks``)
============== ===================================== ==================================================

A source is a :class:`ModelSource`: ``matches(text)``, ``build(text, **step options)``, and whether attention in
its models runs as the fused kernel by default. Names, help and did-you-mean come from the registry, as for
every other extension point (``traincast/registry.py``). Errors a user can cause, including those raised inside
a user's own factory or ``example_inputs``, are :class:`~traincast.errors.TraincastError` subclasses that say
which part failed.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from traincast.errors import ConfigError, SpecError, TraceError, UnknownNameError
from traincast.registry import Registry


@dataclass(frozen=True)
class ModelSource:
    name: str
    matches: Callable[[str], bool]  # whether the model text belongs to this source
    build: Callable[..., object]  # (text, *, batch_size, device, optimizer, precision, freeze, seq_len, inputs)
    fused_attention: Callable[[str], bool] = field(default=lambda _t: True)  # attention as the fused kernel?
    example: str = ""
    listing: Callable[[], list[str]] | None = None  # the names it accepts, for `traincast models`


SOURCES: Registry[ModelSource] = Registry("model source")


def _add(name: str, help: str, **kw) -> None:
    SOURCES.add(name, ModelSource(name=name, **kw), help=help)


def source_of(text: str) -> ModelSource:
    """The first registered source that recognises ``text`` (the zoo, the last, takes every other name)."""
    for entry in SOURCES.entries():
        if entry.obj.matches(text):
            return entry.obj
    raise UnknownNameError("model", text, ())  # not reached: the zoo source matches everything


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:240]}" if text else type(exc).__name__


# --- timm ---------------------------------------------------------------------------------------
TIMM_PREFIX = "timm:"


def timm_names() -> list[str]:
    import timm

    return list(timm.list_models())


def _timm_step(text: str, *, batch_size, device, optimizer, precision, freeze, seq_len=None, inputs=None, **_):
    import timm
    import torch
    import torch.nn.functional as F

    from traincast.workload.steps import supervised_step
    from traincast.workload.zoo import _parameters_on

    name = text[len(TIMM_PREFIX):].strip()
    if not name or not timm.is_model(name):
        raise UnknownNameError("timm model", name, timm_names())
    if seq_len is not None:
        raise ConfigError(f"--seq-len does not apply to timm:{name}: it takes images, not sequences")
    try:
        try:
            with torch.device(device):
                model = timm.create_model(name, pretrained=False)
        except NotImplementedError:  # a constructor that reads tensor values back: only its weights on ``device``
            with _parameters_on(device):
                model = timm.create_model(name, pretrained=False)
    except Exception as exc:  # noqa: BLE001 - a timm constructor can fail in any way; say which model
        raise TraceError(f"cannot build timm:{name}: {_first_line(exc)}") from None
    cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
    c, h, w = tuple(cfg.get("input_size") or (3, 224, 224))
    classes = int(getattr(model, "num_classes", 0) or 1000)

    def make_batch(dev):
        x = torch.randn(batch_size, c, h, w, device=dev)
        y = torch.randint(0, classes, (batch_size,), device=dev)
        return (x,), {}, y

    def loss_fn(out, y):
        outs = out if isinstance(out, (tuple, list)) else (out,)  # distilled models: (head, distillation head)
        logits = [o for o in outs if isinstance(o, torch.Tensor) and o.dim() == 2]
        if not logits:
            return sum(o.float().mean() for o in outs if isinstance(o, torch.Tensor))
        return sum(F.cross_entropy(o, y) for o in logits)

    return supervised_step(
        f"timm:{name}", model, make_batch, loss_fn, batch_size=batch_size, device=device, optimizer=optimizer,
        precision=precision, freeze=freeze, input_description=f"{batch_size}x{c}x{h}x{w} images, {classes} classes",
    )


_add("timm", "timm:NAME, any model of timm.list_models() (its own input size, classification loss)",
     matches=lambda t: t.startswith(TIMM_PREFIX), build=_timm_step,
     fused_attention=lambda _t: True, example="timm:vit_base_patch16_224", listing=timm_names)


# --- a user's own module: package.module:factory ---------------------------------------------------
_FACTORY = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def _is_factory(text: str) -> bool:
    return bool(_FACTORY.match(text)) and not Path(text).exists()


def parse_input_shape(text: str | None) -> list[tuple[int, ...]] | None:
    """``--input-shape 3,224,224`` (per sample; several inputs separated by ``;``) as a list of shapes."""
    if text is None or not str(text).strip():
        return None
    shapes = []
    for part in str(text).split(";"):
        try:
            dims = tuple(int(d) for d in part.split(","))
        except ValueError:
            dims = ()
        if not dims or any(d <= 0 for d in dims):
            raise ConfigError(f"--input-shape takes positive integers per sample, e.g. 3,224,224 (several inputs "
                              f"separated by ';'); got {text!r}")
        shapes.append(dims)
    return shapes


def load_factory(text: str):
    """The module and the callable ``package.module:factory`` names (ConfigError saying what is missing)."""
    mod_name, attr = text.split(":", 1)
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # as uvicorn does: modules of the current folder import
    try:
        module = importlib.import_module(mod_name)
    except Exception as exc:  # noqa: BLE001 - importing a user's module runs their code
        raise ConfigError(f"cannot import module {mod_name!r} of {text!r}: {_first_line(exc)}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            known = [n for n in dir(obj) if not n.startswith("_")]
            raise UnknownNameError(f"attribute of {mod_name}", attr, known)
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"{text!r} is not callable: a factory is a function or class that returns an nn.Module")
    return module, obj


def _factory_step(text: str, *, batch_size, device, optimizer, precision, freeze, seq_len=None, inputs=None, **_):
    import torch
    from torch import nn

    from traincast.workload.build import _module_step

    module, factory = load_factory(text)
    try:
        with torch.device(device):
            model = factory()
    except Exception as exc:  # noqa: BLE001 - the user's factory runs the user's code
        raise ConfigError(f"the factory {text!r} failed while building the model: {_first_line(exc)}") from None
    if not isinstance(model, nn.Module):
        raise ConfigError(f"the factory {text!r} returned a {type(model).__name__}, not a torch nn.Module")
    example = getattr(module, "example_inputs", None)
    if inputs is None and callable(example):
        def inputs(b, dev, _f=example):
            try:
                out = _f(b, dev)
            except Exception as exc:  # noqa: BLE001 - the user's code
                raise ConfigError(f"example_inputs({b}, {dev}) of {module.__name__} failed: {_first_line(exc)}") from None
            if isinstance(out, torch.Tensor):
                return (out,)
            if isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out) and out:
                return tuple(out)
            raise ConfigError(f"example_inputs of {module.__name__} must return a tensor or a tuple of tensors, "
                              f"got {type(out).__name__}")
    if inputs is None:
        raise ConfigError(f"{text!r} needs its inputs: give --input-shape C,H,W (per sample) or define "
                          f"example_inputs(batch_size, device) in {module.__name__}")
    if seq_len is not None:
        raise ConfigError(f"--seq-len does not apply to {text!r}: its inputs come from --input-shape or "
                          "example_inputs")
    return _module_step(model, inputs, batch_size=batch_size, device=device, optimizer=optimizer,
                        precision=precision, freeze=freeze, name=text)


_add("python", "package.module:factory, a function returning your nn.Module (inputs from example_inputs(batch_size, "
     "device) in that module, or --input-shape)",
     matches=_is_factory, build=_factory_step, fused_attention=lambda _t: True, example="mypkg.models:make_net")


# --- diffusers ------------------------------------------------------------------------------------
def _json_dict(text: str) -> dict | None:
    p = Path(text)
    if p.suffix != ".json" or not p.is_file():
        return None
    try:
        data = json.loads(p.read_text())
    except (ValueError, OSError):
        return None
    return data if isinstance(data, dict) else None


def _is_diffusers(text: str) -> bool:
    data = _json_dict(text)
    return data is not None and "_class_name" in data


_add("diffusers", "a diffusers config (JSON with _class_name: " "UNet2DConditionModel, SD3Transformer2DModel, "
     "FluxTransformer2DModel, DiTTransformer2DModel, PixArtTransformer2DModel, AutoencoderKL, UNet2DModel): "
     "a noise-prediction step",
     matches=_is_diffusers, build=lambda text, **kw: _diffusers_step(text, **kw), fused_attention=lambda _t: True,
     example="unet/config.json")


def _hf_build(text, *, seq_len=None, inputs=None, **kw):
    from traincast.workload import zoo

    return zoo.hf_config_step(text, seq_len=seq_len, **kw)


def _is_hf(text: str) -> bool:
    from traincast.workload import zoo

    return zoo.is_hf_config(text)


_add("hf-config", "a Hugging Face config.json (or a folder holding one), built from the config, no weights",
     matches=_is_hf, build=_hf_build, fused_attention=lambda _t: True, example="llama/config.json")


def _llm_build(text, *, seq_len=None, inputs=None, **kw):
    from traincast.workload import llms

    return llms.build(text, seq_len=seq_len, **kw)


def _llm_matches(text: str) -> bool:
    from traincast.workload import llms

    return llms.resolve(text) is not None


def _llm_names() -> list[str]:
    from traincast.workload import llms

    return list(llms.models())


_add("llm", "a named language model (llama-3.1-70b, qwen2.5-72b, mixtral-8x7b...) or its hub id "
     "(meta-llama/Llama-3.1-70B): its published config.json, no weights (`traincast models`)",
     matches=_llm_matches, build=_llm_build, fused_attention=lambda _t: True, example="llama-3.1-8b",
     listing=_llm_names)


def _spec_build(text, *, seq_len=None, inputs=None, **kw):
    from traincast.workload.spec import build_spec_step

    if seq_len is not None:
        raise ConfigError(f"--seq-len does not apply to the layer spec {text!r}: its input is an image")
    return build_spec_step(text, **kw)


_add("spec", "a .yaml/.json layer spec (Keras-like layers)",
     matches=lambda t: t.endswith((".yaml", ".yml", ".json")) or Path(t).is_file(), build=_spec_build,
     fused_attention=lambda _t: False, example="examples/mnist.yaml")


def _zoo_build(text, *, seq_len=None, inputs=None, **kw):
    from traincast.workload import zoo

    if not str(text).strip():
        raise ConfigError("the model name is empty; give a zoo name (`traincast models`), a layer spec (.yaml) or "
                          "a Hugging Face config.json")
    if Path(text).is_dir():
        raise ConfigError(f"model {text!r} is a folder without a config.json; give a zoo name, a layer spec "
                          "(.yaml) or a Hugging Face config.json")
    entry = zoo.get(text)
    if seq_len is not None and entry.family in ("vision", "gan", "spec"):
        raise ConfigError(f"--seq-len does not apply to {entry.name}: it takes images, not sequences")
    return entry.build(seq_len=seq_len, **kw)


def _zoo_fused(text: str) -> bool:
    from traincast.workload import zoo

    if Path(text).is_dir():
        return False
    e = zoo.get(text)
    return e.family in ("transformer", "translation") or e.name.startswith("vit")


def _zoo_names() -> list[str]:
    from traincast.workload import zoo

    return list(zoo.ZOO) + [n for n in zoo.all_torchvision_names() if n not in zoo.ZOO]


_add("zoo", "a zoo name or any torchvision model: classification, segmentation, video, optical flow, "
     "quantization-aware (`traincast models`)",
     matches=lambda _t: True, build=_zoo_build, fused_attention=_zoo_fused, example="resnet50", listing=_zoo_names)


# --- diffusers: the noise-prediction step of each model class ----------------------------------------------
DIFFUSERS_STEPS: Registry[Callable] = Registry("diffusers model class")


@functools.lru_cache(maxsize=1)
def diffusers_defaults() -> dict:
    """Per class: the pipeline's text length and latent side (``data/diffusers_inputs.yaml``, with its source)."""
    from traincast import yamlio

    return yamlio.safe_load((Path(__file__).parent / "data" / "diffusers_inputs.yaml").read_text())["classes"]


def _text_len(seq_len, cls: str) -> int:
    return int(seq_len or diffusers_defaults()[cls]["text_tokens"])


def _side(cfg, cls: str) -> int:
    """The config's ``sample_size`` (an int or [h, w]); the pipeline's where the config leaves it out."""
    s = getattr(cfg, "sample_size", None)
    if s is None:
        return int(diffusers_defaults()[cls]["sample_size"])
    return int(s if isinstance(s, int) else s[0])


@DIFFUSERS_STEPS.register("UNet2DConditionModel", help="Stable Diffusion 1.x/2.x/XL UNet: latents, timestep, "
                          "77 text tokens of cross_attention_dim (SDXL: pooled text and time ids)")
def _unet_inputs(cfg, model, b, dev, seq_len):
    import torch

    s = _side(cfg, "UNet2DConditionModel")
    width = cfg.cross_attention_dim
    width = int(width[0] if isinstance(width, (list, tuple)) else width)
    kw = {"sample": torch.randn(b, cfg.in_channels, s, s, device=dev),
          "timestep": torch.randint(0, 1000, (b,), device=dev),
          "encoder_hidden_states": torch.randn(b, _text_len(seq_len, "UNet2DConditionModel"), width, device=dev)}
    if getattr(cfg, "addition_embed_type", None) == "text_time":
        time_dim = int(cfg.addition_time_embed_dim) * 6
        kw["added_cond_kwargs"] = {
            "text_embeds": torch.randn(b, int(cfg.projection_class_embeddings_input_dim) - time_dim, device=dev),
            "time_ids": torch.randn(b, 6, device=dev)}
    desc = f"{b}x{cfg.in_channels}x{s}x{s} latents, {kw['encoder_hidden_states'].shape[1]} text tokens of {width}"
    return kw, desc


@DIFFUSERS_STEPS.register("SD3Transformer2DModel", help="Stable Diffusion 3 MMDiT: latents, timestep, 333 text "
                          "tokens (77 CLIP + 256 T5) of joint_attention_dim, pooled projections")
def _sd3_inputs(cfg, model, b, dev, seq_len):
    import torch

    s = _side(cfg, "SD3Transformer2DModel")
    kw = {"hidden_states": torch.randn(b, cfg.in_channels, s, s, device=dev),
          "encoder_hidden_states": torch.randn(b, _text_len(seq_len, "SD3Transformer2DModel"),
                                               int(cfg.joint_attention_dim), device=dev),
          "pooled_projections": torch.randn(b, int(cfg.pooled_projection_dim), device=dev),
          "timestep": torch.randint(0, 1000, (b,), device=dev)}
    return kw, f"{b}x{cfg.in_channels}x{s}x{s} latents, {kw['encoder_hidden_states'].shape[1]} text tokens"


@DIFFUSERS_STEPS.register("FluxTransformer2DModel", help="Flux: 2x2-packed latents of a 1024-pixel image (4096 "
                          "tokens), 512 T5 tokens of joint_attention_dim, pooled projections, guidance")
def _flux_inputs(cfg, model, b, dev, seq_len):
    import torch

    side = _side(cfg, "FluxTransformer2DModel") // 2  # latents packed 2x2
    n_img, n_txt = side * side, _text_len(seq_len, "FluxTransformer2DModel")
    kw = {"hidden_states": torch.randn(b, n_img, cfg.in_channels, device=dev),
          "encoder_hidden_states": torch.randn(b, n_txt, int(cfg.joint_attention_dim), device=dev),
          "pooled_projections": torch.randn(b, int(cfg.pooled_projection_dim), device=dev),
          "timestep": torch.rand(b, device=dev),
          "img_ids": torch.zeros(n_img, 3, device=dev), "txt_ids": torch.zeros(n_txt, 3, device=dev)}
    if getattr(cfg, "guidance_embeds", False):
        kw["guidance"] = torch.ones(b, device=dev)
    return kw, f"{b}x{n_img} packed latent tokens of {cfg.in_channels}, {n_txt} text tokens"


@DIFFUSERS_STEPS.register("DiTTransformer2DModel", help="DiT: latents, timestep, class labels")
def _dit_inputs(cfg, model, b, dev, seq_len):
    import torch

    s = _side(cfg, "DiTTransformer2DModel")
    kw = {"hidden_states": torch.randn(b, cfg.in_channels, s, s, device=dev),
          "timestep": torch.randint(0, 1000, (b,), device=dev),
          "class_labels": torch.randint(0, int(getattr(cfg, "num_embeds_ada_norm", 1000) or 1000), (b,), device=dev)}
    return kw, f"{b}x{cfg.in_channels}x{s}x{s} latents, class-conditional"


@DIFFUSERS_STEPS.register("PixArtTransformer2DModel", help="PixArt: latents, timestep, 120 T5 tokens of "
                          "caption_channels (else cross_attention_dim)")
def _pixart_inputs(cfg, model, b, dev, seq_len):
    import torch

    s = _side(cfg, "PixArtTransformer2DModel")
    kw = {"hidden_states": torch.randn(b, cfg.in_channels, s, s, device=dev),
          # T5 embeddings of caption_channels, projected inside; without a projection, already cross_attention_dim
          "encoder_hidden_states": torch.randn(b, _text_len(seq_len, "PixArtTransformer2DModel"),
                                               int(cfg.caption_channels or cfg.cross_attention_dim), device=dev),
          "timestep": torch.randint(0, 1000, (b,), device=dev),
          "added_cond_kwargs": {"resolution": None, "aspect_ratio": None}}
    if getattr(model, "use_additional_conditions", False):
        kw["added_cond_kwargs"] = {"resolution": torch.full((b, 2), 8.0 * s, device=dev),
                                   "aspect_ratio": torch.ones(b, 1, device=dev)}
    return kw, f"{b}x{cfg.in_channels}x{s}x{s} latents, {kw['encoder_hidden_states'].shape[1]} text tokens"


@DIFFUSERS_STEPS.register("UNet2DModel", help="unconditional DDPM UNet: images, timestep")
def _unet2d_inputs(cfg, model, b, dev, seq_len):
    import torch

    s = _side(cfg, "UNet2DModel")
    kw = {"sample": torch.randn(b, cfg.in_channels, s, s, device=dev),
          "timestep": torch.randint(0, 1000, (b,), device=dev)}
    return kw, f"{b}x{cfg.in_channels}x{s}x{s} images"


@DIFFUSERS_STEPS.register("AutoencoderKL", help="the VAE: images in, reconstruction loss (MSE)")
def _vae_inputs(cfg, model, b, dev, seq_len):
    import torch

    s = _side(cfg, "AutoencoderKL")
    kw = {"sample": torch.randn(b, cfg.in_channels, s, s, device=dev)}
    return kw, f"{b}x{cfg.in_channels}x{s}x{s} images, reconstruction"


def _diffusers_step(text: str, *, batch_size, device, optimizer, precision, freeze, seq_len=None, inputs=None, **_):
    import torch
    import torch.nn.functional as F

    from traincast.workload.steps import supervised_step

    try:
        import diffusers
    except ImportError:
        raise ConfigError("diffusers configs need the diffusers package: pip install diffusers") from None
    data = _json_dict(text)
    cls_name = data.get("_class_name")
    if not isinstance(cls_name, str):
        raise SpecError(f"{text}: _class_name must be a diffusers model class name, got {cls_name!r}")
    make_inputs = DIFFUSERS_STEPS.get(cls_name)  # unknown class: did-you-mean over the supported ones
    cls = getattr(diffusers, cls_name, None)
    if cls is None:
        raise SpecError(f"{text}: diffusers {diffusers.__version__} has no class {cls_name!r}")
    diffusers.utils.logging.set_verbosity_error()
    try:
        with torch.device(device):
            model = cls.from_config({k: v for k, v in data.items()})
    except Exception as exc:  # noqa: BLE001 - diffusers validates configs with its own errors
        raise SpecError(f"{text}: not a valid {cls_name} config: {_first_line(exc)}") from None
    cfg = model.config
    try:
        kw, desc = make_inputs(cfg, model, batch_size, device, seq_len)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise SpecError(f"{text}: the {cls_name} config lacks what its inputs need: {_first_line(exc)}") from None

    def make_batch(dev):
        return (), kw, None

    def loss_fn(out, _t):
        pred = out.sample if hasattr(out, "sample") else out[0]
        if cls_name == "AutoencoderKL":  # reconstruction of the input images
            return F.mse_loss(pred.float(), kw["sample"].float())
        noise = torch.randn(pred.shape, device=pred.device)  # the noise (or velocity) the model predicts
        return F.mse_loss(pred.float(), noise)

    name = Path(text).parent.name if Path(text).stem == "config" and Path(text).parent.name else Path(text).stem
    return supervised_step(
        f"{name} ({cls_name})", model, make_batch, loss_fn, batch_size=batch_size, device=device,
        optimizer=optimizer, precision=precision, freeze=freeze, input_description=desc,
    )
