"""Warm provider sessions in the pipeline: the messages a transcript holds, and a run's use of its backend.

In ``runtime.session.mode = "continuous"`` (the default) each conversation has at most one
:class:`~monoagent._kernel.sessions.WarmSession`, kept by the harness's session backend
(:mod:`monoagent._kernel.sessions`; ``runtime.session.backend`` selects it, :func:`session_backend`
builds it). This module is the pipeline's side: what goes into a transcript and onto a cold
turn (:func:`canonical_user_message`, :func:`leading_messages`, :func:`speaker_text`), the digest
that says whether a session still matches history (:func:`history_tail`), and a run's lease on
its backend (:func:`open_warm_session`, :func:`retire_session`). Reasoning blocks live only in
transcripts: canonical history keeps each answer's text alone, so a cold turn sends none (the API
accepts earlier turns without them).

A session is retired (the next turn starts cold) when the requested model changes, when
canonical history no longer ends where the session left it (:func:`history_tail`), when
compaction rewrites history, when an answer came from a retry or a fallback model, when the turn
fails or is cancelled, and when it has been idle for ``runtime.session.idleTimeoutMs``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from monoagent._boundary.fences import has_fence_token, neutralise_fence_tokens, quote_inline
from monoagent._kernel.components import SESSION_BACKENDS
from monoagent._kernel.model import ArtifactRef, Message, artifact_refs
from monoagent._kernel.sessions import BoundaryKind, SessionBackend, WarmSession
from monoagent._kernel.turn_request import TurnRequest

if TYPE_CHECKING:
    from monoagent._agent import Agent
    from monoagent._pipeline.turn_run import TurnRun


def history_tail(history: Sequence[Message]) -> str:
    """A digest of the last committed user/assistant pair of canonical history ('' for an empty history).

    The harness compares it with :attr:`~monoagent._kernel.sessions.WarmSession.history_tail`
    before a warm turn: a reset, an import, a commit by another process or a host-only append
    changes how history ends, and a transcript that no longer matches it must not be resumed. Timestamps are left out, so a
    store that keeps them less precisely still matches.
    """
    if not history:
        return ""
    digest = hashlib.sha256()
    for message in history[-2:]:
        envelope = message.continuity.run_id if message.continuity is not None else None
        fields = [message.role, message.name, message.content, message.tool_call_id, envelope]
        digest.update(json.dumps(fields, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


ARTIFACT_REFS_HEADER = "[Artifacts attached to this message: metadata only, not their content]"
ARTIFACT_REFS_SHOWN = 16
"""Refs listed per message; the rest are counted (a message's attachments are the sender's to multiply)."""


def artifact_refs_block(refs: Sequence[ArtifactRef]) -> str:
    """The compact metadata block of a message's attachments (id, name, media type, size), or ''.

    It sits next to the message it belongs to: in the conversation-history section, on the
    leading messages of a cold continuous-mode turn and in a warm session's transcript alike, so
    each of them shows the same bytes. Names and media types are the sender's, so they are quoted.
    """
    if not refs:
        return ""
    lines = [ARTIFACT_REFS_HEADER]
    for ref in refs[:ARTIFACT_REFS_SHOWN]:
        size = f", {ref.size} bytes" if ref.size is not None else ""
        lines.append(f"- {quote_inline(ref.id, 40)}: {quote_inline(ref.name)} ({quote_inline(ref.media_type)}{size})")
    if len(refs) > ARTIFACT_REFS_SHOWN:
        lines.append(f"- and {len(refs) - ARTIFACT_REFS_SHOWN} more not listed")
    return "\n".join(lines)


def speaker_text(content: str, name: str | None, refs: Sequence[ArtifactRef] = ()) -> str:
    """A user message's text as provider messages carry it: ``[<speaker>] <text>`` when it has a
    speaker (a group chat), fence tokens neutralised, and its attachments' metadata block
    (:func:`artifact_refs_block`) after it.

    The wires send no message names, so the label goes into the text, as the conversation-history
    section shows it (``User (<speaker>): ...``); the label is quoted like every name others control.
    """
    text = neutralise_fence_tokens(content)
    text = f"[{quote_inline(name)}] {text}" if name else text
    block = artifact_refs_block(refs)
    return f"{text}\n\n{block}" if block else text


def canonical_user_message(request: TurnRequest) -> Message:
    """The current user message as a transcript keeps it: the user's own text with fence tokens
    neutralised, the speaker's label (:func:`speaker_text`) and its attachments' metadata block;
    never recall, attachment content or other per-turn parts."""
    name = request.sender.label if request.sender else None
    refs = artifact_refs(request.attachments)
    return Message("user", speaker_text(request.text, name, refs), name=name, attachments=refs)


def leading_messages(history: Sequence[Message]) -> list[Message]:
    """Canonical history as the leading messages of a cold continuous-mode turn.

    User messages get their fence tokens neutralised, their speaker's label and their
    attachments' metadata block as the conversation-history section does (:func:`speaker_text`);
    assistant messages and continuity accounts go as the host committed them; a host note (the
    ``system`` message of a compaction summary) goes as a user message, since provider
    messages carry no system role.
    """
    leading = []
    for message in history:
        if message.continuity is None and message.role == "user":
            if message.name is None and not message.attachments and not has_fence_token(message.content):
                pass  # nothing to label, list or make inert: the message as committed (what speaker_text answers)
            else:
                content = speaker_text(message.content, message.name, message.attachments)
                message = message if content == message.content else attrs.evolve(message, content=content)
        elif message.role == "system":
            message = attrs.evolve(message, role="user")
        leading.append(message)
    return leading


@attrs.define
class SessionLease:
    """A run's use of its harness's :class:`SessionBackend`, from :meth:`~SessionBackend.open` on.

    ``session`` is the warm session the run resumes (None: the run is cold and starts one).
    """

    backend: SessionBackend
    session: WarmSession | None = None


async def open_warm_session(turn: TurnRun, backend: SessionBackend) -> None:
    """Resume the conversation's warm session for ``turn`` (a continuous, non-isolated run).

    Sets ``turn.session_lease``, ``turn.session.warm``, and ``turn.history`` when the backend read
    history again (:attr:`~monoagent._kernel.sessions.OpenedSession.history`). A session bound to
    another model is retired (``session_boundary`` ``resume_replay``/``model_change``), and so is
    one whose ``history_tail`` no longer matches the loaded history (``cold``/``history_changed``).
    """
    opened = await backend.open(turn.view)
    if opened.history is not None:
        turn.history = opened.history
    lease = turn.session_lease = SessionLease(backend, opened.session)
    if opened.boundary is not None:
        turn.emit("session_boundary", kind=opened.boundary[0], reason=opened.boundary[1])
    session = opened.session
    if session is not None and session.model != turn.model:
        await retire_session(turn, "model_change", kind="resume_replay")
    elif session is not None and session.history_tail != history_tail(turn.history):
        await retire_session(turn, "history_changed")
    turn.session = attrs.evolve(turn.session, warm=lease.session is not None)


async def retire_session(turn: TurnRun, reason: str, *, kind: BoundaryKind = "cold") -> None:
    """Retire the run's session (the next turn is cold); a ``session_boundary`` says so when one was warm.

    Nothing happens for a run that opened no session (``per-message`` mode, an isolated run).
    """
    lease = turn.session_lease
    if lease is None:
        return
    await lease.backend.retire(turn.view, reason)
    if lease.session is not None:
        turn.emit("session_boundary", kind=kind, reason=reason, epoch=lease.session.epoch)
    lease.session = None
    turn.session = attrs.evolve(turn.session, warm=False)


async def retire_settling(turn: TurnRun, reason: str) -> None:
    """:func:`retire_session` for a run settling as failed or cancelled: a backend that cannot retire
    is reported (``runtime_warning`` ``session_retire_failed``), not raised over the run's own error."""
    try:
        await retire_session(turn, reason)
    except Exception as exc:
        turn.emit(
            "runtime_warning", code="session_retire_failed", reason=reason,
            error=turn.agent.redact(f"{type(exc).__name__}: {exc}", "error"),
        )


def session_backend(agent: Agent) -> SessionBackend:
    """A new session backend for a harness of ``agent``: ``runtime.session.backend``, built with
    ``agent.components.new`` (a :class:`~monoagent._kernel.errors.ComponentError` says what is wrong
    when no active plugin registers it or its factory refuses the configuration)."""
    return agent.components.new(SESSION_BACKENDS, agent.config.runtime.session.backend)
