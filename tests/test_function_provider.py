"""FunctionProvider: a test's function answers each provider step, through the real harness and tool loop."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from monoagent import ProviderRequest, StepFinished, TextDelta, ToolCall, ToolCallRequested, Usage, hookimpl, tool
from monoagent._kernel.errors import ConfigError, ProviderError
from monoagent.testing import FunctionProvider, FunctionReply, fresh_agent
from monoagent.testing.provider_contract import contract_request


@tool
def weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city's name.
    """
    return f"sunny in {city}"


class WeatherTool:
    @hookimpl
    def register_tools(self, register: Any) -> None:
        register(weather)


def test_a_two_step_tool_turn_driven_by_the_tool_result(tmp_path: Path) -> None:
    def model(request: ProviderRequest) -> Any:
        if request.step == 1:
            assert "weather" in [spec.name for spec in request.tools]
            return FunctionReply(text="Let me look.", tool_calls=[{"name": "weather", "arguments": {"city": "Oslo"}}])
        result = request.messages[-1]
        assert result.role == "tool" and result.tool_call_id == request.messages[-2].tool_calls[0].id
        return f"The tool said: {result.content}."

    provider = FunctionProvider(model)
    agent = fresh_agent(tmp_path, provider=provider, plugins=[WeatherTool()])
    events: list[Any] = []
    result = agent.run_sync("Weather in Oslo?", conversation_id="t", on_event=events.append)
    assert result.text.endswith("The tool said: sunny in Oslo.")
    assert result.model == "function:model" and result.steps == 2
    assert [(a.call.id, a.call.name, a.call.arguments, a.result.status.value) for a in result.tool_activity] == [("call_1_1", "weather", {"city": "Oslo"}, "success")]
    assert [r.step for r in provider.requests] == [1, 2]
    assert [e.type for e in events].count("tool_call") == 1
    history = asyncio.run(agent.history_store.load("t"))
    assert [m.role for m in history] == ["user", "assistant"] and history[-1].content.endswith("sunny in Oslo.")
    second = agent.run_sync("And in Oslo again?", conversation_id="t")
    assert second.tool_activity[0].call.id == "call_3_1", "a made-up call id is unique across turns"
    agent.close()


def test_async_functions_and_the_str_and_list_shorthands(tmp_path: Path) -> None:
    async def model(request: ProviderRequest) -> Any:
        await asyncio.sleep(0)
        if request.step == 1:
            return [ToolCall("mine", "weather", {"city": "Bergen"})]
        return "done"

    agent = fresh_agent(tmp_path, provider=FunctionProvider(model, name="async-model"), plugins=[WeatherTool()])
    result = agent.run_sync("go", conversation_id="t")
    assert result.text.endswith("done") and result.model == "function:async-model"
    assert result.tool_activity[0].call.id == "mine"
    agent.close()


def test_it_streams_as_a_real_provider() -> None:
    provider = FunctionProvider(lambda request: FunctionReply("one two three", [{"name": "lookup", "arguments": {"word": "x"}}]), name="f")
    events = asyncio.run(_collect(provider))
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert texts == ["one ", "two ", "three"]
    assert [e.call for e in events if isinstance(e, ToolCallRequested)] == [ToolCall("call_1_1", "lookup", {"word": "x"})]
    assert [type(e) for e in events].count(StepFinished) == 1 and isinstance(events[-1], StepFinished)
    assert events[-1].stop_reason == "tool_use" and events[-1].usage.output_tokens == 4


def test_given_usage_and_a_streaming_generator() -> None:
    async def model(request: ProviderRequest) -> Any:
        yield "a"
        yield {"name": "lookup", "arguments": {}}
        yield Usage(input_tokens=7, output_tokens=1)

    events = asyncio.run(_collect(FunctionProvider(model)))
    assert [type(e).__name__ for e in events] == ["TextDelta", "ToolCallRequested", "StepFinished"]
    assert events[-1].usage == Usage(input_tokens=7, output_tokens=1) and events[-1].stop_reason == "tool_use"


def test_a_provider_error_rehearses_a_failure(tmp_path: Path) -> None:
    calls: list[int] = []

    def model(request: ProviderRequest) -> str:
        calls.append(request.step)
        if len(calls) == 1:
            raise ProviderError("overloaded", retryable=True, provider="function")
        return "recovered"

    agent = fresh_agent(tmp_path, provider=FunctionProvider(model), config={"providers": {"client": {"maxRetryDelayMs": 0}}})
    assert agent.run_sync("hi", conversation_id="t").text.endswith("recovered")
    assert len(calls) == 2
    agent.close()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (42, "the function returned int; return a str, a FunctionReply or a list of tool calls"),
        ([{"name": 3}], "a tool call is a ToolCall or a mapping {name, arguments, id}"),
        ([{"name": "x", "arguments": [1]}], "a tool call is a ToolCall or a mapping {name, arguments, id}"),
    ],
)
def test_a_wrong_answer_is_a_fatal_provider_error_naming_the_function(answer: Any, message: str) -> None:
    with pytest.raises(ProviderError) as caught:
        asyncio.run(_collect(FunctionProvider(lambda request: answer, name="wrong")))
    assert message in str(caught.value) and "function:wrong" in str(caught.value)
    assert not caught.value.retryable


def test_an_exception_in_the_function_keeps_its_cause() -> None:
    def model(request: ProviderRequest) -> str:
        raise KeyError("missing")

    with pytest.raises(ProviderError, match=r"function:model: the function raised KeyError: 'missing'") as caught:
        asyncio.run(_collect(FunctionProvider(model)))
    assert isinstance(caught.value.__cause__, KeyError) and not caught.value.retryable


def test_names_are_model_ids(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not usable as a model name"):
        FunctionProvider(lambda request: "x")  # a lambda's __name__ is '<lambda>'
    with pytest.raises(ConfigError, match="two in-process providers are named 'function:same'"):
        fresh_agent(tmp_path, provider=[FunctionProvider(str, name="same"), FunctionProvider(str, name="same")])
    first, second = FunctionProvider(lambda r: "first", name="a"), FunctionProvider(lambda r: "second", name="b")
    agent = fresh_agent(tmp_path, provider=[first, second])
    assert agent.model == "function:a" and agent.provider("function:b") is second
    assert agent.run_sync("x", conversation_id="t", model="function:b").text.endswith("second")
    with pytest.raises(ConfigError, match="no in-process provider is named function:c; registered: function:a, function:b"):
        agent.run_sync("x", conversation_id="t", model="function:c")
    agent.close()


async def _collect(provider: FunctionProvider) -> list[Any]:
    return [event async for event in provider.stream(contract_request())]
