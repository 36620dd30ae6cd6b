"""The interfaces of the components that registries hand out.

Hooks are sync; asynchronous work lives on the objects they return (STYLE.md rule 7). A plugin's
component implements one of these protocols; the kernel only ever talks to the protocol, so a
PostgreSQL history store or a vector-database memory tier plugs in without touching the kernel.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from monoagent._kernel.model import MemoryHit, Message, ProviderEvent, ProviderRequest, ToolResult, ToolSpec

if TYPE_CHECKING:
    from monoagent._kernel.tool_context import ToolContext
    from monoagent._kernel.turn import Turn


@runtime_checkable
class ProviderRuntime(Protocol):
    """A model endpoint. ``stream`` yields :data:`~monoagent._kernel.model.ProviderEvent` values.

    A runtime streams :class:`~monoagent._kernel.model.TextDelta` pieces, one
    :class:`~monoagent._kernel.model.ToolCallRequested` per fully assembled tool call, and ends with one
    :class:`~monoagent._kernel.model.StepFinished`; it may yield :class:`~monoagent._kernel.model.StreamProgress`
    for argument or reasoning bytes as they arrive. The harness reads the stream within the
    ``providers.client`` stream limits and checks every event's types
    (:func:`monoagent._pipeline.stream.read_step`). Failures raise
    :class:`~monoagent._kernel.errors.ProviderError` with ``retryable`` set for transient ones.
    Cancellation arrives as ``asyncio.CancelledError`` at an ``await``; the runtime stops its
    stream promptly and lets it propagate. A runtime that knows its model's context window also
    implements :class:`WindowedProviderRuntime`.
    """

    name: str

    def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]: ...


@runtime_checkable
class WindowedProviderRuntime(ProviderRuntime, Protocol):
    """A :class:`ProviderRuntime` that knows its model's context window.

    ``context_window`` is the window in tokens; the compaction budget is it minus
    ``runtime.compaction.responseReserveTokens`` (``runtime.compaction.contextWindowOverride``
    wins over it). A runtime that does not implement it is budgeted at 200,000 tokens.
    """

    context_window: int


@runtime_checkable
class MemoryTier(Protocol):
    """Long-term memory: ``search`` for recall, ``add`` for capture, ``forget`` to remove.

    The contract (``monoagent.testing.MemoryTierContract`` checks it):

    * ``search(query, limit=n)`` returns at most ``n`` :class:`~monoagent._kernel.model.MemoryHit`
      values, best first, each with ``source`` = the tier's ``name``, a string ``id`` that
      ``forget`` accepts, and a ``score`` in 0..1 where higher is more relevant (the recall gate
      compares scores across tiers). Every entry holding all the query's words is found, so
      ``n`` such entries or more give exactly ``n`` hits. An empty store, or a query with nothing
      to match, returns ``[]``; ``limit`` below 1 is a ``ValueError``.
    * ``add(text, metadata=...)`` stores ``text`` and returns its id; blank text is a
      ``ValueError``. A tier may bound what it keeps (say so in its docs) and may merge a
      near-duplicate into an existing entry, returning that entry's id.
    * ``forget(id)`` removes one entry; True if it existed, False otherwise.

    A minimal tier needs nothing more. What a tier can do beyond this is declared by the
    sub-protocols it implements, each checked when the tier is built (one implemented only in
    part is refused, naming what it lacks); a tier that does not implement one gets the default
    said here:

    * :class:`SelectiveMemoryTier` (``automatic_recall``, ``captures``): which automatic steps
      use the tier; without it, both do.
    * :class:`BrowsableMemoryTier` (``list``, ``stats``): ``monoagent memory list`` and
      ``stats``; without it, those commands say the tier cannot.
    * :class:`ClosableMemoryTier` (``close``): released when the Agent closes; without it,
      nothing is.
    """

    name: str

    async def search(self, query: str, *, limit: int) -> Sequence[MemoryHit]: ...

    async def add(self, text: str, *, metadata: dict[str, Any] | None = None) -> str: ...

    async def forget(self, memory_id: str) -> bool: ...


@runtime_checkable
class SelectiveMemoryTier(MemoryTier, Protocol):
    """A tier that says which of the automatic memory steps use it (both, for a tier without them).

    ``automatic_recall``: whether the tier answers the per-turn ``recall_memory`` step (a tier
    that is searched only through tools, like ``journal``, sets it False). ``captures``: whether
    post-turn capture adds each committed turn to it. A tier sets both.
    """

    automatic_recall: bool
    captures: bool


@runtime_checkable
class ClosableMemoryTier(MemoryTier, Protocol):
    """A tier that holds resources (a connection, a file): ``close()`` releases them.

    Called once, when the Agent that built the tier closes (and by ``monoagent memory`` for a tier
    it built for one command); it may be a coroutine.
    """

    def close(self) -> Awaitable[None] | None: ...


@attrs.frozen
class MemoryRecord:
    """One stored memory, as ``monoagent memory list`` shows it."""

    id: str
    text: str
    created_at: float
    updated_at: float
    metadata: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class MemoryStats:
    """What a tier holds: entry count, UTF-8 bytes of text, where it lives, tier-specific details."""

    tier: str
    entries: int
    bytes: int
    location: str | None = None
    details: dict[str, Any] = attrs.field(factory=dict)


@runtime_checkable
class BrowsableMemoryTier(MemoryTier, Protocol):
    """A tier that can also list its entries (newest first) and report its size.

    ``list(limit=n, offset=k)`` returns at most ``n`` records, newest first, skipping ``k``
    (``limit`` below 1 or ``offset`` below 0 is a ``ValueError``); ``stats()`` returns a
    :class:`MemoryStats` whose ``bytes`` is the UTF-8 size of the stored texts. The ``memory list`` and ``memory stats``
    commands need these; ``search``, ``add`` and ``forget`` work without them.
    """

    async def list(self, *, limit: int, offset: int = 0) -> Sequence[MemoryRecord]: ...

    async def stats(self) -> MemoryStats: ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors; ``dimensions`` is fixed per instance."""

    name: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


@runtime_checkable
class Channel(Protocol):
    """Where turns come from and answers go (console, cron, webhook, chat platforms).

    A channel ``monoagent serve`` runs also implements :class:`ServedChannel`.
    """

    name: str


@runtime_checkable
class ServedChannel(Channel, Protocol):
    """A channel ``monoagent serve`` runs: its HTTP routes on the shared server, and its lifecycle.

    ``enabled`` says whether the configuration turns it on; ``has_credentials`` whether it has
    the credential every channel requires by default, and ``credential_hint`` where that is set,
    for the start-up error (``"openaiApi.tokens or MONO_AGENT_OPENAI_API_TOKENS=tok1,tok2"``).
    ``routes()`` are mounted on the server (Starlette routes; a channel without routes, such as
    ``cron``, returns none; typed ``object`` because the kernel does not depend on Starlette, which
    only the serving plugins import); ``start()`` runs once the server listens; ``stop_accepting()`` is
    called when shutdown begins (new requests are refused, turns in flight go on);
    ``cancel_in_flight()`` cancels what is still running when the grace period ends and returns
    how many; ``shutdown()`` releases the channel's resources.
    """

    enabled: bool
    has_credentials: bool
    credential_hint: str

    def routes(self) -> Sequence[object]: ...

    async def start(self) -> None: ...

    def stop_accepting(self) -> None: ...

    def cancel_in_flight(self) -> int: ...

    async def shutdown(self) -> None: ...


@runtime_checkable
class CheckedChannel(ServedChannel, Protocol):
    """A served channel that can say what it would do without serving (``monoagent serve --check``).

    ``check()`` returns lines for the report (one per hook, job, ...) and raises
    :class:`~monoagent._kernel.errors.ConfigError` saying how to fix what is wrong; it binds and
    starts nothing. A served channel without it shows only its routes.
    """

    def check(self) -> Sequence[str]: ...


@attrs.frozen
class Notification:
    """A final answer a request-driven channel delivers to a notify destination.

    ``channel`` is the channel that ran the turn (``cron``, ``webhook``), ``source`` the job or
    hook name inside it, ``destination`` the configured destination's name. ``text`` is the
    turn's final answer, verbatim. ``created_at`` is a Unix time in seconds.
    """

    text: str
    channel: str
    source: str
    destination: str
    conversation_id: str
    run_id: str
    created_at: float


@runtime_checkable
class Notifier(Protocol):
    """Delivers a :class:`Notification` to one configured destination (a URL, a file, a chat).

    ``notify`` retries on its own terms and returns once the notification is delivered, with
    the number of attempts it took (None counts as one); it raises
    :class:`~monoagent._kernel.errors.NotifyFailed` (naming the destination, the attempts and the
    last error) when it gives up. It must not raise for anything the notification's text contains.
    """

    name: str

    async def notify(self, notification: Notification) -> int | None: ...


@attrs.frozen
class CompactionOutcome:
    """What a compaction policy did to the history it was given.

    ``persist``, when set, stores what this outcome produced (a summary) so that later turns
    reuse it through :meth:`StoredCompaction.view`. The harness awaits it only once it accepts
    the outcome: at once for a proactive compaction, after the preview proved the rebuilt request
    smaller for a reactive one. An outcome that is not accepted is never persisted.
    """

    messages: tuple[Message, ...]
    applied: bool
    method: str = "none"
    detail: str = ""
    persist: Callable[[], Awaitable[None]] | None = attrs.field(default=None, eq=False, repr=False)


@runtime_checkable
class CompactionPolicy(Protocol):
    """Keeps the history inside the model's budget. ``compact`` may call the provider."""

    name: str

    async def compact(self, turn: Turn, messages: Sequence[Message], budget: int) -> CompactionOutcome: ...


@runtime_checkable
class StoredCompaction(Protocol):
    """A compaction policy that stores its work with the conversation and reuses it (optional).

    ``view(turn, messages)`` is the history as the last stored compaction left it (one summary
    message, then the messages after the ones it replaced), or None when nothing is stored or what
    is stored no longer matches ``messages``. The harness asks the configured policy
    (``runtime.compaction.policy``) for it on every turn, before it measures the request, so a
    summary costs one model call when it is made and none on the turns that reuse it.
    """

    async def view(self, turn: Turn, messages: Sequence[Message]) -> Sequence[Message] | None: ...


ToolHandler = Callable[["ToolContext"], "str | ToolResult | Awaitable[str | ToolResult]"]
"""``handler(context)``: the :class:`~monoagent._kernel.tool_context.ToolContext` of one call in, its text or result out."""

ToolEnabled = Callable[["Turn"], bool]
"""``enabled(turn)``: whether a tool is offered on this turn (its plugin's own condition: a tier configured, a mode on)."""


@attrs.frozen
class Tool:
    """A tool: its model-visible spec and the handler that runs it (``handler(context)``).

    ``plugin`` is the plugin that registered or provided it (set by the kernel); ``source`` says
    where a provided tool comes from when that is more than the plugin (``mcp:<server>``), for
    ``monoagent tools`` and the events. ``enabled`` (None: always) decides per turn whether the
    tool is offered at all: the tool loop asks it, with the read-only turn, when it builds the
    turn's offered tools (``register(spec, handler, enabled=...)``), so a plugin withdraws its own
    tool without a ``filter_tools`` implementation.
    """

    spec: ToolSpec
    handler: ToolHandler
    plugin: str = ""
    source: str = ""
    enabled: ToolEnabled | None = attrs.field(default=None, kw_only=True, eq=False, repr=False)


@attrs.frozen
class ToolSourceFailure:
    """A source of provided tools that could not say which tools it has (an MCP server that did not start).

    A ``provide_tools`` implementation returns it in place of that source's tools: the harness
    reports it as a ``runtime_warning`` (code ``tool_source_unavailable``) and the turn goes on
    without those tools; ``monoagent tools`` lists the source as failed with ``reason``.
    """

    source: str
    reason: str
