"""What the bundled command-line plugins (``history-cli``, ``memory-cli``) share.

Their commands run under the ``monoagent`` root command, whose context object builds the Agent
on first use; they run the Agent's coroutines with asyncio, which is imported only when a
command runs so that ``monoagent --help`` does not pay for it.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

import click

_T = TypeVar("_T")


def command_agent(group: str) -> Any:
    """The Agent of the running ``monoagent`` command.

    ``group`` names the command group in the error raised when the command was invoked some
    other way (a bare ``click`` call without the monoagent root context).
    """
    state = click.get_current_context().find_root().obj
    if not callable(getattr(state, "agent", None)):
        raise click.ClickException(f"the {group} commands need the monoagent command line")
    return state.agent()


def run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run`` with asyncio imported on first use (it costs CLI start-up otherwise)."""
    import asyncio

    return asyncio.run(coroutine)
