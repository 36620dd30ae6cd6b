"""Hostile inputs against records and operator files (issue 8, items 6, 16, 17 and 19).

* 19: integers and numbers typed as text (``MONO_AGENT_*`` variables, command-line counts) take
  ASCII digits only.
"""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from monoagent.config import _field_type, _unwrap_optional, iter_keys, load_config
from monoagent.errors import ConfigError
from monoagent.testing import fresh_agent

# --------------------------------------------------------------------------- 19: ASCII digits only


def _number_keys() -> list[tuple[str, str, type, float]]:
    """(env var, key path, int or float, minimum) of every number key with an env var, plugins' too."""
    sections = fresh_agent_sections()
    keys = list(iter_keys())
    for path, cls in sections.items():
        keys += iter_keys(cls, path + ".")
    found = []
    for key in keys:
        base, _ = _unwrap_optional(_field_type(key.owner, key.attribute))
        if key.env and base in (int, float):
            found.append((key.env, key.path, base, key.attribute.metadata.get("min")))
    return found


_sections: dict[str, type] = {}


def fresh_agent_sections() -> dict[str, type]:
    if not _sections:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            agent = fresh_agent(tmp)
            _sections.update(agent.host.config_sections())
            agent.close()
    return _sections


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
        load_config(data={}, env={env: raw}, plugin_sections=fresh_agent_sections())
    (problem,) = info.value.problems
    assert problem.startswith(f"{path} = {raw!r} (from env {env}): expected {'an integer' if kind is int else 'a number'}: ")
    assert "ASCII digits 0-9" in problem and "; allowed: " in problem
    assert "set_int_max_str_digits" not in problem


@pytest.mark.parametrize(("env", "path", "kind", "minimum"), NUMBER_KEYS, ids=[k[0] for k in NUMBER_KEYS])
def test_a_minus_sign_only_where_the_range_allows_negatives(env, path, kind, minimum):
    if minimum is not None and minimum < 0:
        value = load_config(data={}, env={env: "-1"}, plugin_sections=fresh_agent_sections())
        assert value is not None
        return
    with pytest.raises(ConfigError, match=r"expected (an integer|a number): ASCII digits 0-9"):
        load_config(data={}, env={env: "-1"}, plugin_sections=fresh_agent_sections())


def test_plain_ascii_values_still_load():
    config = load_config(
        data={}, env={"MONO_AGENT_MAX_TURNS": " 12\n", "MONO_AGENT_COMPACTION_TRIGGER_RATIO": "0.75", "MONO_AGENT_SKILL_MAX_BYTES": "0300"}
    )
    assert config.runtime.max_turns == 12
    assert config.runtime.compaction.trigger_ratio == 0.75
    assert config.context.skill_max_bytes == 300


@settings(max_examples=200, deadline=None)
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
    import monoagent.cli as cli_module
    from monoagent.plugins import PluginHost

    for name in list(os.environ):
        if name.startswith("MONO_AGENT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MONO_AGENT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli_module, "_configure_logging", lambda debug: None)
    host = PluginHost()
    host.load_entry_points()
    host.call_each("register_commands", cli=cli_module.cli)
    monkeypatch.setattr(cli_module, "_EARLY", {"host": host})
    (tmp_path / "monoagent.toml").write_text('[memory]\ntiers = ["lite"]\n', encoding="utf-8")
    return lambda *args: CliRunner().invoke(cli_module.cli, list(args))


@pytest.mark.parametrize("raw", ["1_0", "\uff11\uff10", "+5", "\u0661"])
def test_command_line_counts_take_ascii_digits_only(memory_cli, raw):
    result = memory_cli("memory", "list", "--limit", raw)
    assert result.exit_code == 2, result.output
    assert f"{raw!r}: expected an integer: ASCII digits 0-9 only; allowed: 1<=x<=10000" in result.output


def test_a_command_line_count_without_negatives_refuses_a_minus_sign(memory_cli):
    result = memory_cli("memory", "list", "--offset", "-1")
    assert result.exit_code == 2 and "expected an integer: ASCII digits 0-9 only; allowed: x>=0" in result.output
    assert memory_cli("memory", "list", "--limit", "3").exit_code == 0
