"""Run artifacts: every run's events as JSONL in ``<artifacts.dir>/runs/<runId>.jsonl``.

The file is owner-only (0600 in a 0700 directory) and holds every event but the streamed
``text_delta`` pieces, the ``prompt_manifest`` among them: the audit handle of what was sent,
without the prompt text.

Files are written by one background thread per process, in event order, so creating a file
(hundreds of microseconds on some file systems) never sits on a turn's path. A run's file is
complete once its terminal event (``run_completed``, ``run_failed``, ``run_cancelled``) has
been written; ``agent.aclose()`` (the ``shutdown`` hook) and interpreter exit wait for every
pending line. Artifacts are not fsynced and are best-effort: a write failure is logged, never
fatal.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import threading
from pathlib import Path
from typing import IO, Any

from monoagent.log import logger
from monoagent.model import RunEvent
from monoagent.plugins import bundled_impl

SKIPPED = frozenset({"text_delta"})
TERMINAL = frozenset({"run_completed", "run_failed", "run_cancelled"})


def run_file(artifacts_dir: Path, run_id: str) -> Path:
    return artifacts_dir / "runs" / f"{run_id}.jsonl"


def _open_run_file(root: Path, run_id: str) -> IO[str]:
    root.parent.mkdir(parents=True, exist_ok=True)
    root.mkdir(mode=0o700, exist_ok=True)
    directory = root / "runs"
    directory.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(directory / f"{run_id}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    return os.fdopen(fd, "a", encoding="utf-8")


class ArtifactWriter:
    """A daemon thread that appends events to run files; :meth:`flush` waits for it to catch up."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, root: Path, event: RunEvent) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="monoagent-artifacts", daemon=True)
                    self._thread.start()
                    atexit.register(self.flush)
        self._queue.put((root, event))

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every event submitted so far is written (and open files flushed)."""
        if self._thread is None:
            return True
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def _run(self) -> None:
        from monoagent.serial import unstructure

        handles: dict[tuple[Path, str], IO[str]] = {}
        while True:
            item = self._queue.get()
            if isinstance(item, threading.Event):
                for handle in handles.values():
                    handle.flush()
                item.set()
                continue
            root, event = item
            key = (root, event.run_id)
            try:
                handle = handles.get(key)
                if handle is None:
                    handle = handles[key] = _open_run_file(root, event.run_id)
                handle.write(json.dumps(unstructure(event), ensure_ascii=False, separators=(",", ":"), default=str) + "\n")
                if event.type in TERMINAL:
                    handles.pop(key).close()
            except (OSError, TypeError, ValueError) as exc:
                logger.warning("run artifact for {} not written ({} lost): {}", event.run_id, event.type, exc)


writer = ArtifactWriter()


@bundled_impl
def on_run_event(event: RunEvent, agent: Any) -> None:
    if event.type not in SKIPPED:
        writer.submit(agent.config.artifacts_dir, event)


@bundled_impl
def shutdown(agent: Any) -> None:
    writer.flush()
