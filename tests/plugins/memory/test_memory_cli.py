"""``monoagent memory search|add|list|forget|stats``, each with ``--tier`` and ``--json``.

In-process through :class:`click.testing.CliRunner` on ``monoagent._cli.cli`` with a fresh early
plugin host (as ``tests/test_cli.py`` does), in a project directory whose ``monoagent.toml``
configures the tiers; one real subprocess checks that ``main()`` adds the command group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_isolation import isolate_cli
from click.testing import CliRunner, Result

import monoagent._cli as cli_module
from monoagent._kernel.host import PluginHost

CONFIG = """
[memory]
tiers = ["lite", "journal"]

[runtime.session]
rolloverTimezone = "Europe/Berlin"
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_cli(tmp_path, monkeypatch)
    host = PluginHost()
    host.load_entry_points()
    monkeypatch.setitem(ROOT, "cli", cli_module.build_cli(host))
    (tmp_path / "monoagent.toml").write_text(CONFIG, encoding="utf-8")
    return tmp_path


ROOT: dict[str, Any] = {}


def invoke(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(ROOT["cli"], list(args), input=input)


def ok(*args: str, input: str | None = None) -> Result:
    result = invoke(*args, input=input)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def test_add_search_list_forget_stats_as_text(project: Path) -> None:
    assert ok("memory", "add", "Alice prefers metric units.").output == "added lite 1\n"
    assert ok("memory", "add", "--tier", "journal", "Shipped the ibis release.").output == "added journal 1\n"
    ok("memory", "add", "-", input="Bob's cat is called Miso.\n")

    found = ok("memory", "search", "metric units").output.splitlines()
    assert len(found) == 1 and found[0].startswith("lite") and "Alice prefers metric units." in found[0]
    assert "ibis release" in ok("memory", "search", "ibis release", "--tier", "journal").output
    assert ok("memory", "search", "zebra").output == "no memory matched\n"

    listed = ok("memory", "list").output.splitlines()
    assert [line.split()[:2] for line in listed] == [["lite", "2"], ["lite", "1"], ["journal", "1"]]
    assert "Miso" in listed[0]

    assert ok("memory", "forget", "2").output == "forgot lite 2\n"
    missing = invoke("memory", "forget", "2")
    assert missing.exit_code == 1 and "memory tier 'lite' has no entry '2'" in missing.output

    stats = ok("memory", "stats").output
    assert "lite: 1 entries" in stats and "journal: 1 entries" in stats
    assert "embedder: hashed-ngrams" in stats and "vector_backend:" in stats


def test_every_command_speaks_json(project: Path) -> None:
    added = json.loads(ok("memory", "add", "--json", "The release train leaves on Tuesdays.").output)
    assert added == {"tier": "lite", "id": "1"}
    journal = json.loads(ok("memory", "add", "--tier", "journal", "--json", "Release retro notes.").output)
    assert journal == {"tier": "journal", "id": "1"}

    hits = json.loads(ok("memory", "search", "--json", "release train").output)
    assert hits[0]["source"] == "lite" and hits[0]["id"] == "1" and 0 < hits[0]["score"] <= 1
    assert {h["source"] for h in hits} <= {"lite", "journal"}

    listed = json.loads(ok("memory", "list", "--json", "--tier", "journal").output)
    assert [(r["tier"], r["id"]) for r in listed] == [("journal", "1")]
    assert listed[0]["metadata"]["date"] and listed[0]["metadata"]["source"] == "cli"

    stats = json.loads(ok("memory", "stats", "--json").output)
    assert [(s["tier"], s["entries"]) for s in stats] == [("lite", 1), ("journal", 1)]
    assert stats[0]["location"].endswith("lite.sqlite")

    forgotten = json.loads(ok("memory", "forget", "--json", "--tier", "journal", "1").output)
    assert forgotten == {"tier": "journal", "id": "1", "forgotten": True}
    again = invoke("memory", "forget", "--json", "--tier", "journal", "1")
    assert again.exit_code == 1
    assert json.loads(again.output.split("Error:")[0])["forgotten"] is False


def test_bad_input_names_what_is_allowed(project: Path) -> None:
    empty = invoke("memory", "add", "   ")
    assert empty.exit_code == 2 and "the memory text is empty" in empty.output
    unknown = invoke("memory", "search", "x", "--tier", "vectors")
    assert unknown.exit_code != 0
    assert "memory tier 'vectors'" in str(unknown.exception) and "available: journal, lite" in str(unknown.exception)
    limit = invoke("memory", "search", "x", "--limit", "0")
    assert limit.exit_code == 2 and "0 is not in the range 1<=x<=100" in limit.output

    (project / "monoagent.toml").write_text("", encoding="utf-8")
    none = invoke("memory", "list")
    assert none.exit_code == 2 and "no memory tier is configured" in none.output and "--tier NAME" in none.output


def test_tier_option_reaches_an_unconfigured_registered_tier(project: Path) -> None:
    (project / "monoagent.toml").write_text("", encoding="utf-8")
    ok("memory", "add", "--tier", "lite", "Kept even without memory.tiers.")
    assert "Kept even" in ok("memory", "list", "--tier", "lite").output
    assert (project / "home" / "memory" / "lite.sqlite").exists()


def test_main_adds_the_memory_group(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
    env.update(MONO_AGENT_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"), MONO_AGENT_MEMORY_TIERS="lite")
    run = subprocess.run(
        [sys.executable, "-m", "monoagent", "memory", "add", "--json", "from a real process"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {"tier": "lite", "id": "1"}
    helped = subprocess.run(
        [sys.executable, "-m", "monoagent", "memory", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert all(name in helped.stdout for name in ("search", "add", "list", "forget", "stats"))
