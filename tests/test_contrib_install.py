"""Install the example plugin distribution into a fresh virtualenv and drive the real CLI.

Nothing is downloaded. The new venv sees the main environment's packages through a ``.pth``
file (``site.addsitedir``, so the main environment's own ``.pth`` files, among them the
editable install of monoagent, are processed too), and pip builds the example offline with the
hatchling that environment already has. Only then is ``monoagent-identity-example`` a real
installed distribution whose entry point ``importlib.metadata`` discovers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "contrib" / "monoagent-identity-example"
EXAMPLE_TEXT = "You are Ada, a helpful assistant."
BUNDLED_HEADING = "## IDENTITY.md"


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without the developer's MONO_AGENT_* variables (and without pip's index)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
    env.pop("PYTHONPATH", None)
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def venv_site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, env=clean_env(),
    )
    return Path(out.stdout.strip())


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the example installed, over the main environment's packages: its python."""
    venv = tmp_path_factory.mktemp("venv")
    has_pip = importlib.util.find_spec("pip") is not None
    subprocess.run(
        [sys.executable, "-m", "venv", *(["--without-pip"] if has_pip else []), str(venv)],
        check=True, capture_output=True, env=clean_env(),
    )
    python = venv_python(venv)
    main_dirs = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    lines = [f"import site; site.addsitedir({d!r})" for d in dict.fromkeys(main_dirs)]
    (venv_site_packages(python) / "_monoagent_main_env.pth").write_text("\n".join(lines) + "\n")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--no-cache-dir", "--quiet", str(EXAMPLE)],
        capture_output=True, text=True, env=clean_env(),
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return python


def monoagent(python: Path, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    cwd = tmp_path / "project"
    cwd.mkdir(exist_ok=True)
    result = subprocess.run(
        [str(python), "-m", "monoagent.cli", *args],
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
