"""Named language models (workload/data/llms.yaml): their shapes against the published parameter counts, names
and hub ids, the default context, and the CLI."""

import pytest
import torch
import transformers

from traincast.cli.main import _register_all, run
from traincast.workload import llms, trace
from traincast.workload.hf import load_config

_register_all()


@pytest.mark.parametrize("name", list(llms.models()))
def test_each_model_has_its_published_parameter_count(name):
    e = llms.models()[name]
    cfg = load_config(llms.config(name), name)
    with torch.device("meta"):
        model = getattr(transformers, e["config"]["architectures"][0])(cfg)
    n = sum(p.numel() for p in model.parameters())
    assert abs(n / e["parameters"] - 1) < 0.01, (name, n)
    assert e["source"] and e["about"] and e["seq_len"] > 0


def test_names_and_hub_ids_resolve_in_any_case():
    assert llms.resolve("meta-llama/Llama-3.1-70B") == "llama-3.1-70b"
    assert llms.resolve("Llama-3.1-70B") == "llama-3.1-70b"
    assert llms.resolve("QWEN2.5-72B") == "qwen2.5-72b"
    assert llms.resolve("llama-3.1-70") is None


def test_default_context_is_the_pretraining_one_and_flops_follow_the_shapes():
    wl = trace("meta-llama/Llama-3.1-8B", batch_size=1)
    v, d, layers, s = 128256, 4096, 32, 8192  # the model card's shapes, 8K pre-training context (not 128K)
    gemms = 2 * s * (wl.parameters - v * d)  # every weight but the input embedding, once per token
    attention = 4 * s * s * d * layers  # QK^T and PV, counted over the whole square as FlopCounterMode does
    f = wl.flops("forward")
    assert gemms + attention <= f <= 1.02 * (gemms + attention)


def test_cli_takes_a_hub_id_and_suggests_names(capsys):
    assert run(["trace", "mistralai/Mistral-7B-v0.1", "-b", "1", "--seq-len", "64"]) == 0
    out = capsys.readouterr().out
    assert "mistral-7b" in out and "26.98 GiB" in out  # 7.24B parameters in fp32
    assert run(["predict", "llama-3-70", "--gpu", "H100", "-b", "8"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'llama-3-70'" in err and "llama-3-70b" in err
