"""A framework-free recorder for training loops, into the local store or a traincast server.

    from traincast.online import track
    with track(job="mnist-run1", total_steps=10_000) as t:
        for batch in loader:
            loss = train_step(batch)
            t.step(loss=float(loss))
        t.epoch_end()

Into the local store (the default): every step is written and committed at once
(WAL mode), so a job killed at any moment loses at most the row in flight, and
``traincast eta`` can read the job while it runs.

Into a server (``track(..., server="http://host:8000", token=...)``): ``step()``
only appends to a queue in memory; a background thread posts the queue in
batches (every ``flush_every_s`` seconds). When the server cannot be reached,
the batch goes to a local SQLite spool (``spool=``, default ``spool.db`` beside
the default database) and is resent, oldest first, once it answers again; the
next tracker that talks to the same server also resends what an earlier run
left. Steps are merged by step number on the server, and events stored once,
so a batch resent after a lost answer is harmless. Nothing the thread meets
(refused connection, timeout, an error answer) reaches the training loop; a
refused token (401/403) or a rejected batch (422) is reported once on stderr,
and the rows stay in the spool. A process killed with SIGKILL loses what it
had not yet flushed (at most ``flush_every_s`` of steps); a network fault loses
nothing.
"""

from __future__ import annotations

import atexit
import http.client
import json
import math
import os
import sqlite3
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path

from traincast.errors import ConfigError
from traincast.online import jobs as _jobs
from traincast.online.records import EVENT_KINDS, Event, StepRecord
from traincast.store import Store


def _num(name: str, v) -> float | None:
    if v is None:
        return None
    try:
        if hasattr(v, "item"):
            v = v.item()
        f = float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number (or a 0-d tensor), got {type(v).__name__}") from None
    return f if math.isfinite(f) else None


# ----------------------------------------------------------------------------- sinks
class _StoreSink:
    """Writes into a :class:`Store` at once."""

    def __init__(self, store: Store | str | None):
        self.own = not isinstance(store, Store)
        self.store = store if isinstance(store, Store) else Store(store)

    def open(self, job: str, meta: dict, resume: bool) -> int | None:
        existed = job in _jobs.list_job_names(self.store)
        if existed and not resume:
            _jobs.delete_job(self.store, job)
        self.jid = _jobs.upsert_job(self.store, job, **meta, source="track")
        return _jobs.last_step(self.store, self.jid)

    def step(self, rec: StepRecord) -> None:
        _jobs.add_step(self.store, self.jid, rec)

    def event(self, ev: Event) -> None:
        _jobs.add_event(self.store, self.jid, ev)

    def close(self) -> None:
        if self.own:
            self.store.close()


def default_spool_path() -> Path:
    """``spool.db`` beside the default database (``$TRAINCAST_HOME``)."""
    from traincast.store import default_db_path

    return default_db_path().parent / "spool.db"


def default_token() -> str | None:
    """``$TRAINCAST_TOKEN``, else the first line of ``$TRAINCAST_TOKEN_FILE`` or of ``serve.token``
    beside the default database (written by ``traincast serve``)."""
    tok = os.environ.get("TRAINCAST_TOKEN")
    if tok:
        return tok.strip()
    from traincast.store import default_db_path

    path = Path(os.environ.get("TRAINCAST_TOKEN_FILE") or default_db_path().parent / "serve.token")
    try:
        lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    except OSError:
        return None
    return lines[0] if lines else None


class Spool:
    """Batches waiting for a server, in a local SQLite file (FIFO per server)."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS spool (id INTEGER PRIMARY KEY, server TEXT NOT NULL, job TEXT NOT NULL, "
            "payload TEXT NOT NULL, rows INTEGER NOT NULL, last_step INTEGER, created_s REAL NOT NULL)"
        )
        self.lock = threading.Lock()

    def put(self, server: str, job: str, payload: dict) -> None:
        steps = [r["step"] for r in payload.get("rows", ())]
        with self.lock:
            self.conn.execute(
                "INSERT INTO spool(server, job, payload, rows, last_step, created_s) VALUES (?,?,?,?,?,?)",
                (server, job, json.dumps(payload), len(steps), max(steps) if steps else None, time.time()),
            )

    def oldest(self, server: str, n: int = 20) -> list[tuple[int, str, dict]]:
        with self.lock:
            rows = self.conn.execute(
                "SELECT id, job, payload FROM spool WHERE server=? ORDER BY id LIMIT ?", (server, n)
            ).fetchall()
        return [(i, j, json.loads(p)) for i, j, p in rows]

    def drop(self, ident: int) -> None:
        with self.lock:
            self.conn.execute("DELETE FROM spool WHERE id=?", (ident,))

    def count(self, server: str | None = None) -> tuple[int, int]:
        """(batches, rows) waiting (for ``server``, or all)."""
        q = "SELECT COUNT(*), COALESCE(SUM(rows), 0) FROM spool" + (" WHERE server=?" if server else "")
        with self.lock:
            b, r = self.conn.execute(q, (server,) if server else ()).fetchone()
        return int(b), int(r)

    def last_step(self, server: str, job: str) -> int | None:
        with self.lock:
            v = self.conn.execute("SELECT MAX(last_step) FROM spool WHERE server=? AND job=?", (server, job)).fetchone()[0]
        return None if v is None else int(v)

    def close(self) -> None:
        self.conn.close()


class ServerError(Exception):
    def __init__(self, status: int | None, message: str):
        super().__init__(message)
        self.status = status


class Client:
    """The few calls of the traincast HTTP API a recorder makes (standard library only)."""

    def __init__(self, server: str, token: str | None, timeout_s: float = 5.0):
        if not server.startswith(("http://", "https://")):
            raise ConfigError(f"server must be an http(s) URL such as http://127.0.0.1:8000, got {server!r}")
        self.base = server.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body=None, timeout_s: float | None = None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            try:
                detail = exc.read().decode(errors="replace")[:300]
            except OSError:
                detail = ""
            raise ServerError(exc.code, f"{method} {path}: HTTP {exc.code} {detail}") from None
        except (urllib.error.URLError, OSError, TimeoutError, http.client.HTTPException) as exc:
            # refused, reset, timed out, DNS; an answer cut short (the server died while answering)
            raise ServerError(None, f"{method} {path}: {getattr(exc, 'reason', None) or type(exc).__name__}") from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise ServerError(None, f"{method} {path}: the answer is not JSON") from None

    @staticmethod
    def job_path(job: str) -> str:
        return "/api/v1/jobs/" + urllib.parse.quote(job, safe="")


_live: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:  # a script that forgot close(): send (or spool) what is queued
    for s in list(_live):
        s.close()


class _ServerSink:
    """Queues rows in memory; a daemon thread posts them in batches, spooling what cannot be sent."""

    MAX_ROWS = 2000  # per POST (about 150 kB of JSON: under the server's request size limit)

    def __init__(self, server: str, token: str | None, spool: str | Path | None, flush_every_s: float,
                 close_timeout_s: float, timeout_s: float):
        self.client = Client(server, token if token is not None else default_token(), timeout_s)
        self.server = self.client.base
        self.spool = Spool(spool or default_spool_path())
        self.flush_every_s = flush_every_s
        self.close_timeout_s = close_timeout_s
        self.rows: deque = deque()
        self.events: deque = deque()
        self.meta: dict | None = None
        self.wake = threading.Event()
        self.stopping = False
        self.closed = False
        self.down_until = 0.0
        self.failures = 0
        self.sent_rows = 0
        self.reported: set = set()
        self.thread: threading.Thread | None = None

    def open(self, job: str, meta: dict, resume: bool) -> int | None:
        self.job = job
        self.meta = {**{k: v for k, v in meta.items() if v is not None}, "source": "track"}
        last = None
        try:
            if not resume:
                try:
                    self.client.request("DELETE", self.client.job_path(job), timeout_s=2.0)
                except ServerError as exc:
                    if exc.status != 404:
                        raise
            else:
                last = self.client.request("GET", self.client.job_path(job), timeout_s=2.0).get("last_step")
        except ServerError as exc:
            if exc.status not in (None, 404):
                self._report(exc)
            if exc.status is None:
                self.down_until = time.monotonic() + 1.0
        spooled = self.spool.last_step(self.server, job) if resume else None
        steps = [s for s in (last, spooled) if s is not None]
        self.thread = threading.Thread(target=self._run, name=f"traincast-post-{job}", daemon=True)
        self.thread.start()
        _live.add(self)
        return max(steps) if steps else None

    # --------------------------------------------------------- training thread
    def step(self, rec: StepRecord) -> None:
        self.rows.append({"step": rec.step, "time_s": rec.time_s, "loss": rec.loss, "metric": rec.metric,
                          "epoch": rec.epoch, "learning_rate": rec.learning_rate})

    def event(self, ev: Event) -> None:
        self.events.append({"kind": ev.kind, "step": ev.step, "time_s": ev.time_s, "value": ev.value})

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything queued so far is sent (True) or ``timeout_s`` passes (False)."""
        deadline = time.monotonic() + timeout_s
        self.wake.set()
        while time.monotonic() < deadline:
            if not self.rows and not self.events and self.spool.count(self.server)[0] == 0 and not self._busy:
                return True
            self.down_until = 0.0
            self.wake.set()
            time.sleep(0.02)
        return False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.stopping = True
        self.wake.set()
        if self.thread is not None:
            self.thread.join(self.close_timeout_s + 2 * self.client.timeout_s)
        b, r = self.spool.count(self.server)
        if b:
            print(f"traincast: the server {self.server} could not be reached; {r} rows wait in the spool "
                  f"{self.spool.path} and are sent by the next tracker (or `traincast spool push --server "
                  f"{self.server}`)", file=sys.stderr)
        _live.discard(self)

    # ------------------------------------------------------------ its thread
    _busy = False  # a batch is between the queue and the server or the spool

    def _take(self) -> dict | None:
        rows, events = [], []
        while self.rows and len(rows) < self.MAX_ROWS:
            rows.append(self.rows.popleft())
        while self.events and len(events) < self.MAX_ROWS:
            events.append(self.events.popleft())
        if not rows and not events and self.meta is None:
            return None
        payload = {"rows": rows, "events": events}
        if self.meta is not None:
            payload["meta"], self.meta = self.meta, None
        return payload

    def _report(self, exc: ServerError) -> None:
        key = exc.status
        if key not in self.reported:
            self.reported.add(key)
            hint = " (give token= or set $TRAINCAST_TOKEN)" if exc.status in (401, 403) else ""
            print(f"traincast: {exc}{hint}; rows are kept in the spool {self.spool.path}", file=sys.stderr)

    def _post(self, job: str, payload: dict) -> bool:
        try:
            self.client.request("POST", self.client.job_path(job) + "/metrics", payload)
        except ServerError as exc:
            if exc.status is not None:
                self._report(exc)
            self.failures += 1
            self.down_until = time.monotonic() + min(30.0, 0.25 * 2 ** min(self.failures, 7))
            return False
        self.failures = 0
        self.sent_rows += len(payload.get("rows", ()))
        return True

    def _drain_spool(self) -> bool:
        """Resend spooled batches oldest first; False when the server fails again."""
        while True:
            batch = self.spool.oldest(self.server)
            if not batch:
                return True
            for ident, job, payload in batch:
                if not self._post(job, payload):
                    return False
                self.spool.drop(ident)

    def _cycle(self) -> None:
        """Post (or spool) everything queued, then resend the spool if the server is thought up."""
        self._busy = True
        try:
            while True:
                payload = self._take()
                if payload is None:
                    break
                if time.monotonic() < self.down_until or self.spool.count(self.server)[0]:
                    self.spool.put(self.server, self.job, payload)  # keep the order: behind what waits
                    continue
                try:
                    sent = self._post(self.job, payload)
                except Exception:  # noqa: BLE001 - whatever happened, the rows are kept
                    sent = False
                if not sent:
                    self.spool.put(self.server, self.job, payload)
            if time.monotonic() >= self.down_until:
                self._drain_spool()
        finally:
            self._busy = False

    def _safe_cycle(self) -> None:
        try:
            self._cycle()
        except Exception as exc:  # noqa: BLE001 - nothing may reach the training loop
            print(f"traincast: recorder thread: {type(exc).__name__}: {exc}", file=sys.stderr)

    def _run(self) -> None:
        while not self.stopping:
            self.wake.wait(self.flush_every_s)
            self.wake.clear()
            self._safe_cycle()
        deadline = time.monotonic() + self.close_timeout_s  # closing: keep trying the spool a while
        while True:
            self.down_until = 0.0
            self._safe_cycle()
            if not self.spool.count(self.server)[0] or time.monotonic() >= deadline:
                return
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def push_spool(server: str, token: str | None = None, spool: str | Path | None = None,
               timeout_s: float = 5.0) -> tuple[int, int]:
    """Send what waits in the spool for ``server``; return (batches sent, batches left)."""
    client = Client(server, token if token is not None else default_token(), timeout_s)
    sp = Spool(spool or default_spool_path())
    sent = 0
    try:
        while True:
            batch = sp.oldest(client.base)
            if not batch:
                break
            for ident, job, payload in batch:
                client.request("POST", client.job_path(job) + "/metrics", payload)
                sp.drop(ident)
                sent += 1
    except ServerError as exc:
        raise ConfigError(f"cannot send the spool to {client.base}: {exc}") from None
    finally:
        left = sp.count(client.base)[0]
        sp.close()
    return sent, left


# ----------------------------------------------------------------------------- tracker
class Tracker:
    """Records steps, epoch ends and evaluations of one job into the store or a server.

    Use :func:`track` to make one. ``step()`` counts steps itself unless given
    ``step=``; the first call records the wall time at which step 0 ended.
    """

    def __init__(
        self,
        job: str,
        total_steps: int | None = None,
        *,
        store: Store | str | None = None,
        server: str | None = None,
        token: str | None = None,
        spool: str | Path | None = None,
        flush_every_s: float = 1.0,
        close_timeout_s: float = 10.0,
        timeout_s: float = 5.0,
        total_epochs: int | None = None,
        steps_per_epoch: int | None = None,
        model: str | None = None,
        hardware: str | None = None,
        batch_size: int | None = None,
        price_usd_per_hour: float | None = None,
        record_every: int = 1,
        resume: bool = True,
        clock: Callable[[], float] = time.time,
    ):
        if not job or not str(job).strip():
            raise ConfigError("a job needs a non-empty name, e.g. job='resnet50-run1'")
        for nm, v in (("total_steps", total_steps), ("total_epochs", total_epochs), ("steps_per_epoch", steps_per_epoch),
                      ("batch_size", batch_size)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise ConfigError(f"{nm} must be a positive integer, got {v!r}")
        if not isinstance(record_every, int) or record_every < 1:
            raise ConfigError(f"record_every must be an integer >= 1, got {record_every!r}")
        if server is not None and store is not None:
            raise ConfigError("give store= (a local database) or server= (a traincast server), not both")
        for nm, v in (("flush_every_s", flush_every_s), ("timeout_s", timeout_s)):
            if not (isinstance(v, (int, float)) and v > 0):
                raise ConfigError(f"{nm} must be a positive number of seconds, got {v!r}")
        self.job = job
        self.clock = clock
        self.record_every = record_every
        self.server = server
        meta = dict(total_steps=total_steps, total_epochs=total_epochs, steps_per_epoch=steps_per_epoch,
                    model=model, hardware=hardware, batch_size=batch_size, price_usd_per_hour=price_usd_per_hour)
        if server is not None:
            self._sink = _ServerSink(server, token, spool, flush_every_s, close_timeout_s, timeout_s)
            self.store = None
        else:
            self._sink = _StoreSink(store)
            self.store = self._sink.store
        last = self._sink.open(job, meta, resume)
        self.job_id = getattr(self._sink, "jid", None)
        self.current_step = int(last) if last is not None else -1
        self.epoch = 0
        self._in_eval = False
        self.closed = False
        if last is not None:
            self._event("resume")
        self.start_s = clock()
        if last is None:
            # an origin row (step 0 = the start) so that the first step's duration is known
            self._sink.step(StepRecord(0, self.start_s))
            self.current_step = 0

    # ----------------------------------------------------------------- records
    def step(self, loss=None, metric=None, *, step: int | None = None, n: int = 1, lr=None) -> int:
        """Record the end of a training step (or of ``n`` steps), with its loss, metric and learning rate where
        given (the learning rate lets ``traincast converge`` see the schedule); return the step index."""
        if self.closed:
            raise ConfigError(f"tracker of job {self.job!r} is closed; open a new one with track(...)")
        if step is None:
            step = self.current_step + n
        if step <= self.current_step:
            raise ConfigError(f"step {step} is not after the last recorded step {self.current_step}")
        self.current_step = int(step)
        if step % self.record_every == 0:
            self._sink.step(StepRecord(self.current_step, self.clock(), _num("loss", loss), _num("metric", metric),
                                       float(self.epoch), _num("lr", lr)))
        return self.current_step

    def update(self, step: int, loss=None, metric=None, lr=None) -> None:
        """Attach a loss, metric or learning rate to step ``step`` after the fact (frameworks log after the step)."""
        loss, metric, lr = _num("loss", loss), _num("metric", metric), _num("lr", lr)
        # merged with the stored step (its time kept); a step not recorded (record_every > 1) gets no time
        self._sink.step(StepRecord(int(step), None, loss, metric, None, lr))

    def _event(self, kind: str, value=None) -> None:
        if kind not in EVENT_KINDS:
            raise ConfigError(f"unknown event kind {kind!r}; known: {', '.join(EVENT_KINDS)}")
        self._sink.event(Event(kind, max(self.current_step, 0), self.clock(), _num("value", value)))

    def epoch_end(self, metric=None) -> None:
        """Mark the end of an epoch (a pause may follow: shuffling, eval, checkpoint)."""
        self.epoch += 1
        self._event("epoch_end", metric)

    def eval_start(self) -> None:
        self._in_eval = True
        self._event("eval_start")

    def eval_end(self, metric=None) -> None:
        """Mark the end of an evaluation, with its metric (e.g. accuracy or eval loss)."""
        self._in_eval = False
        self._event("eval_end", metric)

    def checkpoint(self) -> None:
        self._event("checkpoint")

    def flush(self, timeout_s: float = 10.0) -> bool:
        """With a server: wait until what was recorded so far is posted; False if it could not be within
        ``timeout_s`` (it stays in the spool). With a store: nothing to wait for."""
        return self._sink.flush(timeout_s) if isinstance(self._sink, _ServerSink) else True

    # ---------------------------------------------------------------- forecasts
    def series(self):
        if self.store is None:
            raise ConfigError(f"a tracker recording to a server reads nothing back; ask the server: "
                              f"GET {self.server}/api/v1/jobs/{self.job}/eta")
        return _jobs.load_series(self.store, self.job)

    def eta(self, estimator: str | None = None):
        """The remaining-time estimate now (see :func:`traincast.online.estimate_remaining`)."""
        from traincast.online.estimate import estimate_remaining

        return estimate_remaining(self.series(), estimator=estimator)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._sink.close()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def track(job: str, total_steps: int | None = None, store: Store | str | None = None, **kwargs) -> Tracker:
    """Start (or resume) recording job ``job``; use as a context manager.

    Keyword arguments: ``total_epochs``, ``steps_per_epoch``, ``model``,
    ``hardware``, ``batch_size``, ``price_usd_per_hour``, ``record_every``
    (record one step in N), ``resume`` (False: start the job afresh),
    ``clock`` (a function returning seconds; ``time.time`` by default).
    To a server: ``server`` (``http://host:port``), ``token`` (default
    ``$TRAINCAST_TOKEN`` or the token file ``traincast serve`` writes),
    ``spool`` (file of batches waiting for the server), ``flush_every_s``
    (seconds between posts, 1), ``close_timeout_s`` (how long ``close()`` keeps
    trying, 10), ``timeout_s`` (per request, 5).
    """
    return Tracker(job, total_steps, store=store, **kwargs)
