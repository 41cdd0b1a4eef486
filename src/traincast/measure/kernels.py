"""Kernel paths of the local device that the roofline cannot infer from FLOPs and bytes, measured.

``measure_depthwise``: the rate (GFLOP/s) of the weight gradient of depthwise convolutions with a 7x7 kernel,
over the four stage shapes of an ImageNet CNN (batch 8; 96 channels at 56x56 to 768 at 7x7): total FLOPs over
total time, as a network's stages add up (on this project's VM the rate is 3.2 to 6.6 GFLOP/s by shape). On CPUs (PyTorch 2.x, oneDNN) the forward pass and the input gradient of a depthwise convolution take
about the same time per output whatever the kernel size, and so does the weight gradient of a 3x3 kernel; the
weight gradient of larger kernels (5x5, 7x7: EfficientNet, MnasNet, ConvNeXt) runs on a slow path at a few
GFLOP/s, 5-50x longer than the 3x3 one at the same shape (measured on this project's 2-core Xeon VM,
``docs/cpu-accuracy.md``). Where a device has a fast path for such kernels the measured rate is high and the
roofline's extra term for them (``depthwise_wgrad_gflops``) is small.

The same measurement gives the fixed cost of a depthwise convolution call (``call_us``, ``grad_call_us``): the
forward and the backward of a tiny depthwise convolution beyond a tiny element-wise op's time. On this
project's VM (2 threads) about 50 and 100 us, whatever the size, against 5-20 us for a dense convolution.
"""

from __future__ import annotations

from dataclasses import dataclass

from traincast.measure.timing import TimingPolicy, check_device, pinned_threads, time_fn

_POLICY = TimingPolicy(warmup=1, min_repeats=5, max_repeats=15, target_cov=0.05, budget_s=3.0)


@dataclass(frozen=True)
class DepthwiseCosts:
    gflops_per_s: float  # the 7x7 weight gradient's rate (2 x multiply-adds per second / 1e9)
    ratio_to_3x3: float  # its time over the 3x3 weight gradient's at the same shape (about 49/9 where no slow path)
    shapes: tuple[tuple[int, int, int, int], ...]  # (batch, channels, height, width) of each probe
    cov: float
    call_us: float = 0.0  # a depthwise convolution's forward call beyond an element-wise op's
    grad_call_us: float = 0.0  # its backward's (input and weight gradients)

    @classmethod
    def from_dict(cls, d: dict) -> "DepthwiseCosts":
        """From its JSON form (``dataclasses.asdict``, the shapes as lists)."""
        return cls(**(d | {"shapes": tuple(tuple(s) for s in d["shapes"])}))

    def summary(self) -> str:
        return (f"7x7 weight gradient {self.gflops_per_s:.2f} GFLOP/s ({self.ratio_to_3x3:.0f}x the 3x3 one's time), "
                f"calls {self.call_us:.0f} us forward, {self.grad_call_us:.0f} us backward")


STAGES = ((8, 96, 56, 56), (8, 192, 28, 28), (8, 384, 14, 14), (8, 768, 7, 7))


def measure_depthwise(device: str = "cpu", *, threads: int | None = None,
                      shapes: tuple[tuple[int, int, int, int], ...] = STAGES) -> DepthwiseCosts:
    """Time the weight gradient (alone: ``output_mask`` (False, True, False)) of a stride-1 depthwise convolution
    at each of ``shapes`` with a 7x7 and a 3x3 kernel; the fastest repeat of each counts (another process on the
    cores only slows a repeat down). ``shapes`` must not be empty."""
    import torch

    if not shapes:
        raise ValueError("measure_depthwise needs at least one shape")
    dev = check_device(device)
    t7 = t3 = flops7 = 0.0
    covs = []
    with pinned_threads(threads), torch.no_grad():
        for n, c, h, w in shapes:
            x = torch.randn(n, c, h, w, device=dev)
            go = torch.randn(n, c, h, w, device=dev)

            def timing(k: int):
                wt = torch.randn(c, 1, k, k, device=dev)
                pad = [k // 2, k // 2]
                return time_fn(lambda: torch.ops.aten.convolution_backward(
                    go, x, wt, None, [1, 1], pad, [1, 1], False, [0, 0], c, [False, True, False]),
                    device=dev, policy=_POLICY)

            a, b = timing(7), timing(3)
            t7, t3, flops7 = t7 + a.min_ms, t3 + b.min_ms, flops7 + 2.0 * n * c * h * w * 49
            covs.append(a.cov)
        # the fixed cost of a call: tiny tensors (1 x 16 x 4 x 4), fastest repeat, beyond an element-wise op's
        aten = torch.ops.aten
        xs, gs, ws = (torch.randn(1, 16, 4, 4, device=dev), torch.randn(1, 16, 4, 4, device=dev),
                      torch.randn(16, 1, 3, 3, device=dev))
        tiny = TimingPolicy(warmup=10, min_repeats=50, max_repeats=200, target_cov=0.0, budget_s=1.0)

        def fastest(fn) -> float:
            return time_fn(fn, device=dev, policy=tiny).min_ms * 1e3

        base = fastest(lambda: aten.mul(xs, 1.0))
        fwd = fastest(lambda: aten.convolution(xs, ws, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 16))
        bwd = fastest(lambda: aten.convolution_backward(gs, xs, ws, [16], [1, 1], [1, 1], [1, 1], False, [0, 0], 16,
                                                        [True, True, True]))
    return DepthwiseCosts(gflops_per_s=flops7 / (t7 * 1e-3) / 1e9, ratio_to_3x3=t7 / t3,
                          shapes=tuple(tuple(s) for s in shapes), cov=max(covs), call_us=max(0.0, fwd - base),
                          grad_call_us=max(0.0, bwd - base))
