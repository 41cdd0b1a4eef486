"""The hardware catalog: shipped YAML (each row with source and date) plus user files."""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from types import MappingProxyType
from typing import Annotated, Literal, Union
from pathlib import Path

import yaml

from pydantic import Field

from traincast import yamlio
from traincast.errors import SpecError, UnknownNameError, read_text_file
from traincast.hardware.records import GIB, Device, Instance, Link
from traincast.schema import Document, NonNegativeFloat, PositiveFloat, parse

def _key(name: str) -> str:
    """Matching key: case, spaces, dashes and underscores do not matter."""
    return re.sub(r"[\s_\-]+", "", str(name).lower())


class _Peaks(Document):
    """Dense peaks, TFLOP/s: fp32 on vector units; tf32/fp16/bf16 on tensor or matrix units where they exist;
    fp32_matrix: full-precision FP32 on matrix units (AMD CDNA)."""

    fp32: PositiveFloat
    tf32: PositiveFloat | None = None
    fp16: PositiveFloat | None = None
    bf16: PositiveFloat | None = None
    fp32_matrix: PositiveFloat | None = None
    fp8: PositiveFloat | None = None  # FP8 (E4M3/E5M2) tensor cores, per-tensor scaled (Hopper, Ada, Blackwell)
    mxfp8: PositiveFloat | None = None  # MXFP8 block-scaled FP8 tensor cores (Blackwell)
    fp4: PositiveFloat | None = None  # NVFP4 / MXFP4 tensor cores (Blackwell)


class _LinkRow(Document):
    type: str = "none"
    gb_per_s: NonNegativeFloat = 0.0


Text = Union[str, datetime.date]  # YAML reads an unquoted 2024-05-01 as a date


class DeviceRow(Document):
    """A device of a catalog file (units in the field names; see the header of ``gpus.yaml``)."""

    name: Annotated[str, Field(min_length=1, max_length=200)]
    kind: Literal["gpu", "cpu"] = "gpu"
    vendor: str = ""
    generation: str = "default"
    peak_tflops: _Peaks
    memory_gb: PositiveFloat
    memory_bandwidth_gb_per_s: PositiveFloat
    sm_count: Annotated[int, Field(strict=True, ge=0, le=10**7)] = 0
    boost_clock_mhz: NonNegativeFloat = 0.0
    base_clock_mhz: PositiveFloat | None = None
    fp32_int32_shared_lanes_per_sm: Annotated[int, Field(strict=True, ge=0, le=4096)] = 0
    intra_node_link: _LinkRow | None = None
    # GPUs of one NVLink domain (all-to-all at the link bandwidth): 8 on an HGX board, 72 in a GB200/GB300 NVL72
    # rack (18 trays of 4), 2 or 4 for PCIe cards with NVLink bridges; None: the node (instance) is the domain
    nvlink_domain_gpus: Annotated[int, Field(strict=True, ge=1, le=100_000)] | None = None
    tdp_w: PositiveFloat | None = None
    source: str = ""
    date: Text = ""
    aliases: list[str] = []
    note: str | None = None


class InstanceRow(Document):
    """An instance (VM type or server) of a catalog file; ``gpu`` names a device of the catalog."""

    name: Annotated[str, Field(min_length=1, max_length=200)]
    provider: str = ""
    gpu: Annotated[str, Field(min_length=1)]
    gpus: Annotated[int, Field(strict=True, ge=1, le=1_000_000)]
    usd_per_hour: NonNegativeFloat | None = None
    network_gbit_per_s: PositiveFloat | None = None
    vcpus: Annotated[int, Field(strict=True, ge=1)] | None = None
    memory_gb: PositiveFloat | None = None
    region: str | None = None
    source: str = ""
    date: Text = ""
    note: str | None = None


class CatalogFile(Document):
    devices: list[DeviceRow] = []
    instances: list[InstanceRow] = []


def _device(r: DeviceRow) -> Device:
    pk = r.peak_tflops
    link = r.intra_node_link or _LinkRow()
    return Device(
        name=r.name, kind=r.kind, vendor=r.vendor, generation=r.generation.lower(),
        fp32_tflops=pk.fp32, tf32_tflops=pk.tf32, fp16_tflops=pk.fp16, bf16_tflops=pk.bf16,
        memory_bytes=int(r.memory_gb * GIB), memory_bandwidth_gb_per_s=r.memory_bandwidth_gb_per_s,
        sm_count=r.sm_count, boost_clock_mhz=r.boost_clock_mhz, link=Link(link.type, link.gb_per_s),
        tdp_w=r.tdp_w, source=r.source, date=str(r.date), aliases=tuple(r.aliases), note=r.note or "",
        fp32_matrix_tflops=pk.fp32_matrix, base_clock_mhz=r.base_clock_mhz,
        fp32_int32_shared_lanes_per_sm=r.fp32_int32_shared_lanes_per_sm,
        fp8_tflops=pk.fp8, mxfp8_tflops=pk.mxfp8, fp4_tflops=pk.fp4, nvlink_domain_gpus=r.nvlink_domain_gpus,
    )


def device_from_row(row: dict, where: str) -> Device:
    """A catalog row (a mapping read from YAML) as a Device; SpecError naming the field otherwise."""
    return _device(parse(DeviceRow, row, where))


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
            text = read_text_file(p, "catalog file")
        self._add_doc(label, _parse_catalog(label, text))

    def _add_doc(self, label: str, doc: CatalogFile) -> None:
        self._check_open()
        for row in doc.devices:
            self.add_device(_device(row))
        for i, row in enumerate(doc.instances):
            self._add_instance(row, f"{label}: instances[{i}]")
        self._sources.append(label)

    def add_device(self, dev: Device) -> None:
        self._check_open()
        self._devices[dev.name] = dev
        for n in (dev.name, *dev.aliases):
            self._device_keys[_key(n)] = dev.name

    def add_instance_row(self, row: dict, where: str) -> None:
        """An instance from a mapping (as read from YAML), validated."""
        self._add_instance(parse(InstanceRow, row, where), where)

    def _add_instance(self, r: InstanceRow, where: str) -> None:
        self._check_open()
        try:
            dev = self.device(r.gpu)
        except UnknownNameError as exc:
            raise SpecError(f"{where}: {exc}") from None
        inst = Instance(name=r.name, provider=r.provider, device=dev, gpus=r.gpus, usd_per_hour=r.usd_per_hour,
                        network_gbit_per_s=r.network_gbit_per_s, vcpus=r.vcpus, memory_gb=r.memory_gb,
                        region=r.region, source=r.source, date=str(r.date), note=r.note or "")
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

    def reference_system(self, device: Device) -> Instance | None:
        """An unpriced system row carrying ``device`` (a vendor reference system such as a DGX or an NVL72 rack):
        its GPUs per node (NVLink domain) and network where no priced instance carries the device."""
        cands = [i for i in self.instances_with(device) if i.usd_per_hour is None]
        return max(cands, key=lambda i: i.gpus) if cands else None


def _shipped(name: str) -> str:
    return resources.files("traincast.hardware").joinpath("data", name).read_text()


def _parse_catalog(label: str, text: str) -> CatalogFile:
    """A catalog file's text read and checked (SpecError naming ``label`` and what is wrong)."""
    try:
        data = yamlio.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise SpecError(f"{label}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or not ({"devices", "instances"} & set(data)):
        raise SpecError(f"{label}: a catalog file has a 'devices' and/or 'instances' list")
    return parse(CatalogFile, data, label)


@functools.cache
def _shipped_doc(name: str) -> CatalogFile:
    """A shipped catalog file, read and checked once (the document is frozen): every catalog starts from it."""
    return _parse_catalog(name, _shipped(name))


@functools.lru_cache(maxsize=8)
def _load(extra: tuple[str, ...]) -> Catalog:
    cat = Catalog()
    cat._add_doc("gpus.yaml", _shipped_doc("gpus.yaml"))
    cat._add_doc("instances.yaml", _shipped_doc("instances.yaml"))
    for f in extra:
        cat.add_file(f)
    return cat.freeze()


def get_catalog(extra_files: Iterable[str | Path] = ()) -> Catalog:
    """The shipped catalog plus any user catalog files (later rows override earlier)."""
    return _load(tuple(str(f) for f in extra_files))


@functools.lru_cache(maxsize=1)
def efficiency_table() -> dict:
    """Per-generation default parameters of the roofline (``efficiency.yaml``)."""
    return yamlio.safe_load(_shipped("efficiency.yaml"))


@functools.lru_cache(maxsize=1)
def system_table() -> dict:
    """System constants with their sources (``system.yaml``): tensor-core generations, memory reserve and
    allocator slack, default network and collective latencies, the DDP bucket size."""
    return yamlio.safe_load(_shipped("system.yaml"))
