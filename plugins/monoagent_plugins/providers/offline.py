"""Offline providers that need no network: ``offline:echo`` and ``offline:scripted``.

``offline:echo`` answers deterministically with what it received: the section ids, the history
length and the user message. ``offline:scripted`` replays replies and tool calls from a script
file (``providers.offline.scriptPath`` or ``MONO_AGENT_OFFLINE_SCRIPT``), one step per provider
call, for tests and demos. A script is TOML or JSON::

    [[steps]]
    text = "Let me look that up."
    tool_calls = [{ name = "clock", arguments = {} }]

    [[steps]]
    text = "It is noon."

A step may instead carry ``error = "..."`` (with ``retryable = true`` for a transient failure)
to rehearse failure handling.
"""

from __future__ import annotations

import operator
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from monoagent import (
    ComponentRegistrar,
    ConfigError,
    ConfigSectionRegistrar,
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    ProviderRuntime,
    StepFinished,
    TextDelta,
    ToolCall,
    ToolCallRequested,
    Usage,
    hookimpl,
    setting,
    utf8_len,
)

if TYPE_CHECKING:
    from monoagent import Agent

CONTEXT_WINDOW = 200_000
SCRIPT_MAX_BYTES = 16 * 1024 * 1024


@attrs.define
class OfflineConfig:
    """providers.offline: the offline providers."""

    script_path: Path | None = setting(
        None, doc="Script replayed by offline:scripted (TOML or JSON; a regular file of at most 16 MiB, nested at most 64 levels).",
        env="MONO_AGENT_OFFLINE_SCRIPT",
    )


_content_of = operator.attrgetter("content")


def _tokens(text: str) -> int:
    return -(-utf8_len(text) // 4)


def _chunks(text: str, pieces: int = 4) -> list[str]:
    """``text`` in about ``pieces`` parts cut after whitespace, as a model streams it."""
    words = re.findall(r"\S+\s*|\s+", text) or [text]
    size = -(-len(words) // pieces)
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)]


class EchoRuntime:
    """Says what it received: the sections, the history size and the current user message (its own
    text and the parts riding it, without the dynamic sections that lead it in continuous mode,
    which the section list names already). Streams the reply word by word."""

    name = "offline:echo"
    context_window = CONTEXT_WINDOW

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        manifest = request.prompt.manifest
        from monoagent import current_user_message

        user = current_user_message(request.prompt).content
        reply = (
            f"[offline:echo] sections: {', '.join(manifest.section_ids) or 'none'}; "
            f"history: {manifest.history_messages} messages; you said: {user}"
        )
        import asyncio

        for piece in _chunks(reply):
            await asyncio.sleep(0)  # a cancellation point between pieces, like a real stream
            yield TextDelta(piece)
        prompt_text = request.prompt.system_text + "".join(map(_content_of, request.messages))
        yield StepFinished("end_turn", Usage(input_tokens=_tokens(prompt_text), output_tokens=_tokens(reply)))


@attrs.frozen
class ScriptedCall:
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)
    id: str | None = None


@attrs.frozen
class ScriptStep:
    text: str = ""
    tool_calls: list[ScriptedCall] = attrs.field(factory=list)
    error: str | None = None
    retryable: bool = False
    stop_reason: str | None = None


def load_script(path: Path) -> list[ScriptStep]:
    """Read and validate a script file; a clear ConfigError names the file and the problem.

    The script must be a regular file of at most :data:`SCRIPT_MAX_BYTES` (16 MiB), nested at
    most :data:`~monoagent._boundary.documents.MAX_NESTING` levels deep.
    """
    import cattrs

    from monoagent import DocumentError, load_document

    try:
        data = load_document(path, max_bytes=SCRIPT_MAX_BYTES, what="script")
    except DocumentError as exc:
        raise ConfigError(f"offline:scripted: {exc}") from None
    steps = data.get("steps") if isinstance(data, dict) else data
    if not isinstance(steps, list) or not steps:
        raise ConfigError(f"offline:scripted: script {path} needs a non-empty list 'steps' of {{text, tool_calls, error}} tables")
    converter = cattrs.Converter(forbid_extra_keys=True)
    try:
        return [converter.structure(step, ScriptStep) for step in steps]
    except Exception as exc:
        detail = "; ".join(cattrs.transform_error(exc)) if isinstance(exc, cattrs.BaseValidationError) else str(exc)
        raise ConfigError(f"offline:scripted: script {path} has an invalid step: {detail}") from None


class ScriptedRuntime:
    """Replays a script, one step per provider call, in order."""

    name = "offline:scripted"
    context_window = CONTEXT_WINDOW

    def __init__(self, path: Path) -> None:
        self.path = path
        self.steps = load_script(path)
        self.cursor = 0

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        if self.cursor >= len(self.steps):
            raise ProviderError(
                f"offline:scripted: script {self.path} has no step left ({len(self.steps)} replayed); add steps to it",
                provider="offline",
            )
        step = self.steps[self.cursor]
        self.cursor += 1
        if step.error is not None:
            raise ProviderError(f"offline:scripted: {step.error}", retryable=step.retryable, provider="offline")
        import asyncio

        for piece in _chunks(step.text) if step.text else []:
            await asyncio.sleep(0)
            yield TextDelta(piece)
        for index, call in enumerate(step.tool_calls):
            call_id = call.id or f"call_{self.cursor}_{index + 1}"
            yield ToolCallRequested(ToolCall(call_id, call.name, dict(call.arguments)))
        stop = step.stop_reason or ("tool_use" if step.tool_calls else "end_turn")
        yield StepFinished(stop, Usage(input_tokens=_tokens(request.prompt.system_text), output_tokens=_tokens(step.text)))


def make_runtime(agent: Agent, model: str) -> EchoRuntime | ScriptedRuntime:
    if model == "echo":
        return EchoRuntime()
    if model == "scripted":
        path = agent.config.section("providers.offline", OfflineConfig).script_path
        if path is None:
            raise ConfigError(
                "offline:scripted needs a script: set providers.offline.scriptPath or MONO_AGENT_OFFLINE_SCRIPT"
            )
        return ScriptedRuntime(agent.config.resolve(path))
    raise ConfigError(f"offline provider has no model {model!r}; available: echo, scripted")


@hookimpl(trylast=True)
def register_providers(register: ComponentRegistrar[ProviderRuntime]) -> None:
    register("offline", make_runtime, description="offline:echo and offline:scripted (no network)", models=("echo", "scripted"))


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("providers.offline", OfflineConfig)
