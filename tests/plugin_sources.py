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

TOOL_CALLER = '''
"""A provider that calls the tool the user names ("call get_weather", "call clock and get_weather") and then
answers with the results it was sent: the served tests of client-side tools drive it."""
import re

from monoagent import StepFinished, TextDelta, ToolCall, ToolCallRequested, ToolSpec, hookimpl


class Caller:
    name = "caller"

    async def stream(self, request):
        messages = request.messages
        user = [m for m in messages if m.role == "user"][-1].content
        trailing = []
        for message in reversed(messages):
            if message.role != "tool":
                break
            trailing.insert(0, message)
        offered = {tool.name for tool in request.tools}
        if trailing:
            named = {c.id: c.name for m in messages for c in m.tool_calls}
            seen = "; ".join(f"{named.get(m.tool_call_id, '?')}={m.content}" for m in trailing)
            yield TextDelta(f"Results: {seen} (messages: {len(messages)})")
        else:
            wanted = [name for name in re.findall(r"[A-Za-z0-9_-]+", user.partition("call ")[2]) if name in offered]
            if wanted and "call " in user:
                yield TextDelta("Calling.")
                for n, name in enumerate(wanted, 1):
                    yield ToolCallRequested(ToolCall(f"call_{request.step}_{n}_{len(messages)}", name, {"city": "Oslo"}))
                yield StepFinished("tool_use")
                return
            yield TextDelta(f"plain answer (messages: {len(messages)}, tools: {','.join(sorted(offered))}, "
                            f"choice: {request.tool_choice})")
        yield StepFinished()


@hookimpl
def register_providers(register):
    register("caller", lambda agent, model: Caller())


@hookimpl
def register_tools(register):
    register(ToolSpec("clock", "The server's clock.", {"type": "object"}), lambda context: "12:00")
'''
