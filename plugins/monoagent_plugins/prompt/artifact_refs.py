"""Artifact references: the ``artifact_references`` section and the ``artifact_read`` tool.

A user message's attachments are kept in history as metadata (:class:`~monoagent._kernel.model.ArtifactRef`:
id, name, media type, size) and rendered next to that message wherever it is shown again (the
history section, the leading messages of a continuous conversation): never their bytes, never a
pile of every artifact of the conversation. This plugin adds the rest:

* after a committed turn it stores the text of the request's attachments beside the history
  (:mod:`monoagent_plugins.observability.artifact_store`: ``<history.dir>/artifacts``, content-addressed,
  at most 1 MiB each, written durably); an attachment without text (an image, a binary file)
  stores nothing and is described from its metadata;
* the ``artifact_read`` tool (categories ``read``, domain ``artifact``) returns one artifact's
  stored text by id, for an artifact of the turn's own conversation only: an id from another
  conversation or a made-up one is an error result naming the problem, never someone else's
  data. It is offered only on the turns of a conversation whose retained history has artifacts
  (so ``monoagent tools``, which lists without a turn, does not show it);
* the ``artifact_references`` section (dynamic) tells the model that references are metadata only,
  how to read one and not to read all; it is rendered only when the turn's retained history
  carries at least one reference.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Awaitable, Iterator
from typing import TYPE_CHECKING

from monoagent import (
    ArtifactRef,
    Section,
    Tool,
    ToolContext,
    ToolResult,
    ToolSpec,
    ToolStatus,
    Turn,
    TurnResult,
    hookimpl,
    logger,
    quote_inline,
)
from monoagent_plugins.observability import artifact_store

if TYPE_CHECKING:
    from monoagent import Agent

TOOL_NAME = "artifact_read"
HEADING = "# Artifact references"
POLICY = (
    "Some messages of this conversation carry artifact references: blocks listing an attached file's id, name, "
    "type and size. They are metadata only, not the files themselves.\n"
    "- Read an artifact only when the current request needs its content{how}.\n"
    "- Read only the artifacts you need; do not read every artifact because references exist.\n"
    "- When the conversation history already answers the question, answer from it without reading the file."
)
HOW_DIRECT = ": call `artifact_read` with the artifact's exact id"
HOW_REQUEST = ": request the `artifact` tool domain with `request_tools`, then call `artifact_read` with the artifact's exact id"

SPEC = ToolSpec(
    TOOL_NAME,
    "Read the stored text of one artifact (an attachment of an earlier message of this conversation) by its exact id, "
    "as listed in the message's artifact block. Returns the text, or a description when only metadata is stored.",
    {
        "type": "object",
        "properties": {"id": {"type": "string", "description": "The artifact id, such as art_0123456789abcdef01234567."}},
        "required": ["id"],
        "additionalProperties": False,
    },
    categories=("read",),
    domain="artifact",
)


def conversation_refs(turn: Turn) -> Iterator[ArtifactRef]:
    """Every artifact reference of the turn's retained history, oldest first."""
    for message in turn.history:
        yield from message.attachments


_attachments_of = operator.attrgetter("attachments")


def has_refs(turn: Turn) -> bool:
    """Whether a message of the turn's history carries an artifact reference (asked every turn, over the whole history: in C)."""
    return any(map(_attachments_of, turn.history))


@hookimpl(trylast=True)
def section_artifact_references(turn: Turn) -> Section | None:
    if not has_refs(turn):
        return None
    names = {spec.name for spec in turn.tools}
    how = HOW_DIRECT if TOOL_NAME in names else HOW_REQUEST if "request_tools" in names else ""
    return Section(
        "artifact_references", f"{HEADING}\n\n{POLICY.format(how=how)}", order=630, stability="dynamic", source="artifact-refs"
    )


def _describe(ref: ArtifactRef) -> str:
    size = f", {ref.size} bytes" if ref.size is not None else ""
    return f"{ref.id} ({quote_inline(ref.name)}, {quote_inline(ref.media_type)}{size})"


async def read_artifact(context: ToolContext) -> ToolResult:
    """The ``artifact_read`` handler: the artifact's text, for an id of this conversation only."""
    turn = context.turn
    wanted = context.arguments.get("id")
    if not isinstance(wanted, str) or not artifact_store.ARTIFACT_ID.fullmatch(wanted):
        return context.result(
            f"{quote_inline(str(wanted), 60)} is not an artifact id: use an id as listed in a message's artifact block "
            "(art_ and 24 hex digits).", ToolStatus.ERROR,
        )
    ref = next((r for r in conversation_refs(turn) if r.id == wanted), None)
    if ref is None:
        return context.result(
            f"{wanted} is not an artifact of this conversation: only the artifacts listed next to this conversation's "
            "messages can be read.", ToolStatus.ERROR,
        )
    root = turn.config.history_dir
    try:
        text = await asyncio.to_thread(artifact_store.read_text, root, wanted)
    except FileNotFoundError:
        return context.result(
            f"Artifact {_describe(ref)} has no stored text (an image or binary file keeps its metadata only); "
            "its content cannot be read."
        )
    except OSError as exc:
        logger.warning("artifact {} could not be read: {}", wanted, exc)
        return context.result(f"Artifact {_describe(ref)} could not be read: {exc.strerror or type(exc).__name__}.", ToolStatus.ERROR)
    return context.result(f"Artifact {_describe(ref)}:\n\n{text}")


TOOL = Tool(SPEC, read_artifact)


@hookimpl(trylast=True)
def provide_tools(agent: Agent, turn: Turn | None) -> list[Tool] | None:
    return [TOOL] if turn is not None and has_refs(turn) else None


def _store(turn: Turn) -> int:
    root = turn.config.history_dir
    return sum(
        artifact_store.store_text(root, item.artifact_id, item.text) for item in turn.request.attachments if item.text is not None
    )


@hookimpl(trylast=True)
def after_commit(turn: Turn, result: TurnResult) -> Awaitable[None] | None:
    if not any(item.text is not None for item in turn.request.attachments):
        return None
    return _stored(turn)


async def _stored(turn: Turn) -> None:
    stored = await asyncio.to_thread(_store, turn)
    logger.debug("stored the text of {} attachment(s) of run {}", stored, turn.run_id)
