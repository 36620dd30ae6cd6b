"""The data model of a turn: what flows between channels, hooks, providers and stores.

Every class here is an attrs class, frozen where the value never changes after it is built.
Text boundaries (records on disk, JSON output, events) go through :mod:`monoagent._kernel.serial`,
which uses cattrs; nothing here hand-writes (de)serialisation.

Every class that carries text derives from :class:`~monoagent._kernel.valid_text.ValidText`: its
strings are valid Unicode once built, however it is built (see :mod:`monoagent._kernel.valid_text`).
"""

from __future__ import annotations

import time
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal

import attrs

from monoagent._boundary.text import utf8_len
from monoagent._kernel.valid_text import ValidText

if TYPE_CHECKING:
    pass

Role = Literal["user", "assistant", "system", "tool"]
Stability = Literal["stable", "dynamic"]
Delivery = Literal["console", "push", "request"]
SurfaceKind = Literal["dm", "channel", "group"]

SILENT_RESULT = "NO_REPLY"
"""The silent-result sentinel: a notifying turn (``TurnRequest.notify``) whose final answer is exactly
this text (surrounding whitespace aside) delivers nothing to its notify destinations."""


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if value is not None else ()


def _names(value: Any, what: str) -> tuple[str, ...]:
    """A tuple of names from a list or tuple; a bare string is refused (it would become its letters)."""
    if isinstance(value, str) or not all(isinstance(item, str) for item in _tuple(value)):
        raise TypeError(f"{what} is a list of names, not {value!r}")
    return _tuple(value)


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
        :func:`monoagent._boundary.fences.speaker_label`.
        """
        from monoagent._boundary.fences import speaker_label

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

    @property
    def artifact_id(self) -> str:
        """The attachment's artifact id: ``art_`` and 24 hex digits of the SHA-256 of its name, media
        type and text, so the same file sent twice is one artifact and an id reveals nothing of it."""
        import hashlib

        digest = hashlib.sha256()
        for part in (self.name, self.media_type, self.text or ""):
            digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
        return "art_" + digest.hexdigest()[:24]

    def ref(self) -> ArtifactRef:
        """The metadata a history message keeps of this attachment (never its content); the name
        and media type are the sender's, so they are cut to 256 and 128 characters."""
        size = self.size if self.size is not None else (utf8_len(self.text) if self.text is not None else None)
        size = size if size is None or size >= 0 else None
        return ArtifactRef(self.artifact_id, self.name[:256], self.media_type[:128], size)


MAX_ARTIFACT_REFS = 32
"""The most attachments a history message keeps references to (a request may carry any number)."""


def artifact_refs(attachments: tuple[Attachment, ...]) -> tuple[ArtifactRef, ...]:
    """The references a history message keeps of ``attachments``: the first :data:`MAX_ARTIFACT_REFS`."""
    return tuple(item.ref() for item in attachments[:MAX_ARTIFACT_REFS])


@attrs.frozen
class ArtifactRef(ValidText):
    """What a retained history message keeps of an attachment: metadata only, never its bytes.

    ``id`` is :attr:`Attachment.artifact_id`; the ``artifact_read`` tool of the bundled
    ``artifact-refs`` plugin reads the stored text of an artifact by it, for the artifacts of the
    turn's own conversation only.
    """

    id: str
    name: str
    media_type: str = "application/octet-stream"
    size: int | None = None


# --------------------------------------------------------------------------- messages and tools


@attrs.frozen
class ToolCall(ValidText):
    """A tool call requested by the model: provider call id, tool name, parsed arguments."""

    id: str
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)


class ToolStatus(str, Enum):  # noqa: UP042  (a StrEnum would change str() and format() of a public type)
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
    (:mod:`monoagent._pipeline.bloat`) measures and samples the payload before it reaches the model.
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

    Only the host writes it (:func:`monoagent._pipeline.continuity_account.account_messages`); nothing is ever
    parsed back out of a message's text. ``retained`` and ``omitted`` are the tool record ids
    (invocation and result ids) the account keeps and leaves out.
    """

    version: int
    outcome: str
    run_id: str
    retained: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    omitted: tuple[str, ...] = attrs.field(default=(), converter=_tuple)


@attrs.frozen
class ReasoningBlock(ValidText):
    """One signed reasoning block of an assistant message, kept so it can be sent back verbatim.

    Providers with extended thinking (Anthropic) require the blocks of a tool-use turn back
    unchanged in the next request, and sending them keeps the prompt-cache prefix intact.
    ``kind`` ``thinking`` carries the model's reasoning ``text`` and the ``signature`` that
    authenticates it; ``redacted`` carries only the provider's opaque ``data``. ``provider``
    names the wire that produced the block (``anthropic``); a wire sends back only its own
    blocks, and a wire without reasoning ignores them. Reasoning belongs to the model, not the
    user: it lives in a warm session's transcript only, never in canonical history, the
    history section, events (sizes only) or artifacts.
    """

    kind: Literal["thinking", "redacted"]
    text: str = ""
    signature: str = ""
    data: str = ""
    provider: str = ""

    @property
    def size(self) -> int:
        """UTF-8 bytes of the block's text, signature and data: what the stream limits count."""
        return utf8_len(self.text) + utf8_len(self.signature) + utf8_len(self.data)


@attrs.frozen
class Message(ValidText):
    """One conversation message as stored in history and sent to providers.

    ``name`` carries the speaker label of a user message (persisted, so a later turn knows who
    said what); ``tool_calls`` are set on assistant messages that asked for tools and
    ``tool_call_id`` on ``tool`` messages that answer them, with ``is_error`` when the result was
    not a success (its status was not ``success``), which the provider formats carry to the model.
    ``continuity`` is set by the host on the assistant message of a continuity account, and only
    there: it marks the message as host-authored and names the tool records the account retains.
    ``reasoning`` holds an assistant message's signed reasoning blocks in stream order (they
    precede its text on the wire); only a warm session's transcript keeps them, canonical history
    never does. ``attachments`` are the :class:`ArtifactRef` of a user message's attachments
    (metadata only), rendered next to the message in later turns. ``is_error``, ``continuity``,
    ``reasoning`` and ``attachments`` are absent in records written before they existed, and
    omitted from a serialised message when unset.
    """

    role: Role
    content: str
    name: str | None = None
    timestamp: float = attrs.field(factory=time.time)
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tuple)
    tool_call_id: str | None = None
    continuity: ContinuityEnvelope | None = None
    is_error: bool = False
    reasoning: tuple[ReasoningBlock, ...] = attrs.field(default=(), converter=_tuple)
    attachments: tuple[ArtifactRef, ...] = attrs.field(default=(), converter=_tuple)


@attrs.frozen
class ToolSpec(ValidText):
    """A tool's model-visible definition: it travels in the provider's tool interface.

    ``categories`` are the action categories a permission profile decides on (``file_write``,
    ``shell``, ``network``, ``subagent``, ``external``, ``read`` for a tool that only reads what
    the agent already holds, such as a skill body or an artifact, and ``pure`` for one without side
    effects that computes from its arguments alone; see :data:`~monoagent._kernel.tool_names.TOOL_CATEGORIES`); a tool that
    declares none counts as ``external`` under a restricted profile. ``domain`` groups tools that
    may be hidden until requested (``memory``, ``task``, ``artifact``, one per MCP server); None
    is the always-visible core. Neither travels to the provider: only name, description and
    schema do.
    """

    name: str
    description: str
    input_schema: dict[str, Any] = attrs.field(factory=lambda: {"type": "object", "properties": {}})
    categories: tuple[str, ...] = attrs.field(default=(), converter=lambda value: _names(value, "categories"))
    domain: str | None = None


#: The prompt profiles (``context.profile``, ``TurnRequest.profile``): ``full`` renders every
#: configured section, ``minimal`` only core guardrails, identity and the session block, ``none``
#: no system prompt at all.
PromptProfile = Literal["full", "minimal", "none"]
PROMPT_PROFILES: tuple[str, ...] = ("full", "minimal", "none")


# --------------------------------------------------------------------------- prompt assembly


@attrs.frozen
class Section(ValidText):
    """One section of the system prompt.

    ``order`` places it (the catalogued sections use 100 to 690 and the current user message is
    700, see :data:`monoagent._kernel.hookspecs.SECTIONS`); ``stability`` says whether its text is expected to
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
    """One system section in a :class:`PromptManifest`: its id, order, declared stability, the
    part it was rendered into (``stable`` or ``dynamic``), its source, UTF-8 size and SHA-256."""

    id: str
    order: int
    stability: Stability
    part: Stability
    source: str
    bytes: int
    sha256: str


@attrs.frozen
class Fingerprints:
    """SHA-256 (hex) of a prompt's stable text, its dynamic text and the full system text."""

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

    ``profile`` is the prompt profile the sections were chosen by (``full``, ``minimal``,
    ``none``; a prompt of its own renderer names that renderer, as compaction's ``summary``);
    ``layout`` is how the text was laid out: ``split`` (stable, boundary, dynamic system text),
    ``continuous`` (the dynamic sections at the head of the current user message) or
    ``stateless`` (the one-off rebuild of a fallback or retry without the session).
    """

    compiler_version: str
    profile: str
    sections: tuple[ManifestSection, ...]
    fingerprints: Fingerprints
    diagnostics: tuple[Diagnostic, ...]
    user_message_bytes: int
    message_count: int
    history_messages: int = 0
    layout: str = "split"

    @property
    def section_ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self.sections)


@attrs.frozen
class AssembledPrompt:
    """The provider-neutral prompt of one turn.

    ``stable_text`` and ``dynamic_text`` are the system text on either side of the cache
    boundary; ``messages`` are the provider-facing messages, the current user message last.
    Providers that support prompt caching send the two parts as separate system blocks and never
    send :data:`boundary` as text. ``leading`` is how many of ``messages`` precede the current
    user message (a warm session's transcript, or canonical history on a cold continuous-mode
    turn); a provider that marks cache breakpoints marks the newest of them.
    """

    stable_text: str
    dynamic_text: str
    boundary: str
    messages: tuple[Message, ...]
    sections: tuple[Section, ...]
    manifest: PromptManifest
    leading: int = 0

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
    """Tokens a provider reported: input, output, and the input read from or written to its
    prompt cache. ``+`` adds two usages (a turn's usage sums its steps and attempts)."""

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
    ``max_output_tokens``, when set, caps this step's answer in place of the provider's configured
    cap (``maxOutputTokens``), higher or lower (a compaction summary asks for its own). ``transport`` is ``providers.client.transport`` (``auto``, ``sse``, ``websocket``,
    ``websocket-cached``): a runtime with several transports uses the one requested, a runtime
    with one (or that lacks the requested one) ignores it and uses its default. ``tool_choice`` is
    None (the model decides), ``"required"`` (it must call a tool) or the name of the one tool it
    must call: the run's first step of a request with ``TurnRequest.tool_choice``; a runtime whose
    wire has no such control ignores it.
    """

    model: str
    prompt: AssembledPrompt
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    run_id: str = ""
    step: int = 1
    max_output_tokens: int | None = None
    transport: str = "auto"
    tool_choice: str | None = None


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
    ``"other"``). The harness counts it towards ``providers.client.maxStreamBytes`` and as
    progress for ``streamIdleTimeoutMs``, so a runtime that assembles long tool-call arguments
    or reads reasoning yields one per piece; a runtime that never does is bounded all the same.
    Reasoning progress counts until the :class:`ReasoningBlock` it belongs to arrives, which then
    counts its own size instead (so a block is counted once).
    """

    bytes: int
    kind: str = "tool_arguments"


ProviderEvent = TextDelta | ToolCallRequested | StepFinished | StreamProgress | ReasoningBlock
"""What a runtime's ``stream`` yields. A :class:`ReasoningBlock` is yielded once the block is
complete (its pieces may have been reported as ``StreamProgress(kind="reasoning")`` before)."""


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
    """One tool call of a turn with the result that went back to the model (``TurnResult.tool_activity``)."""

    call: ToolCall
    result: ToolResult
