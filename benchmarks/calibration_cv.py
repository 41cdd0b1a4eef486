"""Leave-one-calibration-model-out cross-validation of the CPU calibration, on the calibration rows only.

Decides calibration design choices (how much the single-op samples weigh against the whole steps) without
looking at held-out models: each calibration model except the pool's first (every fit needs it) is left out in
turn, the rest are fitted, and the left-out model's steps are forecast. Reads the cache of
``benchmarks/validate_cpu.py`` (its measured steps, its layer campaign and its device rates), so nothing is
measured again.

    python benchmarks/calibration_cv.py --cache out/validate_cpu.json [--layer-weights 1,4,16]

Run on 2026-11-26 on the two-round cache (docs/cpu-accuracy.md): layer weight 1 (the default) 22.6%, 4: 38.4%,
16: 42.8%.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import traincast.fit.calibration as calibration
from traincast.fit.calibration import CALIBRATION_POOL, Measured, calibrate, run_layer_campaign
from traincast.fit.validate import predict_measured
from traincast.measure.kernels import DepthwiseCosts
from traincast.measure.memory import Bandwidth
from traincast.store import Store

CAL_BATCHES = (2, 8, 16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default="out/validate_cpu.json", help="a validate_cpu.py cache")
    ap.add_argument("--layer-weights", default="1", help="comma-separated weights of the single-op samples")
    ap.add_argument("--layer-samples", type=int, default=160)
    args = ap.parse_args()
    cache = Path(args.cache)
    dev_file = cache.with_suffix(".device.json")
    if not cache.exists() or not dev_file.exists():
        ap.error(f"{cache} and {dev_file} must exist: run benchmarks/validate_cpu.py --cache {cache} first")
    try:
        weights = [float(w) for w in args.layer_weights.split(",") if w]
    except ValueError:
        ap.error(f"--layer-weights {args.layer_weights!r}: not comma-separated numbers")
    measured = [Measured(**d) for d in json.loads(cache.read_text())]
    cal = [m for m in measured if m.model in CALIBRATION_POOL and m.batch_size in CAL_BATCHES]
    layers = run_layer_campaign(args.layer_samples, store=Store(cache.with_suffix(".db")))
    rates = json.loads(dev_file.read_text())
    bw = Bandwidth(**rates["bandwidth"])
    dw = DepthwiseCosts.from_dict(rates["depthwise"])
    fit = calibration.fit_parameters
    for lw in weights:
        calibration.fit_parameters = lambda *a, _lw=lw, **k: fit(*a, **(k | {"layer_weight": _lw}))
        errs = []
        for out in CALIBRATION_POOL[1:]:
            keep = tuple(m for m in CALIBRATION_POOL if m != out)
            prof = calibrate(keep, CAL_BATCHES, measured=[m for m in cal if m.model != out], layer_samples=layers,
                             bandwidth=bw, depthwise=dw, name="cv", threads=rates.get("threads"))
            rows = predict_measured(prof, [m for m in cal if m.model == out])
            errs += [abs(r["error_pct"]) for r in rows]
            print(f"  layer weight {lw:g}, {out} left out: "
                  + " ".join(f"b{r['batch_size']} {r['error_pct']:+.1f}%" for r in rows), flush=True)
        print(f"layer weight {lw:g}: leave-one-model-out MAPE {np.mean(errs):.1f}% over {len(errs)} rows", flush=True)
    calibration.fit_parameters = fit


if __name__ == "__main__":
    main()
