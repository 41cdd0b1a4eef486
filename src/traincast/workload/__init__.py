"""Workloads: one training step of a model, traced op by op on the meta device.

    >>> from traincast.workload import trace
    >>> wl = trace("resnet50", batch_size=32)
    >>> wl.flops("forward") / 32 / 2e9   # GMACs per image
    4.1...

A model is any text a model source recognises (``workload.sources.SOURCES``): a
zoo or torchvision name, ``timm:NAME``, ``package.module:factory``, a diffusers
or Hugging Face config (built from the config, no weights), a spec file
(``.yaml``/``.json``); or an ``nn.Module`` together with an ``inputs``
description.
"""

from __future__ import annotations

import importlib

from traincast.workload.optimizers import OPTIMIZERS
from traincast.workload.precision import PRECISIONS
from traincast.workload.records import PHASES, MemoryFootprint, OpRecord, RecurrentCall, Workload

# what needs torch is imported on first use, so that records, precisions and help texts load without it
_LAZY = {
    "trace": "traincast.workload.build", "build_step": "traincast.workload.build",
    "hf_folder_config": "traincast.workload.build", "TrainingStep": "traincast.workload.steps",
}

__all__ = [
    "PHASES", "OPTIMIZERS", "PRECISIONS", "MemoryFootprint", "OpRecord", "RecurrentCall", "Workload",
    "TrainingStep", "build_step", "trace", "zoo",
]


def __getattr__(name: str):
    if name == "zoo":
        return importlib.import_module("traincast.workload.zoo")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'traincast.workload' has no attribute {name!r}")
