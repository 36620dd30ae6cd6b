"""Renamed configuration keys and environment variables: the old names are still read, with a warning.

The old names are the ones the documentation used to give (``providers.piNative.*``,
``MONO_AGENT_PI_*``); they are spelt out here rather than read from the rename tables, so a
table that loses an entry fails a test. Every test passes its environment explicitly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from monoagent._kernel.config import CONFIG_FILENAME, RENAMED_ENV
from monoagent._kernel.config_keys import iter_keys
from monoagent._kernel.config_loading import load_config, renamed_keys
from monoagent._kernel.errors import ConfigError
from monoagent.testing import fresh_agent
from monoagent_plugins.history.session_files import SessionFilesConfig

ROOT = Path(__file__).resolve().parents[1]

SECTIONS = {"runtime.session": SessionFilesConfig}
"""The plugin section a renamed key now lives in: ``runtime.session.transcriptsDir`` is the ``files`` session backend's."""

#: old key -> (new key, a value other than the default, the Python attribute path of the new key)
OLD_KEYS: dict[str, tuple[str, Any, str]] = {
    "providers.piNative.transport": ("providers.client.transport", "sse", "providers.client.transport"),
    "providers.piNative.promptCacheDiagnostics": (
        "providers.client.promptCacheDiagnostics", True, "providers.client.prompt_cache_diagnostics"),
    "providers.piNative.piMaxRetries": ("providers.client.maxRetries", 5, "providers.client.max_retries"),
    "providers.piNative.maxRetryDelayMs": ("providers.client.maxRetryDelayMs", 1234, "providers.client.max_retry_delay_ms"),
    "providers.piNative.streamIdleTimeoutMs": (
        "providers.client.streamIdleTimeoutMs", 4321, "providers.client.stream_idle_timeout_ms"),
    "providers.piNative.streamTimeoutMs": ("providers.client.streamTimeoutMs", 98765, "providers.client.stream_timeout_ms"),
    "providers.piNative.maxStreamBytes": ("providers.client.maxStreamBytes", 4096, "providers.client.max_stream_bytes"),
    "providers.piNative.maxStreamEventBytes": (
        "providers.client.maxStreamEventBytes", 8192, "providers.client.max_stream_event_bytes"),
    "providers.piNative.piSessionsRoot": ("runtime.session.transcriptsDir", "sessions", "runtime.session.transcripts_dir"),
}

#: old variable -> (new variable, a value as text, the new key's Python attribute path, the value it sets)
OLD_ENV: dict[str, tuple[str, str, str, Any]] = {
    "MONO_AGENT_PI_TRANSPORT": ("MONO_AGENT_PROVIDER_TRANSPORT", "websocket", "providers.client.transport", "websocket"),
    "MONO_AGENT_PI_PROMPT_CACHE_DIAGNOSTICS": (
        "MONO_AGENT_PROMPT_CACHE_DIAGNOSTICS", "true", "providers.client.prompt_cache_diagnostics", True),
    "MONO_AGENT_PI_MAX_RETRIES": ("MONO_AGENT_PROVIDER_MAX_RETRIES", "7", "providers.client.max_retries", 7),
    "MONO_AGENT_PI_SESSIONS_ROOT": (
        "MONO_AGENT_SESSION_TRANSCRIPTS_DIR", "/tmp/monoagent-transcripts", "runtime.session.transcripts_dir",
        Path("/tmp/monoagent-transcripts")),
    "MONO_AGENT_PI_STREAM_IDLE_TIMEOUT_MS": (
        "MONO_AGENT_PROVIDER_STREAM_IDLE_TIMEOUT_MS", "777", "providers.client.stream_idle_timeout_ms", 777),
    "MONO_AGENT_PI_STREAM_TIMEOUT_MS": ("MONO_AGENT_PROVIDER_STREAM_TIMEOUT_MS", "888", "providers.client.stream_timeout_ms", 888),
    "MONO_AGENT_PI_MAX_STREAM_BYTES": ("MONO_AGENT_PROVIDER_MAX_STREAM_BYTES", "2048", "providers.client.max_stream_bytes", 2048),
    "MONO_AGENT_PI_MAX_STREAM_EVENT_BYTES": (
        "MONO_AGENT_PROVIDER_MAX_STREAM_EVENT_BYTES", "3072", "providers.client.max_stream_event_bytes", 3072),
}


def nested(path: str, value: Any) -> dict[str, Any]:
    tree: Any = value
    for part in reversed(path.split(".")):
        tree = {part: tree}
    return tree


def attribute(config: Any, path: str) -> Any:
    section, _, leaf = path.rpartition(".")
    if section in config.sections and hasattr(config.section(section), leaf):
        return getattr(config.section(section), leaf)
    for part in path.split("."):
        config = getattr(config, part)
    return config


def write_file(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / CONFIG_FILENAME
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("old", OLD_KEYS)
def test_an_old_key_sets_its_new_key_with_one_warning_naming_both(tmp_path: Path, old: str) -> None:
    new, value, python = OLD_KEYS[old]
    file = write_file(tmp_path, nested(old, value))
    config = load_config(file, env={}, plugin_sections=SECTIONS)
    assert attribute(config, python) == (Path(value) if python.endswith("transcripts_dir") else value)
    assert config.warnings == [f"config key {old} (in file {file}) is deprecated; rename it to {new}"]
    assert config.sources[new] == f"file {file}, under its old name {old}"


@pytest.mark.parametrize("old", OLD_KEYS)
def test_an_old_key_set_with_its_new_key_is_an_error_naming_both(tmp_path: Path, old: str) -> None:
    new, value, _ = OLD_KEYS[old]
    data = nested(old, value)
    node = data
    for part in new.split(".")[:-1]:
        node = node.setdefault(part, {})
    node[new.rpartition(".")[2]] = value
    file = write_file(tmp_path, data)
    with pytest.raises(ConfigError) as exc:
        load_config(file, env={}, plugin_sections=SECTIONS)
    assert exc.value.problems == [
        f"{new} and {old} are both set (in file {file}); {old} is the old name of {new}: keep only {new}"
    ]


@pytest.mark.parametrize("old", OLD_ENV)
def test_an_old_variable_sets_its_new_key_with_one_warning_naming_both(old: str) -> None:
    new, text, python, value = OLD_ENV[old]
    config = load_config(data={}, env={old: text}, plugin_sections=SECTIONS)
    assert attribute(config, python) == value
    assert config.warnings == [f"environment variable {old} is deprecated; rename it to {new}"]
    assert f"env {old}" in config.sources.values()


@pytest.mark.parametrize("old", OLD_ENV)
def test_an_old_variable_set_with_its_new_one_is_an_error_naming_both(old: str) -> None:
    new, text, _, _ = OLD_ENV[old]
    with pytest.raises(ConfigError) as exc:
        load_config(data={}, env={old: text, new: text}, plugin_sections=SECTIONS)
    assert exc.value.problems == [f"{new} and {old} are both set; {old} is the old name of {new}: unset {old}"]


def test_the_new_names_work_without_a_warning(tmp_path: Path) -> None:
    data: dict[str, Any] = {}
    for new, value, _ in OLD_KEYS.values():
        node = data
        for part in new.split(".")[:-1]:
            node = node.setdefault(part, {})
        node[new.rpartition(".")[2]] = value
    config = load_config(write_file(tmp_path, data), env={}, plugin_sections=SECTIONS)
    for new, value, python in OLD_KEYS.values():
        assert attribute(config, python) == (Path(value) if python.endswith("transcripts_dir") else value), new
    env = {new: text for new, text, _, _ in OLD_ENV.values()}
    from_env = load_config(data={}, env=env, plugin_sections=SECTIONS)
    for new, _, python, value in OLD_ENV.values():
        assert attribute(from_env, python) == value, new
    assert config.warnings == from_env.warnings == []


def test_the_new_variables_are_the_keys_own() -> None:
    keys = [*iter_keys(), *(key for path, cls in SECTIONS.items() for key in iter_keys(cls, path + "."))]
    variables = {key.env: key.path for key in keys if key.env}
    for new, _, python, _ in OLD_ENV.values():
        assert new in variables, new
        assert variables[new].replace(".", "").lower() == python.replace(".", "").replace("_", "").lower()


def test_an_old_name_in_the_file_and_its_new_variable_follow_the_usual_precedence(tmp_path: Path) -> None:
    file = write_file(tmp_path, {"providers": {"piNative": {"piMaxRetries": 1}}})
    config = load_config(file, env={"MONO_AGENT_PROVIDER_MAX_RETRIES": "6"})
    assert config.providers.client.max_retries == 6  # env > file, whatever the file's spelling
    assert config.sources["providers.client.maxRetries"] == "env MONO_AGENT_PROVIDER_MAX_RETRIES"


def test_a_misspelt_key_under_the_old_table_is_suggested_from_the_new_one(tmp_path: Path) -> None:
    file = write_file(tmp_path, {"providers": {"piNative": {"maxRetires": 1}}})
    with pytest.raises(ConfigError) as exc:
        load_config(file, env={})
    [problem] = exc.value.problems
    assert problem.startswith("providers.client.maxRetires: unknown key")
    assert "did you mean 'maxRetries'?" in problem


def test_a_bad_value_under_an_old_name_is_reported_by_the_new_name_and_where_it_was(tmp_path: Path) -> None:
    file = write_file(tmp_path, {"providers": {"piNative": {"piMaxRetries": 9}}})
    with pytest.raises(ConfigError) as exc:
        load_config(file, env={})
    assert exc.value.problems == [
        f"providers.client.maxRetries = 9 (from file {file}, under its old name providers.piNative.piMaxRetries): "
        "out of range; allowed: an integer from 0 to 8"
    ]
    with pytest.raises(ConfigError) as exc:
        load_config(data={}, env={"MONO_AGENT_PI_TRANSPORT": "carrier-pigeon"})
    assert exc.value.problems[0].startswith('providers.client.transport = "carrier-pigeon" (from env MONO_AGENT_PI_TRANSPORT)')


def test_the_agent_prints_one_warning_line_per_old_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    agent = fresh_agent(
        tmp_path,
        config={"providers": {"piNative": {"piMaxRetries": 1, "transport": "sse"}}},
        env={"MONO_AGENT_PI_MAX_STREAM_BYTES": "4096"},
    )
    assert (agent.config.providers.client.max_retries, agent.config.providers.client.transport) == (1, "sse")
    assert agent.config.providers.client.max_stream_bytes == 4096
    lines = capsys.readouterr().err.splitlines()
    assert sorted(lines) == sorted([
        "monoagent: warning: config key providers.piNative.piMaxRetries (in python) is deprecated; "
        "rename it to providers.client.maxRetries",
        "monoagent: warning: config key providers.piNative.transport (in python) is deprecated; "
        "rename it to providers.client.transport",
        "monoagent: warning: environment variable MONO_AGENT_PI_MAX_STREAM_BYTES is deprecated; "
        "rename it to MONO_AGENT_PROVIDER_MAX_STREAM_BYTES",
    ])


def test_config_show_and_validate_name_the_new_keys(tmp_path: Path) -> None:
    (tmp_path / CONFIG_FILENAME).write_text(
        '[providers.piNative]\npiMaxRetries = 3\npiSessionsRoot = "sessions"\n', encoding="utf-8"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
    env.update(MONO_AGENT_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"), MONO_AGENT_PI_TRANSPORT="sse")

    def monoagent(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "monoagent", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done

    shown = monoagent("config", "show", "--json")
    rows = json.loads(shown.stdout)
    assert rows["providers.client.maxRetries"]["value"] == 3
    assert rows["providers.client.transport"]["value"] == "sse"
    assert rows["runtime.session.transcriptsDir"]["value"] == "sessions"
    assert rows["runtime.session.backend"] == {  # the old key still makes sessions durable, and says so
        "value": "files",
        "source": f"implied by runtime.session.transcriptsDir (file {tmp_path / CONFIG_FILENAME}, under its old name "
                  f"providers.piNative.piSessionsRoot)",
    }
    assert not [key for key in rows if "piNative" in key or "piSessionsRoot" in key]
    warnings = [line for line in shown.stderr.splitlines() if "deprecated" in line]
    assert len(warnings) == 3, shown.stderr
    assert any("MONO_AGENT_PI_TRANSPORT" in line and "MONO_AGENT_PROVIDER_TRANSPORT" in line for line in warnings)
    validated = monoagent("config", "validate")
    assert "configuration is valid" in validated.stdout
    assert len([line for line in validated.stderr.splitlines() if "deprecated" in line]) == 3


def test_the_rename_tables_hold_the_old_names() -> None:
    assert renamed_keys() == {old: new for old, (new, _, _) in OLD_KEYS.items()}
    assert {old: new for old, (new, _, _, _) in OLD_ENV.items()} == RENAMED_ENV


def test_the_configuration_reference_lists_every_old_name_with_its_new_name() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for old, (new, _, _) in OLD_KEYS.items():
        assert f"| `{old}` | `{new}` |" in text, old
    for old, (new, _, _, _) in OLD_ENV.items():
        assert f"| `{old}` | `{new}` |" in text, old
    outside = text.replace(text[text.index("## Renamed keys and variables"):text.index("## Kernel keys")], "")
    assert "piNative" not in outside and "MONO_AGENT_PI_" not in outside
