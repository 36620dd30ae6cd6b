"""Warm provider sessions: the native transcript a continuous conversation keeps between turns.

In ``runtime.session.mode = "continuous"`` (the default) each conversation has at most one
:class:`WarmSession`: the provider-neutral native transcript (user messages, assistant messages
with their tool calls and signed reasoning blocks, tool results) the primary model has already
seen, bound to that model, with a random ``epoch`` and a ``revision`` that counts the turns
committed into it. A *warm* turn sends that transcript followed by the current user message, so the request repeats the previous
request byte for byte up to the new message and the provider's prompt cache serves it; a *cold*
turn (no usable session) sends canonical history as leading messages instead and starts one.
Reasoning blocks live only here: canonical history keeps each answer's text alone, so a cold
turn sends none (the API accepts earlier turns without them).

Where sessions live is a :class:`SessionBackend`. The harness holds one per channel (one per
:class:`~monoagent.pipeline.harness.Harness`), chosen by :func:`session_backend`:
:class:`InMemorySessionBackend` keeps them in this process only (lost on restart); a durable
backend keeps them on disk across processes when the configuration and the history store allow it.

A session is retired (the next turn starts cold) when the requested model changes, when
canonical history no longer ends where the session left it (:func:`history_tail`), when
compaction rewrites history, when an answer came from a retry or a fallback model, when the turn
fails or is cancelled, and when it has been idle for ``runtime.session.idleTimeoutMs``.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from monoagent.boundary.fences import neutralise_fence_tokens, quote_inline
from monoagent.kernel.log import logger
from monoagent.kernel.model import ArtifactRef, Message, TurnRequest, artifact_refs

if TYPE_CHECKING:
    from monoagent.agent import Agent
    from monoagent.kernel.stores import CommitReceipt
    from monoagent.pipeline.turn_run import TurnRun

clock: Callable[[], float] = time.monotonic
"""How backends read the time for idle eviction (seconds, monotonic); tests replace it."""

MAX_PENDING_NOTICES = 10_000
"""Evictions remembered for the ``session_status`` event of a conversation's next run (the oldest go first)."""

BoundaryKind = str
"""A ``session_boundary`` kind: ``rollover``, ``isolated``, ``resume_replay`` or ``cold``."""


def new_epoch() -> str:
    """A fresh random epoch: 32 hex digits."""
    return secrets.token_hex(16)


def history_tail(history: Sequence[Message]) -> str:
    """A digest of the last committed user/assistant pair of canonical history ('' for an empty history).

    The harness compares it with :attr:`WarmSession.history_tail` before a warm turn: a reset, an
    import, a commit by another process or a host-only append changes how history ends, and a
    transcript that no longer matches it must not be resumed. Timestamps are left out, so a
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


@attrs.define
class WarmSession:
    """One conversation's provider session.

    ``model`` is the bound primary model (``provider:model``, including a request model
    override); ``epoch`` names this lineage of the transcript (a new one each time a session
    starts); ``revision`` counts the turns committed into it; ``transcript`` is what the model
    has seen, oldest first, with the canonical user messages (never recall or other per-turn
    parts); ``history_tail`` is :func:`history_tail` of the canonical history it corresponds to;
    ``last_used`` the :data:`clock` reading of its last turn.
    """

    conversation_id: str
    model: str
    epoch: str
    revision: int
    transcript: list[Message]
    history_tail: str
    last_used: float

    @classmethod
    def start(cls, conversation_id: str, model: str) -> WarmSession:
        """A new, empty session for a cold turn: a fresh epoch at revision 0."""
        return cls(conversation_id, model, new_epoch(), 0, [], "", clock())


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


@attrs.frozen
class OpenedSession:
    """What :meth:`SessionBackend.open` found: the warm session (None: the turn is cold) and a
    ``session_boundary`` ``(kind, reason)`` for the harness to emit, if something ended."""

    session: WarmSession | None = None
    boundary: tuple[BoundaryKind, str] | None = None


class SessionBackend(Protocol):
    """Where warm sessions live. The harness holds one per channel (one Harness).

    Contract:

    ``durable``
        True when sessions survive the process (a restart resumes them).
    ``open(turn)``
        Called once per continuous, non-isolated run after history is loaded and before the
        sections are produced. Returns the conversation's session (or None: the turn is cold) and
        a boundary to emit. The harness itself retires a session bound to another model
        (``resume_replay``/``model_change``) or whose ``history_tail`` no longer matches
        (``cold``/``history_changed``). A backend reports an idle eviction it performed as a
        ``session_status`` event (``status="evicted"``, ``reason``) on the conversation's next run.
    ``publish(turn, session, appended, commit)``
        After the primary model's first attempt answered: append ``appended`` to the session's
        transcript, call ``commit(state)`` exactly once (it commits the turn to canonical history,
        with the durable provider-session state when the backend has one, else None), and keep
        the session for the next turn at ``revision + 1``. ``session`` is the warm session the
        turn ran on, or a new one (:meth:`WarmSession.start`) after a cold turn, and its
        ``history_tail`` already names the history the commit leaves. Returns the commit's
        receipt; when ``commit`` raises, the session is dropped and the error propagates.
    ``retire(turn, reason)``
        Drop the conversation's session (and what backs it); the next turn is cold.
    ``evict_idle(now)``
        Drop every session idle for longer than the idle timeout at ``now`` (a :data:`clock`
        reading); returns ``(conversation_id, reason)`` of each, after logging it.
    ``close()``
        Drop everything (reason ``disposed``); the harness calls it when the Agent closes.

    Every run that called ``open`` ends with ``publish`` or ``retire`` (a run that retired its
    session while preparing, on a model change say, may still publish a new one), except a run
    cancelled after its commit was durable. Calls for one conversation never overlap: the
    harness runs one turn per conversation at a time.
    """

    durable: bool

    async def open(self, turn: TurnRun) -> OpenedSession: ...

    async def publish(
        self,
        turn: TurnRun,
        session: WarmSession,
        appended: list[Message],
        commit: Callable[[object | None], Awaitable[CommitReceipt]],
    ) -> CommitReceipt: ...

    async def retire(self, turn: TurnRun, reason: str) -> None: ...

    def evict_idle(self, now: float) -> list[tuple[str, str]]: ...

    async def close(self) -> None: ...


class InMemorySessionBackend:
    """Warm sessions in this process only: a table per harness, lost on restart.

    ``idle_timeout_ms`` is ``runtime.session.idleTimeoutMs``. Eviction is checked when a run
    opens a session: every idle session of the harness is swept then, so an abandoned
    conversation does not hold its transcript for ever, and the evicted conversation's next run
    carries the ``session_status`` event. A run takes its session out of the table while it
    runs (no sweep evicts a session in use) and ``publish`` puts it back, so the table is in
    order of last use and a sweep stops at the first session still fresh. An idle timeout of 0
    keeps no session after a turn: every turn is cold, and nothing is reported as evicted.
    """

    durable = False

    def __init__(self, idle_timeout_ms: int) -> None:
        self.idle_timeout = idle_timeout_ms / 1000
        self._sessions: dict[str, WarmSession] = {}
        self._notices: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def _drop(self, conversation_id: str, reason: str) -> None:
        session = self._sessions.pop(conversation_id, None)
        if session is None:
            return
        logger.info(
            "warm session of conversation {!r} evicted ({}): epoch {}, revision {}, {} transcript messages",
            conversation_id, reason, session.epoch, session.revision, len(session.transcript),
        )
        self._notices.pop(conversation_id, None)
        self._notices[conversation_id] = reason
        while len(self._notices) > MAX_PENDING_NOTICES:
            del self._notices[next(iter(self._notices))]

    async def open(self, turn: TurnRun) -> OpenedSession:
        self.evict_idle(clock())
        reason = self._notices.pop(turn.conversation_id, None)
        if reason is not None:
            turn.emit("session_status", status="evicted", reason=reason)
        return OpenedSession(self._sessions.pop(turn.conversation_id, None))

    async def publish(
        self,
        turn: TurnRun,
        session: WarmSession,
        appended: list[Message],
        commit: Callable[[object | None], Awaitable[CommitReceipt]],
    ) -> CommitReceipt:
        receipt = await commit(None)
        if self.idle_timeout > 0:
            session.transcript.extend(appended)
            session.revision += 1
            session.last_used = clock()
            self._sessions[turn.conversation_id] = session
        return receipt

    async def retire(self, turn: TurnRun, reason: str) -> None:
        self._sessions.pop(turn.conversation_id, None)

    def evict_idle(self, now: float) -> list[tuple[str, str]]:
        idle = []
        for conversation_id, session in self._sessions.items():
            if now - session.last_used < self.idle_timeout:
                break
            idle.append(conversation_id)
        for conversation_id in idle:
            self._drop(conversation_id, "idle_timeout")
        return [(cid, "idle_timeout") for cid in idle]

    async def close(self) -> None:
        for conversation_id in list(self._sessions):
            self._drop(conversation_id, "disposed")


async def open_warm_session(turn: TurnRun, backend: SessionBackend) -> None:
    """Resume the conversation's warm session for ``turn`` (a continuous, non-isolated run).

    Sets ``turn.session_lease`` and ``turn.session.warm``. A session bound to another model is
    retired (``session_boundary`` ``resume_replay``/``model_change``), and so is one whose
    ``history_tail`` no longer matches the loaded history (``cold``/``history_changed``).
    """
    opened = await backend.open(turn)
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
    await lease.backend.retire(turn, reason)
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


_WITHHELD: set[tuple[str, str]] = set()
"""(sessions root, store name) pairs already told that the store cannot make sessions durable."""


def session_backend(agent: Agent) -> SessionBackend:
    """The session backend of a new harness of ``agent``.

    Durable (:class:`~monoagent.pipeline.durable_sessions.DurableSessionBackend`) when
    ``runtime.session.transcriptsDir`` is set and the history store is a
    :class:`~monoagent.kernel.stores.ProviderSessionStore`; otherwise in memory
    (process-local sessions). A root set for another store is withheld, and a log line says so once.
    """
    from monoagent.kernel.stores import ProviderSessionStore

    idle_timeout_ms = agent.config.runtime.session.idle_timeout_ms
    root = agent.config.runtime.session.transcripts_dir
    if root is None:
        return InMemorySessionBackend(idle_timeout_ms)
    store = agent.history_store
    if agent.components.supports(store, ProviderSessionStore):
        from monoagent.pipeline.durable_sessions import DurableSessionBackend

        return DurableSessionBackend(store, agent.config.resolve(root), idle_timeout_ms)
    if (str(root), store.name) not in _WITHHELD:
        _WITHHELD.add((str(root), store.name))
        logger.warning(
            "runtime.session.transcriptsDir is set, but the history store {!r} is not a ProviderSessionStore "
            "(load_provider_session, commit with provider_session=): warm sessions stay in this process and are lost on restart",
            store.name,
        )
    return InMemorySessionBackend(idle_timeout_ms)
