"""Held-out validation of the calibrated analytical predictor on this CPU.

Calibrates on resnet18, vgg11 and mobilenet_v2, holds out resnet50,
densenet121, googlenet, alexnet and bert-tiny, at batch sizes 1-32, and prints
each forecast beside the measured step (median of repeats, IQR), the
per-model error and, last, the MAPE on held-out models only.

Measurements are cached in a JSON file as they finish, so an interrupted run
resumes where it stopped (delete the file to re-measure).

    python benchmarks/validate_cpu.py [--steps 5] [--batch-sizes 2,8,32] [--cache out/validate_cpu.json]

Run it on a quiet machine: other processes on the cores make the measured
steps slower and noisier than the machine is.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from traincast.fit.calibration import Measured, calibrate, mape, measure_steps, plot_validation, predict_measured

CAL = ("resnet18", "vgg11", "mobilenet_v2")
HELD = ("resnet50", "densenet121", "googlenet", "alexnet", "bert-tiny")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch-sizes", default="2,8,32")
    ap.add_argument("--cache", default="out/validate_cpu.json")
    ap.add_argument("--plot", default="out/validate_cpu.png")
    ap.add_argument("--layer-samples", type=int, default=160, help="single-op samples for the per-class fit")
    ap.add_argument("--no-layers", action="store_true", help="fit on whole-model steps only")
    args = ap.parse_args()
    bs = tuple(int(x) for x in args.batch_sizes.split(","))
    cache = Path(args.cache)
    cache.parent.mkdir(parents=True, exist_ok=True)
    done = {(d["model"], d["batch_size"]): Measured(**d) for d in json.loads(cache.read_text())} if cache.exists() else {}

    def get(models):
        out = []
        for m in models:
            for b in bs:
                if (m, b) not in done:
                    done[(m, b)] = measure_steps([m], [b], steps=args.steps)[0]
                    cache.write_text(json.dumps([asdict(v) for v in done.values()], indent=1))
                    r = done[(m, b)]
                    print(f"  measured {m} b{b}: {r.measured_s * 1e3:.1f} ms (IQR {r.iqr_s * 1e3:.1f}, CoV {r.cov:.2f})",
                          flush=True)
                out.append(done[(m, b)])
        return out

    m_cal, m_held = get(CAL), get(HELD)
    from traincast.fit.calibration import run_layer_campaign
    from traincast.store import Store

    layers = [] if args.no_layers else run_layer_campaign(args.layer_samples, store=Store(cache.with_suffix(".db")))
    print(f"layer campaign: {len(layers)} forward single-op samples")
    prof = calibrate(CAL, bs, measured=m_cal, name="validate-cpu", layer_samples=layers)
    print("fitted parameters:", ", ".join(f"{k}={v:.3g}" for k, v in prof.fit["parameters"].items()))
    cal_rows, held_rows = predict_measured(prof, m_cal), predict_measured(prof, m_held)
    for label, rows in (("calibration", cal_rows), ("held-out", held_rows)):
        print(f"{label}:")
        for r in rows:
            print(f"  {r['model']:13s} b{r['batch_size']:<3d} measured {r['measured_s'] * 1e3:9.1f} ms "
                  f"(IQR {r['iqr_s'] * 1e3:7.1f})  predicted {r['predicted_s'] * 1e3:9.1f} ms  {r['error_pct']:+6.1f}%")
        per_model = {}
        for r in rows:
            per_model.setdefault(r["model"], []).append(abs(r["error_pct"]))
        print("  per model MAPE: " + ", ".join(f"{m} {sum(v) / len(v):.1f}%" for m, v in per_model.items()))
    plot_validation(cal_rows, held_rows, args.plot)
    print(f"plot: {args.plot}")
    print(f"MAPE on calibration models: {mape(cal_rows):.1f}%")
    print(f"MAPE on held-out models ({', '.join(HELD)}; batch {args.batch_sizes}): {mape(held_rows):.1f}%")


if __name__ == "__main__":
    main()
