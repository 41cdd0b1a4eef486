"""The environment fingerprint stored with every measured figure.

A measurement is only comparable with another taken on the same hardware and
software. ``fingerprint(device)`` collects what matters (CPU model and cores,
GPU name, memory and driver, torch / CUDA / cuDNN versions, thread count, OS,
a hash of the host name) into a frozen ``Fingerprint`` whose ``id`` is a short
hash of its content; samples refer to it by that id.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Fingerprint:
    cpu_model: str
    cpu_logical_cores: int
    cpu_affinity_cores: int  # cores this process may run on
    num_threads: int  # torch.get_num_threads() at the time of measuring
    device: str  # "cpu" or "cuda:N"
    gpu_name: str | None
    gpu_count: int
    gpu_memory_bytes: int | None
    gpu_capability: str | None  # e.g. "9.0"
    gpu_driver: str | None
    torch_version: str
    cuda_version: str | None  # CUDA runtime torch was built with
    cudnn_version: int | None
    python_version: str
    os: str
    hostname_hash: str  # first 12 hex of sha256(hostname)

    @property
    def id(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def as_dict(self) -> dict:
        d = asdict(self)
        d["id"] = self.id
        return d

    def summary(self) -> str:
        hw = self.gpu_name if self.device.startswith("cuda") else f"{self.cpu_model} ({self.cpu_affinity_cores} cores)"
        return f"{hw}, torch {self.torch_version}, {self.num_threads} threads [{self.id}]"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _gpu_driver(index: int) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--id={index}", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/driver/nvidia/version") as f:
            for tok in f.readline().split():
                if tok[:1].isdigit() and "." in tok:
                    return tok
    except OSError:
        pass
    return None


def fingerprint(device: str = "cpu", num_threads: int | None = None) -> Fingerprint:
    """Fingerprint of this machine as seen by ``device`` ("cpu", "cuda", "cuda:N")."""
    import torch

    device = str(device)
    gpu_name = gpu_mem = gpu_cap = driver = None
    gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device.startswith("cuda"):
        idx = int(device.split(":", 1)[1]) if ":" in device else torch.cuda.current_device()
        device = f"cuda:{idx}"
        props = torch.cuda.get_device_properties(idx)
        gpu_name = props.name
        gpu_mem = int(props.total_memory)
        gpu_cap = f"{props.major}.{props.minor}"
        driver = _gpu_driver(idx)
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count() or 1
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return Fingerprint(
        cpu_model=cpu_model(),
        cpu_logical_cores=os.cpu_count() or 1,
        cpu_affinity_cores=affinity,
        num_threads=int(num_threads if num_threads is not None else torch.get_num_threads()),
        device=device,
        gpu_name=gpu_name,
        gpu_count=gpu_count,
        gpu_memory_bytes=gpu_mem,
        gpu_capability=gpu_cap,
        gpu_driver=driver,
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        cudnn_version=cudnn,
        python_version=platform.python_version(),
        os=f"{platform.system()} {platform.release()}",
        hostname_hash=hashlib.sha256(socket.gethostname().encode()).hexdigest()[:12],
    )
