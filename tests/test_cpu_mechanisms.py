"""The roofline's depthwise-convolution mechanisms on CPUs (issue 18), against hand-computed cases: a forward pass
timed per output whatever the kernel's area, and the slow path of weight gradients of kernels above 3x3 at the
measured rate."""

import math
from dataclasses import replace

import numpy as np
import pytest

from traincast.hardware.local import local_device
from traincast.predict.roofline import RooflineParams, compile_ops, depthwise_taps, depthwise_wgrad_flops
from traincast.workload import trace
from traincast.workload.records import OpRecord


def dw(k=3, aten="convolution", n=8, c=192, hw=28, mask=(1, 1, 0)):
    """A traced-looking depthwise convolution (args as aten's: stride, padding, dilation, transposed, output padding,
    groups for the forward; bias sizes first and the output mask last for the backward)."""
    x, w = (n, c, hw, hw), (c, 1, k, k)
    macs = n * c * hw * hw * k * k
    if aten == "convolution":
        shapes, args, flops = (x, w), ((1, 1), (k // 2, k // 2), (1, 1), False, (0, 0), c), 2 * macs
    else:
        shapes = (x, x, w)
        args = (None, (1, 1), (k // 2, k // 2), (1, 1), False, (0, 0), c, mask)
        flops = 2 * macs * (int(mask[0]) + int(mask[1]))
    return OpRecord(aten=aten, phase="forward" if aten == "convolution" else "backward", module="m", op_class="conv",
                    flops=flops, bytes_read=4 * (math.prod(x) * (1 + (aten != "convolution")) + math.prod(w)),
                    bytes_written=4 * math.prod(x), dtype="fp32", input_shapes=shapes, output_shapes=(x,),
                    n_tensors=1, args=args)


def _params(dev, **values):
    p = RooflineParams.for_device(dev)
    # compute-bound depthwise kernels, no overheads: the hand formulas below are the whole time
    return p.with_values({"compute.simt.conv_depthwise": 0.01, "memory_scale": 100.0, "op_overhead_us": 0.0,
                          "light_overhead_us": 0.0, "kernel_floor_us": 0.0, "fresh_alloc_gb_per_s": 0.0} | values)


def test_depthwise_taps_and_slow_weight_gradient_flops_by_shape():
    assert depthwise_taps(dw(3)) == 9 and depthwise_taps(dw(7)) == 49
    assert depthwise_wgrad_flops(dw(7)) == 0.0  # a forward pass has no weight gradient
    assert depthwise_wgrad_flops(dw(3, "convolution_backward")) == 0.0  # 3x3: the fast path
    assert depthwise_wgrad_flops(dw(5, "convolution_backward")) == 2 * 8 * 192 * 28 * 28 * 25
    assert depthwise_wgrad_flops(dw(7, "convolution_backward", mask=(1, 0, 0))) == 0.0  # input gradient only


def test_depthwise_forward_is_timed_per_output_whatever_the_kernel():
    dev = local_device("cpu", threads=2)
    ops = [dw(3), dw(7)]
    on = _params(dev, depthwise_tap_ref=9.0)
    off = _params(dev, depthwise_tap_ref=0.0)
    t_on = compile_ops(ops, dev, "fp32", on).times(on)
    t_off = compile_ops(ops, dev, "fp32", off).times(off)
    peak = dev.peak_flops_per_s("fp32") * 0.01
    assert t_off[0] == pytest.approx(ops[0].flops / peak) and t_off[1] == pytest.approx(ops[1].flops / peak)
    assert t_on[0] == pytest.approx(t_off[0])  # 3x3: the fitted efficiency as it is
    assert t_on[1] == pytest.approx(t_on[0])  # 7x7: 49/9 the FLOPs at 49/9 the rate


def test_slow_weight_gradients_run_at_the_measured_rate_after_the_input_gradient():
    dev = local_device("cpu", threads=2)
    bwd = dw(7, "convolution_backward")
    p = _params(dev, depthwise_tap_ref=9.0, depthwise_wgrad_gflops=4.0)
    t = compile_ops([bwd], dev, "fp32", p).times(p)[0]
    slow = 2 * 8 * 192 * 28 * 28 * 49
    gi = (bwd.flops - slow) / (dev.peak_flops_per_s("fp32") * min(1.0, 0.01 * 49 / 9))
    assert t == pytest.approx(gi + slow / 4e9)
    off = _params(dev, depthwise_tap_ref=9.0, depthwise_wgrad_gflops=0.0)
    # no measured rate (an uncalibrated CPU): the weight gradient at the depthwise efficiency without the
    # per-output scaling, which holds for forward passes and input gradients only
    peak = dev.peak_flops_per_s("fp32")
    assert compile_ops([bwd], dev, "fp32", off).times(off)[0] == pytest.approx(gi + slow / (peak * 0.01))


def test_convnext_has_slow_depthwise_gradients_and_mobilenet_v2_none():
    """ConvNeXt's 7x7 depthwise weight gradients are on the slow path; MobileNetV2's 3x3 ones are not."""
    cx = trace("convnext_tiny", batch_size=2)
    slow = [depthwise_wgrad_flops(o) for o in cx.ops]
    dwb = [o for o in cx.ops if o.aten == "convolution_backward" and depthwise_taps(o) == 49]
    assert len(dwb) == 18 and sum(1 for s in slow if s) == 18  # one per ConvNeXt-T block (3 + 3 + 9 + 3)
    assert sum(slow) == sum(2 * math.prod(o.input_shapes[0]) * 49 for o in dwb)
    mb = trace("mobilenet_v2", batch_size=2)
    assert any(depthwise_taps(o) == 9 for o in mb.ops) and not any(depthwise_wgrad_flops(o) for o in mb.ops)


def test_transposed_and_one_dimensional_depthwise_kernels_are_left_as_they_were():
    tr = dw(5, "convolution_backward")
    tr = replace(tr, args=tr.args[:4] + (True,) + tr.args[5:])
    assert depthwise_wgrad_flops(tr) == 0.0  # transposed: the weight gradient runs over the input, not measured
    one_d = OpRecord(aten="convolution_backward", phase="backward", module="m", op_class="conv", flops=1e6,
                     bytes_read=1e5, bytes_written=1e5, dtype="fp32",
                     input_shapes=((2, 64, 100), (2, 64, 100), (64, 1, 4)), output_shapes=((2, 64, 100),),
                     n_tensors=1, args=(None, (1,), (3,), (1,), False, (0,), 64, (1, 1, 0)))
    assert depthwise_taps(one_d) == 0 and depthwise_wgrad_flops(one_d) == 0.0  # Mamba's conv1d: not measured


def test_gpu_catalogs_have_no_depthwise_cpu_mechanisms():
    from traincast.hardware import get_catalog

    for d in get_catalog().devices.values():
        if d.kind == "gpu":
            p = RooflineParams.for_device(d)
            assert (p.depthwise_tap_ref, p.depthwise_wgrad_gflops, p.depthwise_call_us) == (0.0, 0.0, 0.0), d.name


def test_interpolated_workloads_keep_the_depthwise_mechanisms():
    from traincast.predict.compose import interpolate

    a, b, direct = (trace("mobilenet_v3_small", batch_size=n) for n in (2, 4, 3))
    mid = interpolate(a, b, 3)
    assert [depthwise_taps(o) for o in mid.ops] == [depthwise_taps(o) for o in direct.ops]
    assert sum(depthwise_wgrad_flops(o) for o in mid.ops) == sum(depthwise_wgrad_flops(o) for o in direct.ops) > 0


def test_the_cpu_catalog_times_depthwise_per_output_and_round_trips():
    dev = local_device("cpu", threads=2)
    p = RooflineParams.for_device(dev)
    assert p.depthwise_tap_ref == 9.0
    q = p.with_values({"depthwise_wgrad_gflops": 3.5})
    assert RooflineParams.from_table(q.to_table()).depthwise_wgrad_gflops == 3.5
    assert np.isfinite(compile_ops([dw(5, "convolution_backward")], dev, "fp32", q).times(q)).all()


def test_each_depthwise_call_pays_its_measured_fixed_cost_and_dense_convolutions_none():
    dev = local_device("cpu", threads=2)
    dense = OpRecord(aten="convolution", phase="forward", module="m", op_class="conv", flops=2 * 16 * 16 * 16,
                     bytes_read=4096, bytes_written=1024, dtype="fp32", input_shapes=((1, 16, 4, 4), (16, 16, 1, 1)),
                     output_shapes=((1, 16, 4, 4),), n_tensors=1, args=((1, 1), (0, 0), (1, 1), False, (0, 0), 1))
    ops = [dw(3), dw(3, "convolution_backward"), dense]
    p0 = _params(dev, depthwise_tap_ref=9.0)
    p1 = p0.with_values({"depthwise_call_us": 50.0, "depthwise_grad_call_us": 120.0})
    t0 = compile_ops(ops, dev, "fp32", p0).times(p0)
    t1 = compile_ops(ops, dev, "fp32", p1).times(p1)
    assert t1 - t0 == pytest.approx([50e-6, 120e-6, 0.0])


def test_the_depthwise_probe_measures_rates_and_call_costs():
    from traincast.measure.kernels import measure_depthwise

    d = measure_depthwise("cpu", threads=1, shapes=((1, 16, 14, 14), (1, 32, 7, 7)))
    # a 7x7 weight gradient does 49/9 the work of a 3x3 one at the same shape: never faster
    assert d.gflops_per_s > 0 and d.ratio_to_3x3 > 1 and d.call_us >= 0 and d.grad_call_us >= 0
