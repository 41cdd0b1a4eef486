"""Pipeline schedules, simulated micro-batch by micro-batch, and the closed forms checked against the simulation.

A pipeline of ``p`` GPUs runs ``m`` micro-batches; GPU ``d`` holds ``V`` model chunks (virtual stages
``v x p + d``; V = 1 except for interleaved 1F1B). Each chunk's forward takes ``f[c]`` and backward ``b[c]``
seconds (c the virtual stage), and a message between consecutive virtual stages takes ``comm_s``. Each GPU
runs its own list of operations in the order its schedule says (:func:`device_orders`):

- **GPipe**: every forward, then every backward.
- **1F1B** (PipeDream-Flush, Megatron's default): ``p - d - 1`` warm-up forwards, then one forward and one
  backward in turn, then the remaining backwards.
- **Interleaved 1F1B** (Narayanan et al. 2021): micro-batches in groups of ``p``, chunk by chunk; warm-up
  ``(p - d - 1) x 2 + (V - 1) x p`` forwards (Megatron-LM's schedule).

An operation starts when its GPU is free and its input has arrived (forward: the previous virtual stage's
forward of the micro-batch plus ``comm_s``; backward: the next virtual stage's backward plus ``comm_s`` and
its own forward). :func:`simulate` gives the makespan, each GPU's busy time and end time, and the largest
number of micro-batch chunks whose activations a GPU holds at once. :func:`closed_form` is what the layout
search uses; the tests check it against :func:`simulate`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class PipelineResult:
    makespan_s: float
    busy_s: tuple[float, ...]  # per GPU
    end_s: tuple[float, ...]  # per GPU: when its last backward ends
    in_flight: tuple[int, ...]  # per GPU: most micro-batch chunks with activations held at once

    @property
    def bubble_share(self) -> float:
        """Idle share of the GPUs' time: 1 - mean busy / makespan."""
        if self.makespan_s <= 0:
            return 0.0
        return max(0.0, 1.0 - sum(self.busy_s) / len(self.busy_s) / self.makespan_s)


def device_orders(p: int, m: int, v: int = 1, schedule: str = "1f1b") -> list[list[tuple[str, int, int]]]:
    """Per GPU, its operations in order: ('F' | 'B', micro-batch, chunk)."""
    orders = []
    for d in range(p):
        if schedule == "gpipe":
            ops = [("F", j, c) for c in range(v) for j in range(m)] + [("B", j, c) for c in reversed(range(v)) for j in range(m)]
            orders.append(ops)
            continue
        if v == 1:
            warm = min(p - d - 1, m)
            ops = [("F", j, 0) for j in range(warm)]
            f, b = warm, 0
            while f < m:
                ops.append(("F", f, 0))
                f += 1
                ops.append(("B", b, 0))
                b += 1
            ops += [("B", j, 0) for j in range(b, m)]
            orders.append(ops)
            continue
        # interleaved: the k-th forward of a GPU is micro-batch (k // (p v)) p + k % p of chunk (k // p) % v
        total = m * v

        def fwd(k):
            return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

        def bwd(k):
            return ("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

        warm = min((p - d - 1) * 2 + (v - 1) * p, total)
        ops = [fwd(k) for k in range(warm)]
        fk, bk = warm, 0
        while fk < total:
            ops.append(fwd(fk))
            fk += 1
            ops.append(bwd(bk))
            bk += 1
        ops += [bwd(k) for k in range(bk, total)]
        orders.append(ops)
    return orders


def simulate(f: list[float], b: list[float], m: int, p: int, v: int = 1, comm_s: float = 0.0,
             schedule: str = "1f1b") -> PipelineResult:
    """Simulate one step. ``f``/``b``: per virtual stage (``p x v`` entries, virtual stage ``c x p + d`` is chunk
    ``c`` of GPU ``d``), seconds per micro-batch."""
    n_virtual = p * v
    if len(f) != n_virtual or len(b) != n_virtual:
        raise ValueError(f"need {n_virtual} forward and backward times, got {len(f)} and {len(b)}")
    orders = device_orders(p, m, v, schedule)
    done: dict[tuple[str, int, int], float] = {}  # (kind, micro-batch, virtual stage) -> end time
    pos = [0] * p
    free = [0.0] * p
    busy = [0.0] * p
    held = [0] * p
    peak = [0] * p
    remaining = sum(len(o) for o in orders)
    queue = deque(range(p))
    stalled = 0
    while remaining:
        if not queue:
            raise RuntimeError("pipeline schedule deadlocked")
        d = queue.popleft()
        progressed = False
        while pos[d] < len(orders[d]):
            kind, j, c = orders[d][pos[d]]
            vs = c * p + d
            if kind == "F":
                dep = done.get(("F", j, vs - 1)) if vs > 0 else 0.0
                if dep is None:
                    break
                ready = dep + (comm_s if vs > 0 else 0.0)
                dur = f[vs]
            else:
                own = done.get(("F", j, vs))
                nxt = done.get(("B", j, vs + 1)) if vs < n_virtual - 1 else own
                if own is None or nxt is None:
                    break
                ready = max(own, nxt + (comm_s if vs < n_virtual - 1 else 0.0))
                dur = b[vs]
            start = max(free[d], ready)
            free[d] = start + dur
            busy[d] += dur
            done[(kind, j, vs)] = free[d]
            held[d] += 1 if kind == "F" else -1
            peak[d] = max(peak[d], held[d])
            pos[d] += 1
            remaining -= 1
            progressed = True
        if pos[d] < len(orders[d]):
            queue.append(d)
        stalled = 0 if progressed else stalled + 1
        if stalled > 2 * p:
            raise RuntimeError("pipeline schedule deadlocked")
    return PipelineResult(max(free), tuple(busy), tuple(free), tuple(peak))


def closed_form(f: list[float], b: list[float], m: int, p: int, v: int = 1, comm_s: float = 0.0,
                schedule: str = "1f1b") -> PipelineResult:
    """The step without simulating: every micro-batch passes the pipeline's slowest GPU (m - 1 times at its pace)
    and the first and last pass through every GPU (the fill and drain)::

        makespan = m x max_d (F_d + B_d) + (sum_d (F_d + B_d) - max_d (F_d + B_d)) / v + 2 (p v - 1) comm

    with ``F_d, B_d`` the GPU's forward and backward time per micro-batch over its chunks; for interleaved
    schedules the fill and drain pass chunks of 1/v of a GPU's work: ``(m + (p - 1) / v) x`` the per-micro-batch
    time for equal stages (Narayanan et al. 2021, eq. 2). Exact for GPipe and 1F1B with equal stages and no
    communication; the tests bound its error elsewhere."""
    fd = [sum(f[c * p + d] for c in range(v)) for d in range(p)]
    bd = [sum(b[c * p + d] for c in range(v)) for d in range(p)]
    per = [x + y for x, y in zip(fd, bd)]
    slowest = max(per)
    makespan = m * slowest + (sum(per) - slowest) / v + 2 * (p * v - 1) * comm_s
    busy = tuple(x * m for x in per)
    ends = []
    for d in range(p):  # GPU d's last backward ends before the first GPU's by the drain behind it
        lag = sum(bd[:d]) / v + 2 * d * comm_s
        ends.append(makespan - lag)
    if schedule == "gpipe":
        inflight = tuple(m * v for _ in range(p))
    elif v == 1:
        inflight = tuple(min(p - d, m) for d in range(p))
    else:
        inflight = tuple(min((p - d - 1) * 2 + (v - 1) * p + 1, m * v) for d in range(p))
    return PipelineResult(max(makespan, slowest * m), busy, tuple(ends), inflight)
