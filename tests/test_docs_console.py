"""Every shell block of the README and the docs is run, or parsed where it cannot run offline.

The convention is in tests/doc_console.py: ``<!-- test: console -->`` runs a block's ``$``
commands and compares what they print; ``<!-- test: syntax REASON -->`` parses its ``monoagent``
commands without running them; ``<!-- test: skip REASON -->`` marks a block with none.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import click
import pytest
from doc_console import SHELL_LANGS, Block, Session, blocks, commands, matches, monoagent_argvs, normalise, parse_only

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELL_BLOCKS = [b for page in PAGES for b in blocks(page) if b.lang in SHELL_LANGS]
TEXT_BLOCKS = [b for page in PAGES for b in blocks(page) if b.lang in {"text", ""}]


def where(block: Block) -> str:
    return f"{block.page.relative_to(ROOT)}:{block.line}"


def test_every_shell_block_is_marked() -> None:
    problems = []
    for block in SHELL_BLOCKS:
        if block.action not in {"console", "syntax", "skip"}:
            problems.append(f"{where(block)}: a {block.lang} block needs <!-- test: console|syntax REASON|skip REASON -->")
        elif block.action == "console" and block.lang != "console":
            problems.append(f"{where(block)}: only a ```console block can run")
        elif block.action in {"syntax", "skip"} and not block.rest:
            problems.append(f"{where(block)}: say why the block is not run")
        elif block.action == "syntax" and not monoagent_argvs(block):
            problems.append(f"{where(block)}: a syntax block holds no monoagent command (mark it skip)")
        elif block.action == "skip" and monoagent_argvs(block):
            problems.append(f"{where(block)}: a skipped block holds monoagent commands (mark it syntax)")
        elif block.lang == "console" and block.action != "console" and re.search(r"^\$ ", block.text, flags=re.M) is None:
            problems.append(f"{where(block)}: a ```console block shows '$ ' commands; this one is a script (```sh)")
    for block in TEXT_BLOCKS:  # a transcript in disguise
        if re.search(r"^\$ ", block.text, flags=re.M):
            problems.append(f"{where(block)}: a block showing '$ ' commands is a ```console block")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "block", [b for b in SHELL_BLOCKS if b.action == "syntax"], ids=lambda b: f"{b.page.name}:{b.line}"
)
def test_syntax_blocks_parse(block: Block) -> None:
    for argv in monoagent_argvs(block):
        try:
            parse_only(argv)
        except click.exceptions.Exit:  # --help, --version
            pass
        except click.ClickException as exc:
            pytest.fail(f"{where(block)}: monoagent {' '.join(argv)}: {exc.format_message()}")


CONSOLE_PAGES = sorted({b.page for b in SHELL_BLOCKS if b.action == "console"})


@pytest.mark.parametrize("page", CONSOLE_PAGES, ids=lambda p: p.name)
def test_console_blocks_print_what_they_show(page: Path, tmp_path: Path) -> None:
    """Each page's blocks in order, in one fresh project: every command prints what the page shows."""
    session = Session(tmp_path)
    problems = []
    for block in blocks(page):
        if block.action == "write":
            session.write(block.rest, block.text)
            continue
        if block.action != "console":
            continue
        for command in commands(block):
            expected, code = command.expected, 0
            if (status := re.search(r"\n?\[exit (\d+)\]$", expected)) is not None:
                expected, code = expected[: status.start()], int(status[1])
            got_code, output = session.run(command)
            if got_code != code or not matches(expected, output):
                problems.append(
                    f"{where(block)}: $ {command.line}\n--- the page shows (exit {code}):\n{expected}\n"
                    f"--- it printed (exit {got_code}):\n{output}\n--- normalised:\n{normalise(output)}"
                )
    assert not problems, "\n\n".join(problems)


# ---------------------------------------------------------------------------------------- the convention


def test_normalising_matches_volatile_parts_and_ellipses() -> None:
    shown = "2026-12-01 21:22:41  01a2337d0883a4a4b2093c  completed  0.09 s\n...\nlast ...\n"
    real = "2027-01-02 03:04:05  01a25232efda4b233c5ee9  completed  12.5 s\nmore\nlines\nlast line, whole\n"
    assert matches(shown, real)
    assert not matches(shown, real.replace("completed", "failed"))
    assert not matches("a\nb\n", "a\nb\nc\n")  # no ellipsis, no extra line
    assert matches("a\n...\n", "a\n")


def test_a_stale_output_fails(tmp_path: Path) -> None:
    """The docs' old quick start showed a section this run does not have: the runner says so."""
    session = Session(tmp_path)
    (command,) = commands(Block(tmp_path, 1, "console", "", "console", '$ monoagent run "hi" -c demo\nstale\n'))
    code, output = session.run(command)
    assert code == 0 and "you said: hi" in output and not matches(command.expected, output)


def test_chat_input_lines_are_its_stdin(tmp_path: Path) -> None:
    text = "$ monoagent chat\nyou> hello\nagent> ... you said: hello\nyou> /exit\n"
    (command,) = commands(Block(tmp_path, 1, "console", "", "console", text))
    assert command.stdin == "hello\n/exit\n" and "you>" not in command.expected


def test_syntax_check_refuses_an_unknown_option() -> None:
    parse_only(["run", "hi", "-c", "demo"])
    with pytest.raises(click.NoSuchOption):
        parse_only(["run", "hi", "--conversaton", "demo"])
    with pytest.raises(click.UsageError):
        parse_only(["memroy", "list"])


# ---------------------------------------------------------------------------------------- the README demo


def _readme_demo() -> tuple[str, str]:
    """The README's first set-up command without its install part, and the output it promises."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    command = re.search(r"^```bash\n(python3 -m venv .*?)\n```", text, flags=re.M | re.S)[1]  # type: ignore[index]
    install = "python3 -m venv .venv && .venv/bin/pip install -e . && "
    assert command.startswith(install), command
    promised = re.search(r"^<!-- test: readme-demo output -->\n```text\n(.*?)```", text, flags=re.M | re.S)
    assert promised, "README.md shows what the demo prints in a ```text block after <!-- test: readme-demo output -->"
    return command[len(install):], promised[1]


def test_readme_demo_prints_what_it_promises_twice_and_writes_only_in_the_checkout(tmp_path: Path) -> None:
    """Run twice, from a checkout, in a real shell: both runs print the promised output, and
    nothing is written outside the checkout (not the platform data directory, not HOME)."""
    demo, promised = _readme_demo()
    checkout, home = tmp_path / "checkout", tmp_path / "home"
    (checkout / ".venv" / "bin").mkdir(parents=True)
    home.mkdir()
    script = checkout / ".venv" / "bin" / "monoagent"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m monoagent "$@"\n', encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("MONO_AGENT_", "XDG_"))}
    env.update(HOME=str(home), MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD="1", TERM="dumb")
    for attempt in (1, 2):
        done = subprocess.run(["bash", "-c", demo], cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0 and matches(promised, done.stdout), f"run {attempt}:\n{done.stdout}"
    assert list(home.iterdir()) == [], "the demo wrote outside the checkout"
    assert (checkout / ".mono-agent" / "demo" / "history").is_dir()


# ---------------------------------------------------------------------------------------- the MCP example


def test_the_mcp_page_runs_its_example_server_end_to_end() -> None:
    """docs/mcp.md's server, its configuration and a scripted turn calling its tool are all run by
    test_console_blocks_print_what_they_show[mcp.md]; this keeps the example from shrinking."""
    page = blocks(ROOT / "docs" / "mcp.md")
    written = {b.rest: b.text for b in page if b.action == "write"}
    assert "from mcp.server.mcpserver import MCPServer" in written["units.py"]
    assert "[mcp.servers.units]" in written["monoagent.toml"]
    assert "units__to_celsius" in written["convert.toml"]
    console = "".join(b.text for b in page if b.action == "console")
    assert "monoagent run" in console and "result (8 bytes): 37.0 °C" in console
