"""A throw-away PostgreSQL server on loopback, for tests, benchmarks and trying a team store.

    with PostgresServer() as pg:          # initdb + pg_ctl start in a new temporary folder
        store = Store(pg.url)             # postgresql://traincast@127.0.0.1:PORT/traincast

Uses the server programs of Debian's ``postgresql`` package (``/usr/lib/postgresql/N/bin``, or
``pg_ctl`` on the PATH). PostgreSQL refuses to run as root, so as root the server runs as the
``postgres`` user (which that package creates) through ``runuser``. Nothing here installs
PostgreSQL: ``make test`` does.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from traincast.errors import ConfigError


def pg_bin(name: str) -> str:
    """Path of a PostgreSQL server program (``initdb``, ``pg_ctl``); ConfigError when PostgreSQL is not installed."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(Path(p).parts[4]))
    if found:
        return found[-1]
    exe = shutil.which(name)
    if exe:
        return exe
    raise ConfigError(f"PostgreSQL's {name} is not installed (Debian: apt-get install postgresql)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """``start()`` a server in a fresh folder; ``stop()`` it and remove the folder."""

    def __init__(self, port: int | None = None, user: str = "traincast", dbname: str = "traincast"):
        self.port = port or free_port()
        self.user, self.dbname = user, dbname
        self.dir: Path | None = None
        self._as: list[str] = []

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.dbname}"

    def _run(self, *args: str, timeout: float = 120) -> str:
        p = subprocess.run([*self._as, *args], capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-800:]}")
        return p.stdout

    def start(self) -> PostgresServer:
        initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
        self.dir = Path(tempfile.mkdtemp(prefix="traincast-pg-"))
        if os.geteuid() == 0:
            import pwd

            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise ConfigError("running as root needs the 'postgres' user of Debian's postgresql package") from None
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        data = self.dir / "data"
        self._run(initdb, "-D", str(data), "-U", self.user, "--auth=trust", "-E", "UTF8", "--no-sync")
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=on "
                "-c max_connections=300 -c shared_buffers=64MB")
        self._run(pg_ctl, "-D", str(data), "-o", opts, "-l", str(self.dir / "log"), "-w", "-t", "60", "start")
        self._createdb()
        return self

    def _createdb(self) -> None:
        import psycopg

        deadline = time.time() + 30
        while True:
            try:
                with psycopg.connect(f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres", autocommit=True) as c:
                    c.execute(f'CREATE DATABASE "{self.dbname}"')
                return
            except psycopg.OperationalError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        if self.dir is None:
            return
        try:
            self._run(pg_bin("pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop", timeout=60)
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
