"""The data model of a turn: what flows between channels, hooks, providers and stores.

Every class here is an attrs class, frozen where the value never changes after it is built.
Text boundaries (records on disk, JSON output, events) go through :mod:`monoagent.kernel.serial`,
which uses cattrs; nothing here hand-writes (de)serialisation.

Every class that carries text derives from :class:`ValidText`: however it is built (a channel,
a plugin, a provider runtime, a tool handler, cattrs reading a record, ``attrs.evolve``), its
strings are valid Unicode once built. A surrogate code point (what Python makes of bytes that
are not UTF-8, or a lone ``\\ud800`` from JSON) becomes U+FFFD (:func:`monoagent.text.scrub_unicode`),
so no store, wire request, event file or terminal ever has to encode one, and the instance
remembers where it replaced what (:attr:`ValidText.invalid_unicode`) for the harness to report.
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Any, Literal

import attrs

from monoagent.text import scrub_unicode

Role = Literal["user", "assistant", "system", "tool"]
Stability = Literal["stable", "dynamic"]
Delivery = Literal["console", "push", "request"]
SurfaceKind = Literal["dm", "channel", "group"]


def _tuple(value: Any) -> tuple:
    return tuple(value) if value is not None else ()


Replacements = tuple[tuple[str, int], ...]
"""Where a model instance replaced surrogates, and how many: ``(("text", 1), ("sender.handle", 2))``."""


_PLAIN = frozenset({int, float, bool, type(None)})


_SHALLOW = 32
"""Nesting checked by plain recursion (quick for the small dicts events hold); deeper data is walked iteratively."""


def _is_valid(value: Any, depth: int = 0) -> bool:
    """Whether every string in JSON-shaped ``value`` is valid Unicode: the usual case, checked without copying.

    ASCII strings and numbers, most of what events and arguments hold, are passed over inline.
    Beyond :data:`_SHALLOW` levels the walk goes on without recursion (:func:`_is_valid_deep`),
    so any depth is fine (bounding depth is the parsers' and stores' business) and a cycle ends it.
    """
    cls = value.__class__
    if cls is str:
        return value.isascii() or scrub_unicode(value)[1] == 0
    if cls in _PLAIN:
        return True
    if depth > _SHALLOW:
        return _is_valid_deep(value)
    if isinstance(value, dict):
        for key, item in value.items():
            if not (key.__class__ is str and key.isascii()) and not _is_valid(key, depth + 1):
                return False
            if not ((item.__class__ is str and item.isascii()) or item.__class__ in _PLAIN) and not _is_valid(item, depth + 1):
                return False
        return True
    if isinstance(value, (list, tuple)):
        for item in value:
            if not ((item.__class__ is str and item.isascii()) or item.__class__ in _PLAIN) and not _is_valid(item, depth + 1):
                return False
        return True
    return not isinstance(value, str) or scrub_unicode(value)[1] == 0


def _is_valid_deep(value: Any) -> bool:
    """:func:`_is_valid` with an explicit stack, each container visited once."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and scrub_unicode(value)[1]:
                return False
        elif isinstance(value, (dict, list, tuple)) and id(value) not in seen:
            seen.add(id(value))
            stack.extend((*value.keys(), *value.values()) if isinstance(value, dict) else value)
    return True


_NO_KEY = object()


def _valid_data(value: Any) -> tuple[Any, int]:
    """JSON-shaped ``value`` (strings, dicts, lists, tuples) with valid strings, and the count replaced.

    Valid data comes back as the very same object. Otherwise the containers are rebuilt, without
    recursion: object keys are scrubbed too, and two keys that become equal keep both values
    (``key``, ``key#2``, ..., as redaction does). Values of other types, and a reference back
    to a container being rebuilt (a cycle), are kept as they are.
    """
    if _is_valid(value):
        return value, 0
    if isinstance(value, str):
        return scrub_unicode(value)
    total = 0
    # One frame per container being rebuilt: the container, its (key, item) pairs still to do, the pairs done.
    stack: list[tuple[Any, Any, list[tuple[Any, Any]]]] = [(value, _pairs(value), [])]
    active = {id(value)}
    while True:
        container, pairs, done = stack[-1]
        for key, item in pairs:
            if isinstance(key, str):
                key, n = scrub_unicode(key)
                total += n
            if isinstance(item, str):
                item, n = scrub_unicode(item)
                total += n
            elif isinstance(item, (dict, list, tuple)) and id(item) not in active:
                done.append((key, None))  # filled in when the inner container is rebuilt
                stack.append((item, _pairs(item), []))
                active.add(id(item))
                break
            done.append((key, item))
        else:
            stack.pop()
            active.discard(id(container))
            rebuilt = _assemble(container, done)
            if not stack:
                return rebuilt, total
            parent = stack[-1][2]
            parent[-1] = (parent[-1][0], rebuilt)


def _pairs(container: Any) -> Any:
    return iter(container.items()) if isinstance(container, dict) else ((_NO_KEY, item) for item in container)


def _assemble(container: Any, pairs: list[tuple[Any, Any]]) -> Any:
    if not isinstance(container, dict):
        items = [item for _, item in pairs]
        return items if isinstance(container, list) else tuple(items)
    out: dict[Any, Any] = {}
    for key, item in pairs:
        name, suffix = key, 1
        while name in out:
            suffix += 1
            name = f"{key}#{suffix}"
        out[name] = item
    return out


_FIELDS: dict[type, tuple[str, ...]] = {}


def _replace_invalid_unicode(instance: ValidText) -> None:
    """Make every string of ``instance`` valid Unicode, recording what was replaced where."""
    cls = type(instance)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(field.name for field in attrs.fields(cls) if field.init)
    found: list[tuple[str, int]] = []
    for name in names:
        value = getattr(instance, name)
        kind = value.__class__
        if (kind is str and value.isascii()) or kind in _PLAIN:
            continue
        if isinstance(value, ValidText):
            found.extend((f"{name}.{path}", n) for path, n in value.invalid_unicode)
        elif kind is tuple and value and isinstance(value[0], ValidText):
            for index, item in enumerate(value):
                found.extend((f"{name}[{index}].{path}", n) for path, n in getattr(item, "invalid_unicode", ()))
        else:
            new, count = _valid_data(value)
            if count:
                object.__setattr__(instance, name, new)
                found.append((name, count))
    if found:
        object.__setattr__(instance, "invalid_unicode", tuple(found))


@attrs.frozen
class ValidText:
    """Base of every model class that carries text: its strings are valid Unicode once built.

    ``invalid_unicode`` lists the fields (dotted paths into nested model values, ``[i]`` for
    items of a tuple) in which surrogates were replaced by U+FFFD, with the count; it is empty
    for valid text, and it takes no part in equality, ``repr`` or (de)serialisation. The harness
    reports it as ``runtime_warning`` events with the code ``invalid_unicode_replaced``.
    """

    invalid_unicode: Replacements = attrs.field(default=(), init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        _replace_invalid_unicode(self)


# --------------------------------------------------------------------------- people and places


@attrs.frozen
class Speaker(ValidText):
    """Who is talking on a turn.

    ``display_name`` and ``handle`` are model-visible (a group chat is unusable without them);
    ``user_id`` is the platform's id, kept for host bookkeeping and never rendered: a platform
    user id can double as a route (a Slack user id is also a DM channel id).
    """

    display_name: str
    handle: str | None = None
    user_id: str | None = None

    @property
    def label(self) -> str:
        """``Alice Chen (@alice)``, or the display name alone when there is no handle.

        Both parts are user-chosen, so the label is made safe wherever it goes (the user
        message, the history entry's name, capture attribution, events): one line each, no
        control, zero-width or bidi characters, capped, fence tokens neutralised. See
        :func:`monoagent.boundary.fences.speaker_label`.
        """
        from monoagent.boundary.fences import speaker_label

        return speaker_label(self.display_name, self.handle)


@attrs.frozen
class Surface(ValidText):
    """Which channel a chat turn is on: kind, user-controlled name, channel id, message budget.

    The id is a channel or chat id (Slack ``C…``/``D…``/``G…``, a Telegram chat id), never a
    thread id. ``message_budget`` is the transport's own per-message character limit.
    """

    kind: SurfaceKind
    id: str
    name: str | None = None
    message_budget: int | None = None


@attrs.frozen
class PrecedingMessage(ValidText):
    """A message other people wrote in the conversation while the agent was not answering."""

    speaker: Speaker
    text: str
    timestamp: float | None = None


@attrs.frozen
class Attachment(ValidText):
    """A file that came with the request; only metadata and extracted text reach the prompt."""

    name: str
    media_type: str = "application/octet-stream"
    text: str | None = None
    size: int | None = None


# --------------------------------------------------------------------------- messages and tools


@attrs.frozen
class ToolCall(ValidText):
    """A tool call requested by the model: provider call id, tool name, parsed arguments."""

    id: str
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)


class ToolStatus(str, Enum):
    """How a tool call ended (the documented result vocabulary)."""

    SUCCESS = "success"
    REJECTED = "rejected"
    ERROR = "error"
    EXIT_NONZERO = "exit_nonzero"
    TIMEOUT = "timeout"
    SIGNAL = "signal"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


@attrs.frozen
class TextBlock(ValidText):
    """A text block of a structured tool payload."""

    text: str
    kind: Literal["text"] = "text"


@attrs.frozen
class ImageBlock(ValidText):
    """An image block of a structured tool payload (raw bytes and their media type)."""

    data: bytes = attrs.field(repr=lambda d: f"<{len(d)} bytes>")
    media_type: str = "image/png"
    kind: Literal["image"] = "image"


@attrs.frozen
class BinaryBlock(ValidText):
    """Opaque bytes in a structured tool payload (a file, an archive)."""

    data: bytes = attrs.field(repr=lambda d: f"<{len(d)} bytes>")
    media_type: str = "application/octet-stream"
    name: str | None = None
    kind: Literal["binary"] = "binary"


ContentBlock = TextBlock | ImageBlock | BinaryBlock


@attrs.frozen
class ToolResult(ValidText):
    """What a tool returned for one call; ``content`` is text the model will read.

    ``blocks`` optionally carries the structured payload (text, image and binary blocks) of a
    tool that returns more than text; ``content`` stays its text form. The tool-output bloat guard
    (:mod:`monoagent.pipeline.bloat`) measures and samples the payload before it reaches the model.
    """

    call_id: str
    name: str
    content: str
    status: ToolStatus = ToolStatus.SUCCESS
    blocks: tuple[ContentBlock, ...] = attrs.field(default=(), converter=_tuple)

    @property
    def is_error(self) -> bool:
        return self.status is not ToolStatus.SUCCESS


@attrs.frozen
class ContinuityEnvelope(ValidText):
    """What the host needs to know about a continuity account, kept beside its text.

    Only the host writes it (:func:`monoagent.pipeline.continuity.account_messages`); nothing is ever
    parsed back out of a message's text. ``retained`` and ``omitted`` are the tool record ids
    (invocation and result ids) the account keeps and leaves out.
    """

    version: int
    outcome: str
    run_id: str
    retained: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    omitted: tuple[str, ...] = attrs.field(default=(), converter=_tuple)


@attrs.frozen
class Message(ValidText):
    """One conversation message as stored in history and sent to providers.

    ``name`` carries the speaker label of a user message (persisted, so a later turn knows who
    said what); ``tool_calls`` are set on assistant messages that asked for tools and
    ``tool_call_id`` on ``tool`` messages that answer them, with ``is_error`` when the result was
    not a success (its status was not ``success``), which the provider formats carry to the model.
    ``continuity`` is set by the host on the assistant message of a continuity account, and only
    there: it marks the message as host-authored and names the tool records the account retains.
    ``is_error`` and ``continuity`` are absent in records written before they existed, and
    omitted from a serialized message when unset.
    """

    role: Role
    content: str
    name: str | None = None
    timestamp: float = attrs.field(factory=time.time)
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tuple)
    tool_call_id: str | None = None
    continuity: ContinuityEnvelope | None = None
    is_error: bool = False


@attrs.frozen
class ToolSpec(ValidText):
    """A tool's model-visible definition: it travels in the provider's tool interface."""

    name: str
    description: str
    input_schema: dict[str, Any] = attrs.field(factory=lambda: {"type": "object", "properties": {}})


# --------------------------------------------------------------------------- requests


@attrs.frozen
class TurnRequest(ValidText):
    """What a channel submits for one turn.

    ``delivery`` classifies the turn for the session block: ``console`` (terminal or web console,
    the reader is in this thread), ``push`` (a chat channel the host delivers into) or
    ``request`` (cron, webhook, API: no proactive follow-up possible). ``console`` names the
    console (``terminal``, ``web``) on console turns. ``sender``, ``preceding_messages`` and
    ``surface`` are optional; a channel without them builds a turn byte-identical to one from
    before they existed.
    """

    text: str
    conversation_id: str = "cli:default"
    channel: str = "api"
    delivery: Delivery = "request"
    console: str | None = None
    sender: Speaker | None = None
    preceding_messages: tuple[PrecedingMessage, ...] = attrs.field(default=(), converter=_tuple)
    surface: Surface | None = None
    attachments: tuple[Attachment, ...] = attrs.field(default=(), converter=_tuple)
    model: str | None = None
    metadata: dict[str, Any] = attrs.field(factory=dict)


# --------------------------------------------------------------------------- prompt assembly


@attrs.frozen
class Section(ValidText):
    """One section of the system prompt.

    ``order`` places it (the documented sections use 100..700, see
    :data:`monoagent.pipeline.assembly.SECTION_ORDER`); ``stability`` says whether its text is expected to
    stay byte-identical across the turns of a session (``stable``, cacheable) or not
    (``dynamic``); ``source`` names where the text came from (a plugin, a file name) for the
    manifest. A section whose ``text`` is empty is skipped.
    """

    id: str
    text: str
    order: int
    stability: Stability = "stable"
    source: str = ""
    title: str | None = None


@attrs.frozen
class UserMessagePart(ValidText):
    """Text a turn-step hook adds around the user's own text on the provider-facing message.

    ``position`` ``before`` parts precede the user's text (speaker fences), separated from it
    by a blank line; ``prefix`` parts sit on the line directly above the user's text (the
    ``<current_speaker>`` line); ``after`` parts follow it and any attachment block (the
    recalled-memory block). Parts are placed by ``order``. They are never written to history.
    """

    text: str
    position: Literal["before", "prefix", "after"] = "after"
    order: int = 500
    source: str = ""


@attrs.frozen
class MemoryHit(ValidText):
    """One recalled memory: where it came from, its text and its relevance score."""

    source: str
    text: str
    score: float = 0.0
    id: str | None = None


@attrs.frozen
class Diagnostic(ValidText):
    """Something assembly noticed: a missing or truncated file, a skipped skill."""

    code: str
    message: str
    section: str | None = None


@attrs.frozen
class ManifestSection:
    id: str
    order: int
    stability: Stability
    part: Stability
    source: str
    bytes: int
    sha256: str


@attrs.frozen
class Fingerprints:
    stable: str
    dynamic: str
    full: str


@attrs.frozen
class PromptManifest:
    """Metadata of one compiled prompt: the audit handle, not the prompt text.

    ``sections`` lists every emitted system section in order, with the part of the text it was
    rendered into (``stable`` before the cache boundary, ``dynamic`` after it);
    ``fingerprints`` are SHA-256 of the stable text, the dynamic text and the full text (stable,
    boundary line, dynamic).
    """

    compiler_version: str
    profile: str
    sections: tuple[ManifestSection, ...]
    fingerprints: Fingerprints
    diagnostics: tuple[Diagnostic, ...]
    user_message_bytes: int
    message_count: int
    history_messages: int = 0

    @property
    def section_ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self.sections)


@attrs.frozen
class AssembledPrompt:
    """The provider-neutral prompt of one turn.

    ``stable_text`` and ``dynamic_text`` are the system text on either side of the cache
    boundary; ``messages`` are the provider-facing messages, the current user message last.
    Providers that support prompt caching send the two parts as separate system blocks and never
    send :data:`boundary` as text.
    """

    stable_text: str
    dynamic_text: str
    boundary: str
    messages: tuple[Message, ...]
    sections: tuple[Section, ...]
    manifest: PromptManifest

    @property
    def system_text(self) -> str:
        """The whole system prompt with the boundary line, as fingerprinted."""
        if not self.dynamic_text:
            return self.stable_text
        return f"{self.stable_text}\n{self.boundary}\n{self.dynamic_text}"

    @property
    def system_text_without_boundary(self) -> str:
        """The system prompt for providers without a caching split: both parts, no marker."""
        return "\n\n".join(part for part in (self.stable_text, self.dynamic_text) if part)


# --------------------------------------------------------------------------- providers


@attrs.frozen
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


@attrs.frozen
class ProviderRequest:
    """What the harness asks a provider runtime for: one model step of a turn.

    ``messages`` holds the current user message and, inside a tool loop, the assistant tool-call
    and tool-result messages of this run. ``tools`` are the only callable tools.
    ``transport`` is ``providers.piNative.transport`` (``auto``, ``sse``, ``websocket``,
    ``websocket-cached``): a runtime with several transports uses the one requested, a runtime
    with one (or that lacks the requested one) ignores it and uses its default.
    """

    model: str
    prompt: AssembledPrompt
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    run_id: str = ""
    step: int = 1
    max_output_tokens: int | None = None
    transport: str = "auto"


@attrs.frozen
class TextDelta(ValidText):
    """A piece of streamed assistant text."""

    text: str


@attrs.frozen
class ToolCallRequested(ValidText):
    """The provider finished assembling one tool call."""

    call: ToolCall


@attrs.frozen
class StepFinished(ValidText):
    """The provider step ended: why, and its usage."""

    stop_reason: str = "end_turn"
    usage: Usage = Usage()


@attrs.frozen
class StreamProgress:
    """Output that arrived but is not an event of its own yet: optional, for the stream limits.

    ``bytes`` of a tool call's argument JSON (``kind="tool_arguments"``, the call itself follows
    as :class:`ToolCallRequested`), or of output the runtime does not pass on (``"reasoning"``,
    ``"other"``). The harness counts it towards ``providers.piNative.maxStreamBytes`` and as
    progress for ``streamIdleTimeoutMs``, so a runtime that assembles long tool-call arguments
    or reads reasoning yields one per piece; a runtime that never does is bounded all the same.
    """

    bytes: int
    kind: str = "tool_arguments"


ProviderEvent = TextDelta | ToolCallRequested | StepFinished | StreamProgress


# --------------------------------------------------------------------------- events and results


@attrs.frozen
class RunEvent(ValidText):
    """One fact about a run, for observers, artifact sinks and streaming callers.

    ``type`` is one of the documented event names (``run_started``, ``prompt_manifest``,
    ``text_delta``, ``tool_call``, ``tool_result``, ``session_boundary``, ``memory_recalled``,
    ``runtime_warning``, ``run_committed``, ``run_completed``, ``run_failed``,
    ``run_cancelled``, ...); ``data`` is JSON-ready.
    """

    type: str
    run_id: str
    conversation_id: str
    seq: int
    at: float
    data: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class ToolActivity:
    call: ToolCall
    result: ToolResult


@attrs.frozen
class TurnResult:
    """What a completed turn returns to its caller.

    ``model`` is the model that answered (a fallback when the primary failed) and ``attempt``
    the provider attempt that answered (1 is the primary's first attempt; see
    :mod:`monoagent.pipeline.provider_call`). ``usage`` sums every attempt, failed ones included.
    """

    run_id: str
    conversation_id: str
    text: str
    model: str
    status: Literal["completed", "failed", "cancelled"] = "completed"
    usage: Usage = Usage()
    tool_activity: tuple[ToolActivity, ...] = ()
    manifest: PromptManifest | None = None
    steps: int = 0
    attempt: int = 1
