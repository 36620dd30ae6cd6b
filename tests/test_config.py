"""Configuration: env overlay, precedence, validation messages, discovery, paths, ``config init``.

Every test passes its environment explicitly (or isolates ``os.environ``), runs in its own
working directory and points the user config dir into ``tmp_path``, so the developer's own
``monoagent.toml`` and ``MONO_AGENT_*`` variables never leak in.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
import typing
from pathlib import Path
from typing import Any, Literal

import attrs
import platformdirs
import pytest
import tomli_w

from devtools.docgen import bundled_config_sections
from monoagent._cli.starter import starter_toml
from monoagent._kernel.config import (
    CONFIG_FILENAME,
    STATE_DIRNAME,
    Config,
    _check_timezone,
    check_model,
    check_models,
    setting,
)
from monoagent._kernel.config_keys import KeyInfo, field_type, iter_keys, table_keys, unwrap_optional, value_sources
from monoagent._kernel.config_loading import discover_config_file, load_config
from monoagent._kernel.errors import ConfigError
from monoagent._kernel.hookspecs import hookimpl
from monoagent._kernel.host import PluginHost
from monoagent_plugins.observability.artifacts import ArtifactsConfig
from monoagent_plugins.prompt.skills import _check_skills, skills_root
from monoagent_plugins.providers.offline import OfflineConfig
from monoagent_plugins.serving.serve import _check_networks
from monoagent_plugins.tools.permissions import _check_profile_name
from monoagent_plugins.tools.tool_domains import _check_domains

OFFLINE = {"providers.offline": OfflineConfig}
BUNDLED = {path: cls for path, _, cls in bundled_config_sections()}
"""The sections the bundled plugins declare: the configuration an Agent with them validates."""


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No MONO_AGENT_* variables, an empty working directory, a user config dir under tmp_path."""
    for name in list(os.environ):
        if name.startswith("MONO_AGENT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def nested(path: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``"a.b"``."""
    tree: Any = value
    for part in reversed(path.split(".")):
        tree = {part: tree}
    return tree


def write_toml(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    return path


def problems_of(exc_info: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    return exc_info.value.problems


def only_problem(exc_info: pytest.ExceptionInfo[ConfigError]) -> str:
    (problem,) = exc_info.value.problems
    return problem


# ============================================================================ env overlay


@attrs.frozen
class EnvCase:
    """A valid env string, what it becomes, and a different valid value for the file."""

    env: str
    expected: Any
    file: Any


def env_case(key: KeyInfo) -> EnvCase:
    """Pick valid, non-default values of the key's type (checked fields get known-good values)."""
    hint = field_type(key.owner, key.attribute)
    base, _ = unwrap_optional(hint)
    meta = key.attribute.metadata
    check = meta.get("check")
    default = key.default
    if check is _check_timezone:
        return EnvCase("UTC", "UTC", "Europe/Berlin")
    if check is check_model:
        return EnvCase("offline:echo", "offline:echo", "anthropic:claude-sonnet-4-6")
    if check is check_models:
        return EnvCase("offline:echo,offline:scripted", ["offline:echo", "offline:scripted"], ["other:model"])
    if check is _check_skills:
        return EnvCase("a,b", ["a", "b"], ["c"])
    if check is _check_profile_name:
        return EnvCase("ask", "ask", "read_only")
    if check is _check_domains:
        return EnvCase("memory,mcp:*", ["memory", "mcp:*"], ["*"])
    if check is _check_networks:
        return EnvCase("10.0.0.5,10.1.0.0/16", ["10.0.0.5", "10.1.0.0/16"], ["192.168.0.0/24"])
    assert check is None, f"{key.path}: add a valid value for its check to env_case()"
    if typing.get_origin(base) is Literal:
        others = [v for v in typing.get_args(base) if v != default]
        return EnvCase(others[0], others[0], default)
    if base is bool:
        return EnvCase("true" if not default else "false", not default, default)
    if key.path == "providers.anthropic.thinkingBudgetTokens":  # must also stay below maxOutputTokens (4096)
        return EnvCase("2048", 2048, 1024)
    if base is int:
        lo, hi = int(meta["min"]), int(meta["max"])
        candidates = [v for v in (hi, lo, lo + 1, hi - 1) if v != default]
        return EnvCase(str(candidates[0]), candidates[0], candidates[1])
    if base is float:
        lo, hi = meta["min"], meta["max"]
        candidates = [v for v in ((lo + hi) / 2, hi, lo) if v != default]
        return EnvCase(repr(candidates[0]), candidates[0], candidates[1])
    if typing.get_origin(base) is list:
        return EnvCase("a, b", ["a", "b"], ["c"])
    if base is Path:
        # env paths are made absolute against the working directory (cwd is tmp_path/cwd here)
        return EnvCase("from-env/dir", Path.cwd() / "from-env/dir", "from-file/dir")
    if base is str:
        return EnvCase("from-env", "from-env", "from-file")
    raise AssertionError(f"{key.path}: no test value for type {hint!r}")


def owning_section(path: str) -> str | None:
    """The bundled plugin section that declares key ``path``, else None (a kernel key)."""
    for section in sorted(BUNDLED, key=len, reverse=True):
        rest = path[len(section) + 1 :]
        if path.startswith(section + ".") and rest.split(".")[0] in table_keys(BUNDLED[section]):
            return section
    return None


def attribute_value(config: Config, path: str) -> Any:
    section = owning_section(path)
    obj: Any = config if section is None else config.section(section)
    for part in (path if section is None else path[len(section) + 1 :]).split("."):
        obj = getattr(obj, re.sub(r"(?<!^)(?=[A-Z])", "_", part).lower())
    return obj


def every_key() -> list[KeyInfo]:
    """The kernel's keys, then every key the bundled plugins declare."""
    keys = iter_keys()
    for path, cls in BUNDLED.items():
        keys += iter_keys(cls, path + ".")
    return keys


ENV_KEYS = [key for key in every_key() if key.env]


@pytest.mark.parametrize("key", ENV_KEYS, ids=[key.env for key in ENV_KEYS])
def test_every_env_var_overrides_its_key(key: KeyInfo, tmp_path: Path) -> None:
    case = env_case(key)
    env = {key.env: case.env}
    assert case.expected != key.default and case.file != case.expected

    from_default = load_config(data={}, env=env, plugin_sections=BUNDLED)
    assert attribute_value(from_default, key.path) == case.expected
    assert from_default.sources[key.path] == f"env {key.env}"

    file = write_toml(tmp_path / "conf" / CONFIG_FILENAME, nested(key.path, case.file))
    from_file = load_config(file, env={}, plugin_sections=BUNDLED)
    expected_file = Path(case.file) if isinstance(case.expected, Path) else case.file
    assert attribute_value(from_file, key.path) == expected_file
    assert from_file.sources[key.path] == f"file {file}"

    both = load_config(file, env=env, plugin_sections=BUNDLED)
    assert attribute_value(both, key.path) == case.expected
    assert both.sources[key.path] == f"env {key.env}"


DOCUMENTED_ENV = {
    "MONO_AGENT_IDENTITY_PATH": "context.identityPath",
    "MONO_AGENT_SOUL_PATH": "context.soulPath",
    "MONO_AGENT_SKILLS_ROOT": "context.skillsRoot",
    "MONO_AGENT_SELECTED_SKILLS": "context.selectedSkills",
    "MONO_AGENT_SKILL_MAX_BYTES": "context.skillMaxBytes",
    "MONO_AGENT_MAX_TURNS": "runtime.maxTurns",
    "MONO_AGENT_SESSION_MODE": "runtime.session.mode",
    "MONO_AGENT_SESSION_IDLE_TIMEOUT_MS": "runtime.session.idleTimeoutMs",
    "MONO_AGENT_SESSION_ROLLOVER": "runtime.session.rollover",
    "MONO_AGENT_SESSION_ROLLOVER_TIMEZONE": "runtime.session.rolloverTimezone",
    "MONO_AGENT_SESSION_ROLLOVER_NOTICE": "runtime.session.rolloverNotice",
    "MONO_AGENT_CONCURRENCY_MAX_CONCURRENT_RUNS": "concurrency.maxConcurrentRuns",
    "MONO_AGENT_CONCURRENCY_MAX_PENDING_RUNS": "concurrency.maxPendingRuns",
    "MONO_AGENT_PROMPT_CACHE_DIAGNOSTICS": "providers.client.promptCacheDiagnostics",
    "MONO_AGENT_PROVIDER_TRANSPORT": "providers.client.transport",
    "MONO_AGENT_PROVIDER_MAX_RETRIES": "providers.client.maxRetries",
    "MONO_AGENT_MAX_RETRY_DELAY_MS": "providers.client.maxRetryDelayMs",
    "MONO_AGENT_SESSION_TRANSCRIPTS_DIR": "runtime.session.transcriptsDir",
    "MONO_AGENT_SESSION_BACKEND": "runtime.session.backend",
}


def test_documented_env_vars_name_the_documented_keys() -> None:
    table = {key.env: key.path for key in every_key() if key.env}
    for var, path in DOCUMENTED_ENV.items():
        assert table.get(var) == path, f"{var} should set {path}"
    compaction = {var: path for var, path in table.items() if var.startswith("MONO_AGENT_COMPACTION_")}
    assert len(compaction) >= 3
    assert all(path.startswith("runtime.compaction.") for path in compaction.values())
    assert table["MONO_AGENT_COMPACTION_CONTEXT_WINDOW_OVERRIDE"] == "runtime.compaction.contextWindowOverride"


def test_env_var_names_are_unique_and_prefixed() -> None:
    names = [key.env for key in iter_keys() if key.env]
    assert len(names) == len(set(names))
    assert all(name.startswith("MONO_AGENT_") for name in names)


def test_plugin_section_env_var_overrides_its_key(tmp_path: Path) -> None:
    file = write_toml(tmp_path / CONFIG_FILENAME, {"providers": {"offline": {"scriptPath": "file.toml"}}})
    config = load_config(file, env={"MONO_AGENT_OFFLINE_SCRIPT": "env.toml"}, plugin_sections=OFFLINE)
    assert config.section("providers.offline").script_path == Path.cwd() / "env.toml"
    assert config.sources["providers.offline.scriptPath"] == "env MONO_AGENT_OFFLINE_SCRIPT"


def test_empty_env_var_unsets_an_optional_key_and_empties_a_list(tmp_path: Path) -> None:
    file = write_toml(tmp_path / CONFIG_FILENAME, {"runtime": {"model": "offline:echo", "fallbacks": ["a:b"]}})
    config = load_config(file, env={"MONO_AGENT_MODEL": "", "MONO_AGENT_FALLBACKS": ""})
    assert config.runtime.model is None
    assert config.runtime.fallbacks == []


# ============================================================================ precedence


def test_precedence_env_over_toml_file_over_defaults(tmp_path: Path) -> None:
    file = write_toml(
        tmp_path / CONFIG_FILENAME,
        {"runtime": {"maxTurns": 5, "session": {"mode": "per-message"}}, "context": {"skillMaxBytes": 1000}},
    )
    config = load_config(file, env={"MONO_AGENT_MAX_TURNS": "7", "MONO_AGENT_CONCURRENCY_MAX_PENDING_RUNS": "3"}, plugin_sections=BUNDLED)
    assert config.runtime.max_turns == 7
    assert config.concurrency.max_pending_runs == 3
    assert config.runtime.session.mode == "per-message"
    assert config.section("context").skill_max_bytes == 1000
    assert config.concurrency.max_concurrent_runs == 4
    assert config.source_file == file
    sources = {path: source for path, _, source in value_sources(config)}
    assert sources["runtime.maxTurns"] == "env MONO_AGENT_MAX_TURNS"
    assert sources["concurrency.maxPendingRuns"] == "env MONO_AGENT_CONCURRENCY_MAX_PENDING_RUNS"
    assert sources["runtime.session.mode"] == f"file {file}"
    assert sources["context.skillMaxBytes"] == f"file {file}"
    assert sources["concurrency.maxConcurrentRuns"] == "default"


def test_precedence_env_over_json_file_over_defaults(tmp_path: Path) -> None:
    file = tmp_path / "agent.json"
    file.write_text(
        json.dumps({"runtime": {"maxTurns": 5, "model": "offline:echo"}, "context": {"selectedSkills": ["research"]}}),
        encoding="utf-8",
    )
    config = load_config(file, env={"MONO_AGENT_SELECTED_SKILLS": "a,b"}, plugin_sections=BUNDLED)
    assert config.section("context").selected_skills == ["a", "b"]
    assert config.runtime.max_turns == 5
    assert config.runtime.model == "offline:echo"
    assert config.section("context").skill_max_bytes == 48000
    rows = {path: (value, source) for path, value, source in value_sources(config)}
    assert rows["context.selectedSkills"] == (["a", "b"], "env MONO_AGENT_SELECTED_SKILLS")
    assert rows["runtime.maxTurns"] == (5, f"file {file}")
    assert rows["context.skillMaxBytes"] == (48000, "default")


def test_defaults_without_any_file_or_env() -> None:
    config = load_config(env={})
    assert config.source_file is None
    assert {source for _, _, source in value_sources(config)} == {"default"}
    assert attrs.asdict(config.runtime) == attrs.asdict(Config().runtime)


# ============================================================================ validation


def config_error(tmp_path: Path, data: dict[str, Any], env: dict[str, str] | None = None, **kwargs: Any):
    file = write_toml(tmp_path / CONFIG_FILENAME, data)
    with pytest.raises(ConfigError) as exc_info:
        load_config(file, env=env or {}, **kwargs)
    return file, exc_info


def test_unknown_top_level_key_suggests_the_close_one(tmp_path: Path) -> None:
    file, exc = config_error(tmp_path, {"runtim": {"maxTurns": 1}})
    problem = only_problem(exc)
    assert problem.startswith("runtim: unknown key")
    assert f"(in file {file})" in problem
    assert "did you mean 'runtime'?" in problem
    assert "known keys here: runtime, context, concurrency, providers, history, toolHistory, memory, plugins" in problem


@pytest.mark.parametrize(
    ("key", "suggestion"), [("maxTurn", "maxTurns"), ("max_turns", "maxTurns"), ("MAXTURNS", "maxTurns")]
)
def test_unknown_nested_key_suggests_the_close_one(tmp_path: Path, key: str, suggestion: str) -> None:
    file, exc = config_error(tmp_path, {"runtime": {key: 3}})
    problem = only_problem(exc)
    assert problem.startswith(f"runtime.{key}: unknown key (in file {file})")
    assert f"did you mean {suggestion!r}?" in problem
    assert "known keys here: model, maxTurns, fallbacks, runTimeoutMs, maxRepeatedToolCalls, maxContinuations, session, compaction" in problem


def test_unknown_key_in_a_plugin_section_suggests_the_close_one(tmp_path: Path) -> None:
    file, exc = config_error(tmp_path, {"providers": {"offline": {"scriptPth": "s.toml"}}}, plugin_sections=OFFLINE)
    problem = only_problem(exc)
    assert problem.startswith(f"providers.offline.scriptPth: unknown key (in file {file})")
    assert "did you mean 'scriptPath'?" in problem
    assert "known keys here: scriptPath" in problem


def test_misspelt_plugin_section_suggests_the_section(tmp_path: Path) -> None:
    _, exc = config_error(tmp_path, {"providers": {"ofline": {}}}, plugin_sections=OFFLINE)
    problem = only_problem(exc)
    assert problem.startswith("providers.ofline: unknown key")
    assert "did you mean 'offline'?" in problem
    assert "known keys here: client, offline" in problem


def test_a_section_of_a_plugin_that_is_not_loaded_is_unknown(tmp_path: Path) -> None:
    _, exc = config_error(tmp_path, {"providers": {"offline": {"scriptPath": "s.toml"}}})
    assert only_problem(exc).startswith("providers.offline: unknown key")


def test_a_plugin_section_of_its_own_class_is_validated(tmp_path: Path) -> None:
    @attrs.define
    class GreeterConfig:
        greeting: str = setting("hi", doc="What to say.", env="MONO_AGENT_GREETER_GREETING")
        times: int = setting(1, doc="How often.", min=1, max=3)

    file, exc = config_error(tmp_path, {"greeter": {"times": 4}}, plugin_sections={"greeter": GreeterConfig})
    assert only_problem(exc) == f"greeter.times = 4 (from file {file}): out of range; allowed: an integer from 1 to 3"
    config = load_config(data={"greeter": {"times": 3}}, env={"MONO_AGENT_GREETER_GREETING": "yo"},
                         plugin_sections={"greeter": GreeterConfig})
    assert config.section("greeter") == GreeterConfig("yo", 3)


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("runtime.maxTurns", "3", 'runtime.maxTurns = "3" ({src}): wrong type (str); allowed: 0 (unlimited) or 1 to 100'),
        ("runtime.session.rolloverNotice", 1, "runtime.session.rolloverNotice = 1 ({src}): wrong type (int); allowed: true or false"),
        ("context.skillMaxBytes", 3.5, "context.skillMaxBytes = 3.5 ({src}): wrong type (float); allowed: an integer from 256 to 1,000,000"),
        ("context.selectedSkills", [1, 2], "context.selectedSkills = [1, 2] ({src}): wrong type; allowed: a list of strings"),
        ("context.selectedSkills", "research", 'context.selectedSkills = "research" ({src}): wrong type; allowed: a list of strings'),
        ("context.identityPath", 7, "context.identityPath = 7 ({src}): wrong type (int); allowed: a path (or unset)"),
        ("runtime.compaction.triggerRatio", True, "runtime.compaction.triggerRatio = true ({src}): wrong type (bool); allowed: a number from 0.05 to 1"),
    ],
)
def test_wrong_type_names_key_value_source_and_allowed(tmp_path: Path, path: str, value: Any, expected: str) -> None:
    file, exc = config_error(tmp_path, nested(path, value), plugin_sections=BUNDLED)
    assert only_problem(exc) == expected.format(src=f"from file {file}")


RANGES = [
    ("context.skillMaxBytes", [255, 1_000_001], [256, 1_000_000], "an integer from 256 to 1,000,000"),
    ("runtime.maxTurns", [-1, 101], [0, 100], "0 (unlimited) or 1 to 100"),
    ("providers.client.maxRetries", [9, -1], [8, 0], "an integer from 0 to 8"),
]


@pytest.mark.parametrize(("path", "rejected", "accepted", "allowed"), RANGES, ids=[r[0] for r in RANGES])
def test_range_bounds(tmp_path: Path, path: str, rejected: list[int], accepted: list[int], allowed: str) -> None:
    for value in rejected:
        file, exc = config_error(tmp_path, nested(path, value), plugin_sections=BUNDLED)
        assert only_problem(exc) == f"{path} = {value} (from file {file}): out of range; allowed: {allowed}"
    for value in accepted:
        file = write_toml(tmp_path / CONFIG_FILENAME, nested(path, value))
        assert attribute_value(load_config(file, env={}, plugin_sections=BUNDLED), path) == value


def test_out_of_range_env_value_names_the_env_var(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(data={}, env={"MONO_AGENT_SKILL_MAX_BYTES": "255"}, plugin_sections=BUNDLED)
    assert only_problem(exc) == (
        "context.skillMaxBytes = 255 (from env MONO_AGENT_SKILL_MAX_BYTES): out of range; "
        "allowed: an integer from 256 to 1,000,000"
    )



def test_nan_is_not_a_number_in_range() -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(data={"runtime": {"compaction": {"triggerRatio": float("nan")}}}, plugin_sections=BUNDLED)
    assert only_problem(exc) == (
        "runtime.compaction.triggerRatio = NaN (from python): not a number; allowed: a number from 0.05 to 1"
    )
    with pytest.raises(ConfigError) as exc:
        load_config(data={}, env={"MONO_AGENT_COMPACTION_TRIGGER_RATIO": "nan"}, plugin_sections=BUNDLED)  # not even parsed as a number
    assert "'nan' (from env MONO_AGENT_COMPACTION_TRIGGER_RATIO): expected a number" in only_problem(exc)

def test_bad_literal_lists_the_allowed_values(tmp_path: Path) -> None:
    file, exc = config_error(tmp_path, {"runtime": {"session": {"mode": "sometimes"}}})
    assert only_problem(exc) == (
        f'runtime.session.mode = "sometimes" (from file {file}): not an allowed value; '
        "allowed: one of 'continuous', 'per-message'"
    )
    _, exc = config_error(tmp_path, {}, env={"MONO_AGENT_PROVIDER_TRANSPORT": "carrier-pigeon"})
    problem = only_problem(exc)
    assert problem.startswith('providers.client.transport = "carrier-pigeon" (from env MONO_AGENT_PROVIDER_TRANSPORT)')
    assert "one of 'auto', 'sse', 'websocket', 'websocket-cached'" in problem


def test_bad_timezone(tmp_path: Path) -> None:
    file, exc = config_error(tmp_path, {"runtime": {"session": {"rolloverTimezone": "Mars/Olympus_Mons"}}})
    problem = only_problem(exc)
    assert problem.startswith(f'runtime.session.rolloverTimezone = "Mars/Olympus_Mons" (from file {file}): ')
    assert "not a known IANA time zone" in problem and "'UTC'" in problem


@pytest.mark.parametrize("name", ["../x", "a/b", ".hidden", ""])
def test_bad_skill_name(tmp_path: Path, name: str) -> None:
    file, exc = config_error(tmp_path, {"context": {"selectedSkills": ["ok", name]}}, plugin_sections=BUNDLED)
    problem = only_problem(exc)
    assert problem.startswith(f"context.selectedSkills = {json.dumps(['ok', name])} (from file {file}): ")
    assert "letters, digits, '.', '_' or '-'" in problem and repr(name) in problem


def test_bad_skill_name_from_env() -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(data={}, env={"MONO_AGENT_SELECTED_SKILLS": "research,../x"}, plugin_sections=BUNDLED)
    assert only_problem(exc).startswith(
        'context.selectedSkills = ["research", "../x"] (from env MONO_AGENT_SELECTED_SKILLS): skill names'
    )


@pytest.mark.parametrize(
    ("path", "value"),
    [("runtime.model", "gpt-4"), ("runtime.model", ":echo"), ("runtime.compaction.summaryModel", "offline: echo"),
     ("runtime.fallbacks", ["offline:echo", "nocolon"])],
)
def test_bad_model_string(tmp_path: Path, path: str, value: Any) -> None:
    file, exc = config_error(tmp_path, nested(path, value), plugin_sections=BUNDLED)
    problem = only_problem(exc)
    assert problem.startswith(f"{path} = {json.dumps(value)} (from file {file}): ")
    assert "'<provider>:<model>'" in problem and "'offline:echo'" in problem


@pytest.mark.parametrize(
    ("var", "raw", "path", "expected"),
    [
        ("MONO_AGENT_MAX_TURNS", "abc", "runtime.maxTurns", "expected an integer: ASCII digits 0-9 only; allowed: 0 (unlimited) or 1 to 100"),
        ("MONO_AGENT_MAX_TURNS", "2.5", "runtime.maxTurns", "expected an integer: ASCII digits 0-9 only; allowed: 0 (unlimited) or 1 to 100"),
        ("MONO_AGENT_SESSION_ROLLOVER_NOTICE", "maybe", "runtime.session.rolloverNotice",
         "expected a boolean (1/0, true/false, yes/no, on/off); allowed: true or false"),
        ("MONO_AGENT_COMPACTION_TRIGGER_RATIO", "most", "runtime.compaction.triggerRatio",
         "expected a number: ASCII digits 0-9 with an optional '.' fraction only; allowed: a number from 0.05 to 1"),
    ],
)
def test_env_var_that_does_not_parse(var: str, raw: str, path: str, expected: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(data={}, env={var: raw}, plugin_sections=BUNDLED)
    assert only_problem(exc) == f"{path} = {raw!r} (from env {var}): {expected}"


@pytest.mark.parametrize("raw", ["1", "true", "YES", "on"])
def test_env_booleans(raw: str) -> None:
    assert load_config(data={}, env={"MONO_AGENT_SESSION_ROLLOVER_NOTICE": raw}).runtime.session.rollover_notice is True


def test_several_problems_are_reported_together(tmp_path: Path) -> None:
    file, exc = config_error(
        tmp_path,
        {"runtime": {"maxTurns": 101, "modle": "x:y", "session": {"mode": "always"}},
         "context": {"selectedSkills": ["../x"]}},
        env={"MONO_AGENT_PROVIDER_MAX_RETRIES": "lots"},
        plugin_sections=BUNDLED,
    )
    problems = problems_of(exc)
    assert len(problems) == 5
    text = str(exc.value)
    assert text.startswith("invalid configuration:\n")
    for path in ("runtime.maxTurns = 101", "runtime.modle: unknown key", "runtime.session.mode = \"always\"",
                 "context.selectedSkills = [\"../x\"]", "providers.client.maxRetries = 'lots'"):
        assert sum(path in p for p in problems) == 1, path
        assert f"  - {path}" in text
    assert "(from env MONO_AGENT_PROVIDER_MAX_RETRIES)" in text
    assert sum(f"file {file}" in p for p in problems) == 4


def test_a_table_where_a_value_belongs_and_the_reverse(tmp_path: Path) -> None:
    file, exc = config_error(tmp_path, {"runtime": {"session": "continuous", "maxTurns": {"n": 1}}})
    problems = problems_of(exc)
    assert any(p.startswith(f'runtime.session = "continuous" (from file {file}): must be a table') for p in problems)
    assert any(p.startswith("runtime.maxTurns = {...}") and "wrong type (dict)" in p for p in problems)


def test_an_env_var_below_a_non_table_file_value_does_not_hide_it(tmp_path: Path) -> None:
    file, exc = config_error(tmp_path, {"runtime": 3}, env={"MONO_AGENT_MAX_TURNS": "5"})
    assert only_problem(exc).startswith(f"runtime = 3 (from file {file}): must be a table")
    file, exc = config_error(tmp_path, {"runtime": {"session": "daily"}}, env={"MONO_AGENT_SESSION_MODE": "continuous"})
    assert only_problem(exc).startswith(f'runtime.session = "daily" (from file {file}): must be a table')


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    file = tmp_path / CONFIG_FILENAME
    file.write_text("[runtime]\nmaxTurns = \n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_config(file, env={})
    assert only_problem(exc).startswith(f"{file}: not valid TOML: ")


def test_invalid_json_names_the_file(tmp_path: Path) -> None:
    file = tmp_path / "agent.json"
    file.write_text('{"runtime": {"maxTurns": 1,}}', encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_config(file, env={})
    assert only_problem(exc).startswith(f"{file}: not valid JSON: ")
    file.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_config(file, env={})
    assert only_problem(exc) == f"{file}: the top level must be a JSON object"


def test_missing_config_file_from_the_option(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as exc:
        load_config(missing, env={})
    assert only_problem(exc) == f"--config {missing}: no such file"


def test_missing_config_file_from_the_env(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as exc:
        load_config(env={"MONO_AGENT_CONFIG": str(missing)})
    assert only_problem(exc) == f"MONO_AGENT_CONFIG={missing}: no such file"


# ============================================================================ discovery


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="XDG layout of platformdirs on Linux")
def test_user_config_dir_follows_xdg_and_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert platformdirs.user_config_path("monoagent") == tmp_path / "xdg" / "monoagent"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert platformdirs.user_config_path("monoagent") == tmp_path / "home" / ".config" / "monoagent"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="XDG layout of platformdirs on Linux")
def test_discovery_order(tmp_path: Path, isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    explicit = write_toml(tmp_path / "explicit.toml", {"runtime": {"maxTurns": 1}})
    from_env = tmp_path / "from-env.json"
    from_env.write_text(json.dumps({"runtime": {"maxTurns": 2}}), encoding="utf-8")
    local = write_toml(isolated / CONFIG_FILENAME, {"runtime": {"maxTurns": 3}})
    user = write_toml(tmp_path / "xdg" / "monoagent" / CONFIG_FILENAME, {"runtime": {"maxTurns": 4}})
    env = {"MONO_AGENT_CONFIG": str(from_env)}

    assert discover_config_file(explicit, env) == explicit
    assert load_config(explicit, env).runtime.max_turns == 1
    assert discover_config_file(None, env) == from_env
    assert load_config(None, env).runtime.max_turns == 2
    assert discover_config_file(None, {}) == local
    assert load_config(None, {}).runtime.max_turns == 3
    local.unlink()
    assert discover_config_file(None, {}) == user
    assert load_config(None, {}).runtime.max_turns == 4
    user.unlink()
    assert discover_config_file(None, {}) is None
    config = load_config(None, {})
    assert config.source_file is None and config.runtime.max_turns == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="XDG layout of platformdirs on Linux")
def test_discovery_uses_home_without_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    user = write_toml(tmp_path / "home" / ".config" / "monoagent" / CONFIG_FILENAME, {"runtime": {"maxTurns": 9}})
    assert discover_config_file(None, {}) == user
    assert load_config(None, {}).runtime.max_turns == 9


def test_relative_explicit_path_is_relative_to_the_working_directory(isolated: Path) -> None:
    write_toml(isolated / "sub" / "agent.toml", {"runtime": {"maxTurns": 6}})
    config = load_config("sub/agent.toml", {})
    assert config.source_file == isolated / "sub" / "agent.toml"
    assert config.runtime.max_turns == 6


# ============================================================================ relative paths


def test_relative_paths_resolve_against_the_file_directory(tmp_path: Path, isolated: Path) -> None:
    project = tmp_path / "project"
    file = write_toml(
        project / CONFIG_FILENAME,
        {
            "context": {"home": "state", "skillsRoot": "my-skills"},
            "artifacts": {"dir": "out/artifacts"},
            "history": {"dir": "../shared-history"},
        },
    )
    assert isolated != project
    config = load_config(file, env={}, plugin_sections=BUNDLED)
    assert config.base_dir == project
    assert config.resolve("x/y.md") == project / "x" / "y.md"
    assert config.resolve(Path("/abs/y.md")) == Path("/abs/y.md")
    assert config.resolve("~/y.md") == Path.home() / "y.md"
    assert config.home == project / "state"
    assert skills_root(config) == project / "my-skills"
    assert config.path("artifacts.dir") == project / "out" / "artifacts"
    assert config.history_dir.resolve() == tmp_path / "shared-history"


def test_path_defaults_follow_the_file(tmp_path: Path) -> None:
    project = tmp_path / "project"
    file = write_toml(project / CONFIG_FILENAME, {"runtime": {"maxTurns": 1}})
    config = load_config(file, env={}, plugin_sections=BUNDLED)
    home = project / STATE_DIRNAME
    assert config.home == home
    assert config.path("artifacts.dir") == home / "artifacts"
    assert config.history_dir == home / "history"
    assert skills_root(config) == home / "skills"


def test_history_defaults_next_to_a_configured_artifacts_dir(tmp_path: Path) -> None:
    file = write_toml(tmp_path / "p" / CONFIG_FILENAME, {"artifacts": {"dir": "var/art"}})
    config = load_config(file, env={}, plugin_sections=BUNDLED)  # artifacts.dir is the artifacts plugin's key
    assert config.path("artifacts.dir") == tmp_path / "p" / "var" / "art"
    assert config.history_dir == tmp_path / "p" / "var" / "history"
    without = load_config(write_toml(tmp_path / "q" / CONFIG_FILENAME, {}), env={})  # no plugin declares it
    assert without.history_dir == tmp_path / "q" / STATE_DIRNAME / "history"
    with pytest.raises(KeyError, match=r"no active plugin declares the path key 'artifacts\.dir'"):
        without.path("artifacts.dir")


def test_without_a_file_home_is_the_user_data_dir_and_paths_resolve_against_cwd(isolated: Path) -> None:
    config = load_config(env={})
    assert config.base_dir == isolated
    assert config.home == platformdirs.user_data_path("monoagent")
    assert config.resolve("a") == isolated / "a"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="XDG layout of platformdirs on Linux")
def test_memoised_path_properties_follow_their_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state paths are memoised (they are read on every run event), on the settings they come from:
    a setting changed after a first read, or a new XDG_DATA_HOME, gives the new path."""
    config = Config(base_dir=tmp_path, sections={"artifacts": ArtifactsConfig()})
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-1"))
    assert config.path("artifacts.dir") == tmp_path / "data-1" / "monoagent" / "artifacts"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-2"))
    assert config.history_dir == tmp_path / "data-2" / "monoagent" / "history"
    config.context.home = Path("h")
    assert (config.home, config.path("artifacts.dir"), config.history_dir) == (tmp_path / "h", tmp_path / "h" / "artifacts", tmp_path / "h" / "history")
    config.section("artifacts").dir = Path("var/art")
    assert (config.path("artifacts.dir"), config.history_dir) == (tmp_path / "var" / "art", tmp_path / "var" / "history")
    config.base_dir = tmp_path / "elsewhere"
    assert config.home == tmp_path / "elsewhere" / "h"
    config.source_file, config.context.home = tmp_path / "elsewhere" / "monoagent.toml", None
    assert config.home == tmp_path / "elsewhere" / STATE_DIRNAME


# ============================================================================ config init


def key_names_by_table(text: str) -> dict[str, set[str]]:
    """Key names written in each table of a starter file, commented out or not."""
    tables: dict[str, set[str]] = {"": set()}
    current = ""
    for line in text.splitlines():
        header = re.fullmatch(r"\[([A-Za-z0-9_.]+)\]", line)
        if header:
            current = header.group(1)
            tables.setdefault(current, set())
            continue
        key = re.match(r"^(?:# )?([A-Za-z][A-Za-z0-9]*)(?: = |: tables of their own)", line)
        if key:
            tables[current].add(key.group(1))
    return tables


def defaults_by_key(plugin_sections: dict[str, type] | None = None) -> dict[str, Any]:
    config = load_config(data={}, env={}, plugin_sections=plugin_sections)
    return {path: value for path, value, _ in value_sources(config)}


def test_starter_parses_validates_and_equals_the_defaults(tmp_path: Path) -> None:
    text = starter_toml()
    data = tomllib.loads(text)
    config = load_config(data=data, env={})
    assert {path: value for path, value, _ in value_sources(config)} == defaults_by_key()
    assert {path: value for path, value, _ in value_sources(config)} == {
        path: value for path, value, _ in value_sources(Config())
    }
    file = tmp_path / CONFIG_FILENAME
    file.write_text(text, encoding="utf-8")
    from_file = load_config(file, env={})
    assert {p: v for p, v, _ in value_sources(from_file)} == defaults_by_key()


def test_starter_names_every_key_and_its_env_var() -> None:
    text = starter_toml()
    tables = key_names_by_table(text)
    for key in iter_keys():
        table, _, name = key.path.rpartition(".")
        assert name in tables.get(table, set()), f"{key.path} missing from the starter file"
        if key.env:
            assert f"env: {key.env}" in text
    assert sum(len(names) for names in tables.values()) == len(iter_keys())


def test_starter_with_bundled_plugin_sections(tmp_path: Path) -> None:
    host = PluginHost({"MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD": "1"})
    host.load_entry_points()
    sections = host.config_sections()
    assert "providers.offline" in sections
    text = starter_toml(sections)
    assert "[providers.offline]" in text
    assert "env: MONO_AGENT_OFFLINE_SCRIPT" in text
    assert "scriptPath" in key_names_by_table(text)["providers.offline"]
    config = load_config(data=tomllib.loads(text), env={}, plugin_sections=sections)
    assert {p: v for p, v, _ in value_sources(config)} == defaults_by_key(sections)
    assert config.section("providers.offline") == OfflineConfig()


def test_relative_env_paths_are_relative_to_the_working_directory(tmp_path: Path) -> None:
    file = write_toml(tmp_path / "elsewhere" / CONFIG_FILENAME, {"context": {"skillsRoot": "skills"}})
    config = load_config(file, env={"MONO_AGENT_HOME": "state"}, plugin_sections=BUNDLED)
    assert config.home == Path.cwd() / "state"
    assert skills_root(config) == file.parent / "skills"


# ============================================================================ keys declared by the plugins that read them


MOVED_KEYS = {
    # key path: (declaring bundled plugin, env, default, allowed), as the kernel declared them before
    "context.skillsRoot": ("skills", "MONO_AGENT_SKILLS_ROOT", None, "a path (or unset)"),
    "context.selectedSkills": ("skills", "MONO_AGENT_SELECTED_SKILLS", [], "a list of strings"),
    "context.skillMaxBytes": ("skills", "MONO_AGENT_SKILL_MAX_BYTES", 48000, "an integer from 256 to 1,000,000"),
    "runtime.compaction.triggerRatio": ("compaction", "MONO_AGENT_COMPACTION_TRIGGER_RATIO", 0.8, "a number from 0.05 to 1"),
    "runtime.compaction.targetRatio": ("compaction", "MONO_AGENT_COMPACTION_TARGET_RATIO", 0.1, "a number from 0.01 to 0.9"),
    "runtime.compaction.summaryModel": ("compaction", "MONO_AGENT_COMPACTION_SUMMARY_MODEL", None, "a string (or unset)"),
    "history.maxMessages": ("files", "MONO_AGENT_HISTORY_MAX_MESSAGES", 64, "an integer from 1 to 10,000"),
    "history.maxMessageBytes": ("files", "MONO_AGENT_HISTORY_MAX_MESSAGE_BYTES", 65536, "an integer from 1,024 to 16,777,216"),
    "history.maxBytes": ("files", "MONO_AGENT_HISTORY_MAX_BYTES", 268435456, "an integer from 65,536 to 1,099,511,627,776"),
    "history.maxConversations": ("files", "MONO_AGENT_HISTORY_MAX_CONVERSATIONS", 10000, "an integer from 1 to 10,000,000"),
    "history.maxInactiveDays": ("files", "MONO_AGENT_HISTORY_MAX_INACTIVE_DAYS", 365, "a number from 0.001 to 36,500"),
    "history.maxStageBytes": ("files", "MONO_AGENT_HISTORY_MAX_STAGE_BYTES", 268435456, "an integer from 65,536 to 1,099,511,627,776"),
}


def test_plugin_keys_are_declared_by_their_plugin_with_path_env_default_and_allowed_unchanged() -> None:
    kernel = {key.path for key in iter_keys()}
    owners = {path: plugin for path, plugin, _ in bundled_config_sections()}
    declared = {key.path: key for key in every_key()}
    assert not kernel & set(MOVED_KEYS)
    for path, (plugin, env, default, allowed) in MOVED_KEYS.items():
        key = declared[path]
        assert owners[owning_section(path)] == plugin, path
        assert (key.env, key.default, key.allowed) == (env, default, allowed), path
        assert key.doc, path
    assert len(declared) == len(every_key()), "a key path is declared twice"


def test_a_plugin_key_in_a_kernel_table_is_validated_and_suggested_like_a_kernel_key(tmp_path: Path) -> None:
    file, exc = config_error(tmp_path, {"history": {"maxMesages": 8, "store": "files"}}, plugin_sections=BUNDLED)
    problem = only_problem(exc)
    assert problem.startswith(f"history.maxMesages: unknown key (in file {file}); did you mean 'maxMessages'?")
    assert "known keys here: store, dir, maxBytes, maxConversations, maxInactiveDays, maxMessageBytes, maxMessages" in problem
    config = load_config(data={"history": {"maxMessages": 8, "store": "files"}}, env={}, plugin_sections=BUNDLED)
    assert (config.history.store, config.section("history").max_messages) == ("files", 8)
    assert config.sources["history.maxMessages"] == "python"
    _, exc = config_error(tmp_path, {"history": {"maxMessages": 8}})  # without the plugin's section: unknown
    assert only_problem(exc).startswith("history.maxMessages: unknown key")


def test_a_plugin_cannot_declare_a_kernel_key(tmp_path: Path) -> None:
    from monoagent._kernel.errors import PluginError
    from monoagent.testing import fresh_agent

    @attrs.define
    class Takes:
        store: str = "mine"

    class Plugin:
        def __init__(self, path: str, cls: type) -> None:
            self.path, self.cls = path, cls

        @hookimpl
        def register_config_sections(self, register):
            register(self.path, self.cls)

    strict = {"MONO_AGENT_STRICT_PLUGINS": "1"}  # otherwise the plugin is recorded as failed and the rest loads
    with pytest.raises(PluginError, match=r"config section 'history' declares history\.store, a key the kernel's table 'history' owns"):
        fresh_agent(tmp_path, plugins=[Plugin("history", Takes)], env=strict)
    with pytest.raises(PluginError, match=r"config section 'history\.store' is a key of the kernel's own configuration"):
        fresh_agent(tmp_path, plugins=[Plugin("history.store", Takes)], env=strict)
    (record,) = [r for r in fresh_agent(tmp_path, plugins=[("takes", Plugin("history", Takes))]).host.records if r.name == "takes"]
    assert record.status == "failed" and "history.store, a key the kernel's table 'history' owns" in record.reason
    with pytest.raises(PluginError, match=r"config section 'history' is claimed by two plugins: 'files' .* and 'mine'"):
        fresh_agent(tmp_path, plugins=[("mine", Plugin("history", OfflineConfig))])


def test_starter_file_writes_one_table_with_the_kernel_and_plugin_keys() -> None:
    text = starter_toml(BUNDLED)
    assert text.count("\n[history]\n") == 1 and text.count("\n[context]\n") == 1
    assert {"store", "dir", "maxMessages", "maxStageBytes"} <= key_names_by_table(text)["history"]
    assert {"home", "skillsRoot", "selectedSkills"} <= key_names_by_table(text)["context"]


# --------------------------------------------------------------------------- plugin sections on every path


def test_a_ready_made_config_gets_the_plugin_sections_environment_overlay(tmp_path: Path) -> None:
    """``Agent(Config(...))`` reads plugin sections' env variables like ``Agent({...})`` does."""
    from monoagent._agent import Agent

    env = {"ANTHROPIC_API_KEY": "sk-ant-test", "MONO_AGENT_ANTHROPIC_MAX_OUTPUT_TOKENS": "77"}
    home = {"context": {"home": str(tmp_path / "home")}}
    from_mapping = Agent(home, env=env, autoload=False)
    from_config = Agent(load_config(data=home, env=env), env=env, autoload=False)
    for agent in (from_mapping, from_config):
        section = agent.config.section("providers.anthropic")
        assert (section.api_key, section.max_output_tokens) == ("sk-ant-test", 77)
        assert agent.config.sources["providers.anthropic.apiKey"] == "env ANTHROPIC_API_KEY"
    with pytest.raises(ConfigError, match=r"providers\.anthropic\.maxOutputTokens = 'lots' \(from env MONO_AGENT_ANTHROPIC_MAX_OUTPUT_TOKENS\)"):
        Agent(Config(), env={"MONO_AGENT_ANTHROPIC_MAX_OUTPUT_TOKENS": "lots"}, autoload=False)


# --------------------------------------------------------------------------- setting(allowed=...)


@attrs.define
class ModeConfig:
    mode: str = setting("fast", doc="How to run.", env="MONO_AGENT_TEST_MODE", allowed=("fast", "careful"))
    levels: list[str] = setting(doc="Levels to log.", factory=list, allowed=["info", "debug"])


def test_allowed_values_are_enforced_and_named() -> None:
    sections = {"modes": ModeConfig}
    assert load_config(data={"modes": {"mode": "careful"}}, env={}, plugin_sections=sections).section("modes").mode == "careful"
    with pytest.raises(ConfigError) as info:
        load_config(data={"modes": {"mode": "reckless", "levels": ["info", "trace"]}}, env={}, plugin_sections=sections)
    assert info.value.problems == [
        "modes.mode = \"reckless\" (from python): not an allowed value; allowed: one of 'fast', 'careful'",
        "modes.levels = [\"info\", \"trace\"] (from python): not an allowed value; allowed: each one of 'info', 'debug'",
    ]
    with pytest.raises(ConfigError, match=r"modes\.mode = \"slow\" \(from env MONO_AGENT_TEST_MODE\): not an allowed value"):
        load_config(data={}, env={"MONO_AGENT_TEST_MODE": "slow"}, plugin_sections=sections)
    (key,) = [k for k in iter_keys(ModeConfig, "modes.") if k.path == "modes.mode"]
    assert key.allowed == "one of 'fast', 'careful'"


def test_a_description_of_what_is_allowed_needs_something_that_enforces_it() -> None:
    with pytest.raises(TypeError, match=r"needs min, max or check to enforce it"):
        setting("fast", doc="How to run.", allowed="fast or careful")
    setting(0, doc="A count.", min=0, max=100, allowed="0 (none) or 1 to 100")  # described, and enforced by min/max


def test_a_plugin_section_is_read_typed_by_its_class(tmp_path):
    """``config.section(path, cls)`` is the registered instance, typed; another class is a TypeError naming both."""
    from monoagent.testing import fresh_agent
    from monoagent_plugins.tools.subagents import AgentsConfig

    agent = fresh_agent(tmp_path)
    settings = agent.config.section("agents", AgentsConfig)
    assert isinstance(settings, AgentsConfig) and settings.max_depth == 1
    with pytest.raises(TypeError, match=r"the configuration section 'agents' is a AgentsConfig, not a Path"):
        agent.config.section("agents", Path)
    with pytest.raises(KeyError, match=r"no plugin declared the configuration section 'nothing'"):
        agent.config.section("nothing", AgentsConfig)


def test_a_resolved_path_is_kept_but_a_path_under_home_follows_home(tmp_path, monkeypatch):
    """Config.resolve keeps its answers (plugins resolve their files every turn); a ``~`` path is
    worked out each time, so it follows ``HOME``."""
    from monoagent._kernel.config import Config

    config = Config(base_dir=tmp_path)
    assert config.resolve("notes/a.md") == tmp_path / "notes" / "a.md"
    assert config.resolve("notes/a.md") is config.resolve(Path("notes/a.md"))
    assert config.resolve("/abs/b.md") == Path("/abs/b.md")
    monkeypatch.setenv("HOME", str(tmp_path / "one"))
    assert config.resolve("~/c.md") == tmp_path / "one" / "c.md"
    monkeypatch.setenv("HOME", str(tmp_path / "two"))
    assert config.resolve("~/c.md") == tmp_path / "two" / "c.md"
