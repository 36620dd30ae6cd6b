"""Durable transcripts on disk: the layout under ``runtime.session.transcriptsDir`` (the ``files`` session backend).

::

    <root>/                          0700, this user's, never a symlink
      .locks/shard-00.lock .. 15     the fixed table of conversation locks (flock), 0600
      <C64>/                         one directory per conversation, 0700
        fence                        the dirty fence: a turn is between its open and its commit, 0600
        <E32>.jsonl                  the transcript of epoch E32, 0600

``C64`` is the SHA-256 of the exact (physical) conversation id and ``E32`` a random epoch
(``secrets.token_hex(16)``): no id reaches a path, so a hostile id stays inside its directory.
A transcript is one JSON object per line: a header (``kind`` ``header``, ``version``,
``conversation`` = C64, ``epoch``, ``model``), then one line per committed turn (``kind``
``turn``, ``revision`` 1, 2, ..., ``historyTail``, ``messages``). It is appended and fsynced (file
and directory) before the history commit that publishes its revision, and read back only when
every line is well formed, the header names the conversation, epoch and model the history
record is bound to, and the last revision is the record's; anything else is retired, never
trusted. Files are opened relative to their directory's descriptor with ``O_NOFOLLOW``; an entry
that is not a regular file of this user is never read, only removed.

The 16 lock files bound the lock table whatever the number of conversations; two conversations
of one shard serialise, which is the price of that bound (turns are short).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from monoagent import (
    FileTooLarge,
    HistoryStoreError,
    Message,
    StrictJSONError,
    SymlinkedPath,
    UnsafeFileError,
    converter,
    fsync_directory,
    logger,
    open_file_under,
    private_directory_problem,
    read_open_file,
)
from monoagent import strict_json_loads as strict_loads

SHARDS = 16
FORMAT_VERSION = 1
MAX_TRANSCRIPT_BYTES = 16 * 1024 * 1024
"""The largest transcript resumed or appended to (16 MiB); a larger one is retired and the turn goes cold."""
IDLE_SWEEP_SECONDS = 30 * 86400
"""Transcripts of conversations idle for longer (30 days) are removed by the sweep a backend starts once per process."""
MAX_FENCE_BYTES = 4096
MAX_DEPTH = 128
FENCE = "fence"
LOCKS = ".locks"
CONVERSATION_NAME = re.compile(r"[0-9a-f]{64}")
TRANSCRIPT_NAME = re.compile(r"[0-9a-f]{32}\.jsonl")
EPOCH = re.compile(r"[0-9a-f]{32}")
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class TranscriptStoreError(HistoryStoreError):
    """The transcript directory (or a conversation's) is unsafe: a symlink, another user's, loose modes.

    A :class:`~monoagent._kernel.errors.HistoryStoreError`: durable transcripts are part of the
    conversation's persisted state, and the commands that clear it report both alike.
    """


def conversation_digest(conversation_id: str) -> str:
    return hashlib.sha256(conversation_id.encode("utf-8", "surrogatepass")).hexdigest()


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass") + b"\n"


@attrs.frozen
class Fence:
    """A dirty fence: the turn that wrote it started from ``epoch`` at ``revision`` (None: no bound session)."""

    epoch: str | None
    revision: int | None


@attrs.frozen
class ConversationDir:
    """An open conversation directory: its descriptor and its name (the conversation digest)."""

    fd: int
    digest: str


@attrs.frozen
class Transcript:
    """A transcript read back whole: its messages and the history tail of its last turn."""

    messages: list[Message]
    history_tail: str
    size: int


class TranscriptRoot:
    """The transcript directory (see the module docstring). Every method blocks: run it in a worker thread."""

    def __init__(self, root: str | os.PathLike[str], *, max_bytes: int = MAX_TRANSCRIPT_BYTES) -> None:
        self.root = os.fspath(root)
        self.max_bytes = max_bytes
        self._uid = os.geteuid()
        self._ready = False

    # ------------------------------------------------------------------ directories and locks

    def problem(self) -> str | None:
        """Why the root cannot hold transcripts, or None; checked without creating anything.

        An existing root must be a private directory of this user (0700, never a symlink); a
        missing one is created by :meth:`ensure` on first use, so its nearest existing ancestor
        must be a directory this user can write in.
        """
        if os.path.lexists(self.root):
            return private_directory_problem(self.root, "session transcript directory (runtime.session.transcriptsDir)")
        ancestor = os.path.dirname(os.path.abspath(self.root))
        while not os.path.lexists(ancestor):
            ancestor = os.path.dirname(ancestor)
        if not os.path.isdir(ancestor) or not os.access(ancestor, os.W_OK | os.X_OK):
            return (f"session transcript directory (runtime.session.transcriptsDir) {self.root} does not exist and cannot "
                    f"be created: {ancestor} is not a directory this user can write in")
        return None

    def ensure(self) -> None:
        """Create (0700) and check the root and its lock directory, once."""
        if self._ready:
            return
        os.makedirs(os.path.dirname(os.path.abspath(self.root)), exist_ok=True)
        for path, what in ((self.root, "session transcript directory"), (os.path.join(self.root, LOCKS), "session lock directory")):
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            else:  # made here: its entry is flushed into the parent, or a power cut takes it with every fence under it
                fsync_directory(os.path.dirname(os.path.abspath(path)))
            if (problem := private_directory_problem(path, what)) is not None:
                raise TranscriptStoreError(problem)
        self._ready = True

    def lock(self, conversation_id: str) -> int:
        """Take the conversation's shard lock (blocking); returns the descriptor whose closing releases it."""
        fd = self._lock_file(conversation_digest(conversation_id))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _lock_file(self, digest: str) -> int:
        """An open descriptor of the shard lock file of the conversation ``digest`` (not locked yet)."""
        self.ensure()
        shard = int(digest[:8], 16) % SHARDS
        path = os.path.join(self.root, LOCKS, f"shard-{shard:02d}.lock")
        try:  # from the root down, nothing followed through a symlink (a .locks swapped for one is refused)
            fd = open_file_under(self.root, os.path.join(LOCKS, f"shard-{shard:02d}.lock"), os.O_RDWR | os.O_CREAT | os.O_NONBLOCK,
                                 0o600, what="session lock file")
        except SymlinkedPath as exc:
            raise TranscriptStoreError(str(exc)) from None
        except OSError as exc:
            raise TranscriptStoreError(f"session lock file {path} cannot be opened safely: {exc.strerror}") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != self._uid:
            os.close(fd)
            raise TranscriptStoreError(f"session lock file {path} is not a regular file of this user; move it away")
        return fd

    @contextlib.contextmanager
    def conversation(self, conversation_id: str, *, create: bool) -> Iterator[ConversationDir | None]:
        """A descriptor of the conversation's directory (None when missing and ``create`` is false)."""
        self.ensure()
        name = conversation_digest(conversation_id)
        root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | O_CLOEXEC)
        try:
            if create:
                try:
                    os.mkdir(name, 0o700, dir_fd=root)
                    os.fsync(root)
                except FileExistsError:
                    pass
            try:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | O_CLOEXEC, dir_fd=root)
            except FileNotFoundError:
                fd = None
            except OSError as exc:
                raise TranscriptStoreError(
                    f"session directory {os.path.join(self.root, name)} is a symlink or not a directory "
                    f"({exc.strerror}); refusing it: move it away"
                ) from None
        finally:
            os.close(root)
        if fd is None:
            yield None
            return
        try:
            if (problem := private_directory_problem(os.path.join(self.root, name), "session directory", os.fstat(fd))) is not None:
                raise TranscriptStoreError(problem)
            yield ConversationDir(fd, name)
        finally:
            os.close(fd)

    def _entries(self, directory: int) -> list[str]:
        return os.listdir(directory)

    def _remove(self, directory: int, name: str) -> int:
        """Unlink ``name`` (a file, a symlink, a FIFO: never followed); its size, 0 when it was gone."""
        try:
            info = os.stat(name, dir_fd=directory, follow_symlinks=False)
            os.unlink(name, dir_fd=directory)
        except FileNotFoundError:
            return 0
        except IsADirectoryError:
            raise TranscriptStoreError(
                f"{name} in a session directory is a directory; the session cannot be retired safely: remove it"
            ) from None
        return info.st_size if stat.S_ISREG(info.st_mode) else 0

    def _open_own(self, directory: int, name: str, flags: int, cap: int) -> bytes | str | None:
        """The bytes of an own regular file, why it cannot be trusted (a string), or None when it is missing."""
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | O_CLOEXEC, dir_fd=directory)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return "it is a symlink" if exc.errno == errno.ELOOP else f"it cannot be opened ({exc.strerror})"
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != self._uid:
                return "it is not a regular file of this user"
            return read_open_file(fd, cap, what="session file", path=name)
        except FileTooLarge as exc:
            return f"it is {exc.size:,} bytes, over the {cap:,}-byte cap"
        except UnsafeFileError as exc:
            return str(exc)
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ the fence

    def write_fence(self, conversation: ConversationDir, fence: Fence) -> None:
        """Replace the fence with ``fence``, fsynced with its directory before this returns."""
        directory = conversation.fd
        self._remove(directory, FENCE + ".new")
        fd = os.open(FENCE + ".new", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | O_CLOEXEC, 0o600, dir_fd=directory)
        try:
            os.write(fd, _line({"kind": "fence", "version": FORMAT_VERSION, "epoch": fence.epoch, "revision": fence.revision,
                                "pid": os.getpid()}))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(FENCE + ".new", FENCE, src_dir_fd=directory, dst_dir_fd=directory)
        except IsADirectoryError:
            raise TranscriptStoreError(
                f"the fence of session directory {os.path.join(self.root, conversation.digest)} is a directory; the session "
                f"cannot be fenced safely: remove it"
            ) from None
        os.fsync(directory)

    def read_fence(self, conversation: ConversationDir) -> Fence | str | None:
        """The fence, why it cannot be trusted (a string), or None when there is none."""
        data = self._open_own(conversation.fd, FENCE, os.O_RDONLY, MAX_FENCE_BYTES)
        if data is None or isinstance(data, str):
            return data
        try:
            raw = strict_loads(data.decode("utf-8"), max_depth=4)
        except (UnicodeDecodeError, StrictJSONError) as exc:
            return f"it is not JSON ({exc})"
        if not isinstance(raw, dict) or raw.get("kind") != "fence" or raw.get("version") != FORMAT_VERSION:
            return "it is not a fence of this version"
        epoch, revision = raw.get("epoch"), raw.get("revision")
        if not (epoch is None or (isinstance(epoch, str) and EPOCH.fullmatch(epoch))):
            return "its epoch is not 32 hex digits"
        if not (revision is None or (type(revision) is int and revision >= 0)):
            return "its revision is not a count"
        return Fence(epoch, revision)

    def clear_fence(self, conversation: ConversationDir, *, sync: bool = True) -> None:
        """Remove the fence (and fsync the directory when ``sync``)."""
        self._remove(conversation.fd, FENCE)
        if sync:
            os.fsync(conversation.fd)

    # ------------------------------------------------------------------ transcripts

    def transcripts(self, conversation: ConversationDir) -> list[str]:
        """The names of the conversation's transcripts (anything named ``*.jsonl``)."""
        return [name for name in self._entries(conversation.fd) if name.endswith(".jsonl")]

    def size(self, conversation: ConversationDir, epoch: str) -> int | None:
        """The size of the epoch's transcript when it is a regular file, else None."""
        try:
            info = os.stat(f"{epoch}.jsonl", dir_fd=conversation.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        return info.st_size if stat.S_ISREG(info.st_mode) else None

    def read(self, conversation: ConversationDir, epoch: str, model: str, revision: int) -> Transcript | str | None:
        """The transcript of ``epoch`` if it is exactly the one the record names (``model``, ``revision``).

        Returns why it is not (a string), or None when there is no such file.
        """
        digest = conversation.digest
        data = self._open_own(conversation.fd, f"{epoch}.jsonl", os.O_RDONLY, self.max_bytes)
        if data is None or isinstance(data, str):
            return data
        if not data.endswith(b"\n"):
            return "its last line is incomplete"
        messages: list[Message] = []
        tail = ""
        try:
            lines = [strict_loads(line.decode("utf-8"), max_depth=MAX_DEPTH) for line in data[:-1].split(b"\n")]
        except (UnicodeDecodeError, StrictJSONError) as exc:
            return f"a line is not JSON ({exc})"
        header = {"kind": "header", "version": FORMAT_VERSION, "conversation": digest, "epoch": epoch, "model": model}
        if lines[0] != header:
            return "its header does not name this conversation, epoch and model"
        for number, line in enumerate(lines[1:], start=1):
            if not isinstance(line, dict) or set(line) != {"kind", "revision", "historyTail", "messages"} \
                    or line["kind"] != "turn" or line["revision"] != number or not isinstance(line["historyTail"], str) \
                    or not isinstance(line["messages"], list):
                return f"line {number + 1} is not turn {number}"
            try:
                turn = [converter.structure(m, Message) for m in line["messages"]]
            except Exception as exc:  # cattrs raises a family of errors; each means "not a message"
                return f"line {number + 1} holds something that is not a message ({type(exc).__name__})"
            if [converter.unstructure(m) for m in turn] != line["messages"]:
                return f"line {number + 1} holds messages that do not read back as written"
            messages.extend(turn)
            tail = line["historyTail"]
        if len(lines) - 1 != revision:
            return f"it holds {len(lines) - 1} turns, the history record names revision {revision}"
        return Transcript(messages, tail, len(data))

    def append(self, conversation: ConversationDir, epoch: str, model: str, revision: int, messages: Sequence[Message], history_tail: str) -> int:
        """Append turn ``revision`` to the transcript of ``epoch`` (created with its header for revision 1).

        The file and its directory are fsynced before this returns. Returns the transcript's size.
        Raises :class:`TranscriptTooLarge` (nothing written) when it would exceed the cap.
        """
        directory = conversation.fd
        line = _line({"kind": "turn", "revision": revision, "historyTail": history_tail,
                      "messages": [converter.unstructure(m) for m in messages]})
        name = f"{epoch}.jsonl"
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | O_CLOEXEC
        if revision == 1:
            self._remove(directory, name)
            line = _line({"kind": "header", "version": FORMAT_VERSION, "conversation": conversation.digest,
                          "epoch": epoch, "model": model}) + line
            flags |= os.O_CREAT | os.O_EXCL
        fd = os.open(name, flags, 0o600, dir_fd=directory)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != self._uid:
                raise TranscriptStoreError(f"transcript {name} is not a regular file of this user; it is not appended to")
            if info.st_size + len(line) > self.max_bytes:
                raise TranscriptTooLarge(f"the transcript would grow to {info.st_size + len(line):,} bytes, over the "
                                         f"{self.max_bytes:,}-byte cap")
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            size = info.st_size + len(line)
        finally:
            os.close(fd)
        os.fsync(directory)
        return size

    def retire(self, conversation: ConversationDir, keep: str | None = None) -> int:
        """Remove every transcript of the conversation but ``keep`` (an epoch), fsync the directory; returns how many."""
        directory, removed = conversation.fd, 0
        for name in self.transcripts(conversation):
            if name != f"{keep}.jsonl":
                self._remove(directory, name)
                removed += 1
        if removed:
            os.fsync(directory)
        return removed

    def _entries_of_root(self) -> list[str]:
        return [name for name in os.listdir(self.root) if CONVERSATION_NAME.fullmatch(name)]

    # ------------------------------------------------------------------ clear-sessions

    def purge(self) -> tuple[int, int]:
        """Remove every conversation directory and what it holds; returns (transcripts, bytes) removed.

        Only directories named like a conversation digest and owned by this user are entered;
        anything else under the root is left alone. A missing root is a no-op.
        """
        if not os.path.lexists(self.root):
            return 0, 0
        self.ensure()
        transcripts = freed = 0
        for name in self._entries_of_root():
            removed = self._remove_directory(name)
            transcripts, freed = transcripts + removed[0], freed + removed[1]
        return transcripts, freed

    def sweep(self, now: float, max_idle: float) -> tuple[int, int]:
        """Remove the directories of conversations idle for more than ``max_idle`` seconds at ``now``.

        Idle means nothing in the directory changed since (the directory, its fence and its
        transcripts by mtime). A directory is removed only under its shard lock, taken without
        waiting: a shard in use by a turn is skipped this time. Removing a transcript only ever
        costs a cold reseed (its record names a transcript that is gone). Returns (transcripts, bytes).
        """
        if not os.path.lexists(self.root):
            return 0, 0
        self.ensure()
        transcripts = freed = 0
        for name in self._entries_of_root():
            if self._newest_change(name) > now - max_idle:
                continue
            lock = self._lock_file(name)
            try:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                if self._newest_change(name) <= now - max_idle:
                    removed = self._remove_directory(name)
                    transcripts, freed = transcripts + removed[0], freed + removed[1]
            finally:
                os.close(lock)
        if transcripts:
            logger.info("removed {} session transcript(s) idle for over {:.0f} days, {} bytes", transcripts,
                        max_idle / 86400, freed)
        return transcripts, freed

    def _newest_change(self, name: str) -> float:
        """The newest mtime of a conversation directory and its entries (``inf`` when it is not one of ours)."""
        path = os.path.join(self.root, name)
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != self._uid:
                return float("inf")
            newest = info.st_mtime
            for entry in os.scandir(path):
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
        except FileNotFoundError:
            return float("inf")
        return newest

    def _remove_directory(self, name: str) -> tuple[int, int]:
        """Remove one conversation directory (of this user) and its entries; returns (transcripts, bytes)."""
        path = os.path.join(self.root, name)
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != self._uid:
            logger.warning("{} is not a session directory of this user; left untouched", path)
            return 0, 0
        transcripts = freed = 0
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | O_CLOEXEC)
        try:
            for entry in self._entries(fd):
                size = self._remove(fd, entry)
                if TRANSCRIPT_NAME.fullmatch(entry):
                    transcripts += 1
                    freed += size
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rmdir(path)
        return transcripts, freed


class TranscriptTooLarge(TranscriptStoreError):
    """Appending would take a transcript over :data:`MAX_TRANSCRIPT_BYTES`."""
