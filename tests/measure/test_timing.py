import statistics
import time

import pytest
import torch

from traincast.errors import ConfigError
from traincast.measure.timing import CpuClock, CudaClock, TimingPolicy, check_device, pinned_threads, summarize, time_fn


def test_summarize_known_values():
    xs = [1.0, 2.0, 3.0, 4.0, 5.0]
    t = summarize(xs)
    assert t.median_ms == 3.0
    assert t.iqr_ms == pytest.approx(2.0)  # numpy-style quartiles 2 and 4
    assert t.mean_ms == 3.0
    assert t.cov == pytest.approx(statistics.stdev(xs) / 3.0)
    assert (t.min_ms, t.max_ms, t.n_repeats, t.n_outliers) == (1.0, 5.0, 5, 0)


def test_summarize_outlier_is_robust():
    xs = [9.8, 9.9, 10.0, 10.0, 10.1, 10.2, 10.0, 9.9, 500.0]
    t = summarize(xs)
    assert t.median_ms == 10.0
    assert t.n_outliers == 1 and t.max_ms == 500.0
    assert t.cov < 0.02  # the outlier does not inflate the spread
    assert t.mean_ms == pytest.approx(79.9 / 8)


def _busy(ms: float):
    def fn():
        end = time.perf_counter() + ms / 1e3
        while time.perf_counter() < end:
            pass

    return fn


def test_time_fn_busy_wait_median():
    t = time_fn(_busy(2.0), policy=TimingPolicy(warmup=1, min_repeats=7, max_repeats=15, budget_s=1.0))
    assert 1.95 <= t.median_ms <= 2.6
    assert t.inner == 1 and t.n_repeats >= 7


def test_time_fn_sleep_median():
    t = time_fn(lambda: time.sleep(0.005), policy=TimingPolicy(warmup=1, min_repeats=5, max_repeats=10, budget_s=1.0))
    assert 4.9 <= t.median_ms <= 8.0


def test_short_functions_are_looped():
    calls = []
    t = time_fn(lambda: calls.append(1), policy=TimingPolicy(warmup=1, min_repeats=5, max_repeats=5, min_sample_ms=0.05))
    assert t.inner > 1
    assert t.median_ms < 0.05
    assert len(calls) >= 5 * t.inner


class ScriptedClock:
    """A clock that returns scripted per-repeat times (ms), whatever fn does."""

    def __init__(self, values):
        self.values = values
        self.i = 0

    def measure(self, fn, repeats, inner):
        out = []
        for _ in range(repeats):
            fn()
            out.append(self.values(self.i))
            self.i += 1
        return out

    def sync(self):
        pass


def test_adaptive_repeats_stop_on_small_cov_and_on_budget():
    pol = dict(warmup=1, min_repeats=5, min_sample_ms=0.0)
    steady = time_fn(lambda: None, clock=ScriptedClock(lambda i: 1.0 + 0.01 * (i % 2)),
                     policy=TimingPolicy(max_repeats=50, target_cov=0.05, budget_s=5, **pol))
    assert steady.n_repeats == 5  # converged at once
    capped = time_fn(lambda: None, clock=ScriptedClock(lambda i: 1.0 if i % 2 else 2.0),
                     policy=TimingPolicy(max_repeats=20, target_cov=0.01, budget_s=10, **pol))
    assert capped.n_repeats == 20  # never converges: stops at max_repeats
    timed = time_fn(_busy(0.5), clock=ScriptedClock(lambda i: 1.0 if i % 2 else 2.0),
                    policy=TimingPolicy(max_repeats=10_000, target_cov=0.01, budget_s=0.05, **pol))
    assert 5 <= timed.n_repeats < 200  # stopped by the time budget


class FakeEvent:
    """A CUDA event on a fake device clock; elapsed only valid after synchronize."""

    def __init__(self, dev):
        self.dev = dev
        self.t = None

    def record(self):
        self.dev.recorded += 1
        self.t = self.dev.now

    def elapsed_time(self, other):
        assert self.dev.synced_after_record, "elapsed_time read before synchronize"
        return other.t - self.t


class FakeDevice:
    def __init__(self):
        self.now = 0.0
        self.recorded = 0
        self.syncs = 0
        self.synced_after_record = False

    def event(self):
        self.synced_after_record = False
        return FakeEvent(self)

    def sync(self):
        self.syncs += 1
        self.synced_after_record = True


def test_cuda_clock_with_fake_events():
    dev = FakeDevice()
    durations = iter([3.0, 1.0, 1.0, 1.0, 2.0, 1.0])

    def kernel():  # "launches" work that advances the device clock
        dev.now += next(durations)

    clock = CudaClock(event_factory=dev.event, synchronize=dev.sync)
    samples = clock.measure(kernel, repeats=3, inner=2)
    assert samples == [2.0, 1.0, 1.5]  # per-call ms: (3+1)/2, (1+1)/2, (2+1)/2
    assert dev.recorded == 6
    assert dev.syncs == 2  # one before, one after the batch: not one per repeat


def test_time_fn_on_cuda_clock_uses_events():
    dev = FakeDevice()

    def kernel():
        dev.now += 4.0

    clock = CudaClock(event_factory=dev.event, synchronize=dev.sync)
    t = time_fn(kernel, device="cuda", clock=clock, policy=TimingPolicy(warmup=2, min_repeats=5, max_repeats=5, min_sample_ms=0.0))
    assert t.median_ms == 4.0 and t.iqr_ms == 0.0 and t.n_repeats == 5


def test_cpu_clock_with_fake_time():
    ticks = iter(range(0, 10**9, 1_000_000))  # 1 ms per call of now()
    clock = CpuClock(now_ns=lambda: next(ticks))
    assert clock.measure(lambda: None, 3, 1) == [1.0, 1.0, 1.0]


def test_pinned_threads_restores():
    before = torch.get_num_threads()
    with pinned_threads(1) as n:
        assert n == 1 == torch.get_num_threads()
    assert torch.get_num_threads() == before
    with pytest.raises(ConfigError):
        with pinned_threads(0):
            pass


def test_bad_policy_and_missing_device(monkeypatch):
    with pytest.raises(ConfigError):
        TimingPolicy(min_repeats=10, max_repeats=5)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="no CUDA GPU"):
        check_device("cuda")
    assert check_device("CPU") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert check_device("GPU") == "cuda" and check_device("cuda:1") == "cuda:1"
    with pytest.raises(ConfigError, match="'cuda:2' does not exist; this machine has 2 GPU"):
        check_device("cuda:2")
    from traincast.errors import UnknownNameError

    for bad in ("tpu", "cuda:x", "meta"):  # meta traces, it cannot be timed
        with pytest.raises(UnknownNameError, match="unknown device"):
            check_device(bad)


def test_memory_bandwidth_measures_three_rates():
    """STREAM add, warm fill and fresh fill of 48 MiB tensors: positive rates; the page-in rate is
    the extra cost of fresh memory (inf when there is none) and consistent with the two fills."""
    import math

    from traincast.measure.memory import Bandwidth, measure_bandwidth

    b = measure_bandwidth("cpu", threads=1, size_mb=48)
    assert b.stream_gb_per_s > 0.1 and b.fill_gb_per_s > 0.1 and b.fresh_gb_per_s > 0.1
    extra = 1 / b.fresh_gb_per_s - 1 / b.fill_gb_per_s
    assert (b.page_in_gb_per_s == math.inf) == (extra <= 1e-12)
    if extra > 1e-12:
        assert b.page_in_gb_per_s == pytest.approx(1 / extra)
    assert Bandwidth(10.0, 2.0, 8.0, 128, 0.0).page_in_gb_per_s == pytest.approx(1 / (1 / 2 - 1 / 8))
    assert Bandwidth(10.0, 8.0, 8.0, 128, 0.0).page_in_gb_per_s == math.inf
