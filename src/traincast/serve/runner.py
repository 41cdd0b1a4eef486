"""Run ``traincast serve`` as a child process on loopback (tests, benchmarks, notebooks).

    with ServerProcess(db=tmp / "t.db", token="x" * 32) as srv:
        track("job", server=srv.url, token=srv.token) ...
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from traincast.store.pgserver import free_port


class ServerProcess:
    def __init__(self, db: str | Path, token: str, port: int | None = None, home: str | Path | None = None,
                 args: tuple[str, ...] = (), log: str | Path | None = None):
        self.db, self.token = str(db), token
        self.port = port or free_port()
        self.home = home
        self.args = args
        self.log = Path(log) if log else None
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> ServerProcess:
        src = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "TRAINCAST_TOKEN": self.token,
               "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
        if self.home:
            env["TRAINCAST_HOME"] = str(self.home)
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen([sys.executable, "-m", "traincast", "serve", "--port", str(self.port), "--db",
                                      self.db, *self.args], env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"traincast serve exited with {self.proc.returncode}"
                                   + (f"; see {self.log}" if self.log else ""))
            try:
                with urllib.request.urlopen(self.url + "/api/v1/health", timeout=2) as r:
                    if json.loads(r.read())["status"] == "ok":
                        return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"traincast serve did not answer on {self.url} within {timeout_s:g} s")

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
