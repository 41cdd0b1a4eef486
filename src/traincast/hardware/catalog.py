"""The hardware catalog: shipped YAML (each row with source and date) plus user files."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from types import MappingProxyType
from pathlib import Path

import yaml

from traincast.errors import SpecError, UnknownNameError
from traincast.hardware.records import GIB, Device, Instance, Link

_DEVICE_KEYS = {"name", "kind", "vendor", "generation", "peak_tflops", "memory_gb",
                "memory_bandwidth_gb_per_s", "sm_count", "boost_clock_mhz", "intra_node_link",
                "tdp_w", "source", "date", "aliases", "note"}
_REQUIRED_DEVICE = ("name", "peak_tflops", "memory_gb", "memory_bandwidth_gb_per_s")
_REQUIRED_INSTANCE = ("name", "gpu", "gpus")


def _key(name: str) -> str:
    """Matching key: case, spaces, dashes and underscores do not matter."""
    return re.sub(r"[\s_\-]+", "", str(name).lower())


def _num(row: dict, key: str, where: str, required: bool = True, positive: bool = True):
    v = row.get(key)
    if v is None:
        if required:
            raise SpecError(f"{where}: missing field {key!r}")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(f"{where}: field {key!r} must be a number, got {v!r}")
    if positive and v <= 0:
        raise SpecError(f"{where}: field {key!r} must be positive, got {v}")
    if v < 0 or v != v or v == float("inf"):
        raise SpecError(f"{where}: field {key!r} must be a finite number >= 0, got {v}")
    return v


def device_from_row(row: dict, where: str) -> Device:
    if not isinstance(row, dict):
        raise SpecError(f"{where}: a device is a mapping, got {row!r}")
    for k in _REQUIRED_DEVICE:
        if k not in row:
            raise SpecError(f"{where}: missing field {k!r}")
    unknown = set(row) - _DEVICE_KEYS
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    peaks = row["peak_tflops"]
    if not isinstance(peaks, dict) or "fp32" not in peaks:
        raise SpecError(f"{where}: peak_tflops must be a mapping with at least fp32")
    unknown_peaks = set(peaks) - {"fp32", "tf32", "fp16", "bf16", "fp32_matrix"}
    if unknown_peaks:
        raise SpecError(f"{where}.peak_tflops: unknown precision(s) {', '.join(sorted(map(str, unknown_peaks)))}; "
                        "known: fp32, tf32, fp16, bf16, fp32_matrix")
    pk = {d: _num(peaks, d, f"{where}.peak_tflops", required=(d == "fp32"))
          for d in ("fp32", "tf32", "fp16", "bf16", "fp32_matrix")}
    link = row.get("intra_node_link") or {"type": "none", "gb_per_s": 0}
    return Device(
        name=str(row["name"]),
        kind=str(row.get("kind", "gpu")),
        vendor=str(row.get("vendor", "")),
        generation=str(row.get("generation", "default")).lower(),
        fp32_tflops=float(pk["fp32"]),
        tf32_tflops=pk["tf32"],
        fp16_tflops=pk["fp16"],
        bf16_tflops=pk["bf16"],
        memory_bytes=int(_num(row, "memory_gb", where) * GIB),
        memory_bandwidth_gb_per_s=float(_num(row, "memory_bandwidth_gb_per_s", where)),
        sm_count=int(_num(row, "sm_count", where, required=False) or 0),
        boost_clock_mhz=float(_num(row, "boost_clock_mhz", where, required=False) or 0),
        link=Link(str(link.get("type", "none")), float(link.get("gb_per_s") or 0)),
        tdp_w=row.get("tdp_w"),
        source=str(row.get("source", "")),
        date=str(row.get("date", "")),
        aliases=tuple(str(a) for a in row.get("aliases") or ()),
        note=str(row.get("note", "") or ""),
        fp32_matrix_tflops=pk["fp32_matrix"],
    )


class Catalog:
    """Devices and instances by name or alias; unknown names get close-match suggestions.

    Built by adding files; :meth:`freeze` makes it read-only (``get_catalog`` returns frozen catalogs, shared
    by every caller: ``devices`` and ``instances`` are then read-only mappings and adding raises)."""

    def __init__(self) -> None:
        self._devices: dict[str, Device] = {}
        self._instances: dict[str, Instance] = {}
        self._device_keys: dict[str, str] = {}
        self._instance_keys: dict[str, str] = {}
        self._sources: list[str] = []
        self._frozen = False

    @property
    def devices(self) -> Mapping[str, Device]:
        return MappingProxyType(self._devices)

    @property
    def instances(self) -> Mapping[str, Instance]:
        return MappingProxyType(self._instances)

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(self._sources)

    def freeze(self) -> "Catalog":
        self._frozen = True
        return self

    def _check_open(self) -> None:
        if self._frozen:
            raise TypeError("this catalog is shared and read-only; build another with Catalog() and add_file")

    # --- loading --------------------------------------------------------
    def add_file(self, path: str | Path, text: str | None = None) -> None:
        self._check_open()
        label = str(path)
        if text is None:
            p = Path(path)
            if not p.exists():
                raise SpecError(f"catalog file {label!r} does not exist")
            text = p.read_text()
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise SpecError(f"{label}: not valid YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, dict) or not ({"devices", "instances"} & set(data)):
            raise SpecError(f"{label}: a catalog file has a 'devices' and/or 'instances' list")
        for i, row in enumerate(data.get("devices") or []):
            self.add_device(device_from_row(row, f"{label}: devices[{i}]"))
        for i, row in enumerate(data.get("instances") or []):
            self.add_instance_row(row, f"{label}: instances[{i}]")
        self._sources.append(label)

    def add_device(self, dev: Device) -> None:
        self._check_open()
        self._devices[dev.name] = dev
        for n in (dev.name, *dev.aliases):
            self._device_keys[_key(n)] = dev.name

    def add_instance_row(self, row: dict, where: str) -> None:
        self._check_open()
        if not isinstance(row, dict):
            raise SpecError(f"{where}: an instance is a mapping, got {row!r}")
        for k in _REQUIRED_INSTANCE:
            if k not in row:
                raise SpecError(f"{where}: missing field {k!r}")
        try:
            dev = self.device(str(row["gpu"]))
        except UnknownNameError as exc:
            raise SpecError(f"{where}: {exc}") from None
        inst = Instance(
            name=str(row["name"]),
            provider=str(row.get("provider", "")),
            device=dev,
            gpus=int(_num(row, "gpus", where)),
            usd_per_hour=_num(row, "usd_per_hour", where, required=False, positive=False),
            network_gbit_per_s=_num(row, "network_gbit_per_s", where, required=False),
            vcpus=row.get("vcpus"),
            memory_gb=row.get("memory_gb"),
            region=row.get("region"),
            source=str(row.get("source", "")),
            date=str(row.get("date", "")),
            note=str(row.get("note", "") or ""),
        )
        self._instances[inst.name] = inst
        self._instance_keys[_key(inst.name)] = inst.name

    # --- lookup -----------------------------------------------------------
    def device(self, name: str) -> Device:
        hit = self._device_keys.get(_key(name))
        if hit is None:
            raise UnknownNameError("GPU", name, list(self.devices) + [a for d in self.devices.values() for a in d.aliases if len(a) < 12])
        return self.devices[hit]

    def instance(self, name: str) -> Instance:
        hit = self._instance_keys.get(_key(name))
        if hit is None:
            raise UnknownNameError("instance", name, self.instances)
        return self.instances[hit]

    def instances_with(self, device: Device) -> list[Instance]:
        return [i for i in self.instances.values() if i.device.name == device.name]

    def cheapest_instance(self, device: Device, gpus: int) -> Instance | None:
        """The instance to run and price ``gpus`` of ``device`` on: whole instances that
        make up exactly that many (fewest nodes first, then cheapest per GPU), else
        the largest one (pro rata when fewer GPUs than it has are asked for)."""
        cands = [i for i in self.instances_with(device) if i.usd_per_hour is not None]
        if not cands:
            return None
        # whole instances that make up exactly ``gpus``: the fewest nodes, then the cheapest per GPU
        fits = [i for i in cands if gpus % i.gpus == 0]
        if fits:
            return min(fits, key=lambda i: (gpus // i.gpus, i.usd_per_hour / i.gpus))
        # else the largest one (rented whole, or pro rata when ``gpus`` is smaller)
        return min(cands, key=lambda i: (-i.gpus, i.usd_per_hour / i.gpus))


def _shipped(name: str) -> str:
    return resources.files("traincast.hardware").joinpath("data", name).read_text()


@functools.lru_cache(maxsize=8)
def _load(extra: tuple[str, ...]) -> Catalog:
    cat = Catalog()
    cat.add_file("gpus.yaml", _shipped("gpus.yaml"))
    cat.add_file("instances.yaml", _shipped("instances.yaml"))
    for f in extra:
        cat.add_file(f)
    return cat.freeze()


def get_catalog(extra_files: Iterable[str | Path] = ()) -> Catalog:
    """The shipped catalog plus any user catalog files (later rows override earlier)."""
    return _load(tuple(str(f) for f in extra_files))


@functools.lru_cache(maxsize=1)
def efficiency_table() -> dict:
    """Per-generation default parameters of the roofline (``efficiency.yaml``)."""
    return yaml.safe_load(_shipped("efficiency.yaml"))


@functools.lru_cache(maxsize=1)
def system_table() -> dict:
    """System constants with their sources (``system.yaml``): tensor-core generations, memory reserve and
    allocator slack, default network and collective latencies, the DDP bucket size."""
    return yaml.safe_load(_shipped("system.yaml"))
