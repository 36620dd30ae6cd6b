"""The HTTP side of ``monoagent serve``: what every HTTP channel shares.

An HTTP channel is a channel (registered through ``register_channels``) that also has
``enabled`` (its config section says so), ``has_credentials`` and ``credential_hint`` (whether its
credential is set, and where it is set: :func:`bind_problems` refuses a channel without one),
``routes()`` (Starlette routes,
mounted on the one server; a channel without HTTP routes, such as cron, returns none), ``start()``
(awaited once the server listens, on the serving loop: cron starts its scheduler there),
``stop_accepting()`` (called at once on SIGTERM/SIGINT: start no new turn, let those in flight
run on; cron stops firing ticks there), ``cancel_in_flight()`` (called once the shutdown grace period is
over: cancel the runs still going, whose requests are then answered 503) and ``shutdown()``
(wait until each cancelled run has published its continuity account, release the harness).
:func:`serve_channels` mounts every enabled one next to ``/healthz`` and ``/readyz`` and serves
them with uvicorn on the running asyncio loop.

The request guards live here so every channel answers alike: :func:`read_json` caps the body
(413) and names what is wrong with malformed JSON (400); :func:`bearer_ok` compares a bearer
token with each configured one in constant time (``hmac.compare_digest``); :func:`header_safe`
makes every header value echoed from a request ASCII before a turn is admitted and :func:`json_bytes`
cannot fail, so a committed turn is never answered 5xx; uvicorn serves through the connection guard
(:mod:`monoagent_plugins.serving.guard`: header and body time, unauthenticated connections), and a
route calls :func:`authenticated` once a request's credential is accepted. Starlette and uvicorn
are imported only by the functions that serve (the ``serve`` extra).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from monoagent import ConfigError, ServedChannel, logger

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from monoagent_plugins.serving.access_log import AccessLog
    from monoagent_plugins.serving.guard import GuardLimits

ANSWER_MARGIN_S = 5
RETRY_AFTER_S = 1
"""``Retry-After`` (seconds) of a 429 answered to an admission overload."""
IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
IDEMPOTENCY_KEY = re.compile(r"[\x20-\x7e]{1,255}")
"""What an ``Idempotency-Key`` must be: 1 to 255 printable ASCII characters (space to ``~``)."""
HEADER_SAFE = "".join(chr(code) for code in range(0x20, 0x7F) if chr(code) != "%")
"""The characters a header value echoed from the client keeps as they are; every other one is percent-encoded."""


class RequestRefused(Exception):
    """A request the server answers without running a turn: ``status`` and a message naming why."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", *, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.headers = {"Connection": "close"} if close else {}
        """``close``: the body was not read to its end, so the connection is closed after the answer."""


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


def header_safe(text: str) -> str:
    """``text`` as a header value: percent-encoded UTF-8 (RFC 3986) for every character outside printable ASCII, and ``%``.

    Printable ASCII other than ``%`` stays as it is, so a plain id is echoed unchanged; anything
    else (``用户``, ``é``) becomes ``%E7%94%A8...``, which every HTTP stack can send, and which
    :func:`header_text` reads back. Computed before a turn is admitted, it cannot fail after it.
    """
    return quote(text, safe=HEADER_SAFE)


def header_text(value: str, name: str) -> str:
    """A header value written by :func:`header_safe`'s rule, decoded; :class:`RequestRefused` 400 naming the rule.

    ``value`` is what Starlette decoded as Latin-1: a byte outside ASCII in it, or a ``%XX`` sequence
    that is not UTF-8, is refused (write such text percent-encoded as UTF-8).
    """
    if not value.isascii():
        raise RequestRefused(400, f"the {name} header must be ASCII: write other characters percent-encoded as UTF-8 "
                                  f"(RFC 3986, e.g. %E7%94%A8 for 用), as the response's {name} is")
    try:
        return unquote(value, errors="strict")
    except UnicodeDecodeError:
        raise RequestRefused(400, f"the {name} header's percent-encoded bytes are not UTF-8") from None


def json_bytes(payload: Any, *, compact: bool = True) -> bytes:
    """``payload`` as UTF-8 JSON bytes, which cannot fail on text: a string holding a lone surrogate (which UTF-8
    cannot encode) makes the whole document ASCII with ``\\u`` escapes instead of raising after a turn committed."""
    separators = (",", ":") if compact else None
    text = json.dumps(payload, ensure_ascii=False, separators=separators)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(payload, ensure_ascii=True, separators=separators).encode("ascii")


def idempotency_key(headers: Any) -> str | None:
    """The request's ``Idempotency-Key`` (Starlette ``Headers``), or None; :class:`RequestRefused` 400 when malformed."""
    values = headers.getlist(IDEMPOTENCY_HEADER)
    if not values:
        return None
    if len(values) > 1 or not IDEMPOTENCY_KEY.fullmatch(values[0]):
        raise RequestRefused(400, f"{IDEMPOTENCY_HEADER} must be one header of 1 to 255 printable ASCII characters "
                                  f"(space to ~)")
    return str(values[0])


async def read_json(request: Request, max_bytes: int, timeout_s: float | None = None,
                    timeout_key: str = "serve.bodyTimeoutMs") -> Any:
    """The request body parsed as JSON; :class:`RequestRefused` 413 past ``max_bytes``, 400 when malformed,
    408 past ``timeout_s`` (see :func:`read_body`)."""
    return parse_json(await read_body(request, max_bytes, timeout_s, timeout_key))


async def read_body(request: Request, max_bytes: int, timeout_s: float | None = None,
                    timeout_key: str = "serve.bodyTimeoutMs") -> bytes:
    """The raw request body; :class:`RequestRefused` 413 past ``max_bytes``, 408 when it is not all there in time.

    The body is read as it streams in and abandoned once over the cap, so an oversized body is
    never held in memory whole, whatever its ``Content-Length`` claims. A channel that checks a
    signature over the raw bytes (webhook) reads them here, verifies, then :func:`parse_json`.
    ``timeout_s`` counts from the end of the request's headers (when the server's connection
    guard knows it, else from now): a body still incomplete then is answered 408 and the
    connection closed (``serve.bodyTimeoutMs``, ``serve.unauthenticatedBodyTimeoutMs``).
    """
    from starlette.requests import ClientDisconnect

    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise RequestRefused(413, f"request body of {declared} bytes is over the limit of {max_bytes} bytes (serve.maxBodyBytes)",
                             close=True)
    body = bytearray()

    async def read() -> None:
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > max_bytes:
                raise RequestRefused(413, f"request body is over the limit of {max_bytes} bytes (serve.maxBodyBytes)",
                                     close=True)

    connection = guarded_connection(request.scope)
    started = connection.headers_done_at if connection is not None and connection.headers_done_at else None
    try:
        if timeout_s is None:
            await read()
        else:
            async with asyncio.timeout_at((started or asyncio.get_running_loop().time()) + timeout_s):
                await read()
    except TimeoutError:
        assert timeout_s is not None
        raise RequestRefused(408, f"request body not received in full within {timeout_s * 1000:.0f} ms of its headers "
                                  f"({timeout_key}; got {len(body)} bytes): send the body at once", "request_timeout",
                             close=True) from None
    except ClientDisconnect:
        raise RequestRefused(400, "the client closed the connection before the body was complete", close=True) from None
    return bytes(body)


def guarded_connection(scope: Mapping[str, Any]) -> Any:
    """The :class:`~monoagent_plugins.serving.guard.GuardedConnection` a request came on, or None (no guard)."""
    from monoagent_plugins.serving.guard import CONNECTION

    state = scope.get("state")
    return state.get(CONNECTION) if isinstance(state, dict) else None


def authenticated(request: Request) -> None:
    """Say that ``request`` presented an accepted credential: its connection no longer counts as unauthenticated
    (``serve.maxUnauthenticatedConnections``)."""
    connection = guarded_connection(request.scope)
    if connection is not None:
        connection.authenticate()


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


def bind_problems(host: str, channels: Sequence[ServedChannel], allow_unauthenticated: bool) -> list[str]:
    """Why ``channels`` may not be served on ``host``: one line per channel without credentials.

    Every HTTP channel needs a credential by default, on any address. ``serve.allowUnauthenticated``
    lifts that on a loopback bind only (a bind only this machine reaches); on any other address a
    channel without credentials is always refused. Each line names the channel, how to set its
    credential (its ``credential_hint``) and, on loopback, the opt-out.
    """
    loopback = is_loopback(host)
    if allow_unauthenticated and loopback:
        return []
    problems = []
    for channel in channels:
        if channel.has_credentials:
            continue
        if loopback:
            remedy = (f"set {channel.credential_hint}, or serve it without credentials on this loopback address with "
                      f"serve.allowUnauthenticated = true (MONO_AGENT_SERVE_ALLOW_UNAUTHENTICATED=1)")
        else:
            remedy = (f"serve.host = {host!r} is not a loopback address, where a channel is never served without "
                      f"credentials: set {channel.credential_hint}")
        problems.append(f"channel {channel.name!r} has no credentials: {remedy}")
    return problems


def check_bind(host: str, channels: Sequence[ServedChannel], allow_unauthenticated: bool) -> list[str]:
    """Refuse (:class:`ConfigError`) to serve a channel without credentials, unless allowed (see :func:`bind_problems`).

    Returns the names of the channels served without credentials (the opt-out is in use), for the
    server to say so at start-up.
    """
    problems = bind_problems(host, channels, allow_unauthenticated)
    if problems:
        raise ConfigError(problems)
    return [channel.name for channel in channels if not channel.has_credentials]


SERVER_ROUTES = "server"
"""The ``channel`` of the server's own routes (``/healthz``, ``/readyz``) in the access log."""


def build_app(channels: Sequence[ServedChannel], phase: Callable[[], str]) -> AccessLog:
    """The application: ``/healthz``, ``/readyz``, each channel's routes, all behind the access log.

    ``/healthz`` answers 200 while the process answers at all. ``/readyz`` answers 200 only once
    ``phase()`` is ``"ready"`` (every channel's ``start()`` has completed, no signal yet), else 503
    with the phase (``"starting"``, ``"stopping"``), so a load balancer sends turns only to a
    server that takes them.
    """
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from monoagent_plugins.serving.access_log import AccessLog

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        now = phase()
        if now == "ready":
            return JSONResponse({"status": "ready", "channels": [c.name for c in channels]})
        return JSONResponse({"status": now}, status_code=503)

    routes: list[Any] = [Route("/healthz", healthz), Route("/readyz", readyz)]
    owners = {id(route): SERVER_ROUTES for route in routes}
    for channel in channels:
        for route in channel.routes():
            routes.append(route)
            owners[id(route)] = channel.name
    return AccessLog(Starlette(routes=routes), channel_of=lambda scope: owners.get(id(scope.get("route")), "-"))


async def serve_channels(channels: Sequence[ServedChannel], host: str, port: int, grace_s: float,
                         on_listening: Callable[[str, int], None], *, forwarded_allow_ips: Sequence[str] = (),
                         limits: GuardLimits | None = None) -> None:
    """Serve ``channels`` until SIGTERM or SIGINT, then drain them within ``grace_s`` seconds.

    The caller has checked the bind first (:func:`check_bind`). ``X-Forwarded-For`` and
    ``X-Forwarded-Proto`` are believed only from a peer in ``forwarded_allow_ips`` (a reverse
    proxy), never from uvicorn's ``FORWARDED_ALLOW_IPS`` environment variable. ``limits`` bound
    each request's header and body time and the unauthenticated connections
    (:mod:`monoagent_plugins.serving.guard`; the ``serve`` section's defaults when None).

    ``/readyz`` is 503 until every channel's ``start()`` has completed (``"starting"``); the
    ``serve: bound http://...`` record (INFO) comes before the starts, the ``on_listening`` call
    after them. On the signal the server stops accepting connections and ``/readyz`` turns 503; requests in
    flight get ``grace_s`` to finish, then each channel cancels what is left (those requests are
    answered 503) and waits for the cancelled runs' continuity accounts. uvicorn's own deadline
    is :data:`ANSWER_MARGIN_S` later, so a cancelled request still gets its answer written. The signal is consumed (the process exits 0), unlike
    uvicorn's own handling, which re-raises it after shutdown.
    """
    import asyncio
    import contextlib
    import signal

    import uvicorn

    from monoagent_plugins.serving.access_log import forward_uvicorn_records

    stopping = asyncio.Event()
    phase = ["starting"]

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
                phase[0] = "stopping"
                for channel in channels:
                    channel.stop_accepting()
                asyncio.get_running_loop().call_later(grace_s, cancel_in_flight)

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            bound = [sock.getsockname()[:2] for server in self.servers for sock in server.sockets]
            for bound_host, bound_port in bound:
                logger.info("serve: bound http://{}:{}, starting {}", bound_host, bound_port, ", ".join(c.name for c in channels))
            for channel in channels:
                await channel.start()
            if not stopping.is_set():
                phase[0] = "ready"
            for bound_host, bound_port in bound:
                on_listening(bound_host, bound_port)

    def cancel_in_flight() -> None:
        for channel in channels:
            cancelled = channel.cancel_in_flight()
            if cancelled:
                logger.warning("serve: grace period over, {} run(s) of {} cancelled", cancelled, channel.name)

    from monoagent_plugins.serving.guard import guarded_protocol
    from monoagent_plugins.serving.serve import ServeConfig

    forward_uvicorn_records()
    app = build_app(channels, phase=lambda: phase[0])
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False,
                            http=guarded_protocol(limits or ServeConfig().guard_limits()),
                            proxy_headers=bool(forwarded_allow_ips), forwarded_allow_ips=list(forwarded_allow_ips),
                            timeout_graceful_shutdown=math.ceil(grace_s + ANSWER_MARGIN_S), lifespan="off")
    server = ChannelServer(config)
    try:
        await server.serve()
    finally:
        for channel in channels:
            await channel.shutdown()
