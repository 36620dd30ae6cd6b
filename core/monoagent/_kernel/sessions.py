"""Session backends: where warm provider sessions live, as a component kind.

In ``runtime.session.mode = "continuous"`` (the default) each conversation has at most one
:class:`WarmSession`: the provider-neutral native transcript (user messages, assistant messages
with their tool calls and signed reasoning blocks, tool results) the primary model has already
seen, bound to that model, with a random ``epoch`` and a ``revision`` that counts the turns
committed into it. A *warm* turn sends that transcript followed by the current user message, so
the request repeats the previous request byte for byte up to the new message and the provider's
prompt cache serves it; a *cold* turn (no usable session) sends canonical history as leading
messages instead and starts one.

Where sessions live is a :class:`SessionBackend`, a component plugins register through
``register_session_backends`` (:data:`~monoagent._kernel.components.SESSION_BACKENDS`) and
``runtime.session.backend`` selects. Each channel harness builds its own
(``agent.components.new(SESSION_BACKENDS, name)``) the first time a turn opens a session. The
bundled backends: ``memory`` (:class:`InMemorySessionBackend`, this process only, lost on
restart; the default) and ``files`` (durable transcripts on disk, the ``session-files`` plugin).
A backend sees the run as hooks do, through the read-only :class:`~monoagent._kernel.turn.Turn`;
what it hands back to the run (the session it found, a boundary, history it re-read) is the
:class:`OpenedSession` its ``open`` returns.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

from monoagent._kernel.log import logger
from monoagent._kernel.model import Message
from monoagent._kernel.stores import CommitReceipt, ProviderSessionState

if TYPE_CHECKING:
    from monoagent._kernel.turn import Turn

clock: Callable[[], float] = time.monotonic
"""How backends read the time for idle eviction (seconds, monotonic); tests replace it."""



def session_clock() -> float:
    """The time a session backend reads for idle eviction (seconds, monotonic): :data:`clock`, looked up
    on every call so that a test that replaces it reaches every backend."""
    return clock()


MAX_PENDING_NOTICES = 10_000
"""Evictions remembered for the ``session_status`` event of a conversation's next run (the oldest go first)."""

BoundaryKind = str
"""A ``session_boundary`` kind: ``rollover``, ``isolated``, ``resume_replay`` or ``cold``."""

SessionCommit = Callable[[ProviderSessionState | None], Awaitable[CommitReceipt]]
"""The ``commit`` a backend's ``publish`` calls exactly once: it commits the turn to canonical history,
bound to the given provider session (a durable backend's) or to none."""


def new_epoch() -> str:
    """A fresh random epoch: 32 hex digits."""
    return secrets.token_hex(16)


@attrs.define
class WarmSession:
    """One conversation's provider session.

    ``model`` is the bound primary model (``provider:model``, including a request model
    override); ``epoch`` names this lineage of the transcript (a new one each time a session
    starts); ``revision`` counts the turns committed into it; ``transcript`` is what the model
    has seen, oldest first, with the canonical user messages (never recall or other per-turn
    parts); ``history_tail`` is a digest of the last committed user/assistant pair of the
    canonical history it corresponds to (the pipeline's ``history_tail``), which the harness
    compares before resuming it; ``last_used`` the :data:`clock` reading of its last turn.
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


@attrs.frozen
class OpenedSession:
    """What :meth:`SessionBackend.open` found.

    ``session`` is the warm session the turn resumes (None: the turn is cold); ``boundary`` a
    ``session_boundary`` ``(kind, reason)`` for the harness to emit, if something ended;
    ``history`` the conversation's history as the backend read it again (under its lock, say),
    when it differs from ``turn.history``: the run continues on it. None keeps the turn's history.
    """

    session: WarmSession | None = None
    boundary: tuple[BoundaryKind, str] | None = None
    history: tuple[Message, ...] | None = None


@attrs.frozen
class SessionClearReport:
    """What :meth:`ClearableSessionBackend.clear_all` removed: stored transcripts and their bytes."""

    transcripts: int
    bytes: int


@runtime_checkable
class SessionBackend(Protocol):
    """Where warm sessions live. The harness holds one per channel (one Harness).

    Contract:

    ``durable``
        True when sessions survive the process (a restart resumes them).
    ``open(turn)``
        Called once per continuous, non-isolated run after history is loaded and before the
        sections are produced. Returns an :class:`OpenedSession`: the conversation's session
        (or None: the turn is cold), a boundary to emit, and history read again when the
        backend re-read it. The harness itself retires a session bound to another model
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
    harness runs one turn per conversation at a time. ``turn`` is the read-only
    :class:`~monoagent._kernel.turn.Turn` (``conversation_id``, ``model``, ``history``, ``emit``).
    """

    durable: bool

    async def open(self, turn: Turn) -> OpenedSession: ...

    async def publish(
        self, turn: Turn, session: WarmSession, appended: list[Message], commit: SessionCommit
    ) -> CommitReceipt: ...

    async def retire(self, turn: Turn, reason: str) -> None: ...

    def evict_idle(self, now: float) -> list[tuple[str, str]]: ...

    async def close(self) -> None: ...


@runtime_checkable
class ClearableSessionBackend(SessionBackend, Protocol):
    """A :class:`SessionBackend` whose sessions outlive the process and can be cleared.

    ``clear_all()``
        Remove every stored session of every conversation; returns what was removed.
        ``monoagent restart --clear-sessions`` calls it on the configured backend (a backend
        without it, such as ``memory``, keeps nothing to clear).
    """

    async def clear_all(self) -> SessionClearReport: ...


class InMemorySessionBackend:
    """Warm sessions in this process only: a table per harness, lost on restart (the ``memory`` backend).

    ``idle_timeout_ms`` is ``runtime.session.idleTimeoutMs``. Eviction is checked when a run
    opens a session: every idle session of the harness is swept then, so an abandoned
    conversation does not hold its transcript for ever, and the evicted conversation's next run
    carries the ``session_status`` event. A run takes its session out of the table while it
    runs (no sweep evicts a session in use) and ``publish`` puts it back, so the table is in
    order of last use and a sweep stops at the first session still fresh. An idle timeout of 0
    keeps no session after a turn: every turn is cold, and nothing is reported as evicted.

    A backend that keeps a copy of its sessions in memory between turns (a durable one, in front
    of its store) may extend it: :meth:`report_evictions`, :meth:`take` and :meth:`keep` are the
    table as ``open`` and ``publish`` use it.
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

    def report_evictions(self, turn: Turn) -> None:
        """Evict every idle session now, and report an earlier eviction of the turn's conversation
        (``session_status`` ``evicted``) on this, its next run."""
        self.evict_idle(clock())
        reason = self._notices.pop(turn.conversation_id, None)
        if reason is not None:
            turn.emit("session_status", status="evicted", reason=reason)

    def take(self, conversation_id: str) -> WarmSession | None:
        """Take the conversation's session out of the table (a run holds it while it runs), or None."""
        return self._sessions.pop(conversation_id, None)

    def keep(self, session: WarmSession) -> None:
        """Put ``session`` back as the table's most recently used."""
        session.last_used = clock()
        self._sessions[session.conversation_id] = session

    async def open(self, turn: Turn) -> OpenedSession:
        self.report_evictions(turn)
        return OpenedSession(self.take(turn.conversation_id))

    async def publish(
        self, turn: Turn, session: WarmSession, appended: list[Message], commit: SessionCommit
    ) -> CommitReceipt:
        receipt = await commit(None)
        if self.idle_timeout > 0:
            session.transcript.extend(appended)
            session.revision += 1
            self.keep(session)
        return receipt

    async def retire(self, turn: Turn, reason: str) -> None:
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
