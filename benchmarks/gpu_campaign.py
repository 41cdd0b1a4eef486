"""Measure whole training steps of a wide, fixed set of models on this machine's GPU (or CPU), one JSON line each.

Written to be run on a GPU someone lends for a few minutes: every row is appended to ``--out`` as soon as it is
measured, rows already there are skipped (so a second run resumes), and ``--deadline`` stops the campaign
before the lease ends. The set is fixed here, before any of it is measured, and ordered for breadth: every
model once in mixed precision first, then every model in FP32, then the second batch size, so a cut-off run
still spans every family.

Each row: the step's median over ``--steps`` timed steps (CUDA events, ``traincast.measure``) after
``--warmup`` untimed ones (cuDNN autotuning falls there), its IQR, the peak memory the allocator held
(``torch.cuda.max_memory_allocated``), and the environment fingerprint. A failure (out of memory, a model the
installed torch/transformers cannot build) is a row with ``error``, not a stop.

``benchmarks/gpu_measured.py`` compares the rows with traincast's forecasts (its protocol is written there).

Usage: PYTHONPATH=src python benchmarks/gpu_campaign.py --device cuda --out rows.jsonl [--deadline 270]
       [--only resnet50,gpt2] [--steps 10 --warmup 3] [--list]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "data" / "gpu_campaign"

# Vision: torchvision names (every family in torchvision's classification zoo, ImageNet input), SGD.
VISION = [
    "resnet18", "resnet50", "resnet152", "resnext50_32x4d", "wide_resnet50_2", "densenet121", "mobilenet_v2",
    "mobilenet_v3_large", "efficientnet_b0", "efficientnet_v2_s", "regnet_y_400mf", "regnet_y_8gf",
    "convnext_tiny", "vit_b_16", "swin_t", "shufflenet_v2_x1_0", "squeezenet1_1", "mnasnet1_0", "googlenet",
    "inception_v3", "vgg16", "alexnet", "maxvit_t",
]
# Language models: (model, sequence length, batch, second batch), AdamW. Two modern decoder shapes
# (GQA, RMSNorm, SwiGLU, RoPE) come as Hugging Face config files beside this script.
TEXT = [
    ("bert-base", 128, 32, 64),
    ("bert-large", 512, 8, 4),
    ("gpt2", 1024, 8, 16),
    ("gpt2-medium", 1024, 8, 4),
    ("opt-1.3b", 1024, 4, 2),
    (str(CONFIGS / "tinyllama-1.1b.json"), 2048, 4, 2),
    (str(CONFIGS / "qwen2-0.5b.json"), 2048, 4, 8),
    ("transformer-base", 128, 64, 128),
]


def campaign() -> list[dict]:
    """Every row of the campaign, in the order it is measured."""
    rows: list[dict] = []
    for precision, vb, tb in (("amp-bf16", 128, 0), ("fp32", 64, 0), ("amp-bf16", 32, 1)):
        for m in VISION:
            rows.append(dict(model=m, batch_size=vb, precision=precision, optimizer="sgd", seq_len=None))
        for m, seq, b1, b2 in TEXT:
            rows.append(dict(model=m, batch_size=(b1, b2)[tb], precision=precision, optimizer="adamw",
                             seq_len=seq))
    return rows


def short(model: str) -> str:
    """A model's name in a row's key: a config file's stem, else the name."""
    return Path(model).stem if model.endswith(".json") else model


def key(r: dict) -> str:
    return f"{short(r['model'])}|b{r['batch_size']}|{r['precision']}|{r['optimizer']}|s{r['seq_len']}"


def measure(r: dict, *, device: str, steps: int, warmup: int) -> dict:
    import torch

    from traincast.measure.model import time_model

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    mt = time_model(r["model"], batch_size=r["batch_size"], device=device, steps=steps, warmup=warmup,
                    profile_steps=0, optimizer=r["optimizer"], precision=r["precision"], seq_len=r["seq_len"])
    out = dict(r, key=key(r), step=mt.timing.as_dict(with_samples=True), fingerprint=mt.fingerprint,
               wall_s=round(time.perf_counter() - t0, 2))
    if cuda:
        out["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        out["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=Path("gpu_campaign.jsonl"))
    ap.add_argument("--deadline", type=float, default=0.0, help="seconds from start after which no row starts")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated model names (stems) to keep")
    ap.add_argument("--list", action="store_true", help="print the campaign's rows and exit")
    a = ap.parse_args(argv)
    rows = campaign()
    if a.only:
        keep = set(a.only.split(","))
        rows = [r for r in rows if short(r["model"]) in keep]
    if a.list:
        for r in rows:
            print(key(r))
        return 0
    done = set()
    if a.out.exists():
        done = {json.loads(line)["key"] for line in a.out.read_text().splitlines() if line.strip()}
    start = time.perf_counter()
    n_new = 0
    for i, r in enumerate(rows):
        if key(r) in done:
            continue
        if a.deadline and time.perf_counter() - start > a.deadline:
            print(f"deadline: stopped before row {i + 1} of {len(rows)}", flush=True)
            break
        try:
            out = measure(r, device=a.device, steps=a.steps, warmup=a.warmup)
            msg = f"{out['step']['median_ms']:.2f} ms (IQR {out['step']['iqr_ms']:.2f})"
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 -- a failed row is recorded, the campaign goes on
            out = dict(r, key=key(r), error=f"{type(e).__name__}: {str(e)[:300]}")
            msg = out["error"]
        with a.out.open("a") as f:
            f.write(json.dumps(out) + "\n")
        n_new += 1
        print(f"[{i + 1}/{len(rows)} {time.perf_counter() - start:.0f}s] {key(r)}: {msg}", flush=True)
        gc.collect()
    print(f"{n_new} rows measured, {len(done)} were there already -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
