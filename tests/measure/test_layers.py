import json

import pytest

from traincast.errors import ConfigError, UnknownNameError
from traincast.measure import OPS, SIZES, draw_config, measure_op, op_cost, resolve_ops
from traincast.measure.timing import TimingPolicy

FAST = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, budget_s=0.2)


def conv_flops(n, cin, cout, h, w, k, s, p, g):
    ho = (h + 2 * p - k) // s + 1
    wo = (w + 2 * p - k) // s + 1
    return 2 * n * cout * ho * wo * (cin // g) * k * k


@pytest.mark.parametrize(
    "n,cin,cout,h,k,s,g",
    [(8, 64, 128, 56, 3, 1, 1), (2, 3, 64, 224, 7, 2, 1), (4, 96, 96, 28, 3, 2, 96), (1, 512, 2048, 7, 1, 1, 1)],
)
def test_conv2d_flops_match_hand_formula(n, cin, cout, h, k, s, g):
    p = dict(batch=n, in_channels=cin, out_channels=cout, height=h, width=h, kernel=k, stride=s, padding=k // 2,
             groups=g, bias=False)
    fwd = conv_flops(n, cin, cout, h, h, k, s, k // 2, g)
    c = op_cost("conv2d", p, "forward")
    assert c.flops == fwd and c.flops_source == "counter"
    t = op_cost("conv2d", p, "train")
    weights = cout * (cin // g) * k * k
    assert t.flops == 3 * fwd + 2 * weights  # fwd + grad input + grad weight + SGD
    ho = (h + 2 * (k // 2) - k) // s + 1
    assert c.output_shape == (n, cout, ho, ho)
    assert c.bytes_read == 4 * (n * cin * h * h + weights) and c.bytes_written == 4 * n * cout * ho * ho


def test_linear_matmul_bmm_flops():
    c = op_cost("linear", dict(tokens=64, in_features=384, out_features=1536, bias=True), "forward")
    assert c.flops == 2 * 64 * 384 * 1536
    assert c.weight_bytes == 4 * (384 * 1536 + 1536)
    t = op_cost("linear", dict(tokens=64, in_features=384, out_features=1536, bias=False), "train")
    assert t.flops == 3 * 2 * 64 * 384 * 1536 + 2 * 384 * 1536
    assert op_cost("matmul", dict(m=7, k=9, n=11)).flops == 2 * 7 * 9 * 11
    # formula ops are counted as a traced step counts them: a max pool reads its window per output
    for k in (2, 3):
        c = op_cost("maxpool", dict(batch=2, channels=8, height=16, kernel=k, stride=2))
        out = 2 * 8 * ((16 + 2 * (k == 3) - k) // 2 + 1) ** 2  # the sampler pads 3x3 windows by 1
        assert c.flops == out * k * k
    assert op_cost("bmm", dict(batch=12, m=128, k=64, n=128)).flops == 2 * 12 * 128 * 64 * 128
    sdpa = op_cost("sdpa", dict(batch=2, heads=4, seq=64, head_dim=32, causal=False))
    assert sdpa.flops == 2 * (2 * 2 * 4 * 64 * 64 * 32)  # QK^T and PV


def test_formula_ops_have_flops_and_bytes():
    c = op_cost("relu", dict(batch=2, channels=16, height=8, width=0, seq=0, hidden=0))
    assert c.flops == 2 * 16 * 8 * 8 and c.flops_source == "formula"
    assert c.bytes_read == c.bytes_written == 4 * 2 * 16 * 8 * 8
    ln = op_cost("layernorm", dict(tokens=10, hidden=32), "train")
    assert ln.flops > 0 and ln.bytes_read > ln.bytes_written > 0


def test_impossible_shapes_raise_config_error():
    bad = dict(batch=1, in_channels=3, out_channels=8, height=4, width=4, kernel=7, stride=1, padding=0, groups=1, bias=False)
    with pytest.raises(ConfigError, match="impossible conv2d"):
        op_cost("conv2d", bad)
    with pytest.raises(ConfigError):  # channels not divisible by groups
        op_cost("conv2d", dict(bad, kernel=1, in_channels=6, groups=4))
    with pytest.raises(ConfigError, match="needs the parameters"):
        op_cost("linear", dict(tokens=2))
    with pytest.raises(UnknownNameError, match="did you mean"):
        op_cost("linear", dict(tokens=2, in_features=3, out_features=4, bias=True, biass=1))


def test_resolve_ops_groups_aliases_and_suggestions():
    assert resolve_ops("pool") == ("maxpool", "avgpool", "adaptive_avgpool")
    assert resolve_ops("conv,bn,conv2d") == ("conv2d", "batchnorm")
    assert set(resolve_ops(None)) == set(OPS)
    with pytest.raises(UnknownNameError) as exc:
        resolve_ops("conv2d,layernrom")
    assert "layernorm" in str(exc.value)


@pytest.mark.parametrize("size", ["small", "medium"])
def test_draws_are_deterministic_realistic_and_capped(size):
    ops = tuple(OPS)
    cap = SIZES[size]
    seen = set()
    for idx in range(150):
        op, params, cost = draw_config(ops, 3, idx, size)
        assert (op, params) == draw_config(ops, 3, idx, size)[:2]
        assert cost.fwd_flops <= cap.max_fwd_flops and cost.fwd_bytes <= cap.max_fwd_bytes, (op, params)
        seen.add(op)
    assert len(seen) >= 12  # ops are interleaved
    convs = [draw_config(("conv2d",), 0, i, "large")[1] for i in range(200)]
    assert {c["kernel"] for c in convs} <= {1, 3, 5, 7}
    assert sum(c["in_channels"] in (64, 128, 256, 512) for c in convs) > 40  # powers-of-two bias


def test_fixed_params_are_pinned():
    for i in range(10):
        op, p, _ = draw_config(("conv2d",), 1, i, "small", fixed={"kernel": 3, "batch": 2})
        assert p["kernel"] == 3 and p["batch"] == 2


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_op_runs_in_both_phases(op):
    _, params, _ = draw_config((op,), 0, 0, "small", fixed={"batch": 2, "tokens": 16, "rows": 16, "seq": 16})
    for phase in ("forward", "train"):
        s = measure_op(op, params, phase=phase, policy=FAST, threads=1)
        assert s.timing.median_ms > 0 and s.timing.n_repeats == 3
        assert s.cost.phase == phase and s.threads == 1
        json.dumps(s.params)
