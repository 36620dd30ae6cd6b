"""context.skillsMode = "on_demand": a compact skill list in the prompt and the read_skill tool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from monoagent._kernel.errors import ConfigError
from monoagent.testing import fresh_agent, scripted_agent
from monoagent_plugins.prompt.skills import ON_DEMAND_NOTE


@pytest.fixture
def skills(tmp_path: Path) -> dict[str, Any]:
    root = tmp_path / "skills"
    for slug, front in (("alpha", "description: Alpha work\nname: Alpha Guide"), ("beta", "description: Beta work")):
        (root / slug).mkdir(parents=True)
        (root / slug / "SKILL.md").write_text(f"---\n{front}\n---\nDo {slug} things.\n", encoding="utf-8")
    (root / "big").mkdir()
    (root / "big" / "SKILL.md").write_text("é" * 400, encoding="utf-8")  # 800 bytes
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "SKILL.md").write_text("stolen instructions", encoding="utf-8")
    (root / "escape").symlink_to(outside, target_is_directory=True)
    return {"skillsRoot": str(root), "selectedSkills": ["alpha", "beta", "big", "escape"], "skillMaxBytes": 256}


def _on_demand(skills: dict[str, Any]) -> dict[str, Any]:
    return {"context": {**skills, "skillsMode": "on_demand"}}


def test_inline_mode_keeps_bodies_in_the_prompt_and_offers_no_read_skill(tmp_path: Path, skills: dict[str, Any]) -> None:
    result = fresh_agent(tmp_path, config={"context": skills}).run_sync("hi", conversation_id="t")
    assert {"skill_index", "skill_instructions"} <= set(result.manifest.section_ids)
    steps = [{"text": "", "tool_calls": [{"name": "read_skill", "arguments": {"slug": "alpha"}}]}, {"text": "ok"}]
    (tmp_path / "s").mkdir()
    inline = scripted_agent(tmp_path / "s", steps, config={"context": skills})
    assert inline.run_sync("hi", conversation_id="t").tool_activity[0].result.status.value == "rejected"


def test_on_demand_lists_slugs_and_descriptions_and_drops_the_bodies(tmp_path: Path, skills: dict[str, Any]) -> None:
    agent = fresh_agent(tmp_path, config={**_on_demand(skills), "runtime": {"session": {"mode": "per-message"}}})
    import asyncio

    from monoagent._kernel.turn_request import TurnRequest

    prompt = asyncio.run(agent.assemble(TurnRequest("hi", conversation_id="t")))
    assert "skill_instructions" not in prompt.manifest.section_ids
    index = {s.id: s.text for s in prompt.sections}["skill_index"]
    assert index == (
        "# Skills\n\n" + ON_DEMAND_NOTE + "\n\n- alpha (Alpha Guide): Alpha work\n- beta: Beta work\n- big"
    )
    assert "Do alpha things." not in prompt.system_text and "stolen" not in prompt.system_text
    assert any(d.code == "skill_outside_root" for d in prompt.manifest.diagnostics)


def test_the_model_reads_a_skill_on_demand_end_to_end(tmp_path: Path, skills: dict[str, Any]) -> None:
    steps = [
        {"text": "", "tool_calls": [{"name": "read_skill", "arguments": {"slug": "alpha"}}]},
        {"text": "", "tool_calls": [{"name": "read_skill", "arguments": {"slug": "big"}}]},
        {"text": "", "tool_calls": [{"name": "read_skill", "arguments": {"slug": "escape"}}]},
        {"text": "", "tool_calls": [{"name": "read_skill", "arguments": {"slug": 7}}]},
        {"text": "Done."},
    ]
    agent = scripted_agent(tmp_path, steps, config=_on_demand(skills))
    requests: list[Any] = []
    from monoagent import hookimpl

    class Spy:
        @hookimpl
        def prepare_provider_request(self, turn: Any, request: Any) -> None:
            requests.append(request)

    agent.register(Spy())
    result = agent.run_sync("Use alpha.", conversation_id="t")
    spec = {s.name: s for s in requests[0].tools}["read_skill"]
    assert (spec.categories, spec.domain) == (("read",), None)
    alpha, big, escape, wrong = (a.result for a in result.tool_activity)
    assert (alpha.status.value, alpha.content) == ("success", "## Skill: Alpha Guide\n\nDo alpha things.")
    assert big.status.value == "success" and big.content.endswith("[skill truncated: kept 256 of 800 bytes]")
    assert escape.status.value == "error" and "stolen" not in escape.content
    assert escape.content == "No skill has the slug 'escape'. Valid slugs: alpha, beta, big."
    assert wrong.status.value == "error" and wrong.content.startswith("No skill has no slug (a string). Valid slugs:")
    assert result.text.endswith("Done.")


def test_the_unknown_slug_list_is_bounded(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    names = [f"s{n:03d}" for n in range(60)]
    for name in names:
        (root / name).mkdir(parents=True)
        (root / name / "SKILL.md").write_text("body", encoding="utf-8")
    steps = [{"text": "", "tool_calls": [{"name": "read_skill", "arguments": {"slug": "x" * 1000}}]}, {"text": "ok"}]
    config = {"context": {"skillsRoot": str(root), "selectedSkills": names, "skillsMode": "on_demand"}}
    result = scripted_agent(tmp_path, steps, config=config).run_sync("go", conversation_id="t")
    content = result.tool_activity[0].result.content
    assert content.endswith("s049 and 10 more.") and "s050" not in content and len(content) < 700


def test_skills_mode_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"context.skillsMode = \"lazy\".*allowed: one of 'inline', 'on_demand'"):
        fresh_agent(tmp_path, config={"context": {"skillsMode": "lazy"}})
