"""HTTP plumbing shared by the bundled provider runtimes (not a plugin).

One streaming POST per provider step, with httpx and httpx-sse imported on first use so that
loading the provider plugins costs nothing at start-up. Everything that can go wrong on the wire
becomes a :class:`~monoagent.errors.ProviderError` whose message is one line naming the provider,
what happened and what to do, with ``retryable`` set exactly for transient failures:

- HTTP 408, 409, 429 and every 5xx (Anthropic's 529 ``overloaded_error`` included): retryable,
  with ``retry_after`` from ``retry-after-ms``, ``Retry-After`` (delta-seconds or HTTP-date) or
  OpenAI's ``x-ratelimit-reset-requests`` / ``x-ratelimit-reset-tokens``;
- a connection reset or dropped mid-stream, a read or connect timeout: retryable;
- a refused connection or an unknown host: fatal, naming the URL and the setting to check;
- any other 4xx: fatal; a context-length error is :class:`~monoagent.errors.ContextLimitError`.

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

from monoagent.errors import ContextLimitError, ProviderError

RETRYABLE_STATUS = frozenset({408, 409, 429})
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
        return "", "", body.decode("utf-8", "replace").strip()[:300]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("type") or ""), str(error.get("code") or ""), str(error.get("message") or "")
    if isinstance(error, str):
        return "", "", error[:300]
    return "", "", json.dumps(data)[:300]


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
        return ProviderError(f"{provider}: invalid URL {endpoint.url} ({reason}); fix {endpoint.setting}", provider=provider)
    if isinstance(exc, httpx.TransportError):
        return ProviderError(
            f"{provider}: connection to {endpoint.url} dropped ({reason})", retryable=True, provider=provider
        )
    return ProviderError(f"{provider}: request to {endpoint.url} failed: {type(exc).__name__}: {reason}", provider=provider)


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


@contextlib.asynccontextmanager
async def sse_events(
    endpoint: Endpoint,
    body: bytes,
    is_context_limit: Callable[[int, str, str, str], bool],
) -> AsyncIterator[AsyncIterator[Any]]:
    """POST ``body`` (JSON) to the endpoint and yield its server-sent events.

    The events are ``httpx_sse.ServerSentEvent`` values (``event``, ``data``). Errors raised
    while the events are read (inside the ``async with``) are translated too. Leaving the block
    early (cancellation included) closes the response, which closes its connection.
    """
    import httpx
    import httpx_sse

    timeout = httpx.Timeout(endpoint.read_timeout, connect=endpoint.connect_timeout)
    headers = {"content-type": "application/json", **endpoint.headers}
    try:
        client = await shared_client(endpoint.url.startswith("https:"))
        async with httpx_sse.aconnect_sse(client, "POST", endpoint.url, content=body, headers=headers, timeout=timeout) as source:
            response = source.response
            if response.status_code >= 400:
                detail = await response.aread()
                raise status_error(endpoint, response.status_code, response.headers, detail, is_context_limit)
            content_type = response.headers.get("content-type", "")
            if "text/event-stream" not in content_type:
                detail = await response.aread()
                raise ProviderError(
                    f"{endpoint.provider}: expected a text/event-stream answer from {endpoint.url}, got "
                    f"{content_type or 'no content type'} ({detail[:200].decode('utf-8', 'replace')!r}); "
                    f"is {endpoint.setting} the right endpoint?",
                    provider=endpoint.provider,
                    status=response.status_code,
                )
            yield source.aiter_sse()
    except httpx.HTTPError as exc:
        raise transport_error(endpoint, exc) from None


def stream_ended(endpoint: Endpoint, expected: str) -> ProviderError:
    """The stream closed cleanly before its final event: treat it as a dropped connection."""
    return ProviderError(
        f"{endpoint.provider}: the stream from {endpoint.url} ended before {expected}", retryable=True, provider=endpoint.provider
    )


def bad_event(endpoint: Endpoint, data: str, exc: Exception) -> ProviderError:
    return ProviderError(
        f"{endpoint.provider}: unreadable stream event from {endpoint.url} ({type(exc).__name__}: {exc}): {data[:200]!r}",
        provider=endpoint.provider,
    )


def normalise_base_url(url: str) -> str:
    """A base URL without its trailing slash; a bare ``host:port`` gets ``http://``."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/")
