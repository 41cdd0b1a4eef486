"""Model sources (workload/sources.py): timm, diffusers, a user's package.module:factory, and the registry."""

import json
import sys
import textwrap
from pathlib import Path

import pytest

from traincast.errors import ConfigError, SpecError, TraincastError, UnknownNameError
from traincast.workload import trace
from traincast.workload.sources import SOURCES, parse_input_shape, source_of

DIFF = Path(__file__).parent / "data" / "diffusers"


@pytest.fixture
def user_pkg(tmp_path, monkeypatch):
    (tmp_path / "mynets.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn

        def mlp():
            return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 10))

        def example_inputs(batch_size, device):
            return torch.randn(batch_size, 16, device=device)

        def broken():
            raise ZeroDivisionError("oops in my factory")

        def not_a_module():
            return 42
    """))
    (tmp_path / "noinputs.py").write_text("from torch import nn\ndef net():\n    return nn.Linear(12, 3)\n")
    (tmp_path / "badinputs.py").write_text(
        "from torch import nn\ndef net():\n    return nn.Linear(12, 3)\n"
        "def example_inputs(b, device):\n    raise KeyError('no such data')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for m in ("mynets", "noinputs", "badinputs"):
        sys.modules.pop(m, None)
    return tmp_path


def test_sources_are_recognised_by_prefix_and_shape(tmp_path):
    assert source_of("timm:resnet18").name == "timm"
    assert source_of("mypkg.models:make_net").name == "python"
    assert source_of(str(DIFF / "unet.json")).name == "diffusers"
    assert source_of("resnet50").name == "zoo"
    assert source_of("examples/mnist_cnn.yaml").name == "spec"
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps({"model_type": "gpt2", "n_layer": 1}))
    assert source_of(str(hf)).name == "hf-config"
    assert source_of("llama-3.1-8b").name == source_of("meta-llama/Llama-3.1-8B").name == "llm"
    assert set(SOURCES.names()) == {"timm", "python", "diffusers", "hf-config", "llm", "spec", "zoo"}


def test_timm_model_traces_at_its_own_input_size():
    wl = trace("timm:resnet18", batch_size=2)
    # ResNet-18 at 224x224: 1.82 GMACs per image (the published figure), 11.69M parameters
    assert wl.parameters == 11_689_512
    assert wl.flops("forward") / 2 / 2e9 == pytest.approx(1.82, rel=0.02)
    assert wl.input_description.startswith("2x3x224x224")
    assert wl.flops("backward") == pytest.approx(2 * wl.flops("forward"), rel=0.1)


def test_timm_input_size_comes_from_pretrained_cfg():
    wl = trace("timm:vit_tiny_patch16_384", batch_size=1)
    assert "1x3x384x384" in wl.input_description


def test_unknown_timm_name_gets_did_you_mean():
    with pytest.raises(UnknownNameError, match="did you mean 'vit_base_patch16_224'"):
        trace("timm:vit_bse_patch16_224", batch_size=2)


@pytest.mark.parametrize("name", ["unet", "sd3", "flux", "dit", "pixart", "vae"])
def test_diffusers_configs_train_by_noise_prediction(name):
    wl = trace(str(DIFF / f"{name}.json"), batch_size=2)
    assert wl.parameters > 0 and wl.flops("backward") > wl.flops("forward") > 0
    assert any(o.aten == "mse_loss" for o in wl.ops)  # the loss on the predicted noise / reconstruction
    assert any(o.aten == "mse_loss_backward" for o in wl.ops)


def test_unet_text_embeddings_have_the_configs_width():
    wl = trace(str(DIFF / "unet.json"), batch_size=2)
    assert "77 text tokens of 32" in wl.input_description
    # cross-attention keys: a linear from the 32-wide text embeddings
    assert any(o.aten in ("mm", "addmm") and (2 * 77, 32) in o.input_shapes for o in wl.ops if o.phase == "forward")


def test_unknown_diffusers_class_is_refused_with_suggestions(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"_class_name": "UNet2DConditionModle", "sample_size": 8}))
    with pytest.raises(UnknownNameError, match="did you mean 'UNet2DConditionModel'"):
        trace(str(bad), batch_size=2)


def test_user_factory_with_example_inputs(user_pkg):
    wl = trace("mynets:mlp", batch_size=4)
    assert wl.parameters == 16 * 32 + 32 + 32 * 10 + 10
    # forward matmuls: 2 x 4 x (16 x 32 + 32 x 10)
    mm = sum(o.flops for o in wl.ops if o.phase == "forward" and o.op_class == "matmul")
    assert mm == 2 * 4 * (16 * 32 + 32 * 10)


def test_user_factory_with_input_shape(user_pkg):
    wl = trace("noinputs:net", batch_size=3, inputs=parse_input_shape("12"))
    assert wl.parameters == 12 * 3 + 3


@pytest.mark.parametrize("model,match", [
    ("mynets:broken", "the factory 'mynets:broken' failed while building the model: ZeroDivisionError: oops"),
    ("mynets:not_a_module", "returned a int, not a torch nn.Module"),
    ("mynets:mpl", "unknown attribute of mynets 'mpl'; did you mean 'mlp'"),
    ("no_such_module_xyz:net", "cannot import module 'no_such_module_xyz'"),
    ("noinputs:net", "needs its inputs: give --input-shape"),
    ("badinputs:net", r"example_inputs\(2, meta\) of badinputs failed: KeyError"),
])
def test_user_factory_errors_say_which_part_failed(user_pkg, model, match):
    with pytest.raises(TraincastError, match=match):
        trace(model, batch_size=2)


def test_input_shape_is_checked():
    assert parse_input_shape("3,224,224;10") == [(3, 224, 224), (10,)]
    for bad in ("3,x", "0,3", "", "3,,4"):
        if bad:
            with pytest.raises(ConfigError, match="--input-shape"):
                parse_input_shape(bad)
    assert parse_input_shape("") is None


def test_cli_exit_2_without_traceback(user_pkg, monkeypatch, capsys):
    from traincast.cli.main import _register_all, run

    _register_all()
    monkeypatch.chdir(user_pkg)
    assert run(["trace", "mynets:broken", "-b", "2"]) == 2
    err = capsys.readouterr().err
    assert "oops in my factory" in err and "Traceback" not in err
    assert run(["trace", "noinputs:net", "-b", "2", "--input-shape", "12", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["parameters"] == 39
    assert run(["trace", "timm:resnt18", "-b", "2"]) == 2
    assert "did you mean 'resnet18'" in capsys.readouterr().err


def test_unet_without_sample_size_and_sdxl_conditioning(tmp_path):
    cfg = json.loads((DIFF / "unet.json").read_text())
    del cfg["sample_size"]  # SD 1.x latents then: 64 x 64
    cfg.update(addition_embed_type="text_time", addition_time_embed_dim=8,
               projection_class_embeddings_input_dim=32 + 6 * 8)  # SDXL: pooled text (32) and six time ids
    p = tmp_path / "sdxl.json"
    p.write_text(json.dumps(cfg))
    wl = trace(str(p), batch_size=1)
    assert wl.input_description.startswith("1x4x64x64 latents")
    # the add-embedding's first linear takes the pooled text and the embedded time ids: 32 + 48 inputs
    assert any(o.aten == "addmm" and (1, 80) in o.input_shapes for o in wl.ops if o.phase == "forward")


def test_every_diffusers_step_has_its_pipeline_defaults_in_the_data_file():
    from traincast.workload.sources import DIFFUSERS_STEPS, diffusers_defaults

    assert set(DIFFUSERS_STEPS.names()) == set(diffusers_defaults())


def test_a_failing_forward_is_named(user_pkg):
    with pytest.raises(TraincastError, match=r"in the forward pass \(model and loss\): .*17"):
        trace("noinputs:net", batch_size=2, inputs=parse_input_shape("17"))
