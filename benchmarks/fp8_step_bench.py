"""Whole training steps in BF16 and in FP8 (torchao float8, tensorwise current scaling) on a lent GPU, both under
``torch.compile``; or (``--compare``) those steps against traincast's forecast.

Issue 22 asks for the FP8 / BF16 speed-up of a training step within 5% and throughput within 10%. The published
pairs (``fp8_cp_validation.py``) are few and were seen; this measures one more, on a GPU of its own: a decoder with
Llama 3 8B's block shapes (hidden 4096, FFN 14336, 32 heads, 8 KV heads) and 8 layers
(``data/gpu_campaign/llama3-8b-shape-8-layers.json``), built from its config by transformers, its weights in BF16,
AdamW, batch 4 x 2,048 tokens, SDPA attention. FP8: ``torchao.float8.convert_to_float8_training`` with the
``tensorwise`` recipe (dynamic per-tensor scales, E4M3 forward, E5M2 gradients) on every linear layer of the blocks
(the output head stays BF16, as torchtitan does). Each variant: 3 warm-up steps (compilation), then ``--steps``
steps timed with CUDA events; the median. Rows go to ``--out`` (JSON lines) as measured.

Protocol, written before the measurement (2026-11-28): the forecast is ``traincast predict MODEL -b 4 --seq-len
2048 --optimizer adamw --kernels compiled`` (``--kernels eager`` for the eager pair) with ``--precision bf16`` and ``--precision fp8-current`` on the catalog
GPU named by ``--gpu``, every other option at its default, and the H200 lease's host-only profile where given
(``--profile``). Scored: the FP8 / BF16 step-time ratio (goal: within 5%) and each step time (goal: within 10%).
Nothing is set from these rows.

``--optimizer adamw-fused`` (added after the first comparison): the fused AdamW kernel the run stepped with (on the
FP32 masters of ``--precision bf16``; the run kept BF16 weights and states), a sensitivity; with ``--bf16-precision
pure-bf16`` the BF16 rows as the run kept them (no masters; the FP8 precisions keep theirs), another.

Usage: python benchmarks/fp8_step_bench.py --out fp8_steps.jsonl          (on the GPU; torchao importable)
       PYTHONPATH=src python benchmarks/fp8_step_bench.py --compare fp8_steps.jsonl --gpu H200-SXM-141GB
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
CONFIG = HERE / "data" / "gpu_campaign" / "llama3-8b-shape-8-layers.json"
BATCH, SEQ = 4, 2048


def build(device: str, config: Path = CONFIG):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(str(config))
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    return model, cfg


def measure(variant: str, device: str, steps: int, emulate: bool, compile_: bool, config: Path = CONFIG,
            batch: int = BATCH, seq: int = SEQ) -> dict:
    import torch

    torch.manual_seed(0)
    model, cfg = build(device, config)
    if variant == "fp8":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        conf = Float8LinearConfig.from_recipe_name("tensorwise")
        if emulate:  # a CPU dry run: the casts emulated, no FP8 GEMM
            from dataclasses import replace

            conf = replace(conf, emulate=True)
        convert_to_float8_training(model, config=conf, module_filter_fn=lambda m, fqn: fqn != "lm_head")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)
    fwd = torch.compile(model) if compile_ else model

    def step():
        out = fwd(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    from traincast.measure.timing import clock_for

    clock = clock_for(device)  # CUDA events around each step on a GPU, the wall clock on a CPU
    t0 = time.perf_counter()
    for _ in range(3):
        step()
    clock.sync()
    warm = time.perf_counter() - t0
    times = clock.measure(step, steps, 1)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    return dict(variant=variant, compiled=compile_, batch=batch, seq=seq, config=config.name, step_ms=statistics.median(times),
                steps_ms=times, warmup_s=warm, peak_allocated_bytes=peak, torch=torch.__version__,
                device=torch.cuda.get_device_name(0) if device == "cuda" else "cpu")


def compare(path: Path, gpu: str, profile: str | None, optimizer: str = "adamw", bf16_precision: str = "bf16") -> int:
    from traincast.predict.options import forecast_from_options

    rows = {(r["variant"], r["compiled"]): r for r in map(json.loads, path.read_text().splitlines()) if "error" not in r}
    where = dict(profile=profile, gpu=gpu) if profile else dict(gpu=gpu)
    print(f"forecast for {' on '.join(filter(None, (profile, gpu)))}, --optimizer {optimizer}, BF16 as "
          f"--precision {bf16_precision}" + ("" if (optimizer, bf16_precision) == ("adamw", "bf16")
                                              else " (a sensitivity, not the protocol's)"))
    for compiled in (False, True):
        kernels = "compiled" if compiled else "eager"
        fc = {}
        for variant, precision in (("bf16", bf16_precision), ("fp8", "fp8-current")):
            f = forecast_from_options(str(CONFIG), batch_size=BATCH, seq_len=SEQ, precision=precision,
                                      optimizer=optimizer, kernels=kernels, **where)
            fc[variant] = f.iteration_s * 1e3
            m = rows.get((variant, compiled))
            if m:
                print(f"{kernels:8s} {variant:5s} measured {m['step_ms']:8.2f} ms on {m['device']}, forecast "
                      f"{fc[variant]:8.2f} ms ({fc[variant] / m['step_ms'] - 1:+.1%})")
        if ("bf16", compiled) in rows and ("fp8", compiled) in rows:
            meas = rows[("bf16", compiled)]["step_ms"] / rows[("fp8", compiled)]["step_ms"]
            fr = fc["bf16"] / fc["fp8"]
            print(f"{kernels:8s} FP8 speed-up over BF16: measured {meas:.3f}, forecast {fr:.3f} ({fr / meas - 1:+.1%})")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("fp8_steps.jsonl"))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--variants", default="bf16,fp8", help="bf16,fp8 (compiled) and bf16-eager")
    ap.add_argument("--config", type=Path, default=CONFIG, help="another model config (a dry run: a tiny one)")
    ap.add_argument("--batch", type=int, default=BATCH)
    ap.add_argument("--seq", type=int, default=SEQ)
    ap.add_argument("--compare", type=Path)
    ap.add_argument("--gpu", default="H200-SXM-141GB")
    ap.add_argument("--profile", default=None)
    ap.add_argument("--bf16-precision", default="bf16", choices=("bf16", "pure-bf16"),
                    help="the BF16 rows' precision (the protocol: bf16; pure-bf16, BF16 states without masters as "
                    "the run kept them, is a sensitivity added after)")
    ap.add_argument("--optimizer", default="adamw", help="the forecast's optimizer (the protocol: adamw; adamw-fused, "
                    "the fused kernel the run used, is a sensitivity added after)")
    a = ap.parse_args(argv)
    if a.compare:
        return compare(a.compare, a.gpu, a.profile, a.optimizer, a.bf16_precision)
    with a.out.open("a") as f:
        for v in a.variants.split(","):
            name, compile_ = v.removesuffix("-eager"), not v.endswith("-eager")
            try:
                row = measure(name, a.device, a.steps, emulate=a.device != "cuda", compile_=compile_, config=a.config,
                              batch=a.batch, seq=a.seq)
            except Exception as e:  # noqa: BLE001 - an import or compile failure on the lent machine is a row
                row = dict(variant=name, compiled=compile_, error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps({k: v for k, v in row.items() if k != "steps_ms"}), flush=True)
            if a.device == "cuda":
                import torch

                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
