"""Data-parallel speed-ups and 1-GPU throughput against NVIDIA's published DeepLearningExamples tables (issue 18).

Protocol (written 2026-11-27 before any forecast of these rows was looked at; nothing is fitted to them):

- rows: ``benchmarks/data/dp_published/dle_scaling.csv`` (its README: each row from a "Training performance
  results" table of a DeepLearningExamples README, with its path and commit). A case is one (model, framework,
  system, precision, per-GPU batch, source); its speed-up at k GPUs is throughput(k) / throughput(1), weak
  scaling inside one DGX (8 GPUs; 16 on a DGX-2).
- kept: cases of a model traincast builds (ResNet-50 v1.5 = torchvision ``resnet50``; ResNeXt-101 32x4d and
  SE-ResNeXt-101 32x4d = ``timm:resnext101_32x4d`` / ``timm:seresnext101_32x4d``; BERT-large = the zoo's
  ``bert-large`` at the table's sequence length: SQuAD fine-tuning 384, pre-training 128 / 512) whose table prints
  the per-GPU batch, and that the data file does not flag (``SUSPECT``, gradient accumulation, a batch that
  changes with the GPU count). Other models (GNMT, Jasper, nnU-Net, Tacotron2, ...) are not built by traincast.
- forecast: ``traincast.predict.forecast`` with the default predictor, ``per_gpu_batch=True``, the table's GPU
  (catalog name) and GPU count in one node; precision FP32 -> ``fp32``, TF32 -> ``tf32``, AMP -> ``amp-fp16``;
  optimizer SGD (CNNs) or AdamW (BERT). TensorFlow rows are forecast as the same job in PyTorch (Horovod's fused
  all-reduce stands for DDP's buckets).
- reported: per case the published and forecast speed-up and the signed error of the forecast speed-up; MAPE and
  median signed error by GPU count and in all; the same for a naive "speed-up = k"; and the 1-GPU throughput
  error (forecast vs published samples/s) as a second check of the single-GPU model.
Goal (issue 18): data-parallel speed-ups within 5%.

Second revision (2026-11-27, after the runs above had been seen): the PyTorch ResNet-50, SE-ResNeXt-101 and
EfficientNet tables print no per-GPU batch; their benchmark settings are in the ConvNets' ``configs.yml`` (batch and
memory format per architecture, platform and precision), copied into ``dle_configs_batch.csv`` (one stored version
of the file, commit 0fadac23: it may differ from the version each README was measured with). Those cases are now
included (``--no-configs`` leaves them out) and reported apart; EfficientNet-B0 only (B4 trains at a larger image
size, which its tables do not print; traincast's torchvision input is 224x224). The optimizer of the CNN cases is
SGD with momentum (EfficientNet's recipes use RMSprop, an optimizer step of about the same cost).

Revision (2026-11-27, after the first run had been seen; that run is ``--memory-format-by contiguous``): the first
run forecast every case with PyTorch's default NCHW activations, while the PyTorch ConvNets READMEs benchmark AMP
with ``--memory-format nhwc`` (their "Training performance benchmark" commands); traincast had no way to say so.
``traincast predict --memory-format channels_last`` was added (workload/layout.py), and by default
(``--memory-format-by recipe``) each case runs in the memory format its README's commands give: PyTorch CNN AMP
cases channels_last, every other case contiguous (the TensorFlow and MXNet READMEs as read name no layout). The
sensitivity ``amp-nhwc`` runs every AMP CNN case channels_last (TensorFlow's GPU convolutions are NHWC with XLA).

    python benchmarks/dp_published.py [--only MODEL] [--json out.json] [--memory-format-by recipe|contiguous|amp-nhwc]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from rich.progress import track

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data" / "dp_published" / "dle_scaling.csv"
CONFIGS = ROOT / "data" / "dp_published" / "dle_configs_batch.csv"

MODELS = {  # model in the data file -> (traincast model, sequence length or None, optimizer)
    "resnet50v1.5": ("resnet50", None, "sgd"),
    "resnext101-32x4d": ("timm:resnext101_32x4d", None, "sgd"),
    "se-resnext101-32x4d": ("timm:seresnext101_32x4d", None, "sgd"),
    "efficientnet-b0": ("efficientnet_b0", None, "sgd"),  # 224x224, as traincast's default input
    # (EfficientNet-B4: its tables' image size is not printed and DLE trains it above traincast's 224: left out)
    "bert-large-squad-finetune": ("bert-large", 384, "adamw"),
    "bert-large-pretrain-seq128": ("bert-large", 128, "adamw"),
    "bert-large-pretrain-seq512": ("bert-large", 512, "adamw"),
}
PRECISION = {"FP32": "fp32", "TF32": "tf32", "AMP": "amp-fp16"}
FLAGS = ("SUSPECT", "accumulation", "changes")


def config_batches() -> dict:
    """(model, gpu, precision) -> (per-GPU batch, memory format) from the PyTorch ConvNets' configs.yml
    (``dle_configs_batch.csv``: the README tables of these models print no batch)."""
    if not CONFIGS.exists():
        return {}
    out = {}
    for r in csv.DictReader(CONFIGS.open()):
        fmt = "channels_last" if r["memory_format"].strip().lower() == "nhwc" else "contiguous"
        out[(r["model"], r["gpu"], r["precision"])] = (int(r["batch_per_gpu"]), fmt)
    return out


def load_cases(only: str | None = None, with_configs: bool = True) -> list[dict]:
    rows = list(csv.DictReader(DATA.open()))
    batches = config_batches() if with_configs else {}
    cases: dict[tuple, dict] = defaultdict(lambda: {"k": {}})
    for r in rows:
        if r["model"] not in MODELS or (only and only not in r["model"]):
            continue
        if any(f.lower() in r["section"].lower() for f in FLAGS):
            continue
        fmt_cfg = None
        try:
            b = int(r["batch_per_gpu"])
        except ValueError:
            if r["framework"] != "PyTorch" or (r["model"], r["gpu"], r["precision"]) not in batches:
                continue
            b, fmt_cfg = batches[(r["model"], r["gpu"], r["precision"])]
        key = (r["model"], r["framework"], r["gpu"], r["precision"], b, r["source"])
        c = cases[key]
        c.update(model=r["model"], framework=r["framework"], gpu=r["gpu"], precision=r["precision"], batch=b,
                 source=r["source"], unit=r["unit"], batch_from="configs.yml" if fmt_cfg else "table",
                 fmt_cfg=fmt_cfg)
        c["k"][int(r["gpus"])] = float(r["throughput"])
    return [c for c in cases.values() if 1 in c["k"] and len(c["k"]) > 1]


def memory_format(c: dict, by: str) -> str:
    """The memory format case ``c`` is forecast in (the docstring's revision)."""
    cnn = not c["model"].startswith("bert")
    if by == "recipe" and c.get("fmt_cfg"):  # the configs.yml entry says
        return c["fmt_cfg"]
    if by == "contiguous" or not cnn or c["precision"] != "AMP":
        return "contiguous"
    return "channels_last" if by == "amp-nhwc" or c["framework"] == "PyTorch" else "contiguous"


def forecast_case(c: dict, families: dict, by: str = "recipe") -> dict:
    from traincast.predict import WorkloadFamily, forecast

    name, seq, opt = MODELS[c["model"]]
    prec = PRECISION[c["precision"]]
    fmt = memory_format(c, by)
    fkey = (name, seq, prec, opt, fmt)
    if fkey not in families:
        families[fkey] = WorkloadFamily(name, precision=prec, optimizer=opt, seq_len=seq, memory_format=fmt)
    out = {}
    for k in sorted(c["k"]):
        f = forecast(name, gpu=c["gpu"], gpus=k, batch_size=c["batch"], per_gpu_batch=True, precision=prec,
                     optimizer=opt, family=families[fkey], seq_len=seq, memory_format=fmt)
        out[k] = dict(samples_per_s=k * c["batch"] / f.iteration_s, iteration_s=f.iteration_s,
                      exposed_comm_s=f.communication_s)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None, help="models whose name contains this")
    ap.add_argument("--json", default=None, help="write the per-case rows here")
    ap.add_argument("--no-configs", action="store_true",
                    help="only cases whose table prints the batch (the protocol before dle_configs_batch.csv)")
    ap.add_argument("--memory-format-by", default="recipe", choices=("recipe", "contiguous", "amp-nhwc"),
                    help="recipe: as each README's benchmark commands (default); contiguous: the first run; "
                         "amp-nhwc: every AMP CNN case channels_last (sensitivity)")
    args = ap.parse_args()
    t0 = time.time()
    cases = load_cases(args.only, with_configs=not args.no_configs)
    fams: dict = {}
    rows = []
    for c in track(cases, description="forecasting", disable=not sys.stderr.isatty()):
        fc = forecast_case(c, fams, args.memory_format_by)
        t1 = c["k"][1]
        c["one_gpu_err"] = 100 * (fc[1]["samples_per_s"] / t1 - 1)
        for k, tk in sorted(c["k"].items()):
            if k == 1:
                continue
            meas = tk / t1
            pred = fc[k]["samples_per_s"] / fc[1]["samples_per_s"]
            rows.append(dict(model=c["model"], framework=c["framework"], gpu=c["gpu"], precision=c["precision"],
                             batch=c["batch"], k=k, measured=meas, forecast=pred, err=100 * (pred / meas - 1),
                             naive=100 * (k / meas - 1), one_gpu_err=c["one_gpu_err"],
                             exposed_ms=1e3 * fc[k]["exposed_comm_s"], step_ms=1e3 * fc[k]["iteration_s"],
                             source=c["source"], batch_from=c["batch_from"]))
    print(f"{len(cases)} cases, {len(rows)} (case, GPU count) speed-ups; memory format by {args.memory_format_by}; "
          "protocol in the docstring\n")
    print(f"{'model':26} {'framework':18} {'gpu':15} {'prec':5} {'b':>4} {'k':>3} {'published':>9} {'forecast':>9} "
          f"{'err':>7} {'1-GPU err':>9}")
    for r in rows:
        print(f"{r['model']:26} {r['framework'][:18]:18} {r['gpu']:15} {r['precision']:5} {r['batch']:>4} {r['k']:>3} "
              f"{r['measured']:>8.2f}x {r['forecast']:>8.2f}x {r['err']:>+6.1f}% {r['one_gpu_err']:>+8.1f}%")

    def summary(sel, label):
        if not sel:
            return
        e = [r["err"] for r in sel]
        nv = [r["naive"] for r in sel]
        print(f"{label:34} n={len(sel):3}  speed-up MAPE {statistics.mean(map(abs, e)):5.1f}% "
              f"(median signed {statistics.median(e):+5.1f}%, within 5%: {sum(abs(x) <= 5 for x in e)}); "
              f"naive k: {statistics.mean(map(abs, nv)):5.1f}% ({statistics.median(nv):+5.1f}%)")

    print()
    for k in sorted({r["k"] for r in rows}):
        summary([r for r in rows if r["k"] == k], f"{k} GPUs")
    for p in ("FP32", "TF32", "AMP"):
        summary([r for r in rows if r["precision"] == p], f"{p}")
    for m in sorted({r["model"] for r in rows}):
        summary([r for r in rows if r["model"] == m], m)
    summary([r for r in rows if r["batch_from"] == "table"], "all, batch printed in the table")
    summary([r for r in rows if r["batch_from"] != "table"], "all, batch from configs.yml")
    summary(rows, "all")
    print()
    for label, keep in (("all frameworks", lambda fw: True), ("PyTorch", lambda fw: fw == "PyTorch"),
                        ("TensorFlow / MXNet (forecast as PyTorch eager)", lambda fw: fw != "PyTorch")):
        v = [c["one_gpu_err"] for c in cases if keep(c["framework"]) and c["batch_from"] == "table"]
        if v:
            print(f"1-GPU throughput, {label}, {len(v)} cases (batch printed): MAPE {statistics.mean(map(abs, v)):.1f}%, "
                  f"median signed {statistics.median(v):+.1f}% (+ = forecast faster)")
    v = [c["one_gpu_err"] for c in cases if c["batch_from"] != "table"]
    if v:
        print(f"1-GPU throughput, PyTorch, {len(v)} cases (batch from configs.yml): MAPE "
              f"{statistics.mean(map(abs, v)):.1f}%, median signed {statistics.median(v):+.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\n({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
