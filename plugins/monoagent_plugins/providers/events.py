"""A provider stream's events, read under caps and parsed strictly (not a plugin).

:class:`SSEReader` cuts a raw body into server-sent events, refusing a line or an event over the
endpoint's ``max_event_bytes`` (``providers.client.maxStreamEventBytes``) *while reading it*.
:func:`event_json` and :func:`tool_arguments` parse what the runtimes read: JSON only (no
``NaN``), nesting errors and lone surrogates included (those become U+FFFD, logged). The event
*shape* is checked by each runtime with :func:`want` and :func:`count`, which raise
:class:`Malformed`; :func:`bad_event`, :func:`stream_ended` and :func:`too_many_calls` are the
one-line :class:`~monoagent._kernel.errors.ProviderError` of each way a stream goes wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from monoagent import LazyPattern, ProviderError

if TYPE_CHECKING:
    from monoagent_plugins.providers.http import Endpoint

PAUSE_EVERY = 0.01
"""Seconds of reading after which :class:`SSEReader` lets the event loop run (timers included)."""


_EOL = LazyPattern(rb"\r\n?|\n")
_SPACE = re.compile(r"\s")


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
            match = _EOL.compiled.search(buffer, max(position, scan))  # the compiled pattern reads a bytearray
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

    def line(self, raw: bytes | bytearray, found: list[Any]) -> None:
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
        text = value.decode("utf-8", "replace")
        if name == b"data":
            self.size += len(value) + 1  # an event's size is its data lines' (the other fields are replaced, not added)
            if self.size > self.limit:
                raise self.too_large("event")
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
            f"{endpoint.provider}: a stream {what} from {endpoint.url} passed providers.client.maxStreamEventBytes "
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


def loads(text: str, what: str) -> Any:
    """JSON from a provider, or ``Malformed`` for anything that is not JSON or nests too deeply.

    A ``\\ud800`` escape without its pair decodes to a lone surrogate, which no UTF-8 text can
    hold. It is left in the value on purpose: the model classes the wire code builds from it
    (:class:`~monoagent._kernel.model.TextDelta`, :class:`~monoagent._kernel.model.ToolCall`, ...)
    replace it with U+FFFD and the harness reports each replacement on the run as
    ``runtime_warning invalid_unicode_replaced`` (the project's one rule for text that is not
    valid Unicode). Values reaching here are at most one event's bytes.
    """
    try:
        return _DECODER.decode(text)
    except RecursionError:
        raise Malformed(f"{what} nests too deeply to read") from None
    except ValueError as exc:
        raise Malformed(f"{what} is not JSON ({exc})") from None


def event_json(endpoint: Endpoint, data: str) -> dict[str, Any]:
    """One event's ``data`` as a JSON object, or :class:`Malformed`."""
    value = loads(data, "the event")
    if not isinstance(value, dict):
        raise Malformed(f"the event is {_kind(value)}, expected an object")
    return value


def tool_arguments(endpoint: Endpoint, name: str, call_id: str, text: str) -> dict[str, Any]:
    """A tool call's assembled argument JSON as an object (empty text is ``{}``), or a one-line ProviderError."""
    from monoagent import MAX_ARGUMENT_DEPTH, too_deep

    label = f"{endpoint.provider}: tool call {name[:64]!r} ({call_id[:64]})"
    if not text.strip():
        return {}
    try:
        arguments = loads(text, "the arguments")
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
