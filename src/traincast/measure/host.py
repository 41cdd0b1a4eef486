"""The host's cost of issuing one eager PyTorch op: ``host_forward_us`` / ``host_backward_us`` (predict/host.py).

Eager training steps of small models whose tensors are tiny (width 8, 4 tokens, batch 1: GPT-2, Llama and BERT
shapes of Hugging Face ``transformers``) run on ``device``, so that each kernel takes a microsecond or two and
the time the Python side spends in a step is the host's work: Python, the dispatcher, autograd's bookkeeping
(forward) or its engine (backward), the caching allocator and, on a GPU, the driver's launch. The forward (with
the loss) and the backward are timed separately with the wall clock over many steps -- on a GPU without
synchronising, so the kernels run behind and only the issuing is timed -- and each is divided by the ops
traincast traces for that phase of the same model (views and allocations are not counted: they launch no kernel).

``benchmarks/host_dispatch.py`` prints these figures on the project's CPU (the catalog's defaults);
``traincast calibrate --device cuda --host-only`` measures them on the user's GPU machine and saves a profile
with them alone, since the host, not the GPU, is what differs between two machines with the same GPU.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

MODEL_FIELDS = {
    "gpt2": dict(n_embd=8, n_layer=4, n_head=2, vocab_size=16, n_positions=8),
    "llama": dict(hidden_size=8, intermediate_size=16, num_hidden_layers=4, num_attention_heads=2,
                  num_key_value_heads=1, vocab_size=16, max_position_embeddings=8),
    "bert": dict(hidden_size=8, intermediate_size=16, num_hidden_layers=4, num_attention_heads=2, vocab_size=16,
                 max_position_embeddings=8),
}


@dataclass(frozen=True)
class HostCosts:
    forward_us: float  # median over the models of their median microseconds per traced forward op
    backward_us: float
    device: str
    # model -> {"ops": [forward, backward], "forward_us": [one per repeat], "backward_us": [...]}
    per_model: dict = field(default_factory=dict)


def tiny_model(model_type: str, device: str = "cpu") -> tuple[torch.nn.Module, Callable, str]:
    """(model on ``device``, its loss function, the path of its config for ``traincast trace``)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    fields = MODEL_FIELDS[model_type]
    cfg = AutoConfig.for_model(model_type, **fields)
    cls = AutoModelForSequenceClassification if model_type == "bert" else AutoModelForCausalLM
    model = cls.from_config(cfg, attn_implementation="sdpa").to(device)
    ids = torch.randint(0, 16, (1, 4), device=device)
    kw = dict(input_ids=ids, labels=torch.zeros(1, dtype=torch.long, device=device) if model_type == "bert" else ids)
    path = os.path.join(tempfile.mkdtemp(), "config.json")
    with open(path, "w") as f:
        json.dump(dict(model_type=model_type, **fields), f)
    return model, (lambda: model(**kw).loss), path


def traced_ops(config_path: str, fused_attention: bool = False) -> dict[str, int]:
    """Ops traincast traces in the forward and the backward of the tiny model (batch 1, 4 tokens, AdamW); with
    ``fused_attention`` its attention as the one kernel a CUDA run picks (as forecasts for GPUs trace it)."""
    from traincast.workload import trace

    wl = trace(config_path, batch_size=1, optimizer="adamw", seq_len=4, fused_attention=fused_attention)
    out = {"forward": 0, "backward": 0}
    for o in wl.ops:
        if o.phase in out:
            out[o.phase] += 1
    return out


def time_phases(model: torch.nn.Module, loss_fn: Callable, steps: int, warmup: int = 20) -> tuple[float, float]:
    """Median wall seconds of the forward (with the loss) and of the backward over ``steps`` steps (AdamW
    between them, untimed)."""
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    fw, bw = [], []
    for i in range(steps + warmup):
        t0 = time.perf_counter()
        loss = loss_fn()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= warmup:
            fw.append(t1 - t0)
            bw.append(t2 - t1)
    return statistics.median(fw), statistics.median(bw)


def measure_host_costs(device: str = "cpu", *, models: Iterable[str] = ("gpt2", "llama", "bert"), steps: int = 200,
                       repeats: int = 3, progress: Callable | None = None) -> HostCosts:
    """Microseconds per traced forward and backward op of the tiny models on ``device`` (module doc)."""
    import transformers

    from traincast.errors import ConfigError

    if steps < 1 or repeats < 1:
        raise ConfigError("host measurement needs at least 1 step and 1 repeat")
    transformers.logging.set_verbosity_error()
    per_model, fwd_all, bwd_all = {}, [], []
    for name in models:
        if name not in MODEL_FIELDS:
            raise ConfigError(f"no tiny host-measurement model {name!r}; known: {', '.join(MODEL_FIELDS)}")
        model, loss_fn, path = tiny_model(name, device)
        n = traced_ops(path, fused_attention=str(device).startswith("cuda"))
        f_us, b_us = [], []
        for _ in range(repeats):
            f, b = time_phases(model, loss_fn, steps)
            f_us.append(f / n["forward"] * 1e6)
            b_us.append(b / n["backward"] * 1e6)
            if progress is not None:
                progress(name)
        if str(device).startswith("cuda"):
            torch.cuda.synchronize()
        per_model[name] = {"ops": [n["forward"], n["backward"]], "forward_us": f_us, "backward_us": b_us}
        fwd_all.append(statistics.median(f_us))
        bwd_all.append(statistics.median(b_us))
    return HostCosts(statistics.median(fwd_all), statistics.median(bwd_all), str(device), per_model)
