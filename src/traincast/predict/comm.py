"""Gradient synchronisation of data-parallel training.

The default, ``nccl``, times each bucket's all-reduce with the topology-aware collective model fitted to NCCL
measurements (:mod:`traincast.predict.collectives`: NVSwitch / NVLink mesh / PCIe inside a node, the network
across nodes, efficiency by message size). The other methods are PALEO's, with an alpha-beta model (``alpha`` latency per message
step, ``bandwidth`` bytes per second one direction per GPU) for ``P``
processes and a message of ``size_bytes``:

- ring all-reduce: ``2 (P-1)/P * size / B + 2 (P-1) alpha`` (scatter-reduce + all-gather)
- tree all-reduce (PALEO): reduce up and broadcast down a binary tree,
  ``2 ceil(log2 P) (alpha + size / B)``
- butterfly all-reduce (PALEO): ``ceil(log2 P)`` rounds of full-duplex exchange,
  ``ceil(log2 P) (alpha + size / B)``
- parameter server, single: the server's link carries ``(P-1)`` pushes and
  ``(P-1)`` pulls of the whole model: ``2 (P-1) size / B + 2 alpha``
- parameter server, sharded over all P workers: each sends and receives
  ``(P-1)/P`` of the model: ``2 (P-1)/P * size / B + 2 alpha``

Across nodes the bandwidth is the smaller of the GPU link and the node's
network share; latency is the inter-node one.

Overlap (DDP/Horovod): gradients are grouped in buckets (DDP's 25 MiB, ``system.yaml``) that
become ready in order during the backward pass; each bucket's all-reduce
starts when it is ready and the previous one is done. The exposed
communication is what finishes after the backward pass ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from traincast.hardware.catalog import system_table
from traincast.hardware.records import Cluster
from traincast.registry import Registry

# name -> f(size_bytes, p, bandwidth_bytes_per_s, alpha_s) -> seconds, for p >= 2 and size > 0
SYNC_METHODS: Registry = Registry("sync method")


@SYNC_METHODS.register("nccl", help="NCCL all-reduce, topology-aware, fitted to NCCL measurements (the default)")
def _nccl(size: float, p: int, b: float, alpha: float) -> float:
    """Without a cluster: one flat NVSwitch-like level of bandwidth ``b`` (``gradient_sync`` uses the cluster)."""
    from traincast.predict.collectives import Group, collective_s

    g = Group(ranks=p, ranks_per_node=p, nodes=1, gpus_per_node=p, link_bytes_per_s=b, link_type="nvlink3",
              node_network_bytes_per_s=b)
    return collective_s("all-reduce", size, g)


@SYNC_METHODS.register("ring", help="ring all-reduce, alpha-beta with the datasheet link (PALEO)")
def _ring(size: float, p: int, b: float, alpha: float) -> float:
    return 2 * (p - 1) / p * size / b + 2 * (p - 1) * alpha


@SYNC_METHODS.register("tree", help="reduce up and broadcast down a binary tree (PALEO)")
def _tree(size: float, p: int, b: float, alpha: float) -> float:
    return 2 * math.ceil(math.log2(p)) * (alpha + size / b)


@SYNC_METHODS.register("butterfly", help="log2 P rounds of full-duplex exchange (PALEO)")
def _butterfly(size: float, p: int, b: float, alpha: float) -> float:
    return math.ceil(math.log2(p)) * (alpha + size / b)


@SYNC_METHODS.register("ps", help="one parameter server: its link carries every push and pull")
def _ps(size: float, p: int, b: float, alpha: float) -> float:
    return 2 * (p - 1) * size / b + 2 * alpha


@SYNC_METHODS.register("ps-sharded", help="parameter servers sharded over all workers")
def _ps_sharded(size: float, p: int, b: float, alpha: float) -> float:
    return 2 * (p - 1) / p * size / b + 2 * alpha


def ddp_bucket_bytes() -> int:
    """PyTorch DDP's gradient bucket (``system.yaml``)."""
    return int(system_table()["collectives"]["ddp_bucket_bytes"])


def allreduce_s(method: str, size_bytes: float, p: int, bandwidth_bytes_per_s: float, alpha_s: float) -> float:
    """Seconds to synchronise ``size_bytes`` of gradients among ``p`` workers."""
    f = SYNC_METHODS.get(method)
    if p <= 1 or size_bytes <= 0:
        return 0.0
    return f(size_bytes, p, bandwidth_bytes_per_s, alpha_s)


def link_of(cluster: Cluster) -> tuple[float, float]:
    """(bandwidth bytes/s, latency s) that bounds a collective over the whole cluster."""
    if cluster.nodes <= 1:
        return cluster.intra_bytes_per_s, cluster.latency_intra_s
    # one NIC budget per node shared by its GPUs' rings; bounded by the GPU link too
    return min(cluster.intra_bytes_per_s, cluster.inter_bytes_per_s), cluster.latency_inter_s


@dataclass(frozen=True)
class CommTime:
    total_s: float  # all synchronisation, if nothing overlapped
    exposed_s: float  # what the step waits for after the backward pass
    buckets: int
    bytes: int
    method: str


def gradient_sync(
    grad_bytes: int,
    cluster: Cluster,
    method: str = "nccl",
    backward_s: float = 0.0,
    overlap: bool = True,
    bucket_bytes: int | None = None,
) -> CommTime:
    """Communication time of one step's gradient synchronisation (``bucket_bytes``: DDP's by default)."""
    method = SYNC_METHODS.canonical(method)
    bucket_bytes = bucket_bytes or ddp_bucket_bytes()
    p = cluster.gpus
    if p <= 1 or grad_bytes <= 0:
        return CommTime(0.0, 0.0, 0, int(grad_bytes), method)
    bw, alpha = link_of(cluster)
    n = max(1, math.ceil(grad_bytes / bucket_bytes)) if overlap else 1
    sizes = [bucket_bytes] * (n - 1) + [grad_bytes - bucket_bytes * (n - 1)]
    if method == "nccl":
        from traincast.predict.collectives import Group, collective_s

        group = Group.of_cluster(cluster, p)
        per = [collective_s("all-reduce", s, group) for s in sizes]
    else:
        per = [allreduce_s(method, s, p, bw, alpha) for s in sizes]
    total = sum(per)
    if not overlap:
        return CommTime(total, total, 1, int(grad_bytes), method)
    # bucket k is ready when the backward pass has produced its share of gradients
    finish = 0.0
    done_bytes = 0
    for s, t in zip(sizes, per):
        done_bytes += s
        ready = backward_s * done_bytes / grad_bytes
        finish = max(finish, ready) + t
    return CommTime(total, max(0.0, finish - backward_s), n, int(grad_bytes), method)
