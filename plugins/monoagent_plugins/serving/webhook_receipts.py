"""The webhook channel's durable receipts: idempotency records and the signatures already seen.

One SQLite file, ``<home>/webhook/receipts.sqlite3`` (WAL, ``synchronous=FULL``: a record is the
promise that a retry runs no second turn, so it must outlive a power cut), in an owner-only
directory reached from the agent home without following a symlink (:func:`monoagent.open_directory_under`). Two tables:

- ``receipts``: one row per ``(hook, Idempotency-Key)`` with the SHA-256 of the request body, the
  state (``running`` while its first request runs, ``done`` once answered) and the stored answer
  (status and JSON body) of a completed turn. Done rows older than ``webhook.idempotencyTtlHours``
  are purged at start-up and, while serving, at most every :data:`PURGE_INTERVAL_S` seconds.
  A ``running`` row names the process that runs it by its
  :class:`~monoagent.ProcessIdentity` (PID, start time and boot, so a PID the kernel handed to
  another process does not keep the key): the rows of a process that is gone are removed with
  their requests' signatures (their turn never answered) at start-up and whenever a request meets
  one, so a crash mid-turn holds neither the key nor the signed request: its retry runs. A
  ``running`` row is also a lease of at most the TTL: older, it is purged like a done one (the
  backstop where the start time cannot be known, and for rows of an older release that named
  only a PID).
- ``signatures``: the identity of every accepted signed request (:func:`signed_request_id`), so
  the same signed request is refused as a replay while its timestamp is within the signature
  tolerance. They are kept :data:`SIGNATURE_KEEP_S` past their signed time, beyond which the
  timestamp check refuses them anyway; a server restart does not reopen the window.

Every decision about a request (:meth:`ReceiptStore.admit`) is one ``BEGIN IMMEDIATE``
transaction, so two requests racing for one key, in one process or two, cannot both run.
The methods block (SQLite, fsync): call them from a worker thread.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import attrs

from monoagent import (
    MonoagentError,
    ProcessIdentity,
    logger,
)
from monoagent_plugins.memory.database import immediate
from monoagent_plugins.serving.private_database import open_private_database
from monoagent_plugins.serving.signatures import TOLERANCE_S

DIRECTORY = "webhook"
DATABASE = "receipts.sqlite3"
PURGE_INTERVAL_S = 600
"""While serving, expired receipts and signatures are purged at most this often (on the next request)."""
SIGNATURE_KEEP_S = 2 * TOLERANCE_S
"""How long past its signed timestamp a request's identity is kept (the tolerance, plus as much for clock steps)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS receipts (
    hook TEXT NOT NULL,
    key TEXT NOT NULL,
    body_sha256 TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'done')),
    owner INTEGER NOT NULL,
    owner_process TEXT,
    request_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    status INTEGER,
    answer TEXT,
    run_id TEXT,
    PRIMARY KEY (hook, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS receipts_by_age ON receipts (created_at);
CREATE TABLE IF NOT EXISTS signatures (
    id TEXT PRIMARY KEY,
    signed_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS signatures_by_age ON signatures (signed_at);
"""


class WebhookStoreError(MonoagentError):
    """The receipts directory or database cannot be used; the message says why and how to fix it."""


@attrs.frozen
class StoredAnswer:
    """The answer of a completed turn, returned as it was to a repeated idempotency key."""

    status: int
    body: str
    run_id: str


@attrs.frozen
class Admission:
    """What :meth:`ReceiptStore.admit` decided about a request.

    ``admitted``: run the turn. ``answered``: the key's first request completed, ``answer`` is
    its answer. ``conflict``: the key was used with another body. ``in_progress``: the key's
    first request is still running. ``replayed``: this very signed request was accepted before.
    """

    outcome: Literal["admitted", "answered", "conflict", "in_progress", "replayed"]
    answer: StoredAnswer | None = None


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def signed_request_id(hook: str, signed_at: int, body_sha256: str) -> str:
    """What identifies one signed request: its hook, its signed timestamp and its body.

    The signature is a function of exactly these (under the hook's secret), so a replay has the
    same id whichever of several ``v1`` entries it carries; a new request needs a new timestamp
    or a new body, which only the secret's holder can sign.
    """
    return hashlib.sha256(f"{hook}\n{signed_at}\n{body_sha256}".encode()).hexdigest()


def _owner(pid: int, token: str | None) -> ProcessIdentity:
    """The process that owns a running row: its identity, or its PID alone for a row of an older release."""
    return ProcessIdentity.parse(token) or ProcessIdentity(pid)


class ReceiptStore:
    """The receipts of one agent home's webhook channel (see the module docstring)."""

    def __init__(self, home: Path, ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        self.directory = Path(home) / DIRECTORY
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._db = open_private_database(home, DIRECTORY, DATABASE, what="webhook receipts", error=WebhookStoreError,
                                         schema=_SCHEMA, added_columns={"receipts": {"owner_process": "TEXT"}})
        self._purged_at = -float("inf")
        with self._lock, immediate(self._db):
            self._release_orphans()
            self._purge(self.clock())

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def admit(self, hook: str, key: str | None, body_sha256: str, request_id: str, signed_at: int) -> Admission:
        """Decide about one verified request and, when it is admitted, record it (one transaction).

        A known key answers from its record (or conflicts, or is in progress) before the replay
        check: a sender retrying with a fresh signature gets the first answer, and so does a
        replay of the first request itself. A new key or none: a request seen before is a
        replay; otherwise its identity (and the key, ``running``) are recorded.
        """
        with self._lock, immediate(self._db):
            now = self.clock()
            if now - self._purged_at >= PURGE_INTERVAL_S:
                self._purge(now)
            if key is not None:
                row = self._db.execute(
                    "SELECT body_sha256, state, status, answer, run_id, owner, owner_process FROM receipts "
                    "WHERE hook = ? AND key = ?", (hook, key)
                ).fetchone()
                if row is not None and row[1] == "running" and not _owner(row[5], row[6]).alive():
                    self._release(_owner(row[5], row[6]), row[5], row[6])
                    row = None
                if row is not None:
                    if row[0] != body_sha256:
                        return Admission("conflict")
                    if row[1] == "running":
                        return Admission("in_progress")
                    return Admission("answered", StoredAnswer(row[2], row[3], row[4]))
            if self._db.execute("SELECT 1 FROM signatures WHERE id = ?", (request_id,)).fetchone() is not None:
                return Admission("replayed")
            self._db.execute("INSERT INTO signatures (id, signed_at) VALUES (?, ?)", (request_id, signed_at))
            if key is not None:
                self._db.execute(
                    "INSERT INTO receipts (hook, key, body_sha256, state, owner, owner_process, request_id, created_at) "
                    "VALUES (?, ?, ?, 'running', ?, ?, ?, ?)",
                    (hook, key, body_sha256, os.getpid(), ProcessIdentity.current().token(), request_id, now),
                )
            return Admission("admitted")

    def complete(self, hook: str, key: str, answer: StoredAnswer) -> None:
        """Store the answer of the key's completed turn: from now on a repeat of the key gets it."""
        with self._lock, immediate(self._db):
            self._db.execute(
                "UPDATE receipts SET state = 'done', status = ?, answer = ?, run_id = ? WHERE hook = ? AND key = ?",
                (answer.status, answer.body, answer.run_id, hook, key),
            )

    def forget(self, hook: str, key: str | None, request_id: str) -> None:
        """Drop what :meth:`admit` recorded for a request that ran no completed turn, so a retry runs."""
        with self._lock, immediate(self._db):
            self._db.execute("DELETE FROM signatures WHERE id = ?", (request_id,))
            if key is not None:
                self._db.execute("DELETE FROM receipts WHERE hook = ? AND key = ? AND state = 'running'", (hook, key))

    def purge(self) -> int:
        """Remove receipts older than the TTL (done, or running: the lease) and signatures past :data:`SIGNATURE_KEEP_S`; how many rows went."""
        with self._lock, immediate(self._db):
            return self._purge(self.clock())

    def _purge(self, now: float) -> int:
        self._purged_at = now
        receipts = self._db.execute("DELETE FROM receipts WHERE created_at < ?", (now - self.ttl_s,)).rowcount
        signatures = self._db.execute("DELETE FROM signatures WHERE signed_at < ?", (now - SIGNATURE_KEEP_S,)).rowcount
        if receipts or signatures:
            logger.info("webhook: purged {} expired idempotency record(s) and {} seen signature(s)", receipts, signatures)
        return receipts + signatures

    def _release_orphans(self) -> None:
        owners = self._db.execute("SELECT DISTINCT owner, owner_process FROM receipts WHERE state = 'running'").fetchall()
        for pid, token in owners:
            owner = _owner(pid, token)
            if not owner.alive():
                self._release(owner, pid, token)

    def _release(self, owner: ProcessIdentity, pid: int, token: str | None) -> None:
        """Remove the running rows of ``owner``, a process that is gone, with their signatures."""
        match = "state = 'running' AND owner = ? AND owner_process IS ?"
        self._db.execute(f"DELETE FROM signatures WHERE id IN (SELECT request_id FROM receipts WHERE {match})", (pid, token))
        released = self._db.execute(f"DELETE FROM receipts WHERE {match}", (pid, token)).rowcount
        logger.warning("webhook: {} idempotency key(s) left running by process {} (identity {}), which is gone, released: "
                       "a retry of them runs the turn", released, owner.pid, owner.token())
