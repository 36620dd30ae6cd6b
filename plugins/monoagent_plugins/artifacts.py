"""Run artifacts: every run's events as JSONL in ``<artifacts.dir>/runs/<runId>.jsonl``.

The file is owner-only (0600 in a 0700 directory) and holds every event but the streamed
``text_delta`` pieces, the ``prompt_manifest`` among them: the audit handle of what was
sent, without the prompt text. Lines are buffered and reach the file when the buffer fills and
at the run's terminal event, which closes it (a process killed mid-run may lose its last
lines; artifacts are not fsynced). Artifacts are best-effort: a write failure is logged, never
fatal.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

from monoagent.log import logger

from monoagent.model import RunEvent
from monoagent.plugins import bundled_impl

SKIPPED = frozenset({"text_delta"})
TERMINAL = frozenset({"run_completed", "run_failed", "run_cancelled"})

_open: dict[tuple[int, str], IO[str]] = {}


def run_file(artifacts_dir: Path, run_id: str) -> Path:
    return artifacts_dir / "runs" / f"{run_id}.jsonl"


def _handle(agent: Any, run_id: str) -> IO[str]:
    key = (id(agent), run_id)
    handle = _open.get(key)
    if handle is None:
        root = agent.config.artifacts_dir
        root.parent.mkdir(parents=True, exist_ok=True)
        root.mkdir(mode=0o700, exist_ok=True)
        directory = root / "runs"
        directory.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(directory / f"{run_id}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        handle = _open[key] = os.fdopen(fd, "a", encoding="utf-8")
    return handle


@bundled_impl
def on_run_event(event: RunEvent, agent: Any) -> None:
    if event.type in SKIPPED:
        return
    try:
        from monoagent.serial import unstructure

        handle = _handle(agent, event.run_id)
        handle.write(json.dumps(unstructure(event), ensure_ascii=False, separators=(",", ":"), default=str) + "\n")
    except OSError as exc:
        logger.warning("run artifact for {} not written: {}", event.run_id, exc)
        return
    if event.type in TERMINAL:
        _open.pop((id(agent), event.run_id)).close()


@bundled_impl
def shutdown(agent: Any) -> None:
    for key in [k for k in _open if k[0] == id(agent)]:
        _open.pop(key).close()
