"""The default token estimate: tiktoken's ``cl100k_base`` when installed, else 4 UTF-8 bytes a token.

With the optional extra (``pip install 'monoagent[tokens]'``), text is counted exactly with
tiktoken's ``cl100k_base`` encoding, a provider-agnostic approximation (as the documents use).
Without it, or when the encoding cannot be loaded (tiktoken fetches its data once, on first use;
offline, one log line says so and the failure is remembered in the user cache directory for an
hour, so the processes after it do not try again), the estimate is ``ceil(utf8_bytes / 4)``.

The figure is calibrated against ``cl100k_base`` by ``bench/tokens.py``: English prose and
Markdown run at 4.1 to 5.4 UTF-8 bytes a token and Python code at 4.3, so the estimate errs high
there (the safe side when sizing a request against a budget); JSON (2.6), Chinese and Japanese
(2.8 to 3.0) run lower, where it counts up to a third too few, inside the 20% headroom of the
compaction trigger plus the reactive compaction after an overflow. Bytes vary less across scripts
than characters do (Chinese is 1.0 character a token, English 4.1), hence bytes. A tokeniser plugin
(a model's own tokeniser) replaces both by implementing ``count_tokens``.
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path
from typing import Any

from monoagent import hookimpl, logger

BYTES_PER_TOKEN = 4
ENCODING = "cl100k_base"
RETRY_AFTER_S = 3600.0
"""After tiktoken failed to load its encoding (offline: its first use downloads it), how long every
process uses the estimate before one tries tiktoken again."""
FAILURE_FILE = "tiktoken-unavailable.json"
"""In the user cache directory: when tiktoken last failed, why, and when to try again."""
REASON_CHARS = 100


def failure_file() -> Path:
    """Where the last failure is remembered: ``platformdirs.user_cache_path("monoagent")`` (``~/.cache/monoagent``)."""
    import platformdirs

    return platformdirs.user_cache_path("monoagent") / FAILURE_FILE


def _remembered(now: float) -> dict[str, Any] | None:
    """The remembered failure for :data:`ENCODING` while its retry time has not come; None otherwise."""
    try:
        data = json.loads(failure_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("encoding") != ENCODING:
        return None
    retry_at = data.get("retryAt")
    if not isinstance(retry_at, (int, float)) or isinstance(retry_at, bool) or not now < retry_at <= now + RETRY_AFTER_S:
        return None
    return dict(data)


def _remember(reason: str, now: float) -> Path | None:
    """Write the failure (atomically, owner-only); the file's path, or None when the cache cannot be written."""
    path = failure_file()
    record = {"encoding": ENCODING, "failedAt": now, "retryAt": now + RETRY_AFTER_S, "reason": reason}
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = path.with_name(f".{FAILURE_FILE}.{os.getpid()}")
        partial.write_text(json.dumps(record), encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        return None
    return path


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > REASON_CHARS:
        text = text[: REASON_CHARS - 1] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@functools.cache
def _encoding() -> Any:
    """tiktoken's encoding, once per process; None without tiktoken or when it cannot load its data.

    tiktoken downloads the encoding on its first use. When that fails (offline), the failure is
    said in one line and remembered in :func:`failure_file`: every process until its retry time
    (:data:`RETRY_AFTER_S`) uses the estimate without trying, and silently.
    """
    try:
        import tiktoken
    except ImportError:
        return None
    now = time.time()
    remembered = _remembered(now)
    if remembered is not None:
        logger.bind(plugin="tokens").debug(
            "tiktoken's {} encoding failed to load earlier ({}); estimating until {}", ENCODING, remembered.get("reason"),
            time.strftime("%H:%M", time.localtime(remembered["retryAt"])),
        )
        return None
    try:
        return tiktoken.get_encoding(ENCODING)
    except Exception as exc:  # the download failed: offline, tiktoken raises what requests raised
        reason = _reason(exc)
        kept = _remember(reason, now)
        again = f"tried again after {time.strftime('%H:%M', time.localtime(now + RETRY_AFTER_S))}"
        logger.bind(plugin="tokens").warning(
            "tiktoken could not load its {} encoding ({}); token counts are estimated at {} UTF-8 bytes a token, {}{}",
            ENCODING, reason, BYTES_PER_TOKEN, again, f" (remembered in {kept})" if kept else "",
        )
        return None


def estimate(text: str) -> int:
    """``ceil(utf8_bytes / 4)``: the calibrated estimate without a tokeniser (ASCII text, one byte a
    character, is measured without encoding it: ``str.isascii`` reads a flag, it does not scan)."""
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return -(-size // BYTES_PER_TOKEN)


@hookimpl(trylast=True)
def count_tokens(text: str, model: str) -> int:
    encoding = _encoding()
    if encoding is None:
        return estimate(text)
    return len(encoding.encode(text, disallowed_special=()))
