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
detection         the sum of the model's loss dict        COCO: 480x640 images (its most common size), which the
(Faster/Mask/     (references/detection/engine.py),       model's transform resizes (800 px short side for the
Keypoint R-CNN,   backbone as the recipes train it:       R-CNNs, RetinaNet and FCOS, 300/320 squares for SSD);
RetinaNet, FCOS,  ImageNet-initialised, frozen batch      7 objects an image (COCO's mean), Keypoint R-CNN 3
SSD, SSDlite)     norm, first layers not trained          people with 17 keypoints; multi-scale training (Keypoint
                                                          R-CNN's 640-800) at the root-mean-square side
================= ====================================== ============================================================

Detection takes shapes from values in three places, each answered as training sees it and said in the forecast:
the targets are real CPU tensors moved to meta, so the box checks (``Tensor.item()``) and the target resizing are
followed with their values (``ExpectedSelections``, ``_OpRecorder._follow``); non-maximum suppression keeps every
box (the RPN then takes its top 2,000 an image, as it does whenever NMS leaves more, which thousands of candidates
do); and the R-CNN sampler's positives are :data:`POSITIVES_PER_OBJECT` an object up to its quota (128 of 512),
measured in a published training log, on which the mask and keypoint heads run.
"""

from __future__ import annotations

import contextlib
import functools
import re
import warnings

import torch
import torch.nn.functional as F

from traincast.errors import ConfigError, TraceError
from traincast.workload.selections import numbers_followed
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
    # COCO train2017 less the 1,021 images without annotations, which the reference drops
    # (references/detection/coco_utils.py _coco_remove_images_without_annotations)
    "detection": 117266,
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
            "detection": "keypoint detection (COCO people)" if name.startswith("keypointrcnn") else
            "instance segmentation (COCO)" if name.startswith("maskrcnn") else "object detection (COCO)",
            }[task] + f", {name} (torchvision)"


def dataset_size(name: str) -> int:
    """Training samples an epoch for the task's reference recipe."""
    if name.startswith("keypointrcnn"):
        return KEYPOINT_IMAGES
    return DATASET_SIZE[task_names()[name]]


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
    opts = _options()
    step_args = dict(batch_size=batch_size, device=device, optimizer=optimizer, precision=precision, freeze=freeze)
    if task == "detection":
        return _detection(name, opts, step_args)
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


# --- detection -------------------------------------------------------------------------------------------
COCO_IMAGE = (480, 640)  # the most common COCO image size (height, width); the model's transform resizes it
COCO_BOXES = 7  # COCO train2017: 860,001 instances over 118,287 images, 7.3 an image (Lin et al. 2014)
COCO_PEOPLE = 3  # COCO person keypoints train2017: 150K people in 57K images, 2.6 an image (Sun et al. 2019)
KEYPOINT_IMAGES = 57000  # ibid.: the images of train2017 with annotated people
# positive proposals the R-CNN sampler finds an object: 42.8 of 512 sampled an image in a tensorpack Faster R-CNN
# FPN training log on VOC07+12 (github.com/tensorpack/tensorpack/issues/1023: fastrcnn_losses/num_fg_label 42.771,
# late in training), whose 16,551 trainval images hold 40,058 objects (2.42 an image)
POSITIVES_PER_OBJECT = 42.771 / (40058 / 16551)
MAX_SIZE_RATIO = 1333 / 800  # GeneralizedRCNNTransform's max_size / min_size of every torchvision recipe


class _Detector(torch.nn.Module):
    """A detection model called as its reference training loop calls it: a list of images and a list of target
    dicts, which are made on the CPU with real values (boxes, labels, masks, keypoints) and moved to the model's
    device inside the step, so that the trace follows them (the model checks its boxes with ``Tensor.item()``)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, images, targets):
        dev = images[0].device
        with numbers_followed():  # the boxes are rescaled by torch.tensor(...) factors, then checked by value
            return self.model(images, [{k: v.to(dev) for k, v in t.items()} for t in targets])


@functools.lru_cache(maxsize=1)
def _weights_enum_builders() -> dict[type, str]:
    """torchvision weight enum class -> the name of the model builder it belongs to."""
    from torchvision.models import get_model_weights, list_models

    out = {}
    for n in list_models():
        try:
            out[get_model_weights(n)] = n
        except (ValueError, KeyError):
            continue
    return out


@contextlib.contextmanager
def _pretrained_backbone_shapes():
    """Build a detector as its recipe trains it, on an ImageNet backbone (frozen batch norm, the first layers not
    trained: torchvision's builders decide both from whether backbone weights are given), without downloading
    them: a backbone weight enum's ``get_state_dict`` answers with its builder's own state dict on meta, which
    ``load_state_dict`` accepts (shapes only)."""
    from torchvision.models import get_model
    from torchvision.models._api import WeightsEnum

    builders = _weights_enum_builders()
    original = WeightsEnum.get_state_dict

    def shapes_only(self, *args, **kwargs):
        with torch.device("meta"):
            return get_model(builders[type(self)], weights=None).state_dict()

    WeightsEnum.get_state_dict = shapes_only
    try:
        yield
    finally:
        WeightsEnum.get_state_dict = original


def positives(model, objects: int) -> int | None:
    """Positive proposals an image the R-CNN heads train on: ``POSITIVES_PER_OBJECT`` a ground-truth object, at
    most the sampler's quota (``positive_fraction`` of ``batch_size_per_image``: 128 of 512 in every torchvision
    recipe). None for single-stage detectors."""
    sampler = getattr(getattr(model, "roi_heads", None), "fg_bg_sampler", None)
    if sampler is None:
        return None
    quota = int(sampler.batch_size_per_image * sampler.positive_fraction)
    return min(quota, int(round(POSITIVES_PER_OBJECT * objects)))


def _sampled_labels(model, objects: int) -> int | None:
    """The R-CNN box sampler takes up to its quota of positives (IoU >= 0.5 with an object) and fills the rest of
    its ``batch_size_per_image`` with negatives; the mask and keypoint heads run on the positives only. How many
    positives exist, values decide: on meta, the sampled labels are given real values with :func:`positives`
    of them positive, so that every selection of ``labels > 0`` takes that count. Returns that count (None for
    single-stage detectors)."""
    heads = getattr(model, "roi_heads", None)
    quota = positives(model, objects)
    if quota is None:
        return None
    original = heads.select_training_samples

    def select(proposals, targets):
        proposals, matched_idxs, labels, regression_targets = original(proposals, targets)
        if labels and labels[0].device.type == "meta":
            labels = [torch.cat([torch.ones(min(quota, lab.shape[0]), dtype=lab.dtype),
                                 torch.zeros(lab.shape[0] - min(quota, lab.shape[0]), dtype=lab.dtype)]).to(lab.device)
                      for lab in labels]
        return proposals, matched_idxs, labels, regression_targets

    heads.select_training_samples = select
    return quota


def _detection(name: str, opts, step_args: dict):
    from traincast.workload.steps import supervised_step

    batch_size = step_args["batch_size"]
    kwargs: dict = {}
    fixed = name.startswith("ssd")  # SSD300 / SSDlite320: the transform resizes every image to a fixed square
    if opts.image_size:
        if fixed:
            raise ConfigError(f"--image-size does not apply to {name}: its transform resizes every image to "
                              f"{'300x300' if name.startswith('ssd300') else '320x320'}")
        kwargs.update(min_size=opts.image_size, max_size=int(round(opts.image_size * MAX_SIZE_RATIO)))
    with warnings.catch_warnings(), _pretrained_backbone_shapes():
        warnings.simplefilter("ignore")
        model = torchvision_model(name, step_args["device"], **kwargs)
    keypoints = name.startswith("keypointrcnn")
    masks = name.startswith("maskrcnn")
    h, w = COCO_IMAGE
    n_obj = COCO_PEOPLE if keypoints else COCO_BOXES
    pos = _sampled_labels(model, n_obj)
    multi = ""
    sizes = getattr(getattr(model, "transform", None), "min_size", ())
    if len(sizes) > 1:  # multi-scale training draws a short side an image: the step at the expected cost
        rms = (sum(x * x for x in sizes) / len(sizes)) ** 0.5
        model.transform.min_size = (int(round(rms)),)
        multi = f" (multi-scale {min(sizes)}-{max(sizes)}: the root-mean-square side, as cost grows with area)"
    classes = model.roi_heads.box_predictor.cls_score.out_features if hasattr(model, "roi_heads") else 91

    def make_batch(dev):
        g = torch.Generator().manual_seed(0)
        images = [torch.randn(3, h, w, device=dev) for _ in range(batch_size)]
        targets = []
        for _ in range(batch_size):
            xy = torch.rand(n_obj, 2, generator=g) * torch.tensor([w * 0.7, h * 0.7])
            wh = (torch.rand(n_obj, 2, generator=g) * 0.25 + 0.05) * torch.tensor([w, h])
            t = {"boxes": torch.cat([xy, xy + wh], 1),
                 "labels": torch.randint(1, max(classes, 2), (n_obj,), generator=g)}
            if masks:
                t["masks"] = torch.zeros(n_obj, h, w, dtype=torch.uint8)
            if keypoints:
                kp = torch.rand(n_obj, 17, 2, generator=g) * wh[:, None] + xy[:, None]
                t["keypoints"] = torch.cat([kp, torch.full((n_obj, 17, 1), 2.0)], 2)
            targets.append(t)
        return (images, targets), {}, None

    def loss_fn(losses, _):  # references/detection/engine.py: the sum of the loss dict
        return sum(losses.values())

    what = "people with 17 keypoints" if keypoints else "objects" + (" with masks" if masks else "")
    size = ("resized to 300x300" if name.startswith("ssd300") else "resized to 320x320" if fixed else
            f"resized to a {model.transform.min_size[0]} px short side{multi} (at most {model.transform.max_size})")
    rpn = getattr(model, "rpn", None)
    sampled = "" if pos is None else (
        (f"; the RPN's top {rpn._post_nms_top_n['training']} proposals an image after NMS (NMS taken to leave "
         "more)" if rpn is not None and hasattr(rpn, "_post_nms_top_n") else "")
        + f"; the box head on {model.roi_heads.fg_bg_sampler.batch_size_per_image} sampled proposals an image, "
        f"{pos} of them positive (about {POSITIVES_PER_OBJECT:.0f} an object, measured)"
        + (", the mask head on those" if masks else ", the keypoint head on those" if keypoints else ""))
    return supervised_step(name, _Detector(model), make_batch, loss_fn, **step_args, input_description=(
        f"{batch_size} {h}x{w} images {size}, {n_obj} {what} an image (COCO's mean)" + sampled))
