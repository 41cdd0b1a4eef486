"""Host time per op of eager PyTorch training: what ``host_forward_us`` / ``host_backward_us`` default to.

Eager training steps of small models whose tensors are tiny (width 8, 4 tokens, batch 1; a 4-channel CNN on two 4x4 images) run
on this machine's CPU with one thread, so that each kernel takes a microsecond or two and the step time is the
host's work: Python, the dispatcher, autograd's bookkeeping (forward) or its engine (backward), allocation.
The forward (with the loss) and the backward are timed separately over many steps, and each is divided by the
ops traincast traces for that phase of the same model (``traincast trace``: views and allocations are not
counted, as they launch no kernel). On a GPU the tiny CPU kernels' microsecond stands in for the driver's
launch of the kernel.

    python benchmarks/host_dispatch.py [--steps 300] [--repeats 3]

Prints per model the microseconds per traced op (median of the repeats, and their range) and the median
over the models, which ``hardware/data/efficiency.yaml`` uses. The host CPUs of GPU servers differ from this
one: a faster host issues faster.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch


def _hf(model_type: str, **fields):
    def make():
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

        cfg = AutoConfig.for_model(model_type, **fields)
        cls = AutoModelForSequenceClassification if model_type == "bert" else AutoModelForCausalLM
        model = cls.from_config(cfg, attn_implementation="sdpa")
        ids = torch.randint(0, 16, (1, 4))
        kw = dict(input_ids=ids, labels=torch.zeros(1, dtype=torch.long) if model_type == "bert" else ids)
        path = os.path.join(tempfile.mkdtemp(), "config.json")
        with open(path, "w") as f:
            json.dump(dict(model_type=model_type, **fields), f)
        return model, lambda: model(**kw).loss, path, dict(seq_len=4)

    return make


def _cnn():
    """A small CNN of torch.nn modules (convolution, batch norm, ReLU; pooling and a linear head), 4 channels on
    4x4 images: kernels of a microsecond, the host cost of module-based vision models."""
    from torch import nn

    layers = []
    for i in range(6):
        layers += [nn.Conv2d(3 if i == 0 else 4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()]
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 8))
    x, y = torch.randn(2, 3, 4, 4), torch.zeros(2, dtype=torch.long)
    return model, lambda: torch.nn.functional.cross_entropy(model(x), y), model, dict(inputs=None)


MODELS = {
    "gpt2": _hf("gpt2", n_embd=8, n_layer=4, n_head=2, vocab_size=16, n_positions=8),
    "llama": _hf("llama", hidden_size=8, intermediate_size=16, num_hidden_layers=4, num_attention_heads=2,
                 num_key_value_heads=1, vocab_size=16, max_position_embeddings=8),
    "bert": _hf("bert", hidden_size=8, intermediate_size=16, num_hidden_layers=4, num_attention_heads=2,
                vocab_size=16, max_position_embeddings=8),
    "cnn": _cnn,
}


def traced_ops(source: str, opts: dict) -> dict[str, int]:
    from traincast.workload import trace

    if opts.get("inputs", 1) is None:  # the module itself
        wl = trace(source, batch_size=2, inputs=(3, 4, 4), optimizer="adamw")
    else:
        wl = trace(source, batch_size=1, optimizer="adamw", **opts)
    out = {"forward": 0, "backward": 0}
    for o in wl.ops:
        if o.phase in out:
            out[o.phase] += 1
    return out


def measure(make, steps: int) -> tuple[float, float]:
    """Median seconds of the forward (with the loss) and of the backward over ``steps`` steps."""
    model, loss_fn, _, _ = make()
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    fw, bw = [], []
    for i in range(steps + 20):
        t0 = time.perf_counter()
        loss = loss_fn()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= 20:
            fw.append(t1 - t0)
            bw.append(t2 - t1)
    return statistics.median(fw), statistics.median(bw)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="gpt2,llama,bert",
                    help="of " + ",".join(MODELS) + " (cnn: its CPU convolution kernels take tens of microseconds even "
                         "at 4x4, so it measures more than the host; not in the default set)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    import transformers

    transformers.logging.set_verbosity_error()
    fwd_all, bwd_all = [], []
    print(f"{'model':10s} {'ops f/b':>9s}  {'forward us/op':>20s}  {'backward us/op':>20s}")
    for name in args.models.split(","):
        make = MODELS[name]
        _, _, source, opts = make()
        n = traced_ops(source, opts)
        f_us, b_us = [], []
        for _ in range(args.repeats):
            f, b = measure(make, args.steps)
            f_us.append(f / n["forward"] * 1e6)
            b_us.append(b / n["backward"] * 1e6)
        fm, bm = statistics.median(f_us), statistics.median(b_us)
        fwd_all.append(fm)
        bwd_all.append(bm)
        print(f"{name:10s} {n['forward']:4d}/{n['backward']:<4d}  {fm:7.1f} ({min(f_us):.1f}-{max(f_us):.1f})"
              f"      {bm:7.1f} ({min(b_us):.1f}-{max(b_us):.1f})")
    print(f"median over models: forward {statistics.median(fwd_all):.1f} us/op, "
          f"backward {statistics.median(bwd_all):.1f} us/op (torch {torch.__version__}, one thread)")


if __name__ == "__main__":
    main()
