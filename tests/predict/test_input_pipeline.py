"""The image input pipeline: which models read images, the loader's time per step, and when it bounds the step."""

import json

import pytest
from traincast.cli.main import _register_all, run
from traincast.errors import ConfigError
from traincast.predict import forecast
from traincast.predict.inputs import (cpu_ms_per_image, image_input_size, input_pipeline, pipeline_table,
                                      workers_per_gpu)
from traincast.workload import trace


@pytest.fixture(scope="module")
def resnet():
    return trace("resnet18", batch_size=8)


def test_the_image_size_is_read_off_the_first_convolution(resnet):
    assert image_input_size(resnet) == (224, 224)
    assert image_input_size(trace("bert-tiny", batch_size=2, seq_len=32)) is None  # text: no image pipeline


def test_per_image_cost_is_decode_plus_augmentation_scaled_by_output_pixels():
    t = pipeline_table()
    assert cpu_ms_per_image(224, 224) == pytest.approx(t["decode_ms"] + t["augment_ms_at_224"])
    assert cpu_ms_per_image(448, 448) == pytest.approx(t["decode_ms"] + 4 * t["augment_ms_at_224"])


def test_loader_time_and_wait_by_hand(resnet):
    ms = cpu_ms_per_image(224, 224)
    ip = input_pipeline(resnet, per_gpu_batch=8, gpu_step_s=0.001, workers=2)
    assert ip.loader_s == pytest.approx(8 * ms / 1e3 / 2)
    assert ip.wait_s == pytest.approx(8 * ms / 1e3 / 2 - 0.001)
    assert ip.cores_to_keep_up(8, 0.001) == -(-8 * ms // 1)  # ceil(8 ms-per-image / 1 ms)
    slow_gpu = input_pipeline(resnet, per_gpu_batch=8, gpu_step_s=10.0, workers=2)
    assert slow_gpu.wait_s == 0.0
    unknown = input_pipeline(resnet, per_gpu_batch=8, gpu_step_s=0.001, workers=None)
    assert unknown.loader_s is None and unknown.wait_s == 0.0
    with pytest.raises(ConfigError, match="--loader-workers"):
        input_pipeline(resnet, per_gpu_batch=8, gpu_step_s=0.001, workers=0)


def test_workers_per_gpu_from_an_instance():
    reserved = pipeline_table()["cores_reserved_per_gpu"]
    assert workers_per_gpu(96, 8) == 12 - reserved
    assert workers_per_gpu(4, 1) == 4 - reserved
    assert workers_per_gpu(1, 8) == 1  # never fewer than one worker
    assert workers_per_gpu(None, 1) is None


def test_one_loader_worker_bounds_a_fast_gpu_and_many_do_not():
    kw = dict(gpu="H100", batch_size=64, precision="amp-bf16", dataset_size=1000)
    free = forecast("resnet18", **kw)
    bound = forecast("resnet18", loader_workers=1, **kw)
    ample = forecast("resnet18", loader_workers=4096, **kw)
    assert free.input_wait_s == 0 and "not counted" in " ".join(free.notes)
    loader_s = 64 * cpu_ms_per_image(224, 224) / 1e3
    assert bound.bottleneck == "input"
    assert bound.iteration_s == pytest.approx(loader_s)  # the step waits for the loader
    assert bound.epoch_s == pytest.approx(bound.steps_per_epoch * loader_s)
    assert any("data loading bounds the step" in n for n in bound.notes)
    assert ample.input_wait_s == 0 and ample.iteration_s == pytest.approx(free.iteration_s)


def _cli(capsys, *args):
    _register_all()
    code = run(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_loader_workers(capsys):
    code, out, err = _cli(capsys, "predict", "resnet18", "--gpu", "H100", "-b", "64", "--precision", "amp-bf16",
                          "--loader-workers", "1", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["bottleneck"] == "input" and d["input_pipeline"]["workers"] == 1 and d["input_wait_s"] > 0
    code, out, err = _cli(capsys, "predict", "resnet18", "--gpu", "H100", "-b", "64", "--loader-workers", "0")
    assert code == 2 and "--loader-workers" in err
    code, out, err = _cli(capsys, "predict", "bert-tiny", "--gpu", "H100", "-b", "8", "--loader-workers", "-1")
    assert code == 2 and "--loader-workers" in err  # refused even for a model that reads no images


def test_bench_input_measures_decode_and_augmentation(capsys):
    code, out, err = _cli(capsys, "bench", "input", "--image-size", "64", "--source-width", "96", "--source-height",
                          "64", "-n", "4", "--repeats", "2", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["decode_ms"] > 0 and d["augment_ms"] > 0 and d["per_sample_ms"] == pytest.approx(
        d["decode_ms"] + d["augment_ms"])
    code, out, err = _cli(capsys, "bench", "input", "--jpeg-quality", "0")
    assert code == 2 and "--jpeg-quality" in err
