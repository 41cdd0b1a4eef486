"""Time an image-classification input pipeline on this machine's CPU: JPEG decode and training augmentation.

What a PyTorch ``DataLoader`` worker does for every training image of an ImageNet-style job: decode the JPEG
(PIL), ``RandomResizedCrop`` to the model's input size, a random horizontal flip, conversion to a float tensor
and normalisation (torchvision's ``transforms.v2``). The images are synthetic (smooth random colour fields with
noise, JPEG-encoded once at the given size and quality), so nothing is downloaded; a real data set's images
differ in size and content, which the source size and quality options stand for.

``time_input_pipeline`` measures one process on one core (as one ``DataLoader`` worker runs) and returns the
median cost per sample split into decode and augmentation; ``time_loader`` runs a real ``DataLoader`` with
``workers`` processes over the same images and returns its throughput, which is what
``benchmarks/input_pipeline.py`` compares the per-core model against.
"""

from __future__ import annotations

import io
import statistics
import time
from dataclasses import dataclass

import numpy as np

from traincast.errors import ConfigError, positive


@dataclass(frozen=True)
class InputPipelineTiming:
    """Median CPU time per sample of one worker, with the spread over repeats."""

    image_size: int
    source_width: int
    source_height: int
    jpeg_quality: int
    jpeg_bytes: int
    decode_ms: float
    augment_ms: float
    iqr_ms: float  # of decode + augment, over the repeats
    samples: int

    @property
    def per_sample_ms(self) -> float:
        return self.decode_ms + self.augment_ms


def synthetic_jpegs(n: int, width: int, height: int, quality: int, seed: int = 0) -> list[bytes]:
    """``n`` JPEG files of ``width`` x ``height``: smooth colour fields plus noise (photographs compress to a
    similar size per pixel; pure noise would not)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    for _ in range(n):
        f = rng.uniform(0.005, 0.03, size=(3, 2))
        ph = rng.uniform(0, 6.28, size=3)
        chans = [127 + 90 * np.sin(xx * f[c, 0] + yy * f[c, 1] + ph[c]) for c in range(3)]
        img = np.stack(chans, axis=-1) + rng.normal(0, 12, size=(height, width, 3))
        buf = io.BytesIO()
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=quality)
        out.append(buf.getvalue())
    return out


def train_transform(image_size: int):
    """The standard ImageNet training augmentation of torchvision's reference scripts."""
    import torch
    from torchvision.transforms import v2

    return v2.Compose([
        v2.RandomResizedCrop(image_size, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])


def _check(image_size: int, width: int, height: int, quality: int) -> None:
    positive("--image-size", image_size)
    positive("--source-width", width)
    positive("--source-height", height)
    if not 1 <= quality <= 100:
        raise ConfigError(f"--jpeg-quality must be 1-100, got {quality}")
    if max(image_size, width, height) > 8192:
        raise ConfigError("image sizes above 8192 pixels are not supported by this benchmark")


def time_input_pipeline(image_size: int = 224, *, source_width: int = 500, source_height: int = 375,
                        jpeg_quality: int = 90, samples: int = 64, repeats: int = 5) -> InputPipelineTiming:
    """Median decode and augmentation time per sample in this process, on one thread (as one loader worker)."""
    import torch
    from PIL import Image

    _check(image_size, source_width, source_height, jpeg_quality)
    positive("--samples", samples)
    positive("--repeats", repeats)
    files = synthetic_jpegs(min(samples, 16), source_width, source_height, jpeg_quality)
    tf = train_transform(image_size)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a DataLoader worker runs torch single-threaded
    try:
        for f in files[:4]:  # warm-up
            tf(Image.open(io.BytesIO(f)).convert("RGB"))
        dec, aug, tot = [], [], []
        for _ in range(repeats):
            t_dec = t_aug = 0.0
            for i in range(samples):
                t0 = time.perf_counter()
                img = Image.open(io.BytesIO(files[i % len(files)])).convert("RGB")
                img.load()
                t1 = time.perf_counter()
                tf(img)
                t2 = time.perf_counter()
                t_dec += t1 - t0
                t_aug += t2 - t1
            dec.append(t_dec / samples * 1e3)
            aug.append(t_aug / samples * 1e3)
            tot.append((t_dec + t_aug) / samples * 1e3)
    finally:
        torch.set_num_threads(threads)
    q = statistics.quantiles(tot, n=4) if len(tot) > 1 else [tot[0]] * 3
    return InputPipelineTiming(image_size, source_width, source_height, jpeg_quality,
                               int(statistics.mean(len(f) for f in files)), statistics.median(dec),
                               statistics.median(aug), q[2] - q[0], samples)


class _JpegSet:
    def __init__(self, files, image_size, n):
        self.files, self.n, self.tf = files, n, train_transform(image_size)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        from PIL import Image

        return self.tf(Image.open(io.BytesIO(self.files[i % len(self.files)])).convert("RGB")), 0


def time_loader(workers: int, image_size: int = 224, *, batch_size: int = 32, batches: int = 20,
                source_width: int = 500, source_height: int = 375, jpeg_quality: int = 90) -> float:
    """Samples per second a real ``torch.utils.data.DataLoader`` with ``workers`` processes delivers (after its
    first batches, which include the workers' start)."""
    from torch.utils.data import DataLoader

    _check(image_size, source_width, source_height, jpeg_quality)
    positive("--workers", workers)
    files = synthetic_jpegs(16, source_width, source_height, jpeg_quality)
    warm = 2 * workers
    ds = _JpegSet(files, image_size, batch_size * (batches + warm))
    loader = DataLoader(ds, batch_size=batch_size, num_workers=workers, prefetch_factor=2, persistent_workers=False)
    it = iter(loader)
    for _ in range(warm):
        next(it)
    t0 = time.perf_counter()
    n = 0
    for x, _ in it:
        n += x.shape[0]
    return n / (time.perf_counter() - t0)
