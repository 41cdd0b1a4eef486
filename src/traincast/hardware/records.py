"""Hardware records: devices, links, instances, clusters. Units are in the names."""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1024**3


@dataclass(frozen=True)
class Link:
    """How a device talks to its peers inside a node: per GPU, per direction."""

    type: str  # pcie3, nvlink3, ...
    gb_per_s: float  # GB/s (bytes), one direction


@dataclass(frozen=True)
class Device:
    """One accelerator (or one CPU socket) with its datasheet peaks."""

    name: str
    kind: str  # gpu | cpu
    vendor: str
    generation: str
    fp32_tflops: float
    tf32_tflops: float | None
    fp16_tflops: float | None
    bf16_tflops: float | None
    memory_bytes: int
    memory_bandwidth_gb_per_s: float
    sm_count: int
    boost_clock_mhz: float
    link: Link
    tdp_w: float | None = None
    source: str = ""
    date: str = ""
    aliases: tuple[str, ...] = ()
    note: str = ""
    # full-precision FP32 on matrix units (AMD CDNA MFMA; rocBLAS/MIOpen run fp32 GEMMs and convolutions there)
    fp32_matrix_tflops: float | None = None
    # the clock the board holds at its TDP under the heaviest load (datasheet "base clock"); None: not given
    base_clock_mhz: float | None = None
    # FP32 lanes per SM that are shared with INT32 work (GA10x, AD10x: 64 of 128); 0: all FP32 lanes dedicated
    fp32_int32_shared_lanes_per_sm: int = 0
    # dense FP8 / MXFP8 / FP4 tensor-core peaks (None: the device has no such units)
    fp8_tflops: float | None = None
    mxfp8_tflops: float | None = None
    fp4_tflops: float | None = None
    # GPUs in one NVLink domain (None: the node is the domain)
    nvlink_domain_gpus: int | None = None

    @property
    def has_tensor_cores(self) -> bool:
        """Whether the device's generation has tensor / matrix units (``system.yaml``)."""
        from traincast.hardware.catalog import system_table

        return self.generation in system_table()["tensor_core_generations"]

    def peak_flops_per_s(self, dtype: str) -> float:
        """Dense peak for ``dtype`` in fp32 | tf32 | fp16 | bf16 | fp32_matrix | fp8 | mxfp8 | fp4, falling back to
        fp32."""
        tflops = {
            "fp32": self.fp32_tflops,
            "fp32_matrix": self.fp32_matrix_tflops,
            "tf32": self.tf32_tflops,
            "fp16": self.fp16_tflops,
            "bf16": self.bf16_tflops,
            "fp8": self.fp8_tflops,
            "mxfp8": self.mxfp8_tflops,
            "fp4": self.fp4_tflops,
        }.get(dtype)
        return (tflops or self.fp32_tflops) * 1e12

    @property
    def fp32_lanes_per_sm(self) -> float:
        """FP32 lanes per SM implied by the datasheet FP32 peak (2 FLOPs per lane per cycle at the boost clock);
        0 where the catalog lacks SM count or clock."""
        if not self.sm_count or not self.boost_clock_mhz:
            return 0.0
        return self.fp32_tflops * 1e12 / (2 * self.sm_count * self.boost_clock_mhz * 1e6)

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gb_per_s * 1e9

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


@dataclass(frozen=True)
class Instance:
    """A VM type or a server: devices, price, network."""

    name: str
    provider: str
    device: Device
    gpus: int
    usd_per_hour: float | None
    network_gbit_per_s: float | None = None
    vcpus: int | None = None
    memory_gb: float | None = None
    region: str | None = None
    source: str = ""
    date: str = ""
    note: str = ""

    @property
    def gpu(self) -> Device:
        return self.device


def _network(key: str) -> float:
    from traincast.hardware.catalog import system_table

    return float(system_table()["network"][key])


@dataclass(frozen=True)
class Cluster:
    """``nodes`` x ``gpus_per_node`` identical devices."""

    device: Device
    gpus_per_node: int = 1
    nodes: int = 1
    intra_node_gb_per_s: float | None = None  # per GPU, per direction; default: the device's link
    inter_node_gbit_per_s: float = field(default_factory=lambda: _network("default_inter_node_gbit_per_s"))
    usd_per_hour: float | None = None  # whole cluster
    instance: str | None = None
    latency_intra_s: float = field(default_factory=lambda: _network("latency_intra_node_s"))
    latency_inter_s: float = field(default_factory=lambda: _network("latency_inter_node_s"))

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def intra_bytes_per_s(self) -> float:
        gbps = self.intra_node_gb_per_s if self.intra_node_gb_per_s is not None else self.device.link.gb_per_s
        return max(gbps, 1e-3) * 1e9

    @property
    def inter_bytes_per_s(self) -> float:
        return self.inter_node_gbit_per_s * 1e9 / 8
