"""Plugin sources the tests write into a child process's ``plugins/`` directory.

A plain module, not a test module: the ``serve``, ``cron`` and pseudo-terminal helpers share it.
"""

from __future__ import annotations

# A provider "slow" that answers a message containing "slow" only when cancelled: it writes
# ``turn-started`` in its working directory first (how a test knows the turn is in flight), sends
# "thinking" and waits for ever; any other message gets "quick answer".
SLOW_PROVIDER = '''
import asyncio
from pathlib import Path

from monoagent._kernel.hookspecs import hookimpl
from monoagent._kernel.model import StepFinished, TextDelta


class Slow:
    name = "slow"

    async def stream(self, request):
        if "slow" in request.messages[-1].content:
            Path("turn-started").write_text("1")
            yield TextDelta("thinking\\n")
            await asyncio.Event().wait()
        yield TextDelta("quick answer\\n")
        yield StepFinished()


@hookimpl
def register_providers(register):
    register("slow", lambda agent, model: Slow())
'''
