"""The bundled notifiers: ``file`` appends JSON lines, ``webhook`` POSTs signed JSON with retries.

Both deliver the same record (:func:`notification_record`): ``time`` (ISO-8601 UTC), ``channel``,
``source``, ``destination``, ``conversation_id``, ``run_id`` and ``text`` (the final answer,
verbatim). Each validates its options when it is built (``monoagent serve`` and ``serve --check``
build every destination a channel names), raising :class:`~monoagent._kernel.errors.ConfigError`
that names the option and what is allowed; an option it does not know is refused too, so a
misspelt key is not silently ignored.

:class:`FileNotifier` appends with ``O_APPEND`` under an exclusive ``flock``, one ``write`` per
line and an ``fsync``, so writers in several threads or processes never interleave and a line
that was reported delivered is on disk. It never follows a symlink, neither at the file's name
nor at a directory on the way below its root (the config file's folder for a path inside it,
else the user's home directory for a path inside it, else ``/``; :func:`monoagent.open_file_under`), and refuses anything
but a regular file; a new file is created 0600.

:class:`WebhookNotifier` retries connection errors, timeouts, 429 and 5xx with exponential
backoff and jitter (tenacity), honouring ``Retry-After`` up to :data:`RETRY_AFTER_CAP_S`; any
other answer that is not 2xx (a 4xx, a redirect) is final. Every attempt is signed afresh (a
new timestamp) and carries ``Idempotency-Key: <run id>``, so a receiver can drop a duplicate
delivery. The receiver's answer body is never read (only its status and ``Retry-After``), so a
hostile receiver cannot make the notifier hold a large answer. Redirects are not followed. The
wait between attempts and the clock are injectable for tests.
"""

from __future__ import annotations

import asyncio
import email.utils
import errno
import fcntl
import json
import os
import stat
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from monoagent import ConfigError, Notification, NotifyFailed, SymlinkedPath, open_directory_under, open_file_under
from monoagent_plugins.serving.signatures import SIGNATURE_HEADER, sign

IDEMPOTENCY_HEADER = "Idempotency-Key"
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_TIMEOUT_MS = 10_000
RETRY_AFTER_CAP_S = 60.0
"""The longest a receiver's ``Retry-After`` makes the webhook notifier wait before its next attempt."""
BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0
MAX_URL_CHARS = 2048


def notification_record(notification: Notification) -> dict[str, Any]:
    """The JSON object both bundled notifiers deliver for ``notification``."""
    return {
        "time": datetime.fromtimestamp(notification.created_at, UTC).isoformat().replace("+00:00", "Z"),
        "channel": notification.channel,
        "source": notification.source,
        "destination": notification.destination,
        "conversation_id": notification.conversation_id,
        "run_id": notification.run_id,
        "text": notification.text,
    }


def notification_json(notification: Notification) -> bytes:
    """:func:`notification_record` as one line of UTF-8 JSON (no newline inside: JSON escapes them)."""
    text = json.dumps(notification_record(notification), ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "replace")


def _refuse_unknown(kind: str, options: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigError(f"{', '.join(unknown)}: not an option of a {kind!r} destination; allowed: {', '.join(allowed)}")


def _whole_number(options: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = options.get(key, default)
    if type(value) is not int or not low <= value <= high:
        raise ConfigError(f"{key}: {value!r} is not allowed; allowed: a whole number from {low} to {high}")
    return value


# ============================================================================ file


class FileNotifier:
    """Appends each notification as one JSON line to a file (``path``)."""

    name = "file"

    def __init__(self, path: Path, root: Path | None = None) -> None:
        self.path = Path(os.path.normpath(path))
        self.root = self.path.parent if root is None else Path(os.path.normpath(root))
        """Where the walk starts: opened as it is (a symlink the operator set up is followed); below it, nothing is."""
        self.relative = os.path.relpath(self.path, self.root)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], resolve: Callable[[str], Path]) -> FileNotifier:
        """Validate ``options`` (``path`` only); relative paths are relative to the config file's directory.

        The root of the path (see the module docstring) is the config file's directory when the
        path is inside it, else the home directory when it is inside that, else ``/``.
        """
        _refuse_unknown("file", options, ("path",))
        raw = options.get("path")
        if not isinstance(raw, str) or not raw.strip() or "\x00" in raw:
            raise ConfigError(f"path: {raw!r} is not allowed; allowed: the path of the JSONL file answers are appended to")
        path = Path(os.path.normpath(resolve(raw)))
        if not path.name:
            raise ConfigError(f"path: {path} is a directory, not a file; allowed: the path of the JSONL file answers are appended to")
        home = os.path.expanduser("~")  # "~" itself when there is no home: not absolute, never a root
        roots = [Path(os.path.normpath(resolve("."))), Path(os.path.normpath(home)), Path(path.anchor or os.sep)]
        notifier = cls(path, next((root for root in roots if root.is_absolute() and path.is_relative_to(root) and path != root), None))
        try:
            parent = open_directory_under(notifier.root, os.path.dirname(notifier.relative), what="notify file")
        except SymlinkedPath as exc:
            raise ConfigError(f"path: {exc}") from None
        except (FileNotFoundError, NotADirectoryError):
            raise ConfigError(f"path: the directory {path.parent} does not exist; create it (the file itself is created, 0600)") from None
        try:
            info = os.lstat(path.name, dir_fd=parent)
        except FileNotFoundError:
            return notifier
        finally:
            os.close(parent)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"path: {path} is a symlink or not a regular file; allowed: a regular file, or a path that does not exist yet")
        return notifier

    async def notify(self, notification: Notification) -> int:
        """Append the line (in a worker thread: it fsyncs); one attempt, :class:`NotifyFailed` if it cannot."""
        line = notification_json(notification) + b"\n"
        try:
            await asyncio.to_thread(self.append, line)
        except OSError as exc:
            raise NotifyFailed(f"notify destination {notification.destination!r}: not appended to {self.path}: {exc}") from exc
        return 1

    def append(self, line: bytes) -> None:
        """Append ``line`` under an exclusive lock, in one ``write``, then fsync; ``OSError`` if refused."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
        fd = open_file_under(self.root, self.relative, flags, 0o600, what="notify file")
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "it is not a regular file; refused")
            fcntl.flock(fd, fcntl.LOCK_EX)
            written = os.write(fd, line)
            while written < len(line):  # a short write (a full disk, a signal): finish the line under the lock
                written += os.write(fd, line[written:])
            os.fsync(fd)
        finally:
            os.close(fd)  # releases the lock


# ============================================================================ webhook


class DeliveryRefused(Exception):
    """A receiver answered something other than 2xx; ``retryable`` for 429 and 5xx."""

    def __init__(self, status: int, retry_after_s: float | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.retry_after_s = retry_after_s
        self.retryable = status == 429 or status >= 500


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """A ``Retry-After`` header (seconds or an HTTP date) as seconds from ``now``, capped; None when absent or unreadable."""
    if not value or len(value) > 64:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - now
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_S)


class WebhookNotifier:
    """POSTs each notification as signed JSON to ``url``, retrying what may succeed later."""

    name = "webhook"

    def __init__(self, url: str, secret: str, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 timeout_s: float = DEFAULT_TIMEOUT_MS / 1000,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self.secret = secret
        self.max_attempts = max_attempts
        self.timeout_s = timeout_s
        self.sleep = sleep
        self.clock = clock

    @classmethod
    def from_options(cls, options: Mapping[str, Any], **kwargs: Any) -> WebhookNotifier:
        """Validate ``options``: ``url`` (http/https), ``secret`` (required), ``maxAttempts``, ``timeoutMs``."""
        import httpx

        _refuse_unknown("webhook", options, ("url", "secret", "maxAttempts", "timeoutMs"))
        url = options.get("url")
        allowed = "an http:// or https:// URL with a host"
        if not isinstance(url, str) or not url or len(url) > MAX_URL_CHARS:
            raise ConfigError(f"url: {url!r} is not allowed; allowed: {allowed}")
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, ValueError) as exc:
            raise ConfigError(f"url: {url!r} is not a URL ({exc}); allowed: {allowed}") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ConfigError(f"url: {url!r} is not allowed; allowed: {allowed}")
        secret = options.get("secret")
        if not isinstance(secret, str) or not secret:
            raise ConfigError("secret: required for a webhook destination (the HMAC-SHA256 signing secret); "
                              "set it in the destination's table or in MONO_AGENT_NOTIFY_SECRET_<NAME>")
        attempts = _whole_number(options, "maxAttempts", DEFAULT_MAX_ATTEMPTS, 1, 20)
        timeout_ms = _whole_number(options, "timeoutMs", DEFAULT_TIMEOUT_MS, 100, 600_000)
        return cls(url, secret, max_attempts=attempts, timeout_s=timeout_ms / 1000, **kwargs)

    async def notify(self, notification: Notification) -> int:
        """Deliver ``notification``; the number of attempts it took, or :class:`NotifyFailed` after the last."""
        import httpx
        import tenacity

        body = notification_json(notification)
        backoff = (tenacity.wait_exponential(multiplier=BACKOFF_INITIAL_S, max=BACKOFF_MAX_S)
                   + tenacity.wait_random(0, BACKOFF_INITIAL_S))

        def wait(state: tenacity.RetryCallState) -> float:
            refused = state.outcome.exception() if state.outcome is not None else None
            if isinstance(refused, DeliveryRefused) and refused.retry_after_s is not None:
                return refused.retry_after_s
            return backoff(state)

        def retryable(exc: BaseException) -> bool:
            return isinstance(exc, httpx.TransportError) or (isinstance(exc, DeliveryRefused) and exc.retryable)

        retrying = tenacity.AsyncRetrying(stop=tenacity.stop_after_attempt(self.max_attempts), wait=wait,
                                          retry=tenacity.retry_if_exception(retryable), sleep=self.sleep, reraise=True)
        attempts = 0
        async with httpx.AsyncClient(timeout=self.timeout_s, follow_redirects=False) as client:
            try:
                async for attempt in retrying:
                    with attempt:
                        attempts = attempt.retry_state.attempt_number
                        await self._post(client, body, notification)
            except (httpx.HTTPError, DeliveryRefused) as exc:
                raise NotifyFailed(
                    f"notify destination {notification.destination!r}: gave up after {attempts} attempt(s) "
                    f"to POST {self.url}: {type(exc).__name__}: {exc}"
                ) from exc
        return attempts

    async def _post(self, client: Any, body: bytes, notification: Notification) -> None:
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(self.secret, body, int(self.clock())),
            IDEMPOTENCY_HEADER: notification.run_id,
            "User-Agent": "monoagent-notify",
        }
        async with client.stream("POST", self.url, content=body, headers=headers) as response:  # the body is never read
            if not 200 <= response.status_code < 300:
                raise DeliveryRefused(response.status_code, retry_after_seconds(response.headers.get("retry-after"), self.clock()))
