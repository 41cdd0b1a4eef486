"""Detection training speed against Detectron2's published model-zoo times (issue 23's torchvision detection).

Protocol, and what was seen before it was written (said plainly): the four rows of
``data/detection_published/detectron2_model_zoo.csv`` (its README gives the source) were forecast once by hand
while torchvision detection was being built (2026-11-27) and their errors seen; this script was written after.
Nothing in traincast was fitted or changed after that look: the one value of detection's model chosen from
published data, the positive proposals an object (``tvtasks.POSITIVES_PER_OBJECT``), comes from a tensorpack log
on VOC, not from these rows. More rows of this kind would be the honest test.

Each row: ``traincast predict MODEL --gpu GPU --gpus 8 -b 16 --image-size 722`` (the root-mean-square of
Detectron2's multi-scale short sides 640-800; Keypoint R-CNN draws its own 640-800 and gets the same side), FP32,
SGD, the default predictor; the forecast iteration time against the published s/iter.

    python benchmarks/detection_published.py [--json out.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data" / "detection_published" / "detectron2_model_zoo.csv"
RMS_SIDE = round((sum(s * s for s in range(640, 801, 32)) / 6) ** 0.5)  # 722


def _forecast(row: dict) -> float:
    exe = Path(sys.executable).parent / "traincast"
    cmd = [str(exe), "predict", row["model"], "--gpu", row["gpu"], "--gpus", row["gpus"], "-b", row["global_batch"],
           "--optimizer", "sgd", "--json"]
    if not row["model"].startswith("keypointrcnn"):  # its builder trains multi-scale 640-800 already
        cmd += ["--image-size", str(RMS_SIDE)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(json.loads(out)["iteration_s"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None, help="write the rows here")
    args = ap.parse_args()
    rows = list(csv.DictReader(DATA.open()))
    errs = []
    print(f"{'Detectron2 config':48s} {'published':>9s} {'forecast':>9s} {'error':>7s}")
    for r in rows:
        f = _forecast(r)
        e = 100 * (f / float(r["s_per_iter"]) - 1)
        errs.append(e)
        r.update(forecast_s=round(f, 4), error_pct=round(e, 1))
        print(f"{r['config']:48s} {float(r['s_per_iter']):9.3f} {f:9.3f} {e:+6.1f}%")
    absd = [abs(e) for e in errs]
    print(f"MAPE {statistics.mean(absd):.1f}% (min {min(absd):.1f}, max {max(absd):.1f}), "
          f"median signed {statistics.median(errs):+.1f}%, {len(errs)} rows (8x V100, batch 16, FP32)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
