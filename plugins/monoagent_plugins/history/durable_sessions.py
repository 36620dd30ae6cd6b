"""The ``files`` session backend: :class:`DurableSessionBackend`, warm sessions that survive the process.

The bundled plugin ``session-files`` (:mod:`monoagent_plugins.history.session_files`) registers it and
builds it once its preconditions hold; the layout on disk is
:mod:`monoagent_plugins.history.transcript_files`. The transcripts are bound to the history record of
a :class:`~monoagent._kernel.stores.ProviderSessionStore`.

The history record owns the session: its ``ProviderSessionState`` (random epoch, revision, bound
model) is published atomically with the turn's messages, and a transcript is resumed only when
it is exactly the one that state names. One turn, as the backend sees it:

``open``
    Take the conversation's cross-process lock (a fixed table of 16 shard lock files, flock),
    read history again (another process may have committed while this turn waited for the lock:
    the history read under the lock is handed back in ``OpenedSession.history``, and the turn
    continues on it) and the record's state, and decide: a dirty fence left by a turn that died between its
    open and its commit retires every transcript of the conversation (``cold``/``dirty_fence``);
    a record committed by another process since this one last saw it drops the stale in-memory
    copy and re-reads the transcript (a rebuild from history when that fails:
    ``cold``/``revision_mismatch``); a record without state whose conversation had transcripts
    was appended to without a session (``cold``/``history_changed``); a record from before
    sessions were bound to a model takes one cold reseed (``resume_replay``/``legacy_unbound_model``).
    Then the fence is written and fsynced (with its directory), before any provider call.
``publish``
    Append the turn to the transcript (a new file for a new epoch) and fsync it and its
    directory, then commit history together with the next revision, then remove the fence and
    release the lock. A transcript that cannot be written (a full disk, a file planted in its
    place) or would grow over :data:`~monoagent_plugins.history.transcript_files.MAX_TRANSCRIPT_BYTES`
    does not cost the answer: the turn is committed without a session (``runtime_warning``
    ``session_transcript_not_written`` / ``session_transcript_too_large``) and the next turn
    reseeds. Commits without a session (continuity accounts, a retry's answer, host-only
    appends) take no session lock: when one landed during the turn, the turn is committed
    unbound and its transcript retired, so no transcript ever misses a turn.
``retire``
    Remove the conversation's transcripts (directory fsynced) and, at the end of a turn
    (failed, cancelled, answered by a retry), the fence and the lock.
``clear_all``
    Remove every conversation's transcripts (``monoagent restart --clear-sessions``).

A cold turn after any of these seeds canonical history as leading messages and creates the new
epoch's transcript from them (create-on-miss); a resumed one sends the transcript: either way
the provider sees each earlier turn once. Evicting an idle session drops only the in-memory
copy; the next turn resumes from disk. Once per process the backend sweeps, in the background,
the transcripts of conversations idle for 30 days (their next turn reseeds from history), so
transcripts of pruned, reset or abandoned conversations (a daily-rollover bucket per day) do
not accumulate. Disk work runs in worker threads; the lock waits in a
pool of its own, so turns waiting for a busy shard never starve the default executor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

import attrs

from monoagent import (
    CommitReceipt,
    InMemorySessionBackend,
    Message,
    OpenedSession,
    ProviderSessionState,
    ProviderSessionStore,
    SessionClearReport,
    SessionCommit,
    WarmSession,
    logger,
    session_clock,
)
from monoagent_plugins.history.transcript_files import (
    IDLE_SWEEP_SECONDS,
    MAX_TRANSCRIPT_BYTES,
    SHARDS,
    Fence,
    Transcript,
    TranscriptRoot,
    TranscriptStoreError,
    TranscriptTooLarge,
)

if TYPE_CHECKING:
    from monoagent import Turn

T = TypeVar("T")

MID_TURN_REASONS = frozenset({"model_change", "history_changed", "compaction"})
"""Retirements after which the same turn still publishes: the lock and the fence stay until it does."""


async def _settled(work: Awaitable[T]) -> T:
    """Await ``work`` (disk work in a thread) to its end even when cancelled meanwhile, then re-raise the cancellation."""
    future = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        if not future.cancelled() and future.exception() is not None:  # read: the cancellation is what the caller gets
            logger.debug("durable sessions: work finished after a cancellation failed: {}", future.exception())
        raise cancelled
    return future.result()


@attrs.frozen
class Resumed:
    """The transcript an open resumes, and its epoch."""

    epoch: str
    transcript: Transcript


def judge(
    fence: Fence | str | None,
    state: ProviderSessionState | None,
    transcript: Transcript | str | None,
    has_transcripts: bool,
    known: bool,
) -> tuple[Resumed | None, tuple[str, str] | None]:
    """What an open resumes (None: the turn is cold) and the ``session_boundary`` to report.

    ``fence`` is the fence found (a string: one that cannot be trusted), ``state`` the record's
    session, ``transcript`` the state's transcript as read (a string: why it is not the one the
    record names), ``has_transcripts`` whether the conversation has any transcript on disk, and
    ``known`` whether the conversation had a session directory (or has no history yet).
    """
    readable = transcript if isinstance(transcript, Transcript) else None
    if fence is not None:
        committed = isinstance(fence, Fence) and readable is not None and state is not None \
            and (fence.epoch, fence.revision) != (state.epoch, state.revision)
        if not committed:  # the fenced turn may have written a transcript the record does not name
            return None, ("cold", "dirty_fence")
    if state is None:
        if has_transcripts:
            return None, ("cold", "history_changed")
        return None, None if known else ("resume_replay", "legacy_unbound_model")
    if state.model is None:
        return None, ("resume_replay", "legacy_unbound_model")
    if readable is None and (transcript is not None or state.revision > 0):
        return None, ("cold", "revision_mismatch")
    return (Resumed(state.epoch, readable) if readable is not None else None), None


def _short(conversation_id: str) -> str:
    text = repr(conversation_id)
    return text if len(text) <= 80 else text[:77] + "..."


@attrs.define
class _Hold:
    """A conversation this backend has opened: the lock descriptor (closing it releases the lock) and the
    history as ``open`` read it under the lock."""

    lock: int
    history: tuple[Message, ...] = ()


class DurableSessionBackend(InMemorySessionBackend):
    """Warm sessions backed by transcripts on disk (see the module docstring)."""

    durable = True

    def __init__(
        self,
        store: ProviderSessionStore,
        root: str | os.PathLike[str],
        idle_timeout_ms: int,
        *,
        max_transcript_bytes: int = MAX_TRANSCRIPT_BYTES,
        sweep_after: float = IDLE_SWEEP_SECONDS,
    ) -> None:
        super().__init__(idle_timeout_ms)
        self.store = store
        self.files = TranscriptRoot(root, max_bytes=max_transcript_bytes)
        self._held: dict[str, _Hold] = {}
        self._sizes: dict[str, int] = {}
        self.sweep_after = sweep_after
        self._lockers: concurrent.futures.ThreadPoolExecutor | None = None
        self._sweep: concurrent.futures.Future[None] | None = None

    # ------------------------------------------------------------------ the lock

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """The backend's own threads: lock waits and the idle sweep, never the default executor's."""
        if self._lockers is None:
            self._lockers = concurrent.futures.ThreadPoolExecutor(max_workers=SHARDS, thread_name_prefix="session-lock")
        return self._lockers

    async def _acquire(self, conversation_id: str) -> int:
        """The conversation's shard lock, waited for in the lock pool; a cancelled wait releases it when it comes."""
        future = asyncio.get_running_loop().run_in_executor(self._pool(), self.files.lock, conversation_id)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(_close_acquired)
            raise

    def _release(self, conversation_id: str) -> None:
        hold = self._held.pop(conversation_id, None)
        if hold is not None:
            os.close(hold.lock)

    # ------------------------------------------------------------------ open

    async def open(self, turn: Turn) -> OpenedSession:
        conversation_id = turn.conversation_id
        self.report_evictions(turn)
        if conversation_id in self._held:  # the harness's lane ran the previous turn to its end: it never settled here
            logger.warning("the session lock of conversation {} was still held by an earlier turn; released",
                           _short(conversation_id))
            self._release(conversation_id)
        if self._sweep is None:  # once per backend, in the background: it never waits for a lock
            self._sweep = self._pool().submit(self._sweep_idle)
        lock = await self._acquire(conversation_id)
        try:
            history = await self._reload_history(turn)
            state = await self.store.load_provider_session(conversation_id)
            cached = self.take(conversation_id)
            opened, size = await _settled(asyncio.to_thread(self._open_locked, conversation_id, history, state, cached))
        except BaseException:
            os.close(lock)
            raise
        self._held[conversation_id] = _Hold(lock, history)
        if size is None:
            self._sizes.pop(conversation_id, None)
        else:
            self._sizes[conversation_id] = size
        return attrs.evolve(opened, history=history) if history != turn.history else opened

    def _sweep_idle(self) -> None:
        """Remove transcripts of conversations idle for longer than ``sweep_after`` seconds (see ``TranscriptRoot.sweep``)."""
        try:
            self.files.sweep(time.time(), self.sweep_after)
        except Exception as exc:  # a sweep that fails removes less; the turns are unaffected
            logger.warning("the sweep of idle session transcripts under {} failed ({}: {}); nothing else is affected",
                           self.files.root, type(exc).__name__, exc)

    async def _reload_history(self, turn: Turn) -> tuple[Message, ...]:
        """History read again under the lock: another process may have committed while this turn waited for it.

        The harness loads history before it opens the session; a turn that waited for the lock
        would otherwise be built on the history from before the other process's turn (``open``
        hands the new one back). A warning from the store is reported only when the history
        changed (the harness reported it for the same record).
        """
        warnings: list[tuple[str, str]] = []
        history = tuple(await self.store.load(turn.conversation_id, on_warning=lambda code, message: warnings.append((code, message))))
        if history != turn.history:
            for code, message in warnings:
                turn.emit("runtime_warning", code=code, message=message)
        return history

    def _open_locked(
        self, conversation_id: str, history: tuple[Message, ...], state: ProviderSessionState | None,
        cached: WarmSession | None,
    ) -> tuple[OpenedSession, int | None]:
        """Under the lock: judge the fence and the transcript against the record's state, then write the fence.

        ``history`` is the conversation's history as read under the lock. Returns what was opened
        and the resumed transcript's size (None when the turn is cold).
        """
        files = self.files
        with files.conversation(conversation_id, create=False) as existing:
            existed = existing is not None
        with files.conversation(conversation_id, create=True) as conversation:
            assert conversation is not None
            transcript: Transcript | str | None = None
            if state is not None and state.model is not None and state.revision > 0:
                size = self._sizes.get(conversation_id)
                if cached is not None and (cached.epoch, cached.revision, cached.model) == (state.epoch, state.revision, state.model) \
                        and size is not None and files.size(conversation, state.epoch) == size:
                    transcript = Transcript(cached.transcript, cached.history_tail, size)
                else:
                    if cached is not None:
                        logger.info("warm session of conversation {} is stale (revision {} in memory, {} committed); "
                                    "reopening its transcript", _short(conversation_id), cached.revision, state.revision)
                    transcript = files.read(conversation, state.epoch, state.model, state.revision)
            fence = files.read_fence(conversation)
            resumed, boundary = judge(fence, state, transcript, bool(files.transcripts(conversation)),
                                      existed or not history)
            if boundary is not None and boundary[0] == "cold":
                why = next((w for w in (fence, transcript) if isinstance(w, str)), "")
                logger.warning("conversation {}: {}{}; its session transcripts are retired and the turn reseeds from history",
                               _short(conversation_id), boundary[1].replace("_", " "), f" ({why})" if why else "")
            files.retire(conversation, resumed.epoch if resumed is not None else None)
            files.write_fence(conversation, Fence(state.epoch if state else None, state.revision if state else None))
        if resumed is None or state is None or state.model is None:
            return OpenedSession(None, boundary), None
        session = WarmSession(conversation_id, state.model, state.epoch, state.revision, list(resumed.transcript.messages),
                              resumed.transcript.history_tail, session_clock())
        return OpenedSession(session, boundary), resumed.transcript.size

    # ------------------------------------------------------------------ publish

    async def publish(self, turn: Turn, session: WarmSession, appended: list[Message], commit: SessionCommit) -> CommitReceipt:
        conversation_id = turn.conversation_id
        self.take(conversation_id)
        self._sizes.pop(conversation_id, None)
        if conversation_id not in self._held:  # not opened here: nothing on disk may claim this turn
            return await commit(None)
        revision = session.revision + 1
        try:
            size = await _settled(asyncio.to_thread(self._append, conversation_id, session, revision, appended))
        except (OSError, TranscriptStoreError) as exc:  # the answer is committed all the same, without its session
            code = "session_transcript_too_large" if isinstance(exc, TranscriptTooLarge) else "session_transcript_not_written"
            turn.emit("runtime_warning", code=code, message=f"{exc}; the turn is committed without its session and the "
                      f"next turn reseeds from history")
            return await self._commit_unbound(conversation_id, commit)
        if await self._history_moved(turn, self._held[conversation_id].history):
            logger.warning("history of conversation {} was committed without its session lock during this turn (a "
                           "continuity account or a host-only append of another process); the turn is committed "
                           "unbound and the next turn reseeds", _short(conversation_id))
            return await self._commit_unbound(conversation_id, commit)
        receipt = await commit(ProviderSessionState(session.epoch, revision, session.model))
        self._settle(conversation_id, retire=False)
        if self.idle_timeout > 0:
            session.transcript.extend(appended)
            session.revision = revision
            self.keep(session)
            self._sizes[conversation_id] = size
        return receipt

    async def _commit_unbound(self, conversation_id: str, commit: SessionCommit) -> CommitReceipt:
        """Commit the turn without a session, then retire the conversation's transcripts: the next turn is cold."""
        receipt = await commit(None)
        self._settle(conversation_id, retire=True)
        return receipt

    async def _history_moved(self, turn: Turn, opened: tuple[Message, ...]) -> bool:
        """Whether history changed since ``open`` read it under the lock.

        Commits that carry no session (a continuity account, a retry's answer, a host-only
        append) do not take the session lock, so one may land during the provider call; a
        transcript built on the history before it must not be bound to the record after it.
        """
        current = await self.store.load(turn.conversation_id, on_warning=lambda code, message: None)  # reported at open
        return tuple(current) != opened

    def _append(self, conversation_id: str, session: WarmSession, revision: int, appended: list[Message]) -> int:
        with self.files.conversation(conversation_id, create=True) as conversation:
            assert conversation is not None
            return self.files.append(conversation, session.epoch, session.model, revision, appended, session.history_tail)

    def _settle(self, conversation_id: str, *, retire: bool) -> None:
        """After the commit: (retire the transcripts,) remove the fence, release the lock.

        On the event loop, with no await, so a cancellation cannot come between a durable commit
        and the run that reports it. The fence's removal is not fsynced: a fence that reappears
        after a power cut is recognised as stale (the record has moved past it) and removed.
        """
        try:
            with self.files.conversation(conversation_id, create=False) as conversation:
                if conversation is not None:
                    if retire:
                        self.files.retire(conversation)
                    self.files.clear_fence(conversation, sync=retire)
        except (OSError, TranscriptStoreError) as exc:
            logger.warning("the session fence of conversation {} could not be removed ({}); the next turn judges it",
                           _short(conversation_id), exc)
        finally:
            self._release(conversation_id)

    # ------------------------------------------------------------------ retire, close

    async def retire(self, turn: Turn, reason: str) -> None:
        """Remove the conversation's transcripts; at the end of a turn also its fence and lock.

        Runs on the event loop without awaiting (a few unlinks and one directory fsync): it is
        called from the harness's settle path, where a second cancellation must not stop it.
        """
        conversation_id = turn.conversation_id
        self.take(conversation_id)
        self._sizes.pop(conversation_id, None)
        if conversation_id not in self._held:
            return
        if reason in MID_TURN_REASONS:
            with self.files.conversation(conversation_id, create=False) as conversation:
                if conversation is not None:
                    self.files.retire(conversation)
            return
        self._settle(conversation_id, retire=True)

    async def clear_all(self) -> SessionClearReport:
        """Remove every conversation's transcripts and fences (and the copies held in memory).

        Only directories named like a conversation digest and owned by this user are entered;
        anything else under the root is left alone, and a missing root is a no-op.
        """
        self._sessions.clear()
        self._sizes.clear()
        transcripts, freed = await asyncio.to_thread(self.files.purge)
        return SessionClearReport(transcripts, freed)

    async def close(self) -> None:
        await super().close()
        for conversation_id in list(self._held):
            self._release(conversation_id)
        if self._sweep is not None and not self._sweep.done():
            await asyncio.wrap_future(self._sweep)  # short: it never waits for a lock
        if self._lockers is not None:
            self._lockers.shutdown(wait=False, cancel_futures=True)
            self._lockers = None


def _close_acquired(future: asyncio.Future[int]) -> None:
    if not future.cancelled() and future.exception() is None:
        os.close(future.result())
