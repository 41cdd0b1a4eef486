"""Property-based fuzz of what users type and write (Hypothesis, derandomized: the same examples every run).

Whatever the input, the CLI ends with exit code 0 or 2 and, on 2, one ``error:`` line; never a traceback (an
exception other than TraincastError leaves ``run`` and fails the test) and never a hang (each example has a
time limit). The documents are mutations of valid ones: wrong types, negative, zero, huge and non-finite
numbers, missing and unknown fields, junk nested where a value goes.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import signal

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traincast.cli.main import _register_all, run

_register_all()
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
LIMIT_S = 20  # an example that runs longer than this is a hang


@contextlib.contextmanager
def time_limit(seconds: int):
    def alarm(*_):
        raise TimeoutError(f"hang: still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_cli(capsys, args) -> int:
    with time_limit(LIMIT_S):
        code = run(args)
    out = capsys.readouterr()
    assert code in (0, 2), (args, code, out.err)
    if code == 2:
        lines = out.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in out.err, out.err
    return code


PLAUSIBLE = st.one_of(st.integers(1, 40), st.sampled_from(["same", "valid", "relu", "softmax", "dense", "flatten"]),
                     st.lists(st.integers(1, 8), min_size=2, max_size=2))
JUNK = st.one_of(
    PLAUSIBLE, PLAUSIBLE, PLAUSIBLE,  # as often as all the rest: values of the right type that do not fit together
    st.none(), st.booleans(), st.integers(min_value=-(2**62), max_value=2**62),
    st.sampled_from([0, -1, 2**31, 2**40, 1e308, -1e-9, 0.5]), st.sampled_from([math.inf, -math.inf, math.nan]),
    st.text(max_size=8), st.lists(st.integers(-3, 5), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def mutate(doc, data, depth: int = 0):
    """One mutation of a JSON-like document: replace a value, drop or add a key, or recurse into a child."""
    if isinstance(doc, dict) and doc:
        key = data.draw(st.sampled_from(sorted(doc, key=str)))
        deeper = ["recurse", "recurse", "recurse"] if depth < 3 else []
        action = data.draw(st.sampled_from(["replace", "drop", "add"] + deeper))
        out = dict(doc)
        if action == "replace":
            out[key] = data.draw(JUNK)
        elif action == "drop":
            del out[key]
        elif action == "add":
            out[data.draw(st.sampled_from(["extra", "type", "name", "sizes", key + "s"]))] = data.draw(JUNK)
        else:
            out[key] = mutate(doc[key], data, depth + 1)
        return out
    if isinstance(doc, list) and doc:
        i = data.draw(st.integers(0, len(doc) - 1))
        out = list(doc)
        if data.draw(st.booleans()) and depth < 3:
            out[i] = mutate(doc[i], data, depth + 1)
        else:
            out[i] = data.draw(JUNK)
        return out
    return data.draw(JUNK)


SPEC = {"name": "fuzz-cnn", "input": {"shape": [16, 16, 1]}, "loss": "categorical_crossentropy",
        "layers": [{"type": "conv2d", "filters": 4, "kernel_size": 3, "activation": "relu"},
                   {"type": "maxpool", "pool_size": 2}, {"type": "flatten"}, {"type": "dense", "units": 10}]}


@FUZZ
@given(data=st.data())
def test_mutated_layer_specs_never_crash(tmp_path_factory, capsys, data):
    doc = mutate(copy.deepcopy(SPEC), data)
    if data.draw(st.booleans()):
        doc = mutate(doc, data)
    path = tmp_path_factory.mktemp("spec") / "model.yaml"
    path.write_text(yaml.safe_dump(doc))
    run_cli(capsys, ["trace", str(path), "-b", "2"])


@FUZZ
@given(data=st.data())
def test_mutated_catalogs_never_crash(tmp_path_factory, capsys, data):
    row = {"name": "FuzzGPU", "peak_tflops": {"fp32": 10, "fp16": 40}, "memory_gb": 16,
           "memory_bandwidth_gb_per_s": 500, "intra_node_link": {"type": "pcie4", "gb_per_s": 31.5},
           "source": "fuzz", "date": "2026-11"}
    doc = mutate({"devices": [row], "instances": [{"name": "fuzz-box", "gpu": "FuzzGPU", "gpus": 2,
                                                   "usd_per_hour": 1.0}]}, data)
    path = tmp_path_factory.mktemp("cat") / "catalog.yaml"
    path.write_text(yaml.safe_dump(doc))
    run_cli(capsys, ["gpus", "--catalog", str(path), "--json"])


@FUZZ
@given(data=st.data())
def test_mutated_scenarios_never_crash(tmp_path_factory, capsys, data):
    doc = {"nodes": 2, "n_jobs": 3, "arrivals": {"mean_interarrival_s": 30}, "deadline": {"factor": [1.5, 3]},
           "vm_types": [{"name": "box", "gpu": "V100", "gpus": 2, "usd_per_hour": 3.0}],
           "job_classes": [{"name": "A", "model": "resnet18", "dataset_size": 100, "epochs": 1, "batch_size": 8,
                            "durations_s": {"V100": {1: 100, 2: 60}}}]}
    path = tmp_path_factory.mktemp("sc") / "scenario.yaml"
    path.write_text(yaml.safe_dump(mutate(doc, data)))
    run_cli(capsys, ["simulate", "--scenario", str(path), "--policy", "fifo", "--replications", "1", "--json"])


OPTIONS = {"--gpus": st.integers(-2, 4096), "--batch-size": st.one_of(st.integers(-2, 2**40), st.just(2**31)),
           "--epochs": st.floats(allow_nan=True, allow_infinity=True), "--dataset-size": st.integers(-5, 2**50),
           "--nodes": st.integers(-1, 64), "--network-gbit": st.floats(allow_nan=True, allow_infinity=True)}


@FUZZ
@given(data=st.data())
def test_numeric_options_never_crash(capsys, data):
    args = ["predict", "mnist-cnn", "--gpu", "V100"]
    chosen = data.draw(st.lists(st.sampled_from(sorted(OPTIONS)), min_size=1, max_size=3, unique=True))
    if "--batch-size" not in chosen:
        args += ["--batch-size", "8"]
    for opt in chosen:
        args += [opt, str(data.draw(OPTIONS[opt]))]
    run_cli(capsys, args + ["--json"])


def test_the_fuzz_reaches_both_outcomes(tmp_path, capsys):
    """The harness itself: a valid spec forecasts (0), a mutated one is refused with one line (2)."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(SPEC))
    assert run_cli(capsys, ["trace", str(good), "-b", "2"]) == 0
    bad = dict(SPEC, layers=[{"type": "conv2d", "filters": -4, "kernel_size": 3}])
    good.write_text(json.dumps(bad))
    assert run_cli(capsys, ["trace", str(good), "-b", "2"]) == 2
    with pytest.raises(TimeoutError):
        with time_limit(1):
            while True:
                pass


LOG_LINES = st.one_of(
    st.builds(lambda s, t, l: f"{s},{t},{l}", st.integers(-5, 10**9), st.floats(allow_nan=True), st.floats(allow_nan=True)),
    st.builds(lambda s, t: json.dumps({"step": s, "time_s": t, "loss": 0.5}), st.integers(-5, 10**12), JUNK),
    st.sampled_from(["Epoch 3/10", "120/500 [====>....] - ETA: 3s - loss: 0.4", "{'loss': 2.3, 'epoch': 0.1}",
                     " 50/500 [00:12<01:48, 4.15it/s]", "step,time_s,loss", "", "\x00\x01", "nan,nan,nan"]),
    st.text(max_size=30),
)


@FUZZ
@given(data=st.data())
def test_mutated_training_logs_never_crash(tmp_path_factory, capsys, data):
    head = data.draw(st.sampled_from(["step,time_s,loss", "", "Epoch 1/2"]))
    good = [f"{k},{0.5 * k:.2f},{1 / k:.4f}" for k in range(1, 30)] if head == "step,time_s,loss" else []
    lines = [head, *good]
    for _ in range(data.draw(st.integers(1, 6))):
        lines.insert(data.draw(st.integers(0, len(lines))), data.draw(LOG_LINES))
    path = tmp_path_factory.mktemp("log") / data.draw(st.sampled_from(["run.csv", "run.jsonl", "run.log"]))
    path.write_text("\n".join(lines))
    run_cli(capsys, ["eta", str(path), "--total-steps", str(data.draw(st.integers(-1, 10**6))), "--json"])


# a small GPT-2 and a small BERT: mutated Hugging Face configs (sizes huge, negative, of the wrong type; fields
# dropped; junk class names) go through the same CLI path as a user's config.json
HF_CONFIGS = [
    {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 32, "n_layer": 2, "n_head": 2,
     "n_positions": 64, "vocab_size": 128},
    {"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 32, "num_hidden_layers": 2,
     "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64, "vocab_size": 128},
]
HF_FUZZ = settings(FUZZ, max_examples=30)


@HF_FUZZ
@given(data=st.data())
def test_mutated_hf_configs_never_crash(tmp_path_factory, capsys, data):
    cfg = mutate(HF_CONFIGS[data.draw(st.integers(0, len(HF_CONFIGS) - 1))], data)
    path = tmp_path_factory.mktemp("hf") / "config.json"
    path.write_text(json.dumps(cfg))
    run_cli(capsys, ["predict", str(path), "--gpu", "A100", "-b", "2", "--seq-len", "16", "--json"])


@pytest.mark.parametrize("field,value", [("n_layer", 2**40), ("n_embd", 2**40), ("n_head", -5),
                                         ("vocab_size", 2**40), ("n_positions", 2**40)])
def test_hf_configs_beyond_any_gpu_are_refused_at_once(tmp_path, capsys, field, value):
    """The issue-16 cases: sizes no GPU cluster could hold are refused from the config, before any model is built."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(HF_CONFIGS[0], **{field: value})))
    assert run_cli(capsys, ["predict", str(path), "--gpu", "A100", "-b", "2", "--seq-len", "16"]) == 2


# ---- what a session's hand fuzz of the CLI found (2026-11-28): each a traceback, a hang or an unclear message before

def _err(capsys, args) -> str:
    with time_limit(LIMIT_S):
        code = run(args)
    out = capsys.readouterr()
    assert code == 2 and "Traceback" not in out.err, (args, code, out.err)
    lines = out.err.strip().splitlines()
    assert lines[-1].startswith("error: "), out.err
    return lines[-1]


@pytest.fixture
def loss_log(tmp_path):
    p = tmp_path / "loss.csv"
    p.write_text("step,loss\n" + "".join(f"{k},{2 + 3 * (k / 100 + 1) ** -0.5:.5f}\n" for k in range(10, 2001, 10)))
    return str(p)


@pytest.mark.parametrize("extra", [["--total-steps", "99999999999999999999999"], ["--total-steps", "10000000000000"],
                                   ["--lr-schedule", "cosine:99999999999999999999999"]])
def test_converge_over_a_horizon_no_grid_can_hold_is_one_line(capsys, loss_log, extra):
    assert "at most 20,000,000 steps" in _err(capsys, ["converge", loss_log, "--target-loss", "2.5", *extra])


def test_converge_draws_have_an_upper_bound(capsys, loss_log):
    assert "--draws must be between 10 and 20,000" in _err(capsys, ["converge", loss_log, "--target-loss", "2.5",
                                                                    "--draws", "100000000"])


def test_watch_interval_beyond_a_day_is_refused(capsys, loss_log):
    assert "--interval is at most a day" in _err(capsys, ["watch", loss_log, "--interval", "1e30", "--total-steps", "100"])


@pytest.mark.parametrize("opt", ["--rate-limit", "--compute-per-min"])
def test_serve_limits_must_be_finite(capsys, opt):
    assert f"{opt} must be a finite number" in _err(capsys, ["serve", opt, "nan"])


def test_serve_token_file_that_is_a_folder_says_so(capsys, tmp_path):
    msg = _err(capsys, ["serve", "--token-file", str(tmp_path), "--allow-remote", "--host", "0.0.0.0"])
    assert "is a folder" in msg


def test_parallelize_with_an_absurd_gpu_count_answers_at_once(capsys):
    assert "beyond the 1,048,576 GPUs" in _err(capsys, ["parallelize", "gpt2", "--gpus", "100000000000000", "-b", "8",
                                                        "--gpu", "A100"])


def test_a_name_too_long_for_a_file_is_named_as_such(capsys):
    msg = _err(capsys, ["predict", "x" * 300, "-b", "1", "--gpu", "A100"])
    assert "(300 characters) is too long for a file name" in msg


@pytest.mark.parametrize("args,what", [(["gpus", "--catalog"], "catalog file"), (["simulate", "-s"], "scenario file")])
def test_a_binary_file_is_named_in_the_error(capsys, tmp_path, args, what):
    p = tmp_path / "garbage.yaml"
    p.write_bytes(bytes(range(128, 256)) * 3)
    msg = _err(capsys, [*args, str(p)])
    assert f"{what} '{p}' is not UTF-8 text" in msg


def test_a_list_option_names_the_entry_that_is_not_a_number(capsys):
    msg = _err(capsys, ["parallelize", "gpt2", "--gpus", "8", "-b", "8", "--gpu", "A100", "--micro-batches", "1,x"])
    assert "list of whole numbers; 'x' is not one" in msg


def test_divisors_are_those_of_the_count():
    from traincast.predict.parallel.search import _divisors

    for n in (1, 2, 12, 36, 97, 1024, 3 * 5 * 7 * 11):
        assert _divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


def test_a_scenarios_bad_value_in_a_union_is_named_by_its_field_not_the_member_class(capsys, tmp_path):
    doc = {"nodes": 2, "n_jobs": 3, "arrivals": {"mean_interarrival_s": 30}, "deadline": {"factor": [1.5, 3]},
           "vm_types": [{"name": "box", "gpu": "V100", "gpus": 2, "usd_per_hour": "abc"}],
           "job_classes": [{"name": "A", "model": "resnet18", "dataset_size": 100, "epochs": 1, "batch_size": 8,
                            "durations_s": {"V100": {1: 100, 2: 60}}}]}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    msg = _err(capsys, ["simulate", "--scenario", str(path), "--policy", "fifo", "--replications", "1"])
    assert "vm_types[0].usd_per_hour: Input should be a valid number (got 'abc')" in msg


def test_converge_on_a_log_read_in_the_wrong_format_says_why_it_has_no_losses(capsys, loss_log, tmp_path):
    msg = _err(capsys, ["converge", loss_log, "--target-loss", "2.5", "--format", "jsonl"])
    assert "could not be read as 'jsonl'" in msg and "check --format" in msg
    bad = tmp_path / "bad.csv"
    bad.write_text("step,time,loss\n1,abc,3.0\n2,1.0,nan\n")
    assert "1 line(s) could not be read as 'csv'; e.g. '1,abc,3.0'" in _err(capsys, ["converge", str(bad), "--target-loss", "2"])
