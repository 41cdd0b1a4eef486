"""Wall-clock time of a long synchronous training job: failures, restarts and checkpoints.

A forecast's ``total_s`` is the time the GPUs spend training. On hundreds of GPUs for weeks, the job also
stops: a GPU, its memory, a host, a switch or a cable fails, and synchronous training stops with it. The job
restarts from its last checkpoint, losing the restart time and the work done since that checkpoint; writing the
checkpoints costs time too. This module gives the expected wall-clock time with those costs, by the first-order
model of checkpoint/restart (Young 1974, "A first order approximation to the optimum checkpoint interval";
Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart dumps"):

- failures arrive at random (a Poisson process) at ``1 / M`` per second of wall-clock time, ``M = GPU-hours per
  interruption / GPUs``: each GPU adds its own rate, as Llama 3's 16,384 GPUs saw one interruption every
  3.1 hours;
- a checkpoint of the whole training state (weights in full precision and the optimizer's state) is written
  every ``tau`` seconds of training and takes ``delta = bytes / write bandwidth``, the training stopped;
- each failure costs the restart ``R`` and, on average, half of a checkpoint period of lost work
  ``(tau + delta) / 2``.

So the wall clock ``W`` of ``T`` seconds of training satisfies ``W = T (1 + delta/tau) + (W / M) (R + (tau +
delta) / 2)``, that is ``W = T (1 + delta/tau) / (1 - (R + (tau + delta)/2) / M)``, and the ``tau`` that
minimises it is ``sqrt(delta^2 + 2 M delta (1 - a)) - delta`` with ``a = (R + delta/2) / M`` (Young's ``sqrt(2
delta M)`` when ``delta`` and ``R`` are small against ``M``), rounded to whole steps. Goodput is ``T / W``.

Defaults (``hardware/data/system.yaml``, ``reliability``, each with its source): 50,677 GPU-hours per
interruption (Llama 3), a 10-minute restart, checkpoints written at 122 MB/s per GPU (Llama 3's file system).
Not modelled: slow GPUs that do not fail (stragglers are in the step time), failures of the restart itself,
spare capacity that shortens the restart, and jobs stopped by the user (planned maintenance, evaluations).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from traincast.errors import ConfigError


@dataclass(frozen=True)
class Reliability:
    """How often a job's GPUs fail and what a failure and a checkpoint cost (module docstring)."""

    gpu_mtbf_hours: float  # GPU-hours between job-interrupting failures, per GPU
    restart_s: float  # from a failure to training again
    checkpoint_gb_per_s_per_gpu: float  # checkpoint write bandwidth, per GPU (every rank writes its shard)
    checkpoint_gb_per_s: float | None = None  # the whole job's write bandwidth, if given (instead of per GPU)
    checkpoint_every_s: float | None = None  # None: the interval that minimises the wall clock

    @classmethod
    def defaults(cls) -> "Reliability":
        from traincast.hardware.catalog import system_table

        t = system_table()["reliability"]
        return cls(gpu_mtbf_hours=float(t["gpu_mtbf_hours"]), restart_s=float(t["restart_minutes"]) * 60,
                   checkpoint_gb_per_s_per_gpu=float(t["checkpoint_gb_per_s_per_gpu"]))

    @classmethod
    def from_options(cls, gpu_mtbf_hours: float | None = None, restart_minutes: float | None = None,
                     checkpoint_every_minutes: float | None = None,
                     checkpoint_gb_per_s: float | None = None) -> "Reliability":
        """The defaults with what the user gave (the CLI's ``--gpu-mtbf-hours``, ``--restart-minutes``,
        ``--checkpoint-every``, ``--checkpoint-gb-per-s``); a one-line error on values that are not positive."""
        d = cls.defaults()
        for flag, v, zero_ok in (("--gpu-mtbf-hours", gpu_mtbf_hours, False),
                                 ("--restart-minutes", restart_minutes, True),
                                 ("--checkpoint-every", checkpoint_every_minutes, False),
                                 ("--checkpoint-gb-per-s", checkpoint_gb_per_s, False)):
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (v == 0 and not zero_ok):
                raise ConfigError(f"{flag} must be a positive number, got {v!r}")
        return cls(gpu_mtbf_hours=d.gpu_mtbf_hours if gpu_mtbf_hours is None else float(gpu_mtbf_hours),
                   restart_s=d.restart_s if restart_minutes is None else float(restart_minutes) * 60,
                   checkpoint_gb_per_s_per_gpu=d.checkpoint_gb_per_s_per_gpu,
                   checkpoint_gb_per_s=None if checkpoint_gb_per_s is None else float(checkpoint_gb_per_s),
                   checkpoint_every_s=None if checkpoint_every_minutes is None else float(checkpoint_every_minutes) * 60)

    def write_gb_per_s(self, gpus: int) -> float:
        return self.checkpoint_gb_per_s if self.checkpoint_gb_per_s is not None else self.checkpoint_gb_per_s_per_gpu * gpus


@dataclass(frozen=True)
class WallClock:
    """The expected wall clock of a job and where the time beyond training goes (seconds)."""

    training_s: float  # the forecast's total: the GPUs training, nothing lost
    wall_s: float  # expected wall clock (inf: the job fails faster than it can progress)
    goodput: float  # training_s / wall_s
    job_mtbf_s: float  # mean time between interruptions of the whole job
    interruptions: float  # expected interruptions over the wall clock
    checkpoint_bytes: int
    checkpoint_write_s: float
    checkpoint_every_s: float  # of training, between checkpoints
    checkpoint_every_steps: int
    checkpoint_s: float  # writing checkpoints, in all
    restart_s: float  # restarting, in all
    lost_work_s: float  # work redone after failures, in all
    cost_usd: float | None  # at the forecast's price per hour, over the wall clock
    optimal_interval: bool  # the interval is the one that minimises the wall clock

    def to_dict(self) -> dict:
        """The fields, with ``None`` for the infinite ones of a job that never finishes (JSON has no infinity)."""
        return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in asdict(self).items()}


def checkpoint_bytes(parameter_bytes: int, optimizer_state_bytes: int, master_bytes: int = 0) -> int:
    """The training state a checkpoint holds: the weights as trained (``parameter_bytes``), fp32 master copies
    where the model itself is in half precision, and the optimizer's state."""
    return int(parameter_bytes + master_bytes + optimizer_state_bytes)


def optimal_interval(delta_s: float, mtbf_s: float, restart_s: float) -> float:
    """The checkpoint period (seconds of training) that minimises the first-order wall clock (module docstring)."""
    if delta_s <= 0:
        return 0.0
    a = (restart_s + delta_s / 2) / mtbf_s
    return math.sqrt(delta_s ** 2 + 2 * mtbf_s * delta_s * max(0.0, 1 - a)) - delta_s


def wall_clock(training_s: float, *, gpus: int, iteration_s: float, state_bytes: int, rel: Reliability,
               usd_per_hour: float | None = None) -> WallClock:
    """The expected wall clock of ``training_s`` seconds of training on ``gpus`` GPUs, ``iteration_s`` a step,
    checkpointing ``state_bytes`` (module docstring)."""
    if gpus < 1 or training_s < 0 or iteration_s <= 0:
        raise ValueError("wall_clock needs gpus >= 1, training_s >= 0 and iteration_s > 0")
    m = rel.gpu_mtbf_hours * 3600 / gpus
    delta = state_bytes / (rel.write_gb_per_s(gpus) * 1e9)
    r = rel.restart_s
    tau = rel.checkpoint_every_s if rel.checkpoint_every_s is not None else optimal_interval(delta, m, r)
    steps = max(1, round(tau / iteration_s))
    tau = steps * iteration_s
    if training_s <= tau:  # shorter than one period: one checkpoint at the end is not needed to finish
        tau, delta_per = training_s, 0.0
    else:
        delta_per = delta
    denom = 1 - (r + (tau + delta_per) / 2) / m
    ckpt = training_s * delta_per / tau if tau > 0 else 0.0
    if denom <= 0:
        w = math.inf
        n = math.inf
    else:
        w = (training_s + ckpt) / denom
        n = w / m
    cost = w / 3600 * usd_per_hour if usd_per_hour is not None and math.isfinite(w) else None
    return WallClock(training_s=training_s, wall_s=w, goodput=training_s / w if w > 0 and math.isfinite(w) else (1.0 if w == 0 else 0.0),
                     job_mtbf_s=m, interruptions=n, checkpoint_bytes=int(state_bytes), checkpoint_write_s=delta,
                     checkpoint_every_s=tau, checkpoint_every_steps=steps, checkpoint_s=ckpt,
                     restart_s=n * r if math.isfinite(n) else math.inf,
                     lost_work_s=n * (tau + delta_per) / 2 if math.isfinite(n) else math.inf, cost_usd=cost,
                     optimal_interval=rel.checkpoint_every_s is None)


def with_wall_clock(f, rel: Reliability | None = None):
    """The forecast ``f`` (:class:`~traincast.predict.compose.Forecast`) with its expected wall clock
    (``f.wall_clock``, :meth:`WallClock.to_dict`) where it has a total; ``rel``: the defaults if None."""
    from dataclasses import replace

    if f.total_s is None or f.workload is None:
        return f
    rel = rel or Reliability.defaults()
    m = f.workload.memory
    wc = wall_clock(f.total_s, gpus=f.gpus, iteration_s=f.iteration_s,
                    state_bytes=checkpoint_bytes(m.parameter_bytes, m.optimizer_state_bytes), rel=rel,
                    usd_per_hour=f.usd_per_hour)
    return replace(f, wall_clock=wc.to_dict())
