"""HTTP plumbing shared by the bundled provider runtimes (not a plugin).

One streaming POST per provider step, with httpx and httpx-sse imported on first use so that
loading the provider plugins costs nothing at start-up. Everything that can go wrong on the wire
becomes a :class:`~monoagent._kernel.errors.ProviderError` whose message is one line naming the provider,
what happened and what to do, with ``retryable`` set exactly for transient failures:

- HTTP 408, 409, 429 and every 5xx (Anthropic's 529 ``overloaded_error`` included): retryable,
  with ``retry_after`` from ``retry-after-ms``, ``Retry-After`` (delta-seconds or HTTP-date) or
  OpenAI's ``x-ratelimit-reset-requests`` / ``x-ratelimit-reset-tokens``;
- a connection reset or dropped mid-stream, a read or connect timeout: retryable;
- a refused connection or an unknown host: fatal, naming the URL and the setting to check;
- any other 4xx: fatal; a context-length error is :class:`~monoagent._kernel.errors.ContextLimitError`.

What a server sends is bounded here before anything is parsed: the stream is read as raw bytes
(``accept-encoding: identity`` is asked for and a compressed answer refused, so a small answer
cannot inflate), cut into lines and events by :class:`~monoagent_plugins.providers.events.SSEReader`, which
refuses a line or an event over ``providers.client.maxStreamEventBytes`` *while reading it* (at
most one network chunk past the cap is ever buffered), and an error body is read up to
:data:`ERROR_BODY_MAX_BYTES`. Parsing what the runtimes read, and checking its shape, is
:mod:`monoagent_plugins.providers.events`; the time and output limits of a stream are the
harness's (:mod:`monoagent._pipeline.stream`), which sees every event.

Cancellation is never caught: leaving the ``async with`` closes the response and its connection.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import attrs

from monoagent import ContextLimitError, ProviderError, scrub_unicode
from monoagent_plugins.providers.events import SSEReader, excerpt

RETRYABLE_STATUS = frozenset({408, 409, 429})
DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024


ERROR_BODY_MAX_BYTES = 64 * 1024
"""Bytes of an HTTP error answer (or of an answer that is not an event stream) read for its message."""


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_SSL_CONTEXT: Any = None
_CLIENTS: weakref.WeakKeyDictionary[Any, dict[bool, tuple[Any, Any]]] = weakref.WeakKeyDictionary()


@attrs.frozen
class Endpoint:
    """Where and how one provider is called.

    ``provider`` names it in every message; ``setting`` and ``url_env`` name the config key and
    environment variable of its base URL, for the hint of an unreachable-server error.
    """

    provider: str
    url: str
    headers: Mapping[str, str]
    setting: str
    url_env: str | None
    connect_timeout: float
    read_timeout: float
    key_env: str | None = None
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES


def parse_retry_after(headers: Mapping[str, str], now: float | None = None, *, rate_limited: bool = True) -> float | None:
    """The delay in seconds the server asked for, or None.

    ``retry-after-ms`` wins (milliseconds), then ``Retry-After`` as delta-seconds or an
    HTTP-date, then, when ``rate_limited`` (a 429 answer), the longer of OpenAI's
    ``x-ratelimit-reset-requests`` and ``x-ratelimit-reset-tokens`` (durations such as ``1s``,
    ``6m0s``, ``20ms``): those say when a rate-limit window refills, which is no retry hint for
    a server error. A value that is not a finite number (``inf``, ``nan``) is ignored.
    """
    value = headers.get("retry-after-ms")
    if value:
        with contextlib.suppress(ValueError):
            if math.isfinite(seconds := float(value) / 1000.0):
                return max(seconds, 0.0)
    value = headers.get("retry-after")
    if value:
        value = value.strip()
        try:
            seconds = float(value)
        except ValueError:
            pass
        else:
            return max(seconds, 0.0) if math.isfinite(seconds) else None
        import email.utils

        with contextlib.suppress(TypeError, ValueError, IndexError):
            when = email.utils.parsedate_to_datetime(value)
            return max(when.timestamp() - (time.time() if now is None else now), 0.0)
    if not rate_limited:
        return None
    resets = [_duration(headers.get(name, "")) for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")]
    known = [r for r in resets if r is not None]
    return max(known) if known else None


def _duration(text: str) -> float | None:
    parts = _DURATION.findall(text.strip())
    if not parts or "".join(f"{n}{u}" for n, u in parts) != text.strip():
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def _ssl_context() -> Any:
    """One SSL context per process: building one loads the CA bundle (tens of milliseconds)."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        import ssl

        import certifi

        _SSL_CONTEXT = ssl.create_default_context(cafile=certifi.where())
    return _SSL_CONTEXT


def _error_detail(body: bytes) -> tuple[str, str, str]:
    """(type, code, message) from an Anthropic- or OpenAI-shaped error body; raw text otherwise."""
    try:
        data = json.loads(body)
    except ValueError:
        return "", "", excerpt(body.decode("utf-8", "replace").strip(), 300)
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("type") or ""), str(error.get("code") or ""), str(error.get("message") or "")
    if isinstance(error, str):
        return "", "", excerpt(error, 300)
    return "", "", excerpt(json.dumps(data), 300)


def status_error(
    endpoint: Endpoint,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    is_context_limit: Callable[[int, str, str, str], bool],
) -> ProviderError:
    """The ProviderError for an HTTP error answer (the body already read)."""
    kind, code, message = _error_detail(body)
    names = "/".join(dict.fromkeys(part for part in (kind, code) if part))
    label = f"{status} {names}" if names else str(status)
    text = f"{endpoint.provider}: HTTP {label}: {' '.join(message.split()) or 'no detail'} (POST {endpoint.url})"
    if is_context_limit(status, kind, code, message):
        return ContextLimitError(
            f"{text}; the prompt does not fit the model's context window", provider=endpoint.provider, status=status
        )
    retryable = status in RETRYABLE_STATUS or status >= 500
    if status in (401, 403) and endpoint.key_env:
        text += f"; check {endpoint.key_env} (or providers.{endpoint.setting.split('.')[1]}.apiKey)"
    return ProviderError(
        text,
        retryable=retryable,
        provider=endpoint.provider,
        status=status,
        retry_after=parse_retry_after(headers, rate_limited=status == 429) if retryable else None,
    )


def _where(endpoint: Endpoint) -> str:
    env = f" (or {endpoint.url_env})" if endpoint.url_env else ""
    return f"check that the server is running and that {endpoint.setting}{env} points at it"


def _reason(exc: BaseException) -> str:
    """The most specific cause: the OS error under httpx's "All connection attempts failed"."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and (cause.errno or cause.strerror):
            return os.strerror(cause.errno) if isinstance(cause.errno, int) and cause.errno > 0 else str(cause.strerror)
        cause = cause.__cause__ or cause.__context__
    return " ".join((str(exc) or type(exc).__name__).split())


def transport_error(endpoint: Endpoint, exc: Exception) -> ProviderError:
    """The ProviderError for an httpx transport failure (no HTTP status)."""
    import httpx

    reason = _reason(exc)
    provider = endpoint.provider
    if isinstance(exc, httpx.ConnectTimeout):
        return ProviderError(
            f"{provider}: timed out connecting to {endpoint.url} after {endpoint.connect_timeout:g} s; {_where(endpoint)}",
            retryable=True,
            provider=provider,
        )
    if isinstance(exc, httpx.ConnectError):
        return ProviderError(
            f"{provider}: cannot reach {endpoint.url} ({reason}); {_where(endpoint)}",
            provider=provider,
        )
    if isinstance(exc, httpx.ReadTimeout):
        return ProviderError(
            f"{provider}: no data from {endpoint.url} for {endpoint.read_timeout:g} s (read timeout)",
            retryable=True,
            provider=provider,
        )
    if isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
        return ProviderError(f"{provider}: invalid URL {endpoint.url!r} ({reason}); fix {endpoint.setting}", provider=provider)
    if isinstance(exc, httpx.TransportError):
        return ProviderError(
            f"{provider}: connection to {endpoint.url} dropped ({reason})", retryable=True, provider=provider
        )
    return ProviderError(f"{provider}: request to {endpoint.url} failed: {type(exc).__name__}: {reason}", provider=provider)


def unsendable(endpoint: Endpoint) -> ProviderError | None:
    """The error for an endpoint that cannot go on the wire, or None.

    The base URL and the API key come from the configuration or the environment, where they may
    hold what HTTP cannot carry: a byte that is not UTF-8 (a surrogate), a non-ASCII letter, or a
    line break or other control character in a header. httpx would raise ``UnicodeEncodeError``
    or ``InvalidURL`` (a traceback), or h11 refuse the header as a dropped connection that is
    retried. The message names the setting and never holds the header's value (it is the key).
    """
    import httpx

    provider = endpoint.provider
    for name, value in endpoint.headers.items():
        if not (value.isascii() and value.isprintable()):
            where = f"{endpoint.key_env} (or providers.{endpoint.setting.split('.')[1]}.apiKey)" if endpoint.key_env else endpoint.setting
            return ProviderError(
                f"{provider}: the {name} header cannot be sent: it holds a character that is not printable ASCII "
                f"(a line break, a control character, a non-ASCII letter or a byte that is not UTF-8); check {where}",
                provider=provider,
            )
    try:
        httpx.URL(endpoint.url).raw_path  # noqa: B018 (encodes the path: a surrogate raises here)
    except (httpx.InvalidURL, UnicodeError) as exc:
        reason = str(exc) if isinstance(exc, httpx.InvalidURL) else "it holds a byte that is not UTF-8"
        return ProviderError(f"{provider}: invalid URL {endpoint.url!r} ({reason}); fix {endpoint.setting}", provider=provider)
    return None


async def _keeper(client: Any, loop: Any, secure: bool) -> AsyncIterator[Any]:
    try:
        yield client
    finally:
        # The suspended generator holds its loop (the loop's finaliser hook), so the weak key
        # alone would never let go of a finished loop: drop the entry here.
        clients = _CLIENTS.get(loop)
        if clients is not None and clients.get(secure, (None,))[0] is client:
            del clients[secure]
            if not clients:
                _CLIENTS.pop(loop, None)
        await client.aclose()


async def shared_client(secure: bool) -> Any:
    """The ``httpx.AsyncClient`` of the running event loop (one for https, one for plain http).

    Reusing one client keeps connections (and TLS sessions) alive across the steps and turns of
    an agent. A client belongs to the loop that opened its connections, so there is one per
    loop. It is held by a suspended async generator, which the loop finalises when it shuts
    down (``asyncio.run`` calls ``loop.shutdown_asyncgens()``): its ``finally`` closes the
    client and its connections on that loop, before the loop closes.
    """
    import asyncio

    import httpx

    loop = asyncio.get_running_loop()
    clients = _CLIENTS.setdefault(loop, {})
    entry = clients.get(secure)
    if entry is None or entry[0].is_closed:
        client = httpx.AsyncClient(verify=_ssl_context() if secure else False, trust_env=secure)
        keeper = _keeper(client, loop, secure)
        await keeper.__anext__()
        entry = clients[secure] = (client, keeper)
    return entry[0]


async def _read_capped(response: Any, limit: int) -> bytes:
    """At most ``limit`` bytes of the body, read incrementally (the rest is left unread)."""
    body = bytearray()
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) >= limit:
            break
    return bytes(body[:limit])


@contextlib.asynccontextmanager
async def sse_events(
    endpoint: Endpoint,
    body: bytes,
    is_context_limit: Callable[[int, str, str, str], bool],
) -> AsyncIterator[AsyncIterator[Any]]:
    """POST ``body`` (JSON) to the endpoint and yield its server-sent events, bounded.

    The events are ``httpx_sse.ServerSentEvent`` values (``event``, ``data``), decoded by
    :class:`SSEReader` from the raw body. Errors raised while the events are read (inside the
    ``async with``) are translated too. Leaving the block early (cancellation included) closes
    the response, which closes its connection.
    """
    try:
        import httpx
        import httpx_sse  # noqa: F401  (SSEReader's event type)
    except ImportError as exc:
        from monoagent import missing_extra

        extra = "anthropic" if endpoint.provider == "anthropic" else "openai"
        raise ProviderError(missing_extra(extra, f"the {endpoint.provider} provider", exc), provider=endpoint.provider) from None

    problem = unsendable(endpoint)
    if problem is not None:
        raise problem
    timeout = httpx.Timeout(endpoint.read_timeout, connect=endpoint.connect_timeout)
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream",
        "cache-control": "no-store",
        "accept-encoding": "identity",
        **endpoint.headers,
    }
    try:
        client = await shared_client(endpoint.url.startswith("https:"))
        async with client.stream("POST", endpoint.url, content=body, headers=headers, timeout=timeout) as response:
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            readable = encoding in ("", "identity")
            if response.status_code >= 400:
                detail = await _read_capped(response, ERROR_BODY_MAX_BYTES) if readable else b"(a compressed body, not read)"
                raise status_error(endpoint, response.status_code, response.headers, detail, is_context_limit)
            content_type = response.headers.get("content-type", "")
            if "text/event-stream" not in content_type:
                detail = await _read_capped(response, 201) if readable else b""
                raise ProviderError(
                    f"{endpoint.provider}: expected a text/event-stream answer from {endpoint.url}, got "
                    f"{' '.join(content_type.split())[:100] or 'no content type'} ({excerpt(detail.decode('utf-8', 'replace'), 200)!r}); "
                    f"is {endpoint.setting} the right endpoint?",
                    provider=endpoint.provider,
                    status=response.status_code,
                )
            if not readable:
                raise ProviderError(
                    f"{endpoint.provider}: {endpoint.url} sent a compressed stream ({' '.join(encoding.split())[:40]}) "
                    f"although identity was asked for; provider streams are read uncompressed so their size stays bounded",
                    provider=endpoint.provider,
                    code="malformed_event",
                )
            yield SSEReader(endpoint).events(response.aiter_raw())
    except httpx.HTTPError as exc:
        raise transport_error(endpoint, exc) from None


def encode_body(value: Any) -> bytes:
    """A request body as UTF-8 JSON; a lone surrogate anywhere in it is sent as U+FFFD, never a crash."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return scrub_unicode(text)[0].encode("utf-8")


def normalise_base_url(url: str) -> str:
    """A base URL without its trailing slash; a bare ``host:port`` gets ``http://``."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/")
