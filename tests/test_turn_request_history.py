"""``TurnRequest.history``: a caller-given conversation the run reads instead of the history store."""

from __future__ import annotations

import asyncio

import pytest

from monoagent import Message, TurnRequest
from monoagent.testing import fresh_agent


def test_a_given_history_replaces_the_stored_one_and_an_isolated_run_stores_nothing(tmp_path):
    agent = fresh_agent(tmp_path, config={"runtime": {"model": "offline:echo"}})
    try:
        agent.run_sync("stored turn", conversation_id="c")
        stored = asyncio.run(agent.history_store.load("c"))
        assert len(stored) == 2
        given = (Message("user", "earlier question"), Message("assistant", "earlier answer"),
                 Message("user", "another"), Message("assistant", "reply"))
        result = asyncio.run(agent.respond(TurnRequest("now", conversation_id="c", history=given, isolated=True)))
        assert "history: 4 messages" in result.text
        empty = asyncio.run(agent.respond(TurnRequest("alone", conversation_id="c", history=[], isolated=True)))
        assert "history: 0 messages" in empty.text  # an empty given history is not the store's
        assert asyncio.run(agent.history_store.load("c")) == stored  # the isolated runs committed nothing
        assert "history: 2 messages" in agent.run_sync("again", conversation_id="c").text  # None reads the store
    finally:
        agent.close()


def test_a_history_of_anything_but_messages_is_refused_naming_the_type():
    with pytest.raises(TypeError, match="Message"):
        TurnRequest("now", history=[{"role": "user", "content": "x"}])
