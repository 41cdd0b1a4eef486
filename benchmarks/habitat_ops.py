"""Per-operation check on a GPU the learned model never saw: Habitat's RTX 2080 Ti op breakdown.

``models/habitat_rtx2080ti_op_breakdown.csv.gz`` holds, for each Habitat training iteration (model x batch),
one row per executed PyTorch operation with its forward + backward GPU time. This script sums them per
operation kind (conv2d, batch_norm, relu, max_pool2d, linear, lstm) and compares each sum with the traced
ops of the same kind as the analytical and the shipped learned predictor time them on the RTX 2080 Ti:
which parts of a whole-model error come from which kind of op. Neither predictor is fitted on these rows.

Kinds, as traced aten ops: conv2d = convolution (+ backward); batch_norm = native batch norm (+ backward);
relu = relu (+ threshold_backward); max_pool2d = max pool with indices (+ backward); linear = addmm/mm
outside recurrent modules (+ their backward mm); lstm = every op of an nn.LSTM module (timed as cuDNN runs
it, ``traincast.predict.rnn``).

Usage: PYTHONPATH=src .venv/bin/python benchmarks/habitat_ops.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from traincast.fit.datasets import default_data_dir  # noqa: E402
from traincast.hardware.catalog import get_catalog  # noqa: E402
from traincast.predict import make_predictor  # noqa: E402
from traincast.workload import trace  # noqa: E402

from gpu_models import HABITAT_OPTIMIZER as OPTIMIZER, HABITAT_ZOO  # noqa: E402  (this folder)

# the Transformer's attention GEMMs have no Habitat operation kind of their own: left out
ZOO = {k: v for k, v in HABITAT_ZOO.items() if k != "transformer"}
KINDS = ("conv2d", "batch_norm", "relu", "max_pool2d", "linear", "lstm")


def kind_of(op, rnn_modules: set) -> str | None:
    if op.phase == "optimizer":
        return None
    if op.module in rnn_modules:
        return "lstm"
    a = op.aten
    if a in ("convolution", "convolution_backward"):
        return "conv2d"
    if "batch_norm" in a:
        return "batch_norm"
    if a in ("relu", "relu_", "threshold_backward"):
        return "relu"
    if a.startswith("max_pool2d"):
        return "max_pool2d"
    if a in ("addmm", "mm"):
        return "linear"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(default_data_dir()))
    args = ap.parse_args(argv)
    ops = pd.read_csv(Path(args.data) / "models" / "habitat_rtx2080ti_op_breakdown.csv.gz")
    dev = get_catalog().device("RTX2080Ti")
    preds = {"analytical": make_predictor("analytical"), "learned": make_predictor("learned")}
    rows = []
    for (model, batch), g in ops.groupby(["model", "batch_size"]):
        if model not in ZOO:
            continue
        measured = g.groupby("operation")["run_time_ms"].sum()
        wl = trace(ZOO[model], batch_size=int(batch), optimizer=OPTIMIZER.get(model, "sgd"))
        rnn = {c.module for c in wl.recurrent_calls}
        kinds = [kind_of(op, rnn) for op in wl.ops]
        for name, p in preds.items():
            t = p.predict(wl, dev).times_s
            got: dict = defaultdict(float)
            for k, s in zip(kinds, t):
                if k:
                    got[k] += s * 1e3
            for k in KINDS:
                if k in measured.index and measured[k] > 0 and got.get(k, 0.0) > 0:
                    rows.append(dict(model=ZOO[model], batch=int(batch), kind=k, predictor=name,
                                     measured_ms=float(measured[k]), predicted_ms=got[k]))
    df = pd.DataFrame(rows)
    df["err_pct"] = (df["predicted_ms"] / df["measured_ms"] - 1) * 100
    wide = df.pivot_table(index=["model", "batch", "kind", "measured_ms"], columns="predictor",
                          values="err_pct").reset_index()
    pd.set_option("display.width", 160)
    print("error % of the summed forward + backward time of each op kind (RTX 2080 Ti, Habitat)")
    print(wide.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print("\nMAPE % per op kind (over models and batch sizes)")
    summ = df.assign(ape=df["err_pct"].abs()).pivot_table(index="kind", columns="predictor", values="ape",
                                                          aggfunc="mean")
    summ["rows"] = df[df.predictor == "analytical"].groupby("kind").size()
    print(summ.round(1).to_string())
    for name in preds:
        s = df[df.predictor == name]
        print(f"{name}: MAPE over all {len(s)} (model, batch, kind) sums {s['err_pct'].abs().mean():.1f}%  "
              f"(median error {np.median(s['err_pct']):+.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
