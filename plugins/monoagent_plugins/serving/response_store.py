"""The ``openai-api`` channel's stored responses: what ``GET /v1/responses/{id}`` and ``previous_response_id`` read.

One SQLite file, ``<home>/openai-api/responses.sqlite3`` (WAL, ``synchronous=FULL``), in an owner-only
directory reached from the agent home without following a symlink, opened with the webhook receipts'
helpers (:func:`monoagent.private_directory_under`, :func:`~monoagent_plugins.memory.database.open_database`).
One row per response created with ``store: true``: its id, the server conversation it belongs to
(``conversation_id``; NULL for a response of a client conversation, which nothing can continue, and
for a response of a conversation the client carries, whose ``seed`` holds the messages that
conversation starts with if a ``previous_response_id`` ever continues it: :meth:`ResponseStore.adopt`),
where in it the response sits (``position``: the n-th stored response of that conversation, and
``history_messages``: the conversation's message count once the turn was committed), its state
(``in_progress`` from admission, then ``completed`` or ``failed``) and the Response object as JSON.

A response is reserved ``in_progress`` when its turn is admitted (:meth:`ResponseStore.reserve`, one
``BEGIN IMMEDIATE`` transaction that also checks the ``previous_response_id`` is its conversation's
latest), so two requests continuing the same response cannot both do so. The rows a process that is
gone left ``in_progress`` (a crash mid-turn) are marked ``failed`` at start-up (owner by
:class:`~monoagent.ProcessIdentity`, as the receipts do). Rows older than
``openaiApi.responseRetentionDays`` are purged at start-up and, while serving, at most every
:data:`PURGE_INTERVAL_S` seconds; beyond ``openaiApi.responseMaxStored`` rows the oldest go first.
A conversation's history reset (``monoagent history reset``, ``history clear --all``) removes its
responses (:func:`forget_conversation`).
The methods block (SQLite, fsync): call them from a worker thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import attrs

from monoagent import MonoagentError, ProcessIdentity, logger
from monoagent_plugins.memory.database import immediate
from monoagent_plugins.serving.private_database import open_private_database

DIRECTORY = "openai-api"
DATABASE = "responses.sqlite3"
PURGE_INTERVAL_S = 600

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    conversation_id TEXT,
    position INTEGER NOT NULL,
    history_messages INTEGER,
    state TEXT NOT NULL CHECK (state IN ('in_progress', 'completed', 'failed')),
    owner_process TEXT NOT NULL,
    created_at REAL NOT NULL,
    body TEXT NOT NULL,
    seed TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS responses_by_conversation ON responses (conversation_id, position);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (created_at);
"""


class ResponseStoreError(MonoagentError):
    """The responses directory or database cannot be used; the message says why."""


@attrs.frozen
class StoredResponse:
    """One stored response: where it sits and its Response object (JSON text)."""

    id: str
    conversation_id: str | None
    position: int
    history_messages: int | None
    state: Literal["in_progress", "completed", "failed"]
    created_at: float
    body: str
    seed: str | None = None
    """A response of no conversation yet: the messages (JSON) its conversation starts with once a
    ``previous_response_id`` continues it (:meth:`ResponseStore.adopt`)."""


@attrs.frozen
class Reservation:
    """What :meth:`ResponseStore.reserve` decided: ``reserved`` (the row is in), or ``not_latest`` naming the latest."""

    outcome: Literal["reserved", "not_latest"]
    latest: str | None = None


class ResponseStore:
    """The stored responses of one agent home's ``openai-api`` channel (see the module docstring)."""

    def __init__(self, home: Path, retention_s: float, max_rows: int, clock: Callable[[], float] = time.time) -> None:
        self.directory = Path(home) / DIRECTORY
        self.retention_s = retention_s
        self.max_rows = max_rows
        self.clock = clock
        self._lock = threading.Lock()
        self._db = open_private_database(home, DIRECTORY, DATABASE, what="openai-api responses", error=ResponseStoreError,
                                         schema=_SCHEMA, added_columns={"responses": {"seed": "TEXT"}})
        self._purged_at = -float("inf")
        with self._lock, immediate(self._db):
            self._fail_orphans()
            self._purge(self.clock())

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, conversation_id, position, history_messages, state, created_at, body, seed FROM responses "
                "WHERE id = ? AND created_at >= ?", (response_id, self.clock() - self.retention_s)).fetchone()
        return StoredResponse(*row) if row is not None else None

    def latest(self, conversation_id: str | None) -> str | None:
        """The id of the conversation's newest response that did not fail, or None."""
        with self._lock:
            return self._latest(conversation_id)

    def _latest(self, conversation_id: str | None) -> str | None:
        if conversation_id is None:
            return None
        row = self._db.execute("SELECT id FROM responses WHERE conversation_id = ? AND state != 'failed' "
                               "ORDER BY position DESC LIMIT 1", (conversation_id,)).fetchone()
        return row[0] if row is not None else None

    def reserve(self, response_id: str, conversation_id: str | None, previous: str | None, body: str) -> Reservation:
        """Record ``response_id`` ``in_progress`` as the newest response of ``conversation_id`` (one transaction).

        With ``previous`` (a ``previous_response_id``), it must be the conversation's latest response
        that did not fail (or be in progress: then ``not_latest`` names it too), else nothing is recorded.
        """
        with self._lock, immediate(self._db):
            now = self.clock()
            if now - self._purged_at >= PURGE_INTERVAL_S:
                self._purge(now)
            latest = self._latest(conversation_id)
            if previous is not None and latest != previous:
                return Reservation("not_latest", latest)
            position = 1
            if conversation_id is not None:
                position += self._db.execute("SELECT COALESCE(MAX(position), 0) FROM responses WHERE conversation_id = ?",
                                             (conversation_id,)).fetchone()[0]
            self._db.execute(
                "INSERT INTO responses (id, conversation_id, position, history_messages, state, owner_process, created_at, body) "
                "VALUES (?, ?, ?, NULL, 'in_progress', ?, ?, ?)",
                (response_id, conversation_id, position, ProcessIdentity.current().token(), now, body))
            overflow = self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] - self.max_rows
            if overflow > 0:
                self._db.execute("DELETE FROM responses WHERE id IN (SELECT id FROM responses WHERE id != ? "
                                 "ORDER BY created_at LIMIT ?)", (response_id, overflow))
            return Reservation("reserved")

    def finish(self, response_id: str, state: Literal["completed", "failed"], body: str,
               history_messages: int | None = None, seed: str | None = None) -> None:
        """Record the outcome of a reserved response: its final Response object, where the turn left the conversation,
        and, for a response of no conversation yet, the ``seed`` its conversation would start with."""
        with self._lock, immediate(self._db):
            self._db.execute("UPDATE responses SET state = ?, body = ?, history_messages = ?, seed = ? WHERE id = ?",
                             (state, body, history_messages, seed, response_id))

    def adopt(self, response_id: str, conversation_id: str) -> str | None:
        """Give a seeded response of no conversation the conversation ``conversation_id`` (already seeded by the caller),
        unless another request gave it one first: the conversation it now belongs to, or None when it is gone."""
        with self._lock, immediate(self._db):
            row = self._db.execute("SELECT conversation_id FROM responses WHERE id = ?", (response_id,)).fetchone()
            if row is None:
                return None
            if row[0] is not None:
                return str(row[0])
            self._db.execute("UPDATE responses SET conversation_id = ?, seed = NULL WHERE id = ?", (conversation_id, response_id))
            return conversation_id

    def forget(self, conversation_id: str | None) -> int:
        """Remove the responses of ``conversation_id`` (every response of a server conversation when None); how many."""
        with self._lock, immediate(self._db):
            if conversation_id is None:
                return int(self._db.execute("DELETE FROM responses WHERE conversation_id IS NOT NULL").rowcount)
            return int(self._db.execute("DELETE FROM responses WHERE conversation_id = ?", (conversation_id,)).rowcount)

    def purge(self) -> int:
        """Remove the responses past the retention; how many went."""
        with self._lock, immediate(self._db):
            return self._purge(self.clock())

    def _purge(self, now: float) -> int:
        self._purged_at = now
        gone: int = self._db.execute("DELETE FROM responses WHERE created_at < ?", (now - self.retention_s,)).rowcount
        if gone:
            logger.info("openai-api: purged {} stored response(s) past openaiApi.responseRetentionDays", gone)
        return gone

    def _fail_orphans(self) -> None:
        owners = self._db.execute("SELECT DISTINCT owner_process FROM responses WHERE state = 'in_progress'").fetchall()
        for (token,) in owners:
            owner = ProcessIdentity.parse(token)
            if owner is None or not owner.alive():
                failed = self._db.execute("UPDATE responses SET state = 'failed' WHERE state = 'in_progress' AND "
                                          "owner_process = ?", (token,)).rowcount
                logger.warning("openai-api: {} response(s) left in progress by a process that is gone marked failed", failed)


def forget_conversation(home: Path, conversation_id: str | None) -> int:
    """After a history reset (``after_history_reset``): the stored responses of the reset conversation go too, so a
    ``previous_response_id`` of one is a 404, not a continuation of an emptied conversation. Nothing is created in a
    home that has no responses database."""
    if not (Path(home) / DIRECTORY / DATABASE).is_file():
        return 0
    store = ResponseStore(home, float("inf"), 1)
    try:
        return store.forget(conversation_id)
    finally:
        store.close()
