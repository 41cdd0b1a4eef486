"""Long-context training steps on one lent GPU (16K-64K tokens, with and without full recomputation); or
(``--compare``) those steps against traincast's forecast.

Why (issue 22): the published long-context rows (torchtitan's Llama 3 8B at 32K-256K tokens on 8 H100s) mix four
things a forecast can get wrong: attention at long sequences, full recomputation, FSDP and context parallelism's
communication, and a 500 W power limit. ``cp_ring_bench.py`` measured the ring's attention alone; this measures
the rest of one GPU's step at long sequences: a decoder with Llama 3 8B's block shapes and 8 layers
(``data/gpu_campaign/llama3-8b-shape-8-layers-128k.json``: the 8-layer shape file with 131,072 positions), built
by transformers, BF16 weights, fused AdamW (BF16 states), SDPA attention, eager, batch 1, no KV cache; full recomputation is
transformers' gradient checkpointing (every decoder layer's forward run again in its backward). Rows (S, recompute):
(16384, none), (16384, full), (32768, none), (32768, full), (65536, full). Each: 2 warm-up steps, then ``--steps``
steps timed with CUDA events (the median), and the allocator's peak. Rows are appended to ``--out`` as measured.

Protocol, written before the measurement (2026-11-28): the forecast is ``traincast predict CONFIG --gpu
H200-SXM-141GB -b 1 --seq-len S --precision pure-bf16 --optimizer adamw-fused --kernels eager --recompute
none|full``, every other option at its default (the catalog's host; the H200 lease's host-only profile as a
sensitivity, ``--profile``). Scored: each step time (MAPE and signed errors), the step ratio full / none at 16K
and 32K (what recomputation costs), and the peak memory against the allocator's peak. Nothing is set from these
rows. Read: if the rows at 32K and more are within 10%, one GPU's long-sequence step is not what makes the
published 32K-256K rows miss.

Addendum (2026-11-28, after the five rows were scored: +20% to +46% slow, and the profile of two of them read,
``traincast bench model CONFIG -b 1 --seq-len 32768|16384 --precision pure-bf16 --optimizer adamw-fused --device
cuda``): the attention ran as ``_scaled_dot_product_cudnn_attention``, not the flash kernel the forecast priced.
PyTorch's SDPA tries cuDNN's kernel first on sm90/sm100/sm103 when its cuDNN is newer than 9.15
(``check_prefer_cudnn_attention``, aten/src/ATen/native/transformers/cuda/sdp_utils.cpp; since 2.9,
pytorch#162073). A dispatch fix, kept whatever the rows say: ``--sdpa auto`` (the default) prices those kernels
at ``attention_cudnn`` on Hopper and data-centre Blackwell, ``--sdpa flash`` as before. Scored once before and
after, nothing else changed: these rows; the H100 and H200 campaigns (``gpu_measured.py``, defaults, and with the
host-only profile); the FP8 steps (``fp8_step_bench.py --compare``); the published FP8 / long-context rows
(``fp8_cp_validation.py``, each source's PyTorch: torchtitan's 2024-12 and 2025-08 runs predate the preference
and are pinned to flash in the data file).

Addendum 2 (2026-11-28, before it ran): the same five rows with ``TORCH_CUDNN_SDPA_DEPRIORITIZED=1`` (flash, the
kernel torchtitan's 2024 runs used), forecast with ``--sdpa flash`` (``--compare FILE --sdpa flash``), scored the
same way; nothing set from them. Read: whether one GPU's long-context step with flash is forecast within 10%.

Usage: python benchmarks/long_context_bench.py --out long_context.jsonl [--deadline 150]     (on the GPU)
       PYTHONPATH=src python benchmarks/long_context_bench.py --compare long_context.jsonl [--gpu H200-SXM-141GB]
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
sys.path.insert(0, str(HERE))
CONFIG = HERE / "data" / "gpu_campaign" / "llama3-8b-shape-8-layers-128k.json"
ROWS = [(16384, "none"), (16384, "full"), (32768, "none"), (32768, "full"), (65536, "full")]


def measure(seq: int, recompute: str, device: str, steps: int, config: Path = CONFIG) -> dict:
    import torch

    from fp8_step_bench import build
    from traincast.measure.timing import clock_for

    torch.manual_seed(0)
    model, cfg = build(device, config)
    model.train()
    if recompute == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    ids = torch.randint(0, cfg.vocab_size, (1, seq), device=device)

    def step():
        out = model(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    clock = clock_for(device)
    for _ in range(2):
        step()
    clock.sync()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = clock.measure(step, steps, 1)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    return dict(seq=seq, recompute=recompute, batch=1, config=config.name, step_ms=statistics.median(times),
                steps_ms=times, peak_allocated_bytes=peak, torch=torch.__version__,
                device=torch.cuda.get_device_name(0) if device == "cuda" else "cpu")


def run(args) -> int:
    done = set()
    if args.out.exists():
        done = {(r["seq"], r["recompute"]) for r in map(json.loads, args.out.read_text().splitlines()) if r}
    t0 = time.time()
    with args.out.open("a") as fh:
        for item in args.rows.split(","):
            seq, rc = int(item.split(":")[0]), item.split(":")[1]
            if (seq, rc) in done:
                continue
            if args.deadline and time.time() - t0 > args.deadline:
                print(f"deadline: stopping before {seq} {rc}", flush=True)
                break
            try:
                row = measure(seq, rc, args.device, args.steps, args.config)
            except Exception as e:  # noqa: BLE001 - an out-of-memory on the lent machine is a row
                row = dict(seq=seq, recompute=rc, error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            print(json.dumps({k: v for k, v in row.items() if k != "steps_ms"}), flush=True)
            if args.device == "cuda":
                import gc

                import torch

                gc.collect()
                torch.cuda.empty_cache()
    return 0


def compare(path: Path, gpu: str, profile: str | None, sdpa: str = "auto") -> int:
    from traincast.predict.options import forecast_from_options

    rows = [r for r in map(json.loads, path.read_text().splitlines()) if r and "error" not in r]
    where = dict(profile=profile, gpu=gpu) if profile else dict(gpu=gpu)
    print(f"forecast for {' on '.join(filter(None, (profile, gpu)))}: {CONFIG.name}, batch 1, --precision pure-bf16 "
          f"--optimizer adamw-fused --kernels eager --sdpa {sdpa}")
    errs, fc = [], {}
    for r in rows:
        f = forecast_from_options(str(CONFIG), batch_size=1, seq_len=r["seq"], precision="pure-bf16",
                                  optimizer="adamw-fused", kernels="eager", recompute=r["recompute"], sdpa=sdpa,
                                  **where)
        ms = f.iteration_s * 1e3
        fc[(r["seq"], r["recompute"])] = (ms, r["step_ms"])
        e = ms / r["step_ms"] - 1
        errs.append(e)
        gib, mgib = f.peak_memory_bytes / 2**30, r["peak_allocated_bytes"] / 2**30
        print(f"{r['seq']:>6d} recompute {r['recompute']:4s}: measured {r['step_ms']:8.1f} ms, forecast {ms:8.1f} ms "
              f"({e:+.1%}); peak {mgib:5.1f} GiB, forecast {gib:5.1f} ({gib / mgib - 1:+.1%})")
    if errs:
        print(f"step MAPE {100 * statistics.mean(abs(e) for e in errs):.1f}% over {len(errs)} rows, median signed "
              f"{100 * statistics.median(errs):+.1f}%")
    for s in (16384, 32768):
        if (s, "none") in fc and (s, "full") in fc:
            f_ratio = fc[(s, "full")][0] / fc[(s, "none")][0]
            m_ratio = fc[(s, "full")][1] / fc[(s, "none")][1]
            print(f"{s}: full / none recomputation measured {m_ratio:.3f}, forecast {f_ratio:.3f} "
                  f"({f_ratio / m_ratio - 1:+.1%})")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("long_context.jsonl"))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--deadline", type=float, default=0.0, help="seconds after which no row starts")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--config", type=Path, default=CONFIG, help="another model config (a dry run: a tiny one)")
    ap.add_argument("--rows", default=",".join(f"{s}:{r}" for s, r in ROWS),
                    help="SEQ:none|full,... (default: the protocol's; a dry run: short ones)")
    ap.add_argument("--compare", type=Path)
    ap.add_argument("--gpu", default="H200-SXM-141GB")
    ap.add_argument("--profile", default=None)
    ap.add_argument("--sdpa", default="auto", help="the forecast's attention kernel (traincast --sdpa)")
    a = ap.parse_args(argv)
    if a.compare:
        return compare(a.compare, a.gpu, a.profile, a.sdpa)
    return run(a)


if __name__ == "__main__":
    raise SystemExit(main())
