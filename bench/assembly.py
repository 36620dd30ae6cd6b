"""Benchmark: assembling one turn's prompt with a 64-message history and 5 selected skills.

An Agent from ``monoagent.testing.fresh_agent`` (offline:echo, the ``files`` history store,
state in a temporary directory) gets 32 user/assistant pairs (~200 and ~800 characters)
committed through ``agent.history_store.commit`` and five skills (``SKILL.md`` with front
matter and a ~4 KB body) selected through ``context.skillsRoot`` / ``context.selectedSkills``.
Then ``await agent.assemble(TurnRequest(...))`` runs N times (2000; 200 with --quick) after a
warm-up, in one asyncio loop, each timed with time.perf_counter.

Target: median under 1 ms (1000 us) per assemble.

A one-off breakdown follows: the stages of ``Harness.prepare`` re-run one by one (session and
Turn, history load, tools, recall, compaction, user message, each section hook of the catalogue
for the turn's profile, compile_prompt, manifest unstructure). It mirrors the harness code at the time of writing; if that drifts, the
breakdown is skipped with a note and the headline figure is unaffected.

    .venv/bin/python bench/assembly.py [--quick] [--json] [-n N]
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _benchlib import emit_json, filesystem_of, machine, parser, scaled, state_dir, summary, verdict_line

from monoagent._kernel.model import Message
from monoagent._kernel.turn_request import TurnRequest
from monoagent.testing import fresh_agent

TARGET_US = 1000.0
CONVERSATION = "bench"
PAIRS = 32
SKILLS = 5
USER_CHARS = 200
ASSISTANT_CHARS = 800
SKILL_BODY_BYTES = 4096

WORDS = (
    "the agent reads a configuration file then loads plugins from entry points and local paths "
    "before each turn it assembles a prompt from guardrails identity session history skills and "
    "the current user message which is always last a history store keeps the newest messages "
    "per conversation with atomic replacement so readers never see a partial record tools run "
    "inside a loop capped by max turns and every event is emitted to observers in order"
).split()


def prose(rng: random.Random, chars: int) -> str:
    """Deterministic English-like text of about ``chars`` characters, in sentences."""
    out: list[str] = []
    size = 0
    sentence = 0
    while size < chars:
        word = rng.choice(WORDS)
        if sentence == 0:
            word = word.capitalize()
        sentence += 1
        if sentence > rng.randint(8, 16):
            word += "."
            sentence = 0
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars].rstrip() + "."


def write_skills(root: Path, rng: random.Random) -> list[str]:
    names = []
    for i in range(SKILLS):
        name = f"bench-skill-{i}"
        names.append(name)
        (root / name).mkdir(parents=True)
        front = f"---\nname: Bench skill {i}\ndescription: >\n  Benchmark skill number {i}, used to size the prompt\n  of the assembly benchmark.\n---\n"
        body = [f"# Bench skill {i}", ""]
        while sum(len(line) + 1 for line in body) < SKILL_BODY_BYTES:
            body.append(f"- {prose(rng, rng.randint(120, 300))}")
            body.append("")
        (root / name / "SKILL.md").write_text(front + "\n".join(body) + "\n", encoding="utf-8")
    return names


async def timed(n: int, fn: Callable[[], Awaitable[Any]]) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return samples


async def breakdown(agent: Any, request: TurnRequest, n: int) -> dict[str, Any]:
    """Median microseconds of each stage of Harness.prepare, re-run one by one on fresh turns."""
    from monoagent._kernel import hookspecs
    from monoagent._kernel.model import Message as Msg
    from monoagent._pipeline.assembly import PROFILE_SECTIONS, collect_sections, compile_prompt, produce_section
    from monoagent._pipeline.harness import new_run_id
    from monoagent._pipeline.tool_loop import held_back, offered_tools
    from monoagent._pipeline.turn_run import TurnRun

    hooks = agent.hooks
    harness = agent.harness
    store = agent.history_store
    stages: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        stages.setdefault(name, []).append(seconds)

    for _ in range(n):
        t = time.perf_counter
        t0 = t()
        session = harness._session(request, time.time())
        events: list[Any] = []
        turn = TurnRun(agent=agent, request=request, run_id=new_run_id(), model=request.model or agent.model,
                    session=session, emitter=lambda type, data: events.append((type, data)))  # noqa: B023  (called in this iteration)
        t1 = t()
        add("session + TurnRun", t1 - t0)
        turn.history = tuple(await store.load(turn.conversation_id))
        t2 = t()
        add("history load (store.load)", t2 - t1)
        turn.tools, turn.hidden_tools = held_back(turn, offered_tools(turn))
        turn.permissions = hooks.first(hookspecs.turn_permissions, turn=turn.view)
        t3 = t()
        add("offered tools (enabled=, filter_tools, hide_tools, turn_permissions)", t3 - t2)
        recalled: list[Any] = []
        for value in hooks.collect(hookspecs.recall_memory, turn=turn.view):
            recalled.extend((await value) if asyncio.iscoroutine(value) else (value or ()))
        turn.recalled = tuple(recalled)  # each recall_memory implementation bounds its own hits
        t4 = t()
        add("recall_memory", t4 - t3)
        parts: list[Any] = []
        for value in hooks.collect(hookspecs.augment_user_message, turn=turn.view, recalled=turn.recalled):
            parts.extend(value if isinstance(value, (list, tuple)) else [value])
        parts.sort(key=lambda p: p.order)
        user_message = hooks.first(hookspecs.render_user_message, turn=turn.view, parts=tuple(parts))
        assert isinstance(user_message, Msg)
        t5 = t()
        add("user message hooks", t5 - t4)
        compaction = await harness._compact(turn, turn.history, user_message)
        history = compaction.messages
        t6 = t()
        add("sections, assembly, compaction check (_compact)", t6 - t5)
        # each section hook on its own (on a throw-away turn sharing nothing with the real one)
        probe = TurnRun(agent=agent, request=request, run_id=turn.run_id, model=turn.model, session=session,
                     emitter=lambda type, data: None)
        probe.history = turn.history
        for spec in PROFILE_SECTIONS[probe.profile]:
            s0 = t()
            produce_section(hooks, spec, probe.view, history)
            add(f"  section {spec.id}", t() - s0)
        s0 = t()
        hooks.collect(hookspecs.extra_sections, turn=probe.view)
        add("  extra_sections", t() - s0)
        t7 = t()
        sections = collect_sections(hooks, turn, history)
        t8 = t()
        add("  collect_sections (all hooks)", t8 - t7)
        compile_prompt(sections, [user_message], turn.diagnostics, history_messages=len(history))
        t9 = t()
        add("  compile_prompt", t9 - t8)
        prompt = compaction.prompt
        turn.emit("prompt_manifest", manifest=agent.unstructure(prompt.manifest))
        t10 = t()
        add("manifest unstructure + emit", t10 - t9)
    total_keys = [k for k in stages if not k.startswith("  ")]
    medians = {k: summary(v)["median"] * 1e6 for k, v in stages.items()}
    return {"median_us": medians, "sum_of_stage_medians_us": sum(medians[k] for k in total_keys), "iterations": n}


async def run(tmp: Path, n: int, warmup: int) -> dict[str, Any]:
    rng = random.Random(20240601)
    skills_root = tmp / "skills"
    names = write_skills(skills_root, rng)
    agent = fresh_agent(tmp, config={"context": {"skillsRoot": str(skills_root), "selectedSkills": names}})
    store = agent.history_store
    for _ in range(PAIRS):
        user = Message("user", prose(rng, rng.randint(USER_CHARS - 40, USER_CHARS + 40)))
        answer = Message("assistant", prose(rng, rng.randint(ASSISTANT_CHARS - 150, ASSISTANT_CHARS + 150)))
        await store.commit(CONVERSATION, [user, answer])
    request = TurnRequest(prose(rng, USER_CHARS), conversation_id=CONVERSATION)

    prompt = await agent.assemble(request)
    manifest = prompt.manifest
    if manifest.history_messages != 2 * PAIRS:
        raise SystemExit(f"expected {2 * PAIRS} history messages in the prompt, got {manifest.history_messages}")
    if "skill_instructions" not in manifest.section_ids:
        raise SystemExit(f"the skills did not reach the prompt: sections {manifest.section_ids}, {manifest.diagnostics}")
    shape = {
        "history_messages": manifest.history_messages,
        "sections": list(manifest.section_ids),
        "system_bytes": len(prompt.system_text.encode()),
        "diagnostics": [d.code for d in manifest.diagnostics],
        "record_bytes": sum(p.stat().st_size for p in agent.config.history_dir.glob("*.json")),
    }

    await timed(warmup, lambda: agent.assemble(request))
    samples = await timed(n, lambda: agent.assemble(request))
    try:
        parts: dict[str, Any] | None = await breakdown(agent, request, min(n, 500))
    except Exception as exc:  # the harness changed shape; the headline figure stands
        parts = {"error": f"{type(exc).__name__}: {exc}"}
    await agent.aclose()
    return {"samples": samples, "shape": shape, "breakdown": parts}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("-n", "--repeat", type=int, default=None, help="assembles to time (default 2000, quick 200)")
    args = p.parse_args()
    n = args.repeat or (200 if args.quick else 2000)
    warmup = max(20, n // 10)
    with state_dir(args.tmp_root, args.keep) as tmp:
        fs = filesystem_of(tmp)
        out = asyncio.run(run(tmp, n, warmup))
    stats = scaled(summary(out["samples"]), 1e6)
    ok = stats["median"] < TARGET_US
    detail = f"median {stats['median']:.0f} us vs target < {TARGET_US:.0f} us ({stats['median'] / TARGET_US:.2f}x the target)"

    if args.json:
        emit_json(
            {
                "benchmark": "assembly",
                "quick": args.quick,
                "repeat": n,
                "warmup": warmup,
                "machine": machine(),
                "filesystem": fs,
                "shape": out["shape"],
                "assemble_us": stats,
                "target_us": TARGET_US,
                "ratio_to_target": stats["median"] / TARGET_US,
                "breakdown": out["breakdown"],
                "pass": ok,
                "verdict": verdict_line("assembly", ok, detail),
            }
        )
        return

    shape = out["shape"]
    print(f"assembly benchmark: {n} x agent.assemble() after {warmup} warm-up, one asyncio loop")
    print(f"state dir on {fs['device']} ({fs['fstype']}); history record {shape['record_bytes']} bytes, "
          f"{shape['history_messages']} messages; {SKILLS} skills; system prompt {shape['system_bytes']} bytes")
    print(f"sections: {', '.join(shape['sections'])}; diagnostics: {', '.join(shape['diagnostics']) or 'none'}")
    print()
    print(f"assemble: median {stats['median']:.1f} us   p90 {stats['p90']:.1f} us   min {stats['min']:.1f} us   "
          f"mean {stats['mean']:.1f} us")
    print(f"target:   median < {TARGET_US:.0f} us   ratio to target {stats['median'] / TARGET_US:.2f}")
    print()
    parts = out["breakdown"]
    if "error" in parts:
        print(f"breakdown unavailable ({parts['error']})")
    else:
        print(f"breakdown (one-off, median us over {parts['iterations']} re-runs of Harness.prepare's stages):")
        for name, us in parts["median_us"].items():
            print(f"  {name:<34} {us:9.1f}")
        print(f"  {'sum of stage medians':<34} {parts['sum_of_stage_medians_us']:9.1f}   (indented rows are inside collect_sections)")
    print()
    print(verdict_line("assembly", ok, detail))


if __name__ == "__main__":
    main()
