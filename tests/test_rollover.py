"""Daily rollover: the boundary and the notice come from what the history store holds.

A brand-new conversation has no earlier bucket, so its first turn is no rollover; a restart
within a bucket finds that bucket's history and is no rollover either; the notice reaches the
caller (result text, ``text_delta``) and never history or memory. A logical reset with rollover
off touches only the exact id.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from monoagent import hookimpl
from monoagent._kernel.model import Message
from monoagent._kernel.stores import CommitReceipt, ConversationInfo
from monoagent._kernel.turn_request import TurnRequest
from monoagent.testing import fresh_agent

DAILY = {"runtime": {"session": {"rollover": "daily", "rolloverTimezone": "UTC", "rolloverNotice": True}}}
OLD_TURN = [Message("user", "yesterday's question"), Message("assistant", "yesterday's answer")]

# Every turn here runs on an injected clock (Harness.clock), never on today's date: one second
# before midnight UTC, where a test that read the real clock twice (once for its expectation, once
# in the turn) would straddle two buckets.
LAST_SECOND = datetime(2026, 3, 28, 23, 59, 59, tzinfo=UTC)
MIDNIGHT = datetime(2026, 3, 29, 0, 0, 0, tzinfo=UTC)
DAY = "2026-03-28"


def daily_agent(tmp_path, config=DAILY, **kwargs):
    """A fresh agent whose harness reads :data:`LAST_SECOND` as the time every turn starts."""
    agent = fresh_agent(tmp_path, config=config, **kwargs)
    agent.harness.clock = LAST_SECOND.timestamp
    return agent


def turn(agent, text="hi", conversation_id="slack:C1", delivery="push"):
    events = []
    result = asyncio.run(agent.respond(TurnRequest(text, conversation_id=conversation_id, delivery=delivery), on_event=events.append))
    return result, events


def boundaries(events):
    return [e.data for e in events if e.type == "session_boundary"]


def load(agent, conversation_id):
    return list(asyncio.run(agent.history_store.load(conversation_id)))


def test_a_brand_new_conversation_gets_no_boundary_and_no_notice(tmp_path):
    agent = daily_agent(tmp_path)
    result, events = turn(agent)
    assert boundaries(events) == []
    assert result.conversation_id == f"slack:C1:{DAY}"
    assert result.notice == "" and not result.text.startswith("New session bucket")


def test_the_first_turn_of_a_new_bucket_is_a_rollover_with_its_notice(tmp_path):
    agent = daily_agent(tmp_path)
    asyncio.run(agent.history_store.commit("slack:C1:2020-01-01", OLD_TURN))
    result, events = turn(agent)
    assert boundaries(events) == [{"kind": "rollover", "bucket": DAY}]
    notice = f"New session bucket started: {DAY}.\n\n"
    assert result.notice == notice and result.text.startswith(notice)
    assert [e.data["text"] for e in events if e.type == "text_delta"][0] == notice
    again, events = turn(agent, "again")
    assert boundaries(events) == [] and again.notice == ""


def test_a_restart_within_the_bucket_is_no_rollover(tmp_path):
    first = daily_agent(tmp_path)
    asyncio.run(first.history_store.commit("slack:C1:2020-01-01", OLD_TURN))
    _, events = turn(first)
    assert [b["kind"] for b in boundaries(events)] == ["rollover"]
    first.close()
    restarted = daily_agent(tmp_path)  # a new process: nothing in memory
    result, events = turn(restarted, "after the restart")
    assert boundaries(events) == [] and result.notice == ""
    assert "history: 2 messages" in result.text


def facts_date(agent) -> str:
    """The date and time the runtime-facts section states for a turn starting now (the harness's clock)."""
    prompt = asyncio.run(agent.assemble(TurnRequest("hi", conversation_id="slack:C1", delivery="push")))
    return prompt.messages[-1].content.partition("Current local date and time: ")[2].partition(" (")[0]


def test_the_bucket_turns_over_at_midnight_in_the_rollover_time_zone(tmp_path):
    agent = daily_agent(tmp_path)
    assert facts_date(agent) == "Saturday, 2026-03-28 23:59"  # the sections date the turn by the same clock
    last, events = turn(agent, "the last word of the day")
    assert last.conversation_id == "slack:C1:2026-03-28" and boundaries(events) == []
    agent.harness.clock = MIDNIGHT.timestamp
    assert facts_date(agent) == "Sunday, 2026-03-29 00:00"
    first, events = turn(agent, "the first word of the next")
    assert first.conversation_id == "slack:C1:2026-03-29"
    assert boundaries(events) == [{"kind": "rollover", "bucket": "2026-03-29"}]
    assert first.notice == "New session bucket started: 2026-03-29.\n\n"
    assert "history: 0 messages" in first.text  # the new bucket starts empty ...
    assert load(agent, "slack:C1:2026-03-28")[0].content == "the last word of the day"  # ... the old one stays


@pytest.fixture
def system_zone():
    """Set the process's local time zone (``TZ``, then ``time.tzset``) for one test; restored after it."""
    saved = os.environ.get("TZ")

    def set_zone(posix_zone: str) -> None:
        os.environ["TZ"] = posix_zone
        time.tzset()

    yield set_zone
    if saved is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved
    time.tzset()


# POSIX zone strings (no tz database needed): "<+14>-14" is UTC+14, "<-11>11" is UTC-11. At
# 23:59:59 UTC the first is already on the next date, the second still on this one.
EAST, WEST = "<+14>-14", "<-11>11"


@pytest.mark.parametrize(("rollover_zone", "bucket"), [
    ("UTC", "2026-03-28"), ("Pacific/Kiritimati", "2026-03-29"), ("Pacific/Pago_Pago", "2026-03-28"),
])
def test_the_bucket_is_the_date_in_the_configured_zone_not_the_systems(tmp_path, system_zone, rollover_zone, bucket):
    system_zone(EAST if bucket == "2026-03-28" else WEST)  # the system's date is the other one
    session = {"rollover": "daily", "rolloverTimezone": rollover_zone}
    agent = daily_agent(tmp_path, config={"runtime": {"session": session}})
    result, _ = turn(agent)
    assert result.conversation_id == f"slack:C1:{bucket}"


@pytest.mark.parametrize(("system", "bucket"), [(EAST, "2026-03-29"), (WEST, "2026-03-28")])
def test_without_a_rollover_zone_the_bucket_is_the_systems_date(tmp_path, system_zone, system, bucket):
    system_zone(system)
    agent = daily_agent(tmp_path, config={"runtime": {"session": {"rollover": "daily"}}})
    result, _ = turn(agent)
    assert result.conversation_id == f"slack:C1:{bucket}"


def test_the_notice_is_never_written_to_history(tmp_path):
    agent = daily_agent(tmp_path)
    asyncio.run(agent.history_store.commit("slack:C1:2020-01-01", OLD_TURN))
    result, _ = turn(agent)
    notice = f"New session bucket started: {DAY}.\n\n"
    assert result.text.startswith(notice)
    _, answer = load(agent, result.conversation_id)
    assert answer.content == result.text[len(notice):]
    assert "New session bucket" not in answer.content


def test_the_notice_is_not_captured_to_memory(tmp_path):
    agent = daily_agent(tmp_path, config={**DAILY, "memory": {"tiers": ["lite"]}})
    asyncio.run(agent.history_store.commit("slack:C1:2020-01-01", OLD_TURN))
    result, _ = turn(agent)
    assert result.text.startswith("New session bucket started:")
    (entry,) = asyncio.run(agent.memory_tier("lite").list(limit=10))
    assert "New session bucket" not in entry.text and "you said: hi" in entry.text


def test_the_console_never_rolls_over(tmp_path):
    agent = daily_agent(tmp_path)
    asyncio.run(agent.history_store.commit("web:1:2020-01-01", OLD_TURN))
    result, events = turn(agent, conversation_id="web:1", delivery="console")
    assert result.conversation_id == "web:1" and boundaries(events) == []
    assert not result.text.startswith("New session bucket")


class ListingOnlyStore:
    """A third-party store written against the plain HistoryStore protocol (no sub-protocol)."""

    name = "listing"

    def __init__(self):
        self.records: dict[str, list[Message]] = {}

    async def load(self, conversation_id: str, *, on_warning: Any = None) -> Sequence[Message]:
        return list(self.records.get(conversation_id, ()))

    async def commit(self, conversation_id: str, messages: Sequence[Message]) -> CommitReceipt:
        self.records.setdefault(conversation_id, []).extend(messages)
        return CommitReceipt(conversation_id, len(self.records[conversation_id]), 0)

    async def reset(self, conversation_id: str) -> int:
        return len(self.records.pop(conversation_id, []))

    async def conversations(self) -> Sequence[ConversationInfo]:
        return [ConversationInfo(cid, len(m), 0.0, 0) for cid, m in self.records.items()]

    async def close(self) -> None:
        pass


class ListingPlugin:
    def __init__(self):
        self.store = ListingOnlyStore()

    @hookimpl
    def register_history_stores(self, register):
        register("listing", lambda agent: self.store)


def test_a_store_that_is_not_a_logical_lookup_store_is_asked_through_its_listing(tmp_path):
    plugin = ListingPlugin()
    agent = daily_agent(tmp_path, config={**DAILY, "history": {"store": "listing"}}, plugins=[plugin])
    _, events = turn(agent)
    assert boundaries(events) == []
    plugin.store.records["slack:C2:2020-01-01"] = list(OLD_TURN)
    plugin.store.records["slack:C20:2020-01-01"] = list(OLD_TURN)
    _, events = turn(agent, conversation_id="slack:C2")
    assert [b["kind"] for b in boundaries(events)] == ["rollover"]
    _, events = turn(agent, conversation_id="slack:C3")
    assert boundaries(events) == [], "another conversation's bucket is not this one's"


def test_a_reset_with_rollover_off_touches_only_the_exact_id(tmp_path):
    from monoagent._kernel.model import ToolCall, ToolResult
    from monoagent._kernel.stores import ToolInvocation

    agent = fresh_agent(tmp_path)
    ids = ["tg:7", "tg:7:2020-01-01", "tg:70"]
    tools = agent.tool_history_store()
    for n, cid in enumerate(ids):
        asyncio.run(agent.history_store.commit(cid, OLD_TURN))
        invocation = ToolInvocation(cid, cid, f"run{n}", ToolCall(f"c{n}", "probe", {}), time.time())
        asyncio.run(tools.write_invocation(invocation))
        asyncio.run(tools.write_result(invocation, ToolResult(f"c{n}", "probe", "ok"), time.time()))
    report, cleared = asyncio.run(agent.reset_conversation("tg:7:2020-01-01"))
    assert report.conversation_ids == ("tg:7:2020-01-01",) and report.messages == 2 and cleared.calls == 1
    assert load(agent, "tg:7") == OLD_TURN and load(agent, "tg:7:2020-01-01") == []
    report, cleared = asyncio.run(agent.reset_conversation("tg:7"))
    assert report.conversation_ids == ("tg:7",) and cleared.calls == 1
    assert load(agent, "tg:70") == OLD_TURN
    assert sorted(r.conversation_id for r in asyncio.run(tools.records())) == ["tg:70"]
    agent.close()


def test_a_reset_with_daily_rollover_still_clears_every_bucket(tmp_path):
    agent = daily_agent(tmp_path)
    for cid in ("tg:7", "tg:7:2020-01-01", "tg:70"):
        asyncio.run(agent.history_store.commit(cid, OLD_TURN))
    report, _ = asyncio.run(agent.reset_conversation("tg:7:2020-01-01"))
    assert sorted(report.conversation_ids) == ["tg:7", "tg:7:2020-01-01"]
    assert load(agent, "tg:70") == OLD_TURN
    agent.close()


def test_an_exact_reset_tells_plugins_which_id_was_reset(tmp_path):
    seen = []

    class Forgets:
        @hookimpl
        def after_history_reset(self, agent, logical_conversation_id):
            seen.append(logical_conversation_id)

    agent = fresh_agent(tmp_path, plugins=[Forgets()])
    asyncio.run(agent.history_store.commit("tg:7", OLD_TURN))
    asyncio.run(agent.reset_conversation("tg:7"))
    assert seen == ["tg:7"] and load(agent, "tg:7") == []
    agent.close()
