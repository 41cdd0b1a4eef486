"""Settings of a traincast server, and where its tokens come from."""

from __future__ import annotations

import ipaddress
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from traincast.errors import ConfigError


@dataclass(frozen=True)
class ServeSettings:
    """``db``: a SQLite path or a database URL (None: the default store). ``tokens``: accepted bearer
    tokens (writes need one; every request with ``private``). Limits: ``max_body_bytes`` per request,
    ``rate_per_s`` requests per second per client address (0: no limit) with bursts of ``burst``,
    ``compute_per_min`` forecasts and plans per minute per client, ``cache_size`` forecast/plan answers
    kept."""

    db: str | None = None
    tokens: tuple[str, ...] = ()
    private: bool = False
    max_body_bytes: int = 1 << 20
    rate_per_s: float = 50.0
    burst: int = 200
    compute_per_min: float = 60.0
    compute_wait_s: float = 300.0
    cache_size: int = 256
    pool_size: int = 10
    uploads_dir: Path | None = None
    refresh_s: float = 2.0
    extra: dict = field(default_factory=dict)


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def token_file_default() -> Path:
    from traincast.store import default_db_path

    return default_db_path().parent / "serve.token"


def load_tokens(token_file: str | Path | None = None, create: bool = False) -> tuple[tuple[str, ...], Path | None]:
    """Tokens from ``$TRAINCAST_TOKEN`` (comma-separated) and a token file (one per line; ``token_file``,
    ``$TRAINCAST_TOKEN_FILE`` or ``serve.token`` beside the default database). With ``create`` and no token
    anywhere, a random one is written to the default file (mode 0600). Returns (tokens, file used)."""
    toks = [t.strip() for t in os.environ.get("TRAINCAST_TOKEN", "").split(",") if t.strip()]
    explicit = token_file or os.environ.get("TRAINCAST_TOKEN_FILE")
    path = Path(explicit).expanduser() if explicit else token_file_default()
    used = None
    if path.is_file():
        try:
            toks += [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        except OSError as exc:
            raise ConfigError(f"cannot read the token file {str(path)!r}: {exc.strerror}") from None
        used = path
    elif explicit:
        raise ConfigError(f"token file {str(path)!r} " + ("is a folder; give a file with one token a line"
                                                          if path.is_dir() else "does not exist"))
    if not toks and create:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        tok = secrets.token_urlsafe(32)
        with os.fdopen(fd, "w") as f:
            f.write(tok + "\n")
        toks, used = [tok], path
    short = [t for t in toks if len(t) < 16]
    if short:
        raise ConfigError("a token must be at least 16 characters long (e.g. python -c \"import secrets; "
                          "print(secrets.token_urlsafe(32))\")")
    return tuple(dict.fromkeys(toks)), used
