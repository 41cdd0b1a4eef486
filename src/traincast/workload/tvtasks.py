"""torchvision models beyond image classification: each task's training step, as torchvision's own reference
training scripts (``references/`` in the torchvision repository) run it.

================= ====================================== ============================================================
torchvision       the step                               inputs (``--image-size`` / ``--num-frames`` change them)
================= ====================================== ============================================================
segmentation      cross-entropy on the ``out`` logits,   480x480 crops (the reference's ``crop_size``), 21 classes
(FCN, DeepLabV3,  plus 0.5x on the ``aux`` logits         (COCO with VOC labels); FCN and DeepLabV3 with their
LR-ASPP)          (``--aux-loss``, as its recipes run)    auxiliary head, as every published recipe trains them
video             cross-entropy, 400 classes              clips of the length its Kinetics-400 weights were
(R3D, MC3,        (Kinetics-400)                          evaluated with (``clip_len`` in their ``_docs``) at
R(2+1)D, S3D,                                              their transforms' ``crop_size``: 16x112x112 for the
MViT, Swin3D)                                              ResNets (the reference's training default too),
                                                           16x224x224 MViT, 32x224x224 Swin3D (weights ported from
                                                           their authors' recipes), 128x224x224 S3D (evaluated at
                                                           128; its training clips may be shorter: --num-frames)
optical flow      RAFT's sequence loss: the L1 error of   two 368x496 frames (FlyingChairs crops, the reference's
(RAFT)            each of the 12 refinements, weighted    first training stage), 12 flow updates, dense flow
                  0.8^(12 - i)                             targets
quantization      quantization-aware training: the float  224x224 (Inception: 299) ImageNet images, as the float
(``quantized_*``) model fused and prepared with fake       model; the reference's ``train_quantization.py`` steps
                  quantizers (``fbgemm``, the x86 server   (its default backend is ``qnnpack``, per-tensor weight
                  backend's QAT qconfig: per-channel       quantizers, a little cheaper; torchvision's published
                  weight quantizers)                       quantized weights are mostly post-training quantized)
================= ====================================== ============================================================

Detection models (Faster/Mask/Keypoint R-CNN, RetinaNet, FCOS, SSD) are named but refused: their training step
checks its targets with ``Tensor.item()`` and sizes its proposals by non-maximum suppression, which values decide
and the meta device does not hold.
"""

from __future__ import annotations

import functools
import re
import warnings

import torch
import torch.nn.functional as F

from traincast.errors import ConfigError, TraceError
from traincast.workload.zoo import _vision_loss, torchvision_model

# torchvision module -> task
_MODULES = {"segmentation": "segmentation", "video": "video", "optical_flow": "optical-flow",
            "quantization": "quantization", "detection": "detection"}

# the training sets of each task's reference recipe (for --dataset-size's default)
DATASET_SIZE = {
    "segmentation": 118287,  # COCO train2017 images (the reference then drops those with < 1000 px of VOC classes)
    # Kinetics-400's 246,535 training videos as released (Kay et al. 2017; fewer remain downloadable), 5 clips of
    # each an epoch (references/video_classification/train.py: --clips-per-video 5, RandomClipSampler)
    "video": 5 * 246535,
    "optical-flow": 22232,  # FlyingChairs training pairs (Dosovitskiy et al. 2015)
    "quantization": 1281167,  # ImageNet-1k training images
    "detection": 118287,  # COCO train2017
}
SEGMENTATION_CROP = 480  # references/segmentation/train.py: SegmentationPresetTrain(base_size=520, crop_size=480)
SEGMENTATION_CLASSES = 21  # COCO_WITH_VOC_LABELS
FLOW_CROP = (368, 496)  # RAFT's FlyingChairs stage (Teed & Deng 2020; references/optical_flow --crop-size)
FLOW_UPDATES = 12  # references/optical_flow/train.py --num-flow-updates for training
FLOW_GAMMA = 0.8  # RAFT's sequence-loss weight


@functools.lru_cache(maxsize=1)
def task_names() -> dict[str, str]:
    """Every torchvision model outside ``torchvision.models`` proper: name -> task."""
    import torchvision.models as tvm

    out = {}
    for module, task in _MODULES.items():
        for name in tvm.list_models(module=getattr(tvm, module)):
            out[name] = task
    return out


def description(name: str) -> str:
    task = task_names()[name]
    return {"segmentation": "semantic segmentation", "video": "video classification (Kinetics-400)",
            "optical-flow": "optical flow", "quantization": "quantization-aware training",
            "detection": "object detection (not supported)"}[task] + f", {name} (torchvision)"


def _options():
    from traincast.workload.hf import current_options

    return current_options()


def _docs_clip_len(name: str) -> int | None:
    """The frames per clip the model's Kinetics-400 weights document (``clip_len=16`` in their ``_docs``)."""
    from torchvision.models import get_model_weights

    for w in get_model_weights(name):
        m = re.search(r"clip_len=(\d+)", w.meta.get("_docs", ""))
        if m:
            return int(m.group(1))
    return None


def _crop(name: str) -> tuple[int, int]:
    from torchvision.models import get_model_weights

    for w in get_model_weights(name):
        crop = getattr(w.transforms, "keywords", {}).get("crop_size")
        if crop:
            return int(crop[0]), int(crop[1])
    return 224, 224


_META_LIB = None


_FIXED_FAKE_QUANT = "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams"


def _fake_quant_meta() -> None:
    """A meta kernel for the fixed-scale fake quantizer (MobileNetV3's hard-sigmoid under QAT), which PyTorch
    registers for CPU and CUDA only: the output and its straight-through mask, shaped as the input. Registered
    once, and only where no meta kernel exists (a later PyTorch may bring its own)."""
    global _META_LIB
    if _META_LIB is not None or torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{_FIXED_FAKE_QUANT}", "Meta"):
        return

    def fake_quant(x, scale, zero_point, enabled, quant_min, quant_max):
        return torch.empty_like(x), torch.empty_like(x, dtype=torch.bool)

    try:
        lib = torch.library.Library("aten", "IMPL")
        lib.impl(_FIXED_FAKE_QUANT, fake_quant, "Meta")
    except RuntimeError as exc:  # another registration got there first, or the op changed: one line, no traceback
        raise TraceError(f"cannot trace quantization-aware training here: registering a meta kernel for "
                         f"aten::{_FIXED_FAKE_QUANT} failed ({str(exc).splitlines()[0][:160]})") from None
    _META_LIB = lib


def build(name: str, *, batch_size, device, optimizer, precision, freeze, seq_len=None, **_):
    from traincast.workload.steps import supervised_step

    task = task_names()[name]
    if seq_len is not None:
        raise ConfigError(f"--seq-len does not apply to {name}: it takes images, not sequences")
    if task == "detection":
        raise TraceError(
            f"cannot trace {name}: torchvision detection models are not supported yet: their training step checks "
            "its box targets with Tensor.item() and keeps the proposals non-maximum suppression leaves, which only "
            "real values decide (the meta device holds none); forecast its backbone (e.g. resnet50) or pass the "
            "model as a package.module:factory with fixed-size inputs")
    opts = _options()
    step_args = dict(batch_size=batch_size, device=device, optimizer=optimizer, precision=precision, freeze=freeze)
    if task == "segmentation":
        kwargs = {"weights_backbone": None, "num_classes": SEGMENTATION_CLASSES}
        if not name.startswith("lraspp"):
            kwargs["aux_loss"] = True
        model = torchvision_model(name, device, **kwargs)
        side = opts.image_size or SEGMENTATION_CROP

        def make_batch(dev):
            x = torch.randn(batch_size, 3, side, side, device=dev)
            y = torch.randint(0, SEGMENTATION_CLASSES, (batch_size, side, side), device=dev)
            return (x,), {}, y

        def loss_fn(out, y):
            loss = F.cross_entropy(out["out"], y, ignore_index=255)
            if "aux" in out:
                loss = loss + 0.5 * F.cross_entropy(out["aux"], y, ignore_index=255)
            return loss

        return supervised_step(name, model, make_batch, loss_fn, **step_args, input_description=(
            f"{batch_size}x3x{side}x{side} images, {SEGMENTATION_CLASSES}-class masks"
            + (", auxiliary head (0.5)" if "aux_loss" in kwargs else "")))
    if task == "video":
        model = torchvision_model(name, device)
        h, w = (opts.image_size, opts.image_size) if opts.image_size else _crop(name)
        frames = opts.num_frames or _docs_clip_len(name) or 16

        def make_batch(dev):
            x = torch.randn(batch_size, 3, frames, h, w, device=dev)
            y = torch.randint(0, 400, (batch_size,), device=dev)
            return (x,), {}, y

        return supervised_step(name, model, make_batch, F.cross_entropy, **step_args,
                               input_description=f"{batch_size}x3x{frames}x{h}x{w} clips, 400 classes")
    if task == "optical-flow":
        model = torchvision_model(name, device)
        h, w = (opts.image_size, opts.image_size) if opts.image_size else FLOW_CROP

        def make_batch(dev):
            a = torch.randn(batch_size, 3, h, w, device=dev)
            b = torch.randn(batch_size, 3, h, w, device=dev)
            flow = torch.randn(batch_size, 2, h, w, device=dev)
            return (a, b), {"num_flow_updates": FLOW_UPDATES}, flow

        def loss_fn(preds, flow):  # references/optical_flow/utils.py sequence_loss (every pixel valid)
            n = len(preds)
            return sum(FLOW_GAMMA ** (n - i - 1) * (p - flow).abs().mean() for i, p in enumerate(preds))

        return supervised_step(name, model, make_batch, loss_fn, **step_args, input_description=(
            f"{batch_size} pairs of 3x{h}x{w} frames, {FLOW_UPDATES} flow updates"))
    # quantization-aware training of the float model (references/classification/train_quantization.py)
    import torch.ao.quantization as tq

    _fake_quant_meta()
    kwargs = {"quantize": False}
    if name in ("quantized_googlenet", "quantized_inception_v3"):
        kwargs.update(aux_logits=True, init_weights=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
        model = torchvision_model(name, device, **kwargs)
        model.train()
        model.fuse_model(is_qat=True)
        model.qconfig = tq.get_default_qat_qconfig("fbgemm")
        tq.prepare_qat(model, inplace=True)
    side = opts.image_size or (299 if name == "quantized_inception_v3" else 224)

    def make_batch(dev):
        x = torch.randn(batch_size, 3, side, side, device=dev)
        y = torch.randint(0, 1000, (batch_size,), device=dev)
        return (x,), {}, y

    return supervised_step(name, model, make_batch, _vision_loss, **step_args, input_description=(
        f"{batch_size}x3x{side}x{side} images, 1000 classes, fake-quantized weights and activations (QAT)"))
