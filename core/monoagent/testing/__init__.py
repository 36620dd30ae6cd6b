"""Helpers for plugin authors' tests (and ours): a fresh Agent, plugin registration, a hook recorder.

Typical use with pytest::

    from monoagent.testing import fresh_agent, HookRecorder

    def test_my_identity(tmp_path):
        agent = fresh_agent(tmp_path, plugins=[my_plugin])
        with HookRecorder(agent) as calls:
            result = agent.run_sync("hello", conversation_id="t")
        assert "section_identity" in calls.names()

``fresh_agent`` never reads the machine's configuration: it takes no config file, an empty
environment (unless you pass one), third-party entry-point autoload off, and keeps all state
(agent home, history, artifacts) under the directory you give it. The offline providers are
``offline:echo`` (the default model) and ``offline:scripted``; :func:`write_script` makes a
script for the latter. :class:`FunctionProvider` computes each answer from the request with a
function of yours (``fresh_agent(tmp_path, provider=FunctionProvider(fn))``).
:func:`tool_context` builds what a tool handler receives, to call it directly.
:class:`AnthropicWireServer` and :class:`OpenAIWireServer` are local stand-ins for the two APIs
(their streaming wire formats, byte for byte) to point a provider's base URL at.

Under pytest the package is also a plugin (the ``pytest11`` entry point
:mod:`monoagent._pytest_plugin`): fixtures ``monoagent_agent``, ``scripted_agent``,
``hook_recorder`` and ``function_provider``, and assertion rewriting for the contract suites.
The contracts (history, history durability, tool history, memory, provider wire, provider runtime) are listed with
how to run them in ``docs/testing.md``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from monoagent._agent import Agent
from monoagent._kernel.hooks import HookCall
from monoagent._kernel.interfaces import ProviderRuntime
from monoagent._kernel.model import RunEvent, ToolCall
from monoagent._kernel.stores import logical_conversation_id
from monoagent._kernel.tool_context import ToolContext
from monoagent._kernel.turn import SessionInfo
from monoagent._kernel.turn_request import TurnRequest
from monoagent._pipeline.turn_run import TurnRun
from monoagent.testing.durability import HistoryDurabilityContract
from monoagent.testing.function_provider import FunctionProvider, FunctionReply, InProcessProviders
from monoagent.testing.history_contract import HistoryStoreContract
from monoagent.testing.memory_contract import EmbedderContract, MemoryTierContract
from monoagent.testing.provider_contract import ProviderContract, RecordedRequest, Reply, ScriptedToolCall, WireServer
from monoagent.testing.provider_request_contract import SentRequest
from monoagent.testing.provider_runtime_contract import Misconfiguration, ProviderRuntimeContract, StepScript
from monoagent.testing.tool_history_contract import ToolHistoryStoreContract
from monoagent.testing.wire_stand_ins import AnthropicWireServer, LocalServerWire, OpenAIWireServer, WholeCallsWire

__all__ = [
    "AnthropicWireServer",
    "EmbedderContract",
    "FunctionProvider",
    "FunctionReply",
    "HistoryDurabilityContract",
    "HistoryStoreContract",
    "HookCall",
    "HookRecorder",
    "InProcessProviders",
    "LocalServerWire",
    "MemoryTierContract",
    "Misconfiguration",
    "OpenAIWireServer",
    "ProviderContract",
    "ProviderRuntimeContract",
    "RecordedRequest",
    "Reply",
    "ScriptedToolCall",
    "SentRequest",
    "StepScript",
    "ToolHistoryStoreContract",
    "WholeCallsWire",
    "WireServer",
    "collect_events",
    "fresh_agent",
    "registered",
    "scripted_agent",
    "tool_context",
    "write_script",
]

_P = TypeVar("_P")


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def fresh_agent(
    tmp_path: str | Path,
    *,
    config: Mapping[str, Any] | None = None,
    plugins: Sequence[object] = (),
    env: Mapping[str, str] | None = None,
    autoload: bool = False,
    provider: ProviderRuntime | Sequence[ProviderRuntime] | None = None,
    **kwargs: Any,
) -> Agent:
    """An isolated Agent whose home, history and artifacts live under ``tmp_path``.

    ``config`` is merged over ``{"context": {"home": tmp_path / "home"}}``; ``env`` defaults to
    an empty environment so the developer's ``MONO_AGENT_*`` variables cannot leak in.
    ``provider`` puts in-process runtimes (a :class:`FunctionProvider`, or any runtime whose
    ``name`` is its ``prefix:model`` id) on the agent through :class:`InProcessProviders`; the
    first becomes ``runtime.model`` unless ``config`` sets one.
    """
    base: dict[str, Any] = {"context": {"home": str(Path(tmp_path) / "home")}}
    if provider is not None:
        in_process = InProcessProviders(list(provider) if isinstance(provider, Sequence) else [provider])
        plugins = [*plugins, ("in-process-providers", in_process)]
        if in_process.runtimes:
            base["runtime"] = {"model": next(iter(in_process.runtimes))}
    data = _merge(base, json.loads(json.dumps(dict(config or {}), default=str)))
    return Agent(data, plugins=plugins, env=dict(env or {}), autoload=autoload, **kwargs)


@contextlib.contextmanager
def registered(agent: Agent, plugin: _P, name: str | None = None) -> Iterator[_P]:
    """Register ``plugin`` on ``agent`` for the duration of the block (which receives ``plugin``)."""
    record = agent.register(plugin, name)
    try:
        yield plugin
    finally:
        if agent.host.pm.is_registered(plugin):
            agent.host.unregister(plugin)  # what it registered leaves with it
        agent.host.records = [r for r in agent.host.records if r is not record]
        agent._tools = None


class HookRecorder:
    """Records every hook call the Agent makes while active (through ``agent.hooks``).

    That is every call path: plain calls, the observer hooks (``after_commit``, ``on_run_event``:
    ``result`` is the list of ``(plugin, result, error)``), ``configure`` and the registries of
    plugins registered meanwhile (``agent.register``, :func:`registered`). Each
    :class:`HookCall` names the implementations in call order and, for a firstresult hook, the
    ``winner`` whose result was returned.
    """

    def __init__(self, agent: Agent) -> None:
        self.agent: Agent = agent
        self.calls: list[HookCall] = []
        self._undo: Callable[[], None] | None = None

    def started(self, name: str, kwargs: Mapping[str, Any], plugins: tuple[str, ...]) -> None:
        pass

    def finished(self, call: HookCall) -> None:
        self.calls.append(call)

    def __enter__(self) -> HookRecorder:
        self._undo = self.agent.hooks.observe(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._undo is not None:
            self._undo()
            self._undo = None

    def names(self) -> list[str]:
        return [call.name for call in self.calls]

    def of(self, name: str) -> list[HookCall]:
        return [call for call in self.calls if call.name == name]


def write_script(path: str | Path, steps: Sequence[Mapping[str, Any]]) -> Path:
    """Write an ``offline:scripted`` script and return its path: TOML for a ``.toml`` name, else JSON."""
    path = Path(path)
    if path.suffix.lower() == ".toml":
        import tomli_w

        path.write_text(tomli_w.dumps({"steps": [dict(step) for step in steps]}), encoding="utf-8")
    else:
        path.write_text(json.dumps({"steps": list(steps)}), encoding="utf-8")
    return path


def scripted_agent(
    tmp_path: str | Path,
    steps: Sequence[Mapping[str, Any]],
    *,
    config: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Agent:
    """A :func:`fresh_agent` on ``offline:scripted`` replaying ``steps`` (one per provider call).

    Each step is ``{"text": ..., "tool_calls": [{"name": ..., "arguments": {...}}]}`` or
    ``{"error": ..., "retryable": bool}``.
    """
    script = write_script(Path(tmp_path) / "offline-script.json", steps)
    base = {"runtime": {"model": "offline:scripted"}, "providers": {"offline": {"scriptPath": str(script)}}}
    return fresh_agent(tmp_path, config=_merge(base, json.loads(json.dumps(dict(config or {}), default=str))), **kwargs)


def collect_events(into: list[RunEvent]) -> Callable[[RunEvent], None]:
    """An ``on_event`` callback appending every RunEvent to ``into``."""
    return into.append


def tool_context(
    agent: Agent,
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    call_id: str = "call-1",
    request: TurnRequest | None = None,
    events: list[RunEvent] | None = None,
) -> ToolContext:
    """A :class:`~monoagent._kernel.tool_context.ToolContext` for calling a tool handler directly.

    The context's turn is a turn of ``request`` (default ``TurnRequest("test")``) on ``agent``
    that is never run: nothing is loaded, recalled or committed, ``turn.tools`` lists every
    registered tool and the call is ``ToolCall(call_id, name, arguments)``. Its events
    (``tool_progress`` included) are appended to ``events``. Pass the context to the handler
    yourself: ``agent.tools[name].handler(context)``.
    """
    request = request or TurnRequest("test")
    sink = events if events is not None else []
    session = SessionInfo(
        delivery=request.delivery,
        mode=agent.config.runtime.session.mode,
        logical_conversation_id=logical_conversation_id(request.conversation_id),
        conversation_id=request.conversation_id,
    )

    def emit(type: str, data: dict[str, Any]) -> None:
        sink.append(RunEvent(type, "test-run", request.conversation_id, len(sink) + 1, time.time(), data))

    run = TurnRun(agent=agent, request=request, run_id="test-run", model=request.model or agent.model, session=session, emitter=emit)
    run.tools = tuple(tool.spec for tool in agent.tools.values())
    return ToolContext(run, ToolCall(call_id, name, dict(arguments or {})))

