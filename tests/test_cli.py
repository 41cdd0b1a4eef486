"""The command line: JSON contract, tables, exit codes and messages on bad input."""

import json
import subprocess
import sys

import pytest

from traincast.cli.main import _register_all, app, run

_register_all()


def cli(capsys, *args):
    code = run(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_registering_the_commands_again_adds_no_copies(capsys):
    """Test modules and ``main`` each call ``_register_all``: the app keeps one copy of each command, so a run
    does not build every copy again (the fuzz tests ran 10x slower late in the suite before)."""
    counts = (len(app.registered_commands), len(app.registered_groups))
    _register_all()
    _register_all()
    assert (len(app.registered_commands), len(app.registered_groups)) == counts
    names = [c.name or c.callback.__name__ for c in app.registered_commands]
    assert len(names) == len(set(names)) and "predict" in names
    assert run(["--help"]) == 0 and capsys.readouterr().out.count(" predict ") == 1


def test_predict_json_carries_the_contract(capsys):
    code, out, _ = cli(capsys, "predict", "resnet18", "--gpu", "V100", "--gpus", "4", "--batch-size", "128",
                       "--epochs", "2", "--dataset-size", "5000", "--json")
    assert code == 0
    d = json.loads(out)
    for k in ("iteration_ms", "forward_ms", "backward_ms", "optimizer_ms", "communication_ms", "epoch_s",
              "total_s", "cost_usd", "fits_in_memory", "scaling"):
        assert k in d
    assert d["flops"]["forward"] > 0 and d["flops"]["backward"] > d["flops"]["forward"]
    assert d["memory"]["peak_bytes"] > 0
    assert [r["gpus"] for r in d["scaling"]] == [1, 2, 4]
    assert d["total_s"] == pytest.approx(2 * d["epoch_s"])


def test_predict_table_on_a_spec_file(capsys):
    code, out, _ = cli(capsys, "predict", "examples/mnist_cnn.yaml", "--gpu", "P100", "--batch-size", "64",
                       "--dataset-size", "60000", "--epochs", "10")
    assert code == 0
    assert "iteration" in out and "costliest modules" in out


def test_trace_json(capsys):
    code, out, _ = cli(capsys, "trace", "mnist-cnn", "--batch-size", "4", "--json")
    assert code == 0
    assert json.loads(out)["parameters"] == 24330


@pytest.mark.parametrize("args, message", [
    (["predict", "resnet5", "--gpu", "V100", "--batch-size", "8"], "unknown model 'resnet5'; did you mean"),
    (["predict", "resnet18", "--gpu", "V1000", "--batch-size", "8"], "unknown GPU 'V1000'; did you mean"),
    (["predict", "resnet18", "--instance", "p9.huge", "--batch-size", "8"], "unknown instance 'p9.huge'"),
    (["predict", "resnet18", "--gpu", "V100", "--gpus", "8", "--batch-size", "4"], "smaller than the 8 GPUs"),
    (["predict", "resnet18", "--gpu", "V100", "--batch-size", "-3"], "must be a positive number"),
    (["predict", "resnet18", "--gpu", "V100", "--batch-size", "8", "--epochs", "0"], "must be a positive number"),
    (["predict", "resnet18", "--gpu", "V100", "--batch-size", "8", "--sync", "mesh"], "unknown sync method"),
    (["predict", "resnet18", "--gpu", "V100", "--batch-size", "8", "--precision", "fp6"], "unknown precision 'fp6'"),
    (["predict", "resnet18", "--batch-size", "8"], "name the hardware"),
    (["predict", "missing.yaml", "--gpu", "V100", "--batch-size", "8"], "does not exist"),
    (["predict", "resnet18", "--gpu", "V100", "--batch-size", "8", "--catalog", "nope.yaml"], "does not exist"),
    (["predict", "", "--gpu", "V100", "--batch-size", "8"], "the model name is empty"),
    (["predict", "gpt2", "--gpu", "V100", "--batch-size", "8", "--precision", "fp8"], "use --precision amp-fp16"),
    (["predict", "gpt2", "--gpu", "A100", "--batch-size", "8", "--precision", "fp8"], "use --precision amp-bf16"),
    (["predict", "gpt2", "--gpu", "A100", "--batch-size", "8", "--tokens", "1e400"], "too large to be a count"),
    (["predict", "gpt2", "--gpu", "A100", "--batch-size", "8", "--gpus", "8", "--zero", "5"], "--zero takes 0"),
    (["parallelize", "gpt2", "--gpu", "A100", "--gpus", "8", "-b", "8", "--max-tp", "0"], "--max-tp must be"),
    (["parallelize", "gpt2", "--gpu", "A100", "--gpus", "8", "-b", "8", "--cp", "3"], "divides the 8 GPUs"),
])
def test_bad_input_exits_2_with_one_line(capsys, args, message):
    code, out, err = cli(capsys, *args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_malformed_spec_names_layer_and_field(capsys, tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"input": {"shape": [8, 8, 1]}, "layers": [{"type": "conv2d", "kernel_size": 3}]}))
    code, _, err = cli(capsys, "trace", str(p))
    assert code == 2 and "bad.json: layers[0] (conv2d).filters: missing (required)" in err


def test_listing_commands(capsys):
    assert cli(capsys, "models")[0] == 0
    code, out, _ = cli(capsys, "gpus", "--json")
    assert code == 0 and any(d["name"] == "H100-SXM5-80GB" for d in json.loads(out))
    code, out, _ = cli(capsys, "instances", "--json")
    assert code == 0 and any(d["name"] == "p4d.24xlarge" for d in json.loads(out))


def test_usage_error_is_exit_2(capsys):
    code, _, err = cli(capsys, "predict", "resnet18", "--gpu", "V100", "--batch-size", "many")
    assert code == 2


def test_console_script_end_to_end():
    r = subprocess.run([sys.executable, "-m", "traincast", "predict", "alexnet", "--gpu", "T4", "--batch-size",
                        "abc"], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "traincast", "predict", "nosuchnet", "--gpu", "T4", "--batch-size",
                        "8"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error: unknown model")


def test_piped_tables_keep_whole_names():
    """Output through a pipe has no terminal width: the device table must not be cut to 80 columns ("H1…"),
    or `traincast gpus | grep H100-SXM5` finds nothing; COLUMNS, when the user sets it, still decides."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    r = subprocess.run([sys.executable, "-m", "traincast", "gpus"], capture_output=True, text=True, env=env)
    assert r.returncode == 0
    rows = [line for line in r.stdout.splitlines() if "H100-SXM5-80GB" in line]
    assert rows and "1979" in rows[0]  # the whole row on one line: name and FP8 peak
    assert "…" not in r.stdout
    r = subprocess.run([sys.executable, "-m", "traincast", "gpus"], capture_output=True, text=True,
                       env=env | {"COLUMNS": "60"})
    assert r.returncode == 0 and max(len(line) for line in r.stdout.splitlines()) <= 60


def test_predictor_choice(capsys):
    code, out, _ = cli(capsys, "predict", "gpt2", "--gpu", "T4", "--batch-size", "1", "--seq-len", "128",
                       "--dataset-size", "10", "--predictor", "learned", "--json")
    d = json.loads(out)
    assert code == 0 and d["predictor"] == "learned"
    assert any("ops learned" in n for n in d["notes"])
    code, out, _ = cli(capsys, "predict", "gpt2", "--gpu", "EPYC-7763", "--batch-size", "1", "--seq-len", "128",
                       "--dataset-size", "10", "--predictor", "auto", "--json")
    assert code == 0 and json.loads(out)["predictor"] == "analytical"  # no learned model for CPUs


def test_predict_a_hugging_face_config(capsys, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "gpt2", "n_embd": 256, "n_head": 4, "n_layer": 2, "n_positions": 64,
                             "vocab_size": 500}))
    code, out, _ = cli(capsys, "predict", str(p), "--gpu", "V100", "--batch-size", "4", "--dataset-size", "400",
                       "--json")
    assert code == 0
    got = json.loads(out)
    assert got["steps_per_epoch"] == 100 and got["iteration_s"] > 0
    p.write_text(json.dumps({"model_type": "gpt2", "architectures": ["Gpt2Nope"]}))
    code, _, err = cli(capsys, "predict", str(p), "--gpu", "V100", "--batch-size", "4", "--dataset-size", "400")
    assert code == 2 and "'Gpt2Nope' is not a model class" in err and "Traceback" not in err


def test_predict_a_mixture_of_experts_config_says_how_experts_were_loaded(capsys, tmp_path):
    moe = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
           "vocab_size": 500, "max_position_embeddings": 64}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(moe))
    code, out, _ = cli(capsys, "predict", str(p), "--gpu", "A100", "--batch-size", "4", "--dataset-size", "400",
                       "--json")
    assert code == 0
    got = json.loads(out)
    assert any("mixture of experts: 4 expert GEMMs" in n for n in got["notes"]) and got["iteration_s"] > 0
    p.write_text(json.dumps({"model_type": "nllb-moe", "d_model": 64, "encoder_layers": 2, "decoder_layers": 2,
                             "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128,
                             "decoder_ffn_dim": 128, "num_experts": 4, "encoder_sparse_step": 1,
                             "decoder_sparse_step": 1, "vocab_size": 500, "max_position_embeddings": 64}))
    code, out, _ = cli(capsys, "predict", str(p), "--gpu", "A100", "--batch-size", "4", "--dataset-size", "400",
                       "--seq-len", "16", "--json")
    assert code == 0  # its Python loop over the router's picks: each expert gets its balanced share
    notes = json.loads(out)["notes"]
    assert any("per-expert token selections per step sized as balanced routing" in n for n in notes)
    # NLLB's LayerDrop (a CPU random draw per layer) is off, so two traces agree, and the forecast says so
    assert any("LayerDrop is left out" in n and "0.05 in NllbMoeEncoder" in n for n in notes)


def test_a_selection_traincast_cannot_size_is_one_line(capsys, tmp_path):
    """A forward that calls the nonzero kernel itself (no torch call the selection sizing sees): exit 2, one
    line saying what stops it and what traces."""
    mod = tmp_path / "rawsel.py"
    mod.write_text("import torch\n"
                   "class M(torch.nn.Module):\n"
                   "    def __init__(self):\n"
                   "        super().__init__()\n"
                   "        self.fc = torch.nn.Linear(8, 8)\n"
                   "    def forward(self, x):\n"
                   "        y = self.fc(x)\n"
                   "        return y[torch.ops.aten.nonzero.default(y[:, 0] > 0)[:, 0]]\n"
                   "def model():\n"
                   "    return M()\n"
                   "def example_inputs(batch_size, device):\n"
                   "    return (torch.randn(batch_size, 8, device=device),)\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        code, _, err = cli(capsys, "predict", "rawsel:model", "--gpu", "A100", "--batch-size", "4")
    finally:
        sys.path.remove(str(tmp_path))
    assert code == 2 and "inside an op traincast cannot size" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_files_and_numbers_a_user_gets_wrong_are_errors_not_tracebacks(capsys, tmp_path):
    """A folder where a file goes, a binary file, a CSV given as the learned model, infinite or negative
    numbers, a plot path that is a folder or not a PNG, a negative seed: one `error:` line (or click's usage
    message) and exit 2, before any long work."""
    folder = tmp_path / "adir.yaml"
    folder.mkdir()
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x00\xbd\xff\xfe" * 10)
    csv = tmp_path / "rows.csv"
    csv.write_text("gpu,op,batch\nP100,dense,1\n")
    cases = [
        (["trace", str(folder), "-b", "4"], "is a folder"),
        (["trace", str(binary), "-b", "4"], "not UTF-8 text"),
        (["eval-layers", str(csv), "--gpu", "P100", "--model", str(csv)], "is not a traincast model file"),
        (["eval-layers", str(csv), "--gpu", "P100", "--model", str(tmp_path)], "is a folder"),
        (["predict", "resnet50", "--gpu", "A100", "-b", "64", "--epochs", "inf"], "--epochs must be a positive"),
        (["predict", "resnet50", "--gpu", "A100", "--gpus", "16", "--nodes", "2", "-b", "64", "--network-gbit", "-5"],
         "--network-gbit must be a positive"),
        (["plan", "resnet50", "--epochs", "1", "-b", "256", "--plot", str(tmp_path)], "is a folder"),
        (["plan", "resnet50", "--epochs", "1", "-b", "256", "--plot", str(tmp_path / "x.txt")], "must end in .png"),
        (["eval-layers", str(csv), "--gpu", "P100", "--adapt", "1", "--seed", "-1"], "--seed"),
        (["fit", "layers", "--rows-per-file", "5", "--out", str(tmp_path)], "is a folder"),
        (["calibrate", "--name", "../../elsewhere"], "no folders"),
        (["plan", "resnet50", "--epochs", "1", "-b", "256", "--instances", "p4d.24xlarge", "--gpu-types", "V100"],
         "give one of them"),
        (["ingest", str(csv), "--job", "j", "--hardware", "0xA100"], "count must be at least 1"),
        (["predict", "mnist-cnn", "--gpu", "A100", "-b", "8", "--seq-len", "128"], "--seq-len does not apply"),
        (["predict", "mnist-cnn", "--gpu", "A100", "-b", "8", "--profile", str(binary)], "(not UTF-8 text)"),
        (["predict", "mnist-cnn", "--gpu", "A100", "-b", "8", "--profile", str(folder)], "is a folder"),
    ]
    for args, message in cases:
        code, _, err = cli(capsys, *args)
        assert code == 2 and message in err and "Traceback" not in err, (args, code, err)


def test_fit_layers_refuses_to_exclude_a_gpu_the_data_does_not_hold(capsys, tmp_path, shared_data):
    code, _, err = cli(capsys, "fit", "layers", "--data", str(shared_data), "--exclude", "V1OO",
                       "--rows-per-file", "5", "--out", str(tmp_path / "m.pkl"))
    assert code == 2 and "--exclude V1OO: no such GPU group" in err and "V100" in err
    assert not (tmp_path / "m.pkl").exists()
