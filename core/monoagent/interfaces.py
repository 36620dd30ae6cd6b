"""The interfaces of the components that registries hand out.

Hooks are sync; asynchronous work lives on the objects they return (STYLE.md rule 7). A plugin's
component implements one of these protocols; the kernel only ever talks to the protocol, so a
PostgreSQL history store or a vector-database memory tier plugs in without touching the kernel.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from .model import MemoryHit, Message, ProviderEvent, ProviderRequest, ToolResult, ToolSpec

if TYPE_CHECKING:
    from .turn import Turn


@runtime_checkable
class ProviderRuntime(Protocol):
    """A model endpoint. ``stream`` yields :data:`~monoagent.model.ProviderEvent` values.

    A runtime streams :class:`~monoagent.model.TextDelta` pieces, one
    :class:`~monoagent.model.ToolCallRequested` per fully assembled tool call, and ends with one
    :class:`~monoagent.model.StepFinished`. Failures raise
    :class:`~monoagent.errors.ProviderError` with ``retryable`` set for transient ones.
    Cancellation arrives as ``asyncio.CancelledError`` at an ``await``; the runtime stops its
    stream promptly and lets it propagate.
    """

    name: str

    def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]: ...


@attrs.frozen
class CommitReceipt:
    """What a history store returns after publishing a turn."""

    conversation_id: str
    message_count: int
    bytes_written: int


@attrs.frozen
class ConversationInfo:
    conversation_id: str
    message_count: int
    updated_at: float
    bytes: int


@runtime_checkable
class HistoryStore(Protocol):
    """Durable conversation history, one record per exact conversation id.

    ``load`` returns the retained messages oldest first. ``commit`` appends one turn's messages
    (user message, any tool messages, the assistant answer) atomically: after it returns, the
    turn survives a crash; if it raises, the previously committed record is intact. ``reset``
    removes one conversation; ``conversations`` lists what is stored. All methods are
    coroutines; blocking I/O belongs in a worker thread.
    """

    name: str

    async def load(self, conversation_id: str) -> Sequence[Message]: ...

    async def commit(self, conversation_id: str, messages: Sequence[Message]) -> CommitReceipt: ...

    async def reset(self, conversation_id: str) -> int: ...

    async def conversations(self) -> Sequence[ConversationInfo]: ...

    async def close(self) -> None: ...


@runtime_checkable
class MemoryTier(Protocol):
    """Long-term memory: ``search`` for recall, ``add`` for capture, ``forget`` to remove."""

    name: str

    async def search(self, query: str, *, limit: int) -> Sequence[MemoryHit]: ...

    async def add(self, text: str, *, metadata: dict[str, Any] | None = None) -> str: ...

    async def forget(self, memory_id: str) -> bool: ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors; ``dimensions`` is fixed per instance."""

    name: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


@runtime_checkable
class Channel(Protocol):
    """Where turns come from and answers go (console, cron, webhook, chat platforms)."""

    name: str

    async def serve(self, agent: Any) -> None: ...


@attrs.frozen
class CompactionOutcome:
    """What a compaction policy did to the history it was given."""

    messages: tuple[Message, ...]
    applied: bool
    method: str = "none"
    detail: str = ""


@runtime_checkable
class CompactionPolicy(Protocol):
    """Keeps the history inside the model's budget. ``compact`` may call the provider."""

    name: str

    async def compact(self, turn: Turn, messages: Sequence[Message], budget: int) -> CompactionOutcome: ...


ToolHandler = Callable[["Turn", dict[str, Any]], "str | ToolResult | Awaitable[str | ToolResult]"]


@attrs.frozen
class Tool:
    """A registered tool: its model-visible spec and the handler that runs it."""

    spec: ToolSpec
    handler: ToolHandler
    plugin: str = ""
