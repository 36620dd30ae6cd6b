"""What a plugin's commands need from the ``monoagent`` command line (``register_commands``).

A plugin's commands run under the ``monoagent`` root command, whose context object builds the
Agent on first use (:func:`command_agent`); they run the Agent's coroutines with
:func:`run_async`, which imports asyncio only when a command runs, so that ``monoagent --help``
does not pay for it.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from monoagent._agent import Agent

_T = TypeVar("_T")


def command_agent(group: str) -> Agent:
    """The Agent of the running ``monoagent`` command.

    ``group`` names the command group in the error raised when the command was invoked some
    other way (a bare ``click`` call without the monoagent root context).
    """
    state = click.get_current_context().find_root().obj
    if not callable(getattr(state, "agent", None)):
        raise click.ClickException(f"the {group} commands need the monoagent command line")
    agent: Agent = state.agent()
    return agent


def run_async(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run`` with asyncio imported on first use (it costs CLI start-up otherwise)."""
    import asyncio

    return asyncio.run(coroutine)
