"""Pool the rows of several ``converge_validation.py --save`` files, as the method-change protocols' rules do.

    PYTHONPATH=src .venv/bin/python benchmarks/converge_pool.py ROWS.json [ROWS.json ...]

For each origin (10%, 25%, 50% of the run): over all the files' cases of method ``traincast``, the number of cases,
the median |error| of the step, the 80%-band coverage, how many forecasts were early and late, and the share within
12%; then the same per file. The protocols' rules (docstring of converge_validation.py) compare the pooled median from
25% over the public development sets, and the cpu set's medians, between candidates.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np


def summary(rows: list[dict], origin: float) -> dict | None:
    sel = [r for r in rows if abs(r["origin"] - origin) < 1e-9]
    if not sel:
        return None
    err = np.array([r["err"] for r in sel], dtype=float)
    return dict(n=len(sel), median=float(np.median(err)), band=float(np.mean([r["covered"] for r in sel])),
                early=sum(r["pred"] < r["true"] for r in sel), late=sum(r["pred"] > r["true"] for r in sel),
                within12=float(np.mean(err <= 0.12)))


def _line(label: str, rows: list[dict]) -> str:
    parts = []
    for o in (0.1, 0.25, 0.5):
        s = summary(rows, o)
        if s is None:
            continue
        med = "inf" if not math.isfinite(s["median"]) else f"{100 * s['median']:.1f}%"
        parts.append(f"{int(100 * o)}%: {med} band {100 * s['band']:.0f}% n={s['n']} early/late {s['early']}/{s['late']} "
                     f"within 12% {100 * s['within12']:.0f}%")
    return f"{label:28} " + " | ".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="+", help="JSON files written by converge_validation.py --save")
    args = ap.parse_args(argv)
    per = {}
    for f in args.rows:
        try:
            data = json.loads(Path(f).read_text())
        except (OSError, ValueError) as exc:
            ap.error(f"{f}: not a rows file of converge_validation.py --save ({exc})")
        per[f] = [r for r in data if r.get("method") == "traincast" and not r.get("skipped")]
    print(_line("pooled", [r for rows in per.values() for r in rows]))
    for f, rows in per.items():
        print(_line(Path(f).stem, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
