"""Large-GEMM ceilings: the roofline's forecast of one large square matmul against public measurements of it, per
device and dtype; and the rule that sets the matmul efficiency of a GPU generation no kernel data covers.

Data: ``benchmarks/data/public_gemm/torch_mm.csv`` (its README gives the sources): the best ``torch.mm`` rate of
square matrices 1024-10240 that users of one public benchmark script submitted, FP32 (TF32 off, PyTorch's
default), FP16 and BF16, on boards of the catalog; and the BF16 "maximum achievable matmul FLOPS" (the best mean
rate over a search of shapes, mamf-finder) of stas00/ml-engineering's table.

Protocol (written after the table of step 1 was first printed, before any whole-model row was scored with the
rule's values):

1. For each measured (board, dtype): ``r`` = the roofline's forecast rate of an 8192^3 matmul at that dtype (the
   catalog's efficiency, clock cap and lane rules; precision ``fp32``, so no TF32) / the measured rate. ``r`` says
   how far below the measured large-GEMM ceiling the forecast's GEMM efficiency sits; it is below 1 on purpose
   (a model's GEMMs are smaller and thinner than 8192^3).
2. Reference rows, per unit. Tensor (matrix) units: fp16/bf16 on data-center NVIDIA boards of more than 75 W (V100,
   A100, L40S, B200, B300, GB200; H100 and H200 until 2026-11-28, when Hopper's tensor matmul efficiency was set
   from this project's own timings of transformer-layer GEMMs, ``benchmarks/hopper_gemm.py``: its rows are shown,
   not used, and the reference median is 0.759 without them against 0.758 with the old value). CUDA cores (simt): FP32 on such boards of the generations whose kernels
   ../shared/data times and whose efficiencies were set from them (Pascal, Volta, Ampere), without FP32 lanes
   shared with INT32. Boards of 75 W or less (T4, P4: clock cap, throttling) and GeForce/A10G boards (FP16 measured
   at or above their datasheet peak: they clock beyond it) are shown, not used.
3. Rule, for a generation and unit no kernel data set: matmul efficiency = its catalog value x median ``r`` of the
   reference rows of that unit / median ``r`` of its own rows, so its forecast sits as far below its measured
   ceiling as the reference boards' do. Applied where the unit's dtypes were measured: CDNA2 matrix units (FP32,
   FP16, BF16 on the MI210; BF16 on one MI250X GCD, added later that night), Hopper and Blackwell CUDA cores (FP32
   on H100 SXM5, H200, B200). Added the same night with the devices (MI300X, MI325X, MI355X) and a second source
   (mamf-finder's BF16 table): CDNA3 matrix units (BF16 on MI300X and MI325X, FP32 on MI325X; FP16 runs at the BF16 rate by the datasheet), CDNA4 (BF16 on MI355X
   only: its FP32 and FP16 take the same value, a weaker basis). Not CDNA1 (MI100: nothing measured), Ada (the L4
   whole-model rows check its lane and clock rules), nor the tensor units of NVIDIA generations (the reference).
4. Check of the rule: each reference generation left out, the rule from the others' rows gives its catalog value
   within how much (printed).
5. Then, once: ``python benchmarks/accuracy_report.py`` scores the NeuSight AMD rows (MI100 / MI210 / MI250) with
   the rule's values. Nothing is fitted to those rows. No whole-model H100 or B200 FP32 row is in ../shared/data.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/gemm_ceiling.py [--csv PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from traincast.hardware.catalog import get_catalog  # noqa: E402
from traincast.predict.roofline import CompiledOps, RooflineParams, compute_unit  # noqa: E402

CSV = ROOT / "benchmarks" / "data" / "public_gemm" / "torch_mm.csv"
N = 8192
TENSOR_DTYPES = ("fp16", "bf16")
KERNEL_DATA_GENERATIONS = ("pascal", "volta", "turing", "ampere")  # NVIDIA GPUs of ../shared/data's kernels
# generations whose tensor matmul efficiency is set from this project's own timings of model-shaped GEMMs
# (benchmarks/hopper_gemm.py, 2026-11-28): shown, no longer references of the rule (their value does not come from
# the catalog's percent-of-peak defaults the rule carries over to boards nobody timed)
OWN_GEMM_TIMINGS = ("hopper",)
# (generation, unit) -> the dtypes that must all be measured before the rule sets that unit's matmul efficiency
RULED = {("cdna2", "tensor"): ("fp32", "fp16", "bf16"), ("cdna3", "tensor"): ("fp32", "bf16"),
         ("cdna4", "tensor"): ("bf16",), ("hopper", "simt"): ("fp32",), ("blackwell", "simt"): ("fp32",)}


def forecast_tflops(device, dtype: str, n: int = N) -> float:
    """The roofline's rate (TFLOP/s) of one n^3 matmul of ``dtype`` on ``device`` with the catalog's parameters."""
    el = 4 if dtype == "fp32" else 2
    ops = CompiledOps.from_arrays([2.0 * n ** 3], [3.0 * n * n * el], ["matmul"], device, precision="fp32",
                                  dtype=dtype, dmin=[n])
    return 2.0 * n ** 3 / float(ops.times(RooflineParams.for_device(device))[0]) / 1e12


def _nvidia_datacenter(device) -> bool:
    return (device.vendor == "NVIDIA" and (device.tdp_w or 0) > 75
            and not device.name.startswith(("RTX", "Titan")) and device.name not in ("A10", "A10G"))


def is_reference(device, dtype: str, unit: str) -> bool:
    """Tensor rows: fp16/bf16 on data-center NVIDIA boards of more than 75 W. Simt rows: FP32 on such boards of the
    generations whose kernels ../shared/data times, without FP32 lanes shared with INT32."""
    if not _nvidia_datacenter(device):
        return False
    if unit == "tensor":
        return dtype in TENSOR_DTYPES and device.has_tensor_cores and device.generation not in OWN_GEMM_TIMINGS
    return (dtype == "fp32" and device.generation in KERNEL_DATA_GENERATIONS
            and not device.fp32_int32_shared_lanes_per_sm)


def table(csv: Path = CSV) -> pd.DataFrame:
    cat = get_catalog()
    df = pd.read_csv(csv)
    rows = []
    for r in df.itertuples():
        dev = cat.device(r.device)
        peak_name, unit = compute_unit("matmul", r.dtype, dev, "fp32")  # the unit the forecast runs it on
        peak = dev.peak_flops_per_s(peak_name) / 1e12
        f = forecast_tflops(dev, r.dtype)
        rows.append(dict(device=dev.name, generation=dev.generation, dtype=r.dtype, unit=unit, measured=r.tflops,
                         peak=peak, measured_of_peak=r.tflops / peak, forecast=f, r=f / r.tflops,
                         reference=is_reference(dev, r.dtype, unit), source=r.source))
    return pd.DataFrame(rows)


def matmul_efficiency(generation: str, unit: str) -> float:
    """The catalog's matmul efficiency of ``unit`` (``simt`` | ``tensor``) for ``generation``: the parameters the
    roofline gives a device of that generation."""
    dev = next(d for d in get_catalog().devices.values() if d.generation == generation)
    return float(RooflineParams.for_device(dev).compute[unit]["matmul"])


def own_rows(df: pd.DataFrame, generation: str, unit: str) -> pd.DataFrame:
    """``generation``'s rows of ``unit`` that the rule reads: the dtypes :data:`RULED` names (else the reference's)."""
    dtypes = RULED.get((generation, unit), TENSOR_DTYPES if unit == "tensor" else ("fp32",))
    return df[(df.generation == generation) & (df.unit == unit) & df.dtype.isin(dtypes)]


def rule(df: pd.DataFrame, generation: str, unit: str, reference: pd.DataFrame | None = None) -> float:
    """The matmul efficiency of ``unit`` the rule gives ``generation``: its catalog value x the median ``r`` of the
    reference rows of that unit (default: every reference row of ``df``) / the median ``r`` of its own rows."""
    ref = df[df.reference & (df.unit == unit)] if reference is None else reference
    own = own_rows(df, generation, unit)
    if own.empty or ref.empty:
        raise ValueError(f"no {unit} rows for {generation}")
    return matmul_efficiency(generation, unit) * float(ref.r.median()) / float(own.r.median())


def leave_one_generation_out(df: pd.DataFrame, unit: str) -> dict[str, float]:
    """Per reference generation of ``unit``: the rule's value from the other generations' reference rows."""
    ref = df[df.reference & (df.unit == unit)]
    return {g: rule(ref[ref.generation == g], g, unit, reference=ref[ref.generation != g])
            for g in sorted(ref.generation.unique())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=str(CSV))
    args = ap.parse_args(argv)
    df = table(Path(args.csv))
    pd.set_option("display.width", 200)
    print(df.drop(columns=["source"]).to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    for unit in ("tensor", "simt"):
        ref = df[df.reference & (df.unit == unit)]
        print(f"\n{unit}: reference rows n={len(ref)} ({', '.join(sorted(ref.device.unique()))}), median r "
              f"{ref.r.median():.3f} (IQR {ref.r.quantile(0.25):.3f}-{ref.r.quantile(0.75):.3f})")
        print(f"  r by generation (all rows of this unit):")
        u = df[df.unit == unit]
        print("  " + u.groupby("generation").r.agg(["count", "median", "min", "max"]).round(3)
              .to_string().replace("\n", "\n  "))
        print("  leave one reference generation out: the rule from the others vs the catalog's matmul efficiency")
        errs = []
        for g, got in leave_one_generation_out(df, unit).items():
            cat_v = matmul_efficiency(g, unit)
            errs.append(got - cat_v)
            print(f"    {g:10s} rule {got:.3f}  catalog {cat_v:.2f}  difference {got - cat_v:+.3f}")
        print(f"    mean |difference| {np.mean(np.abs(errs)):.3f}, worst {max(errs, key=abs):+.3f}")
    print("\nruled generations:")
    for g, unit in RULED:
        own = own_rows(df, g, unit)
        print(f"  {g:10s} {unit:6s} rows {len(own)} ({', '.join(own.device + ' ' + own.dtype)}), median r "
              f"{own.r.median():.3f}; matmul efficiency in the catalog {matmul_efficiency(g, unit):.2f}, "
              f"rule {rule(df, g, unit):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
