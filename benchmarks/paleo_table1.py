"""Reproduce PALEO's Table 1 (Qi et al., ICLR 2017): full forward and backward
pass of AlexNet (batch 128) and VGG-16 (batch 64) on an NVIDIA Titan X
(Maxwell: 6.1 TFLOPS fp32, 336 GB/s), measured in TensorFlow.

Prints traincast's analytical forecast beside the TensorFlow measurements and
the error. The models are torchvision's (AlexNet is the one-tower variant of
convnet-benchmarks that PALEO used); traincast's backward pass includes the
weight gradients, as TensorFlow's does.

    python benchmarks/paleo_table1.py
"""

from __future__ import annotations

from traincast.hardware import get_catalog
from traincast.predict import step_time
from traincast.hardware import Cluster
from traincast.workload import trace

# (model, batch): (forward ms, backward ms) measured by TensorFlow, PALEO Table 1
TABLE1 = {
    ("alexnet", 128): (44.00, 155.10),
    ("vgg16", 64): (400.46, 1117.48),
}


def main() -> None:
    dev = get_catalog().device("Titan X")
    print(f"device: {dev.name}, {dev.fp32_tflops} TFLOPS fp32, {dev.memory_bandwidth_gb_per_s} GB/s ({dev.source})")
    print(f"{'model':8s} {'batch':>5s} {'phase':9s} {'TF measured':>12s} {'traincast':>10s} {'error':>7s}")
    errs = []
    for (model, b), (fwd_ms, bwd_ms) in TABLE1.items():
        wl = trace(model, batch_size=b)
        st = step_time(wl, Cluster(dev))
        for phase, meas, pred in (("forward", fwd_ms, st.forward_s * 1e3), ("backward", bwd_ms, st.backward_s * 1e3)):
            err = (pred - meas) / meas * 100
            errs.append(abs(err))
            print(f"{model:8s} {b:5d} {phase:9s} {meas:10.2f}ms {pred:8.2f}ms {err:+6.1f}%")
    print(f"MAPE over the 4 figures: {sum(errs) / len(errs):.1f}%")


if __name__ == "__main__":
    main()
