"""Real training runs made on this CPU, cached as small logs for the online benchmarks.

Two sets, written once under ``benchmarks/data/converge_runs/`` (gzip CSV, one
file a run, plus ``manifest.json``); later calls reuse them, ``--force`` remakes:

- ``curves``: 3 model kinds x 5 learning-rate schedules x 3 seeds = 45 runs.
  Models: a student MLP learning a random teacher MLP from fresh Gaussian
  inputs (MSE, SGD with momentum), a small CNN on scikit-learn's 8x8 digits
  with 15% of the labels flipped and random 1-pixel shifts (SGD with
  momentum), and a 2-layer causal transformer on a synthetic Markov language
  over 96 tokens with sparse transitions (AdamW). All three keep learning to the end of the
  run (no early floor, no quick memorising), as LLM pre-training does. Schedules (``traincast.online.schedule``
  specs): constant, step (x0.3 at 1/3 and 2/3 of the run), warm-up + cosine to
  0, WSD (5% warm-up, linear cooldown over the last 20%) and inverse square
  root. Each log row holds ``step,time_s,loss,lr``: the mean training loss of
  the last 5 steps, as most loggers write it.
- ``eta``: 3 model kinds x 3 seeds of runs with what real logs hold: an
  evaluation and a checkpoint every 10% of the run, a crash at 45% and a
  resume from the checkpoint at 40% (the steps from 40% to 45% are logged
  twice, and the clock of the new process starts again at 0), and for seed 2
  the batch size doubled from 70% of the run on. ``time_s`` is the process
  clock, as in a log that prints elapsed time.

Generation is bounded (about 10 minutes on one core; torch uses 1 thread).

    PYTHONPATH=src .venv/bin/python benchmarks/converge_runs.py [--force]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from traincast.online.schedule import parse_schedule  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "converge_runs"
BATCH = {"mlp": 128, "cnn": 32, "transformer": 32}
MODELS = {  # name: (total steps, peak learning rate)
    "mlp": (3000, 0.01),
    "cnn": (2000, 0.02),
    "transformer": (2000, 3e-4),
}
LOG_EVERY = 5


def schedules(total: int) -> dict[str, str]:
    w = total // 20
    return {
        "constant": "constant",
        "step": f"step:{total // 3}:0.3",
        "cosine": f"warmup-cosine:{w}:{total}:0",
        "wsd": f"wsd:{w}:{total}:0.2:linear",
        "inverse-sqrt": f"inverse-sqrt:{w}",
    }


# ---------------------------------------------------------------- the tasks
class Task:
    """A model, its data and a batch sampler (deterministic for a seed)."""

    def __init__(self, kind: str, seed: int):
        import torch

        torch.manual_seed(seed)
        self.kind = kind
        self.g = torch.Generator().manual_seed(seed)
        if kind == "cnn":  # digits with 15% of the labels flipped and +-1 pixel shifts: no quick memorising
            from sklearn.datasets import load_digits

            x, y = load_digits(return_X_y=True)
            rng = np.random.default_rng(seed)
            flip = rng.random(len(y)) < 0.15
            y = np.where(flip, rng.integers(0, 10, len(y)), y)
            self.xtr = torch.tensor((x / 16.0).astype(np.float32)).reshape(-1, 1, 8, 8)
            self.ytr = torch.tensor(y)
            self.model = torch.nn.Sequential(
                torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, padding=1),
                torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(32 * 16, 10),
            )
        elif kind == "mlp":  # a student MLP learning a random teacher MLP from fresh Gaussian inputs (MSE)
            tg = torch.Generator().manual_seed(500 + seed)
            self.w1 = 3 * torch.randn(32, 256, generator=tg) / 32**0.5
            self.w2 = 2 * torch.randn(256, 256, generator=tg) / 256**0.5
            self.w3 = 2 * torch.randn(256, 1, generator=tg) / 256**0.5
            self.model = torch.nn.Sequential(
                torch.nn.Linear(32, 128), torch.nn.Tanh(), torch.nn.Linear(128, 128), torch.nn.Tanh(), torch.nn.Linear(128, 1)
            )
        else:  # a causal transformer on a synthetic Markov language over 96 tokens (sparse transitions)
            rng = np.random.default_rng(1000 + seed)
            self.vocab, self.seq = 96, 24
            self.trans = torch.tensor(rng.dirichlet(np.full(self.vocab, 0.1), size=self.vocab), dtype=torch.float32)
            layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
            self.emb = torch.nn.Embedding(self.vocab, 64)
            self.pos = torch.nn.Parameter(torch.zeros(1, self.seq, 64))
            self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = torch.nn.Linear(64, self.vocab)
            self.model = torch.nn.ModuleList([self.emb, self.enc, self.head])
            self.model.register_parameter("pos", self.pos)
            self.mask = torch.nn.Transformer.generate_square_subsequent_mask(self.seq)

    def optimizer(self, lr: float):
        import torch

        if self.kind == "transformer":
            return torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=0.01)
        return torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)

    def loss(self, batch: int):
        import torch
        import torch.nn.functional as F

        if self.kind == "cnn":
            idx = torch.randint(0, len(self.xtr), (batch,), generator=self.g)
            x = torch.roll(self.xtr[idx], shifts=tuple(torch.randint(-1, 2, (2,), generator=self.g).tolist()), dims=(2, 3))
            return F.cross_entropy(self.model(x), self.ytr[idx])
        if self.kind == "mlp":
            x = torch.randn(batch, 32, generator=self.g)
            with torch.no_grad():
                t = torch.tanh(torch.tanh(x @ self.w1) @ self.w2) @ self.w3 + 0.1 * torch.randn(batch, 1, generator=self.g)
            return F.mse_loss(self.model(x), t)
        x = torch.empty(batch, self.seq + 1, dtype=torch.long)
        x[:, 0] = torch.randint(0, self.vocab, (batch,), generator=self.g)
        for t in range(self.seq):
            x[:, t + 1] = torch.multinomial(self.trans[x[:, t]], 1, generator=self.g).squeeze(1)
        h = self.emb(x[:, :-1]) + self.pos
        h = self.enc(h, mask=self.mask, is_causal=True)
        return F.cross_entropy(self.head(h).reshape(-1, self.vocab), x[:, 1:].reshape(-1))

    def evaluate(self) -> None:
        import torch

        with torch.no_grad():
            for _ in range(20):
                self.loss(64)


def _write(path: Path, rows) -> None:
    buf = io.StringIO()
    buf.write("step,time_s,loss,lr\n")
    for s, t, l, lr in rows:
        buf.write(f"{s},{t:.4f},{l:.5g},{lr:.5g}\n")
    with gzip.open(path, "wt") as f:
        f.write(buf.getvalue())


def read_run(path: Path):
    """(step, time_s, loss, lr) arrays of a cached run, in log order."""
    with gzip.open(path, "rt") as f:
        a = np.loadtxt(f, delimiter=",", skiprows=1)
    return a[:, 0].astype(int), a[:, 1], a[:, 2], a[:, 3]


def train_curve(kind: str, sched_name: str, seed: int) -> list[tuple]:
    import torch

    total, peak = MODELS[kind]
    sched = parse_schedule(schedules(total)[sched_name], total)
    task = Task(kind, seed)
    opt = task.optimizer(peak)
    t0 = time.perf_counter()
    rows, acc = [], []
    for k in range(1, total + 1):
        lr = peak * float(sched.lr([k])[0])
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad()
        loss = task.loss(BATCH[kind])
        loss.backward()
        opt.step()
        acc.append(loss.item())
        if k % LOG_EVERY == 0:
            rows.append((k, time.perf_counter() - t0, float(np.mean(acc)), lr))
            acc = []
    del torch
    return rows


def train_eta(kind: str, seed: int) -> list[tuple]:
    """A run with evaluations, checkpoints, a crash and resume, and (seed 2) a batch-size change."""
    import torch

    total, peak = MODELS[kind]
    sched = parse_schedule(schedules(total)["cosine"], total)
    task = Task(kind, seed)
    opt = task.optimizer(peak)
    ckpt = Path(tempfile.mkdtemp()) / "ckpt.pt"
    every = total // 10
    crash_at, rows, acc = int(0.45 * total), [], []
    t0 = time.perf_counter()
    k = 1
    crashed = False
    while k <= total:
        lr = peak * float(sched.lr([k])[0])
        for g in opt.param_groups:
            g["lr"] = lr
        batch = BATCH[kind] * (2 if (seed == 2 and k > 0.7 * total) else 1)
        opt.zero_grad()
        loss = task.loss(batch)
        loss.backward()
        opt.step()
        acc.append(loss.item())
        if k % LOG_EVERY == 0:
            rows.append((k, time.perf_counter() - t0, float(np.mean(acc)), lr))
            acc = []
        if k % every == 0 and k < total:
            task.evaluate()
            torch.save({"model": task.model.state_dict(), "opt": opt.state_dict(), "step": k}, ckpt)
        if k == crash_at and not crashed:  # the process dies; a new one loads the last checkpoint
            crashed = True
            time.sleep(1.0)
            state = torch.load(ckpt)
            task.model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            k = state["step"]
            acc = []
            t0 = time.perf_counter() + 0.5  # the new process's clock starts at 0 (after its start-up)
            time.sleep(0.5)
        k += 1
    return rows


def ensure(force: bool = False, quiet: bool = False) -> dict:
    """Make the cached runs that are missing; return the manifest."""
    import torch

    torch.set_num_threads(1)
    DATA.mkdir(parents=True, exist_ok=True)
    man_path = DATA / "manifest.json"
    manifest = json.loads(man_path.read_text()) if man_path.exists() and not force else {"curves": {}, "eta": {}}
    todo = [("curves", kind, s, seed) for kind in MODELS for s in schedules(MODELS[kind][0]) for seed in range(3)]
    todo += [("eta", kind, "cosine", seed) for kind in MODELS for seed in range(3)]
    t_start = time.time()
    for i, (group, kind, s, seed) in enumerate(todo):
        name = f"{kind}_{s}_s{seed}" if group == "curves" else f"{kind}_eta_s{seed}"
        path = DATA / f"{name}.csv.gz"
        if name in manifest[group] and path.exists():
            continue
        t = time.time()
        rows = train_curve(kind, s, seed) if group == "curves" else train_eta(kind, seed)
        _write(path, rows)
        total, peak = MODELS[kind]
        manifest[group][name] = {
            "file": path.name, "model": kind, "schedule": schedules(total)[s], "total_steps": total,
            "peak_lr": peak, "seed": seed, "log_every": LOG_EVERY,
        }
        man_path.write_text(json.dumps(manifest, indent=1, sort_keys=True))
        if not quiet:
            print(f"[{i + 1}/{len(todo)}] {name}: {time.time() - t:.1f} s (total {time.time() - t_start:.0f} s)", flush=True)
    return manifest


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--force", action="store_true", help="remake every run")
    args = ap.parse_args()
    ensure(args.force)
    _ = math
