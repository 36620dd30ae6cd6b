"""The ProviderRuntime contract: FunctionProvider, the offline and the HTTP runtimes pass it; broken runtimes fail it, saying why."""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from monoagent._kernel.errors import ProviderError
from monoagent._kernel.model import ProviderRequest
from monoagent.testing import (
    AnthropicWireServer,
    FunctionProvider,
    FunctionReply,
    Misconfiguration,
    OpenAIWireServer,
    ProviderRuntimeContract,
    StepScript,
    WireServer,
    fresh_agent,
    write_script,
)
from monoagent.testing.provider_contract import Reply, ScriptedToolCall

pytest_plugins = ["pytester"]


def function_for(script: StepScript | None) -> FunctionProvider:
    """A FunctionProvider playing ``script``: an async generator, so it can stall mid-stream."""

    async def play(request: ProviderRequest) -> AsyncIterator[Any]:
        if script is None:
            yield "an answer of its own"
            return
        for n, piece in enumerate(script.text_pieces):
            if script.stall_after is not None and n == script.stall_after:
                await asyncio.Event().wait()  # until cancelled
            yield piece
        if script.error is not None:
            raise ProviderError(f"function: {script.error}", retryable=script.retryable, provider="function")
        for call in script.tool_calls:
            yield call

    return FunctionProvider(play, name="contract")


def function_for_steps(scripts: Sequence[StepScript]) -> FunctionProvider:
    """A FunctionProvider whose successive steps play ``scripts``; past the last, a ProviderError."""
    played = iter(scripts)

    async def play(request: ProviderRequest) -> AsyncIterator[Any]:
        script = next(played, None)
        if script is None:
            raise ProviderError("function: no step left to play", provider="function")
        async for item in function_for(script).fn(request):
            yield item

    return FunctionProvider(play, name="contract")


class TestFunctionProviderRuntimeContract(ProviderRuntimeContract):
    def runtime_for(self, script: StepScript | None) -> FunctionProvider:
        return function_for(script)

    def runtime_for_steps(self, scripts: Sequence[StepScript]) -> FunctionProvider:
        return function_for_steps(scripts)


class TestFunctionReplyRuntimeContract(ProviderRuntimeContract):
    """The plain (non-streaming) form of FunctionProvider: it cannot stall, so that test skips."""

    def runtime_for(self, script: StepScript | None) -> FunctionProvider | None:
        if script is None:
            return FunctionProvider(lambda request: "a plain answer", name="plain")
        if script.stall_after is not None:
            return None

        def answer(request: ProviderRequest) -> FunctionReply:
            if script.error is not None:
                raise ProviderError(f"function: {script.error}", retryable=script.retryable, provider="function")
            return FunctionReply(script.text, script.tool_calls)

        return FunctionProvider(answer, name="plain")


class _OfflineRuntimeContract(ProviderRuntimeContract):
    """The offline runtimes as a user gets them: from an Agent configured by ``providers.offline``."""

    @pytest.fixture(autouse=True)
    def _agent_home(self, tmp_path: Path) -> Iterator[None]:
        self.tmp_path = tmp_path
        self.agents: list[Any] = []
        yield
        for agent in self.agents:
            agent.close()

    def offline(self, model: str, steps: Sequence[Any] | None = None, *, script_path: Path | None = None, toml: bool = False) -> Any:
        config: dict[str, Any] = {"runtime": {"model": f"offline:{model}"}}
        if steps is not None:
            script_path = write_script(self.tmp_path / f"script-{len(self.agents)}.{'toml' if toml else 'json'}", steps)
        if script_path is not None:
            config["providers"] = {"offline": {"scriptPath": str(script_path)}}
        agent = fresh_agent(self.tmp_path / f"agent-{len(self.agents)}", config=config)
        self.agents.append(agent)
        return agent.provider(f"offline:{model}")


def script_step(script: StepScript) -> dict[str, Any] | None:
    """``script`` as an offline:scripted step (its documented format), or None: the format has no stall."""
    if script.stall_after is not None:
        return None
    if script.error is not None:
        return {"error": script.error, "retryable": script.retryable}
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in script.tool_calls]
    return {"text": script.text, "tool_calls": calls}


class TestOfflineScriptedRuntimeContract(_OfflineRuntimeContract):
    def runtime_for(self, script: StepScript | None) -> Any:
        if script is None:  # its own answer, from a script that is a bare list of steps (the short form)
            path = self.tmp_path / "bare.json"
            path.write_text(json.dumps([{"text": "a scripted answer in several words"}]), encoding="utf-8")
            return self.offline("scripted", script_path=path)
        return self.runtime_for_steps([script])

    def runtime_for_steps(self, scripts: Sequence[StepScript]) -> Any:
        steps = [script_step(script) for script in scripts]
        if None in steps:
            return None
        return self.offline("scripted", steps, toml=not any(script.tool_calls for script in scripts))

    def misconfigurations(self) -> list[Misconfiguration]:
        def script(name: str, text: str) -> Callable[[], object]:
            path = self.tmp_path / name
            path.write_text(text, encoding="utf-8")
            return lambda: self.offline("scripted", script_path=path)

        return [
            Misconfiguration("no script", lambda: self.offline("scripted"), "providers.offline.scriptPath"),
            Misconfiguration("no such model", lambda: self.offline("nope"), "scripted"),
            Misconfiguration("no steps", script("empty.json", '{"steps": []}'), "non-empty list 'steps'"),
            Misconfiguration("steps not a list", script("text.json", '{"steps": "hello"}'), "non-empty list 'steps'"),
            Misconfiguration("an unknown key", script("typo.json", '{"steps": [{"txt": "typo"}]}'), "txt"),
            Misconfiguration("a wrong type", script("type.json", '{"steps": [{"tool_calls": "clock"}]}'), "tool_calls"),
            Misconfiguration("not JSON", script("broken.json", '{"steps": ['), "not valid JSON"),
            Misconfiguration("a directory", lambda: self.offline("scripted", script_path=self.tmp_path), "script /"),
        ]


class TestOfflineEchoRuntimeContract(_OfflineRuntimeContract):
    def runtime_for(self, script: StepScript | None) -> Any:
        return self.offline("echo") if script is None else None  # echo plays no script, only its own answer


class _HttpRuntimeContract(ProviderRuntimeContract):
    """The HTTP providers pass the runtime contract too: each script becomes the server's next reply."""

    server_type: type[WireServer] = WireServer
    model = ""
    config: ClassVar[dict[str, Any]] = {}
    env: ClassVar[dict[str, str]] = {}

    @pytest.fixture(autouse=True)
    def _server(self, tmp_path: Path) -> Iterator[None]:
        self.tmp_path = tmp_path
        with self.server_type() as server:
            self.server = server
            config = json.loads(json.dumps({"runtime": {"model": self.model}, **self.config}).replace("{url}", server.url))
            self.agent = fresh_agent(tmp_path, config=config, env=self.env)
            yield
            self.agent.close()

    must_say = ""  # what the error for a missing credential or base URL names

    def runtime_for(self, script: StepScript | None) -> Any:
        if script is None:
            self.server.enqueue(Reply(text_pieces=("an answer ", "of its own")))
            return self.agent.provider(self.model)
        return self.runtime_for_steps([script])

    def runtime_for_steps(self, scripts: Sequence[StepScript]) -> Any:
        for script in scripts:
            if script.error is not None:
                reply = Reply(status=503 if script.retryable else 400, error_message=script.error)
            else:
                calls = tuple(ScriptedToolCall(c.id, c.name, (json.dumps(c.arguments),)) for c in script.tool_calls)
                reply = Reply(text_pieces=script.text_pieces, tool_calls=calls, stall_after=script.stall_after)
            self.server.enqueue(reply)
        return self.agent.provider(self.model)

    def misconfigurations(self) -> list[Misconfiguration]:
        def unconfigured() -> object:
            agent = fresh_agent(self.tmp_path / "unconfigured", config={"runtime": {"model": self.model}})
            try:
                return agent.provider(self.model)
            finally:
                agent.close()

        return [Misconfiguration("no credential or base URL", unconfigured, self.must_say)]


class TestAnthropicRuntimeContract(_HttpRuntimeContract):
    server_type = AnthropicWireServer
    model = "anthropic:model-x"
    config: ClassVar[dict[str, Any]] = {"providers": {"anthropic": {"baseUrl": "{url}"}}}
    env: ClassVar[dict[str, str]] = {"ANTHROPIC_API_KEY": "test-key"}
    must_say = "ANTHROPIC_API_KEY"


class TestOpenAIRuntimeContract(_HttpRuntimeContract):
    server_type = OpenAIWireServer
    model = "openai:model-x"
    config: ClassVar[dict[str, Any]] = {"providers": {"openai": {"baseUrl": "{url}/v1"}}}
    env: ClassVar[dict[str, str]] = {"OPENAI_API_KEY": "sk-test"}
    must_say = "OPENAI_API_KEY"


class TestOpenAICompatibleRuntimeContract(_HttpRuntimeContract):
    server_type = OpenAIWireServer
    model = "openai-compatible:model-x"
    config: ClassVar[dict[str, Any]] = {"providers": {"openaiCompatible": {"baseUrl": "{url}/v1", "apiKey": "sk-compatible"}}}
    must_say = "no base URL for openai-compatible:model-x; set MONO_AGENT_OPENAI_COMPATIBLE_BASE_URL (or providers.openaiCompatible.baseUrl)"


BROKEN_RUNTIMES = '''
import asyncio
from monoagent._kernel.errors import ProviderError
from monoagent._kernel.model import StepFinished, TextDelta, ToolCallRequested, Usage
from monoagent.testing import ProviderRuntimeContract


class Broken:
    name = "broken:x"

    def __init__(self, script):
        self.script = script

    async def stream(self, request):
        script = self.script
        if script is not None and script.error is not None:
            raise RuntimeError(script.error)  # not a ProviderError: no retryable
        yield TextDelta("first")
        if script is not None and script.stall_after is not None:
            asyncio.get_running_loop().create_task(asyncio.Event().wait())  # a pump it never stops
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                pass  # swallows the cancellation
        yield StepFinished("end_turn", Usage(0, 0))  # no usage for a prompt and an answer
        yield StepFinished("end_turn", Usage(0, 0))  # one step, two ends


class TestBrokenRuntimeContract(ProviderRuntimeContract):
    prompt_seconds = 0.5

    def runtime_for(self, script):
        return Broken(script)


class LeakyPump:
    """Right in all but one thing: the task feeding its stream outlives the stream."""

    name = "leaky:x"

    async def stream(self, request):
        queue = asyncio.Queue()

        async def pump():
            await queue.put(TextDelta("first"))
            await asyncio.Event().wait()  # the connection it would read, never closed

        asyncio.get_running_loop().create_task(pump())
        while True:
            yield await queue.get()


class YieldsOnClose:
    """Right in all but one thing: it yields from its finally, so closing it early fails."""

    name = "yields-on-close:x"

    async def stream(self, request):
        try:
            yield TextDelta("first")
            yield TextDelta("second")
        finally:
            yield StepFinished("end_turn", Usage(1, 1))


class TestYieldsOnCloseRuntimeContract(ProviderRuntimeContract):
    def runtime_for(self, script):
        return YieldsOnClose() if script is None else None


class Forgetful:
    """Right in all but one thing: every call plays the first step again."""

    name = "forgetful:x"

    def __init__(self, scripts):
        self.first = scripts[0]

    async def stream(self, request):
        if self.first.error is not None:
            raise ProviderError(self.first.error, retryable=self.first.retryable, provider="forgetful")
        for call in self.first.tool_calls:
            yield ToolCallRequested(call)
        if self.first.text:
            yield TextDelta(self.first.text)
        yield StepFinished("tool_use" if self.first.tool_calls else "end_turn", Usage(1, 1))


class TestForgetfulRuntimeContract(ProviderRuntimeContract):
    def runtime_for(self, script):
        return None

    def runtime_for_steps(self, scripts):
        return Forgetful(scripts)


class TestLeakyRuntimeContract(ProviderRuntimeContract):
    prompt_seconds = 0.5

    def runtime_for(self, script):
        return LeakyPump() if script is not None and script.stall_after is not None else None
'''


def test_a_broken_runtime_fails_the_contract_saying_why(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_broken_runtime=textwrap.dedent(BROKEN_RUNTIMES))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    # Broken closes early right; LeakyPump plays only the stall; YieldsOnClose plays only its own answer, and
    # keeps the stream rules when read to the end
    # Forgetful plays only several steps; Broken reports no usage
    result.assert_outcomes(failed=10, passed=2, skipped=28)
    out = result.stdout.str()
    assert "a stream ends with exactly one StepFinished; this one has 2" in out
    assert "a failing step raised RuntimeError: the model is overloaded; a runtime raises ProviderError" in out
    assert "assert 'ended normally' == 'cancelled'" in out  # the swallowed cancellation, with the values compared
    assert "cancelling the consumer must raise CancelledError out of the stream" in out
    assert "tasks the runtime started must end with its stream" in out
    assert "Left contains one more item: 'LeakyPump.stream.<locals>.pump'" in out
    assert "aclose raised RuntimeError: async generator ignored GeneratorExit" in out
    assert "a prompt was sent, yet the usage counts none" in out
    assert "assert '' == 'second'" in out  # the second call played the first step again
    assert "the turn failed with the model is overloaded; expected 'third time'" in out
