"""The static checks .ci/run runs, run by the suite too so that a developer's ``pytest`` reports them.

Both read their settings from pyproject.toml: mypy checks the kernel, the bundled plugins and the
developer tools, ruff lints core, plugins, tests, bench and devtools, and contrib/ with its own
settings (contrib/ruff.toml). A finding fails the test with the checker's own output.

The public API line is a lint rule: plugins/ruff.toml and contrib/ruff.toml ban every private
module of monoagent (and contrib's the bundled plugins), so a deep import from a bundled plugin or
a contrib distribution fails the lint run, and CI with it.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def check(*command: str) -> None:
    done = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(command)} found problems:\n{done.stdout}{done.stderr}"


def test_ruff_finds_nothing():
    check("ruff", "check", "core", "plugins", "tests", "bench", "devtools")


def test_ruff_finds_nothing_in_contrib():
    check("ruff", "check", "contrib")


def test_mypy_finds_nothing():
    check("mypy")


def lint_as(path: str, source: str) -> subprocess.CompletedProcess[str]:
    """ruff on ``source`` as if it were the file ``path`` of the repository (its settings found the same way)."""
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--stdin-filename", path, "-"],
        input=source, cwd=ROOT, capture_output=True, text=True, check=False,
    )


DEEP_IMPORTS = [
    "from monoagent._kernel.model import Section\n",
    "from monoagent._pipeline.harness import Harness\n",
    "import monoagent._boundary.fences\n",
    "from monoagent._cli import terminal\n",
    "from monoagent._agent import Agent\n",
]


@pytest.mark.parametrize("where", ["plugins/monoagent_plugins/prompt/probe.py", "contrib/monoagent-example/src/example/probe.py"])
@pytest.mark.parametrize("source", DEEP_IMPORTS)
def test_a_deep_import_from_plugins_or_contrib_fails_the_lint_run(where, source):
    done = lint_as(where, source)
    assert done.returncode == 1 and "TID251" in done.stdout, done.stdout + done.stderr
    assert "import from `monoagent` (the public API)" in done.stdout


@pytest.mark.parametrize("where", ["plugins/monoagent_plugins/prompt/probe.py", "contrib/monoagent-example/src/example/probe.py"])
def test_a_plugin_marking_its_hooks_with_pluggys_own_marker_fails_the_lint_run(where):
    """Such a plugin is refused when it loads (its answers could not be attributed): the lint run says so first."""
    done = lint_as(where, "import pluggy\n\nhookimpl = pluggy.HookimplMarker(\"monoagent\")\n")
    assert done.returncode == 1 and "monoagent.hookimpl" in done.stdout, done.stdout + done.stderr


def test_contrib_may_not_import_the_bundled_plugins_and_both_may_import_the_public_api():
    done = lint_as("contrib/monoagent-example/src/example/probe.py", "from monoagent_plugins.memory import recall\n")
    assert done.returncode == 1 and "the bundled plugins are monoagent's implementation" in done.stdout
    for where in ("plugins/monoagent_plugins/prompt/probe.py", "contrib/monoagent-example/src/example/probe.py"):
        done = lint_as(where, "from monoagent import Section, hookimpl\n\n__all__ = [\"Section\", \"hookimpl\"]\n")
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_rule_bans_every_private_module_of_monoagent():
    """A private module added to the package is banned in both settings, or the line has a hole."""
    private = sorted(
        f"monoagent.{path.stem if path.is_file() else path.name}"
        for path in (ROOT / "core" / "monoagent").iterdir()
        if path.name.startswith("_") and not path.name.startswith("__") and (path.suffix == ".py" or path.is_dir())
    )
    assert private, "core/monoagent has private modules"
    for config in ("plugins/ruff.toml", "contrib/ruff.toml"):
        banned = tomllib.loads((ROOT / config).read_text(encoding="utf-8"))["lint"]["flake8-tidy-imports"]["banned-api"]
        assert [name for name in private if name not in banned] == [], config
