import json

import pytest
import typer

from traincast.cli.bench import register
from traincast.cli.main import run


@pytest.fixture
def app():
    a = typer.Typer()
    register(a)
    return a


def test_bench_layers_runs_and_resumes(app, db_path, capsys):
    args = ["bench", "layers", "--ops", "relu,add", "--samples", "4", "--threads", "1", "--json", "--db", str(db_path)]
    assert run(args, the_app=app) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["n_new"] == 4 and res["n_total"] == 4 and res["samples_per_min"] > 0
    assert run(args[:5] + ["6"] + args[6:], the_app=app) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["n_before"] == 4 and res["n_new"] == 2


def test_bench_layers_prints_rate(app, db_path, capsys):
    assert run(["bench", "layers", "--ops", "relu", "--samples", "2", "--threads", "1", "--db", str(db_path)], the_app=app) == 0
    out = capsys.readouterr().out
    assert "samples/min" in out and "2/2 stored" in out


@pytest.mark.parametrize(
    "args,message",
    [
        (["bench", "layers", "--ops", "conv2d,layernrom"], "did you mean 'layernorm'"),
        (["bench", "layers", "--device", "cuda"], "no CUDA GPU"),
        (["bench", "layers", "--phase", "backwards"], "unknown phase"),
        (["bench", "layers", "--ops", "conv2d", "--set", "kernel=300,padding=0"], "impossible conv2d"),
        (["bench", "layers", "--set", "batch"], "key=value"),
        (["bench", "layers", "--size", "huge"], "unknown size"),
        (["bench", "model", "resnet18", "--batch-size", "0"], "batch"),
        (["bench", "model", "resnet1888", "--batch-size", "2"], "resnet18"),
        (["bench", "model", "mnist-cnn", "--batch-size", "2", "--device", "cuda"], "no CUDA GPU"),
        (["bench", "ddp", "mnist-cnn", "--procs", "0"], "--procs"),
        (["bench", "ddp", "mnist-cnn", "--device", "cuda"], "no CUDA GPU"),
        (["bench", "ddp", "mnist-cnn", "--backend", "nccl"], "nccl"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(app, db_path, capsys, monkeypatch, args, message):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run(args + ["--db", str(db_path)], the_app=app) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_bench_model_json_and_store(app, db_path, capsys, tmp_path):
    out = tmp_path / "m.json"
    code = run(["bench", "model", "mnist-cnn", "--batch-size", "2", "--steps", "2", "--warmup", "1", "--profile-steps", "1",
                "--threads", "1", "--json", "--db", str(db_path), "--out", str(out)], the_app=app)
    assert code == 0
    d = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert d["step"]["n_repeats"] == 2 and d["per_aten"] and d["per_module"] and d["id"] >= 1
    assert json.loads(out.read_text())["per_phase_ms"] == d["per_phase_ms"]
    code = run(["bench", "model", "mnist-cnn", "--batch-size", "2", "--steps", "2", "--warmup", "1", "--threads", "1",
                "--db", str(db_path), "--top", "3"], the_app=app)
    assert code == 0
    text = capsys.readouterr().out
    assert "median" in text and "top 3 by module" in text
