"""torchvision models beyond classification (workload/tvtasks.py): segmentation, video, optical flow and
quantization-aware training and detection, checked against torchvision's own published parameter and operation
counts."""

import json

import pytest
import torch
from torchvision.models import get_model_weights

from traincast.cli.main import _register_all, run
from traincast.workload import trace, tvtasks
from traincast.workload.hf import hf_options

_register_all()


def _meta(name):
    return list(get_model_weights(name))[0].meta


def _first_conv_input(wl):
    return next(o.input_shapes[0] for o in wl.ops if o.phase == "forward" and o.op_class.startswith("conv"))


@pytest.mark.parametrize("name, image_size, frames", [
    ("deeplabv3_mobilenet_v3_large", 520, None),  # torchvision counts its operations at its 520 evaluation size
    ("r3d_18", None, None),  # 16 x 112 x 112, its defaults
    ("s3d", None, 16),  # published at 16 frames; trained on 128
])
def test_parameters_and_forward_macs_match_torchvisions_published_counts(name, image_size, frames):
    with hf_options(image_size=image_size, num_frames=frames):
        wl = trace(name, batch_size=2)
    meta = _meta(name)
    assert wl.parameters == meta["num_params"]  # FCN/DeepLabV3 with their auxiliary head, as published
    macs_per_sample = wl.flops("forward") / 2 / 2 / 1e9  # two FLOPs a multiply-add, batch 2
    assert macs_per_sample == pytest.approx(meta["_ops"], rel=0.025)


def test_each_task_gets_its_recipes_inputs_and_loss():
    seg = trace("lraspp_mobilenet_v3_large", batch_size=2)
    assert seg.parameters == _meta("lraspp_mobilenet_v3_large")["num_params"]
    assert list(_first_conv_input(seg)) == [2, 3, 480, 480]  # the segmentation reference's 480 crops
    assert "auxiliary" not in seg.input_description  # LR-ASPP has no auxiliary head

    def losses(wl):
        return sum(1 for o in wl.ops if o.phase == "forward" and o.aten == "nll_loss2d_forward")

    assert losses(seg) == 1
    assert losses(trace("deeplabv3_mobilenet_v3_large", batch_size=2)) == 2  # out + 0.5 x aux: both in the loss

    swin = trace("swin3d_t", batch_size=2)
    assert "2x3x32x224x224 clips" in swin.input_description  # clip_len=32 from its weights' documentation
    r3d = trace("r3d_18", batch_size=2)
    assert list(_first_conv_input(r3d)) == [2, 3, 16, 112, 112]

    flow = trace("raft_small", batch_size=2)
    assert flow.parameters == _meta("raft_small")["num_params"]
    assert list(_first_conv_input(flow))[-2:] == [368, 496]
    # the sequence loss: one L1 term per flow update
    assert sum(1 for o in flow.ops if o.phase == "forward" and o.aten == "abs") == 12


def test_quantized_models_train_with_fake_quantizers():
    q = trace("quantized_resnet18", batch_size=4)
    f = trace("resnet18", batch_size=4)
    assert q.parameters == f.parameters
    fq = [o for o in q.ops if "fake_quant" in o.aten or "_fq_" in o.aten]
    assert fq and all(o.phase == "forward" for o in fq)
    assert not any("fq" in o.aten or "fake_quant" in o.aten for o in f.ops)
    # one fake quantizer per quantized weight and activation: 21 convolution/linear weights of ResNet-18 and more
    # activations (every module output that is quantized), each a pass over its tensor
    assert len(fq) > 2 * 21
    assert sum(o.bytes_total for o in q.ops) > 1.2 * sum(o.bytes_total for o in f.ops)
    # MobileNetV3's fixed-scale fake quantizer has no meta kernel in PyTorch; traincast gives it one
    mb = trace("quantized_mobilenet_v3_large", batch_size=2)
    assert any("fake_quantize_per_tensor_affine_cachemask" in o.aten for o in mb.ops)


def _box_head_macs_per_roi(model) -> int:
    """TwoMLPHead and FastRCNNPredictor of a Faster R-CNN, by hand: 256x7x7 -> 1024 -> 1024, then classes and boxes."""
    pred = model.roi_heads.box_predictor
    return 256 * 7 * 7 * 1024 + 1024 * 1024 + 1024 * pred.cls_score.out_features + 1024 * pred.bbox_pred.out_features


@pytest.mark.parametrize("name", ["retinanet_resnet50_fpn", "fcos_resnet50_fpn", "ssd300_vgg16",
                                  "fasterrcnn_resnet50_fpn"])
def test_detection_parameters_and_macs_match_torchvisions_published_counts(name, monkeypatch):
    """torchvision counts detection operations in eval mode on 800x800 images; training's forward adds only losses
    (RetinaNet, FCOS, SSD) or, for Faster R-CNN, runs the box head on the sampler's 512 proposals an image instead
    of the 1,000 proposals evaluation keeps."""
    from torchvision.models import get_model

    monkeypatch.setattr(tvtasks, "COCO_IMAGE", (800, 800))
    wl = trace(name, batch_size=2)
    meta = _meta(name)
    assert wl.parameters == meta["num_params"]  # frozen batch norm in the backbone, as the recipes train it
    published = meta["_ops"] * 1e9
    if name.startswith("fasterrcnn"):
        with torch.device("meta"):
            model = get_model(name, weights=None, weights_backbone=None)
        published -= (1000 - 512) * _box_head_macs_per_roi(model)
    assert wl.flops("forward") / 2 / 2 == pytest.approx(published, rel=0.01)
    assert wl.trainable_parameters < wl.parameters  # conv1 and layer1 (ResNet) / early layers not trained


def test_rcnn_heads_run_on_the_expected_proposals():
    mask = trace("maskrcnn_resnet50_fpn", batch_size=2)
    pos = round(tvtasks.POSITIVES_PER_OBJECT * tvtasks.COCO_BOXES)
    assert pos == 124 and "124 of them positive" in mask.input_description

    def rows(wl, module):
        return next(o.input_shapes[0][0] for o in wl.ops if o.phase == "forward" and o.module.endswith(module))

    assert rows(mask, "roi_heads.box_head.fc6") == 2 * 512  # the sampler's 512 proposals an image
    assert rows(mask, "roi_heads.mask_head.0.0") == 2 * pos  # the mask head on the positives only
    kp = trace("keypointrcnn_resnet50_fpn", batch_size=2)
    assert rows(kp, "roi_heads.keypoint_head.0") == 2 * round(tvtasks.POSITIVES_PER_OBJECT * tvtasks.COCO_PEOPLE)
    assert "multi-scale 640-800" in kp.input_description
    assert list(_first_conv_input(kp)) == [2, 3, 736, 992]  # 480x640 scaled to 722x962, padded to multiples of 32
    # every data-dependent read answered from followed values: the targets' checks read what training reads
    assert mask.data_dependent_reads == 0
    assert any(o.aten == "roi_align" for o in mask.ops) and any(o.aten == "_roi_align_backward" for o in mask.ops)
    assert trace("maskrcnn_resnet50_fpn", batch_size=2).flops() == mask.flops()  # deterministic


def test_detection_from_the_cli(capsys):
    assert run(["predict", "maskrcnn_resnet50_fpn", "--gpu", "A100", "-b", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["steps_per_epoch"] == 117266 // 2  # COCO train2017 with annotations
    assert run(["predict", "ssdlite320_mobilenet_v3_large", "--gpu", "A100", "-b", "4", "--image-size", "512"]) == 2
    err = capsys.readouterr().err
    assert "--image-size does not apply to ssdlite320_mobilenet_v3_large" in err and "Traceback" not in err


def test_cli_options_and_listing(capsys):
    assert run(["predict", "r3d_18", "--gpu", "A100", "-b", "2", "--seq-len", "16"]) == 2
    assert "--seq-len does not apply to r3d_18" in capsys.readouterr().err
    assert run(["trace", "r3d_18", "-b", "2", "--num-frames", "8", "--image-size", "128", "--json"]) == 0
    assert "2x3x8x128x128 clips" in json.loads(capsys.readouterr().out)["input_description"]
    assert run(["models", "--json"]) == 0
    names = {m["name"] for m in json.loads(capsys.readouterr().out)}
    assert {"deeplabv3_resnet50", "mvit_v2_s", "raft_large", "quantized_resnet50", "ssd300_vgg16"} <= names
    assert run(["predict", "deeplabv3_resnet5", "--gpu", "A100", "-b", "2"]) == 2
    assert "deeplabv3_resnet50" in capsys.readouterr().err  # did-you-mean
