"""A missing extra's hint: the packages the extra lacks, and the pip command for the way monoagent was installed.

The command lines run as subprocesses with the extra's modules made unimportable
(``sys.modules[name] = None``, how Python spells "not installed" to an import) before monoagent
starts: ``serve`` without uvicorn, an MCP server without the SDK (nor httpx2, which the SDK
brings), ``--markdown`` without rich, the anthropic and openai providers without httpx.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from monoagent import missing_extra
from monoagent._kernel import extras

ROOT = Path(__file__).parents[1]
DEVELOPMENT = {"test", "docs", "mutation", "clients"}  # extras of this repository's own work, never named by a hint
EXTRAS = {name: packages for name, packages in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"].items()
          if name not in DEVELOPMENT}
CHECKOUT = f"'{ROOT}[{{}}]'"  # this suite runs on an editable install of the checkout

TOP_MODULES = {"sqlite-vec": ["sqlite_vec"], "mkdocstrings": ["mkdocstrings"], "griffelib": ["griffe"], "httpx-sse": ["httpx_sse"]}


def blocked(monkeypatch: pytest.MonkeyPatch, packages: list[str]) -> None:
    modules = importlib.metadata.packages_distributions()
    for package in packages:
        for module, owners in modules.items():
            if any(extras._normal(owner) == extras._normal(package) for owner in owners):
                monkeypatch.setitem(sys.modules, module, None)
        for module in TOP_MODULES.get(package, [package.replace("-", "_")]):
            monkeypatch.setitem(sys.modules, module, None)


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_every_extra_names_its_missing_packages_and_the_checkout_install(extra: str, monkeypatch: pytest.MonkeyPatch) -> None:
    packages = [extras._NAME.match(r).group(0).split("[")[0] for r in EXTRAS[extra]]  # type: ignore[union-attr]
    assert sorted(extras.extra_packages(extra)) == sorted(dict.fromkeys(packages))
    blocked(monkeypatch, packages)
    hint = missing_extra(extra, "the feature")
    head, _, rest = hint.partition(" (not installed: ")
    named, _, command = rest.partition("): ")
    assert head == f"the feature needs the {extra!r} extra" and command == f"pip install -e {CHECKOUT.format(extra)}"
    assert sorted(named.split(", ")) == sorted(dict.fromkeys(packages))


class FakeDistribution:
    def __init__(self, direct_url: dict[str, Any] | None) -> None:
        self.direct_url = direct_url

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return None if self.direct_url is None else json.dumps(self.direct_url)


@pytest.mark.parametrize(("direct_url", "command"), [
    (None, "pip install 'monoagent[serve]'"),  # from an index: no direct_url.json
    ({"url": "https://files.example/monoagent-1.0.tar.gz", "archive_info": {}}, "pip install 'monoagent[serve]'"),
    ({"url": "file:///src/mono%20agent", "dir_info": {"editable": True}}, "pip install -e '/src/mono agent[serve]'"),
    ({"url": "file:///src/monoagent", "dir_info": {}}, "pip install '/src/monoagent[serve]'"),
], ids=["index", "archive", "editable checkout", "local directory"])
def test_the_command_follows_the_way_monoagent_was_installed(monkeypatch: pytest.MonkeyPatch, direct_url: Any, command: str) -> None:
    monkeypatch.setattr(extras.importlib.metadata, "distribution", lambda name: FakeDistribution(direct_url))
    assert extras.install_command("serve") == command


def test_an_import_error_of_a_dependency_is_named_when_the_extras_packages_are_there() -> None:
    error = ImportError("No module named 'anyio._backends'", name="anyio._backends")
    assert missing_extra("mcp", "x", error) == f"x needs the 'mcp' extra (not installed: anyio): pip install -e {CHECKOUT.format('mcp')}"


# ---------------------------------------------------------------------------- the command lines


def monoagent_without(tmp_path: Path, modules: list[str], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    start = ("import sys\n"
             f"for name in {modules!r}: sys.modules[name] = None\n"
             "from monoagent._cli import main\n"
             "main(sys.argv[1:])\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MONO_AGENT_", "ANTHROPIC_", "OPENAI_"))}
    clean.update(MONO_AGENT_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"), **env)
    return subprocess.run([sys.executable, "-c", start, *args], cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=120)


def test_serve_without_the_serve_extra(tmp_path: Path) -> None:
    done = monoagent_without(tmp_path, ["uvicorn"], "serve")
    assert done.returncode == 1
    assert (f"monoagent: error: monoagent serve needs the 'serve' extra (not installed: uvicorn): "
            f"pip install -e {CHECKOUT.format('serve')}") in done.stderr


def test_an_mcp_server_without_the_sdk_names_the_mcp_package(tmp_path: Path) -> None:
    config = {"mcp": {"servers": {"t": {"command": sys.executable, "args": ["-c", "pass"]}}}}
    (tmp_path / "monoagent.json").write_text(json.dumps(config))
    done = monoagent_without(tmp_path, ["mcp", "mcp_types", "httpx2"], "--config", "monoagent.json", "tools", "--json")
    assert done.returncode == 0, done.stderr
    [failed] = json.loads(done.stdout)["failed"]
    assert failed["reason"] == (f"an MCP server (the official MCP SDK) needs the 'mcp' extra (not installed: mcp): "
                                f"pip install -e {CHECKOUT.format('mcp')}")
    assert "httpx2" not in done.stdout + done.stderr


def test_markdown_without_rich(tmp_path: Path) -> None:
    done = monoagent_without(tmp_path, ["rich"], "run", "--markdown", "hi")
    assert done.returncode == 2
    assert (f"--markdown needs the 'rich' extra (not installed: rich): pip install -e {CHECKOUT.format('rich')} "
            "(or use --plain)") in done.stderr


@pytest.mark.parametrize(("model", "extra", "env"), [
    ("anthropic:claude-x", "anthropic", {"ANTHROPIC_API_KEY": "k", "MONO_AGENT_ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}),
    ("openai:gpt-x", "openai", {"OPENAI_API_KEY": "k", "MONO_AGENT_OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}),
])
def test_a_provider_without_httpx(tmp_path: Path, model: str, extra: str, env: dict[str, str]) -> None:
    done = monoagent_without(tmp_path, ["httpx", "httpx_sse"], "run", "-m", model, "hi", **env)
    assert done.returncode == 1, done.stderr
    provider = model.split(":")[0]
    assert (f"the {provider} provider needs the {extra!r} extra (not installed: httpx, httpx-sse): "
            f"pip install -e {CHECKOUT.format(extra)}") in done.stderr
    assert "Traceback" not in done.stderr
