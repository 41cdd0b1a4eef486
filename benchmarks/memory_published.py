"""Memory per GPU against torchtitan's published peaks (issue 17: memory under every strategy, the OOM flag).

Protocol (written 2026-11-27 before any of these rows was forecast for memory; nothing is fitted to them. Four
of the 8B rows are also rows of ``fp8_cp_validation.py``, whose throughput, and whose OOM flags, had been seen):

- rows: ``benchmarks/data/memory_published/torchtitan.yaml`` (Tables 1-4 of torchtitan's Llama 3.1 H100
  benchmark; the file says what each field is and what is left out; three B200 rows of torchtitan's MXFP8 page
  added with the same protocol on 2026-11-27, before they were forecast for memory);
- each row forecast as ``fp8_cp_validation.forecast_row`` forecasts its rows (``forecast_from_options``, what
  ``traincast predict`` calls; the torchtitan H100 catalog row; 8 GPUs and 3,200 Gb/s a node), with
  ``--kernels compiled`` where the row ran torch.compile (or the mode a row names: ``compiled-blocks`` where
  only the blocks were compiled, the loss eager), eager kernels otherwise; on the H100 row of that
  file's catalog, or the catalog's device where a row names one (``gpu``);
- compared: the forecast peak bytes per GPU (``Forecast.peak_memory_bytes``, the fullest stage) against the
  published GiB; reported per row with the forecast's parts, MAPE and median signed error, and how many rows the
  forecast flags out of memory (each of them ran).

    python benchmarks/memory_published.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data" / "memory_published" / "torchtitan.yaml"
GPU = "H100-SXM5-96GB-HBM2e-500W"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the per-row results here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import fp8_cp_validation as fp8cp

    from traincast.hardware import get_catalog

    devices = yaml.safe_load(fp8cp.DATA.read_text()).get("devices", [])
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump({"devices": devices}, fh)
        catalog = get_catalog([fh.name])
    rows = yaml.safe_load(DATA.read_text())["rows"]
    families: dict = {}
    out, errs, oom = [], [], 0
    print(f"{'row':22s} {'layout':42s} {'published':>9s} {'forecast':>9s} {'error':>7s}  parts (GiB): states / "
          "activations / transient / other")
    for r in rows:
        row = dict(r, gpu=r.get("gpu", GPU), gpus_per_node=8, network_gbit_per_node=3200, pp=1)
        f = fp8cp.forecast_row(row, catalog, families, r.get("kernels", "compiled") if r.get("compiled") else "eager")
        gib = f.peak_memory_bytes / 2**30
        err = gib / r["memory_gib"] - 1
        errs.append(err)
        oom += not f.fits_in_memory
        m = {k: v / 2**30 for k, v in f.memory.items() if isinstance(v, (int, float))}
        states = m.get("parameters", 0) + m.get("gradients", 0) + m.get("optimizer", 0)
        other = m.get("weight_copies", 0) + m.get("buffers", 0)
        label = (f.strategy or {}).get("label", "data parallel")
        print(f"{r['id']:22s} {label[:42]:42s} {r['memory_gib']:9.1f} {gib:9.1f} {100 * err:+6.1f}%  "
              f"{states:.1f} / {m.get('activations', 0):.1f} / {m.get('transient', 0):.1f} / {other:.1f}"
              + ("" if f.fits_in_memory else "  (flagged OOM)"), flush=True)
        out.append(dict(r, forecast_gib=round(gib, 2), error=round(err, 4), fits=f.fits_in_memory, parts=m))
    absd = [abs(e) for e in errs]
    print(f"memory MAPE {100 * statistics.mean(absd):.1f}% over {len(errs)} rows (min {100 * min(absd):.1f}%, max "
          f"{100 * max(absd):.1f}%), median signed {100 * statistics.median(errs):+.1f}%; flagged OOM: {oom} of "
          f"{len(errs)} (all ran)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
