"""`traincast serve`: the HTTP API and web UI; `traincast spool`: what recorders left for a server."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

from traincast.errors import ConfigError


def serve_settings(host: str, db: Optional[str], allow_remote: bool, token_file: Optional[Path], private: bool,
                   rate_limit: float, compute_per_min: float, max_body_bytes: int):
    """Check the binding and the tokens; return (ServeSettings, where the token lies)."""
    from traincast.serve.settings import ServeSettings, is_loopback, load_tokens

    remote = not is_loopback(host)
    if remote and not allow_remote:
        raise ConfigError(f"--host {host} would serve beyond this machine; add --allow-remote to mean it "
                          "(writes then need a token: set TRAINCAST_TOKEN or give --token-file)")
    for name, v in (("--rate-limit", rate_limit), ("--compute-per-min", compute_per_min)):
        if not (math.isfinite(v) and v >= 0):
            raise ConfigError(f"{name} must be a finite number >= 0 (0: no limit), got {v}")
    if max_body_bytes < 1024:
        raise ConfigError(f"--max-body-bytes must be at least 1024, got {max_body_bytes}")
    tokens, used = load_tokens(token_file, create=not remote)
    if remote and not tokens:
        raise ConfigError("--allow-remote needs a token: set TRAINCAST_TOKEN or give --token-file FILE "
                          "(one token of 16+ characters a line)")
    return ServeSettings(db=db, tokens=tokens, private=private, rate_per_s=rate_limit,
                         burst=max(1, int(rate_limit * 4)), compute_per_min=compute_per_min,
                         max_body_bytes=max_body_bytes), used


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        host: str = typer.Option("127.0.0.1", "--host", help="address to bind (loopback unless --allow-remote)"),
        port: int = typer.Option(8000, "--port", min=1, max=65535),
        db: Optional[str] = typer.Option(None, "--db", help="SQLite file or postgresql://user@host/db "
                                                           "(default: the store under $TRAINCAST_HOME)"),
        allow_remote: bool = typer.Option(False, "--allow-remote", help="allow binding beyond loopback (needs a token)"),
        token_file: Optional[Path] = typer.Option(None, "--token-file", help="accepted tokens, one a line "
                                                  "(also $TRAINCAST_TOKEN); default: serve.token beside the store, "
                                                  "created on first use"),
        private: bool = typer.Option(False, "--private", help="reads need a token too"),
        rate_limit: float = typer.Option(50.0, "--rate-limit", help="requests per second per client address (0: none)"),
        compute_per_min: float = typer.Option(60.0, "--compute-per-min",
                                              help="forecasts and plans per minute per client address (0: none)"),
        max_body_bytes: int = typer.Option(1 << 20, "--max-body-bytes", help="largest request body"),
        access_log: bool = typer.Option(False, "--access-log", help="log every request"),
    ):
        """Run the HTTP API (/api/v1, docs at /docs) and the web UI (/) on uvicorn."""
        import uvicorn

        from traincast.serve import create_app

        settings, token_path = serve_settings(host, db, allow_remote, token_file, private, rate_limit,
                                              compute_per_min, max_body_bytes)
        application = create_app(settings)
        shown = f"[{host}]" if ":" in host else host
        typer.echo(f"traincast serving http://{shown}:{port}/ (API docs /docs); store: {application.state.store.path}")
        typer.echo("writes need 'Authorization: Bearer <token>'; token: "
                   + (f"in {token_path}" if token_path else "from $TRAINCAST_TOKEN"))
        uvicorn.run(application, host=host, port=port, log_level="info", access_log=access_log,
                    timeout_graceful_shutdown=5)

    spool = typer.Typer(help="Rows that trackers could not send to a server yet.", no_args_is_help=True)
    app.add_typer(spool, name="spool")

    @spool.command("status")
    def spool_status(path: Optional[Path] = typer.Option(None, "--spool", help="spool file (default beside the store)")):
        """Batches and rows waiting, by server."""
        from traincast.online.recorder import Spool, default_spool_path

        p = path or default_spool_path()
        if not p.exists():
            typer.echo(f"no spool at {p}: nothing waits")
            return
        sp = Spool(p)
        rows = sp.conn.execute("SELECT server, COUNT(*), COALESCE(SUM(rows), 0) FROM spool GROUP BY server").fetchall()
        sp.close()
        if not rows:
            typer.echo(f"spool {p}: nothing waits")
        for server, b, r in rows:
            typer.echo(f"{server}: {b} batches, {r} rows")

    @spool.command("push")
    def spool_push(
        server: str = typer.Option(..., "--server", help="http://host:port of the traincast server"),
        token: Optional[str] = typer.Option(None, "--token", envvar="TRAINCAST_TOKEN", show_envvar=True),
        path: Optional[Path] = typer.Option(None, "--spool"),
    ):
        """Send what waits in the spool for SERVER."""
        from traincast.online.recorder import default_spool_path, push_spool

        p = path or default_spool_path()
        if not p.exists():
            typer.echo(f"no spool at {p}: nothing to send")
            return
        sent, left = push_spool(server, token, p)
        typer.echo(f"sent {sent} batches to {server}; {left} left")
