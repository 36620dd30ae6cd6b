"""HTTP plumbing shared by the bundled provider runtimes (not a plugin).

One streaming POST per provider step, with httpx and httpx-sse imported on first use so that
loading the provider plugins costs nothing at start-up. Everything that can go wrong on the wire
becomes a :class:`~monoagent.kernel.errors.ProviderError` whose message is one line naming the provider,
what happened and what to do, with ``retryable`` set exactly for transient failures:

- HTTP 408, 409, 429 and every 5xx (Anthropic's 529 ``overloaded_error`` included): retryable,
  with ``retry_after`` from ``retry-after-ms``, ``Retry-After`` (delta-seconds or HTTP-date) or
  OpenAI's ``x-ratelimit-reset-requests`` / ``x-ratelimit-reset-tokens``;
- a connection reset or dropped mid-stream, a read or connect timeout: retryable;
- a refused connection or an unknown host: fatal, naming the URL and the setting to check;
- any other 4xx: fatal; a context-length error is :class:`~monoagent.kernel.errors.ContextLimitError`.

What a server sends is bounded here before anything is parsed: the stream is read as raw bytes
(``accept-encoding: identity`` is asked for and a compressed answer refused, so a small answer
cannot inflate), cut into lines and events by :class:`SSEReader`, which refuses a line or an
event over ``providers.piNative.maxStreamEventBytes`` *while reading it* (at most one network
chunk past the cap is ever buffered), and an error body is read up to :data:`ERROR_BODY_MAX_BYTES`.
:func:`event_json` and :func:`tool_arguments` parse what the runtimes read: JSON only (no
``NaN``), nesting errors and lone surrogates included (those become U+FFFD, logged). The event
*shape* is checked by each runtime with :class:`Malformed`; the time and output limits of a
stream are the harness's (:mod:`monoagent.pipeline.stream`), which sees every event.

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

from monoagent.kernel.errors import ContextLimitError, ProviderError
from monoagent.text import LazyPattern, scrub_unicode

RETRYABLE_STATUS = frozenset({408, 409, 429})
DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024
PAUSE_EVERY = 0.01
"""Seconds of reading after which :class:`SSEReader` lets the event loop run (timers included)."""
ERROR_BODY_MAX_BYTES = 64 * 1024
"""Bytes of an HTTP error answer (or of an answer that is not an event stream) read for its message."""
_EOL = LazyPattern(rb"\r\n?|\n")
_SURROGATE_ESCAPE = LazyPattern(r"\\u[dD][89a-fA-F]")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_SPACE = re.compile(r"\s")
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


def excerpt(text: str, limit: int) -> str:
    """At most ``limit`` characters of what a server sent, for a message; cut only at whitespace.

    Messages are redacted later, whole. A cut inside a word could leave part of a credential that
    redaction no longer recognises (``postgres://admin:S3cr3t`` without its ``@host``, an AWS key
    short of its 20 characters), so the word a cut would split is left out whole and `` …``
    marks the cut.
    """
    if len(text) <= limit:
        return text
    end = max((space.start() for space in _SPACE.finditer(text, 0, limit + 1)), default=0)
    return f"{text[:end].rstrip()} …".lstrip()


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
    import httpx

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


class SSEReader:
    """Server-sent events from raw body chunks, each line and event within ``max_event_bytes``.

    Lines end at CR LF, LF or CR (the WHATWG rules), fields are ``event``, ``data``, ``id`` and
    ``retry``, a line starting with ``:`` is a comment, and an empty line dispatches the event
    (when it has data or a name). Bytes that are not UTF-8 become U+FFFD. A line longer than the
    cap raises as soon as the unfinished part passes it, so a 200 MB line costs at most the cap
    plus one network chunk; so does an event whose ``data`` lines add up past it. Written here
    rather than taken from ``httpx-sse``, whose decoders buffer a line or an event without bound.
    """

    def __init__(self, endpoint: Endpoint) -> None:
        import httpx_sse

        self.make = httpx_sse.ServerSentEvent
        self.endpoint = endpoint
        self.limit = endpoint.max_event_bytes
        self.buffer = bytearray()
        self.event = ""
        self.data: list[str] = []
        self.size = 0
        self.id = ""
        self.retry: int | None = None
        self.started = False

    async def events(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[Any]:
        """The events of ``chunks``, passing through the event loop at least every
        :data:`PAUSE_EVERY` seconds: reading a socket that already holds data does not suspend,
        and a server that floods pings must not keep the harness's timers from firing."""
        import asyncio

        clock = asyncio.get_running_loop().time
        pause_at = clock() + PAUSE_EVERY
        async for chunk in chunks:
            for event in self.feed(chunk):
                yield event
            if clock() >= pause_at:
                await asyncio.sleep(0)
                pause_at = clock() + PAUSE_EVERY
        for event in self.finish():
            yield event

    def feed(self, chunk: bytes) -> list[Any]:
        found: list[Any] = []
        buffer = self.buffer
        if b"\r" not in chunk and not buffer.endswith(b"\r"):  # the usual case: LF line ends only
            lines = chunk.split(b"\n")
            if len(lines) > 1 and buffer:
                buffer += lines[0]
                lines[0] = bytes(buffer)
                buffer.clear()
            if len(lines) > 1:
                buffer += lines.pop()
                limit = self.limit
                for raw in lines:
                    if len(raw) > limit:
                        raise self.too_large("line")
                    self.line(raw, found)
            else:
                buffer += chunk
            if len(buffer) > self.limit:
                raise self.too_large("line")
            return found
        scan = max(len(buffer) - 1, 0)  # the unfinished line held no line end, bar a CR at its very end
        buffer += chunk
        position = 0
        end = len(buffer)
        while True:
            match = _EOL.search(buffer, max(position, scan))
            if match is None or (match.end() == end and buffer[-1] == 13):  # a CR whose LF may follow
                break
            if match.start() - position > self.limit:
                raise self.too_large("line")
            self.line(buffer[position : match.start()], found)
            position = match.end()
        del buffer[:position]
        if len(buffer) > self.limit:
            raise self.too_large("line")
        return found

    def finish(self) -> list[Any]:
        """At the end of the body: a CR held back for a LF that never came ends its line.

        An unterminated last line, or an event without its empty line, is dropped (WHATWG).
        """
        found: list[Any] = []
        if self.buffer.endswith(b"\r"):
            self.line(self.buffer[:-1], found)
        self.buffer.clear()
        return found

    def line(self, raw: bytearray, found: list[Any]) -> None:
        if not self.started:
            self.started = True
            if raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
        if not raw:
            if self.data or self.event:
                found.append(self.make(self.event, "\n".join(self.data), self.id, self.retry))
            self.event, self.data, self.size, self.retry = "", [], 0, None
            return
        if raw[0] == 58:  # ":" starts a comment (a keep-alive)
            return
        name, _, value = raw.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        self.size += len(value) + 1
        if self.size > self.limit:
            raise self.too_large("event")
        text = value.decode("utf-8", "replace")
        if name == b"data":
            self.data.append(text)
        elif name == b"event":
            self.event = text
        elif name == b"id":
            if "\0" not in text:
                self.id = text
        elif name == b"retry" and value.isdigit():
            self.retry = int(value[:18])

    def too_large(self, what: str) -> ProviderError:
        endpoint = self.endpoint
        return ProviderError(
            f"{endpoint.provider}: a stream {what} from {endpoint.url} passed providers.piNative.maxStreamEventBytes "
            f"= {self.limit} bytes; the stream was stopped",
            provider=endpoint.provider,
            code="event_too_large",
        )


class Malformed(ValueError):
    """An event field of the wrong type or value; the message names the field and what was expected."""


_KIND_NAMES = {str: "a string", int: "an integer", dict: "an object", list: "an array"}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return _KIND_NAMES.get(type(value), type(value).__name__)


def want(container: dict[str, Any], key: str, kind: type, where: str = "", *, optional: bool = False) -> Any:
    """``container[key]`` if its JSON type is ``kind`` (str, int, dict or list; a boolean is no
    integer), else :class:`Malformed` naming the field. ``optional`` lets a missing key or null
    through as None."""
    value = container.get(key)
    if type(value) is kind or (value is None and optional):
        return value
    raise Malformed(f"{where}{key} is {_kind(value)}, expected {_KIND_NAMES[kind]}{' or null' if optional else ''}")


def count(container: dict[str, Any], key: str) -> int:
    """A token count: a non-negative integer (or integral float) below 2**53; anything else counts 0."""
    value = container.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if not 0 <= value < 2**53 or (isinstance(value, float) and not value.is_integer()):
        return 0
    return int(value)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _scrubbed(value: Any, replaced: list[int]) -> Any:
    """``value`` with every string (keys too) valid Unicode; counts the replacements into ``replaced``."""
    if isinstance(value, str):
        text, n = scrub_unicode(value)
        replaced[0] += n
        return text
    if isinstance(value, dict):
        return {_scrubbed(k, replaced): _scrubbed(v, replaced) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrubbed(item, replaced) for item in value]
    return value


def loads(endpoint: Endpoint, text: str, what: str) -> Any:
    """JSON from a provider: ``Malformed`` for anything that is not JSON, lone surrogates replaced.

    A ``\\ud800`` escape without its pair decodes to a code point no UTF-8 text can hold; every
    one becomes U+FFFD (the project's one rule for text that is not valid Unicode) and a warning
    names the count. Values reaching here are at most one event's bytes, and nesting too deep for
    the decoder is ``Malformed`` too.
    """
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise Malformed(f"{what} nests too deeply to read") from None
    except ValueError as exc:
        raise Malformed(f"{what} is not JSON ({exc})") from None
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        from monoagent.pipeline.stream import MAX_ARGUMENT_DEPTH, too_deep  # not at plugin load: it imports the harness's modules

        if too_deep(value, 2 * MAX_ARGUMENT_DEPTH):  # the scrub below recurses
            raise Malformed(f"{what} nests too deeply to read")
        replaced = [0]
        value = _scrubbed(value, replaced)
        if replaced[0]:
            from monoagent.kernel.log import logger

            logger.bind(plugin=endpoint.provider).warning(
                "{}: replaced {} lone surrogate code points in {} from {} with U+FFFD", endpoint.provider, replaced[0], what, endpoint.url
            )
    return value


def event_json(endpoint: Endpoint, data: str) -> dict[str, Any]:
    """One event's ``data`` as a JSON object, or :class:`Malformed`."""
    value = loads(endpoint, data, "the event")
    if not isinstance(value, dict):
        raise Malformed(f"the event is {_kind(value)}, expected an object")
    return value


def tool_arguments(endpoint: Endpoint, name: str, call_id: str, text: str) -> dict[str, Any]:
    """A tool call's assembled argument JSON as an object (empty text is ``{}``), or a one-line ProviderError."""
    from monoagent.pipeline.stream import MAX_ARGUMENT_DEPTH, too_deep

    label = f"{endpoint.provider}: tool call {name[:64]!r} ({call_id[:64]})"
    if not text.strip():
        return {}
    try:
        arguments = loads(endpoint, text, "the arguments")
    except Malformed as exc:
        raise ProviderError(f"{label} has unreadable arguments ({exc}): {excerpt(text, 200)!r}", provider=endpoint.provider,
                            code="malformed_event") from None
    if not isinstance(arguments, dict):
        raise ProviderError(f"{label} has arguments that are {_kind(arguments)}, not a JSON object", provider=endpoint.provider,
                            code="malformed_event")
    if too_deep(arguments):
        raise ProviderError(f"{label} has arguments nested over {MAX_ARGUMENT_DEPTH} levels deep", provider=endpoint.provider,
                            code="malformed_event")
    return arguments


def encode_body(value: Any) -> bytes:
    """A request body as UTF-8 JSON; a lone surrogate anywhere in it is sent as U+FFFD, never a crash."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return scrub_unicode(text)[0].encode("utf-8")


READ_ON_EVENTS = 16
"""Events read after a stream's last one, to reach the end of the body so the connection can be
reused; a server that sends more is cut off (the connection is closed instead)."""


def utf8_size(text: str) -> int:
    """UTF-8 bytes of ``text`` (a lone surrogate counts as its one-byte replacement)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "replace"))


def too_many_calls(endpoint: Endpoint, limit: int) -> ProviderError:
    return ProviderError(
        f"{endpoint.provider}: more than {limit} tool calls in one step from {endpoint.url}; the stream was stopped",
        provider=endpoint.provider,
        code="too_many_tool_calls",
    )


def stream_ended(endpoint: Endpoint, expected: str) -> ProviderError:
    """The stream closed cleanly before its final event: treat it as a dropped connection."""
    return ProviderError(
        f"{endpoint.provider}: the stream from {endpoint.url} ended before {expected}", retryable=True, provider=endpoint.provider
    )


def bad_event(endpoint: Endpoint, data: str, exc: Exception) -> ProviderError:
    """The one-line ProviderError for an event that is not what the wire format says (not retryable)."""
    reason = str(exc) if isinstance(exc, Malformed) else f"{type(exc).__name__}: {exc}"
    return ProviderError(
        f"{endpoint.provider}: unreadable stream event from {endpoint.url} ({excerpt(' '.join(reason.split()), 300)}): "
        f"{excerpt(data, 200)!r}",
        provider=endpoint.provider,
        code="malformed_event",
    )


def normalise_base_url(url: str) -> str:
    """A base URL without its trailing slash; a bare ``host:port`` gets ``http://``."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/")
