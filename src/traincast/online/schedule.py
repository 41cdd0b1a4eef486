"""Learning-rate schedules: a registry of spec parsers, logged schedules, checks.

A schedule gives the learning rate of every step as a multiple of its peak
(``Schedule.lr(steps)``, 1.0 at the peak); the loss-curve forms of
``traincast.online.curves`` need only that shape. Specs (``--lr-schedule``):

- ``constant``
- ``step:EVERY:GAMMA``: multiplied by GAMMA every EVERY steps (PyTorch ``StepLR``)
- ``cosine:TOTAL[:MIN]``: cosine from 1 to MIN (a ratio, default 0) at step TOTAL
- ``warmup-cosine:WARMUP:TOTAL[:MIN]``: linear warm-up, then cosine to MIN at TOTAL
- ``linear:WARMUP:TOTAL[:MIN]``: linear warm-up, then linear decay to MIN at TOTAL
  (Hugging Face's default scheduler)
- ``inverse-sqrt:WARMUP``: linear warm-up, then ``sqrt(WARMUP / step)``
- ``wsd:WARMUP:TOTAL:DECAY_FRAC[:SHAPE[:MIN]]``: warm-up, stable, then a cooldown
  over the last DECAY_FRAC of TOTAL to MIN; SHAPE ``linear`` (default),
  ``cosine`` or ``1-sqrt`` (Hägele et al. 2024)
- ``csv:PATH`` (or a path ending in ``.csv``): columns ``step`` and ``lr``
  (or ``learning_rate``); linear in between, the last value held after

TOTAL may be left empty (``cosine:``, ``wsd:100::0.2``) when the job's total
steps are known. ``Schedule.from_logged`` builds a schedule from a logged
learning-rate column and recognises the families above in it, so that the
part of the run not yet logged can be foreseen.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from traincast.errors import ConfigError, DataError, UnknownNameError

WSD_SHAPES = ("linear", "cosine", "1-sqrt")


@dataclass(frozen=True)
class Schedule:
    """A learning-rate shape: ``lr(steps)`` in multiples of the peak."""

    spec: str
    fn: Callable[[np.ndarray], np.ndarray] = field(repr=False, compare=False)
    total_steps: int | None = None
    future_known: bool = True  # False: a logged schedule whose future is only assumed (held constant)
    note: str | None = None  # what was assumed, for the user

    def lr(self, steps) -> np.ndarray:
        k = np.asarray(steps, dtype=float)
        return np.clip(np.asarray(self.fn(k), dtype=float), 0.0, None)

    def is_constant(self, upto: int) -> bool:
        v = self.lr(np.arange(1, max(int(upto), 1) + 1))
        return bool(np.ptp(v) <= 1e-9 * max(np.max(v), 1e-300))

    # ---------------------------------------------------------------- logged
    @staticmethod
    def from_logged(steps, lr, total_steps: int | None = None) -> Schedule:
        """The schedule of a logged learning-rate column.

        The logged part is used as logged (linear in between). The future is
        the best-fitting family among those of the registry when one fits the
        logged values within 3% of the peak and has started to change;
        otherwise the last value is held and ``future_known`` is False.
        """
        k = np.asarray(steps, dtype=float)
        v = np.asarray(lr, dtype=float)
        ok = np.isfinite(k) & np.isfinite(v) & (v >= 0)
        k, v = k[ok], v[ok]
        if len(k) < 2 or not np.max(v) > 0:
            raise DataError("the logged learning rate has fewer than 2 usable values; pass --lr-schedule instead")
        o = np.argsort(k, kind="stable")
        k, v = k[o], v[o] / np.max(v)
        fam = _recognise(k, v, total_steps)
        last_k, last_v = float(k[-1]), float(v[-1])

        if fam is not None:
            sched = fam

            def fn(x, k=k, v=v, last_k=last_k, sched=sched):
                x = np.asarray(x, dtype=float)
                return np.where(x <= last_k, np.interp(x, k, v), sched.lr(x))

            return Schedule(f"logged ({sched.spec})", fn, total_steps or sched.total_steps, True,
                            f"the logged learning rate follows {sched.spec}; its future is taken from it")

        def fn_hold(x, k=k, v=v):
            return np.interp(np.asarray(x, dtype=float), k, v)

        flat = np.ptp(v[k >= k[np.argmax(v)]]) < 0.03
        note = (
            "the learning rate logged so far is "
            + ("flat" if flat else "not one of the known schedules")
            + f"; it is assumed to stay at {last_v:.3g}x the peak to the end. If it will decay (cosine, WSD "
            "cooldown...), pass --lr-schedule"
        )
        return Schedule("logged (held)", fn_hold, total_steps, False, note)


# --------------------------------------------------------------------- specs
def _int(name: str, s: str, spec: str, total_steps: int | None, allow_empty: bool = False) -> int:
    if s.strip() == "" and allow_empty:
        if total_steps:
            return int(total_steps)
        raise ConfigError(f"schedule {spec!r}: {name} is empty and the job's total steps are not known; "
                          f"write it in the spec or pass --total-steps")
    try:
        f = float(s)
    except ValueError:
        raise ConfigError(f"schedule {spec!r}: {name} must be a whole number of steps, got {s!r}") from None
    if not (math.isfinite(f) and f == int(f) and f >= 0):
        raise ConfigError(f"schedule {spec!r}: {name} must be a whole number of steps >= 0, got {s!r}")
    return int(f)


def _ratio(name: str, s: str, spec: str, lo: float = 0.0, hi: float = 1.0, lo_open: bool = False) -> float:
    try:
        f = float(s)
    except ValueError:
        raise ConfigError(f"schedule {spec!r}: {name} must be a number, got {s!r}") from None
    if not math.isfinite(f) or f > hi or f < lo or (lo_open and f == lo):
        rng = f"({lo:g}, {hi:g}]" if lo_open else f"[{lo:g}, {hi:g}]"
        raise ConfigError(f"schedule {spec!r}: {name} must be in {rng}, got {s!r}")
    return f


def _nargs(spec: str, args: list[str], lo: int, hi: int, usage: str) -> None:
    if not lo <= len(args) <= hi:
        raise ConfigError(f"schedule {spec!r} has {len(args)} field(s) after the name; expected {usage}")


def _warm(k, w):
    return np.where(k < w, (k + 1.0) / max(w, 1), 1.0) if w > 0 else np.ones_like(k)


def _p_constant(spec, args, total):
    _nargs(spec, args, 0, 0, "constant")
    return Schedule(spec, lambda k: np.ones_like(k), total)


def _p_step(spec, args, total):
    _nargs(spec, args, 2, 2, "step:EVERY:GAMMA, e.g. step:1000:0.1")
    every = _int("EVERY", args[0], spec, total)
    if every < 1:
        raise ConfigError(f"schedule {spec!r}: EVERY must be >= 1 step")
    gamma = _ratio("GAMMA", args[1], spec, 0.0, 1.0, lo_open=True)
    return Schedule(spec, lambda k: gamma ** np.floor(np.maximum(k, 0) / every), total)


def _cos(k, start, end, floor):
    t = np.clip((k - start) / max(end - start, 1), 0.0, 1.0)
    return floor + (1 - floor) * 0.5 * (1 + np.cos(math.pi * t))


def _lin(k, start, end, floor):
    t = np.clip((k - start) / max(end - start, 1), 0.0, 1.0)
    return floor + (1 - floor) * (1 - t)


def _p_cosine(spec, args, total):
    _nargs(spec, args, 1, 2, "cosine:TOTAL[:MIN], e.g. cosine:10000:0.1")
    t = _int("TOTAL", args[0], spec, total, allow_empty=True)
    floor = _ratio("MIN", args[1], spec) if len(args) > 1 else 0.0
    _pos_total(spec, t)
    return Schedule(spec, lambda k: _cos(k, 0, t, floor), t)


def _pos_total(spec, t):
    if t < 1:
        raise ConfigError(f"schedule {spec!r}: TOTAL must be >= 1 step")


def _p_warmup_cosine(spec, args, total):
    _nargs(spec, args, 2, 3, "warmup-cosine:WARMUP:TOTAL[:MIN], e.g. warmup-cosine:500:20000:0.1")
    w = _int("WARMUP", args[0], spec, total)
    t = _int("TOTAL", args[1], spec, total, allow_empty=True)
    floor = _ratio("MIN", args[2], spec) if len(args) > 2 else 0.0
    _pos_total(spec, t)
    if w >= t:
        raise ConfigError(f"schedule {spec!r}: WARMUP ({w}) must be shorter than TOTAL ({t})")
    return Schedule(spec, lambda k: _warm(k, w) * _cos(k, w, t, floor), t)


def _p_linear(spec, args, total):
    _nargs(spec, args, 2, 3, "linear:WARMUP:TOTAL[:MIN], e.g. linear:500:20000")
    w = _int("WARMUP", args[0], spec, total)
    t = _int("TOTAL", args[1], spec, total, allow_empty=True)
    floor = _ratio("MIN", args[2], spec) if len(args) > 2 else 0.0
    _pos_total(spec, t)
    if w >= t:
        raise ConfigError(f"schedule {spec!r}: WARMUP ({w}) must be shorter than TOTAL ({t})")
    return Schedule(spec, lambda k: _warm(k, w) * _lin(k, w, t, floor), t)


def _p_inverse_sqrt(spec, args, total):
    _nargs(spec, args, 1, 1, "inverse-sqrt:WARMUP, e.g. inverse-sqrt:4000")
    w = _int("WARMUP", args[0], spec, total)
    if w < 1:
        raise ConfigError(f"schedule {spec!r}: WARMUP must be >= 1 step")
    return Schedule(spec, lambda k: np.where(k < w, (k + 1.0) / w, np.sqrt(w / np.maximum(k, 1.0))), total)


def _p_wsd(spec, args, total):
    _nargs(spec, args, 3, 5, "wsd:WARMUP:TOTAL:DECAY_FRAC[:SHAPE[:MIN]], e.g. wsd:500:20000:0.2:1-sqrt")
    w = _int("WARMUP", args[0], spec, total)
    t = _int("TOTAL", args[1], spec, total, allow_empty=True)
    frac = _ratio("DECAY_FRAC", args[2], spec, 0.0, 1.0, lo_open=True)
    shape = args[3].strip() if len(args) > 3 and args[3].strip() else "linear"
    if shape not in WSD_SHAPES:
        raise UnknownNameError("cooldown shape", shape, WSD_SHAPES)
    floor = _ratio("MIN", args[4], spec) if len(args) > 4 else 0.0
    _pos_total(spec, t)
    d0 = t - frac * t
    if w > d0:
        raise ConfigError(f"schedule {spec!r}: the warm-up ({w}) runs into the cooldown, which starts at step {d0:g}")

    def fn(k):
        u = np.clip((k - d0) / max(t - d0, 1), 0.0, 1.0)
        if shape == "linear":
            dec = 1 - u
        elif shape == "cosine":
            dec = 0.5 * (1 + np.cos(math.pi * u))
        else:
            dec = 1 - np.sqrt(u)
        return _warm(k, w) * (floor + (1 - floor) * dec)

    return Schedule(spec, fn, t)


def _p_csv(spec, args, total):
    name = ":".join(args).strip() if args else ""
    if not name:
        raise ConfigError(f"schedule {spec!r}: give a file, csv:PATH")
    return read_csv_schedule(Path(name), total, spec)


def read_csv_schedule(path, total_steps: int | None = None, spec: str | None = None) -> Schedule:
    """A schedule from a CSV file with ``step`` and ``lr`` (or ``learning_rate``) columns."""
    p = Path(path)
    spec = spec or f"csv:{p}"
    if p.is_dir():
        raise DataError(f"schedule file {str(p)!r} is a folder; give a CSV with step and lr columns")
    if not p.is_file():
        raise DataError(f"schedule file {str(p)!r} does not exist; give a CSV with step and lr columns")
    rows = list(csv.reader(io.StringIO(p.read_text(errors="replace"))))
    if not rows:
        raise DataError(f"schedule file {str(p)!r} is empty; it needs a header with step and lr columns")
    head = [h.strip().lower() for h in rows[0]]
    if "step" not in head or not ({"lr", "learning_rate"} & set(head)):
        shown = "".join(c if c.isprintable() and c != "\ufffd" else "?" for c in ", ".join(head))[:120]
        raise DataError(f"schedule file {str(p)!r} needs 'step' and 'lr' (or 'learning_rate') columns, has: {shown}")
    si = head.index("step")
    li = head.index("lr") if "lr" in head else head.index("learning_rate")
    ks, vs = [], []
    for n, r in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in r):
            continue
        try:
            k, v = float(r[si]), float(r[li])
        except (ValueError, IndexError):
            raise DataError(f"schedule file {str(p)!r}, line {n}: step and lr must be numbers, got {','.join(r)[:80]!r}") from None
        if not (math.isfinite(k) and math.isfinite(v)) or v < 0:
            raise DataError(f"schedule file {str(p)!r}, line {n}: lr must be a finite number >= 0, got {r[li]!r}")
        ks.append(k)
        vs.append(v)
    if len(ks) < 1 or max(vs) <= 0:
        raise DataError(f"schedule file {str(p)!r} has no positive learning rate")
    ks, vs = np.array(ks), np.array(vs)
    o = np.argsort(ks, kind="stable")
    ks, vs = ks[o], vs[o] / vs.max()
    return Schedule(spec, lambda k: np.interp(k, ks, vs), total_steps or int(ks[-1]))


@dataclass(frozen=True)
class ScheduleKind:
    name: str
    parse: Callable[[str, list[str], int | None], Schedule]
    usage: str
    help: str


SCHEDULES: dict[str, ScheduleKind] = {}


def register_schedule(name: str, parse, usage: str, help: str) -> None:
    SCHEDULES[name] = ScheduleKind(name, parse, usage, help)


register_schedule("constant", _p_constant, "constant", "the same learning rate throughout")
register_schedule("step", _p_step, "step:EVERY:GAMMA", "times GAMMA every EVERY steps")
register_schedule("cosine", _p_cosine, "cosine:TOTAL[:MIN]", "cosine decay to MIN x peak at TOTAL")
register_schedule("warmup-cosine", _p_warmup_cosine, "warmup-cosine:WARMUP:TOTAL[:MIN]", "linear warm-up, then cosine decay")
register_schedule("linear", _p_linear, "linear:WARMUP:TOTAL[:MIN]", "linear warm-up, then linear decay (Hugging Face default)")
register_schedule("inverse-sqrt", _p_inverse_sqrt, "inverse-sqrt:WARMUP", "linear warm-up, then 1/sqrt(step)")
register_schedule("wsd", _p_wsd, "wsd:WARMUP:TOTAL:DECAY_FRAC[:SHAPE[:MIN]]",
                  "warm-up, stable, cooldown over the last DECAY_FRAC (linear, cosine or 1-sqrt)")
register_schedule("csv", _p_csv, "csv:PATH", "a CSV file with step and lr columns")


def schedule_help() -> str:
    return "; ".join(k.usage for k in SCHEDULES.values())


def parse_schedule(spec: str, total_steps: int | None = None) -> Schedule:
    """Parse a ``--lr-schedule`` spec (see the module docstring); ConfigError on a bad one."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"empty learning-rate schedule; give one of: {schedule_help()}")
    spec = spec.strip()
    if spec.lower().endswith(".csv") and not spec.lower().startswith("csv:"):
        return read_csv_schedule(spec, total_steps)
    name, *args = spec.split(":")
    name = name.strip().lower()
    if name not in SCHEDULES:
        raise UnknownNameError("learning-rate schedule", name, SCHEDULES)
    if name == "csv":
        return _p_csv(spec, [spec.split(":", 1)[1]] if ":" in spec else [], total_steps)
    return SCHEDULES[name].parse(spec, args, total_steps)


# ----------------------------------------------------------- recognition
def _recognise(k: np.ndarray, v: np.ndarray, total_steps: int | None) -> Schedule | None:
    """The registry family that matches a logged (normalised) learning rate, if it has visibly changed."""
    ip = int(np.argmax(v >= 0.999))
    w = int(round(k[ip])) if v[0] < 0.9 else 0
    after = v[ip:]
    if len(after) < 3 or np.min(after) > 0.97:  # nothing decayed yet: the future cannot be told
        return None
    cands: list[Schedule] = []
    totals = {int(total_steps)} if total_steps else set()
    # a smooth decay seen so far: guess where it ends from the shape
    kk, vv = k[ip:], v[ip:]
    for t in sorted(totals | _total_guesses(kk, vv)):
        if t <= k[-1] * 0.5 or t <= w:
            continue
        for floor in (0.0, 0.01, 0.05, 0.1):
            for spec in (f"warmup-cosine:{w}:{t}:{floor}", f"linear:{w}:{t}:{floor}"):
                try:
                    cands.append(parse_schedule(spec))
                except ConfigError:
                    pass
            for frac in np.arange(0.05, 0.95, 0.05):
                for shape in WSD_SHAPES:
                    try:
                        cands.append(parse_schedule(f"wsd:{w}:{t}:{frac:.2f}:{shape}:{floor}"))
                    except ConfigError:
                        pass
    if w > 0:
        cands.append(parse_schedule(f"inverse-sqrt:{w}"))
    drops = np.nonzero(np.diff(v) < -0.05)[0]
    if len(drops):
        every = int(round(k[drops[0] + 1] if len(drops) == 1 else np.median(np.diff(k[drops + 1]))))
        gamma = float(v[drops[0] + 1] / max(v[drops[0]], 1e-12))
        for e in {every, int(k[drops[0]]) + 1}:
            if e >= 1 and 0 < gamma <= 1:
                cands.append(parse_schedule(f"step:{e}:{gamma:.6g}"))
    best, best_err = None, math.inf
    for c in cands:
        err = float(np.sqrt(np.mean((c.lr(k) - v) ** 2)))
        if err < best_err:
            best, best_err = c, err
    return best if best is not None and best_err < 0.03 else None


def _total_guesses(k: np.ndarray, v: np.ndarray) -> set[int]:
    out: set[int] = set()
    if len(k) < 3 or v[-1] >= 0.999:
        return out
    # linear: slope of the part below the peak
    m = v < 0.999
    if m.sum() >= 2:
        a, b = np.polyfit(k[m], v[m], 1)
        if a < 0:
            out.add(int(round(-b / a)))
    # cosine from the peak: v = 0.5(1 + cos(pi u)) => u = arccos(2v - 1)/pi
    kp = k[0]
    u = np.arccos(np.clip(2 * v[-1] - 1, -1, 1)) / math.pi
    if u > 0.02:
        out.add(int(round(kp + (k[-1] - kp) / u)))
    return {t for t in out if t > 0}


def check_against_log(schedule: Schedule, steps, lr, tol: float = 0.1) -> str | None:
    """A warning when a logged learning rate contradicts ``schedule`` (shape, after the best scale)."""
    k = np.asarray(steps, dtype=float)
    v = np.asarray(lr, dtype=float)
    ok = np.isfinite(k) & np.isfinite(v)
    k, v = k[ok], v[ok]
    if len(k) < 3 or not np.max(v) > 0:
        return None
    s = schedule.lr(k)
    scale = float(np.dot(s, v) / max(np.dot(s, s), 1e-300))  # the peak learning rate, by least squares
    if scale <= 0:
        return f"the logged learning rate does not follow the schedule {schedule.spec!r} at all; check --lr-schedule"
    dev = np.abs(v - scale * s) / max(np.max(v), 1e-300)
    i = int(np.argmax(dev))
    if float(np.percentile(dev, 90)) > tol:
        return (
            f"the logged learning rate contradicts --lr-schedule {schedule.spec!r}: at step {int(k[i])} the log has "
            f"{v[i]:.3g}, the schedule {scale * s[i]:.3g} (peak {scale:.3g}); the logged values are used for the past"
        )
    return None
