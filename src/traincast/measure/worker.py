"""Measurement work in fresh Python processes: ``python -m traincast.measure.worker CALL RESULT``.

The worker loads a pickled call ``(fn, args, kwargs)`` from the file CALL, runs it, pickles
``("ok", value)`` or ``("err", exception)`` into the file RESULT and leaves with ``os._exit``,
without running C++ destructors: a gloo process group torn down while its peer closes its sockets
sometimes aborts a process whose work is done ("terminate called without an active exception").

Plain subprocesses rather than multiprocessing's spawn: spawn re-imports the parent's ``__main__``,
which re-runs a caller's script that has no ``if __name__ == "__main__"`` guard and breaks under
``python -m traincast``. ``fn`` must be importable by name (a module-level function), as for pickle.

``call(fn, *args, **kw)`` runs one call and returns its value (or raises its exception);
``start(fn, args, kwargs)`` returns a :class:`Worker` handle, for several processes at once
(the ranks of ``bench ddp``). Whatever happens in the parent, ``Worker.close`` kills a child that is
still running, so no orphan keeps timing on the cores.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time

from traincast.errors import ConfigError, TraincastError


def _env(threads: int | None) -> dict:
    import traincast

    src = os.path.dirname(os.path.dirname(os.path.abspath(traincast.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if threads:
        env.setdefault("OMP_NUM_THREADS", str(threads))
    return env


class Worker:
    """One worker process running one call."""

    def __init__(self, fn, args=(), kwargs=None, *, threads: int | None = None, name: str = "measuring process"):
        self.name = name
        self._tmp = tempfile.mkdtemp(prefix="traincast-worker-")
        self._call = os.path.join(self._tmp, "call.pkl")
        self._result = os.path.join(self._tmp, "result.pkl")
        with open(self._call, "wb") as f:
            pickle.dump((fn, tuple(args), dict(kwargs or {})), f, protocol=pickle.HIGHEST_PROTOCOL)
        self._log = open(os.path.join(self._tmp, "log.txt"), "w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "traincast.measure.worker", self._call, self._result],
                                     env=_env(threads), stdout=self._log, stderr=subprocess.STDOUT)

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        return self.proc.poll()

    def log_tail(self, lines: int = 3) -> str:
        self._log.flush()
        self._log.seek(0)
        tail = [ln for ln in self._log.read().splitlines() if ln.strip()][-lines:]
        return " | ".join(tail)

    def _answer(self):
        """("ok", value) or ("err", exception) once the process has written it, else None."""
        if not hasattr(self, "_msg"):
            try:
                with open(self._result, "rb") as f:
                    self._msg = pickle.load(f)
            except (OSError, EOFError, pickle.UnpicklingError):
                return None
        return self._msg

    def failed(self) -> bool:
        """Whether the process has ended without a value: an exception, or no answer at all."""
        if self.proc.poll() is None:
            return False
        msg = self._answer()
        return msg is None or msg[0] == "err"

    def result(self, timeout: float | None = None):
        """Wait for the call and return its value or raise its exception; a process that died without an
        answer (killed, out of memory, ``os._exit``) or ran past ``timeout`` seconds is a ConfigError."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise ConfigError(f"the {self.name} ran past {timeout:.0f} s and was stopped") from None
        msg = self._answer()
        if msg is None:
            code = self.proc.returncode
            tail = self.log_tail()
            raise ConfigError(f"the {self.name} died (exit code {code}"
                              f"{': killed, out of memory?' if code is not None and code < 0 else ''})"
                              + (f": {tail}" if tail else "") + "; try smaller batch sizes")
        status, value = msg
        if status == "err":
            raise value
        return value

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        """Kill the process if it still runs and remove its files."""
        self.kill()
        self._log.close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def start(fn, args=(), kwargs=None, *, threads: int | None = None, name: str = "measuring process") -> Worker:
    """Start ``fn(*args, **kwargs)`` in a fresh process; ``threads`` sets its OMP_NUM_THREADS if unset."""
    return Worker(fn, args, kwargs, threads=threads, name=name)


def call(fn, *args, **kw):
    """``fn(*args, **kw)`` in a fresh process: its value, or its exception raised here."""
    with start(fn, args, kw) as w:
        return w.result()


def wait_all(workers: list[Worker], timeout: float | None = None, poll_s: float = 0.05) -> list:
    """Results of workers that run together (the ranks of one job): as soon as one fails the others are
    stopped (they would wait for it forever), and the failure is raised."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while any(w.poll() is None for w in workers):
        if any(w.failed() for w in workers):
            break
        if deadline is not None and time.monotonic() > deadline:
            for w in workers:
                w.kill()
            raise ConfigError(f"{len(workers)} worker processes ({workers[0].name}) ran past {timeout:.0f} s and were stopped")
        time.sleep(poll_s)
    bad = [w for w in workers if w.failed()]
    for w in workers:
        w.kill()
    if bad:
        bad[0].result()  # raises: the call's exception, or a died-without-an-answer error
    return [w.result() for w in workers]


def _sendable(msg: tuple, fn) -> bytes:
    """``msg`` pickled, checked to load back (an exception class whose constructor takes other arguments
    dumps but does not load); what does not survive the trip comes back as a plain error instead."""
    try:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)
        return data
    except Exception as exc:
        status, value = msg
        if status == "err":
            value = (ConfigError(str(value)) if isinstance(value, TraincastError)
                     else RuntimeError(f"{type(value).__name__}: {value}"))
        else:
            value = RuntimeError(f"the result of {getattr(fn, '__name__', fn)!r} cannot be sent back: "
                                 f"{type(exc).__name__}: {exc}")
        return pickle.dumps(("err", value))


def _main(call_path: str, result_path: str) -> None:
    with open(call_path, "rb") as f:
        fn, args, kw = pickle.load(f)
    try:
        msg = ("ok", fn(*args, **kw))
    except BaseException as exc:  # sent back and raised in the parent
        msg = ("err", exc)
    data = _sendable(msg, fn)
    tmp = result_path + ".part"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, result_path)  # the parent never reads half a result
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
