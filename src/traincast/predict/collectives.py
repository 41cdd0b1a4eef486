"""Collective communication time: one topology-aware model for every collective a parallel strategy implies.

A collective of kind ``k`` moving a buffer of ``size`` bytes among ``p`` ranks puts ``bus_bytes = f_k(p) x size``
on each rank's busiest link (NCCL's *bus bandwidth* convention, ``nccl-tests/doc/PERFORMANCE.md``: ring
all-reduce ``2(p-1)/p``, all-gather and reduce-scatter ``(p-1)/p`` of the full buffer, send/recv and broadcast
``1``, all-to-all ``(p-1)/p``). Its time is::

    t = latency + bus_bytes / B x (1 + (half_bytes / bus_bytes) ** shape)

- ``B`` is the bandwidth of the slowest level the group spans: inside a node the fabric's bus efficiency x the
  device's datasheet link bandwidth (NVSwitch: one efficiency; NVLink hybrid cube-mesh, e.g. DGX-1 V100: an
  efficiency per number of GPUs of the node in the group, since the rings NCCL can build depend on which GPUs
  take part; PCIe); across nodes the network's bus efficiency x the node's network bandwidth x the share of
  the node's GPUs that are in the group (groups that run at the same time on one node share its NICs).
- ``latency``: inside a node ``latency_us + step_latency_us x (p - 1)`` (ring steps), across nodes the
  network's ``latency_us + step_latency_us x log2(nodes)`` (NCCL's trees) is added; kinds with half the
  steps of an all-reduce (all-gather, reduce-scatter) take half the step term; send/recv takes the base.
- ``(half_bytes / bus_bytes) ** shape``: small messages reach a smaller share of the bandwidth (protocol and
  pipelining), fitted per fabric.

The parameters are fitted to NCCL measurements (``benchmarks/fit_collectives.py`` writes
``hardware/data/collectives.yaml``: all-reduce inside a node on A100 NVSwitch and V100 DGX-1 NVLink from
vTrain, and on 1-128 A100s over InfiniBand from Echo); fabrics without measurements (PCIe, AMD Infinity
Fabric) use the NVSwitch fit's shape with their own datasheet link bandwidth and say so in
:func:`fabric_note`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources

from traincast import yamlio

from traincast.registry import Registry


# --- kinds ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CollectiveKind:
    """Bus bytes per buffer byte and the latency steps, relative to a ring all-reduce's, of one collective."""

    bus_factor: object  # (p) -> float
    step_share: float  # latency steps as a share of an all-reduce's
    net_share: float = 1.0  # share of the network latency term


COLLECTIVES: Registry[CollectiveKind] = Registry("collective")
COLLECTIVES.add("all-reduce", CollectiveKind(lambda p: 2 * (p - 1) / p, 1.0),
                help="ring/tree all-reduce: 2(p-1)/p of the buffer over each rank's link")
COLLECTIVES.add("all-gather", CollectiveKind(lambda p: (p - 1) / p, 0.5),
                help="every rank ends with the whole buffer: (p-1)/p of it over each link")
COLLECTIVES.add("reduce-scatter", CollectiveKind(lambda p: (p - 1) / p, 0.5),
                help="every rank ends with 1/p of the reduced buffer: (p-1)/p of it over each link")
COLLECTIVES.add("broadcast", CollectiveKind(lambda p: 1.0, 0.5), help="one rank's buffer to all (pipelined ring)")
COLLECTIVES.add("send-recv", CollectiveKind(lambda p: 1.0, 0.0, 0.0), help="point to point (pipeline stages)")
COLLECTIVES.add("all-to-all", CollectiveKind(lambda p: (p - 1) / p, 0.5),
                help="every rank sends 1/p of its buffer to each other rank (mixture-of-experts dispatch)")


# --- parameters --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FabricParams:
    """One level of the topology: bus efficiency (fraction of the datasheet bandwidth), latencies, small-message
    shape. ``efficiency_by_ranks``: per number of the node's GPUs in the group (mesh fabrics)."""

    name: str
    bus_efficiency: float
    latency_us: float
    step_latency_us: float
    half_bytes: float = 0.0
    shape: float = 0.5
    efficiency_by_ranks: Mapping[int, float] = field(default_factory=dict)
    fitted: bool = True
    source: str = ""

    def efficiency(self, ranks: int) -> float:
        if not self.efficiency_by_ranks:
            return self.bus_efficiency
        table = dict(self.efficiency_by_ranks)
        if ranks in table:
            return table[ranks]
        ks = sorted(table)
        lo = max((k for k in ks if k < ranks), default=ks[0])
        hi = min((k for k in ks if k > ranks), default=ks[-1])
        if lo == hi:
            return table[lo]
        return table[lo] + (table[hi] - table[lo]) * (ranks - lo) / (hi - lo)

    def size_factor(self, bus_bytes: float) -> float:
        if self.half_bytes <= 0 or bus_bytes <= 0:
            return 1.0
        return 1.0 + (self.half_bytes / bus_bytes) ** self.shape

    def to_dict(self) -> dict:
        d = {"bus_efficiency": self.bus_efficiency, "latency_us": self.latency_us,
             "step_latency_us": self.step_latency_us, "half_bytes": self.half_bytes, "shape": self.shape,
             "fitted": self.fitted, "source": self.source}
        if self.efficiency_by_ranks:
            d["efficiency_by_ranks"] = {int(k): float(v) for k, v in self.efficiency_by_ranks.items()}
        return d

    @classmethod
    def from_dict(cls, name: str, d: Mapping) -> "FabricParams":
        return cls(name=name, bus_efficiency=float(d["bus_efficiency"]), latency_us=float(d["latency_us"]),
                   step_latency_us=float(d.get("step_latency_us", 0.0)), half_bytes=float(d.get("half_bytes", 0.0)),
                   shape=float(d.get("shape", 0.5)),
                   efficiency_by_ranks={int(k): float(v) for k, v in (d.get("efficiency_by_ranks") or {}).items()},
                   fitted=bool(d.get("fitted", True)), source=str(d.get("source", "")))


@dataclass(frozen=True)
class CollectiveParams:
    """Every fabric's parameters (``hardware/data/collectives.yaml``)."""

    intra: Mapping[str, FabricParams]
    network: FabricParams
    source: str = ""
    date: str = ""

    def fabric(self, name: str) -> FabricParams:
        if name in self.intra:
            return self.intra[name]
        base = self.intra["nvswitch"]
        return replace(base, name=name, efficiency_by_ranks={}, fitted=False,
                       source=f"no measurements of {name}: the nvswitch fit's efficiency and shape")

    def to_table(self) -> dict:
        return {"source": self.source, "date": self.date,
                "intra_node": {k: v.to_dict() for k, v in self.intra.items()},
                "network": self.network.to_dict()}

    @classmethod
    def from_table(cls, t: Mapping) -> "CollectiveParams":
        return cls(intra={k: FabricParams.from_dict(k, v) for k, v in t["intra_node"].items()},
                   network=FabricParams.from_dict("network", t["network"]),
                   source=str(t.get("source", "")), date=str(t.get("date", "")))


@functools.lru_cache(maxsize=1)
def default_params() -> CollectiveParams:
    """The fitted parameters shipped in ``hardware/data/collectives.yaml``."""
    text = resources.files("traincast.hardware").joinpath("data", "collectives.yaml").read_text()
    return CollectiveParams.from_table(yamlio.safe_load(text))


def fabric_of(link_type: str) -> str:
    """The intra-node fabric of a device's link: ``nvswitch`` (NVLink 3 and later, HGX/DGX boards),
    ``nvlink-mesh`` (NVLink 1/2, DGX-1 hybrid cube-mesh), ``pcie``, ``xgmi`` (AMD Infinity Fabric), ``none``."""
    t = (link_type or "none").lower()
    if t.startswith("nvlink"):
        gen = t[len("nvlink"):]
        return "nvlink-mesh" if gen in ("", "1", "2") else "nvswitch"
    if t.startswith("pcie"):
        return "pcie"
    if "infinity" in t or t.startswith("xgmi"):
        return "xgmi"
    return "none"


def fabric_note(link_type: str, params: CollectiveParams | None = None) -> str | None:
    """A line for the forecast's notes when the device's fabric has no measurements behind it."""
    params = params or default_params()
    f = fabric_of(link_type)
    if f == "none" or f in params.intra:
        return None
    return f"collectives on {f} links use the NVSwitch fit's efficiency (no {f} measurements were fitted)"


# --- groups ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Group:
    """The ranks of one collective and where they sit: ``ranks_per_node`` of them on each of ``nodes`` nodes of
    ``gpus_per_node`` GPUs; ``link_bytes_per_s`` the device's datasheet link (per direction), ``link_type`` its
    kind, ``node_network_bytes_per_s`` the node's network (all its NICs)."""

    ranks: int
    ranks_per_node: int
    nodes: int
    gpus_per_node: int
    link_bytes_per_s: float
    link_type: str
    node_network_bytes_per_s: float

    @classmethod
    def of_cluster(cls, cluster, ranks: int, ranks_per_node: int | None = None) -> "Group":
        """``ranks`` GPUs of ``cluster``, packed into as few nodes as possible unless ``ranks_per_node`` says."""
        g = cluster.gpus_per_node
        rpn = ranks_per_node if ranks_per_node is not None else min(ranks, g)
        rpn = max(1, min(rpn, ranks))
        nodes = max(1, math.ceil(ranks / rpn))
        return cls(ranks=ranks, ranks_per_node=rpn, nodes=nodes, gpus_per_node=g,
                   link_bytes_per_s=cluster.intra_bytes_per_s, link_type=cluster.device.link.type,
                   node_network_bytes_per_s=cluster.inter_bytes_per_s)


def collective_s(kind: str, size_bytes: float, group: Group, params: CollectiveParams | None = None) -> float:
    """Seconds for one collective of ``kind`` (see ``COLLECTIVES``) over ``group`` with a buffer of ``size_bytes``
    (the whole buffer: the all-reduced tensor, the gathered output, the reduce-scattered input, the message)."""
    k = COLLECTIVES.get(kind)
    p = group.ranks
    if p <= 1 or size_bytes <= 0:
        return 0.0
    params = params or default_params()
    bus = k.bus_factor(p) * float(size_bytes)
    rates, factors = [], []
    lat = 0.0
    intra_ranks = group.ranks_per_node
    if intra_ranks > 1 or group.nodes == 1:
        fab = params.fabric(fabric_of(group.link_type))
        rates.append(fab.efficiency(intra_ranks) * group.link_bytes_per_s)
        factors.append(fab.size_factor(bus))
        steps = max(1, intra_ranks - 1)
        lat += fab.latency_us * 1e-6 + k.step_share * fab.step_latency_us * 1e-6 * steps
    if group.nodes > 1:
        net = params.network
        share = group.ranks_per_node / max(1, group.gpus_per_node)
        if kind == "send-recv":  # one GPU's message over the node's network, its share of the NICs
            share = 1.0 / max(1, group.gpus_per_node)
        rates.append(net.bus_efficiency * group.node_network_bytes_per_s * share)
        factors.append(net.size_factor(bus))
        lat += k.net_share * (net.latency_us * 1e-6 + k.step_share * net.step_latency_us * 1e-6
                              * math.log2(group.nodes))
    # the slowest level bounds the bandwidth; its small-message factor applies
    i = min(range(len(rates)), key=lambda j: rates[j] / factors[j])
    return lat + bus / max(rates[i], 1.0) * factors[i]


def bus_bandwidth_gb_per_s(kind: str, size_bytes: float, group: Group, params: CollectiveParams | None = None) -> float:
    """The bus bandwidth (GB/s) the model predicts, as nccl-tests reports it."""
    t = collective_s(kind, size_bytes, group, params)
    return COLLECTIVES.get(kind).bus_factor(group.ranks) * size_bytes / t / 1e9 if t > 0 else float("inf")
