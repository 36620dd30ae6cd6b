"""``monoagent info`` (plugin ``info-cli``), ``config show``'s resolved paths and ``config init``'s commented defaults."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest
from cli_isolation import isolate_cli
from click.testing import CliRunner, Result

import monoagent._cli as cli_module
from monoagent._kernel.host import PluginHost


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_cli(tmp_path, monkeypatch, home=False)
    (tmp_path / "monoagent.toml").write_text('[runtime]\nmodel = "offline:echo"\n[memory]\npath = "mem"\n')
    return tmp_path


def invoke(*args: str) -> Result:
    host = PluginHost()
    host.load_entry_points()
    return CliRunner().invoke(cli_module.build_cli(host), list(args))


def test_info_shows_versions_config_file_paths_plugins_and_registries(project: Path) -> None:
    result = invoke("info", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["versions"]["monoagent"] and data["versions"]["python"].startswith(f"{sys.version_info.major}.")
    assert data["versions"]["pluggy"] != "not installed"
    assert data["config_file"] == str(project / "monoagent.toml")
    home = project / ".mono-agent"
    assert data["paths"]["context.home"] == str(home)
    assert data["paths"]["history.dir"] == str(home / "history")
    assert data["paths"]["artifacts.dir"] == str(home / "artifacts")
    assert data["paths"]["memory.path"] == str(project / "mem"), "a set path is shown resolved against the config file"
    assert data["paths"]["toolHistory"] == str(home / "history" / "tool-history" / "tool-lifecycles.sqlite")
    assert data["paths"]["runtime.session.transcriptsDir"] == "(unset: in memory)"
    assert data["selected"]["model"] == "offline:echo" and data["selected"]["history.store"] == "files"
    assert {"name": "logs-cli", "status": "active"}.items() <= next(p for p in data["plugins"] if p["name"] == "logs-cli").items()
    providers = {entry["name"]: entry["plugin"] for entry in data["registries"]["provider"]}
    assert providers["offline"] == "offline" and "tool" in data["registries"]
    assert not (home / "history").exists(), "info opens no store"
    text = invoke("info").stdout
    assert f"config file: {project / 'monoagent.toml'}" in text
    assert any(line.split() == ["memory.path", str(project / "mem")] for line in text.splitlines())
    assert "provider:" in text and "from offline" in text


def test_config_show_prints_where_unset_paths_point(project: Path) -> None:
    lines = invoke("config", "show").stdout.splitlines()
    home = project / ".mono-agent"
    assert f"history.dir = (default) {home / 'history'}  # default" in lines
    assert f"artifacts.dir = (default) {home / 'artifacts'}  # default" in lines
    assert f"context.home = (default) {home}  # default" in lines
    assert f"context.identityPath = (default) {home / 'IDENTITY.md'}  # default" in lines
    assert f'memory.path = "mem"  # file {project / "monoagent.toml"}' in lines, "a set path is shown as written"
    assert not [line for line in lines if line.split(" = ")[0] in ("history.dir", "artifacts.dir", "context.home") and "null" in line]
    data = json.loads(invoke("config", "show", "--json").stdout)
    assert data["history.dir"] == {"value": None, "source": "default", "resolved": str(home / "history")}
    assert data["memory.path"]["resolved"] == str(project / "mem")


def test_config_init_pins_nothing_and_the_file_still_validates(project: Path) -> None:
    (project / "monoagent.toml").unlink()
    assert invoke("config", "init").exit_code == 0
    text = (project / "monoagent.toml").read_text()

    def leaves(table: dict) -> list[str]:
        return [key for key, value in table.items() if not isinstance(value, dict)] + [
            leaf for value in table.values() if isinstance(value, dict) for leaf in leaves(value)]

    assert leaves(tomllib.loads(text)) == [], "every default is a comment"
    assert "# maxTurns = 0" in text and "# maxConcurrentRuns = 4" in text
    shown = json.loads(invoke("config", "show", "--json").stdout)
    assert {row["source"] for row in shown.values()} == {"default"}
    valid = invoke("config", "validate")
    assert valid.exit_code == 0 and "configuration is valid" in valid.stdout
    uncommented = text.replace("# maxTurns = 0", "maxTurns = 7", 1)
    (project / "monoagent.toml").write_text(uncommented)
    assert json.loads(invoke("config", "show", "--json").stdout)["runtime.maxTurns"]["value"] == 7, "uncommenting a line sets it"
