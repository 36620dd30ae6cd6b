"""Every public entry point of Agent checks its arguments' types up front (issue 24, item 7).

``Agent.run_sync(TurnRequest(...))`` used to crash with an ``AttributeError`` inside the
continuity settlement; a ``str`` given to ``respond`` failed deep in a turn. Now ``run_sync`` takes
a whole ``TurnRequest`` too (as ``respond`` and ``submit`` do), and anything else of the wrong type
is a ``TypeError`` naming the entry point, what was passed and what is allowed, before a turn starts.
"""

from __future__ import annotations

import asyncio

import pytest

from monoagent import Agent, RunEvent, TurnRequest
from monoagent.testing import FunctionProvider, collect_events, fresh_agent


@pytest.fixture
def agent(tmp_path):
    agent = fresh_agent(tmp_path, provider=FunctionProvider(lambda request: "the answer", name="fixed"))
    yield agent
    agent.close()


def test_run_sync_runs_a_whole_turn_request(agent):
    events: list[RunEvent] = []
    result = agent.run_sync(TurnRequest("hello", conversation_id="scripted"), on_event=collect_events(events))
    assert result.text == "the answer"
    assert {event.conversation_id for event in events} == {"scripted"}


def test_run_sync_refuses_a_turn_request_with_fields_beside_it(agent):
    with pytest.raises(TypeError, match=r"Agent.run_sync got a TurnRequest and conversation_id, model: set those fields"):
        agent.run_sync(TurnRequest("hello"), conversation_id="other", model="fixed:x")


WRONG = [
    ("run_sync(bytes)", lambda a: a.run_sync(b"hello"), r"Agent.run_sync takes the message text \(a str\) or a TurnRequest, not a bytes"),
    ("run_sync(conversation_id=int)", lambda a: a.run_sync("hi", conversation_id=3), r"Agent.run_sync: conversation_id is an int; allowed: a str"),
    ("run_sync(on_event=str)", lambda a: a.run_sync("hi", on_event="print"), r"Agent.run_sync: on_event is a str; allowed: a callable"),
    ("run_sync(model=int)", lambda a: a.run_sync("hi", model=3), r"Agent.run_sync: TurnRequest.model is an int; allowed: a str or None"),
    ("respond(str)", lambda a: asyncio.run(a.respond("hi")), r"Agent.respond takes a TurnRequest, not a str; for a message's text use run_sync"),
    ("respond(text=TurnRequest)", lambda a: asyncio.run(a.respond(TurnRequest(TurnRequest("hi")))),
     r"Agent.respond: TurnRequest.text is a TurnRequest; allowed: a str"),
    ("respond(isolated=str)", lambda a: asyncio.run(a.respond(TurnRequest("hi", isolated="yes"))),
     r"Agent.respond: TurnRequest.isolated is a str; allowed: True or False"),
    ("submit(dict)", lambda a: a.submit({"text": "hi"}), r"Agent.submit takes a TurnRequest, not a dict"),
    ("assemble(str)", lambda a: asyncio.run(a.assemble("hi")), r"Agent.assemble takes a TurnRequest, not a str"),
    ("cancel(int)", lambda a: a.cancel(3), r"Agent.cancel: conversation_id is an int; allowed: a str"),
    ("reset_conversation(None)", lambda a: asyncio.run(a.reset_conversation(None)),
     r"Agent.reset_conversation: conversation_id is a NoneType; allowed: a str"),
    ("provider(int)", lambda a: a.provider(3), r"Agent.provider: model is an int; allowed: a str"),
    ("memory_tier(int)", lambda a: a.memory_tier(3), r"Agent.memory_tier: name is an int; allowed: a str"),
    ("embedder(int)", lambda a: a.embedder(3), r"Agent.embedder: name is an int; allowed: a str"),
    ("compaction_policy(int)", lambda a: a.compaction_policy(3), r"Agent.compaction_policy: name is an int; allowed: a str"),
    ("count_tokens(int)", lambda a: a.count_tokens(3, "fixed:x"), r"Agent.count_tokens: text is an int; allowed: a str"),
    ("redact(bytes)", lambda a: a.redact(b"x", "event"), r"Agent.redact: text is a bytes; allowed: a str"),
    ("publish_event(str)", lambda a: a.publish_event("done"), r"Agent.publish_event takes a RunEvent, not a str"),
    ("register(name=int)", lambda a: a.register(object(), 4), r"Agent.register: name is an int; allowed: a str"),
    ("derive(dict)", lambda a: a.derive({}), r"Agent.derive: config is a dict; allowed: a Config"),
]


@pytest.mark.parametrize(("call", "expected"), [(call, expected) for _, call, expected in WRONG], ids=[name for name, _, _ in WRONG])
def test_a_wrong_argument_is_a_type_error_naming_it(agent, call, expected):
    with pytest.raises(TypeError, match=expected):
        call(agent)


def test_a_refused_argument_runs_no_turn(agent):
    events: list[RunEvent] = []
    with pytest.raises(TypeError):
        agent.run_sync(TurnRequest(TurnRequest("hi")), on_event=collect_events(events))
    assert events == []
    assert agent.run_sync("hi", conversation_id="after").text == "the answer"


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"config": "monoagent.toml"}, r"Agent\(\): config is a str; allowed: a Config, a mapping of settings or None \(for a config file, use Agent.from_config"),
        ({"config": {}, "plugins": "myplugin"}, r"Agent\(\): plugins is a str; allowed: a list of plugin objects"),
        ({"config": {}, "env": ["A=1"]}, r"Agent\(\): env is a list; allowed: a mapping of str to str, or None"),
        ({"config": {}, "config_path": 3}, r"Agent\(\): config_path is an int; allowed: a path"),
        ({"config": {}, "plugins_dirs": 3}, r"Agent\(\): plugins_dirs is an int; allowed: a list of folder paths"),
    ],
    ids=["config", "plugins", "env", "config_path", "plugins_dirs"],
)
def test_building_an_agent_with_a_wrong_argument_is_a_type_error(kwargs, expected):
    with pytest.raises(TypeError, match=expected):
        Agent(**kwargs, autoload=False)
