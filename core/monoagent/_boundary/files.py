"""Reading files that someone else may control: regular files only, a byte cap checked first.

Every file monoagent reads whole (bootstrap files, skills, config, scripts, records) comes through
:func:`read_regular_file`. It opens without following a final symlink's target blindly (the path
is opened, then the opened file is checked), without blocking on a FIFO (``O_NONBLOCK`` at open,
cleared after the check), refuses anything that is not a regular file (``/dev/zero``, a FIFO, a
socket, a directory) and refuses a file larger than the caller's cap *before* reading a byte.
It then reads at most ``max_bytes + 1`` bytes, so a file that grows while it is read is refused
too instead of being read without end.

Every file monoagent writes under a configured directory is opened through
:func:`open_directory_under` / :func:`open_file_under` (and :func:`replace_file_durably` with a
``root``): **the root** (the directory the operator configured: the agent home, ``history.dir``,
the config file's folder for a ``file`` notify destination) is opened as it is, so it may be
reached through a symlink the operator set up; **below it, every component** is opened relative
to its parent's descriptor with ``O_NOFOLLOW``, so a directory swapped for a symlink is refused
(:class:`SymlinkedPath`) instead of followed, wherever it is on the way, not only the last name.
"""

from __future__ import annotations

import errno
import os
import stat

from monoagent._kernel.errors import MonoagentError

__all__ = [
    "FileTooLarge",
    "NotRegularFile",
    "SymlinkedPath",
    "UnsafeFileError",
    "open_directory_under",
    "open_file_under",
    "read_open_file",
    "read_regular_file",
    "read_regular_text",
]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC
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


class SymlinkedPath(UnsafeFileError):
    """A component below a configured root is a symlink: refused, not followed.

    ``path`` is the whole path that was to be opened, ``component`` the part of it that was refused.
    """

    reason = "symlinked_path"

    def __init__(self, message: str, path: str | os.PathLike[str], component: str) -> None:
        super().__init__(message, path)
        self.component: str = component


def _components(relative: str | os.PathLike[str]) -> list[str]:
    raw = os.fspath(relative)
    parts = [part for part in raw.split(os.sep) if part not in ("", ".")]
    if os.path.isabs(raw) or ".." in parts or "\x00" in raw:
        raise ValueError(f"{raw!r} is not a relative path below its root (absolute, '..' or NUL are not allowed)")
    return parts


def _refusal(exc: OSError, parent_fd: int, name: str, component: str, full: str, root: str, what: str) -> OSError:
    """The error for a component that could not be opened: :class:`SymlinkedPath` for a symlink,
    ``NotADirectoryError`` naming it for something else where a directory is needed, else ``exc``."""
    if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return exc
    try:
        info = os.lstat(name, dir_fd=parent_fd)
    except OSError:
        return exc
    if stat.S_ISLNK(info.st_mode):
        return SymlinkedPath(
            f"{what} {full}: {component} is a symlink; refused: below {root} every directory is opened without "
            f"following a symlink (move it away, or configure the real directory)",
            full,
            component,
        )
    if not stat.S_ISDIR(info.st_mode):
        kind = "a regular file" if stat.S_ISREG(info.st_mode) else _kind(info.st_mode)
        return NotADirectoryError(errno.ENOTDIR, f"{what} {full}: {component} is {kind}, not a directory")
    return exc


def open_directory_under(
    root: str | os.PathLike[str], relative: str | os.PathLike[str] = "", *, create: bool = False, mode: int = 0o700,
    what: str = "directory",
) -> int:
    """A descriptor (``O_RDONLY | O_DIRECTORY``, close-on-exec) of ``root/relative``; the caller closes it.

    ``root`` is opened as it is (a symlink the operator set up is followed); each component of
    ``relative`` is opened relative to the one before with ``O_NOFOLLOW``, so none is followed
    through a symlink. ``create``: missing components (and ``root``) are created with ``mode``.
    Raises :class:`SymlinkedPath` naming the path and the component for a symlink on the way,
    ``NotADirectoryError`` naming them for a file where a directory is needed, ``ValueError`` for a ``relative`` that is absolute or holds ``..``,
    else the ``OSError`` of the open (``FileNotFoundError`` without ``create``).
    """
    root = os.fspath(root)
    parts = _components(relative)
    return _walk(root, parts, create, mode, what, os.path.join(root, *parts))


def _walk(root: str, parts: list[str], create: bool, mode: int, what: str, full: str) -> int:
    if create:
        os.makedirs(root, mode=mode, exist_ok=True)
    fd = os.open(root, _DIR_FLAGS)
    walked = root
    try:
        for name in parts:
            walked = os.path.join(walked, name)
            try:
                try:
                    child = os.open(name, _DIR_FLAGS | _O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(name, mode, dir_fd=fd)
                    except FileExistsError:
                        pass
                    child = os.open(name, _DIR_FLAGS | _O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise _refusal(exc, fd, name, walked, full, root, what) from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file_under(
    root: str | os.PathLike[str], relative: str | os.PathLike[str], flags: int, mode: int = 0o600, *,
    create_directories: bool = False, directory_mode: int = 0o700, what: str = "file",
) -> int:
    """``os.open`` of ``root/relative`` with ``flags | O_NOFOLLOW | O_CLOEXEC``, through :func:`open_directory_under`.

    No component below ``root``, the file's own name included, is followed through a symlink;
    ``create_directories`` creates missing directories (``directory_mode``, 0700 unless told) on the way. Raises
    :class:`SymlinkedPath` for a symlink on the way or at the file's name.
    """
    parts = _components(relative)
    if not parts:
        raise ValueError(f"{os.fspath(relative)!r} names no file below {os.fspath(root)}")
    full = os.path.join(os.fspath(root), *parts)
    parent = _walk(os.fspath(root), parts[:-1], create_directories, directory_mode, what, full)
    try:
        try:
            return os.open(parts[-1], flags | _O_NOFOLLOW | _O_CLOEXEC, mode, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SymlinkedPath(f"{what} {full} is a symlink; refused (a file is never written through a symlink)",
                                    full, full) from None
            raise
    finally:
        os.close(parent)


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


def private_directory_under(
    root: str | os.PathLike[str], relative: str | os.PathLike[str] = "", *, create: bool = False, mode: int = 0o700,
    what: str = "directory",
) -> str | None:
    """Walk to ``root/relative`` as :func:`open_directory_under` does (``create``, ``mode``), then say
    why the directory reached is not private (:func:`private_directory_problem`), or None when it is.

    The check is of the directory the walk opened (its ``fstat``), not of a path looked up again.
    Raises what :func:`open_directory_under` raises (:class:`SymlinkedPath` for a symlink on the way).
    """
    fd = open_directory_under(root, relative, create=create, mode=mode, what=what)
    try:
        return private_directory_problem(os.path.join(os.fspath(root), *_components(relative)), what, os.fstat(fd))
    finally:
        os.close(fd)


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


def replace_file_durably(
    target: str | os.PathLike[str], data: bytes, *, stage_prefix: str, root: str | os.PathLike[str] | None = None,
) -> None:
    """Replace ``target`` with ``data`` atomically and durably: a reader sees the old bytes or the new.

    The bytes go to a new private (0600) stage file next to ``target`` (named ``stage_prefix`` plus
    random hex, ``O_EXCL | O_NOFOLLOW`` so nothing planted there is written through), are fsynced,
    renamed over ``target``, and the directory is fsynced. A failure before the rename removes the
    stage and leaves ``target`` as it was. With ``root`` (a directory ``target`` is below), the
    directory is reached by :func:`open_directory_under`, creating what is missing (0700): no
    component below ``root`` is followed through a symlink (:class:`SymlinkedPath`), and the stage,
    the rename and the fsync all happen in the directory that was checked.
    """
    target = os.fspath(target)
    directory, name = os.path.split(target)
    if root is None:
        dir_fd = os.open(directory or ".", _DIR_FLAGS)
    else:
        relative = os.path.relpath(directory or ".", os.fspath(root))
        dir_fd = open_directory_under(root, "" if relative == "." else relative, create=True, what="directory")
    try:
        stage = f"{stage_prefix}{os.urandom(6).hex()}.tmp"
        fd = os.open(stage, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            os.close(fd)
            fd = -1
            os.replace(stage, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            try:
                os.unlink(stage, dir_fd=dir_fd)
            except OSError:
                pass
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
