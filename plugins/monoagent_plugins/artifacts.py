"""Run artifacts: every run's events as JSONL in ``<artifacts.dir>/runs/<runId>.jsonl``.

The file is owner-only (0600 in a 0700 directory) and holds every event but the streamed
``text_delta`` pieces, the ``prompt_manifest`` among them: the audit handle of what was sent,
without the prompt text.

Files are written by one background thread per process, in event order. A run's lines are
kept until its terminal event (``run_completed``, ``run_failed``, ``run_cancelled``) and then
written in one go: creating a file costs hundreds of microseconds on some file systems, and a
file created while the history store fsyncs its commit makes that fsync wait, so the file is
created after the turn's commit rather than during it. ``agent.aclose()`` (the ``shutdown``
hook) and interpreter exit write every pending line, complete runs or not; a process killed
mid-run loses that run's events. Artifacts are not fsynced and are best-effort: a write failure is logged, never
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

        pending: dict[tuple[Path, str], list[str]] = {}
        while True:
            item = self._queue.get()
            if isinstance(item, threading.Event):
                for key in list(pending):
                    self._write(key, pending.pop(key))
                item.set()
                continue
            root, event = item
            key = (root, event.run_id)
            try:
                line = json.dumps(unstructure(event), ensure_ascii=False, separators=(",", ":"), default=str)
            except (TypeError, ValueError) as exc:
                logger.warning("run event {} of {} not serialisable, left out: {}", event.type, event.run_id, exc)
                continue
            pending.setdefault(key, []).append(line)
            if event.type in TERMINAL:
                self._write(key, pending.pop(key))

    @staticmethod
    def _write(key: tuple[Path, str], lines: list[str]) -> None:
        """Append ``lines`` to the run's file in one write (creating it on the run's first write)."""
        root, run_id = key
        try:
            with _open_run_file(root, run_id) as handle:
                handle.write("".join(line + "\n" for line in lines))
        except OSError as exc:
            logger.warning("run artifact for {} not written ({} events lost): {}", run_id, len(lines), exc)


writer = ArtifactWriter()


@bundled_impl
def on_run_event(event: RunEvent, agent: Any) -> None:
    if event.type not in SKIPPED:
        writer.submit(agent.config.artifacts_dir, event)


@bundled_impl
def shutdown(agent: Any) -> None:
    writer.flush()
