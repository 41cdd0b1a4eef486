"""This machine as a device: its CPU (nominal peak from clock, cores and vector width; bandwidth measured
where given) or its CUDA GPU (the catalog's row for the name CUDA reports)."""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

from traincast.errors import ConfigError
from traincast.hardware.records import GIB, Device, Link


def _cpu_info() -> tuple[str, float, set[str]]:
    name, mhz, flags = "cpu", 0.0, set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            k, _, v = line.partition(":")
            k, v = k.strip(), v.strip()
            if k == "model name" and name == "cpu":
                name = v
            elif k == "cpu MHz" and not mhz:
                mhz = float(v)
            elif k == "flags" and not flags:
                flags = set(v.split())
    except OSError:
        pass
    return name, mhz or 2500.0, flags


def local_device(device: str = "cpu", threads: int | None = None, bandwidth_gb_per_s: float | None = None) -> Device:
    """A Device record for this machine's CPU (nominal peak; the memory bandwidth
    measured where given, else a nominal 20 GB/s) or its CUDA GPU (from the catalog)."""
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError("--device cuda was asked for but no CUDA GPU is present here; use --device cpu")
        from traincast.hardware.catalog import get_catalog

        return get_catalog().device(torch.cuda.get_device_name(0))
    name, mhz, flags = _cpu_info()
    cores = threads or torch.get_num_threads()
    per_cycle = 64 if "avx512f" in flags else 32 if ("avx2" in flags and "fma" in flags) else 16
    return Device(
        name=f"local-cpu ({name}, {cores} threads)", kind="cpu", vendor="", generation="cpu",
        fp32_tflops=cores * mhz * 1e6 * per_cycle / 1e12, tf32_tflops=None, fp16_tflops=None, bf16_tflops=None,
        memory_bytes=int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) if hasattr(os, "sysconf") else 8 * GIB,
        memory_bandwidth_gb_per_s=round(bandwidth_gb_per_s, 2) if bandwidth_gb_per_s else 20.0, sm_count=cores, boost_clock_mhz=mhz, link=Link("none", 0.0),
        source=f"this machine: {cores} threads x {mhz:.0f} MHz x {per_cycle} FLOP/cycle (nominal); bandwidth "
               + ("measured (STREAM add)" if bandwidth_gb_per_s else "nominal"),
        date=_dt.date.today().isoformat(),
    )


def last_level_cache_bytes() -> int:
    """The largest CPU cache of cpu0 (sysfs), 0 when unknown: working sets above it stream from DRAM."""
    best = 0
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            txt = (d / "size").read_text().strip().upper()
            mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(txt[-1:], 1)
            best = max(best, int(txt.rstrip("KMG")) * mult)
        except (OSError, ValueError):
            continue
    return best


