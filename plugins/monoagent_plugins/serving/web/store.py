"""The web console's durable store: threads, messages, submission receipts and browser sessions.

One SQLite file, ``<home>/web/console.sqlite3`` (WAL, ``synchronous=FULL``: a receipt is the promise
that a repeated Send runs no second turn), in an owner-only directory reached from the agent home
without following a symlink (:func:`monoagent.private_directory_under`), opened as the webhook
receipts are. Tables:

- ``threads``: ``web:<uuid4>`` ids, title, timestamps, archived.
- ``messages``: user and assistant messages of a thread in order (``seq``), with the assistant's
  status, run id, model, usage, error and tool lines (JSON).
- ``submissions``: one row per submission UUID: its thread, the SHA-256 of its payload, its text,
  its state (``queued``, ``running``, then ``completed``, ``failed``, ``cancelled`` or
  ``interrupted``), its run id and answer message id, and the process that dispatched it (a
  :class:`~monoagent.ProcessIdentity` token: a ``running`` row of a process that is gone was
  interrupted).
- ``sessions``: browser sessions by the SHA-256 of their cookie value, with their CSRF token and expiry.
- ``meta``: ``owner``, the identity of the server serving this store (``monoagent web reset``
  refuses while it is alive; a second server refuses to start on it).

The methods block (SQLite, fsync): the channel calls them from a worker thread.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import attrs

from monoagent import MonoagentError, ProcessIdentity
from monoagent_plugins.memory.database import immediate
from monoagent_plugins.serving.private_database import open_private_database

DIRECTORY = "web"
DATABASE = "console.sqlite3"
TERMINAL_STATES = ("completed", "failed", "cancelled", "interrupted")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS threads (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    archived INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    thread_id TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    text TEXT NOT NULL,
    created_at REAL NOT NULL,
    submission_id TEXT,
    run_id TEXT,
    status TEXT NOT NULL,
    model TEXT,
    usage TEXT,
    error TEXT,
    tools TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS messages_by_thread ON messages (thread_id, seq);
CREATE TABLE IF NOT EXISTS submissions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    submission_id TEXT NOT NULL UNIQUE,
    thread_id TEXT NOT NULL,
    payload_sha256 TEXT NOT NULL,
    text TEXT NOT NULL,
    state TEXT NOT NULL,
    run_id TEXT,
    message_id TEXT,
    created_at REAL NOT NULL,
    owner_process TEXT
);
CREATE INDEX IF NOT EXISTS submissions_by_thread ON submissions (thread_id, state, seq);
CREATE TABLE IF NOT EXISTS sessions (
    id_sha256 TEXT PRIMARY KEY,
    csrf TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
"""


class ConsoleStoreError(MonoagentError):
    """The console store's directory or database cannot be used; the message says why and how to fix it."""


class StoreInUse(ConsoleStoreError):
    """Another live process serves this console store."""


def new_thread_id() -> str:
    return f"web:{uuid.uuid4()}"


def payload_digest(thread_id: str, text: str) -> str:
    """What a submission UUID is bound to: its thread and its text."""
    return hashlib.sha256(f"{thread_id}\n{text}".encode("utf-8", "surrogatepass")).hexdigest()


def session_digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()


@attrs.frozen
class Submitted:
    """What :meth:`ConsoleStore.submit` decided: ``new`` (recorded, queued), ``known`` (the same payload
    before: ``submission`` is its receipt), ``conflict`` (another payload under the id), ``no_thread``."""

    outcome: Literal["new", "known", "conflict", "no_thread"]
    submission: dict[str, Any] | None = None


def _thread(row: Any) -> dict[str, Any]:
    return {"id": row[0], "title": row[1], "created_at": row[2], "updated_at": row[3], "archived": bool(row[4])}


_THREAD = "id, title, created_at, updated_at, archived"
_MESSAGE = "id, role, text, created_at, submission_id, run_id, status, model, usage, error, tools"
_SUBMISSION = "submission_id, thread_id, state, run_id, message_id, created_at, text"


def _message(row: Any) -> dict[str, Any]:
    return {"id": row[0], "role": row[1], "text": row[2], "created_at": row[3], "submission_id": row[4],
            "run_id": row[5], "status": row[6], "model": row[7], "usage": json.loads(row[8]) if row[8] else None,
            "error": row[9], "tools": json.loads(row[10] or "[]")}


def _submission(row: Any) -> dict[str, Any]:
    return {"submission_id": row[0], "thread_id": row[1], "state": row[2], "run_id": row[3], "message_id": row[4],
            "created_at": row[5], "text": row[6]}


def store_path(home: Path) -> Path:
    return Path(home) / DIRECTORY / DATABASE


def store_owner(home: Path) -> ProcessIdentity | None:
    """The live process serving the console store of ``home``, or None (no store, no owner, or it is gone)."""
    path = store_path(home)
    if not path.is_file():
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'owner'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    owner = ProcessIdentity.parse(row[0]) if row else None
    return owner if owner is not None and owner.alive() else None


def remove_store(home: Path) -> bool:
    """Delete the whole console store of ``home`` (its directory); False when there was none.

    Raises :class:`StoreInUse` while a live server owns it. Nothing else under the home is touched.
    """
    owner = store_owner(home)
    if owner is not None:
        raise StoreInUse(f"the console store {store_path(home)} is in use by a running server (process {owner.pid}); "
                         f"stop it first")
    directory = Path(home) / DIRECTORY
    if directory.is_symlink():
        raise ConsoleStoreError(f"{directory} is a symlink; refused (remove it yourself)")
    if not directory.exists():
        return False
    shutil.rmtree(directory)
    return True


class ConsoleStore:
    """The console store of one agent home (see the module docstring)."""

    def __init__(self, home: Path, clock: Callable[[], float] = time.time) -> None:
        self.directory = Path(home) / DIRECTORY
        self.clock = clock
        self._lock = threading.Lock()
        self._db = open_private_database(home, DIRECTORY, DATABASE, what="web console store", error=ConsoleStoreError,
                                         schema=_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ ownership

    def claim(self) -> None:
        """Make this process the store's owner; :class:`StoreInUse` when another live process is."""
        me = ProcessIdentity.current()
        with self._lock, immediate(self._db):
            row = self._db.execute("SELECT value FROM meta WHERE key = 'owner'").fetchone()
            owner = ProcessIdentity.parse(row[0]) if row else None
            if owner is not None and owner.token() != me.token() and owner.alive():
                raise StoreInUse(f"the web console store {self.directory / DATABASE} is served by another running "
                                 f"server (process {owner.pid}); one server per store")
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('owner', ?)", (me.token(),))

    def release(self) -> None:
        """Give up ownership (the server stops)."""
        with self._lock, immediate(self._db):
            self._db.execute("DELETE FROM meta WHERE key = 'owner' AND value = ?", (ProcessIdentity.current().token(),))

    # ------------------------------------------------------------------ threads

    def create_thread(self, title: str, thread_id: str | None = None) -> dict[str, Any]:
        now = self.clock()
        thread_id = thread_id or new_thread_id()
        with self._lock, immediate(self._db):
            self._db.execute("INSERT INTO threads (id, title, created_at, updated_at, archived) VALUES (?, ?, ?, ?, 0)",
                             (thread_id, title, now, now))
        return {"id": thread_id, "title": title, "created_at": now, "updated_at": now, "archived": False}

    def thread(self, thread_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_THREAD} FROM threads WHERE id = ?", (thread_id,)).fetchone()
        return _thread(row) if row else None

    def threads(self, archived: bool) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_THREAD} FROM threads WHERE archived = ? ORDER BY updated_at DESC, id",
                                    (int(archived),)).fetchall()
        return [_thread(row) for row in rows]

    def update_thread(self, thread_id: str, title: str | None, archived: bool | None) -> dict[str, Any] | None:
        with self._lock, immediate(self._db):
            if self._db.execute("SELECT 1 FROM threads WHERE id = ?", (thread_id,)).fetchone() is None:
                return None
            if title is not None:
                self._db.execute("UPDATE threads SET title = ?, updated_at = ? WHERE id = ?", (title, self.clock(), thread_id))
            if archived is not None:
                self._db.execute("UPDATE threads SET archived = ? WHERE id = ?", (int(archived), thread_id))
            row = self._db.execute(f"SELECT {_THREAD} FROM threads WHERE id = ?", (thread_id,)).fetchone()
        return _thread(row)

    def delete_thread(self, thread_id: str) -> bool:
        """Delete a thread, its messages and its finished submissions; False when unknown."""
        with self._lock, immediate(self._db):
            gone = self._db.execute("DELETE FROM threads WHERE id = ?", (thread_id,)).rowcount
            self._db.execute("DELETE FROM messages WHERE thread_id = ?", (thread_id,))
            self._db.execute("DELETE FROM submissions WHERE thread_id = ?", (thread_id,))
        return bool(gone)

    def touch(self, thread_id: str) -> None:
        with self._lock, immediate(self._db):
            self._db.execute("UPDATE threads SET updated_at = ? WHERE id = ?", (self.clock(), thread_id))

    # ------------------------------------------------------------------ messages

    def messages(self, thread_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_MESSAGE} FROM messages WHERE thread_id = ? ORDER BY seq",
                                    (thread_id,)).fetchall()
        return [_message(row) for row in rows]

    def message(self, message_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_MESSAGE} FROM messages WHERE id = ?", (message_id,)).fetchone()
        return _message(row) if row else None

    def add_message(self, thread_id: str, role: str, text: str, *, status: str = "completed",
                    submission_id: str | None = None, run_id: str | None = None, model: str | None = None,
                    usage: dict[str, int] | None = None, error: str | None = None,
                    tools: list[dict[str, Any]] | None = None, message_id: str | None = None) -> dict[str, Any]:
        with self._lock, immediate(self._db):
            return self._add_message(thread_id, role, text, status=status, submission_id=submission_id, run_id=run_id,
                                     model=model, usage=usage, error=error, tools=tools, message_id=message_id)

    def _add_message(self, thread_id: str, role: str, text: str, *, status: str, submission_id: str | None,
                     run_id: str | None, model: str | None, usage: dict[str, int] | None, error: str | None,
                     tools: list[dict[str, Any]] | None, message_id: str | None) -> dict[str, Any]:
        now = self.clock()
        message_id = message_id or uuid.uuid4().hex
        self._db.execute(
            f"INSERT INTO messages ({_MESSAGE}, thread_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (message_id, role, text, now, submission_id, run_id, status, model, json.dumps(usage) if usage else None,
             error, json.dumps(tools or []), thread_id))
        self._db.execute("UPDATE threads SET updated_at = ? WHERE id = ?", (now, thread_id))
        return {"id": message_id, "role": role, "text": text, "created_at": now, "submission_id": submission_id,
                "run_id": run_id, "status": status, "model": model, "usage": usage, "error": error, "tools": tools or []}

    # ------------------------------------------------------------------ submissions

    def submit(self, submission_id: str, thread_id: str, text: str) -> Submitted:
        """Record a submission (``queued``) unless its id is known (one transaction: two racing Sends of
        one id cannot both be new)."""
        digest = payload_digest(thread_id, text)
        with self._lock, immediate(self._db):
            row = self._db.execute(f"SELECT {_SUBMISSION}, payload_sha256 FROM submissions WHERE submission_id = ?",
                                   (submission_id,)).fetchone()
            if row is not None:
                return Submitted("known" if row[7] == digest else "conflict", _submission(row))
            if self._db.execute("SELECT 1 FROM threads WHERE id = ?", (thread_id,)).fetchone() is None:
                return Submitted("no_thread")
            now = self.clock()
            self._db.execute(
                "INSERT INTO submissions (submission_id, thread_id, payload_sha256, text, state, created_at, owner_process) "
                "VALUES (?, ?, ?, ?, 'queued', ?, ?)",
                (submission_id, thread_id, digest, text, now, ProcessIdentity.current().token()))
            row = self._db.execute(f"SELECT {_SUBMISSION} FROM submissions WHERE submission_id = ?",
                                   (submission_id,)).fetchone()
        return Submitted("new", _submission(row))

    def submission(self, submission_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_SUBMISSION} FROM submissions WHERE submission_id = ?",
                                   (submission_id,)).fetchone()
        return _submission(row) if row else None

    def queued(self, thread_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_SUBMISSION} FROM submissions WHERE thread_id = ? AND state = 'queued' "
                                    "ORDER BY seq", (thread_id,)).fetchall()
        return [_submission(row) for row in rows]

    def queued_threads(self) -> list[str]:
        """The threads with queued submissions, oldest submission first."""
        with self._lock:
            rows = self._db.execute("SELECT thread_id, MIN(seq) FROM submissions WHERE state = 'queued' "
                                    "GROUP BY thread_id ORDER BY 2").fetchall()
        return [row[0] for row in rows]

    def start(self, submission_id: str) -> dict[str, Any]:
        """Mark a queued submission dispatched (``running``, by this process) and add its user message, before its
        turn is submitted: a process that dies from here on leaves it ``running``, so the next start records it
        interrupted rather than running it a second time. Returns the user message."""
        with self._lock, immediate(self._db):
            row = self._db.execute("SELECT thread_id, text FROM submissions WHERE submission_id = ?",
                                   (submission_id,)).fetchone()
            self._db.execute("UPDATE submissions SET state = 'running', owner_process = ? WHERE submission_id = ?",
                             (ProcessIdentity.current().token(), submission_id))
            return self._add_message(row[0], "user", row[1], status="completed", submission_id=submission_id,
                                     run_id=None, model=None, usage=None, error=None, tools=None, message_id=None)

    def started(self, submission_id: str, run_id: str) -> None:
        """The dispatched submission's turn was submitted as run ``run_id``."""
        with self._lock, immediate(self._db):
            self._db.execute("UPDATE submissions SET run_id = ? WHERE submission_id = ?", (run_id, submission_id))
            self._db.execute("UPDATE messages SET run_id = ? WHERE submission_id = ? AND role = 'user'",
                             (run_id, submission_id))

    def unstart(self, submission_id: str) -> None:
        """Undo :meth:`start` for a turn that was refused before it ran (admission): the submission and its user
        message go, so sending it again runs it."""
        with self._lock, immediate(self._db):
            self._db.execute("DELETE FROM messages WHERE submission_id = ? AND role = 'user'", (submission_id,))
            self._db.execute("DELETE FROM submissions WHERE submission_id = ?", (submission_id,))

    def requeue(self, submission_id: str) -> None:
        """Undo :meth:`start` for a queued follow-up the harness had no room for: it is ``queued`` again (its user
        message goes until it is dispatched), at the head of its thread's queue."""
        with self._lock, immediate(self._db):
            self._db.execute("DELETE FROM messages WHERE submission_id = ? AND role = 'user'", (submission_id,))
            self._db.execute("UPDATE submissions SET state = 'queued', owner_process = ? WHERE submission_id = ?",
                             (ProcessIdentity.current().token(), submission_id))

    def finish(self, submission_id: str, state: str, message: dict[str, Any]) -> dict[str, Any]:
        """Record a turn's end: its assistant message and the submission's terminal state; returns the message."""
        assert state in TERMINAL_STATES
        with self._lock, immediate(self._db):
            row = self._db.execute("SELECT thread_id, run_id FROM submissions WHERE submission_id = ?",
                                   (submission_id,)).fetchone()
            if row is None:  # the thread was deleted meanwhile
                return message
            stored = self._add_message(row[0], "assistant", message.get("text", ""), status=state,
                                       submission_id=submission_id, run_id=row[1], model=message.get("model"),
                                       usage=message.get("usage"), error=message.get("error"),
                                       tools=message.get("tools"), message_id=None)
            self._db.execute("UPDATE submissions SET state = ?, message_id = ? WHERE submission_id = ?",
                             (state, stored["id"], submission_id))
        return stored

    def interrupt_orphans(self) -> list[tuple[str, str, str | None]]:
        """Turn every ``running`` submission of a process that is gone into an ``interrupted`` assistant message;
        returns ``(thread id, submission id, run id)`` of each."""
        interrupted = []
        with self._lock, immediate(self._db):
            rows = self._db.execute("SELECT submission_id, thread_id, run_id, owner_process FROM submissions "
                                    "WHERE state = 'running'").fetchall()
            for submission_id, thread_id, run_id, token in rows:
                owner = ProcessIdentity.parse(token)
                if owner is not None and owner.alive() and owner.token() != ProcessIdentity.current().token():
                    continue
                stored = self._add_message(thread_id, "assistant", "", status="interrupted", submission_id=submission_id,
                                           run_id=run_id, model=None, usage=None,
                                           error="the server stopped while this turn ran", tools=None, message_id=None)
                self._db.execute("UPDATE submissions SET state = 'interrupted', message_id = ? WHERE submission_id = ?",
                                 (stored["id"], submission_id))
                interrupted.append((thread_id, submission_id, run_id))
        return interrupted

    # ------------------------------------------------------------------ sessions

    def create_session(self, session_id: str, csrf: str, ttl_s: float) -> None:
        now = self.clock()
        with self._lock, immediate(self._db):
            self._db.execute("DELETE FROM sessions WHERE expires_at < ?", (now,))
            self._db.execute("INSERT INTO sessions (id_sha256, csrf, created_at, expires_at) VALUES (?, ?, ?, ?)",
                             (session_digest(session_id), csrf, now, now + ttl_s))

    def session_csrf(self, session_id: str) -> str | None:
        """The CSRF token of a live session, or None (unknown or expired)."""
        with self._lock:
            row = self._db.execute("SELECT csrf, expires_at FROM sessions WHERE id_sha256 = ?",
                                   (session_digest(session_id),)).fetchone()
        if row is None or row[1] < self.clock():
            return None
        return str(row[0])

    def delete_session(self, session_id: str) -> None:
        with self._lock, immediate(self._db):
            self._db.execute("DELETE FROM sessions WHERE id_sha256 = ?", (session_digest(session_id),))
