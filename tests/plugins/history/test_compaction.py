"""Compaction: the stored summary and its reuse, the request estimate, reactive compaction, tool pairs.

The provider is a real runtime registered through ``register_providers`` (as a third party would),
or the local Anthropic-format server for the reactive path; the history and the summaries are the
real files on disk.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from typing import Any

import pytest

from monoagent import hookimpl
from monoagent._kernel.errors import ContextLimitError
from monoagent._kernel.model import Message, Section, StepFinished, TextDelta, ToolCall, Usage
from monoagent._kernel.turn_request import TurnRequest
from monoagent.testing import AnthropicWireServer, fresh_agent
from monoagent.testing.provider_contract import Reply
from monoagent_plugins.history.compaction_summaries import SummaryFiles

SUMMARY = "The user asked about the deploy; decided on blue/green; next: check /srv/app/deploy.toml."
PREFIX = "Summary of earlier conversation:"


class CountingRuntime:
    """Answers turns with "ok" and summary requests with :data:`SUMMARY`, counting both."""

    name = "counting"

    def __init__(self, summary: str = SUMMARY) -> None:
        self.summary = summary
        self.summaries = 0
        self.requests: list[Any] = []

    async def stream(self, request):
        if request.prompt.manifest.profile == "summary":
            self.summaries += 1
            text = self.summary
        else:
            self.requests.append(request)
            text = "ok"
        yield TextDelta(text)
        yield StepFinished("end_turn", Usage(1, 1))


class Provider:
    def __init__(self) -> None:
        self.runtime = CountingRuntime()

    @hookimpl
    def register_providers(self, register):
        register("counting", lambda agent, model: self.runtime)


WINDOW = {"runtime": {"model": "counting:m", "compaction": {"contextWindowOverride": 8192, "responseReserveTokens": 0}}}
"""Budget 8192 tokens: the trigger at 6553, the summary target 819, the kept tail at most 409."""
PER_MESSAGE = {"runtime": {**WINDOW["runtime"], "session": {"mode": "per-message"}}}
"""WINDOW with the history rendered into the system prompt on every turn (continuous mode sends it
as messages and, once warm, the transcript: the summary is then not read again)."""


def sent_text(request: Any) -> str:
    """All a request carries: the system prompt and every message (where continuous mode puts history)."""
    return "\n".join([request.prompt.system_text, *(m.content for m in request.messages)])


def agent_with(tmp_path, *plugins: Any, config: dict[str, Any] | None = None) -> Any:
    return fresh_agent(tmp_path, plugins=list(plugins), config=config or WINDOW)


def seed(agent: Any, conversation: str, messages: list[Message]) -> None:
    asyncio.run(agent.history_store.commit(conversation, messages))


def long_history(pairs: int = 15, chars: int = 1000) -> list[Message]:
    """``pairs`` user/assistant pairs of ``chars`` ASCII characters each (250 tokens a message)."""
    out = []
    for n in range(pairs):
        out += [Message("user", (f"question {n} " + "q" * chars)[:chars]), Message("assistant", (f"answer {n} " + "a" * chars)[:chars])]
    return out


def turn(agent: Any, text: str = "next question", conversation: str = "c") -> tuple[Any, list[Any]]:
    events: list[Any] = []
    result = asyncio.run(agent.respond(TurnRequest(text, conversation_id=conversation), on_event=events.append))
    return result, events


def compaction_events(events: list[Any]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == "context_compaction_applied"]


def summary_path(agent: Any, conversation: str = "c"):
    return SummaryFiles(agent.config.history_dir).path(conversation)


# --------------------------------------------------------------------------- stored and reused


def test_one_summariser_call_across_ten_turns_over_the_trigger(tmp_path):
    provider = Provider()
    agent = agent_with(tmp_path, provider)
    seed(agent, "c", long_history())  # 30 messages, about 7,500 tokens: over the trigger on every turn
    reports = []
    for n in range(10):
        _, events = turn(agent, f"question {n}")
        reports += compaction_events(events)
    assert provider.runtime.summaries == 1
    assert [r["applied"] for r in reports] == [True] + [False] * 9
    assert reports[0]["trigger"] == "proactive" and reports[0]["tokens_after"] < reports[0]["tokens_before"]
    assert all(r["reused"] for r in reports[1:])
    assert len(asyncio.run(agent.history_store.load("c"))) == 50  # the canonical history keeps every message
    for request in provider.runtime.requests:
        sent = sent_text(request)
        assert sent.count(PREFIX) == 1 and SUMMARY in sent
        assert "question 0 " not in sent  # what the summary replaced is not sent again
    assert "question 9" in provider.runtime.requests[-1].messages[-1].content


def test_the_summary_file_is_owner_only_and_strict_json(tmp_path):
    agent = agent_with(tmp_path, Provider())
    seed(agent, "c", long_history())
    turn(agent)
    path = summary_path(agent)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    record = json.loads(path.read_text())
    assert record["summary"] == SUMMARY and record["conversationId"] == "c" and record["model"] == "counting:m"
    assert "c" not in path.name.split(".")  # digests name the file, never the id


def test_the_summary_is_reused_after_a_restart(tmp_path):
    first = Provider()
    agent = agent_with(tmp_path, first)
    seed(agent, "c", long_history())
    turn(agent)
    agent.close()
    second = Provider()
    again = agent_with(tmp_path, second)  # a new Agent over the same directories
    _, events = turn(again, "after the restart")
    assert second.runtime.summaries == 0
    assert compaction_events(events)[0]["reused"] is True
    assert SUMMARY in sent_text(second.runtime.requests[0])


def test_a_damaged_summary_file_is_a_warning_and_is_summarised_again(tmp_path):
    provider = Provider()
    agent = agent_with(tmp_path, provider, config=PER_MESSAGE)
    seed(agent, "c", long_history())
    turn(agent)
    path = summary_path(agent)
    path.write_bytes(b'{"version": 1, "summary": NaN')  # torn, and not strict JSON
    _, events = turn(agent)
    warnings = [e.data for e in events if e.type == "runtime_warning" and e.data["code"] == "compaction_summary_unreadable"]
    assert len(warnings) == 1 and path.name in warnings[0]["message"]
    assert provider.runtime.summaries == 2
    assert json.loads(path.read_text())["summary"] == SUMMARY  # replaced by a good one
    _, events = turn(agent)
    assert provider.runtime.summaries == 2 and compaction_events(events)[0]["reused"] is True


def test_a_summary_that_cannot_be_stored_is_used_once_with_a_warning(tmp_path):
    provider = Provider()
    agent = agent_with(tmp_path, provider, config=PER_MESSAGE)
    seed(agent, "c", long_history())
    summary_path(agent).parent.parent.mkdir(parents=True, exist_ok=True)
    summary_path(agent).parent.write_text("a file where the summaries directory goes")
    result, events = turn(agent)
    assert result.text == "ok" and compaction_events(events)[0]["applied"] is True
    codes = [e.data["code"] for e in events if e.type == "runtime_warning"]
    assert codes == ["compaction_summary_unreadable", "compaction_summary_not_stored"]  # not a directory: read, then write
    assert SUMMARY in provider.runtime.requests[-1].prompt.system_text
    turn(agent)
    assert provider.runtime.summaries == 2  # nothing stored: the next turn over the trigger summarises again


def test_a_summaries_directory_others_can_write_is_refused_not_used(tmp_path):
    # Whoever can write there could plant a summary: the directory is refused as the history
    # directory is, and left as it was (not silently re-permissioned).
    provider = Provider()
    agent = agent_with(tmp_path, provider, config=PER_MESSAGE)
    seed(agent, "c", long_history())
    directory = summary_path(agent).parent
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o777)
    result, events = turn(agent)
    assert result.text == "ok" and compaction_events(events)[0]["applied"] is True
    (warning,) = [e.data for e in events if e.type == "runtime_warning" and e.data["code"] == "compaction_summary_not_stored"]
    assert "owner-only" in warning["message"]
    assert stat.S_IMODE(directory.stat().st_mode) == 0o777 and not list(directory.iterdir())


def test_a_summary_record_of_another_conversation_is_not_used(tmp_path):
    provider = Provider()
    agent = agent_with(tmp_path, provider)
    seed(agent, "c", long_history())
    seed(agent, "d", long_history())
    turn(agent, conversation="c")
    summary_path(agent, "d").write_bytes(summary_path(agent, "c").read_bytes())
    _, events = turn(agent, conversation="d")  # a copied file names "c": damaged for "d"
    assert any(e.type == "runtime_warning" and e.data["code"] == "compaction_summary_unreadable" for e in events)
    assert provider.runtime.summaries == 2


def test_a_reset_removes_the_summary(tmp_path):
    provider = Provider()
    agent = agent_with(tmp_path, provider)
    seed(agent, "c", long_history())
    seed(agent, "c:2026-01-02", long_history())  # a daily bucket of the same logical session
    turn(agent, conversation="c")
    turn(agent, conversation="c:2026-01-02")
    seed(agent, "other", long_history())
    turn(agent, conversation="other")
    assert summary_path(agent, "c").exists() and summary_path(agent, "c:2026-01-02").exists()
    asyncio.run(agent.reset_conversation("c"))
    assert not summary_path(agent, "c").exists() and not summary_path(agent, "c:2026-01-02").exists()
    assert summary_path(agent, "other").exists()
    seed(agent, "c", long_history())  # the same messages again: a new conversation, summarised anew
    _, events = turn(agent, conversation="c")
    assert compaction_events(events)[0]["reused"] is False and provider.runtime.summaries == 4


def test_a_summary_the_history_no_longer_matches_is_dropped(tmp_path):
    provider = Provider()
    agent = agent_with(tmp_path, provider)
    seed(agent, "c", long_history())
    turn(agent)
    asyncio.run(agent.history_store.reset("c"))  # the store alone, as retention or another tool would
    _, events = turn(agent, "hello again")
    assert compaction_events(events)[0]["reused"] is False
    assert not summary_path(agent).exists()
    assert PREFIX not in provider.runtime.requests[-1].prompt.system_text


def test_compaction_on_a_warm_turn_retires_the_session_and_the_next_transcript_starts_from_the_summary(tmp_path):
    """Continuous mode: the warm transcript cannot hold a compacted history, so the turn goes cold with it."""
    compact_now = [False]

    class Trigger:
        @hookimpl
        def choose_compaction(self, turn, history_tokens, budget):
            return "summary" if compact_now[0] else "none"

    provider = Provider()
    agent = agent_with(tmp_path, provider, Trigger(), config=WINDOW)
    seed(agent, "c", long_history())
    turn(agent, "first")  # cold: the session starts from canonical history
    compact_now[0] = True
    _, events = turn(agent, "second")
    compact_now[0] = False
    _, later = turn(agent, "third")
    assert [(e.data["kind"], e.data["reason"]) for e in events if e.type == "session_boundary"] == [("cold", "compaction")]
    assert not [e for e in later if e.type == "session_boundary"] and provider.runtime.summaries == 1
    second, third = provider.runtime.requests[1:]
    for request in (second, third):
        assert request.messages[0].content.startswith(PREFIX) and SUMMARY in request.messages[0].content
        assert PREFIX not in request.prompt.system_text
    assert [m.content for m in third.messages[: len(second.messages)]][-1].startswith("second")


# --------------------------------------------------------------------------- what is counted, what is kept


def test_the_estimate_counts_the_system_prompt_not_only_the_history(tmp_path):
    seen = []

    class BigSection:
        @hookimpl
        def extra_sections(self, turn):
            return Section("runbook", "r" * 30_000, order=450, stability="dynamic", source="test")

        @hookimpl
        def choose_compaction(self, turn, history_tokens, budget):
            seen.append(history_tokens)

    provider = Provider()
    agent = agent_with(tmp_path, provider, BigSection())
    seed(agent, "c", [Message("user", "short"), Message("assistant", "reply")])
    _, events = turn(agent)
    assert seen and seen[0] >= 7500  # the 30,000-character section counts
    report = compaction_events(events)[0]
    assert report["tokens_before"] == seen[0]
    assert report["policy"] == "summary"  # over 80% by the system prompt: the bundled choice is to compact
    assert report["applied"] is False  # two short messages: nothing to summarise


def test_tool_call_and_result_pairs_are_never_split(tmp_path):
    rendered = []

    class Recorder:
        @hookimpl
        def render_history(self, turn, messages):
            rendered.append(tuple(messages))  # None: the bundled renderer still renders

    call = ToolCall("call_1", "lookup", {"q": "deploy"})
    history = long_history(13) + [
        Message("user", "look it up " + "u" * 40),
        Message("assistant", "Let me look. " + "x" * 800, tool_calls=(call,)),
        Message("tool", "result " + "r" * 1200, name="lookup", tool_call_id="call_1"),
        Message("assistant", "done"),
    ]
    provider = Provider()
    agent = agent_with(tmp_path, provider, Recorder(), config=PER_MESSAGE)  # render_history gets the view
    seed(agent, "c", history)
    turn(agent)
    sent = rendered[-1]
    assert sent[0].content.startswith(PREFIX)
    for index, message in enumerate(sent):
        if message.role == "tool":
            caller = sent[index - 1]
            assert caller.role in {"assistant", "tool"} and (caller.tool_calls or caller.role == "tool")
    assert sent[1].role != "tool"
    assert [m.content for m in sent[1:]] == ["done"]  # the result's caller did not fit: the pair went into the summary


def test_truncation_keeps_pairs_whole_too(tmp_path):
    call = ToolCall("call_1", "lookup", {})
    history = [
        Message("user", "u" * 4000),
        Message("assistant", "calling " + "x" * 8000, tool_calls=(call,)),
        Message("tool", "r" * 20000, name="lookup", tool_call_id="call_1"),
        Message("assistant", "done"),
    ]
    config = {"runtime": {"model": "counting:m", "compaction": {"policy": "truncate", "contextWindowOverride": 8192,
                                                                 "responseReserveTokens": 0},
                          "session": {"mode": "per-message"}}}  # render_history gets the view
    rendered = []

    class Recorder:
        @hookimpl
        def render_history(self, turn, messages):
            rendered.append(tuple(messages))

    agent = agent_with(tmp_path, Provider(), Recorder(), config=config)
    seed(agent, "c", history)
    turn(agent)
    assert [m.content for m in rendered[-1]] == ["done"]


# --------------------------------------------------------------------------- reactive


@pytest.fixture
def server():
    with AnthropicWireServer() as server:
        yield server


def anthropic_agent(tmp_path, server) -> Any:
    config = {
        "runtime": {"model": "anthropic:claude-x", "compaction": {"contextWindowOverride": 4096, "responseReserveTokens": 0}},
        "providers": {"anthropic": {"baseUrl": server.url}},
    }
    return fresh_agent(tmp_path, config=config, env={"ANTHROPIC_API_KEY": "test-key"})


def test_reactive_compaction_after_prompt_is_too_long_then_success(tmp_path, server):
    agent = anthropic_agent(tmp_path, server)
    seed(agent, "c", long_history(5, 400))  # 10 messages, about 1,000 tokens: under the trigger
    server.enqueue(
        Reply(status=400, context_limit=True),  # "prompt is too long: 208310 tokens > 200000 maximum"
        Reply(text_pieces=(SUMMARY,)),
        Reply(text_pieces=("the answer",)),
    )
    result, events = turn(agent)
    assert result.text == "the answer"
    refused, summary_request, retried = server.requests
    assert "compress a conversation" in json.dumps(summary_request.json["system"])
    assert PREFIX in json.dumps(retried.json) and SUMMARY in json.dumps(retried.json)
    assert len(retried.body) < len(refused.body)
    proactive, reactive = compaction_events(events)
    assert proactive["applied"] is False and proactive["trigger"] is None
    assert reactive["applied"] is True and reactive["trigger"] == "reactive"
    assert reactive["tokens_after"] < reactive["tokens_before"]
    assert [e.data["stateless"] for e in events if e.type == "provider_request"] == [False, False]
    assert json.loads(summary_path(agent).read_text())["summary"] == SUMMARY  # stored once accepted
    assert result.manifest.history_messages == 3  # the summary and the two newest messages

    server.enqueue(Reply(text_pieces=("again",)))
    assert turn(agent)[0].text == "again"
    assert len(server.requests) == 4 and SUMMARY in json.dumps(server.requests[-1].json)  # reused, no new summary


def test_no_reactive_compaction_when_the_preview_is_not_smaller(tmp_path, server):
    agent = anthropic_agent(tmp_path, server)
    seed(agent, "c", [Message("user", "hello there"), Message("assistant", "b" * 808)])
    server.enqueue(Reply(status=400, context_limit=True), Reply(text_pieces=("s" * 1000,)))
    events: list[Any] = []
    with pytest.raises(ContextLimitError):
        asyncio.run(agent.respond(TurnRequest("next", conversation_id="c"), on_event=events.append))
    assert len(server.requests) == 2  # the refused request and the summary; no re-prompt
    reactive = compaction_events(events)[-1]
    assert reactive["applied"] is False and reactive["reason"] == "preview_not_smaller"
    assert not summary_path(agent).exists()  # a rejected preview is not persisted
    assert any(e.type == "run_failed" for e in events)


def test_one_reactive_compaction_per_run(tmp_path, server):
    agent = anthropic_agent(tmp_path, server)
    seed(agent, "c", long_history(5, 400))
    server.enqueue(Reply(status=400, context_limit=True), Reply(text_pieces=(SUMMARY,)), Reply(status=400, context_limit=True))
    with pytest.raises(ContextLimitError):
        turn(agent)
    assert len(server.requests) == 3


# --------------------------------------------------------------------------- the token estimate


def test_the_estimate_without_tiktoken_is_four_bytes_a_token():
    from monoagent_plugins.providers import tokens

    assert tokens.estimate("") == 0
    assert tokens.estimate("abcd") == 1 and tokens.estimate("abcde") == 2
    assert tokens.estimate("é" * 4) == 2  # UTF-8 bytes, not characters


def test_count_tokens_uses_tiktoken_when_it_can_load_its_encoding():
    tiktoken = pytest.importorskip("tiktoken")
    try:
        encoding = tiktoken.get_encoding("cl100k_base")
    except Exception:
        pytest.skip("tiktoken cannot load cl100k_base here (it downloads it on first use)")
    from monoagent_plugins.providers import tokens

    text = "Summary of earlier conversation: <|endoftext|> stays text"
    assert tokens.count_tokens(text, "anthropic:x") == len(encoding.encode(text, disallowed_special=()))


def test_a_summary_directory_reached_through_a_symlink_is_refused_and_the_committed_summary_stays(tmp_path):
    """``<history>/summaries`` swapped for a symlink to another directory: a save is refused naming it and the rule,
    nothing is written there, the summary already saved stays where it was."""
    from monoagent_plugins.history.compaction_summaries import DamagedSummary, SummaryRecord

    history = tmp_path / "history"
    files = SummaryFiles(history)
    record = SummaryRecord(1, "c1", "the summary", "m1", "", "m", 1.0)
    files.save(record)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (history / "summaries").rename(history / "summaries-moved")
    (history / "summaries").symlink_to(elsewhere)
    with pytest.raises(DamagedSummary, match=f"{history / 'summaries'} is a symlink; refused: below {history}"):
        files.save(record)
    assert os.listdir(elsewhere) == [] and len(os.listdir(history / "summaries-moved")) == 1


def test_a_caller_given_history_is_compacted_by_the_same_rules_but_no_summary_is_read_or_stored(tmp_path):
    provider = Provider()
    agent = agent_with(tmp_path, provider)
    seed(agent, "c", long_history())
    turn(agent)  # stores a summary of the server conversation "c"
    assert summary_path(agent).exists() and provider.runtime.summaries == 1
    given = TurnRequest("client turn", conversation_id="c", history=long_history(), isolated=True)
    events: list[Any] = []
    asyncio.run(agent.respond(given, on_event=events.append))
    report = compaction_events(events)[0]
    assert not report["reused"] and report["applied"] is True  # the server's summary is not the client's chat's
    assert provider.runtime.summaries == 2  # over the trigger: compacted by the same rules
    summary_path(agent).unlink()
    asyncio.run(agent.respond(given))
    assert provider.runtime.summaries == 3
    assert not summary_path(agent).exists()  # the caller's conversation is not the store's: nothing persisted
