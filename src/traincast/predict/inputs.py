"""The input pipeline: can the CPU decode and augment images as fast as the GPU trains on them?

A PyTorch ``DataLoader`` prepares batches in ``num_workers`` processes while the GPU runs the previous step, so
a step takes ``max(GPU step, loader time)``: the loader time is ``per-GPU batch x CPU time per sample /
workers``. The CPU time per sample (JPEG decode plus training augmentation) comes from
``hardware/data/input_pipeline.yaml`` (measured with ``traincast bench input``; decode is per source image,
augmentation scales with the output pixels).

Which workloads read images is read off the trace, not guessed from the model's name: the first forward
convolution whose input has 1 or 3 channels is the image the model is fed (a CNN's stem, a ViT's patch
embedding). Text, audio-feature and synthetic-input models get no input-pipeline term.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

from traincast import yamlio

from traincast.errors import ConfigError
from traincast.workload.records import Workload

DATA = Path(__file__).resolve().parent.parent / "hardware" / "data" / "input_pipeline.yaml"


@functools.cache
def pipeline_table() -> dict:
    return yamlio.safe_load(DATA.read_text())["image_pipeline"]


def image_input_size(wl: Workload) -> tuple[int, int] | None:
    """(H, W) of the images the model reads: the input of its first forward convolution with 1 or 3 channels.
    Where that convolution reads patches cut beforehand (Qwen2-VL-style rows: each input exactly its kernel's
    size, more of them than samples), the square of the same pixels per sample: ``sqrt(patches x patch area /
    batch)`` a side (392 patches of 16x16 for 2 samples: 224x224)."""
    for op in wl.ops:
        if op.phase != "forward" or op.op_class not in ("conv", "conv_grouped", "conv_depthwise"):
            continue
        if not op.input_shapes:
            return None
        x = op.input_shapes[0]
        if len(x) in (4, 5) and x[1] in (1, 3):
            spatial = [int(d) for d in x[-2:]]
            kernel = [int(d) for d in op.input_shapes[1][-2:]] if len(op.input_shapes) > 1 else None
            if kernel == spatial and x[0] > wl.batch_size:
                side = round(math.sqrt(x[0] * spatial[0] * spatial[1] / wl.batch_size))
                return side, side
            if len(x) == 4:
                return spatial[0], spatial[1]
        return None  # the first convolution reads features, not images (e.g. a GAN's generator)
    return None


def cpu_ms_per_image(height: int, width: int) -> float:
    """CPU time of one loader worker per training image of ``height`` x ``width`` (decode + augmentation)."""
    t = pipeline_table()
    return float(t["decode_ms"]) + float(t["augment_ms_at_224"]) * height * width / (224 * 224)


@dataclass(frozen=True)
class InputPipeline:
    image_size: tuple[int, int]
    cpu_ms_per_sample: float
    workers: int | None  # loader worker processes per GPU; None: not known
    loader_s: float | None  # time the workers need per step (per GPU batch); None without workers
    wait_s: float  # added to the step: the loader is slower than the GPU step by this much

    def cores_to_keep_up(self, per_gpu_batch: int, gpu_step_s: float) -> int:
        return max(1, math.ceil(per_gpu_batch * self.cpu_ms_per_sample / 1e3 / gpu_step_s))

    def to_dict(self) -> dict:
        return {"image_size": list(self.image_size), "cpu_ms_per_sample": self.cpu_ms_per_sample,
                "workers": self.workers, "loader_s": self.loader_s, "wait_s": self.wait_s}


def workers_per_gpu(vcpus: int | None, gpus_per_instance: int) -> int | None:
    """Loader workers per GPU on an instance: its vCPUs over its GPUs, less one for each GPU's training process."""
    if not vcpus:
        return None
    return max(1, vcpus // max(1, gpus_per_instance) - int(pipeline_table()["cores_reserved_per_gpu"]))


def input_pipeline(wl: Workload, per_gpu_batch: int, gpu_step_s: float, workers: int | None) -> InputPipeline | None:
    """The input-pipeline term of a data-parallel step, or None when the model reads no images."""
    size = image_input_size(wl)
    if size is None:
        return None
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"--loader-workers must be a positive integer, got {workers!r}")
    ms = cpu_ms_per_image(*size)
    if workers is None:
        return InputPipeline(size, ms, None, None, 0.0)
    loader_s = per_gpu_batch * ms / 1e3 / workers
    return InputPipeline(size, ms, workers, loader_s, max(0.0, loader_s - gpu_step_s))


def note(ip: InputPipeline, per_gpu_batch: int, gpu_step_s: float) -> str:
    h, w = ip.image_size
    need = ip.cores_to_keep_up(per_gpu_batch, gpu_step_s)
    src = pipeline_table()["measured_on"]
    if ip.workers is None:
        return (f"input pipeline not counted: {h}x{w} JPEG decode + augmentation takes ~{ip.cpu_ms_per_sample:.1f} ms "
                f"per image per core ({src}), so about {need} loader worker core(s) per GPU keep up with this step; "
                f"--loader-workers N (or --instance) checks a given number")
    if ip.wait_s > 0:
        return (f"data loading bounds the step: {ip.workers} loader worker(s) per GPU need {ip.loader_s * 1e3:.1f} ms "
                f"per batch against {gpu_step_s * 1e3:.1f} ms of GPU work ({ip.cpu_ms_per_sample:.1f} ms per "
                f"{h}x{w} image per core, {src}); about {need} workers per GPU, GPU decoding (DALI) or pre-decoded "
                f"data would keep the GPU busy")
    return (f"input pipeline keeps up: {ip.workers} loader worker(s) per GPU need {ip.loader_s * 1e3:.1f} ms per batch "
            f"against {gpu_step_s * 1e3:.1f} ms of GPU work")
