"""Prompt assembly: sections from hooks, in the documented order, split around a cache boundary.

The documented order is fixed: core guardrails (100), identity (200), session (300),
conversation history (400), skill index (500), selected skill instructions (600), and the
current user message always last, as the final provider message rather than system text.
Extra sections from :func:`~monoagent.kernel.hookspecs.extra_sections` are placed by their ``order``.

Ten optional sections (:data:`SEED_003_SECTIONS`) each have a hook of their own and a
documented stability that assembly enforces: ``tool_recovery_policy`` (360) is stable and sits
with the stable sections before the conversation history; the dynamic ones follow the skill
instructions in this order: ``current_permissions`` (610), ``task_orchestration``
(620), ``artifact_references`` (630), ``hidden_tool_domains`` (640), ``agents_md`` (650),
``recovery_continuation`` (660), ``retry_instruction`` (670), ``dynamic_context`` (680) and
``extra_system`` (690). Each is optional: a hook that answers None (or empty text) leaves it out.

Between provider rounds of one turn, :func:`refresh_dynamic_sections` produces the dynamic ones of
these sections (:data:`ROUND_SECTIONS`, 610 to 690) again for :attr:`~monoagent.kernel.turn.Turn.provider_round` and
recompiles around the same messages, every other section unchanged: the stable text and its
fingerprint stay byte-identical from round to round.

The turn's prompt profile (:attr:`~monoagent.kernel.turn.Turn.profile`) chooses which sections
are produced at all: ``full`` every one, ``minimal`` only core guardrails, identity and the
session block (no extra sections either), ``none`` no system section; the manifest records it.

The system text is split in two around :data:`BOUNDARY`: the *stable* part is the longest run
of stable sections from the start, the *dynamic* part everything from the first dynamic section
on. Keeping the documented order means a stable section that follows a dynamic one (the skill
sections after the conversation history) is rendered in the dynamic part; the manifest records
each section's declared stability and the part it landed in. Providers that support prompt
caching mark only the stable part for caching and never send the boundary as text.

A turn of ``runtime.session.mode = "continuous"`` is compiled with the ``continuous`` layout:
the system text is every stable section, in order, and nothing else; the dynamic sections travel
as a leading block of the current user message, so that nothing that changes per turn comes
before the conversation's transcript (or its canonical history, sent as leading messages).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import attrs

from monoagent.kernel import hookspecs
from monoagent.kernel.errors import PluginError
from monoagent.kernel.model import (
    AssembledPrompt,
    Fingerprints,
    ManifestSection,
    Message,
    PromptManifest,
    Section,
    Stability,
)

if TYPE_CHECKING:
    from monoagent.kernel.hooks import Hooks
    from monoagent.pipeline.turn_run import TurnRun

COMPILER_VERSION = "monoagent-assembly/1"
BOUNDARY = "<<MONOAGENT_PROMPT_CACHE_BOUNDARY>>"
SEPARATOR = "\n\n"

#: The documented sections: (id, hook, order, required); ``render_history`` also gets the messages.
DOCUMENTED_SECTIONS: tuple[tuple[str, str, int, bool], ...] = (
    ("core_guardrails", "section_core_guardrails", 100, True),
    ("identity", "section_identity", 200, True),
    ("session", "section_session", 300, True),
    ("conversation_history", "render_history", 400, False),
    ("skill_index", "section_skill_index", 500, False),
    ("skill_instructions", "section_skill_instructions", 600, False),
)
#: The optional sections with a hook of their own: (id, hook, order, stability); assembly enforces each one's.
SEED_003_SECTIONS: tuple[tuple[str, str, int, Stability], ...] = (
    ("tool_recovery_policy", "section_tool_recovery_policy", 360, "stable"),
    ("current_permissions", "section_current_permissions", 610, "dynamic"),
    ("task_orchestration", "section_task_orchestration", 620, "dynamic"),
    ("artifact_references", "section_artifact_references", 630, "dynamic"),
    ("hidden_tool_domains", "section_hidden_tool_domains", 640, "dynamic"),
    ("agents_md", "section_agents_md", 650, "dynamic"),
    ("recovery_continuation", "section_recovery_continuation", 660, "dynamic"),
    ("retry_instruction", "section_retry_instruction", 670, "dynamic"),
    ("dynamic_context", "section_dynamic_context", 680, "dynamic"),
    ("extra_system", "section_extra_system", 690, "dynamic"),
)
#: The sections produced again before every provider round after a run's first (the dynamic ones above).
ROUND_SECTIONS = tuple(entry for entry in SEED_003_SECTIONS if entry[3] == "dynamic")
ROUND_SECTION_IDS = frozenset(entry[0] for entry in ROUND_SECTIONS)
SECTION_ORDER = {sid: order for sid, _, order, _ in DOCUMENTED_SECTIONS} | {
    sid: order for sid, _, order, _ in SEED_003_SECTIONS
}
#: The sections the ``minimal`` profile keeps.
MINIMAL_SECTIONS = frozenset({"core_guardrails", "identity", "session"})
USER_MESSAGE_ORDER = 700
CONTINUOUS_LAYOUT = "continuous"


class AssemblyError(PluginError):
    """A required section has no producer, or the plugins' sections conflict (exit 3).

    A section hook that answers with something other than a Section is refused by the hook
    facade already (:class:`~monoagent.kernel.errors.HookResultError`, naming the plugin).
    """


def _produce(hooks: Hooks, hook: str, turn: TurnRun, history: Sequence[Message]) -> Section | None:
    if hook == "render_history":
        return hooks.first(hookspecs.render_history, turn=turn.view, messages=tuple(history))
    producer: Callable[..., Section | None] = getattr(hookspecs, hook)  # a section hook: one ``turn`` argument
    return hooks.first(producer, turn=turn.view)


def collect_sections(hooks: Hooks, turn: TurnRun, history: Sequence[Message]) -> list[Section]:
    """Call the section producers the turn's profile selects and return the non-empty sections in order."""
    profile = turn.profile
    if profile == "none":
        return []
    sections: list[Section] = []
    for sid, hook, order, required in DOCUMENTED_SECTIONS:
        if profile == "minimal" and sid not in MINIMAL_SECTIONS:
            continue
        section = _produce(hooks, hook, turn, history)
        if section is None:
            if required:
                raise AssemblyError(
                    f"no active plugin produced the required section {sid!r} (hook {hook!r}); "
                    f"if its bundled plugin is blocked, a replacement must implement {hook}"
                )
            continue
        if section.id != sid or section.order != order:
            section = attrs.evolve(section, id=sid, order=order)
        if section.text:
            sections.append(section)
    if profile == "minimal":
        return sections
    sections.extend(_seed_003_sections(hooks, turn, SEED_003_SECTIONS))
    seen = {s.id: s.source or "documented section" for s in sections}
    for result in hooks.collect(hookspecs.extra_sections, turn=turn.view):
        for extra in (result,) if isinstance(result, Section) else result or ():
            if extra.id in seen or extra.id in SECTION_ORDER:
                raise AssemblyError(
                    f"two sections have the id {extra.id!r}: from {seen.get(extra.id, 'a documented section')!r} "
                    f"and from {extra.source or 'an extra_sections hook'!r}"
                )
            if extra.order >= USER_MESSAGE_ORDER:
                raise AssemblyError(
                    f"section {extra.id!r} has order {extra.order}; system sections must order below "
                    f"{USER_MESSAGE_ORDER} (the current user message is always last)"
                )
            seen[extra.id] = extra.source
            if extra.text:
                sections.append(extra)
    sections.sort(key=lambda s: s.order)
    return sections


def _seed_003_sections(
    hooks: Hooks, turn: TurnRun, entries: Sequence[tuple[str, str, int, Stability]]
) -> list[Section]:
    """The non-empty sections the hooks of ``entries`` produce, with their documented id, order and stability."""
    sections = []
    for sid, hook, order, stability in entries:
        section = _produce(hooks, hook, turn, ())
        if section is None:
            continue
        if (section.id, section.order, section.stability) != (sid, order, stability):
            section = attrs.evolve(section, id=sid, order=order, stability=stability)
        if section.text:
            sections.append(section)
    return sections


def refresh_dynamic_sections(hooks: Hooks, turn: TurnRun, prompt: AssembledPrompt) -> AssembledPrompt:
    """``prompt`` for the next provider round of the same turn: the round-boundary re-render.

    Produces the per-round sections (:data:`ROUND_SECTIONS`, 610 to 690) again for the turn as it
    now stands (:attr:`~monoagent.kernel.turn.Turn.provider_round`: a tool failure to retry, the
    final round, a continuation) and recompiles around the same messages. Every other section is
    kept as it was, so the stable text and its fingerprint stay byte-identical and the provider's
    prompt cache keeps hitting. Returns ``prompt`` itself when the dynamic sections did not
    change, and when there is nowhere to put them: a ``minimal`` or ``none`` profile, and a
    stateless retry of a ``continuous`` turn, whose user message already carries the block the
    run started with.
    """
    manifest = prompt.manifest
    if manifest.profile != "full" or (
        manifest.layout == "stateless" and not any(s.stability == "dynamic" for s in prompt.sections)
    ):
        return prompt
    fresh = _seed_003_sections(hooks, turn, ROUND_SECTIONS)
    old = [s for s in prompt.sections if s.id in ROUND_SECTION_IDS]
    if [(s.id, s.text) for s in old] == [(s.id, s.text) for s in fresh]:
        return prompt
    sections = sorted([*(s for s in prompt.sections if s.id not in ROUND_SECTION_IDS), *fresh], key=lambda s: s.order)
    messages = [*prompt.messages[:-1], current_user_message(prompt)]
    return compile_prompt(
        sections, messages, manifest.diagnostics, profile=manifest.profile, layout=manifest.layout,
        history_messages=manifest.history_messages, leading=prompt.leading,
    )


def changed_sections(before: AssembledPrompt, after: AssembledPrompt) -> list[str]:
    """The ids of the sections that appeared, disappeared or changed bytes from ``before`` to ``after``."""
    old = {s.id: s.sha256 for s in before.manifest.sections}
    new = {s.id: s.sha256 for s in after.manifest.sections}
    return sorted(sid for sid in old.keys() | new.keys() if old.get(sid) != new.get(sid))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def compile_prompt(
    sections: Sequence[Section],
    messages: Sequence[Message],
    diagnostics: Sequence = (),
    *,
    profile: str = "full",
    layout: str = "split",
    history_messages: int = 0,
    leading: int = 0,
) -> AssembledPrompt:
    """Join ``sections`` into stable and dynamic text and build the manifest.

    ``messages`` are the provider-facing messages; the last one is the current user message, and
    ``leading`` of them precede it. With ``layout="continuous"`` the dynamic text is put in front
    of the current user message (see the module docstring) and the prompt's ``dynamic_text`` is
    empty. ``profile`` is recorded in the manifest (the sections were already chosen by it).
    """
    stable: list[str] = []
    dynamic: list[str] = []
    manifest_sections: list[ManifestSection] = []
    in_dynamic = False
    by_stability = layout == CONTINUOUS_LAYOUT
    for section in sections:
        in_dynamic = section.stability == "dynamic" if by_stability else in_dynamic or section.stability == "dynamic"
        data = section.text.encode("utf-8", "surrogatepass")
        (dynamic if in_dynamic else stable).append(section.text)
        manifest_sections.append(
            ManifestSection(
                id=section.id,
                order=section.order,
                stability=section.stability,
                part="dynamic" if in_dynamic else "stable",
                source=section.source,
                bytes=len(data),
                sha256=_sha(data),
            )
        )
    stable_text = SEPARATOR.join(stable)
    dynamic_text = SEPARATOR.join(dynamic)
    dynamic_bytes = dynamic_text.encode("utf-8", "surrogatepass")
    full = hashlib.sha256(stable_text.encode("utf-8", "surrogatepass"))
    stable_fingerprint = full.hexdigest()
    if dynamic_text:
        full.update(f"\n{BOUNDARY}\n".encode())
        full.update(dynamic_bytes)
    user = messages[-1] if messages else Message("user", "")
    if by_stability and dynamic_text and messages:
        user = attrs.evolve(user, content=f"{dynamic_text}{SEPARATOR}{user.content}")
        messages = [*messages[:-1], user]
        dynamic_text = ""
    manifest = PromptManifest(
        compiler_version=COMPILER_VERSION,
        profile=profile,
        sections=tuple(manifest_sections),
        fingerprints=Fingerprints(stable_fingerprint, _sha(dynamic_bytes), full.hexdigest()),
        diagnostics=tuple(diagnostics),
        user_message_bytes=len(user.content.encode("utf-8", "surrogatepass")),
        message_count=len(messages),
        history_messages=history_messages,
        layout=layout,
    )
    return AssembledPrompt(stable_text, dynamic_text, BOUNDARY, tuple(messages), tuple(sections), manifest, leading)


def current_user_message(prompt: AssembledPrompt) -> Message:
    """The current user message of ``prompt`` as rendered, without the dynamic sections that the
    ``continuous`` profile put in front of it: what to compile a rebuilt request around."""
    user = prompt.messages[-1] if prompt.messages else Message("user", "")
    if prompt.manifest.layout != CONTINUOUS_LAYOUT:
        return user
    block = SEPARATOR.join(s.text for s in prompt.sections if s.stability == "dynamic")
    if block and user.content.startswith(block + SEPARATOR):
        return attrs.evolve(user, content=user.content[len(block) + len(SEPARATOR) :])
    return user
