"""The timing core used by every measurement in traincast.

``time_fn(fn)`` runs ``fn`` after a warm-up, repeats it until the spread is
small (or a repeat or time budget is hit) and returns a frozen ``Timing`` with
the median, inter-quartile range and coefficient of variation in milliseconds.

Clocks
  * CPU: ``time.perf_counter_ns`` around each repeat.
  * CUDA: a pair of CUDA events per repeat, recorded on the current stream;
    one ``torch.cuda.synchronize()`` after the batch of repeats, then
    ``start.elapsed_time(end)``. ``cudnn.benchmark`` is switched on while
    timing so cuDNN picks its algorithms during the warm-up, not the repeats.
  The CUDA clock takes an injectable ``event_factory`` and ``synchronize`` so the
  logic is unit-tested without a GPU.

Very short functions (below ``min_sample_ms``) are run several times per
repeat ("inner loops") and divided, so the clock's own cost does not dominate.
Outliers (outside Tukey's 1.5 IQR fences) are kept in ``samples_ms`` but left
out of ``cov`` and ``mean_ms``; the median and IQR are robust by themselves.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from traincast.errors import ConfigError


@dataclass(frozen=True)
class Timing:
    """Statistics of repeated runs of one function, all times in milliseconds."""

    median_ms: float
    iqr_ms: float  # q75 - q25
    cov: float  # std / mean of the non-outlier samples (unitless)
    mean_ms: float  # mean of the non-outlier samples
    min_ms: float
    max_ms: float
    n_repeats: int  # timed repeats (each the mean of `inner` calls)
    inner: int = 1  # calls per repeat
    n_outliers: int = 0
    warmup: int = 0
    total_s: float = 0.0  # wall time spent, warm-up included
    samples_ms: tuple[float, ...] = field(default=(), repr=False)

    @property
    def q25_ms(self) -> float:
        return _quantile(sorted(self.samples_ms), 0.25) if self.samples_ms else self.median_ms

    @property
    def q75_ms(self) -> float:
        return _quantile(sorted(self.samples_ms), 0.75) if self.samples_ms else self.median_ms

    def as_dict(self, with_samples: bool = False) -> dict:
        d = {
            "median_ms": self.median_ms,
            "iqr_ms": self.iqr_ms,
            "cov": self.cov,
            "mean_ms": self.mean_ms,
            "min_ms": self.min_ms,
            "max_ms": self.max_ms,
            "n_repeats": self.n_repeats,
            "inner": self.inner,
            "n_outliers": self.n_outliers,
            "warmup": self.warmup,
            "total_s": self.total_s,
        }
        if with_samples:
            d["samples_ms"] = list(self.samples_ms)
        return d


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values (numpy's default)."""
    n = len(sorted_xs)
    if n == 0:
        raise ValueError("no samples")
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def summarize(samples_ms: Sequence[float], *, inner: int = 1, warmup: int = 0, total_s: float = 0.0) -> Timing:
    """Robust statistics of per-repeat times (ms)."""
    xs = sorted(float(x) for x in samples_ms)
    if not xs:
        raise ValueError("summarize needs at least one sample")
    q25, med, q75 = _quantile(xs, 0.25), _quantile(xs, 0.5), _quantile(xs, 0.75)
    iqr = q75 - q25
    lo, hi = q25 - 1.5 * iqr, q75 + 1.5 * iqr
    kept = [x for x in xs if lo <= x <= hi] or xs
    mean = sum(kept) / len(kept)
    if len(kept) > 1 and mean > 0:
        var = sum((x - mean) ** 2 for x in kept) / (len(kept) - 1)
        cov = math.sqrt(var) / mean
    else:
        cov = 0.0
    return Timing(
        median_ms=med,
        iqr_ms=iqr,
        cov=cov,
        mean_ms=mean,
        min_ms=xs[0],
        max_ms=xs[-1],
        n_repeats=len(xs),
        inner=inner,
        n_outliers=len(xs) - len(kept),
        warmup=warmup,
        total_s=total_s,
        samples_ms=tuple(samples_ms),
    )


# --------------------------------------------------------------------------- clocks


class CpuClock:
    """Host wall clock: ``time.perf_counter_ns``. Right for CPU work, or any
    work that ends in its own synchronisation."""

    def __init__(self, now_ns: Callable[[], int] = time.perf_counter_ns):
        self._now_ns = now_ns

    def measure(self, fn: Callable[[], object], repeats: int, inner: int) -> list[float]:
        out = []
        now = self._now_ns
        for _ in range(repeats):
            t0 = now()
            for _ in range(inner):
                fn()
            t1 = now()
            out.append((t1 - t0) / 1e6 / inner)
        return out

    def sync(self) -> None:
        pass


class CudaClock:
    """CUDA events around each repeat, one synchronize per batch of repeats.

    ``event_factory()`` must return an object with ``record()`` and
    ``elapsed_time(other) -> ms``; by default ``torch.cuda.Event(enable_timing=True)``.
    """

    def __init__(
        self,
        event_factory: Callable[[], object] | None = None,
        synchronize: Callable[[], None] | None = None,
    ):
        if event_factory is None or synchronize is None:
            import torch

            event_factory = event_factory or (lambda: torch.cuda.Event(enable_timing=True))
            synchronize = synchronize or torch.cuda.synchronize
        self._event = event_factory
        self._sync = synchronize

    def measure(self, fn: Callable[[], object], repeats: int, inner: int) -> list[float]:
        pairs = [(self._event(), self._event()) for _ in range(repeats)]
        self._sync()  # nothing queued before the first start event
        for start, end in pairs:
            start.record()
            for _ in range(inner):
                fn()
            end.record()
        self._sync()  # all end events have completed
        return [start.elapsed_time(end) / inner for start, end in pairs]

    def sync(self) -> None:
        self._sync()


def clock_for(device: str) -> CpuClock | CudaClock:
    return CudaClock() if str(device).startswith("cuda") else CpuClock()


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class TimingPolicy:
    """How hard to try. Defaults suit single ops of about 0.01-100 ms."""

    warmup: int = 2  # calls before timing (at least one, to trigger lazy init)
    min_repeats: int = 5
    max_repeats: int = 50
    target_cov: float = 0.05  # stop once the robust CoV is at most this...
    budget_s: float = 1.0  # ...or once this much wall time is spent (after min_repeats)
    min_sample_ms: float = 0.05  # shorter calls are looped `inner` times per repeat
    batch: int = 5  # repeats taken between convergence checks

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.min_repeats < 1 or self.max_repeats < self.min_repeats:
            raise ConfigError(
                f"timing policy needs warmup >= 0 and 1 <= min_repeats <= max_repeats, got "
                f"warmup={self.warmup}, min_repeats={self.min_repeats}, max_repeats={self.max_repeats}"
            )
        if self.budget_s <= 0:
            raise ConfigError(f"timing budget must be positive, got {self.budget_s} s")


QUICK = TimingPolicy(warmup=1, min_repeats=5, max_repeats=25, target_cov=0.05, budget_s=0.1)  # layer campaigns


def time_fn(
    fn: Callable[[], object],
    *,
    device: str = "cpu",
    policy: TimingPolicy | None = None,
    clock: CpuClock | CudaClock | None = None,
) -> Timing:
    """Time ``fn()`` robustly (see module doc). ``fn`` must be idempotent."""
    policy = policy or TimingPolicy()
    clock = clock or clock_for(device)
    t_start = time.perf_counter()
    # warm-up; the first call also estimates the per-call time for `inner`
    per_call_ms = None
    for i in range(max(1, policy.warmup)):
        t0 = time.perf_counter_ns()
        fn()
        clock.sync()
        d = (time.perf_counter_ns() - t0) / 1e6
        per_call_ms = d if per_call_ms is None else min(per_call_ms, d)
    inner = 1
    if per_call_ms is not None and policy.min_sample_ms <= per_call_ms < 100 * policy.min_sample_ms:
        # one call is a fragile estimate (a preemption makes a 1 us call look like 4 ms): the fastest of a few
        per_call_ms = min([per_call_ms] + clock.measure(fn, 3, 1))
    if per_call_ms is not None and per_call_ms < policy.min_sample_ms:
        # re-estimate on a few calls: the first ones are often slower
        est = clock.measure(fn, 1, 10)[0]
        if est < policy.min_sample_ms:
            inner = int(min(1000, math.ceil(policy.min_sample_ms / max(est, 1e-6))))
    samples: list[float] = []
    while True:
        n = policy.min_repeats if not samples else min(policy.batch, policy.max_repeats - len(samples))
        samples.extend(clock.measure(fn, n, inner))
        if len(samples) >= policy.max_repeats:
            break
        if summarize(samples).cov <= policy.target_cov:
            break
        if time.perf_counter() - t_start >= policy.budget_s:
            break
    return summarize(samples, inner=inner, warmup=max(1, policy.warmup), total_s=time.perf_counter() - t_start)


# --------------------------------------------------------------------------- environment knobs


@contextlib.contextmanager
def pinned_threads(n: int | None) -> Iterator[int]:
    """Set ``torch.set_num_threads(n)`` for the block (``None``: leave as is)."""
    import torch

    before = torch.get_num_threads()
    if n is not None:
        if n < 1:
            raise ConfigError(f"threads must be at least 1, got {n}")
        torch.set_num_threads(n)
    try:
        yield torch.get_num_threads()
    finally:
        if n is not None:
            torch.set_num_threads(before)


@contextlib.contextmanager
def flush_denormals() -> Iterator[None]:
    """Treat denormal floats as zero for the block (``torch.set_flush_denormal``). A synthetic training step
    (random weights, random inputs, batch 1) can leave denormal values in gradients or optimizer state, and one
    step over them ran 40x slower on this x86 VM (resnet18, batch 1: 5.4 s instead of 0.14 s, on the fourth step,
    in plain PyTorch): a property of the synthetic data, not of the model, which a run on real data rarely
    meets. Where the CPU cannot flush, nothing changes."""
    import torch

    before = torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if before:  # the call returns whether flushing is supported; it was off unless someone turned it on
            torch.set_flush_denormal(False)


@contextlib.contextmanager
def cudnn_benchmark(device: str) -> Iterator[None]:
    """Switch ``torch.backends.cudnn.benchmark`` on for CUDA devices."""
    import torch

    if not str(device).startswith("cuda"):
        yield
        return
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


def check_device(device: str) -> str:
    """A measurable device's normalised name (``cpu``, ``cuda``, ``cuda:1``); ConfigError if it is not present
    here, UnknownNameError for any other name (one check, :func:`traincast.workload.steps.resolve_device`)."""
    from traincast.workload.steps import resolve_device

    return str(resolve_device(device, allowed=("cpu", "cuda")))
