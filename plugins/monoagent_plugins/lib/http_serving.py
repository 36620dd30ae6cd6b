"""The HTTP side of ``monoagent serve``: what every HTTP channel shares.

An HTTP channel is a channel (registered through ``register_channels``) that also has
``enabled`` (its config section says so), ``has_credentials``, ``routes()`` (Starlette routes,
mounted on the one server; a channel without HTTP routes, such as cron, returns none), ``start()``
(awaited once the server listens, on the serving loop: cron starts its scheduler there),
``cancel_in_flight()`` (called once the shutdown grace period is
over: cancel the runs still going, whose requests are then answered 503) and ``shutdown()``
(wait until each cancelled run has published its continuity account, release the harness).
:func:`serve_channels` mounts every enabled one next to ``/healthz`` and ``/readyz`` and serves
them with uvicorn on the running asyncio loop.

The request guards live here so every channel answers alike: :func:`read_json` caps the body
(413) and names what is wrong with malformed JSON (400); :func:`bearer_ok` compares a bearer
token with each configured one in constant time (``hmac.compare_digest``). Starlette and uvicorn
are imported only by the functions that serve (the ``serve`` extra).
"""

from __future__ import annotations

import hmac
import json
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from monoagent.kernel.errors import ConfigError
from monoagent.kernel.log import logger

ANSWER_MARGIN_S = 5
RETRY_AFTER_S = 1
"""``Retry-After`` (seconds) of a 429 answered to an admission overload."""


@runtime_checkable
class HttpChannel(Protocol):
    """A channel ``monoagent serve`` mounts on its HTTP server."""

    name: str
    enabled: bool
    has_credentials: bool

    def routes(self) -> Sequence[Any]: ...

    async def start(self) -> None: ...

    def cancel_in_flight(self) -> int: ...

    async def shutdown(self) -> None: ...


class RequestRefused(Exception):
    """A request the server answers without running a turn: ``status`` and a message naming why."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses: a bind only this machine reaches."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bearer_ok(authorization: str | None, tokens: Sequence[str]) -> bool:
    """Whether ``Authorization: Bearer <token>`` names one of ``tokens``, compared in constant time.

    Every configured token is compared, so the time taken does not say which one nearly matched.
    """
    scheme, _, presented = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not presented:
        return False
    matched = False
    for token in tokens:
        matched |= hmac.compare_digest(presented.strip().encode(), token.encode())
    return matched


async def read_json(request: Any, max_bytes: int) -> Any:
    """The request body parsed as JSON; :class:`RequestRefused` 413 past ``max_bytes``, 400 when malformed."""
    return parse_json(await read_body(request, max_bytes))


async def read_body(request: Any, max_bytes: int) -> bytes:
    """The raw request body; :class:`RequestRefused` 413 past ``max_bytes``.

    The body is read as it streams in and abandoned once over the cap, so an oversized body is
    never held in memory whole, whatever its ``Content-Length`` claims. A channel that checks a
    signature over the raw bytes (webhook) reads them here, verifies, then :func:`parse_json`.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise RequestRefused(413, f"request body of {declared} bytes is over the limit of {max_bytes} bytes (serve.maxBodyBytes)")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise RequestRefused(413, f"request body is over the limit of {max_bytes} bytes (serve.maxBodyBytes)")
    return bytes(body)


def parse_json(body: bytes) -> Any:
    """``body`` parsed as UTF-8 JSON; :class:`RequestRefused` 400 naming what is malformed."""
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RequestRefused(400, f"request body is not UTF-8: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise RequestRefused(400, f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise RequestRefused(400, "request body is not valid JSON: arrays and objects are nested too deeply") from None


def check_bind(host: str, channels: Sequence[HttpChannel]) -> None:
    """Refuse to start a channel without credentials on an address other machines can reach."""
    if is_loopback(host):
        return
    for channel in channels:
        if not channel.has_credentials:
            raise ConfigError(
                f"channel {channel.name!r} has no credentials and serve.host = {host!r} is not a loopback address: "
                f"set its tokens (for openai-api: openaiApi.tokens in the config file or MONO_AGENT_OPENAI_API_TOKENS=tok1,tok2), "
                f"or bind to 127.0.0.1"
            )


def build_app(channels: Sequence[HttpChannel], ready: Callable[[], bool]) -> Any:
    """The Starlette application: ``/healthz`` (the process answers), ``/readyz`` (accepting turns), and each channel's routes."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def healthz(request: Any) -> Any:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Any) -> Any:
        if ready():
            return JSONResponse({"status": "ready", "channels": [c.name for c in channels]})
        return JSONResponse({"status": "stopping"}, status_code=503)

    routes: list[Any] = [Route("/healthz", healthz), Route("/readyz", readyz)]
    for channel in channels:
        routes.extend(channel.routes())
    return Starlette(routes=routes)


async def serve_channels(channels: Sequence[HttpChannel], host: str, port: int, grace_s: float,
                         on_listening: Callable[[str, int], None]) -> None:
    """Serve ``channels`` until SIGTERM or SIGINT, then drain them within ``grace_s`` seconds.

    On the signal the server stops accepting connections and ``/readyz`` turns 503; requests in
    flight get ``grace_s`` to finish, then each channel cancels what is left (those requests are
    answered 503) and waits for the cancelled runs' continuity accounts. uvicorn's own deadline
    is :data:`ANSWER_MARGIN_S` later, so a cancelled request still gets its answer written. The signal is consumed (the process exits 0), unlike
    uvicorn's own handling, which re-raises it after shutdown.
    """
    import asyncio
    import contextlib
    import signal

    import uvicorn

    check_bind(host, channels)
    stopping = asyncio.Event()

    class ChannelServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Any:
            loop = asyncio.get_running_loop()
            watched = []
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self._stop, sig)
                except (NotImplementedError, RuntimeError, ValueError) as exc:  # not the main thread, or Windows
                    logger.debug("serve: {} keeps its default behaviour ({})", sig.name, exc)
                else:
                    watched.append(sig)
            try:
                yield
            finally:
                for sig in watched:
                    loop.remove_signal_handler(sig)

        def _stop(self, sig: signal.Signals) -> None:
            logger.info("serve: {} received, stopping (grace {} s)", sig.name, grace_s)
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            self.should_exit = True
            if not stopping.is_set():
                stopping.set()
                asyncio.get_running_loop().call_later(grace_s, cancel_in_flight)

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            for channel in channels:
                await channel.start()
            for server in self.servers:
                for sock in server.sockets:
                    bound_host, bound_port = sock.getsockname()[:2]
                    on_listening(bound_host, bound_port)

    def cancel_in_flight() -> None:
        for channel in channels:
            cancelled = channel.cancel_in_flight()
            if cancelled:
                logger.warning("serve: grace period over, {} run(s) of {} cancelled", cancelled, channel.name)

    app = build_app(channels, ready=lambda: not stopping.is_set())
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False,
                            timeout_graceful_shutdown=math.ceil(grace_s + ANSWER_MARGIN_S), lifespan="off")
    server = ChannelServer(config)
    try:
        await server.serve()
    finally:
        for channel in channels:
            await channel.shutdown()
