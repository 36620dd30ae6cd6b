"""A file-system tap for the durability contract: records, and fails, the file operations of a commit.

:class:`FileSystemTap` interposes at the Python level on the file operations a store makes under
one directory (``os.open``, ``os.write``, ``os.pwrite``, ``os.fsync``, ``os.fdatasync``,
``os.ftruncate``, ``os.rename``, ``os.replace``, ``os.unlink``, ``os.remove``, ``os.mkdir``,
``os.rmdir``, ``os.close``, each also relative to a directory descriptor (``dir_fd=``,
``src_dir_fd=``, ``dst_dir_fd=``), and ``open()``/``io.open`` file objects' ``write``,
``writelines``, ``flush`` and ``close``), without knowing anything of the store's internals. It needs Linux's ``/proc/self/fd`` (it reads what a
descriptor really holds on disk through it).

What it records is an operation log in the vocabulary of the ALICE study (Pillai et al., OSDI
2014): a name created, renamed or unlinked in a directory, a directory made or removed, a file's bytes written or truncated,
a file fsynced, a directory fsynced. Data is recorded by what reached the file, not by the calls
that put it there: before each operation the tap compares every open file's bytes on disk with
its model and logs the difference as a write, so buffered ``open()`` writes that were never
flushed are (rightly) not on disk when an fsync comes. :func:`crash_states` then lists the
states a power cut could leave; :class:`FileSystemTap` with ``fail_at=k`` instead makes the
k-th *mutating* operation (an open for writing or of a directory, a write, an fsync, a
truncation, a rename, an unlink, a file object's write or flush) raise ``OSError(EIO)`` without
performing it. Closing, reading, making and removing a directory are never failed.

Limits, stated so a store author knows what the model does not see: hard links, a directory
renamed, ``mmap`` and C code (sqlite3) are invisible; a directory made some other way than
``os.mkdir`` is taken as there from the start; file modes are kept; the state before the commit
is taken as durable.
"""

from __future__ import annotations

import builtins
import errno
import io
import itertools
import os
import random
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

_REAL_OS = {name: getattr(os, name) for name in (
    "open", "write", "pwrite", "fsync", "fdatasync", "ftruncate", "rename", "replace", "unlink", "remove", "close",
    "mkdir", "rmdir",
)}
_REAL_OPEN = builtins.open
_PROC_FD = "/proc/self/fd"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
DIRECTORY = -1
"""The node of a directory in a crash state's ``files`` (its bytes are empty)."""


def available() -> bool:
    """Whether the tap can run here (it reads descriptors through ``/proc/self/fd``)."""
    return os.path.isdir(_PROC_FD)


@attrs.frozen
class Operation:
    """One step of the log. ``kind`` is ``create``, ``write``, ``truncate``, ``fsync``, ``rename``,
    ``unlink``, ``mkdir``, ``rmdir`` or ``dirsync``; ``node`` the tap's id of the file; paths are
    relative to the root."""

    kind: str
    path: str = ""
    node: int = -1
    offset: int = 0
    data: bytes = b""
    target: str = ""

    def directory(self) -> str:
        """The directory whose fsync makes this name operation durable (a rename's target's)."""
        return os.path.dirname(self.target if self.kind == "rename" else self.path)

    def describe(self) -> str:
        if self.kind == "write":
            return f"write node {self.node} at {self.offset}: {len(self.data)} bytes"
        if self.kind == "rename":
            return f"rename {self.path} -> {self.target}"
        if self.kind in ("fsync", "truncate"):
            return f"{self.kind} node {self.node}" + (f" to {self.offset}" if self.kind == "truncate" else "")
        return f"{self.kind} {self.path or '.'}"


@attrs.define
class _Tracked:
    node: int
    reader: int  # an O_RDONLY descriptor on the same file, through /proc/self/fd
    directory: str | None = None  # relative path, for a directory descriptor


@attrs.define
class Snapshot:
    """The files under a root before a commit: names to nodes, nodes' bytes and modes, and the directories."""

    names: dict[str, int] = attrs.Factory(dict)
    content: dict[int, bytes] = attrs.Factory(dict)
    modes: dict[int, int] = attrs.Factory(dict)
    folders: set[str] = attrs.Factory(set)


class FileSystemTap:
    """While active (a context manager), logs the file operations under ``root`` in :attr:`operations`.

    ``fail_at=k`` fails the k-th mutating operation (0-based) with ``OSError(EIO)`` instead;
    ``fail_from=k`` fails the k-th and every later one (a disk gone bad: the clean-up fails too);
    :attr:`mutations` counts them either way. Patching is process-wide: use one tap at a time.
    """

    def __init__(self, root: str | os.PathLike[str], *, fail_at: int | None = None, fail_from: int | None = None) -> None:
        self.root = os.path.realpath(root)
        self.fail_at = fail_at
        self.fail_from = fail_from
        self.mutations = 0
        self.failed: str | None = None
        self.operations: list[Operation] = []
        self.initial = Snapshot()
        self._inodes: dict[tuple[int, int], int] = {}
        self._next_node = 0
        self._model: dict[int, bytes] = {}
        self._modes: dict[int, int] = {}
        self._fds: dict[int, _Tracked] = {}
        self._readers: list[int] = []
        self._closed: list[_Tracked] = []
        self._lock = threading.RLock()
        self._made: set[str] = set()
        self.directories: dict[str, int] = {}
        """Each directory's permission bits (every one the store had before, made, or has at the end)."""

    # ------------------------------------------------------------------ paths and nodes

    def _relative(self, path: Any, dir_fd: int | None = None) -> str | None:
        """``path`` (relative to ``dir_fd`` when given) relative to the root, or None when it lies outside."""
        if isinstance(path, int) or path is None:
            return None
        text = os.fsdecode(os.fspath(path))
        if dir_fd is not None and not os.path.isabs(text):
            try:
                text = os.path.join(os.readlink(f"{_PROC_FD}/{dir_fd}"), text)
            except OSError:
                return None
        absolute = os.path.abspath(text)
        parent = os.path.realpath(os.path.dirname(absolute))
        full = os.path.join(parent, os.path.basename(absolute))
        if full == self.root:
            return "."
        if not full.startswith(self.root + os.sep):
            return None
        return os.path.relpath(full, self.root)

    def _node_of(self, info: os.stat_result, *, fresh: bool = False) -> int:
        """The tap's id of a file; ``fresh`` for a file just created, whose inode number may be an unlinked one's."""
        key = (info.st_dev, info.st_ino)
        if fresh or key not in self._inodes:
            self._inodes[key] = self._next_node
            self._next_node += 1
        return self._inodes[key]

    def _take_snapshot(self) -> None:
        for folder, _, files in os.walk(self.root):
            relative = os.path.relpath(folder, self.root)
            if relative != ".":
                self.initial.folders.add(relative)
                self.directories[relative] = stat.S_IMODE(os.lstat(folder).st_mode)
            for name in files:
                path = os.path.join(folder, name)
                info = os.lstat(path)
                if not stat.S_ISREG(info.st_mode):
                    continue
                node = self._node_of(info)
                with _REAL_OPEN(path, "rb") as handle:
                    data = handle.read()
                rel = os.path.normpath(os.path.join(relative, name))
                self.initial.names[rel] = node
                self.initial.content[node] = data
                self.initial.modes[node] = stat.S_IMODE(info.st_mode)
        self._model = dict(self.initial.content)
        self._modes = dict(self.initial.modes)

    def _track(self, fd: int, *, created: bool = False) -> _Tracked | None:
        """The tracked state of ``fd``, starting to track it when it names something under the root."""
        known = self._fds.get(fd)
        if known is not None and (known.node < 0 or os.fstat(fd).st_ino == os.fstat(known.reader).st_ino):
            return known
        try:
            where = os.readlink(f"{_PROC_FD}/{fd}")
        except OSError:
            return None
        relative = self._relative(where)
        if relative is None:
            return None
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            tracked = _Tracked(-1, -1, relative)
        elif stat.S_ISREG(info.st_mode):
            node = self._node_of(info, fresh=created)
            reader = _REAL_OS["open"](f"{_PROC_FD}/{fd}", os.O_RDONLY | os.O_CLOEXEC)
            self._readers.append(reader)
            self._modes.setdefault(node, stat.S_IMODE(info.st_mode))
            self._model.setdefault(node, b"")
            tracked = _Tracked(node, reader)
        else:
            return None
        self._fds[fd] = tracked
        return tracked

    def _observe(self) -> None:
        """Log, as truncations and writes, how each tracked file's bytes on disk differ from its model."""
        seen: set[int] = set()
        for tracked in list(self._fds.values()) + [t for t in self._closed]:
            if tracked.node < 0 or tracked.node in seen:
                continue
            seen.add(tracked.node)
            size = os.fstat(tracked.reader).st_size
            now = os.pread(tracked.reader, size, 0) if size else b""
            before = self._model.get(tracked.node, b"")
            if now == before:
                continue
            if len(now) < len(before):
                self.operations.append(Operation("truncate", node=tracked.node, offset=len(now)))
                before = before[: len(now)]
            first = next((i for i, (a, b) in enumerate(zip(before, now, strict=False)) if a != b), len(before))
            if first < len(now):
                self.operations.append(Operation("write", node=tracked.node, offset=first, data=now[first:]))
            self._model[tracked.node] = now
        self._closed.clear()

    def _mutation(self, what: str) -> None:
        """Count a mutating operation; raise the injected failure when it is the chosen one."""
        n, self.mutations = self.mutations, self.mutations + 1
        if n == self.fail_at or (self.fail_from is not None and n >= self.fail_from):
            self.failed = self.failed or what
            raise OSError(errno.EIO, f"Input/output error (injected by the durability contract at file operation {n}: {what})")

    # ------------------------------------------------------------------ the interposed operations

    def _open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        relative = self._relative(path, dir_fd)
        if relative is None:
            return int(_REAL_OS["open"](path, flags, mode, dir_fd=dir_fd))
        with self._lock:
            full = os.path.join(self.root, relative)
            existed = os.path.lexists(full)
            if flags & _WRITE_FLAGS or flags & os.O_DIRECTORY or os.path.isdir(full):
                self._mutation(f"open {relative}")
            self._observe()
            fd = int(_REAL_OS["open"](path, flags, mode, dir_fd=dir_fd))
            tracked = self._track(fd, created=not existed)
            if tracked is not None and tracked.node >= 0:
                if not existed:
                    self._model[tracked.node] = b""
                    self.operations.append(Operation("create", path=relative, node=tracked.node))
                self._observe()
            return fd

    def _fd_mutation(self, name: str, fd: int, call: Any, *args: Any) -> Any:
        with self._lock:
            tracked = self._track(fd)
            if tracked is None:
                return call(fd, *args)
            self._mutation(f"{name} {tracked.directory or f'node {tracked.node}'}")
            result = call(fd, *args)
            if name in ("fsync", "fdatasync"):
                self._observe()
                if tracked.directory is not None:
                    self.operations.append(Operation("dirsync", path=tracked.directory))
                else:
                    self.operations.append(Operation("fsync", node=tracked.node))
            return result

    def _write(self, fd: int, data: Any) -> int:
        return int(self._fd_mutation("write", fd, _REAL_OS["write"], data))

    def _pwrite(self, fd: int, data: Any, offset: int) -> int:
        return int(self._fd_mutation("pwrite", fd, _REAL_OS["pwrite"], data, offset))

    def _fsync(self, fd: Any) -> None:
        fd = fd if isinstance(fd, int) else fd.fileno()
        self._fd_mutation("fsync", fd, _REAL_OS["fsync"])

    def _fdatasync(self, fd: Any) -> None:
        fd = fd if isinstance(fd, int) else fd.fileno()
        self._fd_mutation("fdatasync", fd, _REAL_OS["fdatasync"])

    def _ftruncate(self, fd: int, length: int) -> None:
        self._fd_mutation("ftruncate", fd, _REAL_OS["ftruncate"], length)

    def _close(self, fd: int) -> None:
        with self._lock:
            tracked = self._fds.pop(fd, None)
            if tracked is not None and tracked.node >= 0:
                self._closed.append(tracked)
                self._observe()
            _REAL_OS["close"](fd)

    def _rename(self, kind: str, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None:
        source, target = self._relative(src, src_dir_fd), self._relative(dst, dst_dir_fd)
        if source is None or target is None:
            _REAL_OS[kind](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            return
        with self._lock:
            self._mutation(f"{kind} {source} -> {target}")
            self._observe()
            node = self._node_of(os.lstat(src, dir_fd=src_dir_fd))
            _REAL_OS[kind](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            self.operations.append(Operation("rename", path=source, target=target, node=node))

    def _unlink(self, kind: str, path: Any, *, dir_fd: int | None = None) -> None:
        relative = self._relative(path, dir_fd)
        if relative is None:
            _REAL_OS[kind](path, dir_fd=dir_fd)
            return
        with self._lock:
            self._mutation(f"{kind} {relative}")
            self._observe()
            _REAL_OS[kind](path, dir_fd=dir_fd)
            self.operations.append(Operation("unlink", path=relative))

    def _mkdir(self, path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        relative = self._relative(path, dir_fd)
        if relative in (None, ".") or os.path.lexists(os.path.join(self.root, relative)):  # EEXIST changes nothing
            _REAL_OS["mkdir"](path, mode, dir_fd=dir_fd)
            return
        with self._lock:  # recorded, never failed (``fail_at`` counts only what it did before directories were modelled)
            _REAL_OS["mkdir"](path, mode, dir_fd=dir_fd)
            self.directories[relative] = stat.S_IMODE(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode)
            self._made.add(relative)
            self.operations.append(Operation("mkdir", path=relative))

    def _rmdir(self, path: Any, *, dir_fd: int | None = None) -> None:
        relative = self._relative(path, dir_fd)
        if relative is None:
            _REAL_OS["rmdir"](path, dir_fd=dir_fd)
            return
        with self._lock:
            _REAL_OS["rmdir"](path, dir_fd=dir_fd)
            self.operations.append(Operation("rmdir", path=relative))

    def _open_file(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        relative = self._relative(file) if not isinstance(file, int) else None
        if relative is None:
            return _REAL_OPEN(file, mode, *args, **kwargs)
        writing = any(c in mode for c in "wax+")
        with self._lock:
            existed = os.path.lexists(file)
            if writing:
                self._mutation(f"open {relative}")
            self._observe()
            handle = _REAL_OPEN(file, mode, *args, **kwargs)
            if not writing:
                return handle
            tracked = self._track(handle.fileno(), created=not existed)
            if tracked is not None and not existed:
                self._model[tracked.node] = b""
                self.operations.append(Operation("create", path=relative, node=tracked.node))
            self._observe()
            return _TappedFile(handle, self, relative)

    # ------------------------------------------------------------------ activation

    @property
    def modes(self) -> dict[int, int]:
        """Each file node's permission bits."""
        return dict(self._modes)

    def __enter__(self) -> FileSystemTap:
        self._take_snapshot()
        os.open = self._open
        os.write = self._write
        os.pwrite = self._pwrite
        os.fsync = self._fsync
        os.fdatasync = self._fdatasync
        os.ftruncate = self._ftruncate
        os.close = self._close
        os.rename = lambda src, dst, **kw: self._rename("rename", src, dst, **kw)
        os.replace = lambda src, dst, **kw: self._rename("replace", src, dst, **kw)
        os.unlink = lambda path, **kw: self._unlink("unlink", path, **kw)
        os.remove = lambda path, **kw: self._unlink("remove", path, **kw)
        os.mkdir = self._mkdir
        os.rmdir = self._rmdir
        builtins.open = io.open = self._open_file
        return self

    def __exit__(self, *exc: object) -> None:
        for name, real in _REAL_OS.items():
            setattr(os, name, real)
        builtins.open = io.open = _REAL_OPEN
        with self._lock:
            self._observe()
            for reader in self._readers:
                _REAL_OS["close"](reader)
            self._readers.clear()
            self._fds.clear()
        for folder, _, _ in os.walk(self.root):
            relative = os.path.relpath(folder, self.root)
            self.directories[relative] = stat.S_IMODE(os.lstat(folder).st_mode)
            if relative != "." and relative not in self._made:
                self.initial.folders.add(relative)  # made some other way: taken as there from the start


class _TappedFile:
    """An ``open()`` file object whose writes and flushes count as (failable) mutating operations."""

    def __init__(self, handle: Any, tap: FileSystemTap, relative: str) -> None:
        self._handle = handle
        self._tap = tap
        self._relative = relative
        self._fd = handle.fileno()

    def _mutating(self, name: str, *args: Any) -> Any:
        with self._tap._lock:
            self._tap._mutation(f"{name} {self._relative}")
            return getattr(self._handle, name)(*args)

    def write(self, data: Any) -> Any:
        return self._mutating("write", data)

    def writelines(self, lines: Any) -> Any:
        return self._mutating("writelines", lines)

    def flush(self) -> Any:
        return self._mutating("flush")

    def close(self) -> None:
        with self._tap._lock:
            tracked = self._tap._fds.pop(self._fd, None)
            self._handle.close()
            if tracked is not None:
                self._tap._closed.append(tracked)
                self._tap._observe()

    def __enter__(self) -> _TappedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._handle)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


# --------------------------------------------------------------------------- crash states


def crash_states(initial: Snapshot, operations: list[Operation], *, per_prefix: int = 256,
                 rng: random.Random | None = None) -> Iterator[tuple[int, dict[str, tuple[bytes, int]]]]:
    """Yield ``(k, files)`` for the states a power cut after ``operations[:k]`` could leave.

    ``files`` maps each relative path to (bytes, node), a directory to ``(b"", DIRECTORY)``.
    Durable: a write or truncation followed (within the prefix) by an fsync of its file, and a
    create, rename, unlink, mkdir or rmdir followed by an fsync of its directory (the parent's,
    for a directory made or removed). A file or directory whose directory is gone is gone too. Anything else may be lost, independently per operation (so a later
    operation may persist while an earlier one does not), and a kept write may persist only its
    first half. Beyond ``per_prefix`` combinations of a prefix, a seeded sample of them is taken
    (always including "everything kept" and "everything optional lost").
    """
    rng = rng or random.Random(0)
    for k in range(len(operations) + 1):
        prefix = operations[:k]
        synced: dict[int, int] = {}
        dirsynced: dict[str, int] = {}
        for i, op in enumerate(prefix):
            if op.kind == "fsync":
                synced[op.node] = i
            elif op.kind == "dirsync":
                dirsynced[os.path.normpath(op.path)] = i
        optional = [
            i for i, op in enumerate(prefix)
            if (op.kind in ("write", "truncate") and synced.get(op.node, -1) < i)
            or (op.kind in ("create", "rename", "unlink", "mkdir", "rmdir") and dirsynced.get(os.path.normpath(op.directory() or "."), -1) < i)
        ]
        options = [("keep", "drop", "half") if prefix[i].kind == "write" else ("keep", "drop") for i in optional]
        total = 1
        for choice in options:
            total *= len(choice)
        if total <= per_prefix:
            combinations: Iterator[tuple[str, ...]] | list[tuple[str, ...]] = itertools.product(*options)
        else:
            combinations = [tuple("keep" for _ in options), tuple("drop" for _ in options)]
            combinations += [tuple(rng.choice(o) for o in options) for _ in range(per_prefix - 2)]
        for combination in combinations:
            chosen = dict(zip(optional, combination, strict=True))
            yield k, _apply(initial, prefix, chosen)


def _apply(initial: Snapshot, prefix: list[Operation], chosen: dict[int, str]) -> dict[str, tuple[bytes, int]]:
    names = dict(initial.names)
    folders = set(initial.folders)
    data = {node: bytearray(content) for node, content in initial.content.items()}
    for i, op in enumerate(prefix):
        mode = chosen.get(i, "keep")
        if mode == "drop" or op.kind in ("fsync", "dirsync"):
            continue
        if op.kind == "create":
            names[op.path] = op.node
            data.setdefault(op.node, bytearray())
        elif op.kind == "truncate":
            del data.setdefault(op.node, bytearray())[op.offset:]
        elif op.kind == "write":
            payload = op.data[: len(op.data) // 2] if mode == "half" else op.data
            buffer = data.setdefault(op.node, bytearray())
            if len(buffer) < op.offset:
                buffer.extend(bytes(op.offset - len(buffer)))
            buffer[op.offset: op.offset + len(payload)] = payload
        elif op.kind == "rename":
            if names.get(op.path) == op.node:
                del names[op.path]
            names[op.target] = op.node
        elif op.kind == "unlink":
            names.pop(op.path, None)
        elif op.kind == "mkdir":
            folders.add(op.path)
        elif op.kind == "rmdir":
            below = op.path + os.sep
            folders = {f for f in folders if f != op.path and not f.startswith(below)}
            names = {n: node for n, node in names.items() if not n.startswith(below)}

    def reachable(path: str) -> bool:
        parent = os.path.dirname(path)
        return not parent or (parent in folders and reachable(parent))

    files = {name: (bytes(data.get(node, b"")), node) for name, node in names.items() if reachable(name)}
    files.update({folder: (b"", DIRECTORY) for folder in folders if reachable(folder)})
    return files


def materialise(files: dict[str, tuple[bytes, int]], modes: dict[int, int], directories: dict[str, int], root: Path) -> Path:
    """Write a crash state under ``root``: its directories (with their modes from ``directories``), then its files."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(directories.get(".", 0o700))
    for relative in sorted(name for name, (_, node) in files.items() if node == DIRECTORY):
        path = root / relative
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(directories.get(relative, 0o700))
    for relative, (content, node) in files.items():
        if node == DIRECTORY:
            continue
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _REAL_OS["open"](path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, modes.get(node, 0o600))
        try:
            _REAL_OS["write"](fd, content)
        finally:
            _REAL_OS["close"](fd)
    return root
