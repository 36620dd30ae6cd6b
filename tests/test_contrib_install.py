"""Install the example plugin distribution into a fresh virtualenv and drive the real CLI.

The venv sees the main environment's packages and installs offline (:mod:`throwaway_venv`): only
then is ``monoagent-identity-example`` a real installed distribution whose entry point
``importlib.metadata`` discovers.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from throwaway_venv import clean_env, make_venv, pip_install

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "contrib" / "monoagent-identity-example"
EXAMPLE_TEXT = "You are Ada, a helpful assistant."
BUNDLED_HEADING = "## IDENTITY.md"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the example installed, over the main environment's packages: its python."""
    python = make_venv(tmp_path_factory.mktemp("venv"))
    pip_install(python, str(EXAMPLE))
    return python


def monoagent(python: Path, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    cwd = tmp_path / "project"
    cwd.mkdir(exist_ok=True)
    result = subprocess.run(
        [str(python), "-m", "monoagent", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60,
        env=clean_env(MONO_AGENT_HOME=str(tmp_path / "home"), **env),
    )
    assert result.returncode == 0, result.stderr
    return result


def listed(python: Path, tmp_path: Path, **env: str) -> dict[str, dict]:
    rows = json.loads(monoagent(python, tmp_path, "plugins", "--json", **env).stdout)
    return {row["name"]: row for row in rows}


def identity(python: Path, tmp_path: Path, **env: str) -> tuple[str, str]:
    """(the stable prompt text, the identity section's source) of ``monoagent prompt hi``."""
    data = json.loads(monoagent(python, tmp_path, "prompt", "hi", "--json", **env).stdout)
    [section] = [s for s in data["manifest"]["sections"] if s["id"] == "identity"]
    return data["stable"], section["source"]


def test_installed_plugin_is_listed_and_wins_the_identity(installed: Path, tmp_path: Path) -> None:
    row = listed(installed, tmp_path)["identity-example"]
    assert row["source"] == "entrypoint"
    assert row["status"] == "active"
    assert row["version"] == "0.1.0"
    assert "monoagent-identity-example" in row["location"]
    assert "section_identity" in row["hooks"]
    assert "register_config_sections" in row["hooks"]

    text, source = identity(installed, tmp_path)
    assert source == "identity-example"
    assert EXAMPLE_TEXT in text
    assert BUNDLED_HEADING not in text


def test_installed_plugin_reads_the_project_config(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "monoagent.toml").write_text('[identityExample]\nname = "Grace"\n')
    text, _ = identity(installed, tmp_path)
    assert "You are Grace, a helpful assistant." in text


def test_disable_autoload_skips_it(installed: Path, tmp_path: Path) -> None:
    row = listed(installed, tmp_path, MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD="1")["identity-example"]
    assert row["status"] == "blocked"
    assert row["hooks"] == []
    assert "MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD" in row["reason"]

    text, source = identity(installed, tmp_path, MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD="1")
    assert source == "identity"
    assert BUNDLED_HEADING in text
    assert EXAMPLE_TEXT not in text


def test_plugins_block_in_config_skips_it(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "monoagent.toml").write_text('[plugins]\nblock = ["identity-example"]\n')
    row = listed(installed, tmp_path)["identity-example"]
    assert row["status"] == "blocked"
    assert row["reason"] == "blocked by plugins.block"

    text, source = identity(installed, tmp_path)
    assert source == "identity"
    assert BUNDLED_HEADING in text
    assert EXAMPLE_TEXT not in text
