"""Fit the collective model (:mod:`traincast.predict.collectives`) to the shared NCCL measurements and write
``src/traincast/hardware/data/collectives.yaml``; report the fit quality.

Protocol (written before the fit was run, 2026-11-25):

- Data: ``../shared/data/collectives``: vTrain's NCCL all-reduce time vs size (1 MB - 1 GB) on 2-8 A100 and
  2-8 V100 inside one node; Echo's nccl-tests all-reduce on A100-SXM4-40GB, 2/4/8 GPUs in one node and
  16/32/64/128 GPUs on 2-16 nodes with 8 x 200 Gb/s InfiniBand per node. The out-of-place time is used.
- Range: messages of at least 1 MiB (what gradient buckets, tensor-parallel activations and pipeline messages
  are); smaller messages are reported separately, not fitted.
- Topology: A100 (vTrain and Echo) on NVSwitch (``nvswitch``), V100 on the DGX-1 hybrid cube-mesh
  (``nvlink-mesh``, an efficiency per GPU count, since NCCL's rings depend on which GPUs take part), the
  multi-node runs on the network level with the NVSwitch parameters held at their fit.
- Loss: squared log ratio (relative error), each measurement file weighted equally.
- Quality: MAPE per file and overall on the fitted range; **leave-one-GPU-count-out**: every GPU count of each
  fabric is refitted without it and predicted (for the mesh, its efficiency is interpolated between the
  neighbouring counts, as the model does for a count it has no entry for).

    python benchmarks/fit_collectives.py [--no-write]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import re
import statistics
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares

from traincast.predict.collectives import CollectiveParams, FabricParams, Group, collective_s

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "collectives"
OUT = Path(__file__).resolve().parents[1] / "src" / "traincast" / "hardware" / "data" / "collectives.yaml"
MIN_BYTES = 1 << 20
A100_LINK = 300e9  # per direction, catalog gpus.yaml (NVLink 3: 600 GB/s bidirectional)
V100_LINK = 150e9  # NVLink 2: 300 GB/s bidirectional
ECHO_NODE_NET = 8 * 200e9 / 8  # 8 x 200 Gb/s InfiniBand per node (data README), bytes/s


def load() -> list[dict]:
    rows = []
    for f in sorted(DATA.glob("vtrain_*_allreduce_*gpu.txt")):
        kept = set()
        m = re.match(r"vtrain_(a100|v100)_allreduce_(\d+)gpu", f.stem)
        gpu, n = m.group(1), int(m.group(2))
        for line in f.read_text().splitlines()[1:]:
            parts = line.split(",")
            if len(parts) >= 4 and parts[0].strip().isdigit():
                # vTrain steps 1 MB linearly to 1 GB: keep ~12 sizes per doubling, as nccl-tests' log spacing
                slot = round(12 * np.log2(int(parts[0])))
                if slot in kept:
                    continue
                kept.add(slot)
                rows.append(dict(file=f.name, source="vtrain", gpu=gpu, ranks=n, nodes=1,
                                 size=int(parts[0]), t=float(parts[3]) * 1e-9))
    for f in sorted(DATA.glob("echo_a100_ib_allreduce_*gpu.log")):
        n = int(re.search(r"_(\d+)gpu", f.stem).group(1))
        if n < 2:
            continue
        for line in f.read_text().splitlines():
            line = re.sub(r"^\[\d+,\d+\]<stdout>:", "", line).strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) >= 6 and parts[0].isdigit():
                rows.append(dict(file=f.name, source="echo", gpu="a100", ranks=n, nodes=max(1, n // 8),
                                 size=int(parts[0]), t=float(parts[4]) * 1e-6))
    return rows


def group_of(r: dict) -> Group:
    link = A100_LINK if r["gpu"] == "a100" else V100_LINK
    ltype = "nvlink3" if r["gpu"] == "a100" else "nvlink2"
    rpn = r["ranks"] if r["nodes"] == 1 else 8
    return Group(ranks=r["ranks"], ranks_per_node=rpn, nodes=r["nodes"], gpus_per_node=8, link_bytes_per_s=link,
                 link_type=ltype, node_network_bytes_per_s=ECHO_NODE_NET)


SOURCE = ("fitted by benchmarks/fit_collectives.py to ../shared/data/collectives (vTrain NCCL all-reduce on 2-8 "
          "A100/V100 in a node, VIA-Research/vTrain; Echo nccl-tests all-reduce on 2-128 A100-SXM4-40GB with "
          "8x200 Gb/s InfiniBand per node, NetX-lab/Echo), messages >= 1 MiB")


def _fabric(name, x, ranks_table=None) -> FabricParams:
    eff, lat, step, half, shape = x[:5]
    return FabricParams(name=name, bus_efficiency=float(eff), latency_us=float(lat), step_latency_us=float(step),
                        half_bytes=float(half), shape=float(shape),
                        efficiency_by_ranks=ranks_table or {}, source=SOURCE)


def _params(intra: dict, network: FabricParams) -> CollectiveParams:
    return CollectiveParams(intra=intra, network=network, source=SOURCE, date=str(_dt.date.today()))


PLACEHOLDER_NET = FabricParams("network", 0.6, 20.0, 10.0, 0.0, 0.5)


def _weights(rows):
    counts = {}
    for r in rows:
        counts[r["file"]] = counts.get(r["file"], 0) + 1
    return np.array([1.0 / np.sqrt(counts[r["file"]]) for r in rows])


def fit_nvswitch(rows) -> FabricParams:
    w = _weights(rows)
    y = np.log([r["t"] for r in rows])

    def res(x):
        fab = _fabric("nvswitch", x)
        p = _params({"nvswitch": fab}, PLACEHOLDER_NET)
        return w * (np.log([collective_s("all-reduce", r["size"], group_of(r), p) for r in rows]) - y)

    x0 = [0.7, 30.0, 5.0, 1e6, 0.5]
    sol = least_squares(res, x0, bounds=([0.05, 0, 0, 0, 0.2], [1.0, 500, 100, 2.56e8, 1.5]))
    return _fabric("nvswitch", sol.x)


def fit_mesh(rows, counts) -> FabricParams:
    w = _weights(rows)
    y = np.log([r["t"] for r in rows])
    counts = sorted(counts)

    def unpack(x):
        table = {c: float(v) for c, v in zip(counts, x[5:])}
        return _fabric("nvlink-mesh", x, table)

    def res(x):
        p = _params({"nvlink-mesh": unpack(x), "nvswitch": unpack(x)}, PLACEHOLDER_NET)
        return w * (np.log([collective_s("all-reduce", r["size"], group_of(r), p) for r in rows]) - y)

    x0 = [0.7, 30.0, 5.0, 1e6, 0.5] + [0.5] * len(counts)
    lo = [0.05, 0, 0, 0, 0.2] + [0.01] * len(counts)
    hi = [1.0, 500, 100, 2.56e8, 1.5] + [1.5] * len(counts)
    sol = least_squares(res, x0, bounds=(lo, hi))
    f = unpack(sol.x)
    return FabricParams(f.name, float(np.median(list(f.efficiency_by_ranks.values()))), f.latency_us,
                        f.step_latency_us, f.half_bytes, f.shape, f.efficiency_by_ranks, True, SOURCE)


def fit_network(rows, nvswitch: FabricParams) -> FabricParams:
    w = _weights(rows)
    y = np.log([r["t"] for r in rows])

    def res(x):
        p = _params({"nvswitch": nvswitch}, _fabric("network", x))
        return w * (np.log([collective_s("all-reduce", r["size"], group_of(r), p) for r in rows]) - y)

    x0 = [0.6, 20.0, 10.0, 1e6, 0.5]
    sol = least_squares(res, x0, bounds=([0.05, 0, 0, 0, 0.2], [1.0, 2000, 500, 2.56e8, 1.5]))
    return _fabric("network", sol.x)


def errors(rows, params) -> list[float]:
    return [100 * (collective_s("all-reduce", r["size"], group_of(r), params) / r["t"] - 1) for r in rows]


def mape(e) -> float:
    return float(np.mean(np.abs(e))) if len(e) else float("nan")


def _rounded(x):
    """Four significant digits (the fit is not better than that)."""
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, float):
        return float(f"{x:.4g}")
    return x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-write", action="store_true", help="report only; leave collectives.yaml as it is")
    args = ap.parse_args()
    rows = load()
    fitrows = [r for r in rows if r["size"] >= MIN_BYTES]
    small = [r for r in rows if 64 * 1024 <= r["size"] < MIN_BYTES]
    a100 = [r for r in fitrows if r["gpu"] == "a100" and r["nodes"] == 1]
    v100 = [r for r in fitrows if r["gpu"] == "v100"]
    net = [r for r in fitrows if r["nodes"] > 1]
    nvs = fit_nvswitch(a100)
    mesh = fit_mesh(v100, {r["ranks"] for r in v100})
    netp = fit_network(net, nvs)
    params = _params({"nvswitch": nvs, "nvlink-mesh": mesh}, netp)

    print(f"fitted on {len(fitrows)} measurements >= 1 MiB from {len({r['file'] for r in fitrows})} files")
    for f in (nvs, mesh, netp):
        extra = f" by GPUs {dict((k, round(v, 3)) for k, v in f.efficiency_by_ranks.items())}" if f.efficiency_by_ranks else ""
        print(f"  {f.name:12s} efficiency {f.bus_efficiency:.3f}{extra}; latency {f.latency_us:.1f} us + "
              f"{f.step_latency_us:.2f} us/step; half {f.half_bytes / 1e6:.2f} MB, shape {f.shape:.2f}")
    print("\nper file (in-sample), MAPE and median signed error, messages >= 1 MiB:")
    byfile = {}
    for r, e in zip(fitrows, errors(fitrows, params)):
        byfile.setdefault(r["file"], []).append(e)
    for fname, es in byfile.items():
        print(f"  {fname:36s} MAPE {mape(es):5.1f}%  median {statistics.median(es):+5.1f}%  n={len(es)}")
    groups = {"A100 NVSwitch": a100, "V100 DGX-1 mesh": v100, "A100 InfiniBand 2-16 nodes": net}
    print("\nsummary (in-sample):")
    for k, rs in groups.items():
        print(f"  {k:28s} MAPE {mape(errors(rs, params)):5.1f}%")
    print(f"  {'all':28s} MAPE {mape(errors(fitrows, params)):5.1f}%  (file-averaged "
          f"{statistics.mean(mape(v) for v in byfile.values()):.1f}%)")
    print(f"  messages 64 KiB - 1 MiB (not fitted): MAPE {mape(errors(small, params)):.1f}%")

    # leave one GPU count out, per fabric
    print("\nleave-one-GPU-count-out (refit without the count, predict it):")
    logo = {}
    for label, rs in groups.items():
        res_all = []
        for n in sorted({r["ranks"] for r in rs}):
            train = [r for r in rs if r["ranks"] != n]
            test = [r for r in rs if r["ranks"] == n]
            if label.startswith("A100 NVS"):
                p = _params({"nvswitch": fit_nvswitch(train), "nvlink-mesh": mesh}, netp)
            elif label.startswith("V100"):
                m = fit_mesh(train, {r["ranks"] for r in train})
                p = _params({"nvswitch": nvs, "nvlink-mesh": m}, netp)
            else:
                p = _params({"nvswitch": nvs, "nvlink-mesh": mesh}, fit_network(train, nvs))
            e = errors(test, p)
            res_all.extend(e)
            print(f"  {label:28s} {n:4d} GPUs: MAPE {mape(e):5.1f}%  median {statistics.median(e):+5.1f}%")
        logo[label] = mape(res_all)
        print(f"  {label:28s} all counts: MAPE {logo[label]:5.1f}%")

    if not args.no_write:
        table = params.to_table()
        table["fit"] = {"range": "messages >= 1 MiB", "in_sample_mape_percent": round(mape(errors(fitrows, params)), 2),
                        "leave_one_gpu_count_out_mape_percent": {k: round(v, 2) for k, v in logo.items()},
                        "command": "python benchmarks/fit_collectives.py"}
        header = ("# Collective communication model parameters (traincast.predict.collectives), one entry per fabric.\n"
                  "# bus_efficiency: fraction of the datasheet link (intra-node) or node network (network) bandwidth\n"
                  "# that NCCL's bus bandwidth reaches on large messages; latency_us + step_latency_us x (GPUs-1)\n"
                  "# inside a node, + latency_us + step_latency_us x log2(nodes) across nodes; small messages: time x\n"
                  "# (1 + (half_bytes / bus_bytes) ** shape). Written by benchmarks/fit_collectives.py; do not edit.\n")
        OUT.write_text(header + yaml.safe_dump(_rounded(table), sort_keys=False))
        print(f"\nwrote {OUT}")


if __name__ == "__main__":
    main()
