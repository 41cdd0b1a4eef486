"""The host that issues kernels (predict/host.py): the GPU waits where eager PyTorch launches slower than the
kernels run."""

from __future__ import annotations

import numpy as np
import pytest

from traincast.hardware.catalog import get_catalog
from traincast.hardware.records import Cluster
from traincast.predict.analytical import AnalyticalPredictor
from traincast.predict.compose import step_time
from traincast.predict.host import host_costs, issue_bound
from traincast.predict.roofline import RooflineParams
from traincast.workload import trace


def _loop(g, h):
    """The recurrence written out: host issues op i at H_i, the GPU starts it at max(G_{i-1}, H_i)."""
    H = G = 0.0
    out = []
    for gi, hi in zip(g, h):
        H += hi
        end = max(G, H) + gi
        out.append(end - G)
        G = end
    return np.array(out)


def test_closed_form_equals_the_recurrence():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 300):
        g = rng.exponential(1.0, n) * rng.choice([0.01, 1, 30], n)
        h = rng.uniform(0, 5, n)
        assert np.allclose(issue_bound(g, h), _loop(g, h), rtol=1e-12, atol=1e-12)


def test_hand_cases():
    """Kernels of 2 us issued every 10 us: the GPU waits for each, the step is 10 n + 2 us. Kernels of 100 us:
    only the first waits (the host runs ahead), 100 n + 10 us. The effective times add up to the step."""
    n = 50
    short = issue_bound([2e-6] * n, [10e-6] * n)
    assert short.sum() == pytest.approx((10 * n + 2) * 1e-6)
    assert short[0] == pytest.approx(12e-6) and short[1:] == pytest.approx([10e-6] * (n - 1))
    long = issue_bound([100e-6] * n, [10e-6] * n)
    assert long.sum() == pytest.approx((100 * n + 10) * 1e-6)
    assert issue_bound([], []).size == 0


def test_small_steps_are_host_bound_and_large_ones_are_not():
    """GPT-2 small on an H100: at batch 1 and 32 tokens most kernels are shorter than their launch, so the host
    model lengthens the step a lot; at batch 32 and 1,024 tokens it changes the step by under 2%. With both host
    costs at 0 (a device profile's overrides) the step is the sum of the kernels."""
    dev = get_catalog().device("H100-SXM5-80GB")
    cl = Cluster(device=dev, gpus_per_node=1, nodes=1)
    hf, hb = host_costs(AnalyticalPredictor(), dev)
    assert hf > hb > 0
    off = AnalyticalPredictor(overrides={"host_forward_us": 0.0, "host_backward_us": 0.0})
    assert host_costs(off, dev) == (0.0, 0.0)
    small = trace("gpt2", batch_size=1, seq_len=32, optimizer="adamw")
    big = trace("gpt2", batch_size=32, seq_len=1024, optimizer="adamw")
    on_s, off_s = step_time(small, cl, AnalyticalPredictor()), step_time(small, cl, off)
    assert off_s.iteration_s == pytest.approx(off_s.compute_s + off_s.overhead_s + off_s.communication_s +
                                              off_s.straggler_s)
    assert on_s.iteration_s > 1.5 * off_s.iteration_s
    n_fwd = sum(o.phase != "backward" for o in small.ops)
    n_bwd = sum(o.phase == "backward" for o in small.ops)
    host = (n_fwd * hf + n_bwd * hb) * 1e-6
    assert on_s.compute_s >= host  # the GPU cannot finish before the host has issued every kernel
    assert on_s.bottleneck() == "latency"
    on_b, off_b = step_time(big, cl, AnalyticalPredictor()), step_time(big, cl, off)
    assert off_b.iteration_s <= on_b.iteration_s < 1.02 * off_b.iteration_s


def test_cpus_have_no_separate_host():
    """On a CPU the device is the host: its dispatch cost is in op_overhead_us, the host model is off."""
    from traincast.hardware.local import local_device

    cpu = local_device("cpu", threads=2)
    params = RooflineParams.for_device(cpu)
    assert params.host_forward_us == 0 and params.host_backward_us == 0
    wl = trace("resnet18", batch_size=1)
    cl = Cluster(device=cpu, gpus_per_node=1, nodes=1)
    st = step_time(wl, cl, AnalyticalPredictor())
    assert st.compute_s == pytest.approx(sum(AnalyticalPredictor().predict(wl, cpu).times_s))


def test_a_recurrent_layer_is_issued_once_per_phase_not_per_traced_step():
    """An LSTM is traced as PyTorch's per-step decomposition (hundreds of small ops) but runs on a GPU as one
    cuDNN call per phase: the host issues each recurrent module once per phase, whatever its length."""
    from torch import nn

    from traincast.predict.host import host_seconds

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(16, 16, batch_first=True)
            self.out = nn.Linear(16, 4)

        def forward(self, x):
            return self.out(self.rnn(x)[0])

    wl = trace(Tagger(), batch_size=2, inputs=(50, 16), optimizer="sgd")
    assert wl.recurrent_calls
    rec = frozenset(c.module for c in wl.recurrent_calls)
    in_rnn = [o.module in rec for o in wl.ops]
    assert sum(in_rnn) > 100  # 50 steps of gates and state updates, forward and backward
    h = host_seconds(wl.ops, 15.0, 8.0, rec)
    charged = sorted((o.phase, round(float(x) * 1e6, 6)) for o, x, r in zip(wl.ops, h, in_rnn) if r and x > 0)
    assert charged == [("backward", 8.0), ("forward", 15.0)]
    assert all(x > 0 for x, r in zip(h, in_rnn) if not r)


def test_a_host_bound_forecast_names_the_step_on_the_slowest_host_measured():
    """GPT-2 at batch 1 x 32 tokens on an H100 with the catalog's host: the note gives the step on the slowest host
    measured (SLOW_HOST_US), which must equal the forecast of a predictor whose profile sets those host costs; a
    long-kernel step gets no note, nor a forecast whose host costs come from a profile (they were measured)."""
    import re

    from traincast.predict.compose import forecast
    from traincast.predict.host import SLOW_HOST_US

    small = dict(batch_size=1, seq_len=32, optimizer="adamw")

    def host_notes(f):
        return [n for n in f.notes if "issues them" in n]

    f = forecast("gpt2", gpu="H100", **small)
    (note,) = host_notes(f)
    slow = AnalyticalPredictor(overrides={"host_forward_us": SLOW_HOST_US[0], "host_backward_us": SLOW_HOST_US[1]})
    g = forecast("gpt2", gpu="H100", predictor=slow, **small)
    ms = float(re.search(r"it takes ([\d.]+) ms", note).group(1))
    assert ms == pytest.approx(1e3 * g.iteration_s, rel=1e-3)
    assert g.iteration_s > 1.1 * f.iteration_s
    assert not host_notes(g)
    assert not host_notes(forecast("gpt2", gpu="H100", batch_size=16, seq_len=1024, optimizer="adamw"))


def test_a_host_only_profile_goes_with_any_catalog_gpu():
    """A `calibrate --host-only` profile (the H200 lease's) with --gpu: the default predictor on that GPU, issued by
    the profile's host -- on the H100 (analytical by default) the forecast equals the analytical predictor's with
    those two costs; on the A100 the learned predictor stays the default. A profile fitted to its own device is
    refused with --gpu."""
    from pathlib import Path

    from traincast.errors import ConfigError
    from traincast.predict.compose import forecast
    from traincast.predict.options import forecast_from_options
    from traincast.predict.profile import DeviceProfile

    data = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "gpu_campaign"
    path = data / "h200_host_profile_2026-11-27.yaml"
    ov = DeviceProfile.load(path).overrides
    kw = dict(batch_size=2, seq_len=64, precision="amp-bf16", optimizer="adamw")
    f = forecast_from_options("bert-tiny", gpu="H100", profile=str(path), **kw)
    ref = forecast("bert-tiny", gpu="H100", predictor=AnalyticalPredictor(overrides=dict(ov)), **kw)
    assert f.device == ref.device == "H100-SXM5-80GB"
    assert f.iteration_s == pytest.approx(ref.iteration_s, rel=1e-9)
    assert f.iteration_s > 1.5 * forecast("bert-tiny", gpu="H100", **kw).iteration_s
    assert any("measured with H200-SXM-141GB" in n for n in f.notes)
    assert forecast_from_options("bert-tiny", gpu="A100", profile=str(path), **kw).predictor.startswith("learned")
    with pytest.raises(ConfigError, match="only a `calibrate --host-only` profile goes with another GPU"):
        forecast_from_options("bert-tiny", gpu="H100", profile=str(data / "h100_calibrated_profile_2026-11-27.yaml"),
                              **kw)
