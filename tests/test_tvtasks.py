"""torchvision models beyond classification (workload/tvtasks.py): segmentation, video, optical flow and
quantization-aware training, checked against torchvision's own published parameter and operation counts; detection
named and refused with one line."""

import json

import pytest
from torchvision.models import get_model_weights

from traincast.cli.main import _register_all, run
from traincast.errors import TraceError
from traincast.workload import trace
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


def test_detection_is_named_and_refused_with_one_line(capsys):
    with pytest.raises(TraceError, match="detection models are not supported yet"):
        trace("fasterrcnn_resnet50_fpn", batch_size=2)
    assert run(["predict", "maskrcnn_resnet50_fpn", "--gpu", "A100", "-b", "2"]) == 2
    err = capsys.readouterr().err
    assert "detection models are not supported yet" in err and "Traceback" not in err


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
