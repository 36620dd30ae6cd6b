"""The exit-code table (docs/cli.md) through the real command line: every way a command ends, its code
and its one ``monoagent: error: ...`` line.

Each case runs ``python -m monoagent`` in a fresh project directory with a clean environment (no
``MONO_AGENT_*`` variable from the caller, home and XDG config under the test's directory).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from monoagent import ComponentFactoryError, ExitCode, HookError, HookResultError, LocalPluginError, UsageError
from monoagent.testing import fresh_agent

PREFIX = "monoagent: error: "

RAISING_HOOK = """
from monoagent import hookimpl

@hookimpl
def section_identity(turn):
    raise RuntimeError("identity is broken")
"""

WRONG_TYPE_HOOK = """
from monoagent import hookimpl

@hookimpl
def extra_sections(turn):
    return "a plain string"
"""

FACTORY_RAISES = """
from monoagent import hookimpl

def build(agent, model):
    raise OSError("the socket file is gone")

@hookimpl
def register_providers(register):
    register("flaky", build)
"""

FAILING_PROVIDER_SCRIPT = '{"steps": [{"error": "the upstream model is overloaded"}]}'

COMMANDS_PLUGIN = """
import click
from monoagent import hookimpl, UsageError

@click.command("leave")
@click.argument("how")
@click.pass_context
def leave(ctx, how):
    if how == "exit4":
        ctx.exit(4)
    if how == "click":
        raise click.ClickException("the thing is not there")
    if how == "usage":
        raise UsageError("HOW must be one of exit4, click, usage, bug")
    raise ZeroDivisionError("a bug in the plugin")

@hookimpl
def register_commands(cli):
    cli.add_command(leave)
"""


def clean_env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
    env.update(MONO_AGENT_HOME=str(root / "home"), XDG_CONFIG_HOME=str(root / "xdg"), MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD="1")
    env.update(extra)
    return env


def monoagent(root: Path, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monoagent", *args], cwd=root, env=clean_env(root, **env),
        input=stdin, capture_output=True, text=True, timeout=120,
    )


def write(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@attrs.frozen
class Case:
    """One way a command ends: the files it finds, its arguments, its code and what its message names."""

    name: str
    args: tuple[str, ...]
    code: int
    names: tuple[str, ...]
    files: dict[str, str] = attrs.field(factory=dict)
    env: dict[str, str] = attrs.field(factory=dict)
    usage: bool = False


PREFIXES = "registered provider prefixes: anthropic, lmstudio, offline, ollama, openai, openai-compatible"

CASES = [
    Case("bad flag", ("run", "--bogus", "hi"), ExitCode.USAGE, ("No such option '--bogus'",), usage=True),
    Case("bad config value", ("run", "hi"), ExitCode.USAGE, ("invalid configuration:", "runtime.maxTurns = 101"),
         files={"monoagent.toml": "[runtime]\nmaxTurns = 101\n"}),
    Case("missing config file", ("--config", "nowhere.toml", "run", "hi"), ExitCode.USAGE, ("nowhere.toml: no such file",)),
    Case("model without a prefix", ("run", "-m", "gpt-4o", "hi"), ExitCode.USAGE,
         ("model 'gpt-4o' has no provider prefix", "'<provider>:<model>'", PREFIXES)),
    Case("unknown model prefix", ("run", "-m", "nosuchprefix:x", "hi"), ExitCode.USAGE,
         ("model 'nosuchprefix:x' names the provider prefix 'nosuchprefix'", "'<provider>:<model>'", PREFIXES)),
    Case("chat -m without a prefix", ("chat", "-m", "gpt-4o"), ExitCode.USAGE, ("model 'gpt-4o' has no provider prefix", PREFIXES)),
    Case("chat -m unknown prefix", ("chat", "-m", "nosuchprefix:x"), ExitCode.USAGE, ("'nosuchprefix'", PREFIXES)),
    Case("runtime.model unknown prefix", ("run", "hi"), ExitCode.USAGE, ("model 'nosuchprefix:x'", PREFIXES),
         files={"monoagent.toml": '[runtime]\nmodel = "nosuchprefix:x"\n'}),
    Case("provider failure mid-turn", ("run", "-m", "offline:scripted", "hi"), ExitCode.FAILED,
         ("the upstream model is overloaded",), files={"script.json": FAILING_PROVIDER_SCRIPT},
         env={"MONO_AGENT_OFFLINE_SCRIPT": "script.json"}),
    Case("a hook that raises", ("--plugins-dir", "plugins", "run", "hi"), ExitCode.PLUGIN,
         ("hook 'section_identity' failed in plugin 'raising'", "RuntimeError: identity is broken"),
         files={"plugins/raising.py": RAISING_HOOK}),
    Case("a hook returning the wrong type", ("--plugins-dir", "plugins", "prompt", "hi"), ExitCode.PLUGIN,
         ("plugin 'wrong' returned a value of type str from hook 'extra_sections'", "monoagent.Section"),
         files={"plugins/wrong.py": WRONG_TYPE_HOOK}),
    Case("a provider factory that raises", ("--plugins-dir", "plugins", "run", "-m", "flaky:x", "hi"), ExitCode.PLUGIN,
         ("the provider 'flaky' of plugin 'flakyplugin' (registered through register_providers) failed to build",
          "OSError: the socket file is gone"), files={"plugins/flakyplugin.py": FACTORY_RAISES}),
    Case("a local plugin with a syntax error", ("run", "hi"), ExitCode.PLUGIN,
         ("local plugin 'monoagent_local'", "monoagent_local.py", "SyntaxError", "line 2", "plugins.localFailures"),
         files={"monoagent.toml": "", "monoagent_local.py": "x = 1\ndef broken(:\n"}),
    Case("a local plugin that fails to import", ("--plugins-dir", "plugins", "run", "hi"), ExitCode.PLUGIN,
         ("local plugin 'importer'", "importer.py", "ModuleNotFoundError", "line 2"),
         files={"plugins/importer.py": "import os\nimport monoagent_no_such_module_for_tests\n"}),
    Case("a missing --plugins-dir", ("--plugins-dir", "nowhere", "run", "hi"), ExitCode.PLUGIN, ("nowhere", "does not exist")),
    Case("history show of an unknown conversation", ("history", "show", "nosuch"), ExitCode.FAILED,
         ("no history for conversation 'nosuch'",)),
    Case("logs of an unknown run", ("logs", "0123456789abcdef012345"), ExitCode.FAILED, ("no readable run '0123456789abcdef012345'",)),
    Case("memory with no tier configured", ("memory", "list"), ExitCode.USAGE, ("no memory tier is configured",), usage=True),
    Case("a plugin command's ClickException", ("--plugins-dir", "plugins", "leave", "click"), ExitCode.FAILED,
         ("the thing is not there",), files={"plugins/leaver.py": COMMANDS_PLUGIN}),
    Case("a plugin command's monoagent.UsageError", ("--plugins-dir", "plugins", "leave", "usage"), ExitCode.USAGE,
         ("HOW must be one of",), files={"plugins/leaver.py": COMMANDS_PLUGIN}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_every_way_a_command_ends_has_its_code_and_the_one_prefix(tmp_path: Path, case: Case) -> None:
    for relative, text in case.files.items():
        write(tmp_path, relative, text)
    done = monoagent(tmp_path, *case.args, **case.env)
    assert done.returncode == case.code, done.stderr
    lines = done.stderr.splitlines()
    errors = [line for line in lines if line.startswith(PREFIX)]
    assert len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr and "\nError: " not in "\n" + done.stderr
    message = done.stderr[done.stderr.index(PREFIX):]
    for named in case.names:
        assert named in message, (named, done.stderr)
    assert lines[0].startswith("Usage: monoagent") is case.usage, done.stderr  # click's usage line, for a usage error only


def test_a_model_without_a_prefix_and_an_unknown_prefix_end_the_same_way(tmp_path: Path) -> None:
    plain, unknown = (monoagent(tmp_path, "run", "-m", model, "hi") for model in ("gpt-4o", "nosuchprefix:x"))
    assert plain.returncode == unknown.returncode == ExitCode.USAGE
    shape = [line.split(";", 1)[1] for line in (plain.stderr.splitlines()[1], unknown.stderr.splitlines()[1])]
    assert shape[0].startswith(shape[1].rstrip())  # the same sentence about the shape and the registered prefixes
    assert plain.stderr.splitlines()[0] == unknown.stderr.splitlines()[0] == PREFIX + "invalid configuration:"


def test_ctx_exit_in_a_plugin_command_keeps_its_code(tmp_path: Path) -> None:
    """click's ``main(standalone_mode=False)`` returned ``ctx.exit(4)``'s code and monoagent dropped it: exit 0."""
    write(tmp_path, "plugins/leaver.py", COMMANDS_PLUGIN)
    assert monoagent(tmp_path, "--plugins-dir", "plugins", "leave", "exit4").returncode == 4


def test_an_unexpected_exception_shows_its_traceback_then_the_prefixed_line(tmp_path: Path) -> None:
    write(tmp_path, "plugins/leaver.py", COMMANDS_PLUGIN)
    done = monoagent(tmp_path, "--plugins-dir", "plugins", "leave", "bug")
    assert done.returncode == ExitCode.FAILED
    assert done.stderr.startswith("Traceback (most recent call last)")
    assert done.stderr.splitlines()[-1].startswith(PREFIX + "ZeroDivisionError: a bug in the plugin")


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path: Path) -> None:
    """``monoagent config show | head -1``: click's own main() ended such a command with 1 and no traceback."""
    read, write_end = os.pipe()
    os.close(read)  # every write to standard output now fails with EPIPE
    try:
        done = subprocess.run([sys.executable, "-m", "monoagent", "config", "show"], cwd=tmp_path, env=clean_env(tmp_path),
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (ExitCode.FAILED, "")


def test_debug_shows_the_traceback_and_keeps_the_code(tmp_path: Path) -> None:
    write(tmp_path, "plugins/raising.py", RAISING_HOOK)
    done = monoagent(tmp_path, "--debug", "--plugins-dir", "plugins", "run", "hi")
    assert done.returncode == ExitCode.PLUGIN
    assert "Traceback (most recent call last)" in done.stderr and "RuntimeError: identity is broken" in done.stderr
    assert done.stderr.splitlines()[-1].startswith(PREFIX + "hook 'section_identity' failed in plugin 'raising'")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a pseudo-terminal")
def test_ctrl_c_ends_with_130_and_the_prefix(tmp_path: Path) -> None:
    from test_cancellation import Terminal  # a real pseudo-terminal, so Ctrl-C is SIGINT

    terminal = Terminal(tmp_path, ("run", "go slow"))
    try:
        terminal.wait_for(b"thinking")
        terminal.send(b"\x03")
        assert terminal.exit_code() == ExitCode.INTERRUPTED
    finally:
        terminal.close()
    assert (PREFIX + "interrupted").encode() in terminal.transcript


# --------------------------------------------------------------------------- local plugin files


def test_plugins_lists_a_failed_local_plugin_then_ends_with_it(tmp_path: Path) -> None:
    write(tmp_path, "monoagent.toml", "")
    write(tmp_path, "monoagent_local.py", "x = 1\ndef broken(:\n")
    done = monoagent(tmp_path, "plugins", "--json")
    assert done.returncode == ExitCode.PLUGIN
    [row] = [row for row in json.loads(done.stdout) if row["name"] == "monoagent_local"]
    assert row["status"] == "failed" and "SyntaxError" in row["reason"] and "line 2" in row["reason"]
    assert done.stderr.startswith(PREFIX + "local plugin 'monoagent_local'")
    text = monoagent(tmp_path, "plugins")
    assert text.returncode == ExitCode.PLUGIN and "monoagent_local" in text.stdout and "failed (SyntaxError" in text.stdout
    assert monoagent(tmp_path, "--help").returncode == 0  # help still works, to find the way out


def test_local_failures_warn_goes_on_without_the_file(tmp_path: Path) -> None:
    write(tmp_path, "monoagent.toml", '[plugins]\nlocalFailures = "warn"\n')
    write(tmp_path, "monoagent_local.py", "raise RuntimeError('not today')\n")
    done = monoagent(tmp_path, "run", "hi")
    assert done.returncode == 0 and "you said: hi" in done.stdout
    assert "monoagent_local" in done.stderr and "RuntimeError: not today (line 1)" in done.stderr and PREFIX not in done.stderr
    (tmp_path / "monoagent.toml").write_text("", encoding="utf-8")
    assert monoagent(tmp_path, "run", "hi", MONO_AGENT_LOCAL_PLUGIN_FAILURES="warn").returncode == 0
    assert monoagent(tmp_path, "run", "hi").returncode == ExitCode.PLUGIN
    refused = monoagent(tmp_path, "run", "hi", MONO_AGENT_LOCAL_PLUGIN_FAILURES="sometimes")
    assert refused.returncode == ExitCode.USAGE and "plugins.localFailures" in refused.stderr and "'warn'" in refused.stderr


def test_agent_raises_for_a_local_plugin_file_that_fails_to_load(tmp_path: Path) -> None:
    plugins = write(tmp_path, "plugins/badly.py", "VALUE = 1\nVALUE.missing\n").parent
    write(tmp_path, "plugins/fine.py", "")
    with pytest.raises(LocalPluginError) as info:
        fresh_agent(tmp_path, plugins_dirs=[plugins])
    error = info.value
    assert (error.plugin, error.path, error.exit_code) == ("badly", str(plugins / "badly.py"), ExitCode.PLUGIN)
    assert "AttributeError" in str(error) and "(line 2)" in str(error)
    agent = fresh_agent(tmp_path, plugins_dirs=[plugins], env={"MONO_AGENT_LOCAL_PLUGIN_FAILURES": "warn"})
    assert {r.name: r.status for r in agent.host.records if r.source == "local"} == {"badly": "failed", "fine": "active"}
    agent.close()


def test_every_failed_local_file_is_named(tmp_path: Path) -> None:
    plugins = write(tmp_path, "plugins/one.py", "raise ValueError('one')\n").parent
    write(tmp_path, "plugins/two.py", "def (:\n")
    with pytest.raises(LocalPluginError, match=r"2 local plugin files failed to load:\n  - 'one' .*ValueError: one.*\n  - 'two' .*SyntaxError"):
        fresh_agent(tmp_path, plugins_dirs=[plugins])


# --------------------------------------------------------------------------- hook errors name the plugin


def plugin_answering(hook: str, value: object) -> object:
    """A plugin object whose one hook implementation answers ``value``."""
    from monoagent import hookimpl

    def answer(**_: object) -> object:
        return value

    namespace = {hook: staticmethod(hookimpl(specname=hook)(answer))}
    return type("Answering", (), namespace)()


WRONG_ANSWERS: list[tuple[str, object, Callable[..., object]]] = [
    ("section_session", 42, lambda agent: agent.run_sync("hi")),
    ("render_user_message", "text", lambda agent: agent.run_sync("hi")),
    ("augment_user_message", [object()], lambda agent: agent.run_sync("hi")),
    ("count_tokens", "many", lambda agent: agent.count_tokens("hi", "offline:echo")),
    ("count_tokens", True, lambda agent: agent.count_tokens("hi", "offline:echo")),
    ("redact", b"bytes", lambda agent: agent.redact("hi", "error")),
    ("recall_memory", ["a hit as text"], lambda agent: agent.run_sync("hi")),
    ("recall_memory", "a hit as text", lambda agent: agent.run_sync("hi")),
]


def test_an_awaited_recall_answer_is_checked_and_blamed_once_awaited(tmp_path: Path) -> None:
    async def recall() -> list[str]:
        return ["not a MemoryHit"]

    from monoagent import hookimpl

    class Recalling:
        @hookimpl
        def recall_memory(self, turn):
            return recall()

    agent = fresh_agent(tmp_path, plugins=[("recalling", Recalling())])
    with pytest.raises(HookResultError, match="plugin 'recalling' returned a value of type str from hook 'recall_memory'"):
        agent.run_sync("hi")
    agent.close()


@pytest.mark.parametrize("hook, value, call", WRONG_ANSWERS, ids=[f"{h}-{type(v).__name__}" for h, v, _ in WRONG_ANSWERS])
def test_a_wrong_answer_names_the_hook_and_the_plugin(tmp_path: Path, hook: str, value: object, call: Callable[..., object]) -> None:
    agent = fresh_agent(tmp_path, plugins=[("answering", plugin_answering(hook, value))])
    try:
        with pytest.raises(HookResultError) as info:
            call(agent)
    finally:
        agent.close()
    assert (info.value.hook, info.value.plugin, info.value.exit_code) == (hook, "answering", ExitCode.PLUGIN)
    shown = value[0] if isinstance(value, list) else value  # a collect-all hook's list: the item is named
    assert f"plugin 'answering' returned a value of type {type(shown).__name__} from hook {hook!r}" in str(info.value)


def test_a_wrong_answer_behind_a_wrapper_names_the_implementation_or_the_wrapper(tmp_path: Path) -> None:
    """pluggy runs the wrapper and the implementations; the kernel still names the plugin whose
    implementation answered wrongly, and a wrong value the wrapper returned is the wrappers'."""
    from monoagent import hookimpl

    class Wrapper:
        @hookimpl(wrapper=True)
        def count_tokens(self, text, model):
            return (yield)

    agent = fresh_agent(tmp_path, plugins=[("answering", plugin_answering("count_tokens", "many")), ("wrapping", Wrapper())])
    with pytest.raises(HookResultError, match=r"plugin 'answering' returned a value of type str") as info:
        agent.count_tokens("hi", "offline:echo")
    assert (info.value.hook, info.value.plugin) == ("count_tokens", "answering")
    agent.close()

    class Spoiling:
        @hookimpl(wrapper=True)
        def count_tokens(self, text, model):
            yield
            return "spoilt"

    agent = fresh_agent(tmp_path, plugins=[("spoiling", Spoiling())])
    with pytest.raises(HookResultError, match=r"plugin 'the wrappers of spoiling' returned a value of type str") as info:
        agent.count_tokens("hi", "offline:echo")
    assert info.value.hook == "count_tokens"
    agent.close()


def test_an_exception_from_a_checked_hook_names_the_plugin(tmp_path: Path) -> None:
    from monoagent import hookimpl

    class Raising:
        @hookimpl
        def count_tokens(self, text, model):
            raise KeyError(model)

    agent = fresh_agent(tmp_path, plugins=[("raising", Raising())])
    with pytest.raises(HookError) as info:
        agent.count_tokens("hi", "offline:echo")
    assert (info.value.hook, info.value.plugin, type(info.value.error)) == ("count_tokens", "raising", KeyError)
    assert isinstance(info.value, HookError) and info.value.exit_code == ExitCode.PLUGIN
    agent.close()


def test_a_component_factory_that_raises_names_the_component_and_the_plugin(tmp_path: Path) -> None:
    plugins = write(tmp_path, "plugins/flakyplugin.py", FACTORY_RAISES).parent
    agent = fresh_agent(tmp_path, plugins_dirs=[plugins])
    with pytest.raises(ComponentFactoryError) as info:
        agent.provider("flaky:x")
    error = info.value
    assert (error.kind, error.name, error.plugin, error.hook) == ("provider", "flaky", "flakyplugin", "register_providers")
    assert isinstance(error.error, OSError) and error.exit_code == ExitCode.PLUGIN
    agent.close()


def test_usage_error_is_public_and_exits_2() -> None:
    assert UsageError("x").exit_code == ExitCode.USAGE == 2
