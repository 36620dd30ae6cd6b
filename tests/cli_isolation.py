"""A clean environment for in-process CLI tests (CliRunner against ``monoagent._cli``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def isolate_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, home: bool = True) -> None:
    """No ``MONO_AGENT_*`` variable from the caller's shell, ``MONO_AGENT_HOME`` (unless ``home`` is
    false) and ``XDG_CONFIG_HOME`` under ``tmp_path``, ``tmp_path`` as the working directory, and the
    CLI's logging set-up left alone (it would reconfigure loguru for the whole test process)."""
    import monoagent._cli as cli_module

    for name in list(os.environ):
        if name.startswith("MONO_AGENT_"):
            monkeypatch.delenv(name)
    if home:
        monkeypatch.setenv("MONO_AGENT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli_module, "_configure_logging", lambda debug: None)


def run_main(*args: str) -> int:
    """``monoagent._cli.main`` in this process, as the console script runs it: its exit code."""
    import monoagent._cli as cli_module

    try:
        cli_module.main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0
