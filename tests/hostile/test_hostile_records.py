"""Hostile inputs against records and operator files (issue 8, items 6, 16, 17 and 19).

* 6 (operator files): every file read whole (bootstrap files, skills, the config file, offline
  scripts, local plugin files) is a regular file under a byte cap checked before reading, and
  JSON/TOML/YAML nesting is bounded before a recursive parser sees it.
* 16: a turn claims its success only once its commit is durable; a failed commit publishes the
  continuity account (``commit_failed``); a cancel during the commit waits for its outcome.
* 17: a tool-history sidecar that cannot be opened (locked by another connection or process)
  degrades visibly once, retries with back-off and records again once the lock goes; no write's
  future is left with an unretrieved exception.
* 19: integers and numbers typed as text (``MONO_AGENT_*`` variables, command-line counts) take
  ASCII digits only.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import gc
import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the CLI test isolation helper
from cli_isolation import isolate_cli

from monoagent._kernel.config_keys import field_type, iter_keys, snake, unwrap_optional
from monoagent._kernel.config_loading import load_config
from monoagent._kernel.errors import CommitFailed, ConfigError, HistoryStoreError
from monoagent._kernel.hookspecs import hookimpl
from monoagent._kernel.host import PluginHost
from monoagent._kernel.log import logger
from monoagent._kernel.model import ToolSpec
from monoagent._kernel.turn_request import TurnRequest
from monoagent._pipeline.continuity_account import ACCOUNT_HEADER
from monoagent.testing import fresh_agent, scripted_agent
from monoagent_plugins.history.directory import FsOps
from monoagent_plugins.history.files import FilesHistoryStore
from monoagent_plugins.history.tool_calls.sidecar import OWNER_LOCK, SIDECAR
from monoagent_plugins.history.tool_calls.store import SqliteToolHistory
from monoagent_plugins.history.tool_calls.writer import OpenRetry
from monoagent_plugins.history.tool_history import ToolHistoryConfig


def examples(default: int):
    """Hypothesis settings: deterministic by default; HOSTILE_EXAMPLES=N explores N random examples."""
    return settings(
        max_examples=int(os.environ.get("HOSTILE_EXAMPLES", default)),
        derandomize=not os.environ.get("HOSTILE_EXAMPLES"),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


# --------------------------------------------------------------------------- 19: ASCII digits only


def _bundled_sections() -> dict[str, type]:
    host = PluginHost()
    host.load_entry_points()
    return host.config_sections()


SECTIONS = _bundled_sections()


def _number_keys() -> list[tuple[str, str, type, float]]:
    """(env var, key path, int or float, minimum) of every number key with an env var, plugins' too."""
    keys = list(iter_keys())
    for path, cls in SECTIONS.items():
        keys += iter_keys(cls, path + ".")
    found = []
    for key in keys:
        base, _ = unwrap_optional(field_type(key.owner, key.attribute))
        if key.env and base in (int, float):
            found.append((key.env, key.path, base, key.attribute.metadata.get("min")))
    return found


NUMBER_KEYS = _number_keys()
NOT_ASCII = [
    "1_000",  # int() takes digit-group underscores
    "\uff11\uff10",  # fullwidth 10
    "\u0661\u0660",  # Arabic-Indic 10
    "\U0001d7cf\U0001d7ce",  # mathematical bold 10
    "+5",
    "1e3",
    "inf",
    "nan",
    "0x10",
    " 1 0",
    "\u30001",  # an ideographic space before the digit
    "9" * 5000,  # past Python's digit limit: a clear error, not int()'s advice about sys.set_int_max_str_digits
]


def test_every_integer_and_number_variable_is_covered():
    variables = {env for env, *_ in NUMBER_KEYS}
    assert {"MONO_AGENT_MAX_TURNS", "MONO_AGENT_COMPACTION_TRIGGER_RATIO", "MONO_AGENT_TOOL_HISTORY_MAX_CALLS"} <= variables


@pytest.mark.parametrize(("env", "path", "kind", "minimum"), NUMBER_KEYS, ids=[k[0] for k in NUMBER_KEYS])
@pytest.mark.parametrize("raw", NOT_ASCII, ids=range(len(NOT_ASCII)))
def test_a_number_variable_takes_ascii_digits_only(env, path, kind, minimum, raw):
    with pytest.raises(ConfigError) as info:
        load_config(data={}, env={env: raw}, plugin_sections=SECTIONS)
    (problem,) = info.value.problems
    assert problem.startswith(f"{path} = {raw!r} (from env {env}): expected {'an integer' if kind is int else 'a number'}: ")
    assert "ASCII digits 0-9" in problem and "; allowed: " in problem
    assert "set_int_max_str_digits" not in problem


@pytest.mark.parametrize(("env", "path", "kind", "minimum"), NUMBER_KEYS, ids=[k[0] for k in NUMBER_KEYS])
def test_a_minus_sign_only_where_the_range_allows_negatives(env, path, kind, minimum):
    if minimum is not None and minimum < 0:
        config = load_config(data={}, env={env: "-1"}, plugin_sections=SECTIONS)
        section, _, key = path.rpartition(".")
        assert getattr(config.section(section), snake(key)) == -1
        return
    with pytest.raises(ConfigError, match=r"expected (an integer|a number): ASCII digits 0-9"):
        load_config(data={}, env={env: "-1"}, plugin_sections=SECTIONS)


def test_plain_ascii_values_still_load():
    config = load_config(
        data={}, env={"MONO_AGENT_MAX_TURNS": " 12\n", "MONO_AGENT_COMPACTION_TRIGGER_RATIO": "0.75", "MONO_AGENT_SKILL_MAX_BYTES": "0300"},
        plugin_sections=SECTIONS,
    )
    assert config.runtime.max_turns == 12
    assert config.section("runtime.compaction").trigger_ratio == 0.75
    assert config.section("context").skill_max_bytes == 300


@examples(200)
@given(st.text(min_size=1, max_size=12))
def test_an_integer_variable_is_either_ascii_digits_or_a_one_line_error(raw):
    env = {"MONO_AGENT_MAX_TURNS": raw}
    text = raw.strip(" \t\r\n")
    if "\x00" in raw:
        return  # the environment cannot hold NUL
    try:
        config = load_config(data={}, env=env)
    except ConfigError as exc:
        (problem,) = exc.problems
        assert problem.startswith(f"runtime.maxTurns = {raw!r} (from env MONO_AGENT_MAX_TURNS): ")
        assert "\n" not in problem.replace(repr(raw), "")
        return
    assert text.isascii() and text.isdigit() and config.runtime.max_turns == int(text)


@pytest.fixture
def memory_cli(tmp_path, monkeypatch):
    import monoagent._cli as cli_module

    isolate_cli(tmp_path, monkeypatch)
    host = PluginHost()
    host.load_entry_points()
    root = cli_module.build_cli(host)
    (tmp_path / "monoagent.toml").write_text('[memory]\ntiers = ["lite"]\n', encoding="utf-8")
    return lambda *args: CliRunner().invoke(root, list(args))


@pytest.mark.parametrize("raw", ["1_0", "\uff11\uff10", "+5", "\u0661"])
def test_command_line_counts_take_ascii_digits_only(memory_cli, raw):
    result = memory_cli("memory", "list", "--limit", raw)
    assert result.exit_code == 2, result.output
    assert f"{raw!r}: expected an integer: ASCII digits 0-9 only; allowed: 1<=x<=10000" in result.output


def test_a_command_line_count_without_negatives_refuses_a_minus_sign(memory_cli):
    result = memory_cli("memory", "list", "--offset", "-1")
    assert result.exit_code == 2 and "expected an integer: ASCII digits 0-9 only; allowed: x>=0" in result.output
    assert memory_cli("memory", "list", "--limit", "3").exit_code == 0


@pytest.mark.parametrize("raw", ["\u0663", "\uff13", "+3", "0_3", "3.0"])
def test_a_memory_id_takes_ascii_digits_only(memory_cli, raw):
    """``memory forget \u0663`` (Arabic-Indic three) forgot entry 3: ids typed on the command line are
    read as configuration integers are, ASCII digits only."""
    for n in range(3):
        assert memory_cli("memory", "add", "--tier", "lite", f"entry {n}").exit_code == 0
    result = memory_cli("memory", "forget", "--tier", "lite", raw)
    assert result.exit_code == 1 and "has no entry" in result.output, result.output
    assert "entry 2" in memory_cli("memory", "list", "--tier", "lite").output
    assert memory_cli("memory", "forget", "--tier", "lite", "3").exit_code == 0


# --------------------------------------------------------------------------- 6: files the operator points at

# Before the fix these reads never end (a FIFO) or eat memory until the kernel kills the process
# (/dev/zero), so they run in a child with an address-space cap; the timeout is a watchdog that
# turns a hang into a failure, never synchronisation.
CHILD_MEMORY_CAP = 1 << 30
WATCHDOG_SECONDS = 120


def run_child(script: str, *args: str) -> dict:
    prelude = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({CHILD_MEMORY_CAP}, {CHILD_MEMORY_CAP}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script), *args],
        capture_output=True, text=True, timeout=WATCHDOG_SECONDS,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_standard_input_is_read_under_a_cap(tmp_path):
    """``monoagent run - < /dev/zero`` read standard input whole (a MemoryError, or the OOM killer);
    ``memory add -`` and a ``chat`` line without an end did the same. Past the cap: one line, exit 1."""
    from monoagent._cli.terminal import INPUT_MAX_CHARS

    env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
    env.update(MONO_AGENT_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"),
               MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD="1", MONO_AGENT_MEMORY_TIERS="lite", MONO_AGENT_MODEL="offline:echo")

    def cap_memory() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_CAP, CHILD_MEMORY_CAP))

    for args in (["run", "-"], ["prompt", "-"], ["memory", "add", "-"], ["chat"]):
        with open("/dev/zero", "rb") as zero:
            done = subprocess.run([sys.executable, "-m", "monoagent", *args], stdin=zero, capture_output=True,
                                  env=env, cwd=tmp_path, timeout=WATCHDOG_SECONDS, preexec_fn=cap_memory)
        stderr = done.stderr.decode()
        assert done.returncode == 1, (args, stderr[-2000:])
        assert stderr.count("\n") == 1 and f"over the {INPUT_MAX_CHARS:,}-character limit" in stderr, (args, stderr)


BOOTSTRAP_CHILD = """
import asyncio, json, os, sys
from monoagent._kernel.turn_request import TurnRequest
from monoagent.testing import fresh_agent

tmp = sys.argv[1]
fifo = os.path.join(tmp, "fifo.md")
os.mkfifo(fifo)
out = {}
for key in ("soulPath", "identityPath", "userPath"):
    for target in ("/dev/zero", fifo, tmp):
        agent = fresh_agent(os.path.join(tmp, key), config={"context": {key: target}})
        prompt = asyncio.run(agent.assemble(TurnRequest("hello")))
        out[f"{key} {target}"] = [(d.code, d.message, d.section) for d in prompt.manifest.diagnostics]
        agent.close()
print(json.dumps(out))
"""


def test_a_bootstrap_path_to_a_device_fifo_or_directory_is_a_diagnostic_not_a_hang(tmp_path):
    found = run_child(BOOTSTRAP_CHILD, str(tmp_path))
    sections = {"soulPath": ("SOUL.md", "core_guardrails"), "identityPath": ("IDENTITY.md", "identity"),
                "userPath": ("USER.md", "user_persona")}
    assert len(found) == 9
    for case, diagnostics in found.items():
        key = case.split()[0]
        name, section = sections[key]
        unreadable = [d for d in diagnostics if d[0] == "bootstrap_unreadable"]
        assert unreadable == [[
            "bootstrap_unreadable",
            f"{name} could not be read: it is not a regular file (a FIFO, a device, a socket or a directory); not read",
            section,
        ]], (case, diagnostics)
        assert str(tmp_path) not in unreadable[0][1]  # diagnostics never carry the path


@pytest.mark.parametrize("key", ["soulPath", "identityPath", "userPath"])
def test_a_bootstrap_file_over_four_bytes_per_character_of_its_budget_is_not_read(tmp_path, key):
    big = tmp_path / "big.md"
    budget = 64
    big.write_bytes(b"x" * (budget * 4 + 1))
    agent = fresh_agent(tmp_path, config={"context": {key: str(big), "bootstrapMaxChars": budget}})
    prompt = asyncio.run(agent.assemble(TurnRequest("hello")))
    name = {"soulPath": "SOUL.md", "identityPath": "IDENTITY.md", "userPath": "USER.md"}[key]
    messages = [d.message for d in prompt.manifest.diagnostics if d.code == "bootstrap_unreadable" and d.message.startswith(name)]
    assert messages == [
        f"{name} could not be read: it is 257 bytes, over the 256-byte limit "
        "(context.bootstrapMaxChars 64 x 4 bytes per character); not read"
    ]
    assert "xxxx" not in prompt.system_text
    big.write_bytes(b"x" * (budget * 4))  # at the cap: read, then cut to the character budget as before
    prompt = asyncio.run(agent.assemble(TurnRequest("hello")))
    assert "bootstrap_truncated" in {d.code for d in prompt.manifest.diagnostics}
    assert "x" * budget in prompt.system_text and "x" * (budget + 1) not in prompt.system_text
    agent.close()


SWAP_CHILD = """
import asyncio, json, os, sys
from pathlib import Path
from monoagent._kernel.turn_request import TurnRequest
from monoagent.testing import fresh_agent

tmp = Path(sys.argv[1])
soul = tmp / "soul.md"
soul.write_text("Be kind.", encoding="utf-8")
agent = fresh_agent(tmp, config={"context": {"soulPath": str(soul)}})
first = asyncio.run(agent.assemble(TurnRequest("hello")))
stamp = soul.stat()
soul.unlink()
os.mkfifo(soul)
os.utime(soul, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
second = asyncio.run(agent.assemble(TurnRequest("hello")))
print(json.dumps([
    "Be kind." in first.system_text,
    "Be kind." in second.system_text,
    [d.code for d in second.manifest.diagnostics],
]))
agent.close()
"""


def test_a_bootstrap_file_swapped_for_a_fifo_is_not_served_from_the_cache(tmp_path):
    before, after, codes = run_child(SWAP_CHILD, str(tmp_path))
    assert before and not after and "bootstrap_unreadable" in codes


SKILL_CHILD = """
import asyncio, json, os, sys
from monoagent._kernel.turn_request import TurnRequest
from monoagent.testing import fresh_agent

tmp = sys.argv[1]
root = os.path.join(tmp, "skills")
os.makedirs(os.path.join(root, "fifo"))
os.mkfifo(os.path.join(root, "fifo", "SKILL.md"))
os.makedirs(os.path.join(root, "dir", "SKILL.md"))
agent = fresh_agent(tmp, config={"context": {"skillsRoot": root, "selectedSkills": ["fifo", "dir"]}})
prompt = asyncio.run(agent.assemble(TurnRequest("hello")))
print(json.dumps([(d.code, d.message) for d in prompt.manifest.diagnostics if d.code.startswith("skill")]))
agent.close()
"""


def test_a_skill_that_is_a_fifo_or_a_directory_is_left_out_with_a_diagnostic(tmp_path):
    found = run_child(SKILL_CHILD, str(tmp_path))
    reason = "SKILL.md could not be read: it is not a regular file (a FIFO, a device, a socket or a directory); not read"
    assert found == [["skill_unreadable", f"skill 'fifo': {reason}"], ["skill_unreadable", f"skill 'dir': {reason}"]]


def test_a_skill_over_its_budget_plus_front_matter_room_is_not_read(tmp_path):
    root = tmp_path / "skills"
    (root / "huge").mkdir(parents=True)
    (root / "huge" / "SKILL.md").write_bytes(b"y" * (256 + 64 * 1024 + 1))
    (root / "long").mkdir()
    (root / "long" / "SKILL.md").write_bytes(b"z" * (256 + 64 * 1024))  # at the cap: read and truncated as before
    agent = fresh_agent(tmp_path, config={"context": {"skillsRoot": str(root), "selectedSkills": ["huge", "long"], "skillMaxBytes": 256}})
    prompt = asyncio.run(agent.assemble(TurnRequest("hello")))
    found = [(d.code, d.message) for d in prompt.manifest.diagnostics if d.code.startswith("skill")]
    assert found[0] == (
        "skill_unreadable",
        "skill 'huge': SKILL.md could not be read: it is 65,793 bytes, over the 65,792-byte limit "
        "(context.skillMaxBytes 256 + 64 KiB); not read",
    )
    assert found[1][0] == "skill_truncated" and "- long" in prompt.system_text and "- huge" not in prompt.system_text
    agent.close()


@pytest.mark.parametrize("front", ["[" * 100_000, "- " * 50_000 + "x", "{a: " * 50_000, "".join(" " * i + "a:\n" for i in range(300))])
def test_deep_front_matter_is_invalid_front_matter_not_a_recursion_error(tmp_path, front):
    root = tmp_path / "skills"
    (root / "deep").mkdir(parents=True)
    (root / "deep" / "SKILL.md").write_text(f"---\n{front}\n---\nbody\n", encoding="utf-8")
    agent = fresh_agent(tmp_path, config={"context": {"skillsRoot": str(root), "selectedSkills": ["deep"], "skillMaxBytes": 200_000}})
    prompt = asyncio.run(agent.assemble(TurnRequest("hello")))
    found = [(d.code, d.message) for d in prompt.manifest.diagnostics if d.code.startswith("skill")]
    assert found[0][0] == "skill_front_matter_invalid", found
    assert "more than 64 levels deep" in found[0][1] or "not valid YAML" in found[0][1]
    assert "- deep" in prompt.system_text and "body" in prompt.system_text
    agent.close()


DEEP_CONFIG_CHILD = """
import json, sys
from pathlib import Path
from monoagent._kernel.config_loading import load_config
from monoagent._kernel.errors import ConfigError

def deep(depth):
    return "[" * depth + "]" * depth

cases = {
    "json-array": ("monoagent.json", '{"runtime": ' + deep(100_000) + "}"),
    "json-object": ("monoagent.json", '{"a": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001),
    "toml-array": ("monoagent.toml", "a = " + deep(100_000)),
    "toml-inline-table": ("monoagent.toml", "a = " + "{b = " * 100_000 + "1" + "}" * 100_000),
    "toml-dotted-key": ("monoagent.toml", "a" + ".a" * 100_000 + " = 1"),  # nests without a bracket
    "toml-table-header": ("monoagent.toml", "[a" + ".a" * 100_000 + "]"),
    "toml-quoted-dotted-key": ("monoagent.toml", "a" + ' . "a"' * 100_000 + " = 1"),
}
out = {}
for case, (name, text) in cases.items():
    path = Path(sys.argv[1]) / case / name
    path.parent.mkdir()
    path.write_text(text, encoding="utf-8")
    try:
        load_config(path, env={})
    except ConfigError as exc:
        out[case] = [str(path), exc.problems]
    except BaseException as exc:
        out[case] = [str(path), type(exc).__name__]
print(json.dumps(out))
"""


def test_a_deeply_nested_config_file_is_a_one_line_config_error(tmp_path):
    # In a child under a memory cap: before the fix tomllib's memory grows with the square of a
    # dotted key's length, which would take the test process (and the machine) down.
    found = run_child(DEEP_CONFIG_CHILD, str(tmp_path))
    assert len(found) == 7
    for case, (path, problems) in found.items():
        assert isinstance(problems, list) and len(problems) == 1, (case, problems)
        assert problems[0].startswith(f"{path}: "), (case, problems)
        assert re.search(r"more than 64 (levels deep|parts) \(at most 64 allowed\); refused$", problems[0]), (case, problems)


TRICKY_TOML = """\
# BRACKETS
[plugins]
block = ['BRACKETS', "BRACKETS", '''
BRACKETS''', \"\"\"
\\\"\"\"BRACKETS\"\"\", "a.b.c.d", 'x # [[ ']
"""


def test_the_nesting_limit_counts_only_brackets_outside_strings_and_comments(tmp_path):
    brackets = "[{" * 500
    json_path = tmp_path / "monoagent.json"
    json_path.write_text(json.dumps({"plugins": {"block": [brackets, 'x\\"[[']}}), encoding="utf-8")
    assert load_config(json_path, env={}).plugins.block == [brackets, 'x\\"[[']
    toml_path = tmp_path / "monoagent.toml"
    toml_path.write_text(TRICKY_TOML.replace("BRACKETS", brackets), encoding="utf-8")
    assert load_config(toml_path, env={}).plugins.block == [brackets, brackets, brackets, '"""' + brackets, "a.b.c.d", "x # [[ "]
    dotted = tmp_path / "dotted.toml"
    dotted.write_text("runtime" + " . x" * 62 + " = 1\nvalues = [1.5, 2.5, 1979-05-27T07:32:00.999]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown key"):  # 63 parts: parsed, then validated
        load_config(dotted, env={})


@examples(60)
@given(depth=st.integers(1, 120), syntax=st.sampled_from(["json", "toml"]), noise=st.text("[]{}\"'\\#\n .ab", max_size=20))
def test_generated_nesting_is_parsed_or_refused_by_depth(tmp_path_factory, depth, syntax, noise):
    from monoagent._boundary.documents import DocumentError, load_document

    path = tmp_path_factory.mktemp("doc") / f"doc.{syntax}"
    value: object = noise
    for level in range(depth - 1):
        value = [value] if level % 2 else {"k": value}
    document = {"top": value}
    if syntax == "json":
        path.write_text(json.dumps(document), encoding="utf-8")
    else:
        import tomli_w

        path.write_text(tomli_w.dumps(document), encoding="utf-8")
    levels = depth  # the top-level table and depth - 1 tables or arrays inside it
    if levels > 64:
        with pytest.raises(DocumentError, match=r"more than 64 (levels deep|parts)"):
            load_document(path, max_bytes=1 << 20, what="test document")
    else:
        assert load_document(path, max_bytes=1 << 20, what="test document") == document


@pytest.mark.parametrize(("name", "text"), [("monoagent.json", '{"runtime": {"maxTurns": 1' + "0" * 5000 + "}}"),
                                           ("monoagent.toml", "[runtime]\nmaxTurns = 1" + "0" * 5000 + "\n")])
def test_an_integer_past_pythons_digit_limit_in_a_config_file_is_a_config_error(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    (problem,) = info.value.problems
    assert problem.startswith(f"{path}: not valid {name.rpartition('.')[2].upper()}: ") and "\n" not in problem


CONFIG_CHILD = """
import json, os, sys
from pathlib import Path
from monoagent._kernel.config_loading import load_config, read_config_file
from monoagent._kernel.errors import ConfigError

tmp = Path(sys.argv[1])
fifo = tmp / "fifo.toml"
os.mkfifo(fifo)
(tmp / "zero.toml").symlink_to("/dev/zero")
out = {}
for name in ("fifo.toml", "zero.toml"):
    for how, read in (("discovered", lambda path: load_config(path, env={})), ("read", read_config_file)):
        try:
            read(tmp / name)
        except ConfigError as exc:
            out[f"{name} {how}"] = exc.problems
print(json.dumps(out))
"""


def test_a_config_path_that_is_a_fifo_or_a_device_is_refused(tmp_path):
    # read_config_file is checked on its own too: the file may be swapped between discovery and the read
    found = run_child(CONFIG_CHILD, str(tmp_path))
    assert sorted(found) == ["fifo.toml discovered", "fifo.toml read", "zero.toml discovered", "zero.toml read"]
    for case, problems in found.items():
        assert len(problems) == 1, (case, problems)
        if case.endswith("read"):
            assert problems[0] == f"config file {tmp_path / case.split()[0]} is {'a FIFO' if 'fifo' in case else 'a character device'}, not a regular file; refused"


def test_an_oversized_config_file_is_refused_before_it_is_read(tmp_path):
    from monoagent._kernel.config_loading import CONFIG_MAX_BYTES, read_config_file

    path = tmp_path / "monoagent.toml"
    path.write_bytes(b"# " + b"x" * CONFIG_MAX_BYTES)
    with pytest.raises(ConfigError) as info:
        read_config_file(path)
    assert info.value.problems == [
        f"config file {path} is {CONFIG_MAX_BYTES + 2:,} bytes, over the {CONFIG_MAX_BYTES:,}-byte limit; refused"
    ]


SCRIPT_CHILD = """
import json, os, sys
from pathlib import Path
from monoagent._kernel.errors import ConfigError
from monoagent_plugins.providers.offline import load_script

tmp = Path(sys.argv[1])
fifo = tmp / "fifo.json"
os.mkfifo(fifo)
(tmp / "zero.json").symlink_to("/dev/zero")
(tmp / "deep.json").write_text('{"steps": [{"text": "x", "tool_calls": [{"name": "t", "arguments": {"a": ' + "[" * 100000 + "]" * 100000 + '}}]}]}')
(tmp / "deep.toml").write_text("[[steps]]\\ntext = 'x'\\ntool_calls = [{name = 't', arguments = {a = " + "[" * 100000 + "]" * 100000 + "}}]\\n")
out = {}
for name in ("fifo.json", "zero.json", "deep.json", "deep.toml"):
    try:
        load_script(tmp / name)
    except ConfigError as exc:
        out[name] = exc.problems
print(json.dumps(out))
"""


def test_an_offline_script_that_is_a_fifo_a_device_or_deep_is_a_one_line_error(tmp_path):
    found = run_child(SCRIPT_CHILD, str(tmp_path))
    assert set(found) == {"fifo.json", "zero.json", "deep.json", "deep.toml"}
    for problems in found.values():
        assert len(problems) == 1 and "\n" not in problems[0] and problems[0].startswith("offline:scripted: "), problems
    assert "not a regular file; refused" in found["fifo.json"][0] and "not a regular file; refused" in found["zero.json"][0]
    assert "more than 64 levels deep" in found["deep.json"][0] and "more than 64 levels deep" in found["deep.toml"][0]


def test_an_oversized_offline_script_is_refused_before_it_is_read(tmp_path):
    from monoagent_plugins.providers.offline import SCRIPT_MAX_BYTES, load_script

    path = tmp_path / "script.json"
    with path.open("wb") as handle:
        handle.truncate(SCRIPT_MAX_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ConfigError, match=r"script .* is 16,777,217 bytes, over the 16,777,216-byte limit; refused"):
        load_script(path)


PLUGIN_CHILD = """
import json, os, sys
from monoagent.testing import fresh_agent

tmp = sys.argv[1]
plugins = os.path.join(tmp, "plugins")
os.makedirs(plugins)
os.mkfifo(os.path.join(plugins, "afifo.py"))
with open(os.path.join(plugins, "good.py"), "w") as handle:
    handle.write("from monoagent._kernel.hookspecs import hookimpl\\n")
agent = fresh_agent(tmp, config={"plugins": {"paths": [plugins], "localFailures": "warn"}})
print(json.dumps({r.name: [r.status, r.reason] for r in agent.host.records if r.source == "local"}))
agent.close()
"""


def test_a_fifo_among_local_plugin_files_is_reported_by_name_and_the_rest_loads(tmp_path):
    found = run_child(PLUGIN_CHILD, str(tmp_path))
    assert found["good"][0] == "active"
    assert found["afifo"][0] == "failed" and "not a regular file; refused" in found["afifo"][1]


# --------------------------------------------------------------------------- 16: a commit that fails or is cancelled


class NearlyFullDisk(FsOps):
    """File-system operations of a disk with ``free`` bytes left: a stage that would grow past
    them fails with ENOSPC (a failed stage is unlinked, so its space comes back)."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.written: dict[int, int] = {}

    def open(self, path, flags, mode=0o600):
        fd = super().open(path, flags, mode)
        self.written[fd] = 0
        return fd

    def write(self, fd, data):
        if self.written.get(fd, 0) + len(data) > self.free:
            raise OSError(errno.ENOSPC, "No space left on device (test disk)")
        count = super().write(fd, data)
        self.written[fd] = self.written.get(fd, 0) + count
        return count

    def close(self, fd):
        self.written.pop(fd, None)
        super().close(fd)


class Capture:
    """Records what ``after_commit`` (memory capture) saw."""

    def __init__(self) -> None:
        self.captured: list[str] = []

    @hookimpl
    def after_commit(self, turn, result):
        self.captured.append(result.text)


class StorePlugin:
    """Registers the store ``build(history_dir)`` makes as history store ``test``."""

    def __init__(self, build) -> None:
        self.build = build

    @hookimpl
    def register_history_stores(self, register):
        register("test", lambda agent: self.build(agent.config.history_dir))


def store_agent(tmp_path, steps, build):
    capture = Capture()
    agent = scripted_agent(tmp_path, steps, config={"history": {"store": "test"}}, plugins=[StorePlugin(build), capture])
    return agent, capture


def history_of(agent, conversation="c"):
    return [m.content for m in asyncio.run(agent.history_store.load(conversation))]


def test_a_commit_that_hits_a_full_disk_publishes_the_continuity_account(tmp_path):
    answer = "The long answer. " * 2500  # 42,500 bytes: its stage does not fit, an account does
    agent, capture = store_agent(
        tmp_path, [{"text": "short"}, {"text": answer}], lambda root: FilesHistoryStore(root, fs=NearlyFullDisk(24 * 1024))
    )
    agent.run_sync("first", conversation_id="c")
    events = []
    with pytest.raises(CommitFailed, match=r"not committed to history \(HistoryWriteError: .*No space left on device") as info:
        agent.run_sync("second", conversation_id="c", on_event=events.append)
    assert isinstance(info.value.__cause__, HistoryStoreError)
    types = [e.type for e in events]
    assert "run_committed" not in types and "run_completed" not in types
    assert types[-2:] == ["continuity_account", "run_failed"]
    assert events[-2].data["outcome"] == "failed"
    stored = history_of(agent)
    assert stored[:3] == ["first", "short", "second"] and len(stored) == 4
    assert stored[3].startswith(ACCOUNT_HEADER) and "Status: failed (settlement: commit_failed)" in stored[3]
    assert "The long answer." in stored[3]  # the partial text it had, bounded to 8 KiB
    assert capture.captured == ["short"]  # memory capture never runs for an account
    agent.close()


@examples(25)
@given(free=st.integers(2_000, 80_000), answer_bytes=st.integers(1, 60_000))  # under the 64 KiB message cap
def test_any_full_disk_either_commits_the_answer_or_publishes_an_account_never_both(tmp_path_factory, free, answer_bytes):
    tmp_path = tmp_path_factory.mktemp("disk")
    answer = ("word " * (answer_bytes // 5 + 1))[:answer_bytes].strip() or "w"
    agent, capture = store_agent(tmp_path, [{"text": answer}], lambda root: FilesHistoryStore(root, fs=NearlyFullDisk(free)))
    events = []
    try:
        result = agent.run_sync("question", conversation_id="c", on_event=events.append)
    except CommitFailed:
        result = None
    types = [e.type for e in events]
    stored = history_of(agent)
    if result is not None:
        assert types[-1] == "run_completed" and "continuity_account" not in types
        assert stored == ["question", answer] and capture.captured == [answer]
    else:
        assert types[-1] == "run_failed" and "run_committed" not in types and capture.captured == []
        if "continuity_account" in types:  # the account fitted the disk
            assert stored[0] == "question" and stored[1].startswith(ACCOUNT_HEADER) and len(stored) == 2
            assert "settlement: commit_failed" in stored[1]
        else:  # not even the account fitted: said so, nothing half-written
            assert stored == []
            assert any(e.type == "runtime_warning" and e.data.get("code") == "continuity_publication_failed" for e in events)
    agent.close()


FILE_SIZE_LIMIT_CHILD = """
import asyncio, json, resource, signal, sys
from monoagent._kernel.errors import CommitFailed
from monoagent.testing import scripted_agent

tmp = sys.argv[1]
agent = scripted_agent(tmp, [{"text": "short"}, {"text": "A long answer. " * 4000}])
agent.run_sync("first", conversation_id="c")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))  # the 60 KB answer's record cannot be written
events = []
try:
    agent.run_sync("second", conversation_id="c", on_event=events.append)
    outcome = None
except CommitFailed as exc:
    outcome = str(exc)
stored = [m.content for m in asyncio.run(agent.history_store.load("c"))]
print(json.dumps({"outcome": outcome, "types": [e.type for e in events], "stored": stored}))
"""


def test_a_commit_over_the_file_size_limit_publishes_the_account(tmp_path):
    found = run_child(FILE_SIZE_LIMIT_CHILD, str(tmp_path))
    assert found["outcome"] and "File too large" in found["outcome"]
    assert found["types"][-2:] == ["continuity_account", "run_failed"] and "run_committed" not in found["types"]
    stored = found["stored"]
    assert stored[:3] == ["first", "short", "second"] and len(stored) == 4
    assert stored[3].startswith(ACCOUNT_HEADER) and "settlement: commit_failed" in stored[3]


class SyncFailsAfterPublishing(FsOps):
    """A disk whose directory fsync fails once when armed: the record is already renamed into
    place, so the store has published the turn and then raises (a store that commits, then fails)."""

    armed = False

    def fsync_dir(self, path):
        if self.armed:
            self.armed = False
            raise OSError(errno.EIO, "Input/output error (test disk)")
        super().fsync_dir(path)


def test_a_commit_that_lands_and_then_raises_is_not_followed_by_an_account(tmp_path):
    fs = SyncFailsAfterPublishing()
    agent, capture = store_agent(tmp_path, [{"text": "one"}, {"text": "two"}], lambda root: FilesHistoryStore(root, fs=fs))
    agent.run_sync("first", conversation_id="c")
    fs.armed = True
    events = []
    result = agent.run_sync("second", conversation_id="c", on_event=events.append)
    assert result.text == "two"
    types = [e.type for e in events]
    assert "continuity_account" not in types and "run_failed" not in types
    assert types[-2:] == ["run_committed", "run_completed"]
    (warning,) = [e.data for e in events if e.type == "runtime_warning" and e.data["code"] == "commit_not_confirmed"]
    assert "Input/output error" in warning["error"]
    assert history_of(agent) == ["first", "one", "second", "two"]  # the answer, and no account beside it
    assert capture.captured == ["one", "two"]
    agent.close()


class ThreadGatedStore:
    """A files store whose commits of answers wait, in the worker thread, for the test's gate, as
    a real store's commit runs on in its thread whatever happens to the coroutine awaiting it."""

    def __init__(self, root, fail=None) -> None:
        self.inner = FilesHistoryStore(root)
        self.name = self.inner.name
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.fail = fail

    async def load(self, conversation_id, **kwargs):
        return await self.inner.load(conversation_id, **kwargs)

    def _commit(self, conversation_id, messages):
        if not messages[-1].content.startswith(ACCOUNT_HEADER):
            self.entered.set()
            self.gate.wait()
            if self.fail is not None:
                raise self.fail
        return self.inner._commit(conversation_id, messages)

    async def commit(self, conversation_id, messages):
        return await asyncio.to_thread(self._commit, conversation_id, list(messages))

    async def reset(self, conversation_id):
        return await self.inner.reset(conversation_id)

    async def conversations(self):
        return await self.inner.conversations()

    async def close(self):
        await self.inner.close()


def cancel_during_commit(agent, cancels=1):
    store = agent.history_store

    async def main():
        events = []
        task = asyncio.create_task(agent.respond(TurnRequest("q", conversation_id="c"), on_event=events.append))
        await asyncio.to_thread(store.entered.wait)  # the commit is under way in its thread
        for _ in range(cancels):
            task.cancel("user_cancelled")
            await asyncio.sleep(0)  # not synchronisation: lets each cancellation be delivered on its own
        store.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        return events

    return asyncio.run(main())


@pytest.mark.parametrize("cancels", [1, 3])
def test_a_cancel_during_a_commit_that_lands_completes_the_run_then_reaches_the_caller(tmp_path, cancels):
    agent, capture = store_agent(tmp_path, [{"text": "the answer"}], ThreadGatedStore)
    events = cancel_during_commit(agent, cancels)
    types = [e.type for e in events]
    assert types[-2:] == ["run_committed", "run_completed"], types
    assert "run_cancelled" not in types and "continuity_account" not in types
    assert history_of(agent) == ["q", "the answer"]
    assert capture.captured == ["the answer"]  # memory capture ran for the committed answer
    agent.close()


def test_a_cancel_during_a_commit_that_fails_publishes_the_account_and_nothing_else(tmp_path):
    failure = OSError(errno.ENOSPC, "No space left on device (test)")
    agent, capture = store_agent(tmp_path, [{"text": "the answer"}], lambda root: ThreadGatedStore(root, fail=failure))
    events = cancel_during_commit(agent)
    types = [e.type for e in events]
    assert types[-2:] == ["continuity_account", "run_cancelled"] and "run_committed" not in types
    stored = history_of(agent)
    assert stored[0] == "q" and len(stored) == 2 and stored[1].startswith(ACCOUNT_HEADER)
    assert "Status: cancelled (reason: user_cancelled)" in stored[1]
    assert capture.captured == []
    agent.close()


# --------------------------------------------------------------------------- 17: a tool-history sidecar locked at first open


class Monotonic:
    """An injected monotonic clock: the back-off moves only when the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Echo:
    @hookimpl
    def register_tools(self, register):
        register(ToolSpec("echo", "Echo text back."), lambda context: str(context.arguments.get("text", "")))


class InjectedSidecar:
    """Registers the tool-history sidecar as ``injected``, with short lock waits and an injected clock."""

    def __init__(self, clock, lock_wait_ms=50) -> None:
        self.retry = OpenRetry(lock_wait_ms=lock_wait_ms, probe_wait_ms=lock_wait_ms, clock=clock)

    @hookimpl
    def register_tool_history_stores(self, register):
        register("injected", lambda agent: SqliteToolHistory(
            agent.config.history_dir, agent.config.section("toolHistory"), agent.redact, retry=self.retry
        ))


def sidecar_agent(tmp_path, turns, clock, **settings):
    steps = []
    for index in range(turns):
        steps += [{"tool_calls": [{"name": "echo", "arguments": {"text": f"call {index}"}}]}, {"text": f"done {index}"}]
    tool_history = {"store": "injected", "confirmTimeoutMs": 60_000, **settings}
    config = {"toolHistory": tool_history, "runtime": {"session": {"mode": "per-message"}}}  # every turn reads the projection
    return scripted_agent(tmp_path, steps, config=config, plugins=[Echo(), InjectedSidecar(clock)])


def make_sidecar(history_dir) -> Path:
    store = SqliteToolHistory(history_dir, ToolHistoryConfig(), lambda text, kind: text)
    asyncio.run(store.flush())
    asyncio.run(store.close())
    return history_dir / SIDECAR


@contextlib.contextmanager
def warnings_logged():
    """monoagent's WARNING records while active (as a library it logs nothing unless enabled)."""
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="WARNING")
    for package in ("monoagent", "monoagent_plugins"):
        logger.enable(package)
    try:
        yield lines
    finally:
        for package in ("monoagent", "monoagent_plugins"):
            logger.disable(package)
        logger.remove(sink)


def sqlite_lock_in_this_process(sidecar):
    holder = sqlite3.connect(sidecar, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    return lambda: (holder.execute("ROLLBACK"), holder.close())


SQLITE_LOCK_CHILD = """
import sqlite3, sys
holder = sqlite3.connect(sys.argv[1], isolation_level=None)
holder.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()  # held until the test closes our stdin
"""


def sqlite_lock_in_another_process(sidecar):
    child = subprocess.Popen([sys.executable, "-c", SQLITE_LOCK_CHILD, str(sidecar)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "locked"

    def release():
        child.stdin.close()
        assert child.wait(timeout=WATCHDOG_SECONDS) == 0

    return release


def owner_lock_held(sidecar):
    fd = os.open(sidecar.parent.parent / OWNER_LOCK, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another open file description: this process's writer cannot take it either
    return lambda: os.close(fd)


LOCKS_AT = [
    (sqlite_lock_in_this_process, "first open"),
    (sqlite_lock_in_another_process, "first open"),
    (owner_lock_held, "first open"),
    (sqlite_lock_in_this_process, "after open"),
    (sqlite_lock_in_another_process, "after open"),
]


@pytest.mark.parametrize(("lock", "when"), LOCKS_AT, ids=[f"{lock.__name__}-{when}" for lock, when in LOCKS_AT])
def test_a_locked_sidecar_degrades_once_and_recovers_when_the_lock_goes(tmp_path, lock, when):
    clock = Monotonic()
    agent = sidecar_agent(tmp_path, 5, clock)
    sidecar = make_sidecar(agent.config.history_dir)
    if when == "after open":
        asyncio.run(agent.tool_history_store().flush())  # this process's writer has the sidecar open before the lock is taken
    release = lock(sidecar)
    try:
        with warnings_logged() as logged:
            runs = []
            for index in range(3):
                events = []
                assert agent.run_sync(f"turn {index}", conversation_id="c", on_event=events.append).text == f"done {index}"
                runs.append(events)
            for events in runs:
                calls = [e.data for e in events if e.type in ("tool_call", "tool_result")]
                assert [c["persistence"] for c in calls] == ["failed", "failed"]
                assert "ToolHistoryUnavailable" in calls[0]["persistence_error"]
                warnings = [e.data for e in events if e.type == "runtime_warning"]
                written = [w for w in warnings if w["code"] == "tool_history_write_failed"]
                assert len(written) == 1 and "2 tool-history records of this run not written" in written[0]["error"]
                assert [w["code"] for w in warnings if w not in written] in ([], ["tool_history_projection_degraded"])
            for events in runs[1:]:  # the projection no longer waits on the lock either
                assert "tool_history_projection_degraded" in [e.data["code"] for e in events if e.type == "runtime_warning"]
            assert agent.tool_history_store().writer.open_failures == 1  # one attempt; later writes wait for the back-off
            assert agent.tool_history_store().unavailable is not None
            assert len([line for line in logged if "is unavailable" in line]) == 1  # once, not per write
            release()
            release = None
            events = []
            agent.run_sync("turn 3", conversation_id="c", on_event=events.append)  # still inside the back-off
            assert [e.data["persistence"] for e in events if e.type == "tool_call"] == ["failed"]
            clock.now += OpenRetry().first_delay
            events = []
            agent.run_sync("turn 4", conversation_id="c", on_event=events.append)
            assert [e.data["persistence"] for e in events if e.type in ("tool_call", "tool_result")] == ["persisted", "persisted"]
            assert not [e for e in events if e.type == "runtime_warning"]
            prompt = asyncio.run(agent.assemble(TurnRequest("next", conversation_id="c")))
            assert "call 4" in prompt.system_text  # the projection reads the recorded call again
            assert agent.tool_history_store().unavailable is None
            assert len([line for line in logged if "reachable again" in line]) == 1
            assert len([line for line in logged if "is unavailable" in line]) == 1
        recorded = asyncio.run(agent.tool_history_store().records(conversation_id="c"))
        assert [(r.tool, r.status, r.arguments) for r in recorded] == [("echo", "success", '{"text":"call 4"}')]
    finally:
        if release is not None:
            release()
        agent.close()


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_sidecar_deleted_or_replaced_under_the_open_writer_is_opened_again(tmp_path, how):
    """An operator who moves a damaged sidecar aside (or clears it) while a process runs: the
    writer's connection still points at the old file, where SQLite refuses every write
    (SQLITE_READONLY_DBMOVED); the writer opens the file at its path again instead of failing
    every later write for the life of the process."""
    agent = sidecar_agent(tmp_path, 2, Monotonic())
    try:
        agent.run_sync("turn 0", conversation_id="c")
        sidecar = Path(agent.config.history_dir) / SIDECAR
        if how == "replaced":  # by an empty sidecar made elsewhere (this process's writer of this one is busy failing)
            os.replace(make_sidecar(tmp_path / "elsewhere"), sidecar)
        else:
            sidecar.unlink()
        events = []
        agent.run_sync("turn 1", conversation_id="c", on_event=events.append)
        assert [e.data["persistence"] for e in events if e.type in ("tool_call", "tool_result")] == ["persisted", "persisted"]
        assert not [e for e in events if e.type == "runtime_warning" and e.data["code"] == "tool_history_write_failed"]
        recorded = asyncio.run(agent.tool_history_store().records(conversation_id="c"))
        assert [(r.tool, r.status, r.arguments) for r in recorded] == [("echo", "success", '{"text":"call 1"}')]
    finally:
        agent.close()


def test_the_back_off_doubles_up_to_its_ceiling():
    retry = OpenRetry(first_delay=1.0, max_delay=60.0)
    assert [retry.delay(n) for n in (1, 2, 3, 4, 5, 6, 7, 8, 10_000)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]


def test_writes_that_fail_after_their_run_stopped_waiting_leave_no_unretrieved_future(tmp_path):
    clock = Monotonic()
    agent = sidecar_agent(tmp_path, 1, clock, confirmTimeoutMs=1, reconcileTimeoutMs=1, projectionMaxCalls=0)
    release = sqlite_lock_in_this_process(make_sidecar(agent.config.history_dir))
    unhandled: list[dict] = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: unhandled.append(context))
        writer = agent.tool_history_store().writer
        writer.gate.clear()  # the writer holds every write: the run defers them and stops waiting
        events = []
        await agent.respond(TurnRequest("go", conversation_id="c"), on_event=events.append)
        assert [e.data["persistence"] for e in events if e.type in ("tool_call", "tool_result")] == ["deferred", "deferred"]
        assert "still not confirmed" in next(e for e in events if e.type == "runtime_warning").data["error"]
        writer.gate.set()  # now the writer meets the locked sidecar and rejects all of them
        await asyncio.to_thread(writer.submit(lambda db: None).exception)
        for _ in range(10):
            await asyncio.sleep(0)  # run the callbacks the writer thread already queued on this loop
        gc.collect()
        await asyncio.sleep(0)

    try:
        asyncio.run(main())
        gc.collect()
    finally:
        release()
        agent.close()
    assert [c.get("message") for c in unhandled] == []


class HoldWriter:
    """A tool that closes the writer's gate: its result record waits until the test opens it."""

    @hookimpl
    def register_tools(self, register):
        def hold(context):
            context.agent.tool_history_store().writer.gate.clear()
            return "held"

        register(ToolSpec("hold", "Hold the tool-history writer."), hold)


def test_a_write_rejected_after_its_run_stopped_waiting_is_logged(tmp_path):
    steps = [{"text": "first"}, {"tool_calls": [{"name": "hold", "arguments": {}}]}, {"text": "second"}]
    config = {"toolHistory": {"store": "injected", "projectionMaxCalls": 0, "confirmTimeoutMs": 1, "reconcileTimeoutMs": 1}}
    agent = scripted_agent(tmp_path, steps, config=config, plugins=[HoldWriter(), InjectedSidecar(Monotonic())])
    agent.run_sync("first", conversation_id="c")
    writer = agent.tool_history_store().writer
    asyncio.run(agent.tool_history_store().flush())  # the sidecar exists
    db = sqlite3.connect(agent.config.history_dir / SIDECAR)
    db.execute("CREATE TRIGGER refuse BEFORE UPDATE ON calls BEGIN SELECT RAISE(ABORT, 'refused by test'); END")
    db.commit()
    db.close()

    async def main():
        events = []
        await agent.respond(TurnRequest("second", conversation_id="c"), on_event=events.append)
        writer.gate.set()  # the run is over; now the writer meets the trigger
        await asyncio.to_thread(writer.submit(lambda db: None).result)
        for _ in range(10):
            await asyncio.sleep(0)  # run the callbacks the writer thread already queued on this loop
        return events

    with warnings_logged() as logged:
        events = asyncio.run(main())
    result = next(e for e in events if e.type == "tool_result")
    assert result.data["persistence"] == "deferred"
    assert any(e.type == "runtime_warning" and "still not confirmed" in e.data["error"] for e in events)
    assert [line for line in logged if "failed after the run was finalised" in line and "refused by test" in line]
    agent.close()
