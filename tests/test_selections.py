"""A component the configuration selects by name and no plugin registers ends every command the same way.

``run``, ``prompt``, ``chat`` and ``serve`` (and ``serve --check``) meet each such selection before
a turn is answered: exit 2 (1 for ``serve --check``, which lists problems) and the message
``monoagent config validate`` prints. Each case runs the real command line in a subprocess.
"""

from __future__ import annotations

import attrs
import pytest
from serving import serve_env, serve_once
from test_exit_codes import PREFIX, monoagent, write

from monoagent import ExitCode


@attrs.frozen
class Selection:
    name: str
    toml: str
    message: str


SELECTIONS = [
    Selection("model", '[runtime]\nmodel = "nosuch:x"\n', "names the provider prefix 'nosuch'"),
    Selection("fallback", '[runtime]\nfallbacks = ["nosuch:x"]\n', "names the provider prefix 'nosuch'"),
    Selection("history store", '[history]\nstore = "nosuch"\n', "history store 'nosuch' is selected in the configuration"),
    Selection("tool history store", '[toolHistory]\nstore = "nosuch"\n', "tool history store 'nosuch' is selected in the configuration"),
    Selection("compaction policy", '[runtime.compaction]\nenabled = true\npolicy = "nosuch"\n',
              "compaction policy 'nosuch' is selected in the configuration"),
    Selection("session backend", '[runtime.session]\nbackend = "nosuch"\n', "session backend 'nosuch' is selected in the configuration"),
    Selection("memory tier", '[memory]\ntiers = ["vector"]\n',
              "memory tier 'vector' is selected in the configuration, but no active plugin registers it (available: journal, lite)"),
    Selection("subagent model", '[agents.named.helper]\nmodel = "nosuch:x"\n',
              "agents.named.helper.model: model 'nosuch:x' names the provider prefix 'nosuch'"),
    Selection("embedder", '[memory]\ntiers = ["journal"]\n[memory.journal]\nembedder = "nosuch"\n',
              "embedder 'nosuch' is selected in the configuration"),
]

COMMANDS = {
    "run": (("run", "hi"), ""),
    "prompt": (("prompt", "hi"), ""),
    "chat": (("chat",), "hi\n"),
}


def validate_message(root, selection: Selection) -> str:
    done = monoagent(root, "config", "validate")
    assert done.returncode == ExitCode.USAGE, done.stderr
    return done.stderr[done.stderr.index(PREFIX):].strip()


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("selection", SELECTIONS, ids=lambda s: s.name)
def test_a_selected_component_that_does_not_exist_ends_the_command_with_exit_2(tmp_path, selection: Selection, command: str) -> None:
    write(tmp_path, "monoagent.toml", selection.toml)
    expected = validate_message(tmp_path, selection)
    assert selection.message in expected
    args, stdin = COMMANDS[command]
    done = monoagent(tmp_path, *args, stdin=stdin)
    assert done.returncode == ExitCode.USAGE, (done.stdout, done.stderr)
    assert done.stderr[done.stderr.index(PREFIX):].strip() == expected
    assert "you said" not in done.stdout and "agent>" not in done.stdout


@pytest.mark.parametrize("selection", SELECTIONS, ids=lambda s: s.name)
def test_serve_refuses_to_start_and_serve_check_lists_the_selection(tmp_path, selection: Selection) -> None:
    write(tmp_path, "monoagent.toml", selection.toml)
    expected = validate_message(tmp_path, selection)
    started = serve_once(tmp_path, "serve", env=serve_env(tmp_path))
    assert started.returncode == ExitCode.USAGE, (started.stdout, started.stderr)
    assert "listening" not in started.stdout
    assert started.stderr[started.stderr.index(PREFIX):].strip() == expected
    checked = serve_once(tmp_path, "serve", "--check", env=serve_env(tmp_path))
    assert checked.returncode == ExitCode.FAILED, checked.stderr
    assert f"  - {expected.removeprefix(PREFIX)}" in checked.stderr.splitlines() or selection.message in checked.stderr
