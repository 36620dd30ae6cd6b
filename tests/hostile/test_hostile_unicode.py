"""Hostile input at the text boundaries (issue 8, items 1, 2 and 14).

1. Text that is not valid Unicode (bytes that are not UTF-8, lone surrogates) in any field that
   enters a turn becomes U+FFFD with a diagnostic, so no store, wire request, event file or
   terminal ever has to encode it.
2. The run-artifact writer survives any event it cannot serialise or write, and shutdown never
   waits for a writer that cannot answer.
14. Everything printed to a terminal is redacted and stripped of control sequences, streamed
   answers included, and JSON output stays JSON.

Real agents, real files, real SQLite, real loopback HTTP servers, real subprocesses where the
process boundary (argv bytes, stdin decoding, interpreter exit) is what is tested.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monoagent import hookimpl
from monoagent._kernel.errors import ProviderError
from monoagent._kernel.model import (
    Attachment,
    Message,
    PrecedingMessage,
    Speaker,
    StepFinished,
    Surface,
    TextBlock,
    TextDelta,
    ToolCall,
    ToolCallRequested,
    ToolResult,
    ToolSpec,
    Usage,
)
from monoagent._kernel.turn_request import TurnRequest
from monoagent.testing import AnthropicWireServer, OpenAIWireServer, fresh_agent
from monoagent.testing.provider_contract import Reply, ScriptedToolCall

SURROGATE = st.characters(categories=["Cs"])
HOSTILE = st.text(st.one_of(st.characters(), SURROGATE, SURROGATE), max_size=20)
"""Text with lone surrogates mixed in: what Python makes of bytes that are not UTF-8."""

UNSAFE_FOR_TERMINALS = {chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))} | set(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
KEY = "sk-ant-api03-" + "Zq7Xw2Lp9Rt4Vb6Nm1Kd8Hs3Jf5Gc0Ty" * 2
PASSWORD = "S3cr3tPassw0rd"


def surrogates(*texts: str) -> int:
    return sum(1 for text in texts for char in text if 0xD800 <= ord(char) <= 0xDFFF)


def replaced(text: str) -> str:
    return "".join("\ufffd" if 0xD800 <= ord(char) <= 0xDFFF else char for char in text)


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONO_AGENT_", "ANTHROPIC_", "OPENAI_", "PYTHON"))}
    env.update(
        MONO_AGENT_HOME=str(tmp_path / "home"),
        MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD="1",
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        LC_ALL="C.UTF-8",  # strict UTF-8 decoding of stdin, as on a usual desktop
        PYTHONUTF8="0",
    )
    env.update(extra)
    return env


def monoagent(*args: str | bytes, env: dict[str, str], cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "monoagent", *args], input=stdin, capture_output=True, env=env, cwd=cwd, timeout=120
    )


def assert_valid_utf8_files(root: Path) -> int:
    """Every JSON/JSONL file under ``root`` is strict UTF-8 JSON; every SQLite text value is UTF-8."""
    checked = 0
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        if path.suffix in (".json", ".jsonl"):
            text = path.read_bytes().decode("utf-8")  # strict: raises on CESU-8 surrogates
            for line in [line for line in text.split("\n") if line] if path.suffix == ".jsonl" else [text]:
                _assert_no_surrogates(json.loads(line), path)
            checked += 1
        elif path.suffix == ".sqlite":
            with sqlite3.connect(path) as db:
                db.text_factory = bytes
                tables = [row[0].decode() for row in db.execute("select name from sqlite_master where type = 'table'")]
                for table in tables:
                    columns = [row[1].decode() for row in db.execute(f'pragma table_info("{table}")')]
                    for column in columns:
                        for (value,) in db.execute(f'select "{column}" from "{table}" where typeof("{column}") = \'text\''):
                            value.decode("utf-8")
            checked += 1
    return checked


def _assert_no_surrogates(value: Any, where: Path) -> None:
    if isinstance(value, str):
        assert surrogates(value) == 0, f"{where} holds a lone surrogate (a \\udXXX escape)"
    elif isinstance(value, dict):
        for key, item in value.items():
            _assert_no_surrogates(key, where)
            _assert_no_surrogates(item, where)
    elif isinstance(value, list):
        for item in value:
            _assert_no_surrogates(item, where)


def flush_artifacts() -> None:
    from monoagent_plugins.observability.artifacts import writer

    assert writer.flush()


# ============================================================================ 1. text that is not valid Unicode


class HostileProvider:
    """A provider plugin (``hostile:<anything>``) that replays scripted steps of provider events.

    Each step is a list of :class:`~monoagent._kernel.model.ProviderEvent` values, or an exception to raise
    after the events of the step before it; the runtime yields whatever it is given, as a
    misbehaving runtime would.
    """

    def __init__(self) -> None:
        self.steps: list[list[Any]] = []
        self.requests: list[Any] = []

    @hookimpl
    def register_providers(self, register: Any) -> None:
        plugin = self

        class Runtime:
            name = "hostile"
            context_window = 200_000

            async def stream(self, request: Any) -> Any:
                plugin.requests.append(request)
                for event in plugin.steps.pop(0) if plugin.steps else [TextDelta("(no step left)")]:
                    if isinstance(event, BaseException):
                        raise event
                    yield event

        register("hostile", lambda agent, model: Runtime(), description="test: replays hostile provider events")


class HostileTool:
    """A tool whose result text, block text and status are what the test says."""

    def __init__(self) -> None:
        self.result: Any = "ok"

    @hookimpl
    def register_tools(self, register: Any) -> None:
        register(ToolSpec("probe", "Returns what the test scripted.", {"type": "object", "properties": {}}), lambda context: self.result)


def request_surrogates(request_fields: dict[str, Any]) -> int:
    """Surrogates in every string of a request's raw (unconverted) field values."""
    total = 0

    def walk(value: Any) -> None:
        nonlocal total
        if isinstance(value, str):
            total += surrogates(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(key)
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    for value in request_fields.values():
        walk(value)
    return total


def warnings_of(events: list[Any], prefix: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for event in events:
        if event.type == "runtime_warning" and event.data.get("code") == "invalid_unicode_replaced" and event.data["field"].startswith(prefix):
            found[event.data["field"]] = found.get(event.data["field"], 0) + event.data["count"]
    return found


def raw_request(draw: Any) -> dict[str, Any]:
    """The keyword arguments of a TurnRequest, drawn raw so the test knows what went in."""
    return {
        "text": draw(HOSTILE) + "?",
        "conversation_id": "c-" + draw(HOSTILE),
        "channel": draw(HOSTILE) or "api",
        "console": draw(st.none() | HOSTILE),
        "model": None,
        "metadata": draw(st.dictionaries(HOSTILE, HOSTILE | st.lists(HOSTILE, max_size=2), max_size=3)),
        "speaker": (draw(HOSTILE) + "n", draw(st.none() | HOSTILE), draw(st.none() | HOSTILE)),
        "preceding": [(draw(HOSTILE) + "p", draw(HOSTILE)) for _ in range(draw(st.integers(0, 2)))],
        "surface": (draw(st.sampled_from(["dm", "channel", "group"])), draw(HOSTILE), draw(st.none() | HOSTILE)),
        "attachment": (draw(HOSTILE) + "f", draw(HOSTILE) + "t", draw(st.none() | HOSTILE)),
    }


def build_request(raw: dict[str, Any], model: str | None = None) -> TurnRequest:
    name, handle, user_id = raw["speaker"]
    return TurnRequest(
        raw["text"],
        conversation_id=raw["conversation_id"],
        channel=raw["channel"],
        delivery="push",
        console=raw["console"],
        sender=Speaker(name, handle, user_id),
        preceding_messages=[PrecedingMessage(Speaker(who), text) for who, text in raw["preceding"]],
        surface=Surface(*raw["surface"]),
        attachments=[Attachment(*raw["attachment"])],
        model=model,
        metadata=raw["metadata"],
    )


@st.composite
def raw_requests(draw: Any) -> dict[str, Any]:
    return raw_request(draw)


def test_a_request_built_from_python_is_valid_unicode_and_remembers_what_was_replaced() -> None:
    request = TurnRequest(
        "arg \udcff",
        conversation_id="c\ud800",
        sender=Speaker("Al\udce9", handle="a\udc80"),
        preceding_messages=[PrecedingMessage(Speaker("Bo"), "hi \udcfe\udcfd")],
        attachments=[Attachment("f\udcff.txt", text="\udcff")],
        metadata={"k\udc80": "v\udc81", "k\udc81": ["w\udc82"]},  # noqa: F601  (two keys: ruff reads both lone surrogates as U+FFFD)
    )
    assert request.text == "arg \ufffd" and request.conversation_id == "c\ufffd"
    assert request.sender.display_name == "Al\ufffd" and request.preceding_messages[0].text == "hi \ufffd\ufffd"
    assert request.metadata == {"k\ufffd": "v\ufffd", "k\ufffd#2": ["w\ufffd"]}  # colliding keys keep both values
    assert dict(request.invalid_unicode) == {
        "text": 1,
        "conversation_id": 1,
        "sender.display_name": 1,
        "sender.handle": 1,
        "preceding_messages[0].text": 2,
        "attachments[0].name": 1,
        "attachments[0].text": 1,
        "metadata": 4,
    }
    assert request == attrs.evolve(request)  # the record takes no part in equality
    assert "invalid_unicode" not in repr(request)
    clean = TurnRequest("valid café ☕")
    assert clean.invalid_unicode == () and clean.text == "valid café ☕"


def test_records_read_back_through_cattrs_are_valid_unicode() -> None:
    from monoagent._kernel.serial import structure

    message = structure({"role": "user", "content": "x\ud800", "name": "\udfff", "timestamp": 1.0,
                         "tool_calls": [{"id": "c\udc00", "name": "n", "arguments": {"\ud801": ["\udc01"]}}]}, Message)
    assert message.content == "x\ufffd" and message.name == "\ufffd"
    assert message.tool_calls[0].arguments == {"\ufffd": ["\ufffd"]}
    assert dict(message.invalid_unicode) == {"content": 1, "name": 1, "tool_calls[0].id": 1, "tool_calls[0].arguments": 2}


@pytest.fixture(scope="module")
def hostile_agent(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("hostile-agent")
    provider, tool = HostileProvider(), HostileTool()
    agent = fresh_agent(root, config={"runtime": {"model": "hostile:x"}, "memory": {"tiers": ["lite"]}}, plugins=[provider, tool])
    agent.test_provider, agent.test_tool, agent.test_root = provider, tool, root
    yield agent
    agent.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    raw=raw_requests(),
    pieces=st.lists(HOSTILE, min_size=1, max_size=4),
    tool_name=st.sampled_from(["probe"]) | HOSTILE,
    call_id=HOSTILE,
    arguments=st.dictionaries(HOSTILE, HOSTILE, max_size=2),
    tool_text=HOSTILE,
    stop_reason=HOSTILE,
    fail=st.booleans(),
)
def test_surrogates_in_any_field_never_break_a_turn_and_never_reach_a_store(
    hostile_agent: Any, raw: dict[str, Any], pieces: list[str], tool_name: str, call_id: str,
    arguments: dict[str, str], tool_text: str, stop_reason: str, fail: bool,
) -> None:
    agent, provider, tool = hostile_agent, hostile_agent.test_provider, hostile_agent.test_tool
    tool.result = ToolResult(call_id, "probe", tool_text + "!", blocks=[TextBlock(tool_text)])
    provider.steps = [
        [TextDelta(p) for p in pieces] + [ToolCallRequested(ToolCall("id-" + call_id, tool_name, arguments)), StepFinished("tool_use")],
        [TextDelta("answer " + pieces[0])]
        + ([ProviderError("scripted failure \udcff")] if fail else [StepFinished(stop_reason or "end_turn", Usage(1, 1))]),
    ]
    request = build_request(raw)
    events: list[Any] = []
    try:
        result = asyncio.run(agent.respond(request, on_event=events.append))
    except ProviderError:
        assert fail
    else:
        assert not fail and surrogates(result.text) == 0
    expected = request_surrogates({k: v for k, v in raw.items() if k != "model"})
    assert sum(warnings_of(events, "request.").values()) == expected
    provider_expected = surrogates(*pieces, tool_name, call_id, *arguments, *arguments.values()) + (0 if fail else surrogates(stop_reason))
    assert sum(warnings_of(events, "provider.").values()) == provider_expected + surrogates(pieces[0])
    if tool_name == "probe":
        assert sum(warnings_of(events, "tool_result.").values()) == 2 * surrogates(tool_text) + surrogates(call_id)
    for event in events:
        json.dumps(agent.unstructure(event), ensure_ascii=False).encode("utf-8")  # strict
    for sent in provider.requests:
        for message in sent.messages:
            message.content.encode("utf-8")
    provider.requests.clear()
    flush_artifacts()
    assert assert_valid_utf8_files(agent.test_root / "home") >= 3  # history, run files, memory (and tool history)


def test_the_next_turn_of_a_conversation_whose_turn_failed_on_a_surrogate_works(tmp_path: Path) -> None:
    """The continuity account of a failed turn holds the request: it must not brick the conversation."""
    provider = HostileProvider()
    provider.steps = [[TextDelta("half \udcff"), ProviderError("boom")], [TextDelta("fine")]]
    agent = fresh_agent(tmp_path, config={"runtime": {"model": "hostile:x"}}, plugins=[provider])
    with pytest.raises(ProviderError):
        agent.run_sync("arg \udcff", conversation_id="c")
    assert agent.run_sync("again", conversation_id="c").text == "fine"
    history = [m.content for m in asyncio.run(agent.history_store.load("c"))]
    assert history[0] == "arg \ufffd" and "Continuity account" in history[1] and "half \ufffd" in history[1]
    agent.close()
    assert assert_valid_utf8_files(tmp_path / "home") >= 3


class EscapingAnthropicServer(AnthropicWireServer):
    """Sends its JSON with ``\\uXXXX`` escapes, so lone surrogates travel as JSON allows them."""

    def event(self, name: str, data: Any) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


class EscapingOpenAIServer(OpenAIWireServer):
    def chunk(self, reply: Reply, choices: list[Any], usage: Any = None) -> bytes:
        data = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": reply.model, "choices": choices, "usage": usage}
        return f"data: {json.dumps(data)}\n\n".encode()


@pytest.mark.parametrize("prefix", ["anthropic", "openai"])
def test_surrogates_in_requests_and_in_provider_streams_on_the_wire(tmp_path: Path, prefix: str) -> None:
    server_class = EscapingAnthropicServer if prefix == "anthropic" else EscapingOpenAIServer
    tool = HostileTool()
    with server_class() as server:
        config = {"runtime": {"model": f"{prefix}:model-x"},
                  "providers": {prefix: {"baseUrl": server.url if prefix == "anthropic" else f"{server.url}/v1"}}}
        agent = fresh_agent(tmp_path, config=config, env={"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}, plugins=[tool])

        @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(raw=raw_requests(), model=HOSTILE, piece=HOSTILE, name=HOSTILE, argument=HOSTILE, tool_text=HOSTILE)
        def turn(raw: dict[str, Any], model: str, piece: str, name: str, argument: str, tool_text: str) -> None:
            tool.result = tool_text
            call = ScriptedToolCall("call_1", "probe" + name, (json.dumps({"q": argument}),))
            server.enqueue(Reply(text_pieces=("a", piece), tool_calls=(call,)), Reply(text_pieces=(piece, "z")))
            first = len(server.requests)
            events: list[Any] = []
            result = asyncio.run(agent.respond(build_request(raw, model=f"{prefix}:model-x" + model), on_event=events.append))
            assert result.text == replaced(piece) + "z"
            for sent in server.requests[first:]:
                body = sent.body.decode("utf-8")  # strict
                _assert_no_surrogates(json.loads(body), Path("request body"))
            assert sum(warnings_of(events, "request.").values()) == request_surrogates({k: v for k, v in raw.items() if k != "model"}) + surrogates(model)
            assert sum(warnings_of(events, "provider.").values()) == 2 * surrogates(piece) + surrogates(name, argument)

        turn()
        agent.close()
    assert assert_valid_utf8_files(tmp_path / "home") >= 2


UNSENDABLE_KEYS = [f"Zq7Xw2Lp{bad}9Rt4Vb6N" for bad in ("\udcff", "\u00e9", "\r\nX-Injected: 1", "\x00", "\t")]
UNSENDABLE_URLS = ["{url}/\udcff", "{url}/\x1b]0;x\x07", "{url}/v1\r\nX-Injected: 1", "http://\udcff.example"]


@pytest.mark.parametrize("prefix", ["anthropic", "openai"])
def test_an_api_key_or_base_url_that_cannot_be_sent_is_a_one_line_provider_error(tmp_path: Path, prefix: str) -> None:
    """Environment values are text too: a key or URL holding what HTTP cannot carry (a byte that is not
    UTF-8, a non-ASCII letter, a line break) is a one-line error naming the setting, never a traceback,
    and the key itself is not echoed."""
    server_class = AnthropicWireServer if prefix == "anthropic" else OpenAIWireServer
    key_env, url_env = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL") if prefix == "anthropic" else ("OPENAI_API_KEY", "OPENAI_BASE_URL")
    with server_class() as server:
        url = server.url if prefix == "anthropic" else f"{server.url}/v1"
        cases = [{key_env: key, url_env: url} for key in UNSENDABLE_KEYS]
        cases += [{key_env: "k", url_env: bad.format(url=url)} for bad in UNSENDABLE_URLS]
        for n, env in enumerate(cases):
            agent = fresh_agent(tmp_path / str(n), config={"runtime": {"model": f"{prefix}:model-x"}}, env=env)
            with pytest.raises(ProviderError) as caught:
                agent.run_sync("hi", conversation_id="c")
            agent.close()
            message = str(caught.value)
            assert "\n" not in message and not caught.value.retryable, message
            assert (key_env if env[key_env] != "k" else "baseUrl") in message, message
            assert "Zq7X" not in message and "9Rt4" not in message
        assert server.requests == []


def test_reset_conversation_names_the_conversation_a_turn_with_the_same_id_used(tmp_path: Path) -> None:
    """A turn's conversation id is made valid where it enters; ``Agent.reset_conversation`` takes the same
    id and must reset that conversation, not look for one whose id still holds the surrogate."""
    agent = fresh_agent(tmp_path)
    agent.run_sync("first", conversation_id="conv-\udcff")
    report, _ = asyncio.run(agent.reset_conversation("conv-\udcff"))
    assert report.logical_conversation_id == "conv-\ufffd" and report.messages == 2
    assert "history: 0 messages" in agent.run_sync("again", conversation_id="conv-\udcff").text
    agent.close()


def test_a_scripted_provider_file_with_surrogate_escapes_is_read_as_valid_text(tmp_path: Path) -> None:
    from monoagent.testing import scripted_agent

    agent = scripted_agent(tmp_path, [{"text": "bad \ud800 text", "tool_calls": [{"name": "n\udfff", "arguments": {"k": "\udc00"}}]},
                                      {"text": "done \udcff"}])
    events: list[Any] = []
    result = agent.run_sync("hi", conversation_id="s", on_event=events.append)
    assert result.text == "done \ufffd"
    assert warnings_of(events, "provider.") == {"provider.text_delta.text": 2, "provider.tool_call.call.name": 1, "provider.tool_call.call.arguments": 1}
    agent.close()
    assert assert_valid_utf8_files(tmp_path / "home") >= 2


def test_tool_results_with_surrogates_are_reported_and_stored_valid(tmp_path: Path) -> None:
    from monoagent.testing import scripted_agent

    tool = HostileTool()
    tool.result = "out \udcff\udcfe"
    agent = scripted_agent(tmp_path, [{"tool_calls": [{"name": "probe", "arguments": {}}]}, {"text": "ok"}], plugins=[tool])
    events: list[Any] = []
    agent.run_sync("hi", conversation_id="t", on_event=events.append)
    [warning] = [e.data for e in events if e.type == "runtime_warning"]
    assert warning["field"] == "tool_result.content" and warning["count"] == 2 and warning["tool"] == "probe"
    agent.close()
    assert assert_valid_utf8_files(tmp_path / "home") >= 3  # history, run file, tool-history SQLite


def test_cli_argument_that_is_not_utf8_against_the_anthropic_plugin(tmp_path: Path) -> None:
    """``monoagent run $'arg \\xff'``: a notice, a valid request, and the conversation keeps working."""
    with AnthropicWireServer() as server:
        server.enqueue(Reply(text_pieces=("first",)), Reply(text_pieces=("second",)))
        env = clean_env(tmp_path, MONO_AGENT_MODEL="anthropic:claude-x", ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=server.url,
                        MONO_AGENT_BLOCK_PLUGINS="runtime-facts")  # the user message exactly, no dynamic block before it
        done = monoagent("run", b"arg \xff", env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr.decode()
        assert done.stdout.decode() == "first\n"
        stderr = done.stderr.decode()
        assert stderr.count("\n") == 1 and "not valid UTF-8" in stderr and "U+FFFD" in stderr and "argument(s) 2" in stderr
        again = monoagent("run", "and now?", env=env, cwd=tmp_path)
        assert again.returncode == 0, again.stderr.decode()
        first, second = (json.loads(r.body.decode("utf-8")) for r in server.requests)
        assert first["messages"][-1]["content"][0]["text"] == "arg \ufffd"
        assert "arg \ufffd" in json.dumps(second, ensure_ascii=False)  # the stored turn, read back
    assert assert_valid_utf8_files(tmp_path / "home") >= 3


def test_stdin_and_chat_lines_that_are_not_utf8(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    done = monoagent("run", "-", env=env, cwd=tmp_path, stdin=b"piped \xff\xfe text\n")
    assert done.returncode == 0, done.stderr.decode()
    assert "you said: piped \ufffd\ufffd text" in done.stdout.decode()
    assert "standard input held 2 byte(s) that are not valid UTF-8" in done.stderr.decode()
    chat = monoagent("chat", env=env, cwd=tmp_path, stdin=b"hello \xff\nsecond\n/exit\n")
    assert chat.returncode == 0, chat.stderr.decode()
    out = chat.stdout.decode()
    assert "you said: hello \ufffd" in out and "you said: second" in out
    assert "the input line held 1 byte(s)" in chat.stderr.decode()
    assert assert_valid_utf8_files(tmp_path / "home") >= 3


@pytest.fixture
def cli_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated working directory and environment, with the early plugin host ``main()`` would build."""
    import monoagent._cli as cli_module
    from monoagent._kernel.host import PluginHost

    for name in list(os.environ):
        if name.startswith(("MONO_AGENT_", "ANTHROPIC_", "OPENAI_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MONO_AGENT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli_module, "_configure_logging", lambda debug: None)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "hostile_stream.py").write_text(HOSTILE_STREAM_PLUGIN, encoding="utf-8")
    host = PluginHost()
    host.load_entry_points()
    host.load_local([plugins])
    monkeypatch.setitem(ROOT, "cli", cli_module.build_cli(host))
    return tmp_path


ROOT: dict[str, Any] = {}


def cli(*args: str, input: str | None = None) -> Any:
    """The root command as ``main()`` builds it (plugins' commands included), run in-process."""
    return CliRunner().invoke(ROOT["cli"], list(args), input=input)


def test_cli_arguments_of_plugin_commands_are_valid_text_too(cli_project: Path) -> None:
    result = cli("history", "show", "conv-\udcff")
    assert result.exit_code == 1  # no such conversation: a clean error, not a UnicodeEncodeError
    assert "argument(s) 3 held 1 byte(s) that are not valid UTF-8" in result.stderr
    assert "conv-\ufffd" in result.output


# ============================================================================ 2. the artifact writer


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text form")


class EmitsOddEvents:
    """Emits one event that cannot be serialised, and one holding a path that is not UTF-8."""

    @hookimpl
    def augment_user_message(self, turn: Any, recalled: Any) -> None:
        turn.emit("probe_unprintable", value=Unprintable())
        turn.emit("probe_path", path=Path("/tmp/not-utf8-\udcff"))


def run_files(root: Path) -> dict[str, list[dict[str, Any]]]:
    return {
        path.stem: [json.loads(line) for line in path.read_bytes().decode("utf-8").split("\n") if line]
        for path in sorted((root / "home" / "artifacts" / "runs").glob("*.jsonl"))
    }


def test_the_artifact_writer_survives_events_it_cannot_serialise(tmp_path: Path) -> None:
    from loguru import logger

    from monoagent_plugins.observability.artifacts import writer

    logged: list[str] = []
    logger.enable("monoagent_plugins")
    sink = logger.add(lambda message: logged.append(str(message)), level="WARNING", format="{message}")
    try:
        agent = fresh_agent(tmp_path, plugins=[EmitsOddEvents()])
        first = agent.run_sync("one", conversation_id="w")
        second = agent.run_sync("two", conversation_id="w")
        assert writer.flush()
        assert writer._thread is not None and writer._thread.is_alive()
        files = run_files(tmp_path)
        for result in (first, second):
            types = [event["type"] for event in files[result.run_id]]
            assert types[0] == "run_started" and types[-1] == "run_completed"
            assert "probe_unprintable" not in types  # left out, with a log line naming it
            assert "probe_path" in types
        [path_event] = [e for e in files[second.run_id] if e["type"] == "probe_path"]
        assert path_event["data"]["path"] == "/tmp/not-utf8-\ufffd"
        assert any("probe_unprintable" in line and "could not be serialised" in line for line in logged)
        agent.close()
    finally:
        logger.remove(sink)
        logger.disable("monoagent_plugins")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the thread is killed on purpose
def test_a_writer_thread_that_died_is_replaced_and_flush_does_not_wait_for_it(tmp_path: Path) -> None:
    from monoagent._kernel.model import RunEvent
    from monoagent_plugins.observability.artifacts import ArtifactWriter

    class Fatal:
        def __str__(self) -> str:
            raise SystemExit("ends the thread that calls it")

    writer = ArtifactWriter()
    writer.submit(tmp_path, RunEvent("run_failed", "run1", "c", 1, 0.0, {"x": Fatal()}))
    dead = writer._thread
    assert dead is not None
    dead.join(60)
    assert not dead.is_alive()
    assert writer.flush(timeout=60) is False  # the writer is gone: flush says so (at once, not after the timeout)
    writer.submit(tmp_path, RunEvent("run_completed", "run2", "c", 1, 0.0, {"ok": True}))
    assert writer._thread is not dead and writer.flush()
    *_, last = (tmp_path / "runs" / "run2.jsonl").read_text(encoding="utf-8").splitlines()  # after its run_text line
    assert json.loads(last)["data"] == {"ok": True}


class Mute(Exception):
    """An exception whose message cannot be shown either: formatting it for the log raises again."""

    def __str__(self) -> str:
        raise Mute()


class Unsayable:
    def __str__(self) -> str:
        raise Mute()


def test_the_writer_survives_a_failure_whose_message_cannot_be_formatted(tmp_path: Path) -> None:
    """The log line about a lost event formats the exception; if that raises too, the writer still goes on
    and the lines it holds for other runs are not lost."""
    from loguru import logger

    from monoagent._kernel.model import RunEvent
    from monoagent_plugins.observability.artifacts import ArtifactWriter

    logged: list[str] = []
    logger.enable("monoagent_plugins")
    sink = logger.add(lambda message: logged.append(str(message)), level="WARNING", format="{message}")
    try:
        writer = ArtifactWriter()
        writer.submit(tmp_path, RunEvent("run_started", "runA", "c", 1, 0.0, {"ok": 1}))
        writer.submit(tmp_path, RunEvent("probe", "runB", "c", 1, 0.0, {"x": Unsayable()}))
        thread = writer._thread
        assert writer.flush(timeout=60)
        writer.submit(tmp_path, RunEvent("run_completed", "runA", "c", 2, 0.0, {"ok": 1}))
        assert writer.flush(timeout=60) and writer._thread is thread and thread is not None and thread.is_alive()
    finally:
        logger.remove(sink)
        logger.disable("monoagent_plugins")
    lines = (tmp_path / "runs" / "runA.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["run_started", "run_text", "run_completed"]
    assert any("probe" in line and "runB" in line and "Mute" in line for line in logged)


class MuteObserver:
    @hookimpl
    def on_run_event(self, event: Any, agent: Any) -> None:
        if event.type == "run_started":
            raise Mute()


def test_an_event_observer_failing_with_a_message_that_cannot_be_formatted_does_not_break_the_turn(tmp_path: Path) -> None:
    from loguru import logger

    logged: list[str] = []
    logger.enable("monoagent")
    sink = logger.add(lambda message: logged.append(str(message)), level="WARNING", format="{message}")
    try:
        agent = fresh_agent(tmp_path, plugins=[MuteObserver()])
        assert "you said: hi" in agent.run_sync("hi", conversation_id="c").text
        agent.close()
    finally:
        logger.remove(sink)
        logger.disable("monoagent")
    assert any("failed on run_started: Mute (its message cannot be shown)" in line for line in logged)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_has_its_own_writer_and_its_own_run_ids(tmp_path: Path) -> None:
    """A child forked after runs has no writer thread and must not write its parent's queued events, nor
    repeat its parent's run ids (two processes appending to one run file)."""
    from loguru import logger

    from monoagent._pipeline.harness import new_run_id
    from monoagent_plugins.observability.artifacts import writer

    agent = fresh_agent(tmp_path)
    parent_run = agent.run_sync("one", conversation_id="p")  # the writer thread is running
    logger.enable("monoagent_plugins")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's exit handlers
        code = 1
        try:
            logged: list[str] = []
            logger.add(lambda message: logged.append(str(message)), level="WARNING", format="{message}")
            child_run = agent.run_sync("two", conversation_id="c")
            report = {"flushed": writer.flush(60), "logged": logged, "run": child_run.run_id,
                      "ids": [new_run_id()[12:] for _ in range(4)]}
            os.write(write, json.dumps(report).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        report = json.loads(pipe.read())
    assert os.waitpid(pid, 0)[1] == 0
    logger.disable("monoagent_plugins")
    assert report["flushed"] and report["logged"] == []  # no "writer thread had stopped" warning
    assert not set(report["ids"]) & {new_run_id()[12:] for _ in range(4)}
    files = run_files(tmp_path)
    assert files[report["run"]][-1]["type"] == "run_completed" and parent_run.run_id in files
    agent.close()


PROCESS_EXIT_SCRIPT = """
import sys, time
from pathlib import Path
from monoagent import hookimpl
from monoagent.testing import fresh_agent

class Unprintable:
    def __str__(self):
        raise RuntimeError("no text form")

class Odd:
    @hookimpl
    def augment_user_message(self, turn, recalled):
        turn.emit("probe_unprintable", value=Unprintable())
        turn.emit("probe_path", path=Path("/tmp/x-\\udcff"))

agent = fresh_agent(sys.argv[1], plugins=[Odd()])
agent.run_sync("one", conversation_id="\\udcffconv")
agent.run_sync("two", conversation_id="\\udcffconv")
agent.close()
print("closed")
"""


def test_process_exit_does_not_wait_after_an_unserialisable_event(tmp_path: Path) -> None:
    """Before the fix the writer died on the first odd event: close() and exit then waited 30 s each."""
    script = tmp_path / "exit.py"
    script.write_text(PROCESS_EXIT_SCRIPT, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=25,
                          env=clean_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "closed\n"
    files = run_files(tmp_path)
    assert len(files) == 2 and all(events[-1]["type"] == "run_completed" for events in files.values())


# ============================================================================ 14. terminal output


HOSTILE_STREAM_PLUGIN = f'''
"""A provider ``stream:<anything>`` streaming pieces that cut escape sequences and a secret apart."""
from monoagent import hookimpl
from monoagent._kernel.errors import ProviderError
from monoagent._kernel.model import StepFinished, TextDelta

KEY = "{KEY}"
PIECES = [
    "Hello \\x1b]0;pwn", "ed\\x07 world \\x1b[3", "1mred\\x1b[0m \\x9b2J",
    " \\u202eevil\\u202c key: " + KEY[:10], KEY[10:30], KEY[30:] + " end\\n",
    "second \\x1b", "]8;;http://x\\x1b\\\\link\\x1b]8;;\\x1b\\\\ line\\r\\nthird\\x07\\n",
]

@hookimpl
def register_providers(register):
    class Runtime:
        name = "stream"
        context_window = 100000
        def __init__(self, model):
            self.model = model
        async def stream(self, request):
            if self.model == "fail":
                raise ProviderError("upstream said: \\x1b]0;title\\x07 bad key " + KEY + " for http://admin:{PASSWORD}@example.com/v1")
            for piece in PIECES:
                yield TextDelta(piece)
            yield StepFinished()
    register("stream", lambda agent, model: Runtime(model), description="hostile stream")
'''

STREAMED_TEXT = (
    "Hello  world red  evil key: [REDACTED:anthropic_key] end\nsecond link line\nthird\n"
)


def assert_terminal_safe(text: str) -> None:
    unsafe = sorted({f"U+{ord(c):04X}" for c in text if c in UNSAFE_FOR_TERMINALS})
    assert not unsafe, f"control characters reached the terminal: {unsafe}"
    assert KEY[10:30] not in text and PASSWORD not in text


def test_run_strips_escape_sequences_and_redacts_secrets_split_across_streamed_pieces(cli_project: Path) -> None:
    result = cli("run", "-m", "stream:ok", "hi")
    assert result.exit_code == 0, result.output
    assert_terminal_safe(result.output)
    assert result.stdout == STREAMED_TEXT + "\n"


def test_run_json_stays_json_escapes_controls_and_redacts(cli_project: Path) -> None:
    result = cli("run", "--json", "-m", "stream:ok", "hi")
    assert result.exit_code == 0, result.output
    assert_terminal_safe(result.stdout)
    data = json.loads(result.stdout)
    assert data["text"].startswith("Hello \x1b]0;pwned\x07 world")  # JSON readers get the text, escaped on the way
    assert "[REDACTED:anthropic_key]" in data["text"] and KEY not in data["text"]


def test_chat_strips_and_redacts_the_streamed_answer(cli_project: Path) -> None:
    result = cli("chat", "-m", "stream:ok", input="hi\n/exit\n")
    assert result.exit_code == 0, result.output
    assert_terminal_safe(result.output)
    assert STREAMED_TEXT in result.stdout


def test_history_show_and_memory_listings_strip_and_redact_stored_text(cli_project: Path) -> None:
    from monoagent._agent import Agent

    agent = Agent(None)
    text = f"title \x1b]0;pwned\x07 bidi \u202eabc \x9b31m key {KEY} pw=http://admin:{PASSWORD}@db.example/x"
    asyncio.run(agent.history_store.commit("conv", [Message("user", text), Message("assistant", "ok")]))
    agent.close()
    shown = cli("history", "show", "conv")
    assert shown.exit_code == 0, shown.output
    assert_terminal_safe(shown.output)
    assert "title  bidi abc  key [REDACTED:anthropic_key]" in shown.stdout
    as_json = cli("history", "show", "conv", "--json")
    assert_terminal_safe(as_json.stdout)
    content = json.loads(as_json.stdout)[0]["messages"][0]["content"]
    assert content.startswith("title \x1b]0;pwned\x07") and "[REDACTED:anthropic_key]" in content
    added = cli("memory", "add", "--tier", "lite", text)
    assert added.exit_code == 0, added.output
    listed = cli("memory", "list", "--tier", "lite")
    assert_terminal_safe(listed.stdout)
    assert "[REDACTED:anthropic_key]" in listed.stdout
    searched = cli("memory", "search", "--tier", "lite", "--json", "title")
    assert_terminal_safe(searched.stdout)
    assert "[REDACTED:anthropic_key]" in json.loads(searched.stdout)[0]["text"]


def test_config_show_redacts_credentials_in_urls(cli_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"https://admin:{PASSWORD}@proxy.example/anthropic")
    shown = cli("config", "show")
    assert shown.exit_code == 0, shown.output
    assert_terminal_safe(shown.stdout)
    [line] = [line for line in shown.stdout.splitlines() if line.startswith("providers.anthropic.baseUrl")]
    assert "proxy.example/anthropic" in line and "[REDACTED:url_credentials]" in line
    assert "history.dir" in shown.stdout and str(cli_project) in shown.stdout  # paths stay readable on a terminal
    as_json = json.loads(cli("config", "show", "--json").stdout)
    assert PASSWORD not in json.dumps(as_json) and "proxy.example" in as_json["providers.anthropic.baseUrl"]["value"]


def test_json_outputs_are_valid_unicode_even_when_escaped_to_ascii(cli_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``config show --json`` and ``plugins --json`` write ASCII: a surrogate must not come out as a
    ``\\udcff`` escape, which a JSON reader turns back into text that is not valid Unicode."""
    from monoagent._cli.terminal import terminal_json

    for ensure_ascii in (True, False):
        printed = terminal_json({"k\udcff": ["v\udcff", Path("/tmp/p\udcff")]}, ensure_ascii=ensure_ascii)
        assert json.loads(printed) == {"k\ufffd": ["v\ufffd", "/tmp/p\ufffd"]}
    monkeypatch.setenv("MONO_AGENT_HISTORY_DIR", str(cli_project / "hist\udcff"))
    shown = cli("config", "show", "--json")
    assert shown.exit_code == 0, shown.output
    value = json.loads(shown.stdout)["history.dir"]["value"]
    assert value == str(cli_project / "hist\ufffd")
    (cli_project / "plugins" / "odd\udcffname.py").write_text("x = 1\n", encoding="utf-8")
    listed = subprocess.run(
        [sys.executable, "-m", "monoagent", "--plugins-dir", os.fsencode(cli_project / "plugins"), "plugins", "--json"],
        capture_output=True, env=clean_env(cli_project), cwd=cli_project, timeout=120,
    )
    assert listed.returncode == 3, listed.stderr.decode()  # the file cannot be imported: listed, then fatal
    rows = json.loads(listed.stdout)
    _assert_no_surrogates(rows, Path("plugins --json"))
    assert any(row["name"] == "odd\ufffdname" for row in rows)


def test_provider_errors_printed_by_the_cli_are_redacted_and_stripped(tmp_path: Path) -> None:
    """An error body echoing the key and a base URL with credentials, through ``main()``, in a real process."""
    with AnthropicWireServer() as server:
        server.enqueue(Reply(status=401, error_message=f"invalid x-api-key: {KEY} \x1b]0;pwned\x07 \x9b2J"))
        url = server.url.replace("http://", f"http://admin:{PASSWORD}@")
        env = clean_env(tmp_path, MONO_AGENT_MODEL="anthropic:claude-x", ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=url)
        done = monoagent("run", "hi", env=env, cwd=tmp_path)
    stderr = done.stderr.decode("utf-8")
    assert done.returncode == 1, stderr
    assert_terminal_safe(stderr)
    assert KEY not in stderr and "[REDACTED:anthropic_key]" in stderr and "127.0.0.1" in stderr
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "hostile_stream.py").write_text(HOSTILE_STREAM_PLUGIN, encoding="utf-8")
    failed = monoagent("--plugins-dir", str(plugins), "run", "-m", "stream:fail", "hi", env=clean_env(tmp_path), cwd=tmp_path)
    assert failed.returncode == 1
    assert_terminal_safe(failed.stderr.decode())
    assert "upstream said:  bad key [REDACTED:anthropic_key]" in failed.stderr.decode()


UNEXPECTED_ERROR_PLUGIN = f'''
from monoagent import hookimpl
from monoagent._kernel.model import TextDelta

@hookimpl
def register_providers(register):
    class Runtime:
        name = "raw"
        context_window = 100000
        async def stream(self, request):
            yield TextDelta("partial\\n")
            raise ValueError("upstream body: \\x1b]0;pwned\\x07\\u202e" + "{KEY[::-1]}"[::-1])  # not in the source line
    register("raw", lambda agent, model: Runtime(), description="raises a plain exception")
'''


def test_an_unexpected_exception_is_printed_stripped_and_redacted(tmp_path: Path) -> None:
    """A plugin's own exception (not a MonoagentError) used to end the CLI with Python's raw traceback:
    its message reached the terminal with escape sequences and secrets. The traceback is still shown
    (it is a bug report), cleaned like everything else; ``--debug`` leaves it to Python."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "raw_error.py").write_text(UNEXPECTED_ERROR_PLUGIN, encoding="utf-8")
    done = monoagent("--plugins-dir", str(plugins), "run", "-m", "raw:x", "hi", env=clean_env(tmp_path), cwd=tmp_path)
    stderr = done.stderr.decode("utf-8")
    assert done.returncode == 1, stderr
    assert_terminal_safe(stderr)
    assert KEY not in stderr and "ValueError: upstream body: [REDACTED:anthropic_key]" in stderr
    assert "Traceback" in stderr and done.stdout.decode() == "partial\n"


def test_plugin_load_failures_and_log_lines_are_stripped_and_redacted(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "broken.py").write_text(f"raise RuntimeError('bad \\x1b]0;pwned\\x07 {KEY}')\n", encoding="utf-8")
    done = monoagent("--plugins-dir", str(plugins), "plugins", "--json", env=clean_env(tmp_path), cwd=tmp_path)
    assert done.returncode == 3, done.stderr.decode()  # listed, then the failed local plugin ends the command
    for stream in (done.stderr.decode(), done.stdout.decode()):
        assert_terminal_safe(stream)
        assert KEY not in stream
    assert "failed to load: RuntimeError: bad  [REDACTED:anthropic_key]" in done.stderr.decode()
    [broken] = [row for row in json.loads(done.stdout) if row["name"].startswith("broken")]
    assert "[REDACTED:anthropic_key]" in broken["reason"]
    (plugins / "broken.py").unlink()
    (plugins / "odd_events.py").write_text(ODD_EVENTS_PLUGIN, encoding="utf-8")
    logged = monoagent("--plugins-dir", str(plugins), "run", "hi", env=clean_env(tmp_path), cwd=tmp_path)
    stderr = logged.stderr.decode()
    assert logged.returncode == 0, stderr
    assert_terminal_safe(stderr)
    assert "monoagent: WARNING: run event probe_unprintable of" in stderr and "no text form: [REDACTED:anthropic_key]" in stderr


ODD_EVENTS_PLUGIN = f'''
from monoagent import hookimpl

class Unprintable:
    def __str__(self):
        raise RuntimeError("no text form: \\x1b]0;pwned\\x07\\u202e{KEY}")

@hookimpl
def augment_user_message(turn, recalled):
    turn.emit("probe_unprintable", value=Unprintable())
'''


# ---------------------------------------------------------------------------- the streaming function itself

FRAGMENTS = st.sampled_from([
    "plain words ", "\n", "\r\n", "\t", "\x1b]0;pwned\x07", "\x1b[31m", "\x1b[0m", "\x9b2J", "\x1b(B", "\u202e", "\u2066",
    "\x00", "\x7f", "\x85", f"key {KEY} ", f"Authorization: Bearer {KEY[7:]} ", f"https://admin:{PASSWORD}@h.example/ ",
    f"password = {PASSWORD}\n", "café ☕ ", "\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\",
])


@settings(max_examples=200, deadline=None)
@given(fragments=st.lists(FRAGMENTS, max_size=25), cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_a_stream_cut_anywhere_prints_what_the_whole_text_prints(fragments: list[str], cuts: list[int]) -> None:
    from monoagent._cli.terminal import TerminalStream, terminal_text
    from monoagent_plugins.observability.redaction import redact

    text = "".join(fragments)
    points = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    stream = TerminalStream(redact)
    printed = "".join(stream.feed(piece) for piece in pieces) + stream.end()
    assert_terminal_safe(printed)
    assert printed == terminal_text(text, redact)


def test_a_private_key_streamed_line_by_line_is_never_printed() -> None:
    from monoagent._cli.terminal import TerminalStream
    from monoagent_plugins.observability.redaction import redact

    for lines in (30, 400):  # a usual key, and a block longer than the stream's context
        body = ["MIIEowIBAAKCAQEA" + "x" * 48 + str(i) for i in range(lines)]
        text = "Here it is:\n-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END RSA PRIVATE KEY-----\ndone\n"
        stream = TerminalStream(redact)
        printed = "".join(stream.feed(text[i : i + 7]) for i in range(0, len(text), 7)) + stream.end()
        assert printed == "Here it is:\n[REDACTED:private_key]\ndone\n"


def test_a_long_line_is_released_before_it_ends_without_printing_a_split_secret() -> None:
    from monoagent._cli.terminal import TerminalStream
    from monoagent_plugins.observability.redaction import redact

    stream = TerminalStream(redact)
    words = "lorem ipsum " * 400
    out = stream.feed(words)
    assert out and len(out) <= len(words)  # a long line does not wait for its end
    out += stream.feed(f"then {KEY[:20]}") + stream.feed(f"{KEY[20:]} and more") + stream.end()
    assert out == words + "then [REDACTED:anthropic_key] and more"


@pytest.mark.parametrize("secret_in_context", [
    "SECRET_KEY = 'correct horse battery staple' done",  # a quoted value with spaces
    'export DB_PASSWORD="correct horse battery staple" done',
    "curl -H 'Authorization: Bearer correct horse battery staple' x",
    '{"z":"w","api_key":"' + KEY + '","y":"v"}',  # minified JSON: no space to cut at
])
def test_a_long_line_is_never_cut_inside_a_secret(secret_in_context: str) -> None:
    """A line longer than MAX_LINE is released before it ends; the cut (at its last space, or without
    one, before the last HOLD_BACK characters) used to fall inside a secret, and the part after it was
    printed in clear. Wherever the secret sits near the cut, the stream prints what the whole text prints."""
    from monoagent._cli.terminal import TerminalStream, terminal_text
    from monoagent_plugins.observability.redaction import redact

    filler = "word " if " " in secret_in_context.split("=")[0] else '"k":"v",'
    for shift in range(0, 450, 9):
        head = (filler * (4200 // len(filler)))[: 3700 + shift]
        text = head + secret_in_context + filler * 60 + "\n"
        stream = TerminalStream(redact)
        printed = "".join(stream.feed(text[i : i + 3]) for i in range(0, len(text), 3)) + stream.end()
        assert printed == terminal_text(text, redact), shift
        assert "horse" not in printed and "battery" not in printed and KEY[30:50] not in printed


def test_terminal_text_without_a_redactor_strips_controls_only() -> None:
    from monoagent._cli.terminal import strip_controls, terminal_json, terminal_text

    assert strip_controls("a\x1b]0;t\x07b\x1b[1;31mc\x9b0md\u202ee\r\nf\tg\x00") == "abcde\nf\tg"
    assert terminal_text("x\udcff") == "x\ufffd"
    encoded = terminal_json({"k\x9b": "v\x1b[0m\u202e"})
    assert_terminal_safe(encoded)
    assert json.loads(encoded) == {"k\x9b": "v\x1b[0m\u202e"}


def test_deeply_nested_and_cyclic_data_is_checked_without_recursion() -> None:
    """Depth is bounded where data is parsed or stored; the Unicode check must not fail first."""
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(50_000):
        inner["k"] = {}
        inner = inner["k"]
    inner["leaf"] = "x\udcff"
    call = ToolCall("id", "name", deep)
    assert dict(call.invalid_unicode) == {"arguments": 1}
    inner = call.arguments
    for _ in range(50_000):
        inner = inner["k"]
    assert inner["leaf"] == "x\ufffd"
    cyclic: dict[str, Any] = {"text": "y\udcff"}
    cyclic["self"] = cyclic
    request = TurnRequest("hi", metadata=cyclic)
    assert request.metadata["text"] == "y\ufffd" and dict(request.invalid_unicode) == {"metadata": 1}
    clean: dict[str, Any] = {"a": "b"}
    clean["self"] = clean
    assert TurnRequest("hi", metadata=clean).metadata is clean


@pytest.mark.parametrize("prefix", ["anthropic", "openai"])
def test_json_escaped_lone_surrogates_from_the_wire_are_reported_on_the_run(tmp_path: Path, prefix: str) -> None:
    """A ``\\ud800`` escape decodes to a lone surrogate: it is replaced *and* the run says so, once per field."""
    server_class = EscapingAnthropicServer if prefix == "anthropic" else EscapingOpenAIServer
    tool = HostileTool()
    tool.result = "ok"
    with server_class() as server:
        config = {"runtime": {"model": f"{prefix}:m"},
                  "providers": {prefix: {"baseUrl": server.url if prefix == "anthropic" else f"{server.url}/v1"}}}
        agent = fresh_agent(tmp_path, config=config, env={"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}, plugins=[tool])
        call = ScriptedToolCall("call_1", "probe", (json.dumps({"q": "\ud800"}),))
        server.enqueue(Reply(text_pieces=("a", "b\ud800"), tool_calls=(call,)), Reply(text_pieces=("c", "z")))
        events: list[Any] = []
        result = asyncio.run(agent.respond(TurnRequest("hi"), on_event=events.append))
        agent.close()
    assert result.text == "cz"
    assert warnings_of(events, "provider.") == {"provider.text_delta.text": 1, "provider.tool_call.call.arguments": 1}
