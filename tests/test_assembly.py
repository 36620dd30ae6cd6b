"""Prompt assembly: documented order, stable/dynamic split, manifest fingerprints."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from monoagent import hookimpl
from monoagent._kernel.errors import HookResultError
from monoagent._kernel.hookspecs import SECTIONS
from monoagent._kernel.model import MemoryHit, Message, Section, Surface
from monoagent._kernel.turn_request import TurnRequest
from monoagent._pipeline.assembly import BOUNDARY, AssemblyError, compile_prompt, current_user_message
from monoagent.testing import fresh_agent

PER_MESSAGE = {"runtime": {"session": {"mode": "per-message"}}}
"""History in the system prompt (continuous mode sends it as messages: tests/test_sessions.py)."""
DOCUMENTED = ["core_guardrails", "identity", "session", "conversation_history", "skill_index", "skill_instructions"]
OPTIONAL_IDS = {spec.id for spec in SECTIONS} - set(DOCUMENTED)


def base_sections(sections):
    """The sections of a manifest from core guardrails to the skill instructions, extra sections with
    them (the optional sections with a hook of their own are tested with their plugins)."""
    return [s for s in sections if s.id not in OPTIONAL_IDS]


def assemble(agent, text="hello", conversation="t", **fields):
    return asyncio.run(agent.assemble(TurnRequest(text, conversation_id=conversation, **fields)))


def run(agent, text="hello", conversation="t"):
    return asyncio.run(agent.respond(TurnRequest(text, conversation_id=conversation)))


@pytest.fixture
def skilled(tmp_path):
    for name in ("alpha", "beta"):
        skill = tmp_path / "skills" / name
        skill.mkdir(parents=True)
        (skill / "SKILL.md").write_text(f"---\ndescription: {name} skill\n---\nDo {name} things.\n", encoding="utf-8")
    return {"context": {"skillsRoot": str(tmp_path / "skills"), "selectedSkills": ["alpha", "beta"]}}


def test_sections_follow_the_documented_order_with_the_user_message_last(tmp_path, skilled):
    agent = fresh_agent(tmp_path, config={**skilled, **PER_MESSAGE})
    run(agent, "first")
    prompt = assemble(agent, "second")
    assert [s.id for s in base_sections(prompt.manifest.sections)] == DOCUMENTED
    text = prompt.system_text
    positions = [text.index(marker) for marker in ("# Core guardrails", "IDENTITY.md", "# Session", "# Conversation history", "alpha skill", "Do alpha things.")]
    assert positions == sorted(positions)
    assert prompt.messages[-1].role == "user" and prompt.messages[-1].content == "second"
    assert "second" not in prompt.system_text


def test_empty_optional_sections_are_skipped(tmp_path):
    prompt = assemble(fresh_agent(tmp_path))
    assert [s.id for s in base_sections(prompt.manifest.sections)] == ["core_guardrails", "identity", "session"]
    assert prompt.dynamic_text == "" and BOUNDARY not in prompt.system_text


def test_boundary_splits_at_the_first_dynamic_section(tmp_path, skilled):
    agent = fresh_agent(tmp_path, config={**skilled, **PER_MESSAGE})
    run(agent, "first")
    prompt = assemble(agent, "second")
    parts = {s.id: s.part for s in base_sections(prompt.manifest.sections)}
    assert parts == {
        "core_guardrails": "stable", "identity": "stable", "session": "stable",
        "conversation_history": "dynamic", "skill_index": "dynamic", "skill_instructions": "dynamic",
    }
    stable_ids = {s.id for s in prompt.manifest.sections if s.stability == "stable"}
    assert "skill_index" in stable_ids  # declared stable, placed after the boundary by the order
    assert prompt.system_text == f"{prompt.stable_text}\n{BOUNDARY}\n{prompt.dynamic_text}"
    assert BOUNDARY not in prompt.system_text_without_boundary


def test_fingerprints_are_sha256_of_the_parts(tmp_path):
    agent = fresh_agent(tmp_path, config=PER_MESSAGE)  # the dynamic sections stay in the system text
    run(agent)
    prompt = assemble(agent)
    fp = prompt.manifest.fingerprints
    assert fp.stable == hashlib.sha256(prompt.stable_text.encode()).hexdigest()
    assert fp.dynamic == hashlib.sha256(prompt.dynamic_text.encode()).hexdigest()
    assert fp.full == hashlib.sha256(prompt.system_text.encode()).hexdigest()
    for section, manifest in zip(prompt.sections, prompt.manifest.sections, strict=True):
        assert manifest.bytes == len(section.text.encode()) and manifest.sha256 == hashlib.sha256(section.text.encode()).hexdigest()


def test_identical_turns_have_identical_fingerprints(tmp_path):
    one = assemble(fresh_agent(tmp_path / "a"), conversation="same")
    two = assemble(fresh_agent(tmp_path / "b"), conversation="same")
    assert one.manifest.fingerprints == two.manifest.fingerprints
    assert one.system_text == two.system_text


def test_dynamic_only_changes_leave_the_stable_fingerprint_alone(tmp_path):
    agent = fresh_agent(tmp_path, config=PER_MESSAGE)
    before = assemble(agent)
    run(agent, "a turn that grows the history")
    after = assemble(agent)
    assert after.manifest.fingerprints.stable == before.manifest.fingerprints.stable
    assert after.manifest.fingerprints.dynamic != before.manifest.fingerprints.dynamic
    assert after.manifest.fingerprints.full != before.manifest.fingerprints.full


def test_recalled_memory_leaves_the_system_prompt_byte_identical(tmp_path):
    hits: list[MemoryHit] = []

    class Memory:
        @hookimpl
        def recall_memory(self, turn):
            return list(hits)

    agent = fresh_agent(tmp_path, plugins=[Memory()])
    run(agent, "setup")
    plain = assemble(agent, "what do I like?")
    hits.append(MemoryHit("notes", "The user likes tea.", score=0.9))
    recalled = assemble(agent, "what do I like?")
    assert recalled.system_text == plain.system_text
    assert recalled.manifest.fingerprints == plain.manifest.fingerprints
    delimiter = "[Recalled long-term memory — background context for this turn, not the user's words:]"
    assert current_user_message(recalled).content == f"what do I like?\n\n{delimiter}\n- The user likes tea."
    assert delimiter not in plain.messages[-1].content


def test_recall_is_not_persisted(tmp_path):
    class Memory:
        @hookimpl
        def recall_memory(self, turn):
            return [MemoryHit("notes", "SECRET-RECALL", score=1.0)]

    agent = fresh_agent(tmp_path, plugins=[Memory()])
    result = run(agent, "hi")
    assert "SECRET-RECALL" in result.text  # the echo saw it on the user message
    stored = asyncio.run(agent.history_store.load("t"))
    assert stored[0].content == "hi"


def test_a_changed_surface_changes_only_the_session_section(tmp_path):
    agent = fresh_agent(tmp_path)
    plain = assemble(agent, delivery="push", channel="slack")
    surfaced = assemble(agent, delivery="push", channel="slack", surface=Surface("channel", "C0A1B2C3D", "team-example", 3800))
    differing = [a.id for a, b in zip(plain.manifest.sections, surfaced.manifest.sections, strict=True) if a.sha256 != b.sha256]
    assert differing == ["session"]


def test_required_section_without_producer_is_a_clear_error(tmp_path):
    agent = fresh_agent(tmp_path, config={"plugins": {"block": ["identity"]}})
    with pytest.raises(AssemblyError, match=r"required section 'identity' .*section_identity"):
        assemble(agent)


def test_duplicate_extra_section_ids_name_both_sources(tmp_path):
    class One:
        @hookimpl
        def extra_sections(self, turn):
            return Section("facts", "a", order=650, source="one")

    class Two:
        @hookimpl
        def extra_sections(self, turn):
            return Section("facts", "b", order=660, source="two")

    with pytest.raises(AssemblyError, match=r"two sections have the id 'facts'.*'(one|two)'.*'(one|two)'"):
        assemble(fresh_agent(tmp_path, plugins=[One(), Two()]))


def test_an_extra_section_cannot_take_a_catalogued_id(tmp_path):
    class Impostor:
        @hookimpl
        def extra_sections(self, turn):
            return Section("agents_md", "x", order=655, source="impostor")

    with pytest.raises(AssemblyError, match=r"two sections have the id 'agents_md': from 'the catalogued section of section_agents_md' and from 'impostor'"):
        assemble(fresh_agent(tmp_path, plugins=[Impostor()]))


def test_the_catalogue_is_the_declarations_on_the_section_hooks_by_order():
    import inspect

    from monoagent._kernel import hookspecs
    from monoagent._kernel.sections import declared

    declared_hooks = [f for _, f in inspect.getmembers(hookspecs, inspect.isfunction) if declared(f) is not None]
    assert sorted(spec.name for spec in SECTIONS) == sorted(f.__name__ for f in declared_hooks)
    assert [spec.order for spec in SECTIONS] == sorted(spec.order for spec in SECTIONS)
    assert all(declared(spec.hook) is spec for spec in SECTIONS)
    assert [s.id for s in SECTIONS if s.required] == ["core_guardrails", "identity", "session"]
    assert [s.id for s in SECTIONS if "minimal" in s.profiles] == ["core_guardrails", "identity", "session"]
    assert ("conversation_history", ("turn", "messages")) in [(s.id, s.arguments) for s in SECTIONS]


def _spec(name="section_x", **declaration):
    from monoagent._kernel.sections import section

    def hook(turn):
        return None

    hook.__name__ = name
    return section(**{"id": name.removeprefix("section_"), "order": 650, "stability": "dynamic", **declaration})(hook)


@pytest.mark.parametrize(
    ("declaration", "refusal"),
    [
        ({"order": 700}, "order 700 is outside 1 to 699"),
        ({"order": 0}, "order 0 is outside"),
        ({"stability": "sometimes"}, "stability must be 'stable' or 'dynamic', not 'sometimes'"),
        ({"profiles": ("none",)}, "profiles must be some of"),
        ({"profiles": ()}, "profiles must be some of"),
        ({"stability": "stable", "per_round": True}, "produced every provider round, so it must be dynamic"),
        ({"profiles": ("full", "minimal"), "per_round": True}, "only the full profile"),
    ],
)
def test_a_bad_section_declaration_is_refused_naming_the_section(declaration, refusal):
    with pytest.raises(ValueError, match=f"^section 'x': .*{refusal}"):
        _spec(**declaration)


def test_the_catalogue_refuses_two_sections_with_one_id_or_order():
    from monoagent._kernel.sections import catalogue

    assert [s.id for s in catalogue([_spec("section_b", order=620), _spec("section_a", order=610), "not a hook"])] == ["a", "b"]
    with pytest.raises(ValueError, match="'section_a' and 'section_b' declare the same order 610"):
        catalogue([_spec("section_a", order=610), _spec("section_b", order=610)])
    with pytest.raises(ValueError, match="declare the same id 'a'"):
        catalogue([_spec("section_a", order=610), _spec("section_b", id="a", order=620)])
    alias = _spec("section_old", order=630)
    with pytest.raises(ValueError, match="hooks that produce more than one section: section_old"):
        catalogue([alias, _spec("section_new", order=640, aliases=(alias,))])


def test_extra_section_cannot_follow_the_user_message(tmp_path):
    class Late:
        @hookimpl
        def extra_sections(self, turn):
            return Section("late", "x", order=800)

    with pytest.raises(AssemblyError, match="always last"):
        assemble(fresh_agent(tmp_path, plugins=[Late()]))


def test_wrong_type_from_a_section_hook_is_named(tmp_path):
    class Wrong:
        @hookimpl
        def section_identity(self, turn):
            return "plain string"

    with pytest.raises(HookResultError, match=r"plugin 'Wrong' returned a value of type str from hook 'section_identity'") as info:
        assemble(fresh_agent(tmp_path, plugins=[Wrong()]))
    assert (info.value.plugin, info.value.hook, info.value.exit_code) == ("Wrong", "section_identity", 3)


def test_compile_prompt_manifest_counts():
    sections = [Section("a", "stable text", 100), Section("b", "dynamic text", 400, stability="dynamic")]
    prompt = compile_prompt(sections, [Message("user", "héllo")], history_messages=3)
    assert prompt.manifest.user_message_bytes == 6
    assert prompt.manifest.history_messages == 3 and prompt.manifest.message_count == 1
    assert prompt.stable_text == "stable text" and prompt.dynamic_text == "dynamic text"


def test_manifest_diagnostics_report_missing_and_truncated_files(tmp_path):
    agent = fresh_agent(tmp_path, config={
        "context": {"identityPath": str(tmp_path / "missing.md"), "bootstrapMaxChars": 100}
    })
    (tmp_path / "home" / "SOUL.md").write_text("x" * 300, encoding="utf-8")
    prompt = assemble(agent)
    codes = {d.code for d in prompt.manifest.diagnostics}
    assert {"bootstrap_missing", "bootstrap_truncated"} <= codes


# ---------------------------------------------------------------------------- prompt profiles


class Extra:
    @hookimpl
    def extra_sections(self, turn):
        return Section("facts", "Extra facts.", order=650, stability="dynamic", source="facts")


def test_the_minimal_profile_keeps_guardrails_identity_and_session_only(tmp_path, skilled):
    config = {**skilled, "context": {**skilled["context"], "profile": "minimal"}, "runtime": {"session": {"mode": "per-message"}}}
    agent = fresh_agent(tmp_path, config=config, plugins=[Extra()])
    run(agent, "earlier question")
    prompt = assemble(agent)
    assert prompt.manifest.section_ids == ("core_guardrails", "identity", "session")
    assert prompt.manifest.profile == "minimal"
    assert "earlier question" not in prompt.system_text and "Extra facts." not in prompt.system_text
    assert prompt.messages[-1].content == "hello"


def test_the_none_profile_sends_no_system_prompt_but_the_user_message(tmp_path):
    agent = fresh_agent(tmp_path, config={"context": {"profile": "none"}}, plugins=[Extra()])
    prompt = assemble(agent)
    assert (prompt.stable_text, prompt.dynamic_text, prompt.manifest.section_ids) == ("", "", ())
    assert prompt.manifest.profile == "none" and prompt.messages[-1].content == "hello"
    result = run(agent, "still answered")  # offline:echo answers a turn without a system prompt
    assert "still answered" in result.text


def test_a_request_profile_overrides_context_profile(tmp_path):
    agent = fresh_agent(tmp_path, config={"context": {"profile": "none"}}, plugins=[Extra()])
    full = assemble(agent, profile="full")
    assert full.manifest.profile == "full" and "facts" in full.manifest.section_ids
    assert assemble(agent, profile="minimal").manifest.section_ids == ("core_guardrails", "identity", "session")


def test_a_profile_that_does_not_exist_is_refused_naming_the_allowed_ones(tmp_path):
    with pytest.raises(ValueError, match=r"'tiny' is not a prompt profile; use one of full, minimal, none"):
        TurnRequest("hi", profile="tiny")  # type: ignore[arg-type]
    from monoagent._kernel.errors import ConfigError

    with pytest.raises(ConfigError, match=r"context\.profile") as caught:
        fresh_agent(tmp_path, config={"context": {"profile": "tiny"}})
    assert "minimal" in str(caught.value)


def test_the_request_estimate_counts_every_text_and_every_tool_call_once(tmp_path):
    """``request_tokens`` hands ``count_tokens`` one text: the system text, then each message's
    content followed by its tool calls (name and arguments as JSON), newline-joined; a history
    without tool calls is joined the quick way to the same text."""
    from types import SimpleNamespace

    from monoagent._kernel.model import ToolCall
    from monoagent._pipeline.compaction import request_tokens

    seen: list[str] = []

    class Counting:
        @hookimpl
        def count_tokens(self, text, model):
            seen.append(text)
            return len(text)

    agent = fresh_agent(tmp_path, plugins=[Counting()])
    turn = SimpleNamespace(agent=agent, model=agent.model)
    sections = [Section("identity", "You are Ada.", order=200), Section("clock", "now", order=700, stability="dynamic")]
    plain = [Message("user", "one"), Message("assistant", "two é"), Message("user", "three")]
    prompt = compile_prompt(sections, plain)
    assert request_tokens(turn, prompt) == len(seen[-1])
    assert seen[-1] == "\n".join([prompt.stable_text, prompt.dynamic_text, "one", "two é", "three"])

    called = [Message("user", "one"), Message("assistant", "", tool_calls=(ToolCall("c1", "search", {"q": "x"}),)),
              Message("tool", "found", tool_call_id="c1"), Message("user", "three")]
    prompt = compile_prompt(sections, called)
    request_tokens(turn, prompt)
    assert seen[-1] == "\n".join([prompt.stable_text, prompt.dynamic_text, "one", "", '[["search", {"q": "x"}]]', "found", "three"])
