"""Backtest the remaining-time estimators and choose the default.

Protocol (issue 20; written before the results were looked at). Jobs:
(1) realistic synthetic jobs with known timing (warm-up, noise,
autocorrelation, epoch and evaluation pauses with and without events, random
stalls, drift, a change of pace mid-run, a compilation on the first step, a
crash at 45% with a resume from the checkpoint at 40% on a new clock, a batch
doubled at 60%), several seeds each; (2) real jobs recorded here with
``traincast.online.track`` (MLP and CNN on sklearn digits on the CPU, with an
evaluation and a checkpoint after every epoch); (3) the real logs of
``benchmarks/converge_runs.py``'s ``eta`` set (3 model kinds x 3 seeds: an
evaluation and checkpoint every 10%, a crash at 45% and a resume from 40%
with the clock starting again, a doubled batch from 70% for seed 2), read
through the CSV parser as a user's log would be; (4) the public log of
``benchmarks/data/public_curves`` (modded-nanogpt GPT-2 124M: compilation in
the first 10 steps, a clock reset at step 11, a slow preconditioner step
every 10 steps). At 10%, 25% and 50% of each job (by step) every estimator
predicts the remaining time; the error is |predicted - true| / true, the band
coverage the share of true values inside the ~90% band. Goal (issue 20): at
10% progress, <= 10% median error.

    PYTHONPATH=src .venv/bin/python benchmarks/online_backtest.py [--seeds 5] [--real 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from traincast.online import (  # noqa: E402
    ESTIMATORS,
    backtest,
    load_series,
    summarize_backtest,
    track,
)
from traincast.online.estimate import DEFAULT_ESTIMATOR  # noqa: E402
from traincast.online.synthetic import SyntheticJob  # noqa: E402
from traincast.store import Store  # noqa: E402

TIE_PP = 0.25  # percentage points

SCENARIOS = {
    "steady": SyntheticJob(total_steps=3000, cov=0.05, steps_per_epoch=None),
    "epochs+eval": SyntheticJob(total_steps=3000, steps_per_epoch=500, epoch_pause_s=10, eval_every=1000, eval_pause_s=20, log_every=10),
    "epochs, no events": SyntheticJob(total_steps=3000, steps_per_epoch=250, epoch_pause_s=8, emit_events=False, log_every=5),
    "noisy AR(1)": SyntheticJob(total_steps=3000, cov=0.25, ar=0.9, steps_per_epoch=None),
    "stalls": SyntheticJob(total_steps=3000, steps_per_epoch=None, stall_prob=0.003, stall_s=4.0),
    "drift +20%": SyntheticJob(total_steps=3000, drift=0.2, steps_per_epoch=600, epoch_pause_s=5),
    "slowdown x1.4 at 40%": SyntheticJob(total_steps=3000, shift_at=0.4, shift_factor=1.4, steps_per_epoch=None),
    "long warm-up": SyntheticJob(total_steps=3000, warmup_steps=200, warmup_factor=4, steps_per_epoch=500, epoch_pause_s=6, log_every=10),
    "compile 60 s": SyntheticJob(total_steps=3000, compile_s=60.0, steps_per_epoch=None, log_every=5),
    "resume, new clock": SyntheticJob(total_steps=3000, steps_per_epoch=500, epoch_pause_s=5, crash_at=0.45, resume_from=0.4,
                                      compile_s=30.0, log_every=5),
    "batch x2 at 60%": SyntheticJob(total_steps=3000, shift_at=0.6, shift_factor=2.0, steps_per_epoch=None, log_every=5),
}


def train_digits(store: Store, job: str, arch: str = "mlp", seed: int = 0, epochs: int = 30, batch: int = 32, lr: float = 0.02):
    """Train on sklearn's digits with per-step recording, an eval and a checkpoint after each epoch."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=seed)
    xtr, ytr = torch.tensor(xtr), torch.tensor(ytr)
    xte, yte = torch.tensor(xte), torch.tensor(yte)
    if arch == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        shape = (-1, 64)
    else:
        model = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(32 * 16, 10),
        )
        shape = (-1, 1, 8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    spe = (len(xtr) + batch - 1) // batch
    g = torch.Generator().manual_seed(seed)
    ckpt = Path(tempfile.mkdtemp()) / "ckpt.pt"
    with track(job, total_steps=spe * epochs, store=store, steps_per_epoch=spe, model=arch, hardware="cpu", batch_size=batch, resume=False) as t:
        for _ in range(epochs):
            perm = torch.randperm(len(xtr), generator=g)
            model.train()
            for i in range(spe):
                idx = perm[i * batch : (i + 1) * batch]
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(xtr[idx].reshape(shape)), ytr[idx])
                loss.backward()
                opt.step()
                t.step(loss=loss.item())
            t.eval_start()
            model.eval()
            with torch.no_grad():
                acc = (model(xte.reshape(shape)).argmax(1) == yte).float().mean().item()
            t.eval_end(metric=acc)
            torch.save(model.state_dict(), ckpt)
            t.epoch_end()
    return load_series(store, job)


def real_jobs(n_seeds: int):
    out = []
    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "bt.db") as store:
        for arch in ("mlp", "cnn"):
            for seed in range(n_seeds):
                out.append(train_digits(store, f"real-{arch}-{seed}", arch, seed, epochs=20))
    return out


def eta_logs():
    """The real logs of converge_runs.py's eta set and the public log, parsed as a user's files would be."""
    import gzip

    from converge_runs import DATA, ensure

    from traincast.online.parsers import parse_log, parse_text

    man_p = DATA / "manifest.json"
    man = json.loads(man_p.read_text()) if man_p.exists() else ensure(quiet=True)
    out = []
    for name, m in sorted(man["eta"].items()):
        with gzip.open(DATA / m["file"], "rt") as f:
            parsed = parse_text(f.read(), "csv", name=name)
        out.append(parsed.to_series(m["total_steps"], name=name))
    pub = Path(__file__).resolve().parent / "data" / "public_curves"
    if (pub / "manifest.json").exists():
        for name, m in json.loads((pub / "manifest.json").read_text()).items():
            out.append(parse_log(pub / m["file"]).to_series(m["total_steps"], name="public:" + name))
    return out


def table(rows, title):
    s = summarize_backtest(rows)
    fr = sorted({r.fraction for r in rows})
    print(f"\n{title}")
    head = "".join(f"{f'at {f:.0%}':>24}" for f in fr)
    print(f"{'estimator':12}{head}{'overall median':>16}")
    print(f"{'':12}" + "".join(f"{'median / p90 / cover':>24}" for _ in fr))
    overall = {}
    for e in s:
        cells = "".join(f"{s[e][f]['median_pct']:>9.1f}%{s[e][f]['p90_pct']:>7.1f}%{s[e][f]['coverage_pct']:>6.0f}%" for f in fr)
        overall[e] = float(np.median([r.rel_error for r in rows if r.estimator == e]) * 100)
        print(f"{e:12}{cells}{overall[e]:>15.2f}%")
    return overall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--real", type=int, default=3, help="real recorded jobs per architecture (0: none)")
    args = ap.parse_args()
    t0 = time.time()
    synth = [job.generate(seed, f"{name}#{seed}") for name, job in SCENARIOS.items() for seed in range(args.seeds)]
    rows_s = backtest(synth, ESTIMATORS)
    print(f"synthetic: {len(SCENARIOS)} scenarios x {args.seeds} seeds, 3000 steps of ~0.2 s")
    ov_s = table(rows_s, "synthetic jobs: relative error of the remaining time (%), band coverage")
    print("\nper scenario, median error at 10/25/50% (%):")
    for name in SCENARIOS:
        sel = [r for r in rows_s if r.job.startswith(name + "#")]
        cells = "  ".join(
            f"{e}={np.median([r.rel_error for r in sel if r.estimator == e]) * 100:.1f}" for e in ESTIMATORS
        )
        print(f"  {name:22} {cells}")
    rows_r = []
    if args.real:
        real = real_jobs(args.real)
        rows_r = backtest(real, ESTIMATORS)
        steps = real[0].total_steps
        print(f"\nreal: {len(real)} recorded CPU jobs (MLP/CNN on digits, {steps} steps, eval + checkpoint every epoch)")
        table(rows_r, "real recorded jobs: relative error of the remaining time (%), band coverage")
    logs = eta_logs()
    rows_l = backtest(logs, ESTIMATORS)
    print(f"\nreal logs with resumes, pauses and a batch change: {len(logs)} ({', '.join(j.name for j in logs)})")
    table([r for r in rows_l if not r.job.startswith("public:")], "CPU logs of converge_runs.py (eta set): error of the remaining time (%), band coverage")
    pub_rows = [r for r in rows_l if r.job.startswith("public:")]
    if pub_rows:
        table(pub_rows, "public log (modded-nanogpt GPT-2 124M): error of the remaining time (%), band coverage")
    all_rows = rows_s + rows_r + rows_l
    ov = {e: float(np.median([r.rel_error for r in all_rows if r.estimator == e]) * 100) for e in ESTIMATORS}
    mean_ov = {e: float(np.mean([r.rel_error for r in all_rows if r.estimator == e]) * 100) for e in ESTIMATORS}
    # the rule: lowest median error; estimators within TIE_PP of it are ties, broken by the mean error
    lowest = min(ov.values())
    tied = [e for e in ESTIMATORS if ov[e] <= lowest + TIE_PP]
    best = min(tied, key=mean_ov.get)
    print("\nall jobs, all progress points: median (mean) relative error")
    for e in ESTIMATORS:
        print(f"  {e:12} {ov[e]:6.2f}% ({mean_ov[e]:6.2f}%)" + ("   <- chosen" if e == best else ""))
    print(f"rule: lowest median error, ties within {TIE_PP} pp broken by the lowest mean error")
    print(f"default estimator in the code: {DEFAULT_ESTIMATOR}; chosen by this run: {best}")
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
