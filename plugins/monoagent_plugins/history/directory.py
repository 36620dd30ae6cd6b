"""The ``files`` history store's directory: owner-only files, flock locks, its own files, stages.

:class:`HistoryDirectory` is the part of :class:`~monoagent_plugins.history.files.FilesHistoryStore`
that touches the file system for reading and staging: it creates and checks the owner-only
directories, opens only the store's own files (never through a symlink, never a FIFO, never
another user's), holds the shard and retention locks, reads a record under its cap (cached by
stat identity), lists the store's own files (reporting look-alikes once) and writes, fsyncs and
reclaims stages. Every write, fsync, rename and unlink of a commit goes through :class:`FsOps`.
Below ``history.dir`` nothing is followed through a symlink: lock files are opened from it by
:func:`monoagent.open_file_under`, and ``.stages`` is walked the same way before each stage is
created and before it is counted (a ``.stages`` swapped for a symlink after start-up fails the commit, naming it).
The store's state is set by the store's ``__init__``; the attributes below are what this part uses.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
from collections.abc import Callable, Iterator

from monoagent import (
    FileTooLarge,
    SymlinkedPath,
    logger,
    open_file_under,
    private_directory_problem,
    private_directory_under,
    read_open_file,
)
from monoagent_plugins.history.records import (
    DOCUMENTED_MAX_MESSAGES,
    DOCUMENTED_MESSAGE_BYTES,
    FRAMING_BYTES,
    JOURNAL_NAME,
    O_CLOEXEC,
    RECORD_NAME,
    RESET_PREFIX,
    STAGE_NAME,
    STAGE_SUFFIX,
    SUFFIX,
    CachedRecord,
    HistoryRecordError,
    HistoryStageQuotaError,
    Unreadable,
    UnreadableRecord,
    compact_json,
    decode_record,
    one_line,
    record_name,
    shard_of,
    split_messages,
    stat_key,
)


class FsOps:
    """The file-system operations of staging and publication.

    The store performs every write, fsync, rename and unlink of a commit through one of these,
    so tests can record the operation sequence (power-loss enumeration) or fail the k-th one.
    """

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        return os.open(path, flags, mode)

    def write(self, fd: int, data: memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def set_mtime(self, fd: int, ns: int) -> None:
        os.utime(fd, ns=(ns, ns))

    def close(self, fd: int) -> None:
        os.close(fd)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)




class HistoryDirectory:
    """Paths, safety checks, locks, record reads, the store's own files and stages (see the module docstring)."""

    directory: str
    fs: FsOps
    max_messages: int
    max_message_bytes: int
    max_stage_bytes: int
    _stages: str
    _locks: str
    _cache: dict[str, CachedRecord]
    _names: dict[str, tuple[str, str, str]]
    _ready: bool
    _uid: int
    _reported: set[tuple[str, str]]

    def _paths(self, conversation_id: str) -> tuple[str, str, str]:
        """(record path, logical digest prefix, reset-journal path) of a conversation id."""
        found = self._names.get(conversation_id)
        if found is None:
            if not isinstance(conversation_id, str):
                raise TypeError(f"conversation ids are strings, not {type(conversation_id).__name__}")
            name = record_name(conversation_id)
            logical16 = name[:16]
            found = (os.path.join(self.directory, name), logical16, os.path.join(self.directory, RESET_PREFIX + logical16))
            if len(self._names) > 4096:
                self._names.clear()
            self._names[conversation_id] = found
        return found

    def _check_dir(self, path: str, what: str) -> None:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        if (problem := private_directory_problem(path, what)) is not None:
            raise HistoryRecordError(problem)

    def _ensure_dir(self) -> None:
        if self._ready:
            return
        os.makedirs(os.path.dirname(os.path.abspath(self.directory)), exist_ok=True)
        self._check_dir(self.directory, "history directory")
        self._check_dir(self._stages, "history stage directory")
        self._check_dir(self._locks, "history lock directory")
        self._ready = True
        self.reclaim_stages()

    def _open_owned(self, path: str, flags: int, what: str) -> int | None:
        """Open ``path`` without following a symlink; None if missing; refuse foreign or odd files."""
        try:
            fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | O_CLOEXEC, 0o600)  # a FIFO must not block
        except FileNotFoundError:
            return None
        except OSError as exc:
            reason = "it is a symlink (refused)" if exc.errno == errno.ELOOP else exc.strerror
            raise HistoryRecordError(f"{what} {os.path.basename(path)} cannot be opened safely: {reason}") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != self._uid:
            os.close(fd)
            problem = "is not a regular file" if not stat.S_ISREG(info.st_mode) else f"belongs to uid {info.st_uid}, not {self._uid}"
            raise HistoryRecordError(
                f"{what} {os.path.basename(path)} {problem}; refusing it (it is not the store's own file: the store neither "
                f"reads nor replaces it; move it out of {os.path.dirname(path)})"
            )
        return fd

    def _walked(self, subdirectory: str, what: str) -> None:
        """Check ``subdirectory`` of the store from ``history.dir`` down (:func:`monoagent.open_directory_under`)."""
        try:
            problem = private_directory_under(self.directory, subdirectory, what=what)
        except (SymlinkedPath, NotADirectoryError) as exc:
            raise HistoryRecordError(f"{exc}; committed history is untouched") from None
        if problem is not None:
            raise HistoryRecordError(problem)

    @contextlib.contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        path = os.path.join(self._locks, name)
        flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK  # a FIFO must not block
        try:
            fd = open_file_under(self.directory, os.path.relpath(path, self.directory), flags, 0o600, what="history lock file")
        except SymlinkedPath as exc:
            if exc.component == exc.path:  # the lock file itself
                raise HistoryRecordError(f"history lock file {name} cannot be opened safely: it is a symlink (refused)") from None
            raise HistoryRecordError(f"{exc}; committed history is untouched") from None
        except NotADirectoryError as exc:
            raise HistoryRecordError(f"{exc}; committed history is untouched") from None
        except OSError as exc:
            raise HistoryRecordError(f"history lock file {name} cannot be opened safely: {exc.strerror}") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != self._uid:
            os.close(fd)
            raise HistoryRecordError(f"history lock file {name} is not a regular file of this user; refusing it (move it out of "
                                     f"{self._locks})")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _shard_lock(self, logical16: str) -> contextlib.AbstractContextManager[None]:
        return self._locked(f"shard-{shard_of(logical16):02d}.lock")

    def record_cap(self, conversation_id: str | None = None) -> int:
        """The largest record this store reads: the window at the per-message cap plus the envelope.

        The window is never taken below the documented 64 messages of 64 KiB, so lowering
        ``history.maxMessages`` or ``history.maxMessageBytes`` from at most its default never makes
        a written record unreadable (a record written under larger limits may pass the cap of the
        defaults: docs/history.md, "Record cap"). The envelope allowance is :data:`FRAMING_BYTES`, or twice the serialised
        conversation id (it is stored with its logical id) when that is larger.
        """
        window = max(self.max_messages, DOCUMENTED_MAX_MESSAGES) * (max(self.max_message_bytes, DOCUMENTED_MESSAGE_BYTES) + 1)
        if conversation_id is None:
            return window + FRAMING_BYTES
        return window + max(FRAMING_BYTES, 2 * len(compact_json(conversation_id)) + 256)

    def _read_owned(self, fd: int, path: str, cap: int) -> bytes | Unreadable:
        """The bytes of the open record ``fd``, or why not: the cap is checked before reading."""
        try:
            return read_open_file(fd, cap, what="history record", path=os.path.basename(path))
        except FileTooLarge as exc:
            return Unreadable(f"it is {exc.size:,} bytes, over the {cap:,}-byte cap of a record")

    def _read(self, conversation_id: str) -> CachedRecord | Unreadable | None:
        """The current record: an entry, why it is unreadable, or None (no record). Uses the cache by stat identity."""
        path, _, _ = self._paths(conversation_id)
        fd = self._open_owned(path, os.O_RDONLY, "history record")
        if fd is None:
            self._cache.pop(conversation_id, None)
            return None
        try:
            key = stat_key(os.fstat(fd))
            cached = self._cache.get(conversation_id)
            if cached is not None and cached.key == key:
                return cached
            data = self._read_owned(fd, path, self.record_cap(conversation_id))
        finally:
            os.close(fd)
        if isinstance(data, Unreadable):
            return data
        try:
            record, text, raw = decode_record(data, os.path.basename(path))
        except UnreadableRecord as exc:
            return Unreadable(str(exc))
        messages = tuple(record.messages)
        fragments = split_messages(text, raw)
        if fragments is not None and len(fragments) != len(messages):
            fragments = None
        session = record.providerSession.state() if record.providerSession is not None else None
        entry = CachedRecord(key, messages, fragments, len(data), session)
        self._cache[conversation_id] = entry
        return entry

    def _pending_reset(self, journal: str) -> bool:
        try:
            info = os.lstat(journal)
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(info.st_mode):
            raise HistoryRecordError(
                f"history reset journal {os.path.basename(journal)} is a symlink or not a regular file; refusing it"
            )
        if info.st_uid != self._uid:
            raise HistoryRecordError(
                f"history reset journal {os.path.basename(journal)} belongs to uid {info.st_uid}, not {self._uid}; refusing it"
            )
        return True

    def _inventory(
        self, directory: str, shapes: dict[str, re.Pattern[str]], lookalike: Callable[[str], bool], prefix: str = ""
    ) -> dict[str, list[tuple[str, os.stat_result]]]:
        """The store's own files in ``directory``, by kind: a name of exactly one of ``shapes``, a
        regular file (by ``lstat``) of this user. Entries that are not, but whose name is
        ``lookalike``, are left alone and reported once. Only names starting with ``prefix`` are looked at.
        """
        found: dict[str, list[tuple[str, os.stat_result]]] = {kind: [] for kind in shapes}
        foreign = []
        with os.scandir(directory) as entries:
            for entry in entries:
                if not entry.name.startswith(prefix):
                    continue
                kind = next((k for k, shape in shapes.items() if shape.fullmatch(entry.name)), None)
                if kind is None and not lookalike(entry.name):
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if kind is not None and stat.S_ISREG(info.st_mode) and info.st_uid == self._uid:
                    found[kind].append((entry.name, info))
                else:
                    foreign.append(entry.name)
        if foreign:
            self._report_foreign(directory, foreign)
        return found

    def _root_files(self, prefix: str = "") -> dict[str, list[tuple[str, os.stat_result]]]:
        """Own ``record`` and ``journal`` files of the history directory (whose names start with ``prefix``)."""
        return self._inventory(
            self.directory, {"record": RECORD_NAME, "journal": JOURNAL_NAME},
            lambda name: name.lower().endswith(SUFFIX) or name.startswith(RESET_PREFIX), prefix,
        )

    def _stage_files(self) -> list[tuple[str, os.stat_result]]:
        return self._inventory(self._stages, {"stage": STAGE_NAME}, lambda name: True)["stage"]

    def _report_foreign(self, directory: str, names: list[str]) -> None:
        """Log, once per store object, the entries the store leaves alone although they look like its own."""
        new = sorted(name for name in names if (directory, name) not in self._reported)
        if not new:
            return
        if len(self._reported) > 4096:
            self._reported.clear()
        self._reported.update((directory, name) for name in new)
        shown = ", ".join(one_line(repr(name), 120) for name in new[:10]) + (f" and {len(new) - 10} more" if len(new) > 10 else "")
        logger.bind(plugin="files").warning(
            "{} file(s) in {} are not the store's own (a name of its exact shape, a regular file, this user's) and were "
            "left untouched: {}", len(new), one_line(directory), shown,
        )

    def _stage_usage(self) -> tuple[int, int]:
        """How many stages there are and their bytes; first, ``.stages`` is walked from ``history.dir`` (no symlink
        on the way), which is also the check before each stage is written (:meth:`_stage` starts here)."""
        self._walked(os.path.relpath(self._stages, self.directory), "history stage directory")
        stages = self._stage_files()
        return len(stages), sum(info.st_size for _, info in stages)

    def reclaim_stages(self) -> tuple[int, int]:
        """Remove own stages whose writer is gone (their flock is free); returns (stages, bytes) reclaimed."""
        reclaimed = freed = 0
        for name, _ in self._stage_files():
            path = os.path.join(self._stages, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | O_CLOEXEC)
            except FileNotFoundError:
                continue
            except OSError as exc:
                logger.bind(plugin="files").warning("history stage {} cannot be opened ({}); left in place", name, exc.strerror)
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                info = os.fstat(fd)
                try:
                    current = os.lstat(path)
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(info.st_mode) and (current.st_dev, current.st_ino) == (info.st_dev, info.st_ino):
                    os.unlink(path)
                    reclaimed += 1
                    freed += info.st_size
            finally:
                os.close(fd)
        if reclaimed:
            logger.bind(plugin="files").info("reclaimed {} abandoned history stage(s), {} bytes", reclaimed, freed)
        return reclaimed, freed

    def _stage(self, name: str, data: bytes, now: float) -> tuple[int, str]:
        """Write ``data`` to a new, flock-ed, fsynced stage file; returns (fd, path). The caller closes fd."""
        _, used = self._stage_usage()
        if used + len(data) > self.max_stage_bytes:
            self.reclaim_stages()
            _, used = self._stage_usage()
            if used + len(data) > self.max_stage_bytes:
                raise HistoryStageQuotaError(
                    f"live unpublished history stages hold {used} bytes and this turn needs {len(data)} more, over "
                    f"history.maxStageBytes = {self.max_stage_bytes}; committed history is untouched (retry when other "
                    f"turns finish, or raise the limit)"
                )
        fs = self.fs
        while True:
            path = os.path.join(self._stages, f"{name[17:-len(SUFFIX)]}.{os.urandom(6).hex()}{STAGE_SUFFIX}")
            fd = fs.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(fd).st_nlink:
                    break
            except BlockingIOError:
                pass
            fs.close(fd)
        try:
            view = memoryview(data)
            while view:
                view = view[fs.write(fd, view) :]
            fs.set_mtime(fd, int(now * 1e9))
            fs.fsync(fd)
        except BaseException:
            self._discard(fd, path)
            raise
        return fd, path

    def _discard(self, fd: int, path: str) -> None:
        with contextlib.suppress(OSError):
            self.fs.unlink(path)
        with contextlib.suppress(OSError):
            self.fs.close(fd)
