"""Whole-model training-iteration time: analytical vs learned per-op predictor vs real GPUs.

Measured rows (never fitted on here; the learned model is fitted on layer/kernel data only):
- Habitat, RTX 2080 Ti (``models/habitat_rtx2080ti_iterations.csv``): resnet50, inception (=inception_v3),
  dcgan (SGD step), gnmt and transformer (=transformer-base; Adam step; 50-token sentence pairs, WMT vocab
  32,317, as Habitat's input providers) at 3 batch sizes; full iteration (forward, backward, optimizer).
- NeuSight labels (``models/neusight_labels.csv``), no parallelism: bert_large, gpt2_large, gpt3_xl, gpt3_27
  and opt_13 at their sequence length, each built from the shape NeuSight measured
  (``benchmarks/data/neusight_models/*.json``, Hugging Face configs; NeuSight's gpt3_xl is 3072 wide, not
  the zoo's 2048). ``train`` rows: iteration_ms is forward + backward (no optimizer), so the predictions sum
  the forward and backward phases. ``inf`` rows (inference): the forward phase of the training step (dropout
  included) against iteration_ms. switchxl4/switch4 (mixture of experts): no config of their shape here. AMD rows
  (MI100/MI210/MI250) are reported apart: no AMD GPU is in the kernel data.

Columns: ``analytical`` (roofline, catalog efficiencies), ``learned`` (the shipped model, fitted on all layer
and kernel GPUs), ``learned-LOGO`` (a model refitted without any layer/kernel rows of the target GPU: the
honest held-out-GPU figure; RTX 2080 Ti and L4 are never in the kernel data, so there it equals ``learned``).

``--adapt K``: a further column, ``LOGO+adapt``: the leave-target-GPU-out model adapted to the target GPU
with K of its NeuSight kernels drawn at random (``traincast fit adapt``'s fit; median prediction over
``--draws`` draws) -- a GPU the model never saw, with a few kernels measured on it. The A100 labels are of
the 80 GB PCIe board: its own kernels adapt it where the data has them, else a board of the same chip's.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/gpu_models.py [--data ../shared/data] [--rows-per-file 1500]
       [--estimator hybrid|hgb|mlp|ensemble|hgb_nohw|auto] [--normalizer tf-compute|compute|roofline]
       [--adapt 30 [--draws 5]] [--seeds 1,2]
``--seeds 1,2``: refit on other random row samples of the layer/kernel data and print each source's MAPE per
seed with its range (the sample's share of a difference between two models).
``--estimator``: the estimator of the leave-target-GPU-out refits and, where it is not the shipped model's, of
a refit on all GPUs that stands in for the shipped model (default: the shipped model's estimator).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from traincast.fit.datasets import default_data_dir  # noqa: E402
from traincast.predict.opfeatures import gpu_group  # noqa: E402
from traincast.fit.learn import ESTIMATORS, NORMALIZERS  # noqa: E402
from traincast.fit.train import DEFAULT_ROWS_PER_FILE  # noqa: E402
from traincast.hardware.catalog import get_catalog  # noqa: E402
from traincast.predict.analytical import AnalyticalPredictor  # noqa: E402
from traincast.predict.learned import LearnedPredictor  # noqa: E402
from traincast.predict.rnn import with_cudnn_recurrent  # noqa: E402
from traincast.workload import trace  # noqa: E402

HABITAT_ZOO = {"resnet50": "resnet50", "inception": "inception_v3", "dcgan": "dcgan", "gnmt": "gnmt",
               "transformer": "transformer-base"}
HABITAT_OPTIMIZER = {"gnmt": "adam", "transformer": "adam"}  # Habitat's iteration providers; SGD elsewhere
NEUSIGHT_MODELS = ROOT / "benchmarks" / "data" / "neusight_models"  # <label name>.json: the shape measured


_INFERENCE_DIR: list = []


def inference_config(path: Path) -> Path:
    """The model NeuSight's inference rows ran, as a config: ``model.eval()`` under ``no_grad`` (so every dropout
    probability 0; the traced step's forward phase is then the inference pass) and, for BERT, the sequence
    classifier (``BertModel``'s encoder and pooler; the classifier's 1024 x 2 layer is left out) instead of the
    LM head. Written once per run to a temporary folder."""
    import json
    import tempfile

    import transformers as tf

    if not _INFERENCE_DIR:
        import atexit
        import shutil

        _INFERENCE_DIR.append(Path(tempfile.mkdtemp(prefix="traincast-neusight-inf-")))
        atexit.register(shutil.rmtree, _INFERENCE_DIR[0], True)
    out = _INFERENCE_DIR[0] / path.name
    if not out.exists():
        data = json.loads(path.read_text())
        defaults = tf.AutoConfig.for_model(data["model_type"]).to_dict()
        for key, value in defaults.items():
            if ("dropout" in key or "pdrop" in key or key == "layerdrop") and isinstance(value, float):
                data[key] = 0.0
        if data["model_type"] == "bert":
            data["architectures"] = ["BertModel"]
        out.write_text(json.dumps(data))
    return out


def cases(data: Path) -> tuple[list[dict], list[str]]:
    out, skipped = [], []
    h = pd.read_csv(data / "models" / "habitat_rtx2080ti_iterations.csv")
    for r in h.itertuples():
        if r.model not in HABITAT_ZOO:
            skipped.append(f"habitat {r.model} b{r.batch_size}: no zoo entry")
            continue
        # measured with PyTorch 1.12 (../shared/data/README.md), which ran nn.MultiheadAttention's training step
        # as separate kernels (the fused scaled_dot_product_attention kernels came with PyTorch 2.0): the software
        # the rows measured, declared as the NeuSight configs declare theirs (attn_implementation "eager")
        out.append(dict(src="habitat", gpu="RTX2080Ti", model=HABITAT_ZOO[r.model], batch=int(r.batch_size),
                        seq=None, measured_ms=float(r.iteration_ms), phases=("forward", "backward", "optimizer"),
                        optimizer=HABITAT_OPTIMIZER.get(r.model, "sgd"), fused_attention=False))
    n = pd.read_csv(data / "models" / "neusight_labels.csv")
    n = n[n["parallel"].isna()]
    for r in n.itertuples():
        cfg = NEUSIGHT_MODELS / f"{r.model}.json"
        if not cfg.is_file():
            skipped.append(f"neusight {r.model} {r.gpu} {r.mode} b{r.batch_size}: no model config")
            continue
        train = r.mode == "train"
        out.append(dict(src="neusight" + ("" if train else "-inf") + ("-amd" if r.gpu.startswith("AMD") else ""),
                        gpu=r.gpu, model=str(cfg if train else inference_config(cfg)), batch=int(r.batch_size),
                        seq=int(r.seq_len),
                        measured_ms=float(r.iteration_ms),
                        phases=("forward", "backward") if train else ("forward",)))
    return out, skipped


def timed(predictor, w, dev):
    """Op times as a forecast takes them: recurrent layers as cuDNN runs them on GPUs, at the precision traced,
    and on GPUs the wait for the host that issues the kernels (predict/host.py)."""
    from traincast.predict.host import host_costs, with_host

    ot = with_cudnn_recurrent(predictor).predict(w, dev, w.precision)
    return with_host(ot, w, *host_costs(predictor, dev)) if dev.kind == "gpu" else ot


def phase_ms(workload, ot, phases) -> float:
    s = sum(t for op, t in zip(workload.ops, ot.times_s) if op.phase in phases)
    return (s + ot.step_overhead_s) * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(default_data_dir()))
    ap.add_argument("--rows-per-file", type=int, default=DEFAULT_ROWS_PER_FILE,
                    help="rows per GPU x op file of the refits (another value than the shipped model's refits it too)")
    ap.add_argument("--no-logo", action="store_true", help="skip the leave-target-GPU-out refits")
    ap.add_argument("--estimator", choices=ESTIMATORS, default=None,
                    help="estimator of the refits (default: the shipped model's)")
    ap.add_argument("--normalizer", choices=NORMALIZERS, default=None,
                    help="what the refits learn ratios to (default: the shipped model's)")
    ap.add_argument("--adapt", type=int, default=0, help="adapt each LOGO model with K kernels of its target GPU")
    ap.add_argument("--draws", type=int, default=5, help="with --adapt: random draws of the K kernels")
    ap.add_argument("--seeds", default="", help="comma list of further row-sample seeds: refit the learned and "
                    "leave-target-GPU-out models on each and print the spread of the MAPEs over seeds")
    args = ap.parse_args(argv)
    seeds = [int(v) for v in args.seeds.split(",") if v.strip()]
    data = Path(args.data)
    cat = get_catalog()
    todo, skipped = cases(data)
    analytical = AnalyticalPredictor()
    from traincast.fit.train import fit_layers

    learned = LearnedPredictor.load_default()
    shipped_est = learned.model.get_params()["estimator"]
    shipped_norm = learned.model.get_params()["normalizer"]
    est, norm = args.estimator or shipped_est, args.normalizer or shipped_norm
    if (est, norm, args.rows_per_file) != (shipped_est, shipped_norm, DEFAULT_ROWS_PER_FILE):
        m, _ = fit_layers(args.data, max_rows_per_file=args.rows_per_file, estimator=est, normalizer=norm, save=False)
        learned = LearnedPredictor(m)
        print(f"estimator {est}, normalizer {norm}, {args.rows_per_file} rows per file: refitted on all GPUs in "
              "place of the shipped model")
    print(f"learned model ({est}, {norm}) trained on GPU groups: {', '.join(getattr(learned.model, 'trained_on_groups_', ()))}")
    # leave-target-GPU-out models, one per target group that the layer/kernel data holds
    logo = {} if args.no_logo else logo_models(args, todo, est, norm, learned.model.trained_on_groups_, log=print)
    adapted: dict[str, list[LearnedPredictor]] = {}  # kernel GPU name -> one adapted LOGO predictor per draw
    if args.adapt and logo:
        from traincast.fit.adapt import fit_adaptation
        from traincast.fit.datasets import load_neusight, neusight_gpus
        from traincast.predict.opfeatures import attach_devices

        for name in neusight_gpus(args.data):
            g = gpu_group(name)
            if g not in logo or not any(gpu_group(c["gpu"]) == g for c in todo):
                continue
            dev = cat.device(name)
            kern = load_neusight(args.data, gpus=[name], max_rows_per_file=args.rows_per_file)
            kern = attach_devices(kern[np.isfinite(kern["time_ms"]) & (kern["time_ms"] > 0)].reset_index(drop=True), dev)
            adapted[dev.name] = []
            for d in range(args.draws):
                pick = np.random.default_rng(d).choice(len(kern), size=args.adapt, replace=False)
                sub = kern.iloc[pick]
                a = fit_adaptation(sub, sub["time_ms"].to_numpy(), logo[g].model, dev.name, timing="kernel",
                                   source="neusight kernels")
                adapted[dev.name].append(logo[g].with_adaptation(a))
            print(f"adapted the model without {g} to {dev.name} with {args.adapt} of its {len(kern)} kernels, "
                  f"{args.draws} draws")
    traces: dict = {}
    rows = []
    for c in todo:
        opt = c.get("optimizer", "sgd")
        key = (c["model"], c["batch"], c["seq"], opt, c.get("fused_attention"))
        if key not in traces:
            traces[key] = trace(c["model"], batch_size=c["batch"], seq_len=c["seq"], optimizer=opt,
                                fused_attention=c.get("fused_attention"))
        w = traces[key]
        dev = cat.device(c["gpu"])
        g = gpu_group(c["gpu"])
        a = phase_ms(w, timed(analytical, w, dev), c["phases"])
        lp = timed(learned, w, dev)
        l_ = phase_ms(w, lp, c["phases"])
        lo = phase_ms(w, timed(logo[g], w, dev), c["phases"]) if g in logo else l_
        ad = lo
        same = [n for n in adapted if gpu_group(n) == g]
        if same:  # each draw's adaptation: this GPU's own, else that of a board of the same chip
            from dataclasses import replace

            src = dev.name if dev.name in adapted else same[0]
            ad = float(np.median([phase_ms(w, timed(replace(p, adaptation=replace(p.adaptation, gpu=dev.name)), w, dev),
                                           c["phases"]) for p in adapted[src]]))
        cov = learned.coverage(w, dev)
        rows.append(dict(src=c["src"], gpu=dev.name, model=Path(c["model"]).stem, batch=c["batch"], seq=c["seq"] or "",
                         measured_ms=c["measured_ms"], analytical_ms=a, learned_ms=l_, logo_ms=lo, adapt_ms=ad,
                         covered=f"{cov['learned']}/{cov['ops']}"))
    df = pd.DataFrame(rows)
    cols = ("analytical", "learned", "logo") + (("adapt",) if adapted else ())
    for col in cols:
        df[f"{col}_err_pct"] = (df[f"{col}_ms"] / df["measured_ms"] - 1) * 100
    pd.set_option("display.width", 200)
    print()
    print(df[["src", "gpu", "model", "batch", "seq", "measured_ms", "analytical_ms", "analytical_err_pct",
              "learned_ms", "learned_err_pct", "logo_ms", "logo_err_pct"]
             + (["adapt_ms", "adapt_err_pct"] if adapted else []) + ["covered"]]
          .to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print("\nMAPE (%) per model (learned-LOGO: the target GPU's layers/kernels left out of the fit"
          + (f"; adapt: LOGO adapted with {args.adapt} of the target GPU's kernels" if adapted else "") + ")")
    by = df.groupby(["src", "model"])
    summ = pd.DataFrame({k: by[f"{k}_err_pct"].apply(lambda s: s.abs().mean()) for k in cols})
    print(summ.round(1).to_string())
    print("\nMAPE (%) per source and GPU")
    by = df.groupby(["src", "gpu"])
    print(pd.DataFrame({k: by[f"{k}_err_pct"].apply(lambda s: s.abs().mean()) for k in cols}).round(1).to_string())
    for src in sorted(df.src.unique()):
        s = df[df.src == src]
        print(f"\n{src}: n={len(s)}  MAPE analytical {s.analytical_err_pct.abs().mean():.1f}%  "
              f"learned {s.learned_err_pct.abs().mean():.1f}%  learned-LOGO {s.logo_err_pct.abs().mean():.1f}%"
              + (f"  LOGO+adapt({args.adapt}) {s.adapt_err_pct.abs().mean():.1f}%" if adapted else ""))
    if seeds:
        spread(args, todo, traces, df, est, norm, seeds)
    if skipped:
        print("\nskipped: " + "; ".join(skipped))
    return 0


def logo_models(args, todo, est, norm, trained_groups, seed: int = 0, log=None) -> dict:
    """GPU group -> the learned predictor refitted without that group's layer/kernel rows, for every target
    group of ``todo`` the data holds (the others are never in the fit)."""
    from traincast.fit.train import fit_layers

    out: dict[str, LearnedPredictor] = {}
    for g in sorted({gpu_group(c["gpu"]) for c in todo}):
        if g in trained_groups:
            t0 = time.perf_counter()
            m, _ = fit_layers(args.data, max_rows_per_file=args.rows_per_file, exclude_groups=(g,), estimator=est,
                              normalizer=norm, seed=seed, save=False)
            out[g] = LearnedPredictor(m)
            if log:
                log(f"refitted without {g} kernels/layers ({time.perf_counter() - t0:.0f} s)")
    return out


def learned_mape(todo, traces, cat, pick) -> dict:
    """src -> MAPE % of the learned predictor ``pick(gpu_group)`` over the cases (None: not learned there)."""
    errs: dict = {}
    for c in todo:
        p = pick(gpu_group(c["gpu"]))
        if p is None:
            continue
        w = traces[(c["model"], c["batch"], c["seq"], c.get("optimizer", "sgd"))]
        got = phase_ms(w, timed(p, w, cat.device(c["gpu"])), c["phases"])
        errs.setdefault(c["src"], []).append(abs(got / c["measured_ms"] - 1) * 100)
    return {k: float(np.mean(v)) for k, v in errs.items()}


def spread(args, todo, traces, df, est, norm, seeds) -> None:
    """Refit the all-GPU and leave-target-GPU-out models on other random row samples (``fit_layers(seed=)``) and
    print each source's MAPE per seed and its range: how much of a difference between models is the sample's."""
    from traincast.fit.train import fit_layers

    cat = get_catalog()
    per = {0: {src: (s.learned_err_pct.abs().mean(), s.logo_err_pct.abs().mean()) for src, s in df.groupby("src")}}
    for seed in seeds:
        t0 = time.perf_counter()
        m, _ = fit_layers(args.data, max_rows_per_file=args.rows_per_file, estimator=est, normalizer=norm,
                          seed=seed, save=False)
        full = LearnedPredictor(m)
        logo = {} if args.no_logo else logo_models(args, todo, est, norm, m.trained_on_groups_, seed=seed)
        a = learned_mape(todo, traces, cat, lambda g: full)
        b = learned_mape(todo, traces, cat, lambda g: logo.get(g, full))
        per[seed] = {src: (a[src], b[src]) for src in a}
        print(f"seed {seed}: refitted in {time.perf_counter() - t0:.0f} s")
    print(f"\nMAPE (%) over row-sample seeds {', '.join(map(str, per))} (seed 0: the models above)")
    print(f"  {'src':<18} {'learned':>28} {'learned-LOGO':>28}")
    for src in sorted(per[0]):
        cols = []
        for i in (0, 1):
            v = [per[s][src][i] for s in per if src in per[s]]
            cols.append(" ".join(f"{x:.1f}" for x in v) + f"  [{min(v):.1f}-{max(v):.1f}]")
        print(f"  {src:<18} {cols[0]:>28} {cols[1]:>28}")


if __name__ == "__main__":
    sys.exit(main())
