"""The ``openai-api`` channel against the clients people point at it, run for real against a ``monoagent serve``
subprocess on 127.0.0.1: simonw/llm (its CLI, configured as its documentation says for an OpenAI-compatible
server), openai-agents (``Runner`` with its chat completions and its Responses model) and LangChain's
``ChatOpenAI``. None of them names a conversation (no ``X-Conversation-Id``, no ``user``), so each gets the
stateless rule: the request's own earlier messages are the history, nothing is stored. The offline echo
provider answers ``history: N messages; you said: <text>``, so each test reads what the model was sent; for
the client-side tool tests a project-local provider calls the client's ``weather`` tool and then answers
with the results the client sent back.

What each client sends on the wire is written down in docs/serving.md ("Clients"). The tests of the
Responses API (``POST /v1/responses``) and of client-side tools run as the others do.

The clients are the ``clients`` extra, not the ``test`` one (langchain-openai requires tiktoken, which
would change the whole suite's token counts): in the main venv this module skips; CI runs it in
``.venv-clients`` with ``MONOAGENT_REQUIRE_CLIENTS=1``, where a missing client fails it instead. There
the servers get a project-local ``count_tokens`` plugin (4 bytes a token), so tiktoken, installed for
langchain-openai, never tries to fetch its encoding from the network.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from chat_pty import Terminal
from serving import TOKEN, Server, auth, stored

REQUIRE_CLIENTS = "MONOAGENT_REQUIRE_CLIENTS"
MISSING = [name for name in ("llm", "agents", "langchain_openai") if importlib.util.find_spec(name) is None]
if MISSING and os.environ.get(REQUIRE_CLIENTS) == "1":
    pytest.fail(f"{REQUIRE_CLIENTS}=1 but these clients are not installed: {', '.join(MISSING)} "
                "(pip install -e '.[test,clients]')", pytrace=False)
if MISSING:
    pytest.skip(f"the clients extra is not installed ({', '.join(MISSING)} missing); CI runs this module in "
                f".venv-clients with {REQUIRE_CLIENTS}=1", allow_module_level=True)

MODEL = "offline:echo"
ESTIMATE_TOKENS = """
from monoagent import hookimpl


@hookimpl
def count_tokens(text, model):
    return (len(text.encode()) + 3) // 4
"""
WEATHER_CALLER = """
from monoagent import StepFinished, TextDelta, ToolCall, ToolCallRequested, hookimpl


class WeatherCaller:
    \"\"\"Calls the client's ``weather`` tool for Paris, then answers with the results the request sent back.\"\"\"

    name = "weather"

    async def stream(self, request):
        last = request.messages[-1]
        if last.role == "tool":
            calls = {call.id: call.name for message in request.messages for call in message.tool_calls}
            results = [m for m in request.messages if m.role == "tool"]
            yield TextDelta("Results: " + "; ".join(f"{calls.get(m.tool_call_id, '?')}={m.content}" for m in results))
        elif "weather" in {tool.name for tool in request.tools}:
            yield ToolCallRequested(ToolCall("call_w1", "weather", {"city": "Paris"}))
            yield StepFinished("tool_use")
            return
        else:
            yield TextDelta("no weather tool was offered")
        yield StepFinished()


@hookimpl
def register_providers(register):
    register("weather", lambda agent, model: WeatherCaller())
"""


def served(project: Path) -> Server:
    """``monoagent serve`` in ``project``, counting tokens without tiktoken (the module's docstring says why)."""
    (project / "plugins").mkdir(parents=True, exist_ok=True)
    (project / "plugins" / "estimate_tokens.py").write_text(ESTIMATE_TOKENS, encoding="utf-8")
    return Server(project, "--plugins-dir", "plugins")


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    """One echo server for the module: each test's conversation is its own (the client's), nothing is stored."""
    server = served(tmp_path_factory.mktemp("echo-server"))
    yield server
    server.stop()


@pytest.fixture
def responses_echo(tmp_path):
    """A server of its own for a Responses test (what that API stores must not meet the other tests' checks)."""
    server = served(tmp_path / "responses")
    yield server
    server.stop()


@pytest.fixture
def weather_server(tmp_path):
    """A server whose model calls the client's ``weather`` tool, then answers with the results it was sent."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "weather_caller.py").write_text(WEATHER_CALLER, encoding="utf-8")
    (tmp_path / "monoagent.toml").write_text('[runtime]\nmodel = "weather:x"\n', encoding="utf-8")
    server = served(tmp_path)
    yield server
    server.stop()


# simonw/llm -------------------------------------------------------------------------------------------------


def llm_home(tmp_path: Path, server: Server) -> dict[str, str]:
    """An ``LLM_USER_PATH`` configured as docs/serving.md says (``llm keys set``, ``extra-openai-models.yaml``); the env to run llm in."""
    home = tmp_path / "llm-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LLM_"))}
    env.update(LLM_USER_PATH=str(home), TERM="dumb")
    llm(env, "keys", "set", "monoagent", "--value", TOKEN)
    assert json.loads((home / "keys.json").read_text(encoding="utf-8"))["monoagent"] == TOKEN
    (home / "extra-openai-models.yaml").write_text(
        f'- model_id: agent\n  model_name: "{MODEL}"\n  api_base: "{server.url}/v1"\n  api_key_name: monoagent\n',
        encoding="utf-8")
    return env


def llm(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "llm", *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_llm_prompts_streamed_and_not_and_continues_a_conversation_it_resends(echo, tmp_path):
    env = llm_home(tmp_path, echo)
    assert "history: 0 messages; you said: first" in llm(env, "-m", "agent", "first")  # streamed: llm's default
    assert "history: 0 messages; you said: second" in llm(env, "-m", "agent", "--no-stream", "second")
    assert "history: 2 messages; you said: third" in llm(env, "-c", "third")  # -c resends "second" and its answer
    assert "history: 4 messages; you said: fourth" in llm(env, "-c", "--no-stream", "fourth")
    said = llm(env, "-m", "agent", "-s", "Be brief.", "with a system prompt")  # -s: a leading system message
    assert "dynamic_context" in said and "history: 0 messages; you said: with a system prompt" in said
    assert "dynamic_context" not in llm(env, "-m", "agent", "without")  # the turn's context is the request's system text
    assert "openai-api:" not in stored(echo)


class LlmChat(Terminal):
    """``llm chat`` as the child of a real pseudo-terminal (the :class:`Terminal` helpers read and write it)."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        import pty

        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execve(sys.executable, [sys.executable, "-m", "llm", "chat", *args], env)
        self.output = b""
        self.transcript = b""
        self.status = None


def test_llm_chat_in_a_terminal_sends_the_earlier_exchange_with_the_next_message(echo, tmp_path):
    chat = LlmChat(llm_home(tmp_path, echo), "-m", "agent")
    try:
        chat.wait_for(b"> ")
        chat.send(b"one\r")
        chat.wait_for(b"history: 0 messages; you said: one")
        chat.wait_for(b"> ")
        chat.send(b"two\r")
        chat.wait_for(b"history: 2 messages; you said: two")
        chat.wait_for(b"> ")
        chat.send(b"quit\r")
        assert chat.exit_code() == 0
    finally:
        if chat.status is None:
            os.kill(chat.pid, 9)
            os.waitpid(chat.pid, 0)
        os.close(chat.fd)
    assert "openai-api:" not in stored(echo)


# openai-agents ----------------------------------------------------------------------------------------------


def model_id(server: Server) -> str:
    """The served agent's model id, as a client finds it (``GET /v1/models``): the ``model`` every client must send."""
    return server.client.get("/v1/models", headers=auth()).json()["data"][0]["id"]


def agents_model(server: Server, client, kind: str):
    from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel, set_tracing_disabled

    set_tracing_disabled(True)  # nothing is sent to OpenAI's trace collector (no network but the server)
    model = OpenAIChatCompletionsModel if kind == "chat" else OpenAIResponsesModel
    return model(model=model_id(server), openai_client=client)


def async_client(server: Server):
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, max_retries=0)


async def two_turns(server: Server, kind: str, store: bool | None = None) -> tuple[str, str, str]:
    from agents import Agent, ModelSettings, Runner

    async with async_client(server) as client:  # closed in this event loop, not by the collector in another
        agent = Agent(name="assistant", instructions="Be brief.", model=agents_model(server, client, kind),
                      model_settings=ModelSettings(store=store))
        first = await Runner.run(agent, "first")
        second = await Runner.run(agent, first.to_input_list() + [{"role": "user", "content": "second"}])
        streamed = Runner.run_streamed(agent, second.to_input_list() + [{"role": "user", "content": "third"}])
        async for _ in streamed.stream_events():
            pass
    return first.final_output, second.final_output, streamed.final_output


def test_openai_agents_chat_completions_model_multi_turn_from_to_input_list(echo):
    first, second, third = asyncio.run(two_turns(echo, "chat"))
    assert "history: 0 messages; you said: first" in first
    assert "dynamic_context" in first  # the agent's instructions, sent as a system message: the turn's context
    assert "history: 2 messages; you said: second" in second  # the first exchange, resent by to_input_list()
    assert "history: 4 messages; you said: third" in third  # streamed
    assert "openai-api:" not in stored(echo)


@pytest.mark.parametrize("store", [None, False])
def test_openai_agents_default_responses_model_multi_turn_from_to_input_list(responses_echo, store):
    first, second, third = asyncio.run(two_turns(responses_echo, "responses", store))
    assert "history: 0 messages; you said: first" in first
    assert "history: 2 messages; you said: second" in second  # the earlier output item, resent as input
    assert "history: 4 messages; you said: third" in third
    if store is False:  # ModelSettings(store=False): a client conversation, nothing kept
        assert "openai-api:" not in stored(responses_echo)


async def weather_run(server: Server, kind: str) -> tuple[str, list[str]]:
    from agents import Agent, Runner, function_tool

    asked: list[str] = []

    @function_tool
    def weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"sunny in {city}"

    async with async_client(server) as client:
        agent = Agent(name="assistant", instructions="Use the tool.", model=agents_model(server, client, kind), tools=[weather])
        done = await Runner.run(agent, "What is the weather in Paris?", max_turns=3)
    return done.final_output, asked


def test_openai_agents_function_tool_runs_in_the_client_over_chat_completions(weather_server):
    answer, asked = asyncio.run(weather_run(weather_server, "chat"))
    assert asked == ["Paris"]  # the model's call reached the client's function
    assert answer == "Results: weather=sunny in Paris"


def test_openai_agents_function_tool_runs_in_the_client_over_responses(weather_server):
    answer, asked = asyncio.run(weather_run(weather_server, "responses"))
    assert asked == ["Paris"]
    assert answer == "Results: weather=sunny in Paris"


# LangChain --------------------------------------------------------------------------------------------------


def chat_openai(server: Server, **options):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, model=model_id(server), max_retries=0, **options)


def test_langchain_chat_openai_invoke_stream_and_a_multi_message_history(echo):
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    model = chat_openai(echo)
    assert "history: 0 messages; you said: hello" in model.invoke("hello").content
    assert "history: 0 messages; you said: streamed" in "".join(chunk.content for chunk in model.stream("streamed"))
    chat = [SystemMessage("Be brief."), HumanMessage("first"), AIMessage("the first answer"),
            HumanMessage("second"), AIMessage("the second answer"), HumanMessage("third")]
    assert "history: 4 messages; you said: third" in model.invoke(chat).content
    assert "history: 4 messages; you said: third" in "".join(chunk.content for chunk in model.stream(chat))
    assert "openai-api:" not in stored(echo)


def test_langchain_chat_openai_over_the_responses_api(responses_echo):
    from langchain_core.messages import AIMessage, HumanMessage

    model = chat_openai(responses_echo, use_responses_api=True)
    assert "history: 0 messages; you said: hello" in model.invoke("hello").text
    assert "history: 0 messages; you said: streamed" in "".join(chunk.text for chunk in model.stream("streamed"))
    chat = [HumanMessage("first"), AIMessage("the first answer"), HumanMessage("second")]
    assert "history: 2 messages; you said: second" in model.invoke(chat).text
    unstored = chat_openai(responses_echo, use_responses_api=True, store=False)
    before = stored(responses_echo)
    assert "history: 2 messages; you said: second" in unstored.invoke(chat).text
    assert stored(responses_echo) == before  # store=False: a client conversation, nothing kept


def langchain_weather_round(server: Server, **options) -> tuple[str, list[str]]:
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool

    asked: list[str] = []

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"sunny in {city}"

    model = chat_openai(server, **options).bind_tools([weather])
    question = HumanMessage("What is the weather in Paris?")
    called = model.invoke([question])
    assert [call["name"] for call in called.tool_calls] == ["weather"], called
    result = weather.invoke(called.tool_calls[0])
    return model.invoke([question, called, result]).text, asked


def test_langchain_bind_tools_the_client_runs_the_call_and_the_model_answers(weather_server):
    answer, asked = langchain_weather_round(weather_server)
    assert asked == ["Paris"]
    assert answer == "Results: weather=sunny in Paris"


def test_langchain_bind_tools_over_the_responses_api(weather_server):
    answer, asked = langchain_weather_round(weather_server, use_responses_api=True)
    assert asked == ["Paris"]
    assert answer == "Results: weather=sunny in Paris"

