"""Fresh pages on CPUs: how much of a step the operating system spends handing out pages for large tensors, and
how to keep them instead.

glibc's ``malloc`` maps every allocation of 32 MiB or more anew (``mmap``) and unmaps it when freed, and gives the
top of its heap back to the system once more than twice that is free there. A training step allocates its
activations and gradients and frees them again, so each step's large tensors are written to pages the kernel must
fault in and zero first: the roofline charges that as ``fresh_alloc`` (bytes of outputs of at least ``min_bytes``
at ``gb_per_s``, which ``traincast calibrate`` measures). Telling glibc to keep what it has
(``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` set large, which also stops it adjusting them) or
preloading tcmalloc or jemalloc removes that time. On this project's 2-core VM (2026-11-28,
``benchmarks/cpu_fresh_pages.py``, docs/cpu-accuracy.md) that took 10-14% off EfficientNet-B0 steps at batch 8-16,
25% at 32 (4.87 s -> 3.64 s), 27% off ResNet-18 at batch 32 and 49% off MobileNetV2 at 32 (noisy: 3.5-5.8 s with
glibc's defaults, 2.4 s without). The faults counted 1.5-2x the bytes the forecast calls fresh (tensors below
32 MiB fault too when the top of the heap is handed back, which depends on how the heap is laid out), for
EfficientNet-B0 at about the rate calibration measured (0.22-0.28 s per GB saved, 0.27 measured), so the time saved
is at least what this module says.
"""

from __future__ import annotations

from traincast.hardware.records import Device
from traincast.workload.records import Workload

# what the note tells users to set: 16 GiB, far above any tensor of a CPU training step
MALLOC_KEEP = "MALLOC_MMAP_THRESHOLD_=17179869184 MALLOC_TRIM_THRESHOLD_=17179869184"
NOTE_SHARE = 0.10  # say so where fresh pages take at least this share of the step


def fresh_page_seconds(workload: Workload, predictor, device: Device) -> float:
    """Seconds of a step of ``workload`` that the roofline charges for writing outputs to fresh pages with the
    parameters ``predictor`` times ``device`` with (0 where they have no ``fresh_alloc``: GPUs)."""
    from traincast.predict.host import predictor_params
    from traincast.predict.roofline import fresh_bytes

    params = predictor_params(predictor, device)
    if not params.fresh_alloc_gb_per_s:
        return 0.0
    return sum(fresh_bytes(workload.ops, params.fresh_alloc_min_bytes)) / (params.fresh_alloc_gb_per_s * 1e9)


def fresh_pages_note(workload: Workload, predictor, device: Device, iteration_s: float) -> str | None:
    """On a CPU, where fresh pages take ``NOTE_SHARE`` or more of the step: how much, and the step with the pages
    kept."""
    if device.kind != "cpu" or iteration_s <= 0:
        return None
    s = fresh_page_seconds(workload, predictor, device)
    if s < NOTE_SHARE * iteration_s:
        return None
    return (f"large tensors: {1e3 * s:.4g} ms of the step ({100 * s / iteration_s:.0f}%) is the system handing out "
            f"fresh pages for them (glibc frees tensors of 32 MiB or more back to it after every step); with "
            f"`{MALLOC_KEEP}` in the environment (or tcmalloc/jemalloc preloaded) the step takes about "
            f"{1e3 * (iteration_s - s):.4g} ms or less")
