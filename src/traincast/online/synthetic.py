"""Synthetic training jobs with known answers, for tests and the backtest.

A job has a warm-up (slower first steps, and a compilation on the first step),
a steady time per step with noise (log-normal, optionally autocorrelated), an
optional drift or a change of pace (another job arriving on the node, a larger
batch), epoch-end and evaluation pauses, random stalls, a crash and a resume
from an earlier checkpoint (steps logged twice, the new process's clock
starting at 0 and compiling again), and records logged every ``log_every``
steps, in log order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traincast.online.records import Event, JobSeries, StepRecord


@dataclass(frozen=True)
class SyntheticJob:
    total_steps: int = 2000
    step_s: float = 0.2
    cov: float = 0.05
    ar: float = 0.0  # AR(1) coefficient of the log step-time noise
    warmup_steps: int = 20
    warmup_factor: float = 3.0  # first step this many times slower, decaying
    steps_per_epoch: int | None = 500
    epoch_pause_s: float = 0.0
    eval_every: int | None = None
    eval_pause_s: float = 0.0
    stall_prob: float = 0.0  # per step
    stall_s: float = 0.0
    drift: float = 0.0  # relative change of step time over the whole run (linear)
    shift_at: float | None = None  # fraction of the run where the pace changes ...
    shift_factor: float = 1.0  # ... by this factor
    log_every: int = 1
    emit_events: bool = True
    loss_beta: tuple[float, float, float] | None = (1e-3, 0.5, 0.1)
    loss_noise: float = 0.02
    compile_s: float = 0.0  # extra time of the first step of a process (torch.compile, autotuning)
    crash_at: float | None = None  # fraction of the run where the process dies ...
    resume_from: float | None = None  # ... and the fraction whose checkpoint the new process loads

    def generate(self, seed: int = 0, name: str = "") -> JobSeries:
        rng = np.random.default_rng(seed)
        n = self.total_steps
        k = np.arange(1, n + 1)
        eps = rng.normal(0, 1, n)
        if self.ar:
            for i in range(1, n):
                eps[i] = self.ar * eps[i - 1] + np.sqrt(1 - self.ar**2) * eps[i]
        sigma = np.sqrt(np.log(1 + self.cov**2))
        base = self.step_s * (1 + self.drift * k / n)
        if self.shift_at is not None:
            base = np.where(k > self.shift_at * n, base * self.shift_factor, base)
        warm = 1 + (self.warmup_factor - 1) * np.exp(-5 * k / max(self.warmup_steps, 1))
        dur = base * warm * np.exp(sigma * eps - sigma**2 / 2)
        dur[0] += self.compile_s
        events = []
        if self.stall_prob:
            dur = dur + (rng.random(n) < self.stall_prob) * self.stall_s * rng.uniform(0.5, 1.5, n)
        t = np.cumsum(dur)
        extra = np.zeros(n)
        for i in range(n):
            s = i + 1
            if self.steps_per_epoch and s % self.steps_per_epoch == 0 and s < n:
                extra[i:] += self.epoch_pause_s * rng.uniform(0.9, 1.1)
                if self.emit_events:
                    events.append(("epoch_end", s))
            if self.eval_every and s % self.eval_every == 0 and s < n:
                extra[i:] += self.eval_pause_s * rng.uniform(0.9, 1.1)
                if self.emit_events:
                    events.append(("eval_end", s))
        # a pause after step s shows in the time of step s+1: shift by one
        t = t + np.r_[0.0, extra[:-1]]
        loss = np.full(n, np.nan)
        if self.loss_beta is not None:
            b0, b1, b2 = self.loss_beta
            clean = 1.0 / (b0 * k + b1) + b2
            loss = clean * (1 + self.loss_noise * rng.normal(0, 1, n))
        keep = (k % self.log_every == 0) | (k == n)
        if self.crash_at is not None:
            # the first process logs up to the crash; the second replays from the checkpoint on a new clock
            crash = int(self.crash_at * n)
            back = int((self.resume_from if self.resume_from is not None else self.crash_at) * n)
            first = keep & (k <= crash)
            d2 = dur.copy()
            d2[back] += self.compile_s
            t2 = np.cumsum(np.where(k > back, d2, 0.0))  # the new clock: 0 at the checkpoint
            second = keep & (k > back)
            recs = [StepRecord(0, 0.0)]
            recs += [StepRecord(int(s), float(ti), float(li)) for s, ti, li in zip(k[first], t[first], loss[first])]
            recs += [StepRecord(int(s), float(ti), float(li)) for s, ti, li in zip(k[second], t2[second], loss[second])]
        else:
            recs = [StepRecord(0, 0.0)] + [
                StepRecord(int(s), float(ti), float(li)) for s, ti, li in zip(k[keep], t[keep], loss[keep])
            ]
        evs = [Event(kind, s, None) for kind, s in events]
        return JobSeries.from_records(recs, evs, n, self.steps_per_epoch if self.emit_events else None, name=name)
