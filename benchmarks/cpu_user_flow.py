"""The CPU forecast as a user gets it: `traincast calibrate --budget 5m`, then `traincast predict --profile`.

`validate_cpu.py` scores a calibration fitted on the whole pool (every model at every batch, measured without a
time limit). A user runs the documented command with a budget instead, and forecasts models nobody here named.
This script does exactly that and nothing else.

PROTOCOL (written 2026-11-28 before the first run; nothing is fitted or chosen on these rows):
- calibrate with the user's command, `traincast calibrate --device cpu --budget 5m --out PROFILE` (the CLI, in a
  subprocess; its defaults otherwise);
- held-out models: torchvision classification models in none of this project's CPU calibration pool, CPU
  validation lists or CPU tests before this run (some were timed on GPUs), chosen for the op kinds users' CPU
  models contain: depthwise
  (mobilenet_v3_large, mnasnet1_0, efficientnet_b1, shufflenet_v2_x2_0), grouped (regnet_y_400mf,
  regnet_x_800mf), dense (resnet34, squeezenet1_0, densenet169), at batch 1, 8 and 32;
- each (model, batch) timed as `validate_cpu.py` times it (a fresh process, 5 steps after 2 warm-up, the
  median; a disturbed measurement re-taken), one round;
- each forecast with `traincast predict MODEL -b B --profile PROFILE --json` (the CLI, in a subprocess);
- reported: every row, MAPE, median signed error (+ = forecast slower), by op kind (depthwise / grouped /
  dense) and by batch; the goal is issue 18's (10% MAPE, bias within +-5%).
Measurements and forecasts are cached in ``--out`` as they finish: an interrupted run resumes where it stopped.

    python benchmarks/cpu_user_flow.py [--out out/cpu_user_flow] [--budget 5m] [--models M1,M2] [--batch-sizes 1,8,32]

Run it on a quiet machine (see validate_cpu.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = {
    "depthwise": ("mobilenet_v3_large", "mnasnet1_0", "efficientnet_b1", "shufflenet_v2_x2_0"),
    "grouped": ("regnet_y_400mf", "regnet_x_800mf"),
    "dense": ("resnet34", "squeezenet1_0", "densenet169"),
}
KIND_OF = {m: k for k, ms in KINDS.items() for m in ms}


def traincast(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("traincast")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "traincast"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/cpu_user_flow")
    ap.add_argument("--budget", default="5m")
    ap.add_argument("--models", default=",".join(KIND_OF))
    ap.add_argument("--batch-sizes", default="1,8,32")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    models = [m for m in args.models.split(",") if m]
    try:
        batches = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        ap.error(f"--batch-sizes {args.batch_sizes!r}: give whole numbers separated by commas")
    if args.steps < 1 or not models or min(batches) < 1:
        ap.error("--steps, --models and --batch-sizes need at least one step, one model and positive batches")
    t0 = time.time()

    profile = out / "profile.yaml"
    if not profile.exists():
        print(f"calibrating: traincast calibrate --device cpu --budget {args.budget} --out {profile}", flush=True)
        r = traincast("calibrate", "--device", "cpu", "--budget", args.budget, "--out", str(profile))
        (out / "calibrate.log").write_text(r.stdout + r.stderr)
        if r.returncode != 0:
            sys.exit(f"calibrate failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-500:]}")
        print(f"  done in {time.time() - t0:.0f} s", flush=True)

    from traincast.fit.calibration import Measured, measure_steps

    mfile = out / "measured.json"
    measured = {(d["model"], d["batch_size"]): Measured(**d) for d in json.loads(mfile.read_text())} \
        if mfile.exists() else {}
    skipped: dict = {}
    for b in batches:  # every model at one batch before the next, so that a stop leaves every model covered
        for m in models:
            if (m, b) in measured:
                continue
            try:
                measured[(m, b)] = measure_steps([m], [b], steps=args.steps)[0]
            except Exception as e:  # a model that cannot train at this batch: reported, not scored
                skipped[(m, b)] = f"{type(e).__name__}: {e}"
                print(f"  {m} b{b} cannot be trained: {skipped[(m, b)]}", flush=True)
                continue
            mfile.write_text(json.dumps([asdict(v) for v in measured.values()], indent=1))
            print(f"  measured {m} b{b}: {measured[(m, b)].measured_s * 1e3:.1f} ms", flush=True)

    ffile = out / "forecast.json"
    forecast = json.loads(ffile.read_text()) if ffile.exists() else {}
    rows = []
    for m in models:
        for b in batches:
            if (m, b) not in measured:
                continue
            key = f"{m}|{b}"
            if key not in forecast:
                r = traincast("predict", m, "-b", str(b), "--profile", str(profile), "--json")
                if r.returncode != 0:
                    sys.exit(f"predict {m} -b {b} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-300:]}")
                forecast[key] = json.loads(r.stdout)["iteration_s"]
                ffile.write_text(json.dumps(forecast, indent=1))
            meas = measured[(m, b)].measured_s
            rows.append((m, b, meas, forecast[key], (forecast[key] - meas) / meas * 100))

    print(f"# python benchmarks/cpu_user_flow.py --out {args.out} (profile: traincast calibrate --device cpu "
          f"--budget {args.budget})")
    for m, b, meas, pred, err in rows:
        print(f"{m:20s} {KIND_OF.get(m, '?'):9s} b{b:<3d} measured {meas * 1e3:9.1f} ms  forecast "
              f"{pred * 1e3:9.1f} ms  {err:+6.1f}%")
    for (m, b), why in skipped.items():
        print(f"not scored: {m} b{b} ({why})")

    def summary(label, errs):
        if errs:
            print(f"{label:24s} n={len(errs):3d}  MAPE {statistics.fmean(abs(e) for e in errs):5.1f}%  median signed "
                  f"{statistics.median(errs):+6.1f}%  within 10%: {sum(abs(e) <= 10 for e in errs)}")

    for kind in KINDS:
        summary(kind, [r[4] for r in rows if KIND_OF.get(r[0]) == kind])
    for b in batches:
        summary(f"batch {b}", [r[4] for r in rows if r[1] == b])
    summary("all", [r[4] for r in rows])
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
