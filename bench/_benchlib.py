"""Shared helpers of the benchmark scripts (stdlib only): arguments, statistics, temp dirs, output.

Not a benchmark itself; ``bench/<name>.py`` imports it (the script's directory is on sys.path).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a short run (fewer repetitions)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the text report")
    p.add_argument(
        "--tmp-root",
        default=str(BENCH_DIR),
        help="where the temporary state directory is created (default: bench/, the working tree's disk)",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary state directory")
    return p


# --------------------------------------------------------------------------- statistics


def summary(samples: Sequence[float]) -> dict[str, float]:
    """median, p90, min, max, mean and count of ``samples`` (same unit as the samples)."""
    data = sorted(samples)
    p90 = statistics.quantiles(data, n=10, method="inclusive")[8] if len(data) >= 2 else data[0]
    return {
        "n": len(data),
        "median": statistics.median(data),
        "p90": p90,
        "min": data[0],
        "max": data[-1],
        "mean": statistics.fmean(data),
    }


def p99(samples: Sequence[float]) -> float:
    """The 99th percentile of ``samples`` (inclusive method; the one sample when there is one)."""
    data = sorted(samples)
    if len(data) < 2:
        return data[0]
    return statistics.quantiles(data, n=100, method="inclusive")[98]


def scaled(stats: dict[str, float], factor: float) -> dict[str, float]:
    return {k: (v if k == "n" else v * factor) for k, v in stats.items()}


# --------------------------------------------------------------------------- filesystem


def filesystem_of(path: str | os.PathLike[str]) -> dict[str, str]:
    """The mount (device, mount point, type) holding ``path``, from /proc/mounts when available."""
    target = os.path.realpath(path)
    best = {"device": "unknown", "mountpoint": "unknown", "fstype": "unknown"}
    try:
        with open("/proc/mounts", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return best
    best_len = -1
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        device, mountpoint, fstype = parts[0], parts[1].replace("\\040", " "), parts[2]
        within = target == mountpoint or target.startswith(mountpoint.rstrip("/") + "/") or mountpoint == "/"
        if within and len(mountpoint) > best_len:
            best_len = len(mountpoint)
            best = {"device": device, "mountpoint": mountpoint, "fstype": fstype}
    best["same_device_as_repo"] = str(os.stat(target).st_dev == os.stat(REPO).st_dev)
    return best


@contextlib.contextmanager
def state_dir(root: str, keep: bool = False) -> Iterator[Path]:
    """A fresh temporary directory under ``root`` (created if needed), removed afterwards."""
    root_path = Path(root)
    root_path.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=".bench-tmp-", dir=root_path))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def clean_env(home: Path) -> dict[str, str]:
    """os.environ without any MONO_AGENT_* variable, with MONO_AGENT_HOME set to ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
    env["MONO_AGENT_HOME"] = str(home)
    return env


def machine() -> dict[str, str]:
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": str(os.cpu_count()),
        **{f"git_{k}": v for k, v in revision().items()},
    }


# --------------------------------------------------------------------------- output


def emit_json(document: dict[str, Any]) -> None:
    json.dump(document, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def verdict_line(name: str, ok: bool, detail: str) -> str:
    return f"VERDICT {name}: {'PASS' if ok else 'FAIL'} - {detail}"


def revision() -> dict[str, str]:
    """The repository's HEAD and how many paths differ from it (benchmarks of a moving tree)."""
    import subprocess

    def git(*argv: str) -> str:
        try:
            proc = subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return ""
        return proc.stdout.strip() if proc.returncode == 0 else ""

    return {"head": git("rev-parse", "--short", "HEAD") or "unknown", "changed_paths": str(len(git("status", "--porcelain").splitlines()))}


def durable_write(directory: Path, data: bytes) -> float:
    """Seconds for write + fsync + rename + fsync(directory) of ``data``: the floor of a commit."""
    start = time.perf_counter()
    tmp = directory / f".record.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / "record.json")
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return time.perf_counter() - start
