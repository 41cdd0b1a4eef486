"""Parsers for the training logs people actually have.

Formats (``fmt``):

- ``keras``: Keras progress-bar output (``Epoch 3/10`` then
  ``1875/1875 [====] - 5s 2ms/step - loss: 0.29 - accuracy: 0.91`` or the
  Keras 3 ``━━━`` bar). Keras prints no clock, so times are rebuilt from the
  per-step time, the ETA and each epoch's total; they start at 0.
- ``hf``: Hugging Face ``Trainer`` console output (tqdm bar
  ``50/500 [00:12<01:48, 4.15it/s]`` and ``{'loss': 2.3, 'epoch': 0.1}``
  lines), or a ``trainer_state.json`` (its ``log_history`` has no clock:
  steps and losses only). ``tqdm`` is any tqdm-bar log.
- ``csv``: a header and rows with a step column (``step``, ``global_step``,
  ``iteration``...), a time column (``time_s``, ``time``, ``timestamp``,
  ``wall_time``, ``elapsed``... seconds or ISO 8601), and optional loss,
  metric, epoch and learning-rate (``lr``, ``learning_rate``, Lightning's
  ``lr-<Optimizer>``) columns. Covers Lightning's ``CSVLogger`` metrics.csv and
  TensorBoard scalars exported to CSV (``Wall time,Step,Value``).
- ``jsonl``: one JSON object a line with the same keys as ``csv``.

Malformed or partial lines (a file still being written) are skipped and
counted in ``ParsedLog.lines_skipped``; they are never fatal. CSV and JSONL
records keep their log order, so that a resume from a checkpoint (steps logged
again) or a clock that starts again is seen (``records.resolve_restarts``).
"""

from __future__ import annotations

import ast
import csv
from collections.abc import Callable
from dataclasses import dataclass
import io
import json
import math
import re
from datetime import datetime
from pathlib import Path

from traincast.errors import DataError
from traincast.online.records import Event, ParsedLog, StepRecord
from traincast.registry import Registry

_MAX_EXAMPLES = 5


def read_text(path: str | Path) -> str:
    p = Path(path)
    if not p.exists():
        raise DataError(f"log file {str(p)!r} does not exist; give the path of a training log (or a job name)")
    if p.is_dir():
        raise DataError(f"{str(p)!r} is a folder; give the path of a log file inside it")
    try:
        return p.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise DataError(f"cannot read log file {str(p)!r}: {exc.strerror}") from None


def parse_log(path: str | Path, fmt: str = "auto") -> ParsedLog:
    """Parse the log at ``path`` (format ``fmt`` or sniffed when ``auto``)."""
    return parse_text(read_text(path), fmt, name=str(path))


def parse_text(text: str, fmt: str = "auto", name: str = "") -> ParsedLog:
    """Parse log ``text`` in format ``fmt`` (a name of ``LOG_FORMATS``, or ``auto``: sniffed)."""
    if fmt == "auto":
        fmt = detect_format(text, name)
    return LOG_FORMATS.get(fmt).parse(text)


def detect_format(text: str, name: str = "") -> str:
    """Guess the format of a log from its name and first lines: the formats' sniffers, by priority."""
    head = text[:20_000]
    lower = name.lower()
    tests = sorted((prio, fmt, fn) for fmt in LOG_FORMATS for prio, fn in LOG_FORMATS.get(fmt).sniffers)
    for _, fmt, fn in tests:
        if fn(head, text, lower):
            return fmt
    raise DataError(
        f"cannot tell the format of log {name or '<text>'!r}; pass --format with one of {', '.join(FORMATS[1:])}"
    )


def _lines(text: str) -> list[str]:
    # progress bars rewrite the line with carriage returns: each \r starts a new line
    return [ln for ln in re.split(r"\r\n|\r|\n", text)]


def _num(s) -> float | None:
    try:
        f = float(s)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


class _Counter:
    def __init__(self):
        self.read = 0
        self.skipped = 0
        self.examples: list[str] = []

    def skip(self, line: str) -> None:
        self.skipped += 1
        if len(self.examples) < _MAX_EXAMPLES:
            self.examples.append(line[:200])


# ------------------------------------------------------------------- keras
_EPOCH_RE = re.compile(r"^\s*Epoch (\d+)/(\d+)\s*$")
_KERAS_BAR_RE = re.compile(r"^\s*(\d+)/(\d+)\s+(?:\[[=>.]*\]|━+)(.*)$")
_KV_RE = re.compile(r"([A-Za-z_][\w]*):\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)")
_PERSTEP_RE = re.compile(r"(\d+(?:\.\d+)?)(s|ms|us|µs)/step")
_TOTAL_RE = re.compile(r"(?:^|\s-\s|\s)(\d+)s\s+\d+(?:\.\d+)?(?:s|ms|us|µs)/step")
_ETA_RE = re.compile(r"ETA:\s*(?:(\d+):)?(\d+):(\d+)|ETA:\s*(\d+)s|^\s*(?:(\d+):)?(\d+):(\d+)\s")
_K3_ETA_RE = re.compile(r"^\s*(\d+)s\s")
_UNIT_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
_METRIC_KEYS = ("val_accuracy", "val_acc", "val_sparse_categorical_accuracy", "accuracy", "acc", "sparse_categorical_accuracy")


def _hms(h, m, s) -> float:
    return (int(h) if h else 0) * 3600 + int(m) * 60 + int(s)


def _parse_keras(text: str) -> ParsedLog:
    c = _Counter()
    records: list[StepRecord] = []
    events: list[Event] = []
    epoch = 0
    epochs_total = None
    spe = None
    t_epoch_start = 0.0
    last_t = 0.0
    for raw in _lines(text):
        line = raw.strip()
        if not line:
            continue
        c.read += 1
        m = _EPOCH_RE.match(line)
        if m:
            epoch, epochs_total = int(m.group(1)), int(m.group(2))
            continue
        m = _KERAS_BAR_RE.match(line)
        if not m:
            if re.match(r"^\s*\d+\S*/\d+", line) or line.startswith("Epoch"):
                c.skip(line)  # a bar cut short
            continue  # other output (warnings, prints) is not a record
        s, n, rest = int(m.group(1)), int(m.group(2)), m.group(3)
        if n <= 0 or s > n or epoch == 0 and epochs_total is None and s == 0:
            c.skip(line)
            continue
        if epoch == 0:
            epoch = 1
        kv = {k: _num(v) for k, v in _KV_RE.findall(rest)}
        per = _PERSTEP_RE.search(rest)
        per_step_s = float(per.group(1)) * _UNIT_S[per.group(2)] if per else None
        final = s == n and "ETA" not in rest
        if final:
            tot = _TOTAL_RE.search(rest)
            total_s = float(tot.group(1)) if tot else None
            cands = [x for x in (total_s, per_step_s * n if per_step_s else None) if x is not None]
            if not cands:
                c.skip(line)
                continue
            t = t_epoch_start + max(cands)
        else:
            if per_step_s is not None:
                elapsed = per_step_s * s
            else:
                e = _ETA_RE.search(rest)
                if not e:
                    c.skip(line)
                    continue
                if e.group(4):
                    eta = float(e.group(4))
                elif e.group(2):
                    eta = _hms(e.group(1), e.group(2), e.group(3))
                else:
                    eta = _hms(e.group(5), e.group(6), e.group(7))
                elapsed = eta / max(n - s, 1) * s
            t = t_epoch_start + elapsed
        if spe is not None and n != spe:
            c.skip(line)  # a validation bar or a different stream
            continue
        spe = n
        t = max(t, last_t)
        last_t = t
        metric = next((kv[k] for k in _METRIC_KEYS if kv.get(k) is not None), None)
        step = (epoch - 1) * n + s
        records.append(StepRecord(step, t, kv.get("loss"), metric, float(epoch - 1) + s / n))
        if final:
            events.append(Event("epoch_end", step, t, metric))
            t_epoch_start = t
    total = epochs_total * spe if (epochs_total and spe) else None
    return ParsedLog("keras", tuple(records), tuple(events), c.read, c.skipped, total, spe, tuple(c.examples))


# ---------------------------------------------------------------------- hf
_TQDM_RE = re.compile(
    r"(\d+)/(\d+)\s*\[(?:(\d+):)?(\d+):(\d+)(?:<(?:(?:\d+:)?\d+:\d+|\?))?(?:,\s*([\d.]+|\?)\s*(it/s|s/it))?"
)


def _parse_hf_console(text: str, fmt: str) -> ParsedLog:
    c = _Counter()
    records: dict[int, StepRecord] = {}
    events: list[Event] = []
    train_total = None
    cur_step = None
    cur_t = None
    last_loss_epoch = None
    for raw in _lines(text):
        line = raw.strip()
        if not line:
            continue
        c.read += 1
        if line.startswith("{") or line.startswith("{'"):
            try:
                d = ast.literal_eval(line) if "'" in line else json.loads(line)
                if not isinstance(d, dict):
                    raise ValueError
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                c.skip(line)
                continue
            if cur_step is None:
                continue
            if "loss" in d and _num(d.get("loss")) is not None:
                last_loss_epoch = _num(d.get("epoch"))
                old = records.get(cur_step)
                records[cur_step] = StepRecord(cur_step, old.time_s if old else cur_t, _num(d["loss"]), None, last_loss_epoch,
                                               _num(d.get("learning_rate")))
            evals = {k: v for k, v in d.items() if k.startswith("eval_")}
            if evals:
                val = _num(d.get("eval_accuracy", d.get("eval_loss")))
                events.append(Event("eval_end", cur_step, cur_t, val))
            continue
        m = _TQDM_RE.search(line)
        if not m:
            if re.search(r"\d+/\d+\s*\[", line):
                c.skip(line)
            continue
        s, n = int(m.group(1)), int(m.group(2))
        if train_total is None:
            train_total = n
        if n != train_total:
            continue  # an evaluation bar
        if s > n:
            c.skip(line)
            continue
        t = float(_hms(m.group(3), m.group(4), m.group(5)))
        if cur_step is not None and s < cur_step:
            c.skip(line)
            continue
        cur_step, cur_t = s, t
        old = records.get(s)
        records[s] = StepRecord(s, t, old.loss if old else None, None, old.epoch if old else None,
                                old.learning_rate if old else None)
    recs = tuple(records[k] for k in sorted(records))
    return ParsedLog(fmt, recs, tuple(events), c.read, c.skipped, train_total, None, tuple(c.examples))


def _parse_trainer_state(text: str) -> ParsedLog:
    try:
        state = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"trainer_state.json is not valid JSON ({exc.msg} at line {exc.lineno}); is the file complete?"
        ) from None
    hist = state.get("log_history")
    if not isinstance(hist, list):
        raise DataError("trainer_state.json has no 'log_history' list; give the file the HF Trainer wrote")
    c = _Counter()
    recs: dict[int, StepRecord] = {}
    events = []
    for d in hist:
        c.read += 1
        if not isinstance(d, dict) or not isinstance(d.get("step"), int):
            c.skip(str(d))
            continue
        step = d["step"]
        if "loss" in d:
            loss = _num(d["loss"])
            if loss is None:
                c.skip(str(d))
                continue
            recs[step] = StepRecord(step, None, loss, None, _num(d.get("epoch")), _num(d.get("learning_rate")))
        elif any(k.startswith("eval_") for k in d):
            events.append(Event("eval_end", step, None, _num(d.get("eval_accuracy", d.get("eval_loss")))))
    total = state.get("max_steps") if isinstance(state.get("max_steps"), int) and state.get("max_steps") > 0 else None
    epochs = state.get("num_train_epochs")
    spe = None
    with_epoch = [r for r in recs.values() if r.epoch and r.epoch > 0]
    if with_epoch:  # the logged share of an epoch: exact where max_steps, not the epochs, ends the run
        last = max(with_epoch, key=lambda r: r.step)
        spe = int(round(last.step / last.epoch)) or None
    elif total and isinstance(epochs, (int, float)) and epochs > 0 and float(epochs).is_integer():
        spe = int(total // int(epochs)) or None
    return ParsedLog("hf", tuple(recs[k] for k in sorted(recs)), tuple(events), c.read, c.skipped, total, spe, tuple(c.examples))


# --------------------------------------------------------------- csv/jsonl
_STEP_KEYS = ("step", "global_step", "iteration", "iter", "it", "steps", "batch")
_TIME_KEYS = ("time_s", "time", "timestamp", "wall_time", "walltime", "wall time", "elapsed_s", "elapsed", "created_at", "t")
_LOSS_KEYS = ("loss", "train_loss", "train/loss", "training_loss", "train_loss_step", "loss_step", "value")
_METRIC_KEYS_CSV = ("metric", "val_acc", "val_accuracy", "accuracy", "acc", "val/acc", "eval_accuracy", "val_loss", "eval_loss")
_EPOCH_KEYS = ("epoch",)
_LR_KEYS = ("learning_rate", "lr", "train/lr", "train/learning_rate", "lr-adamw", "lr-adam", "lr-sgd", "learning-rate")


def _pick(keys_lower: dict[str, str], wanted) -> str | None:
    for w in wanted:
        if w in keys_lower:
            return keys_lower[w]
    return None


def _time_value(v) -> float | None:
    if v is None or v == "":
        return None
    f = _num(v)
    if f is not None:
        return f
    try:
        return datetime.fromisoformat(str(v).strip().replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _row_record(row: dict, cols: dict) -> StepRecord | None:
    sv = row.get(cols["step"])
    step = _num(sv)
    if step is None or step < 0 or not float(step).is_integer():
        return None
    t = None
    if cols["time"] is not None:
        raw = row.get(cols["time"])
        t = _time_value(raw)
        if t is None and raw not in (None, ""):
            return None
    loss = _num(row.get(cols["loss"])) if cols["loss"] else None
    metric = _num(row.get(cols["metric"])) if cols["metric"] else None
    epoch = _num(row.get(cols["epoch"])) if cols["epoch"] else None
    lr = _num(row.get(cols["lr"])) if cols.get("lr") else None
    return StepRecord(int(step), t, loss, metric, epoch, lr)


def _columns(keys, fmt: str) -> dict:
    kl = {str(k).strip().lower(): k for k in keys if k is not None}
    cols = {
        "step": _pick(kl, _STEP_KEYS),
        "time": _pick(kl, _TIME_KEYS),
        "loss": _pick(kl, _LOSS_KEYS),
        "metric": _pick(kl, _METRIC_KEYS_CSV),
        "epoch": _pick(kl, _EPOCH_KEYS),
        "lr": _pick(kl, _LR_KEYS),
    }
    if cols["lr"] is None:  # Lightning's LearningRateMonitor: lr-<Optimizer>[...]
        cols["lr"] = next((kl[k] for k in kl if k.startswith(("lr-", "lr_"))), None)
    if cols["loss"] is None:  # e.g. Lightning's 'train_loss_epoch' or any *loss* column
        cols["loss"] = next((kl[k] for k in kl if "loss" in k and not k.startswith(("val", "eval", "test"))), None)
    return cols


class _Ordered:
    """Records in log order. A row for a step already seen in this stretch of the log is merged into it
    (Lightning's CSVLogger writes one sparse row per logging call); a step below the last one, or a
    clock that went back, is a restart and starts a new stretch (see ``records.resolve_restarts``)."""

    def __init__(self):
        self.recs: list[StepRecord] = []
        self.pos: dict[int, int] = {}

    def add(self, r: StepRecord) -> None:
        i = self.pos.get(r.step)
        last = self.recs[-1] if self.recs else None
        restart = last is not None and (
            r.step < last.step and (i is None or (r.time_s is not None and self.recs[i].time_s is not None
                                                  and r.time_s != self.recs[i].time_s))
        )
        if i is not None and not restart:
            old = self.recs[i]
            self.recs[i] = StepRecord(
                r.step,
                r.time_s if r.time_s is not None else old.time_s,
                r.loss if r.loss is not None else old.loss,
                r.metric if r.metric is not None else old.metric,
                r.epoch if r.epoch is not None else old.epoch,
                r.learning_rate if r.learning_rate is not None else old.learning_rate,
            )
            return
        if restart:
            self.pos = {}
        self.pos[r.step] = len(self.recs)
        self.recs.append(r)


def _epoch_events(recs: list[StepRecord]) -> tuple[tuple[Event, ...], int | None]:
    events = []
    prev = None
    recs = sorted({r.step: r for r in recs}.values(), key=lambda r: r.step)
    for a, b in zip(recs, recs[1:]):
        if a.epoch is not None and b.epoch is not None and math.floor(b.epoch) > math.floor(a.epoch):
            events.append(Event("epoch_end", a.step, a.time_s))
    ends = [e.step for e in events]
    if len(ends) >= 2:
        diffs = sorted(y - x for x, y in zip(ends, ends[1:]))
        prev = diffs[len(diffs) // 2] or None
    return tuple(events), prev


def _parse_csv(text: str, fmt: str) -> ParsedLog:
    c = _Counter()
    lines = text.splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("#")):  # blank and comment lines on top
        lines.pop(0)
    if not lines:
        return ParsedLog(fmt, (), (), 0, 0)
    try:
        dialect = csv.Sniffer().sniff(lines[0], delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO("\n".join(lines)), dialect)
    header = next(reader)
    cols = _columns(header, fmt)
    if cols["step"] is None:
        raise DataError(
            f"CSV log has no step column (header: {', '.join(header)[:120]}); "
            f"name one of {', '.join(_STEP_KEYS)}, with a time column such as time_s"
        )
    recs = _Ordered()
    for row in reader:
        c.read += 1
        if not any(x.strip() for x in row):
            continue
        if len(row) != len(header):
            c.skip(",".join(row))
            continue
        r = _row_record(dict(zip(header, row)), cols)
        if r is None:
            c.skip(",".join(row))
            continue
        recs.add(r)
    out = recs.recs
    events, spe = _epoch_events(out)
    return ParsedLog(fmt, tuple(out), events, c.read, c.skipped, None, spe, tuple(c.examples))


def _parse_jsonl(text: str) -> ParsedLog:
    c = _Counter()
    recs = _Ordered()
    cols = None
    for line in text.splitlines():
        if not line.strip():
            continue
        c.read += 1
        try:
            d = json.loads(line)
            if not isinstance(d, dict):
                raise ValueError
        except (ValueError, RecursionError):
            c.skip(line)
            continue
        cols_here = _columns(d.keys(), "jsonl")
        if cols_here["step"] is None:
            c.skip(line)
            continue
        cols = cols_here
        r = _row_record(d, cols)
        if r is None:
            c.skip(line)
            continue
        recs.add(r)
    out = recs.recs
    events, spe = _epoch_events(out)
    return ParsedLog("jsonl", tuple(out), events, c.read, c.skipped, None, spe, tuple(c.examples))


# --- the formats and their sniffers ---------------------------------------------------
@dataclass(frozen=True)
class LogFormat:
    """A log format: its parser and the tests that recognise it (priority, test(head, text, lowercase name));
    ``detect_format`` runs every format's tests from the lowest priority up."""

    parse: Callable[[str], ParsedLog]
    sniffers: tuple[tuple[int, Callable[[str, str, str], bool]], ...] = ()


def _first_line(head: str) -> str:
    return next((ln for ln in head.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")


def _is_trainer_state(head: str, text: str, name: str) -> bool:
    return '"log_history"' in text[:200_000] and head.lstrip().startswith("{")


def _parse_hf(text: str, fmt: str = "hf") -> ParsedLog:
    if text.lstrip().startswith("{") and '"log_history"' in text[:200_000]:
        return _parse_trainer_state(text)
    return _parse_hf_console(text, fmt)


LOG_FORMATS: Registry[LogFormat] = Registry("log format")
LOG_FORMATS.add("keras", LogFormat(_parse_keras, (
    (30, lambda h, t, n: bool(re.search(r"^\s*Epoch \d+/\d+\s*$", h, re.M) or re.search(r"\d+/\d+ (\[[=>.]*\]|━)", h))),)),
    help="Keras progress-bar output (times rebuilt from the per-step time)")
LOG_FORMATS.add("hf", LogFormat(_parse_hf, (
    (10, _is_trainer_state),
    (40, lambda h, t, n: bool(re.search(r"\d+/\d+ \[\d+:\d+(:\d+)?<", h)) or "{'loss'" in h or "{'train_runtime'" in h),)),
    help="Hugging Face Trainer console output, or its trainer_state.json")
LOG_FORMATS.add("tqdm", LogFormat(lambda text: _parse_hf_console(text, "tqdm")), help="any tqdm progress-bar log")
LOG_FORMATS.add("lightning", LogFormat(lambda text: _parse_csv(text, "lightning")), help="Lightning's CSVLogger metrics.csv")
LOG_FORMATS.add("tensorboard", LogFormat(lambda text: _parse_csv(text, "tensorboard"), (
    (60, lambda h, t, n: _first_line(h).lower().replace(" ", "") == "walltime,step,value"),)),
    help="TensorBoard scalars exported to CSV (Wall time,Step,Value)")
LOG_FORMATS.add("csv", LogFormat(lambda text: _parse_csv(text, "csv"), (
    (70, lambda h, t, n: "," in _first_line(h)),)),
    help="a header and rows with step, time and optional loss, metric, epoch, learning-rate columns")
LOG_FORMATS.add("jsonl", LogFormat(_parse_jsonl, (
    (20, lambda h, t, n: n.endswith((".jsonl", ".ndjson"))),
    (50, lambda h, t, n: _first_line(h).lstrip().startswith("{")))),
    help="one JSON object a line with the keys of csv")

FORMATS = ("auto",) + LOG_FORMATS.names()
