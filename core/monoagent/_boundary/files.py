"""Reading files that someone else may control: regular files only, a byte cap checked first.

Every file monoagent reads whole (bootstrap files, skills, config, scripts, records) comes through
:func:`read_regular_file`. It opens without following a final symlink's target blindly (the path
is opened, then the opened file is checked), without blocking on a FIFO (``O_NONBLOCK`` at open,
cleared after the check), refuses anything that is not a regular file (``/dev/zero``, a FIFO, a
socket, a directory) and refuses a file larger than the caller's cap *before* reading a byte.
It then reads at most ``max_bytes + 1`` bytes, so a file that grows while it is read is refused
too instead of being read without end.
"""

from __future__ import annotations

import errno
import os
import stat

from monoagent._kernel.errors import MonoagentError

__all__ = ["FileTooLarge", "NotRegularFile", "UnsafeFileError", "read_open_file", "read_regular_file", "read_regular_text"]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CHUNK = 1 << 20


class UnsafeFileError(MonoagentError, OSError):
    """A file was refused before it was read. Also an ``OSError``, so callers that already treat
    an unreadable file as a diagnostic keep doing so; ``reason`` is a short machine-readable code.
    """

    reason = "unsafe_file"
    strerror: str  # always the message (an OSError's may be None)

    def __init__(self, message: str, path: str | os.PathLike[str]) -> None:
        MonoagentError.__init__(self, message)
        self.path = os.fspath(path)
        self.strerror: str = message
        self.errno = errno.EINVAL

    def __str__(self) -> str:
        return self.strerror


class NotRegularFile(UnsafeFileError):
    """The path names a FIFO, a device, a socket or a directory, not a regular file."""

    reason = "not_regular_file"


class FileTooLarge(UnsafeFileError):
    """The file is larger than the cap its reader allows."""

    reason = "file_too_large"

    def __init__(self, message: str, path: str | os.PathLike[str], size: int, limit: int) -> None:
        super().__init__(message, path)
        self.size: int = size
        self.limit: int = limit


def private_directory_problem(path: str | os.PathLike[str], what: str, info: os.stat_result | None = None) -> str | None:
    """Why ``path`` is not a private directory of this user, or None when it is.

    Private: a real directory (by ``lstat``: a symlink is refused, not followed), owned by the
    effective user, with no group or other permission bits. Stores that keep conversations,
    transcripts or run files refuse anything else, since whoever else can write there can plant
    or swap what they read. The reason names ``what`` and says how to fix it. ``info`` is the
    directory's status when the caller has it already (``fstat`` of a descriptor it opened).
    """
    path = os.fspath(path)
    if info is None:
        info = os.lstat(path)
    uid = os.geteuid()
    if not stat.S_ISDIR(info.st_mode):
        return f"{what} {path} is a symlink or not a directory; refusing it (it must be a real directory)"
    if info.st_uid != uid:
        return f"{what} {path} belongs to uid {info.st_uid}, not to this user ({uid}); refusing it"
    if stat.S_IMODE(info.st_mode) & 0o077:
        return f"{what} {path} has mode {stat.S_IMODE(info.st_mode):04o}; it must be owner-only (0700): chmod 700 {path}"
    return None


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_regular_file(path: str | os.PathLike[str], max_bytes: int, *, what: str = "file") -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``max_bytes`` bytes.

    ``what`` names the file for the message (``"context.identityPath"``, ``"SKILL.md"``).
    Raises :class:`NotRegularFile` or :class:`FileTooLarge` (both ``OSError``), or the
    ``OSError`` of the open itself (``FileNotFoundError``, ``PermissionError``).
    """
    fd = os.open(path, os.O_RDONLY | _O_NONBLOCK | _O_CLOEXEC)
    try:
        return read_open_file(fd, max_bytes, what=what, path=path)
    finally:
        os.close(fd)


def read_open_file(fd: int, max_bytes: int, *, what: str = "file", path: str | os.PathLike[str] = "") -> bytes:
    """:func:`read_regular_file` on a descriptor the caller opened (``O_NONBLOCK``) and closes.

    For readers that check more than the type on the open file first (its owner, or its inode
    as a cache key), so that the file checked and the file read are the same one. Reads from
    the descriptor's current offset; ``path`` only names the file in messages.
    """
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise NotRegularFile(f"{what} {os.fspath(path)} is {_kind(info.st_mode)}, not a regular file; refused", path)
    if info.st_size > max_bytes:
        raise FileTooLarge(
            f"{what} {os.fspath(path)} is {info.st_size:,} bytes, over the {max_bytes:,}-byte limit; refused",
            path,
            info.st_size,
            max_bytes,
        )
    if _O_NONBLOCK:
        os.set_blocking(fd, True)
    chunks: list[bytes] = []
    total = 0
    while total <= max_bytes:
        chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > max_bytes:
        raise FileTooLarge(
            f"{what} {os.fspath(path)} grew past the {max_bytes:,}-byte limit while it was read; refused",
            path,
            total,
            max_bytes,
        )
    return b"".join(chunks)


def read_regular_text(path: str | os.PathLike[str], max_bytes: int, *, what: str = "file") -> str:
    """:func:`read_regular_file` decoded as UTF-8; bytes that are not UTF-8 become U+FFFD."""
    return read_regular_file(path, max_bytes, what=what).decode("utf-8", "replace")


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Flush ``directory``'s entries (a file created, renamed or removed in it) to disk."""
    fd = os.open(directory, os.O_RDONLY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file_durably(target: str | os.PathLike[str], data: bytes, *, stage_prefix: str) -> None:
    """Replace ``target`` with ``data`` atomically and durably: a reader sees the old bytes or the new.

    The bytes go to a new private (0600) stage file next to ``target`` (named ``stage_prefix`` plus
    random hex, ``O_EXCL | O_NOFOLLOW`` so nothing planted there is written through), are fsynced,
    renamed over ``target``, and the directory is fsynced. A failure before the rename removes the
    stage and leaves ``target`` as it was.
    """
    directory = os.path.dirname(os.fspath(target)) or "."
    stage = os.path.join(directory, f"{stage_prefix}{os.urandom(6).hex()}.tmp")
    fd = os.open(stage, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(stage)
        except OSError:
            pass
        raise
    os.close(fd)
    os.replace(stage, target)
    fsync_directory(directory)

