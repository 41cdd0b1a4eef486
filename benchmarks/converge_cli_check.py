"""Does `traincast converge` on a trainer_state.json give what converge_validation.py scores for set f?

The harness hands the method the whole run's logged learning rate and the steps per epoch from the extract; a
user's `traincast converge trainer_state.json --target-loss L` has only the log so far: the parser reads the
learning rate logged up to now (its future from the family it matches), `max_steps` and the epoch shares. For
every run of set f (``--part dev|test|all``) and origin, the extract is cut at the origin, written back as a
trainer_state.json, read by the CLI's parser and forecast by the CLI's library path (``converge``), and set
beside the harness's forecast of the same case (same targets, draws and seed). Prints each case and the median
and largest relative difference.

    PYTHONPATH=src .venv/bin/python benchmarks/converge_cli_check.py [--part dev] [--origins 0.25,0.5] [--draws 80]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

import converge_validation as cv  # noqa: E402
from traincast.online.converge import converge  # noqa: E402
from traincast.online.curves import forecast_many  # noqa: E402
from traincast.online.parsers import parse_log  # noqa: E402
from traincast.online.records import JobSeries  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=("dev", "test", "all"), default="dev")
    ap.add_argument("--origins", default="0.25,0.5")
    ap.add_argument("--draws", type=int, default=80)
    args = ap.parse_args()
    diffs = []
    for run in cv.hf_runs(args.part):
        meta = json.loads((cv.PUBLIC_F / "raw" / f"{run['name']}.json").read_text())
        with open(cv.PUBLIC_F / "raw" / f"{run['name']}.csv") as f:
            data = list(csv.DictReader(f))
        k, y = run["steps"], run["loss"]
        sm = cv.smoothed(y, max(len(k) // 20, 5))
        for o in (float(x) for x in args.origins.split(",")):
            cut = cv._cut(k, len(k), o, run["total"], "steps")
            if cut is None:
                continue
            hist = [{"epoch": float(d["epoch"]) if d["epoch"] else None, "learning_rate": float(d["learning_rate"]),
                     "loss": float(d["loss"]), "step": int(float(d["step"]))}
                    for d in data if float(d["step"]) <= k[cut - 1]]
            state = {"global_step": hist[-1]["step"], "log_history": hist, "max_steps": meta["max_steps"],
                     "num_train_epochs": meta["num_train_epochs"]}
            with tempfile.TemporaryDirectory() as td:
                p = Path(td) / "trainer_state.json"
                p.write_text(json.dumps(state))
                parsed = parse_log(p)
            series = JobSeries.from_records(parsed.records, parsed.events, parsed.total_steps, parsed.steps_per_epoch,
                                            name=run["name"])
            for t in cv.TARGETS:
                it = cv._cut(k, len(k), t, run["total"], "steps")
                if t <= o or it is None or float(k[int(np.argmax(sm <= sm[it - 1]))]) <= k[cut - 1]:
                    continue
                target = float(sm[it - 1])
                cli = converge(series, target, n_draws=args.draws).forecast
                (ref,) = forecast_many(k[:cut], y[:cut], [target], run["schedule"], run["total"], n_draws=args.draws,
                                       seed=0, steps_per_epoch=cv._steps_per_epoch(run, k[cut - 1]))
                both = math.isfinite(cli.steps) and math.isfinite(ref.steps)
                d = abs(cli.steps - ref.steps) / ref.steps if both else (0.0 if cli.steps == ref.steps else math.inf)
                diffs.append(d)
                print(f"{run['name'][:34]:34} from {o:.0%} target at {t:.0%}: harness {ref.steps:10.0f}  cli "
                      f"{cli.steps:10.0f}  ({'same' if d == 0 else f'{d:.1%}'})")
    e = np.array(diffs)
    print(f"\n{len(e)} cases: CLI vs harness median difference {np.median(e):.1%}, largest {np.max(e):.1%}, "
          f"identical {np.mean(e == 0):.0%}")


if __name__ == "__main__":
    main()
