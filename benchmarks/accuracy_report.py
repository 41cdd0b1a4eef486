"""One accuracy report: every measured single-device source in ../shared/data under one protocol.

PROTOCOL (written 2026-11-25 before this script was first run; the decision rule below sets the default
predictor, and is not changed after seeing its rows)

Sources (every measured source in ../shared/data that times one device):
  whole models -- ``habitat`` (RTX 2080 Ti training iterations, 15 rows), ``neusight`` (NVIDIA training,
  forward+backward, 14), ``neusight-inf`` (NVIDIA inference, 38), ``neusight-amd`` (15) and
  ``neusight-inf-amd`` (28), each model built as measured (benchmarks/gpu_models.py: ``cases``; the NeuSight
  configs declare eager attention, and since 2026-11-26 (night, after the rows had been seen) the Habitat rows
  too: PyTorch 1.12, which they were measured with, had no fused attention kernel for training);
  single ops -- ``justus2018`` layers (6 GPUs) and ``neusight`` kernels (5 GPUs), 300 rows per GPU x op file.
  Added 2026-11-25 (issue 18), reported but outside the decision rule below, whose sources stay those of
  ../shared/data: ``published`` -- published single-GPU training throughputs (benchmarks/data/
  published_single_gpu.csv, each row with its repository, path and commit), modelled as they ran (batch,
  precision, NCHW or channels_last), a validation source that no parameter is set from.
  (Multi-GPU sources -- vTrain, MLPerf, collectives -- and this machine's CPU have benchmarks of their own:
  parallel_* and validate_cpu.py.)
Predictors compared on each row:
  ``analytical``   the roofline with the catalog's parameters (nothing fitted on any of these sources);
  ``learned``      as shipped: the model fitted on every layer/kernel GPU (on a GPU outside the data, the
                   geometric mean with the analytical time);
  ``logo``         leave-one-GPU-out: refitted without any layer/kernel row of the row's GPU group, with the
                   geometric mean (the shipped behaviour on an unseen GPU);
  ``logo-pure``    the same refit without the geometric mean;
  ``loso``         leave-one-source-out: for rows of a NeuSight source, refitted without any NeuSight kernel
                   (Justus TensorFlow layers only); for Habitat (never a training source) the shipped model.
  ``default``      (added 2026-11-25 with the rule's outcome; not a candidate of the rule) the default predictor
                   ``auto`` it chose: ``learned`` on the GPUs whose catalog specs a training GPU of the fit has,
                   ``analytical`` elsewhere.
  Per-op sources: leave-one-GPU-out (fit.learn.leave_one_gpu_out) and leave-one-source-out (fit on the other
  source only) with the shipped estimator.
Spread: every learned figure over the row-sample seeds given (--seeds; default 0,1,2): min-max.
Metrics: MAPE, bias = median signed error, worst row; by source, by GPU, by model family, by batch size.
Decision rule (the default --predictor): for NVIDIA GPUs whose kernels are in the learned data the score of
  a candidate is the mean over whole-model sources of its MAPE on those GPUs' rows (candidates: analytical,
  learned); for NVIDIA GPUs outside the data it is the mean over sources of the leave-one-GPU-out MAPE on all
  NVIDIA rows (candidates: analytical, logo, logo-pure). A learned candidate replaces the analytical one only
  where its score (mean over seeds) is lower by more than its own spread over the seeds; AMD GPUs and CPUs keep
  the analytical predictor (the learned data holds no AMD kernel; CPUs calibrate a profile). The rule's
  outcome is printed with the numbers it rests on.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/accuracy_report.py [--seeds 0,1,2] [--out docs]
       [--skip-ops] [--rows-per-file 300]
Writes OUT/accuracy.md (the tables), OUT/accuracy/accuracy.json (every row), OUT/accuracy/accuracy.png and
OUT/accuracy/readme_table.md (the README's table); with --readme README.md the table also replaces the block
between the README's two ``accuracy_report`` markers (tests/test_readme_accuracy.py checks that the two agree).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_models as G  # noqa: E402

from traincast.fit.datasets import default_data_dir  # noqa: E402
from traincast.fit.learn import OpTimeRegressor, analytical_ms, leave_one_gpu_out, mape, training_rows  # noqa: E402
from traincast.fit.train import DEFAULT_ESTIMATOR, DEFAULT_ROWS_PER_FILE, fit_layers  # noqa: E402
from traincast.hardware.catalog import get_catalog  # noqa: E402
from traincast.predict.analytical import AnalyticalPredictor  # noqa: E402
from traincast.predict.learned import LearnedPredictor  # noqa: E402
from traincast.predict.opfeatures import gpu_group  # noqa: E402
from traincast.workload import trace  # noqa: E402

CANDIDATES = ("analytical", "learned", "logo", "logo-pure", "loso", "default")
PUBLISHED = ROOT / "benchmarks" / "data" / "published_single_gpu.csv"


def published_cases(path: Path = PUBLISHED) -> list[dict]:
    """The published single-GPU training rows as cases: a full step (forward, backward, optimizer) at the row's
    batch and precision; channels_last rows pay no NCHW layout transposes (``nchw_transpose`` 0)."""
    d = pd.read_csv(path)
    return [dict(src="published", gpu=r.gpu, model=r.model, batch=int(r.batch), seq=None,
                 measured_ms=float(r.measured_ms), phases=("forward", "backward", "optimizer"), optimizer=r.optimizer,
                 precision=r.precision,
                 overrides={"nchw_transpose": 0.0} if r.memory_format == "channels_last" else {})
            for r in d.itertuples()]


def _key(c: dict) -> tuple:
    return (c["model"], c["batch"], c["seq"], c.get("optimizer", "sgd"), c.get("precision", "fp32"),
            c.get("fused_attention"))


def family(model: str) -> str:
    stem = Path(model).stem
    for key in ("bert", "gpt2", "gpt3", "opt", "resnet", "inception", "dcgan", "gnmt", "transformer"):
        if key in stem:
            return key
    return stem


def whole_model_rows(data: Path, seeds: list[int], rows_per_file: int, log=print, published: bool = True) -> pd.DataFrame:
    todo, skipped = G.cases(data)
    if published:
        todo = todo + published_cases()
    cat = get_catalog()
    traces = {}
    for c in todo:
        key = _key(c)
        if key not in traces:
            traces[key] = trace(c["model"], batch_size=c["batch"], seq_len=c["seq"], optimizer=key[3], precision=key[4],
                                fused_attention=key[5])
    fallback = {}  # overrides -> the analytical predictor (also the learned predictors' fallback)

    def analytical_for(c):
        k = tuple(sorted(c.get("overrides", {}).items()))
        if k not in fallback:
            fallback[k] = AnalyticalPredictor(overrides=dict(k))
        return fallback[k]

    base = []
    for c in todo:
        w = traces[_key(c)]
        dev = cat.device(c["gpu"])
        base.append(dict(src=c["src"], gpu=dev.name, group=gpu_group(c["gpu"]), vendor=dev.vendor.lower(),
                         model=Path(c["model"]).stem, family=family(c["model"]), batch=c["batch"], seq=c["seq"] or 0,
                         precision=c.get("precision", "fp32"), measured_ms=c["measured_ms"],
                         analytical_ms=G.phase_ms(w, G.timed(analytical_for(c), w, dev), c["phases"])))
    out = []
    for seed in seeds:
        t0 = time.perf_counter()
        full_m, _ = fit_layers(data, max_rows_per_file=rows_per_file, seed=seed, save=False)
        groups = set(full_m.trained_on_groups_)
        logo = {g: fit_layers(data, max_rows_per_file=rows_per_file, seed=seed, exclude_groups=(g,), save=False)[0]
                for g in sorted({b["group"] for b in base} & groups)}
        loso_m, _ = fit_layers(data, max_rows_per_file=rows_per_file, seed=seed, exclude_sources=("neusight",), save=False)
        for c, b in zip(todo, base):
            w = traces[_key(c)]
            dev = cat.device(c["gpu"])
            held = logo.get(b["group"], full_m)
            fb = analytical_for(c)
            full, loso = LearnedPredictor(full_m, fallback=fb), LearnedPredictor(loso_m, fallback=fb)
            row = dict(b, seed=seed, in_data=b["group"] in groups)
            row["learned_ms"] = G.phase_ms(w, G.timed(full, w, dev), c["phases"])
            row["logo_ms"] = G.phase_ms(w, G.timed(LearnedPredictor(held, fallback=fb), w, dev), c["phases"])
            row["logo-pure_ms"] = G.phase_ms(w, G.timed(LearnedPredictor(held, fallback=fb, blend_unseen=False), w, dev),
                                             c["phases"])
            row["loso_ms"] = (G.phase_ms(w, G.timed(loso, w, dev), c["phases"]) if b["src"].startswith("neusight")
                              else row["learned_ms"])
            # the default predictor (auto) with this seed's model: learned on the GPUs its fit saw, else analytical
            row["default_ms"] = row["learned_ms"] if full.knows(dev) else row["analytical_ms"]
            out.append(row)
        log(f"  seed {seed}: {len(logo) + 2} refits and {len(todo)} rows in {time.perf_counter() - t0:.0f} s")
    df = pd.DataFrame(out)
    for c in CANDIDATES:
        df[f"{c}_err_pct"] = (df[f"{c}_ms"] / df["measured_ms"] - 1) * 100
    return df


def per_op_rows(data: Path, seeds: list[int], rows_per_file: int, log=print) -> pd.DataFrame:
    """Per-op sources: leave-one-GPU-out and leave-one-source-out MAPEs per GPU and seed."""
    out = []
    for seed in seeds:
        rows = training_rows(data, max_rows_per_file=rows_per_file, seed=seed)
        est = OpTimeRegressor(estimator=DEFAULT_ESTIMATOR)
        for ds in ("justus2018", "neusight"):
            for r in leave_one_gpu_out(rows, ds, estimator=est, log=None):
                out.append(dict(seed=seed, source=ds, gpu=r.gpu, rows=r.n_rows, logo_mape=r.mape_pct,
                                analytical_mape=r.analytical_mape_pct))
            other = rows[rows["source"] != ds]
            test = rows[rows["source"] == ds]
            m = OpTimeRegressor(**est.get_params()).fit(other, other["time_ms"].to_numpy())
            p, a = m.predict(test), analytical_ms(test)
            for g, idx in test.groupby("gpu_group").indices.items():
                y = test["time_ms"].to_numpy()[idx]
                ok = np.isfinite(p[idx])
                out.append(dict(seed=seed, source=ds, gpu=g, rows=int(ok.sum()), loso_mape=mape(p[idx][ok], y[ok]),
                                analytical_mape=mape(a[idx], y)))
        log(f"  per-op seed {seed} done")
    return pd.DataFrame(out)


def markdown(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    rows = [["" if pd.isna(v) else str(v) for v in r] for r in df.itertuples(index=False)]
    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] + ["| " + " | ".join(r) + " |" for r in rows])


def spread(values) -> str:
    v = [float(x) for x in values]
    return f"{np.mean(v):.1f}" + (f" [{min(v):.1f}-{max(v):.1f}]" if len(v) > 1 else "")


def summarise(df: pd.DataFrame, by: str) -> pd.DataFrame:
    rows = []
    for key, g in df.groupby(by):
        r = {by: key, "rows": int(g[g.seed == g.seed.min()].shape[0])}
        for c in CANDIDATES:
            per_seed = g.groupby("seed")[f"{c}_err_pct"]
            r[f"{c} MAPE"] = spread(per_seed.apply(lambda e: e.abs().mean()))
            r[f"{c} bias"] = f"{np.median(g[f'{c}_err_pct']):+.1f}"
        rows.append(r)
    return pd.DataFrame(rows)


def decide(df: pd.DataFrame) -> dict:
    """The protocol's decision rule (see the module docstring): over the sources of ../shared/data only."""
    nv = df[(df.vendor == "nvidia") & (df.src != "published")]
    out = {}

    def score(sub, cand):
        per_seed = sub.groupby(["seed", "src"])[f"{cand}_err_pct"].apply(lambda e: e.abs().mean()).groupby("seed").mean()
        return float(per_seed.mean()), float(per_seed.max() - per_seed.min())

    for name, sub, cands in (("nvidia GPUs in the learned data", nv[nv.in_data], ("analytical", "learned")),
                             ("nvidia GPUs outside the learned data", nv, ("analytical", "logo", "logo-pure"))):
        scores = {c: score(sub, c) for c in cands}
        best = min(cands, key=lambda c: scores[c][0])
        keep = "analytical" if best == "analytical" or scores["analytical"][0] - scores[best][0] <= scores[best][1] else best
        out[name] = {"scores": {c: {"mape": round(s[0], 2), "seed_spread": round(s[1], 2)} for c, s in scores.items()},
                     "choice": keep}
    out["amd"] = {"choice": "analytical", "why": "no AMD kernel in the learned data"}
    out["cpu"] = {"choice": "analytical (a calibrated profile)", "why": "benchmarks/validate_cpu.py"}
    return out


WHAT = {
    "habitat": "Habitat: RTX 2080 Ti training iterations, 5 CNN/RNN/Transformer models x 3 batches",
    "neusight": "NeuSight: NVIDIA training (fwd+bwd), BERT/GPT-2/GPT-3/OPT on V100, A100, L4",
    "neusight-inf": "NeuSight: NVIDIA inference, same models on V100, A100, L4, P100, P4, T4",
    "neusight-amd": "NeuSight: AMD MI100/MI210/MI250 training",
    "neusight-inf-amd": "NeuSight: AMD MI100/MI210/MI250 inference",
    "published": "Published 1-GPU training (DeepLearningExamples ResNet-50: V100 FP32/AMP, A100 TF32/AMP); validation only",
}


def readme_table(df: pd.DataFrame, ops: pd.DataFrame | None, seeds: list[int]) -> str:
    """The README's "How accurate" table: one line per source, generated from the report."""
    cmd = "`python benchmarks/accuracy_report.py`"
    lines = ["| source | rows | default (`auto`): MAPE, bias | analytical: MAPE, bias | learned, GPU left out of its "
             "fit: MAPE, bias | command |", "|---|---|---|---|---|---|"]
    for src in [s for s in WHAT if s in set(df.src)]:
        g = df[df.src == src]
        cells = []
        for c in ("default", "analytical", "logo"):
            per_seed = g.groupby("seed")[f"{c}_err_pct"].apply(lambda e: e.abs().mean())
            cells.append(f"{spread(per_seed)}%, {np.median(g[f'{c}_err_pct']):+.1f}%")
        lines.append(f"| {WHAT[src]} | {int((g.seed == g.seed.min()).sum())} | {cells[0]} | {cells[1]} | {cells[2]} "
                     f"| {cmd} |")
    if ops is not None:
        for ds, what in (("justus2018", "Justus et al. single layers (TensorFlow, 6 GPUs)"),
                         ("neusight", "NeuSight single kernels (5 GPUs)")):
            o = ops[ops.source == ds]
            if len(o):
                logo = o.dropna(subset=["logo_mape"]).groupby("seed").logo_mape.mean()
                ana = o.dropna(subset=["logo_mape"]).groupby("seed").analytical_mape.mean()
                lines.append(f"| {what}, per GPU left out | {int(o.rows.max())}/GPU | | {spread(ana)}% | {spread(logo)}% "
                             f"| {cmd} |")
    lines += ["", f"MAPE: mean over row-sample seeds {','.join(map(str, seeds))} [min-max]; bias: median signed error "
              "(+ = forecast slower than measured). Full tables: [docs/accuracy.md](docs/accuracy.md)."]
    return "\n".join(lines) + "\n"


def plot(df: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s0 = df[df.seed == df.seed.min()]
    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    for ax, cand in zip(axes, ("analytical", "default", "logo")):
        for src, g in s0.groupby("src"):
            ax.scatter(g.measured_ms, g[f"{cand}_ms"], s=14, label=src)
        lo, hi = s0.measured_ms.min() * 0.5, s0.measured_ms.max() * 2
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.15)
        ax.set(xscale="log", yscale="log", xlabel="measured ms", ylabel="predicted ms",
               title=f"{cand}: MAPE {s0[f'{cand}_err_pct'].abs().mean():.1f}%")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


README_BEGIN = "<!-- generated by benchmarks/accuracy_report.py: begin -->"
README_END = "<!-- generated by benchmarks/accuracy_report.py: end -->"


def update_readme(path: Path, table: str) -> None:
    """Put ``table`` between the README's two markers (each on a line of its own), the rest left as it is."""
    text = path.read_text()
    if text.count(README_BEGIN) != 1 or text.count(README_END) != 1 or text.index(README_BEGIN) > text.index(README_END):
        raise SystemExit(f"error: {path} needs one line {README_BEGIN!r} and, after it, one line {README_END!r}")
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    path.write_text(f"{head}{README_BEGIN}\n{table.strip()}\n{README_END}{tail}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(default_data_dir()))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--rows-per-file", type=int, default=DEFAULT_ROWS_PER_FILE, help="of the whole-model refits")
    ap.add_argument("--op-rows-per-file", type=int, default=300, help="of the per-op leave-one-out fits")
    ap.add_argument("--skip-ops", action="store_true", help="whole-model sources only")
    ap.add_argument("--skip-published", action="store_true", help="leave out benchmarks/data/published_single_gpu.csv")
    ap.add_argument("--out", default=str(ROOT / "docs"), help="OUT/accuracy.md; rows, plot and README table in "
                    "OUT/accuracy/")
    ap.add_argument("--readme", default=None, help="also write the table into this README, between its markers")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    out = Path(args.out)
    (out / "accuracy").mkdir(parents=True, exist_ok=True)
    data = Path(args.data)
    t0 = time.perf_counter()
    df = whole_model_rows(data, seeds, args.rows_per_file, published=not args.skip_published)
    ops = None if args.skip_ops else per_op_rows(data, seeds, args.op_rows_per_file)
    lines = ["# Accuracy report", "", f"`{' '.join(['python', 'benchmarks/accuracy_report.py'] + (argv or sys.argv[1:]))}`"
             f" ({time.strftime('%Y-%m-%d')}, seeds {','.join(map(str, seeds))}; protocol in the script's docstring). "
             "MAPE % (mean over seeds [min-max]); bias = median signed error %. Candidates: `analytical` (the "
             "roofline, catalog parameters), `learned` (the shipped learned model), `logo` (refitted without the row's "
             "GPU: what `learned` gives on a GPU outside its fit), `logo-pure` (the same without the geometric mean "
             "with the analytical time), `loso` (refitted without the row's source). Mechanisms and what the data "
             "cannot teach: [gpu-accuracy.md](gpu-accuracy.md).", "", "![predicted vs measured](accuracy/accuracy.png)", ""]
    for by, title in (("src", "By source"), ("gpu", "By GPU"), ("family", "By model family"), ("batch", "By batch size")):
        lines += [f"## {title}", "", markdown(summarise(df, by)), ""]
    pub = df[(df.src == "published") & (df.seed == df.seed.min())]
    if len(pub):
        cols = ["gpu", "model", "batch", "precision", "measured_ms"] + [f"{c}_err_pct" for c in
                                                                          ("analytical", "learned", "logo", "default")]
        lines += ["## Published single-GPU training rows (validation only; benchmarks/data/published_single_gpu.csv)", "",
                  markdown(pub[cols].round(1)), ""]
    if ops is not None:
        o = ops.groupby(["source", "gpu"]).agg(rows=("rows", "max"), logo=("logo_mape", lambda v: spread(v.dropna())),
                                               loso=("loso_mape", lambda v: spread(v.dropna())),
                                               analytical=("analytical_mape", lambda v: spread(v.dropna()[:1])))
        lines += ["## Single ops (leave one GPU out; leave one source out)", "", markdown(o.reset_index()), ""]
    decision = decide(df)
    lines += ["## The decision rule's outcome", "", "```", json.dumps(decision, indent=1), "```", ""]
    (out / "accuracy.md").write_text("\n".join(lines))
    (out / "accuracy" / "accuracy.json").write_text(json.dumps({"whole_models": df.to_dict(orient="records"),
                                                                "ops": None if ops is None else ops.to_dict(orient="records"),
                                                                "decision": decision}, default=float))
    plot(df, out / "accuracy" / "accuracy.png")
    table = readme_table(df, ops, seeds)
    (out / "accuracy" / "readme_table.md").write_text(table)
    if args.readme:
        update_readme(Path(args.readme), table)
    print("\n".join(lines))
    print(table)
    print(f"wrote {out / 'accuracy.md'}, accuracy/accuracy.json, accuracy.png, readme_table.md in "
          f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
