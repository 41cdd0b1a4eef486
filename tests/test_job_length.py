"""A job's length as LLM users give it: training tokens (--tokens 15T) or optimizer steps (--steps)."""

import math

import pytest

from traincast.cli.main import _register_all, run
from traincast.errors import ConfigError
from traincast.predict import forecast
from traincast.predict.options import forecast_from_options, parse_count

_register_all()


@pytest.mark.parametrize("text,value", [("15T", 15e12), ("300b", 300e9), ("2.5e12", 2.5e12), ("1,000,000", 1e6),
                                        ("500M", 500e6), ("10k", 1e4), ("7G", 7e9), ("1_000", 1e3)])
def test_counts_read_as_people_write_them(text, value):
    assert parse_count(text, "--tokens") == value


@pytest.mark.parametrize("text", ["12x", "", "0", "-5", "inf", "nan", "T", "1.2.3B"])
def test_bad_counts_are_one_line_errors(text):
    with pytest.raises(ConfigError, match="--tokens must be a"):
        parse_count(text, "--tokens")


def test_tokens_become_samples_of_the_sequence_length():
    b, s = 8, 64
    f = forecast("gpt2", gpu="A100", batch_size=b, seq_len=s, tokens=1e6, scaling=False)
    assert f.tokens_per_sample == s
    assert f.dataset_size == math.ceil(1e6 / s) == 15625
    assert f.steps_per_epoch == math.ceil(15625 / b)
    assert f.total_s == pytest.approx(f.steps_per_epoch * f.iteration_s)
    assert any("1,000,000 tokens per epoch at 64 per sample" in n for n in f.notes)


def test_steps_fix_the_whole_job_on_a_parallel_layout_too():
    f = forecast("gpt2", gpu="A100", batch_size=8, seq_len=64, steps=100, scaling=False)
    assert (f.steps_per_epoch, f.dataset_size, f.epochs) == (100, 800, 1)
    assert f.total_s == pytest.approx(100 * f.iteration_s)
    p = forecast_from_options("gpt2", gpu="A100", gpus=2, tp=2, batch_size=8, seq_len=64, steps=10)
    assert p.strategy is not None and p.steps_per_epoch == 10
    assert p.total_s == pytest.approx(10 * p.iteration_s)


def test_lengths_given_twice_or_for_the_wrong_model_exit_2(capsys):
    cases = [
        (["resnet18", "-b", "8", "--tokens", "1B"], "--tokens needs a model that reads token sequences"),
        (["gpt2", "-b", "8", "--seq-len", "32", "--steps", "10", "--epochs", "3"], "--epochs cannot be given"),
        (["gpt2", "-b", "8", "--seq-len", "32", "--tokens", "1B", "--dataset-size", "10"], "give one"),
        (["gpt2", "-b", "8", "--seq-len", "32", "--steps", "0"], "--steps must be a positive integer"),
    ]
    for args, msg in cases:
        assert run(["predict", *args, "--gpu", "A100"]) == 2
        assert msg in capsys.readouterr().err


def test_plan_takes_tokens_and_steps(tmp_path):
    """Every configuration of a plan runs the job's tokens: steps = samples / global batch, samples = tokens /
    sequence length; with --steps, that many steps on every configuration."""
    from traincast.plan.pareto import plan

    b, s = 8, 64
    res = plan("gpt2", tokens=1e6, batch_size=b, seq_len=s, gpus=(1, 2), gpu_types=("T4", "V100"))
    assert res.configs
    for c in res.configs:
        assert c.total_s == pytest.approx(math.ceil(math.ceil(1e6 / s) / c.global_batch) * c.iteration_s)
    res = plan("gpt2", steps=50, batch_size=b, seq_len=s, gpus=(1, 2), gpu_types=("T4",))
    assert all(c.total_s == pytest.approx(50 * c.iteration_s) for c in res.configs)
    cfg = tmp_path / "config.json"  # a config has no default training set: the plan needs a length
    cfg.write_text('{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 300, "n_positions": 64}')
    with pytest.raises(ConfigError, match="--tokens or --steps is needed"):
        plan(str(cfg), batch_size=b, seq_len=s, gpus=(1,), gpu_types=("T4",))
