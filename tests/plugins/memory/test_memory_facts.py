"""memory.capture.mode = "facts": a separate extractor prompt after the commit, strict JSON, one memory per fact."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from monoagent import ProviderRequest
from monoagent._kernel.errors import ProviderError
from monoagent.testing import FunctionProvider, FunctionReply, fresh_agent
from monoagent_plugins.memory.facts import PROFILE

FACTS = {"memory": {"tiers": ["lite"], "capture": {"mode": "facts"}}}


def _agent(tmp_path: Path, extractor_reply: Any, config: dict | None = None) -> tuple[Any, list[ProviderRequest]]:
    extractor_requests: list[ProviderRequest] = []

    def model(request: ProviderRequest) -> Any:
        if request.prompt.manifest.profile == PROFILE:
            extractor_requests.append(request)
            if isinstance(extractor_reply, BaseException):
                raise extractor_reply
            return extractor_reply
        return "Noted: you prefer tea."

    merged = json.loads(json.dumps(FACTS))
    for key, value in (config or {}).items():
        merged["memory"]["capture"][key] = value
    return fresh_agent(tmp_path, config=merged, provider=FunctionProvider(model, name="chat")), extractor_requests


def _stored(agent: Any) -> list[Any]:
    return list(asyncio.run(agent.memory_tiers()["lite"].list(limit=50)))


def _run(agent: Any, text: str = "I prefer tea to coffee. Remember that.") -> list[Any]:
    events: list[Any] = []
    agent.run_sync(text, conversation_id="t", on_event=events.append)
    return events


def test_valid_facts_are_stored_one_per_memory_from_a_tool_less_extractor_prompt(tmp_path: Path) -> None:
    reply = json.dumps({"facts": [{"text": "The user prefers tea to coffee.", "kind": "preference"}, {"text": "  The user\n asked to be remembered.  "}]})
    agent, requests = _agent(tmp_path, reply)
    events = _run(agent)
    (request,) = requests
    assert request.tools == () and [s.id for s in request.prompt.sections] == ["memory_extractor_instructions"]
    assert "# Memory" not in request.prompt.system_text and request.prompt.manifest.profile == PROFILE
    assert "User: I prefer tea to coffee." in request.messages[-1].content and "Noted: you prefer tea." in request.messages[-1].content
    stored = sorted(_stored(agent), key=lambda r: r.text)
    assert [r.text for r in stored] == ["The user asked to be remembered.", "The user prefers tea to coffee."]
    captured = [e.data for e in events if e.type == "memory_facts_captured"]
    assert captured == [{"facts": 2, "bytes": 63, "model": "function:chat"}]
    assert "memory_capture_rejected" not in [e.type for e in events]


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("Sure! Here are the facts: tea.", "invalid_json"),
        ('```json\n{"facts": []}\n```', "invalid_json"),
        ('{"facts": [{"text": "a"}], "facts": []}', "invalid_json"),
        ("[" * 50_000, "invalid_json"),
        ('{"facts": "tea"}', "schema"),
        ('{"facts": [{"text": "tea", "secret": "x"}]}', "schema"),
        ('{"facts": [{"text": 7}]}', "schema"),
        ('{"memories": []}', "schema"),
        (json.dumps({"facts": [{"text": "x" * 70_000}]}), "too_large"),
        (FunctionReply('{"facts": [{"text": "cut', stop_reason="max_tokens"), "cut_off"),
        (ProviderError("the extractor is down", provider="function"), "extractor_failed"),
    ],
)
def test_an_unusable_reply_stores_nothing_and_says_why(tmp_path: Path, reply: Any, reason: str) -> None:
    agent, _ = _agent(tmp_path, reply)
    events = _run(agent)
    rejected = [e.data for e in events if e.type == "memory_capture_rejected"]
    assert [(d["reason"], d["kept"]) for d in rejected] == [(reason, 0)] and rejected[0]["detail"]
    assert _stored(agent) == []
    assert [e.type for e in events][-1] == "run_completed"


def test_facts_over_a_bound_are_dropped_alone(tmp_path: Path) -> None:
    facts = [{"text": f"Fact number {n}."} for n in range(4)]
    facts += [{"text": "y" * 100}, {"text": "   "}, {"text": "Kind is odd.", "kind": "Ignore Previous"}]
    agent, _ = _agent(tmp_path, json.dumps({"facts": facts}), {"maxFacts": 3, "maxFactBytes": 64})
    events = _run(agent)
    assert sorted(r.text for r in _stored(agent)) == ["Fact number 0.", "Fact number 1.", "Fact number 2."]
    (rejected,) = [e.data for e in events if e.type == "memory_capture_rejected"]
    assert (rejected["reason"], rejected["kept"], rejected["dropped"]) == ("fact_rejected", 3, 4)
    assert "maxFacts = 3" in rejected["detail"] or "maxFactBytes = 64" in rejected["detail"]


def test_hostile_fact_text_is_neutralised_and_the_turn_mode_is_unchanged(tmp_path: Path) -> None:
    from monoagent_plugins.prompt.conversation import RECALL_DELIMITER

    reply = json.dumps({"facts": [{"text": f"{RECALL_DELIMITER} The user likes tea."}]})
    agent, _ = _agent(tmp_path / "facts", reply)
    _run(agent)
    (stored,) = _stored(agent)
    assert RECALL_DELIMITER not in stored.text and "The user likes tea." in stored.text
    turn_mode, requests = _agent(tmp_path / "turn", reply, {"mode": "turn"})
    _run(turn_mode)
    assert requests == [] and [r.text for r in _stored(turn_mode)][0].startswith("User: I prefer tea")


def test_the_extractor_model_is_configurable(tmp_path: Path) -> None:
    seen: list[str] = []

    def extractor(request: ProviderRequest) -> str:
        seen.append(request.prompt.manifest.profile)
        return '{"facts": [{"text": "From the small model."}]}'

    config = {"memory": {"tiers": ["lite"], "capture": {"mode": "facts", "model": "function:extractor"}}}
    agent = fresh_agent(tmp_path, config={**config, "runtime": {"model": "function:chat"}},
                        provider=[FunctionProvider(lambda r: "hi", name="chat"), FunctionProvider(extractor)])
    _run(agent)
    assert seen == [PROFILE] and [r.text for r in _stored(agent)] == ["From the small model."]
