"""Memory bandwidth of the local device, measured (a STREAM-like add) rather than assumed.

``stream_bandwidth``: ``c = a + b`` on tensors far larger than the caches,
written into a tensor that already exists: three tensors' bytes per call.

``fresh_write_bandwidth``: filling a newly allocated tensor of ``size_mb``.
On CPUs, allocations above glibc's mmap threshold (32 MiB at most) are mapped
anew on every allocation, so each first write faults a page in and the rate is
a fraction of the warm one; ``page_in_gb_per_s`` is the rate of that extra
cost beyond an ordinary write. The analytical predictor charges output tensors
that large at this rate (``fresh_alloc`` in its efficiency table). On CUDA the
caching allocator reuses memory and the two rates agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from traincast.measure.timing import TimingPolicy, check_device, pinned_threads, time_fn

_POLICY = TimingPolicy(warmup=1, min_repeats=5, max_repeats=15, target_cov=0.03, budget_s=2.0)


@dataclass(frozen=True)
class Bandwidth:
    stream_gb_per_s: float  # warm read + write
    fresh_gb_per_s: float  # writing freshly allocated memory
    fill_gb_per_s: float  # writing memory that is already mapped
    size_mb: int
    cov: float

    @property
    def page_in_gb_per_s(self) -> float:
        """The rate of the extra cost of fresh memory beyond an ordinary write
        (1 / (1/fresh - 1/fill)); inf where there is none."""
        extra = 1.0 / self.fresh_gb_per_s - 1.0 / self.fill_gb_per_s
        return 1.0 / extra if extra > 1e-12 else float("inf")


def measure_bandwidth(device: str = "cpu", *, threads: int | None = None, size_mb: int = 128) -> Bandwidth:
    """Warm STREAM-add and fresh-allocation write rates of ``device`` (GB/s, 1e9 bytes)."""
    import torch

    dev = check_device(device)
    n = size_mb * 2**20 // 4
    with pinned_threads(threads):
        a = torch.rand(n, device=dev)
        b = torch.rand(n, device=dev)
        c = torch.empty(n, device=dev)
        warm = time_fn(lambda: torch.add(a, b, out=c), device=dev, policy=_POLICY)
        fill = time_fn(lambda: c.fill_(1.0), device=dev, policy=_POLICY)
        # the fastest of three rounds: on a VM, pages its host has not backed yet (the first use of
        # guest memory) fault far slower for a while, which a long training run does not see
        fresh = min((time_fn(lambda: torch.empty(n, device=dev).fill_(1.0), device=dev, policy=_POLICY)
                     for _ in range(3)), key=lambda t: t.median_ms)
        del a, b, c
    nbytes = n * 4
    return Bandwidth(stream_gb_per_s=3 * nbytes / (warm.median_ms * 1e-3) / 1e9,
                     fresh_gb_per_s=nbytes / (fresh.median_ms * 1e-3) / 1e9,
                     fill_gb_per_s=nbytes / (fill.median_ms * 1e-3) / 1e9, size_mb=size_mb, cov=warm.cov)
