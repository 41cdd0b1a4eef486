"""``--precision bf16`` / ``fp16``: the model itself in half precision with fp32 master weights in the optimizer
(Megatron-LM --bf16/--fp16, DeepSpeed, FSDP MixedPrecision(param_dtype=...), torchtitan)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from traincast.cli.main import _register_all, run
from traincast.workload import trace
from traincast.workload.build import build_step

_register_all()


def _gpt2(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 1000,
                             "n_positions": 64}))
    return str(p)


@pytest.mark.parametrize("prec, dtype", [("bf16", "bf16"), ("fp16", "fp16")])
def test_every_weight_and_activation_is_half_and_the_optimizer_keeps_fp32_masters(tmp_path, prec, dtype):
    """The forward runs in the half dtype throughout (matmuls, layer norms, GELU, the residual adds; only the
    loss is fp32, as transformers computes it); memory per parameter is ZeRO's 2 + 2 + 12 bytes for Adam; the
    optimizer copies the half gradients into fp32 (2 -> 4 bytes per parameter) and the fp32 masters back
    into the half weights (4 -> 2), each one foreach copy."""
    wl = trace(_gpt2(tmp_path), batch_size=2, seq_len=16, optimizer="adamw", precision=prec)
    n = wl.parameters
    fwd = [o for o in wl.ops if o.phase == "forward" and o.dtype not in ("none", "int64", "bool")]
    assert all(o.dtype == dtype for o in fwd if o.op_class in ("matmul", "norm", "attention"))
    fp32 = [o for o in fwd if o.dtype == "fp32"]
    assert fp32 and all("loss" in o.module.lower() or o.module.endswith("ForCausalLM") or o.module == "(step)"
                        or o.op_class in ("reduction", "elementwise", "copy", "other") for o in fp32)
    assert len(fp32) <= 6  # the loss's upcast, log-softmax and NLL, not the model
    assert wl.memory.parameter_bytes == 2 * n and wl.memory.gradient_bytes == 2 * n
    assert wl.memory.optimizer_state_bytes == 12 * n
    copies = [o for o in wl.ops if o.phase == "optimizer" and o.aten == "_foreach_copy_"]
    assert len(copies) == 2
    assert sorted(o.bytes_read + o.bytes_written for o in copies) == [6 * n, 6 * n]
    amp = trace(_gpt2(tmp_path), batch_size=2, seq_len=16, optimizer="adamw", precision="amp-" + dtype)
    assert wl.flops("forward") == amp.flops("forward")  # the same arithmetic ...
    assert wl.bytes("forward") < 0.8 * amp.bytes("forward")  # ... on half the bytes where autocast kept fp32
    assert wl.memory.activation_bytes < amp.memory.activation_bytes


def test_pure_bf16_steps_the_half_weights_themselves(tmp_path):
    """``pure-bf16``: the forward as ``bf16``'s, but no masters: Adam's two moments in bf16 (4 bytes a parameter, not
    12), no copies between masters and weights, and an optimizer step over half the bytes; a real step on the CPU
    leaves bf16 weights moved by the update and no master list."""
    pure, mixed = (trace(_gpt2(tmp_path), batch_size=2, seq_len=16, optimizer="adamw", precision=p)
                   for p in ("pure-bf16", "bf16"))
    n = pure.parameters
    assert pure.flops("forward") == mixed.flops("forward") and pure.bytes("forward") == mixed.bytes("forward")
    assert pure.memory.parameter_bytes == 2 * n and pure.memory.gradient_bytes == 2 * n
    assert pure.memory.optimizer_state_bytes == 4 * n and mixed.memory.optimizer_state_bytes == 12 * n
    assert not [o for o in pure.ops if o.phase == "optimizer" and o.aten == "_foreach_copy_"]
    assert pure.bytes("optimizer") < 0.5 * mixed.bytes("optimizer")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    before = [p.detach().clone() for p in model.parameters()]
    step = build_step(model, batch_size=4, device="cpu", optimizer="adamw", precision="pure-bf16", inputs=(8,))
    step.run()
    after = list(model.parameters())
    assert all(p.dtype == torch.bfloat16 for p in after) and not step.master_params
    assert any(not torch.equal(a.float(), b.to(torch.bfloat16).float()) for a, b in zip(after, before))
    assert all(v.dtype == torch.bfloat16 for st in step.optimizers[0].state.values() for k, v in st.items()
               if k != "step")


def test_a_real_half_step_updates_the_weights_through_the_masters():
    """The step the tracer times is the step a measurement runs: on the CPU, a half model's weights stay half,
    move by the optimizer's update computed on the fp32 masters, and equal the masters rounded to half."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    before = [p.detach().clone() for p in model.parameters()]
    step = build_step(model, batch_size=4, device="cpu", optimizer="sgd", precision="bf16", inputs=(8,))
    step.run()
    after = list(model.parameters())
    assert all(p.dtype == torch.bfloat16 for p in after)
    assert any(not torch.equal(a.float(), b.to(torch.bfloat16).float()) for a, b in zip(after, before))
    assert len(step.master_params) == len(after)
    for m, p in zip(step.master_params, after):
        assert m.dtype == torch.float32 and torch.equal(m.to(torch.bfloat16), p.detach())


def test_cli_forecasts_bf16_and_amp_bf16_differently(capsys, tmp_path):
    """Through the CLI: both run; the half model is faster (fewer bytes) and needs less activation memory."""
    out = {}
    for prec in ("amp-bf16", "bf16"):
        code = run(["predict", _gpt2(tmp_path), "--gpu", "A100-SXM4-80GB", "-b", "8", "--seq-len", "64",
                    "--precision", prec, "--optimizer", "adamw", "--json"])
        assert code == 0
        out[prec] = json.loads(capsys.readouterr().out)
    assert out["bf16"]["iteration_s"] < out["amp-bf16"]["iteration_s"]
    code = run(["predict", _gpt2(tmp_path), "--gpu", "V100", "-b", "8", "--precision", "bf17"])
    err = capsys.readouterr().err
    assert code == 2 and "bf16" in err and "Traceback" not in err
