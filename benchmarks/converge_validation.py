"""Validate the Optimus loss-curve model on real training curves.

Trains small real models here on the CPU (an MLP and a small CNN on sklearn's
bundled 8x8 digits; no downloads), records each run with ``traincast.online.track``,
then fits the loss curve on the first 25% and 50% of the run and predicts the
step at which the (smoothed) training loss reaches targets that the run really
reached later. Prints the relative error of steps-to-target (median and spread
over seeds) and the coverage of the bootstrap interval, for the Optimus form
and the power-law form.

    PYTHONPATH=src .venv/bin/python benchmarks/converge_validation.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from traincast.online import LossCurveModel, load_series, track  # noqa: E402
from traincast.store import Store  # noqa: E402


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


def smoothed(loss: np.ndarray, w: int) -> np.ndarray:
    """Trailing moving average: what a user watching the curve would call 'the loss'."""
    c = np.cumsum(np.r_[0.0, loss])
    out = np.empty(len(loss))
    for i in range(len(loss)):
        a = max(0, i + 1 - w)
        out[i] = (c[i + 1] - c[a]) / (i + 1 - a)
    return out


VARIANTS = {  # label: (form, log_space)
    "optimus": ("optimus", False),
    "optimus-log": ("optimus", True),
    "power": ("power", False),
    "power-log": ("power", True),
    "auto-log": ("auto", True),
}


def evaluate(series, fractions=(0.25, 0.5), target_at=(0.75, 1.0), variants=tuple(VARIANTS), n_boot=40):
    ok = np.isfinite(series.loss) & (series.steps > 0)
    k, loss = series.steps[ok].astype(float), series.loss[ok]
    n = len(k)
    sm = smoothed(loss, max(n // 20, 10))
    rows = []
    for tf in target_at:
        target = float(sm[int(tf * n) - 1])
        true_step = float(k[np.argmax(sm <= target)])  # first step where the smoothed loss reaches it
        for f in fractions:
            cut = int(f * n)
            if true_step <= k[cut - 1]:
                continue
            for form in variants:
                m = LossCurveModel(*VARIANTS[form]).fit(k[:cut], loss[:cut])
                stt = m.steps_to_target(target, n_boot=n_boot, seed=0)
                err = abs(stt.steps - true_step) / true_step if np.isfinite(stt.steps) else np.inf
                rows.append(dict(form=form, frac=f, target_at=tf, err=err, covered=stt.low <= true_step <= stt.high))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=30)
    args = ap.parse_args()
    t0 = time.time()
    rows = []
    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "bench.db") as store:
        for arch in ("mlp", "cnn"):
            for seed in range(args.seeds):
                s = train_digits(store, f"{arch}-{seed}", arch, seed, epochs=args.epochs)
                for r in evaluate(s):
                    rows.append({**r, "arch": arch, "seed": seed})
    print(f"real runs: MLP and CNN on sklearn digits, {args.seeds} seeds each, {args.epochs} epochs, SGD+momentum, CPU")
    print("steps-to-target error (|predicted - true| / true) from the first 25% / 50% of the run;")
    print("targets = smoothed training loss reached at 75% and 100% of the run; 'reached' = share of")
    print("predictions that the target is reachable at all (inf error otherwise); IQR over seeds x targets\n")
    print(f"{'model':12} {'arch':5} {'from':>5} {'n':>3} {'median':>8} {'IQR':>17} {'reached':>8} {'interval cover':>15}")
    for form in VARIANTS:
        for arch in ("mlp", "cnn", "all"):
            for f in (0.25, 0.5):
                sel = [r for r in rows if r["form"] == form and r["frac"] == f and (arch == "all" or r["arch"] == arch)]
                if not sel:
                    continue
                e = np.array([r["err"] for r in sel]) * 100
                q1, q3 = np.percentile(e, [25, 75], method="lower")
                cov = np.mean([r["covered"] for r in sel]) * 100
                reached = np.mean(np.isfinite(e)) * 100
                print(
                    f"{form:12} {arch:5} {f:>5.0%} {len(sel):>3} {np.median(e):>7.1f}% {q1:>7.1f}%-{q3:>6.1f}% "
                    f"{reached:>7.0f}% {cov:>14.0f}%"
                )
    print(f"\n({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
