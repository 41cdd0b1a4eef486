"""Model FLOPs per GPU and MFU: the traced forward and backward FLOPs of a step over the iteration, against the
dense peak of the units that run most of them."""

import pytest

from traincast.hardware import get_catalog
from traincast.predict import forecast
from traincast.predict.options import forecast_from_options


def test_model_flops_and_mfu_by_hand():
    f = forecast("gpt2", gpu="A100", gpus=8, batch_size=64, seq_len=128, precision="amp-bf16", optimizer="adamw",
                 scaling=False)
    assert f.model_flops == pytest.approx((f.flops["forward"] + f.flops["backward"]) * 8)
    assert f.model_tflops_per_gpu * 1e12 * f.iteration_s * 8 == pytest.approx(f.model_flops)
    a100 = get_catalog().device("A100")
    assert f.model_peak_name == "bf16" and f.model_peak_flops_per_s == a100.peak_flops_per_s("bf16") == 312e12
    assert f.mfu == pytest.approx(f.model_tflops_per_gpu * 1e12 / 312e12)
    d = f.to_dict()
    assert d["mfu"] == pytest.approx(f.mfu) and d["model_tflops_per_gpu"] == pytest.approx(f.model_tflops_per_gpu)
    # about 6 x parameters x tokens for a transformer (attention and the head add the rest)
    assert 6 * f.parameters * 64 * 128 < f.model_flops < 9 * f.parameters * 64 * 128


@pytest.mark.parametrize("model,precision,gpu,peak", [
    ("resnet50", "fp32", "A100", "tf32"),  # PyTorch's default: convolutions on TF32, and they carry the FLOPs
    ("gpt2", "fp32", "A100", "fp32"),  # ... matmuls in FP32
    ("gpt2", "fp8-current", "H100", "bf16"),  # FP8 recipes: against the BF16 peak, one scale with BF16 runs
])
def test_the_peak_is_that_of_the_units_running_most_flops(model, precision, gpu, peak):
    f = forecast(model, gpu=gpu, batch_size=8, seq_len=64 if model == "gpt2" else None, precision=precision,
                 scaling=False)
    assert f.model_peak_name == peak and 0 < f.mfu < 1


def test_model_flops_do_not_depend_on_the_layout():
    """The same job's model FLOPs per step under data parallelism and under tensor x pipeline parallelism."""
    kw = dict(gpu="A100", gpus=8, batch_size=32, seq_len=128, precision="amp-bf16", optimizer="adamw", steps=10)
    dp = forecast_from_options("gpt2", **kw)
    tp_pp = forecast_from_options("gpt2", tp=2, pp=2, micro_batch=2, **kw)
    assert tp_pp.strategy is not None and tp_pp.global_batch == dp.global_batch == 32
    # the two traces are at 4 and 2 samples: per-batch reductions (the loss's mean) differ in the last digits
    assert tp_pp.model_flops == pytest.approx(dp.model_flops, rel=1e-3)
    assert tp_pp.mfu == pytest.approx(dp.mfu * dp.iteration_s / tp_pp.iteration_s, rel=1e-3)


def test_parallelize_gives_each_layout_the_mfu_its_forecast_has():
    from traincast.predict.parallel.search import parallelize

    kw = dict(gpu="A100", gpus=8, batch_size=32, seq_len=128, precision="amp-bf16", optimizer="adamw")
    res = parallelize("gpt2", top=3, **kw)
    f = forecast_from_options("gpt2", best_layout=True, steps=10, **kw)
    assert f.strategy["label"] == res.best.config.label()
    assert res.mfu(res.best) == pytest.approx(f.mfu, rel=1e-3)
    assert res.peak_name == f.model_peak_name == "bf16"
    d = res.to_dict()
    assert d["best"]["mfu"] == pytest.approx(res.mfu(res.best)) and all(0 < c["mfu"] < 1 for c in d["top"])
    assert [c["mfu"] for c in d["top"]] == sorted((c["mfu"] for c in d["top"]), reverse=True)  # fastest first
