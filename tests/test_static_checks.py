"""The static checks .ci/run runs, run by the suite too so that a developer's ``pytest`` reports them.

Both read their settings from pyproject.toml: mypy checks the kernel and the bundled plugins,
ruff lints core, plugins, tests and bench. A finding fails the test with the checker's own output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def check(*command: str) -> None:
    done = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(command)} found problems:\n{done.stdout}{done.stderr}"


def test_ruff_finds_nothing():
    check("ruff", "check", "core", "plugins", "tests", "bench", "devtools")


def test_mypy_finds_nothing():
    check("mypy")
