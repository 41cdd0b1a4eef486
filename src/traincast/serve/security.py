"""Bearer tokens (compared in constant time), request size limits, rate limits."""

from __future__ import annotations

import hmac
import json
import threading
import time

from fastapi import HTTPException, Request

from traincast.serve.settings import ServeSettings


def token_ok(given: str | None, tokens: tuple[str, ...]) -> bool:
    """Whether ``given`` is one of ``tokens``; every token is compared, each in constant time."""
    if not given or not tokens:
        return False
    g = given.encode()
    ok = False
    for t in tokens:
        ok |= hmac.compare_digest(g, t.encode())
    return ok


def bearer(request: Request) -> str | None:
    h = request.headers.get("authorization", "")
    scheme, _, value = h.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def require_token(request: Request) -> None:
    """Dependency of every write (and of every request on a private server)."""
    settings: ServeSettings = request.app.state.settings
    if not token_ok(bearer(request), settings.tokens):
        raise HTTPException(401, "a write needs 'Authorization: Bearer <token>' with a token of this server "
                                 "(TRAINCAST_TOKEN or the token file it was started with)",
                            headers={"WWW-Authenticate": "Bearer"})


class TokenBucket:
    """Per-key token buckets: ``rate`` per second, at most ``burst`` at once."""

    def __init__(self, rate: float, burst: float):
        self.rate, self.burst = rate, burst
        self.state: dict[str, tuple[float, float]] = {}
        self.lock = threading.Lock()

    def take(self, key: str) -> float:
        """0 when allowed, else the seconds to wait."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic()
        with self.lock:
            tokens, last = self.state.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens >= 1:
                self.state[key] = (tokens - 1, now)
                if len(self.state) > 10_000:  # forget idle clients
                    self.state = {k: v for k, v in self.state.items() if now - v[1] < 60}
                return 0.0
            self.state[key] = (tokens, now)
            return (1 - tokens) / self.rate


COMPUTE_PATHS = ("/api/v1/forecast", "/api/v1/plan", "/api/v1/compare")


class LimitsMiddleware:
    """Pure ASGI: 413 for a body over ``max_body_bytes`` (by Content-Length, or counted while it streams),
    429 with Retry-After past the rate limits (per client address; forecasts and plans have their own)."""

    def __init__(self, app, settings: ServeSettings):
        self.app = app
        self.max = settings.max_body_bytes
        self.general = TokenBucket(settings.rate_per_s, settings.burst)
        self.compute = TokenBucket(settings.compute_per_min / 60.0, max(1.0, settings.compute_per_min / 6))

    async def _reply(self, send, status: int, detail: str, headers=()):
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                *headers]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        client = (scope.get("client") or ("?", 0))[0]
        path = scope.get("path", "")
        bucket = self.compute if (scope["method"] == "POST" and path in COMPUTE_PATHS) else self.general
        wait = bucket.take(client)
        if wait > 0:
            return await self._reply(send, 429, f"too many requests from {client}; retry in {wait:.1f} s",
                                     [(b"retry-after", str(max(1, round(wait))).encode())])
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max:
            return await self._reply(send, 413, f"request body of {int(length)} bytes is over the limit of {self.max}")
        seen = 0
        too_big = False

        async def limited():
            nonlocal seen, too_big
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max:
                    too_big = True
                    raise _TooBig()
            return msg

        started = False

        async def tracking_send(msg):
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, limited, tracking_send)
        except _TooBig:
            if not started:
                await self._reply(send, 413, f"request body is over the limit of {self.max} bytes")


class _TooBig(Exception):
    pass
