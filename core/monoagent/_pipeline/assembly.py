"""Prompt assembly: sections from hooks, in the catalogue's order, split around a cache boundary.

What assembly knows about each section comes from the section catalogue,
:data:`~monoagent._kernel.hookspecs.SECTIONS`, declared on the section hooks themselves
(:mod:`~monoagent._kernel.sections`): its id and order, which assembly gives the section whatever
its producer answers, and its stability, which assembly also enforces unless the declaration
leaves it to the producer (the sections from core guardrails to the skill instructions); whether
it is required (no answer is an :class:`AssemblyError` naming the hook); the prompt profiles that
produce it; and whether it is produced again between provider rounds. The catalogued order is
core guardrails (100), identity (200), session (300), tool recovery policy (360), conversation
history (400), skill index (500), selected skill instructions (600), then the dynamic sections
from 610 to 690; the current user message is always last, as the final provider message rather
than system text (:data:`~monoagent._kernel.sections.USER_MESSAGE_ORDER`). Extra sections from
:func:`~monoagent._kernel.hookspecs.extra_sections` are placed by their ``order``. A section hook
that answers None (or empty text) leaves its section out.

Between provider rounds of one turn, :func:`refresh_dynamic_sections` produces the per-round
sections (:data:`PER_ROUND_SECTIONS`) again for :attr:`~monoagent._kernel.turn.Turn.provider_round`
and recompiles around the same messages, every other section unchanged: the per-round sections
are dynamic, so the stable text and its fingerprint stay byte-identical from round to round.

The turn's prompt profile (:attr:`~monoagent._kernel.turn.Turn.profile`) chooses which sections
are produced at all: those whose catalogue entry lists it (``full``: every one, ``minimal``: core
guardrails, identity and the session block), extra sections under ``full`` only, and under
``none`` no system section; the manifest records it.

The system text is split in two around :data:`BOUNDARY`: the *stable* part is the longest run
of stable sections from the start, the *dynamic* part everything from the first dynamic section
on. Keeping the catalogue's order means a stable section that follows a dynamic one (the skill
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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from monoagent._kernel import hookspecs
from monoagent._kernel.errors import PluginError
from monoagent._kernel.hookspecs import SECTIONS
from monoagent._kernel.model import (
    AssembledPrompt,
    Diagnostic,
    Fingerprints,
    ManifestSection,
    Message,
    PromptManifest,
    Section,
)
from monoagent._kernel.sections import PROFILES, USER_MESSAGE_ORDER, SectionSpec

if TYPE_CHECKING:
    from monoagent._kernel.hooks import Hooks
    from monoagent._kernel.turn import Turn
    from monoagent._pipeline.turn_run import TurnRun

COMPILER_VERSION = "monoagent-assembly/1"
BOUNDARY = "<<MONOAGENT_PROMPT_CACHE_BOUNDARY>>"
SEPARATOR = "\n\n"
CONTINUOUS_LAYOUT = "continuous"

#: The catalogued sections each prompt profile produces, by order (``none``: no system section).
PROFILE_SECTIONS: dict[str, tuple[SectionSpec, ...]] = {
    **{profile: tuple(spec for spec in SECTIONS if profile in spec.profiles) for profile in PROFILES},
    "none": (),
}
#: The sections produced again before every provider round after a run's first.
PER_ROUND_SECTIONS = tuple(spec for spec in SECTIONS if spec.per_round)
_PER_ROUND_IDS = frozenset(spec.id for spec in PER_ROUND_SECTIONS)
_CATALOGUED = {spec.id: spec for spec in SECTIONS}


class AssemblyError(PluginError):
    """A required section has no producer, or the plugins' sections conflict (exit 3).

    A section hook that answers with something other than a Section is refused by the hook
    facade already (:class:`~monoagent._kernel.errors.HookResultError`, naming the plugin).
    """


def produce_section(hooks: Hooks, spec: SectionSpec, turn: Turn, history: Sequence[Message] = ()) -> Section | None:
    """The answer of the hook that produces ``spec``'s section, as its plugin gave it (None: no answer).

    The hook gets the arguments its spec names (``turn``; ``render_history`` also ``messages``,
    ``history``). While a plugin implements a deprecated alias of the hook (a wrapper counts),
    the alias is asked too: after the hook when a plugin overrides the hook (a plain
    implementation without ``trylast``), else before it, so an implementation written before the rename keeps its place ahead of the
    bundled default. The first answer that is not None wins.
    """
    arguments: dict[str, Any] = {"turn": turn, "messages": tuple(history)} if "messages" in spec.arguments else {"turn": turn}
    aliases = [alias for alias in spec.aliases if hooks.implemented(alias)] if spec.aliases else ()
    if not aliases:
        return hooks.first(spec.hook, **arguments)
    overridden = hooks.implemented(spec.hook, defaults=False)
    for hook in (spec.hook, *aliases) if overridden else (*aliases, spec.hook):
        answer = hooks.first(hook, **arguments)
        if answer is not None:
            return answer
    return None


def _produce(hooks: Hooks, turn: TurnRun, specs: Sequence[SectionSpec], history: Sequence[Message]) -> list[Section]:
    """The non-empty sections the hooks of ``specs`` produce, each with its catalogued id, order and stability."""
    sections = []
    view = turn.view
    for spec in specs:
        section = produce_section(hooks, spec, view, history)
        if section is None:
            if spec.required:
                raise AssemblyError(
                    f"no active plugin produced the required section {spec.id!r} (hook {spec.name!r}); "
                    f"if its bundled plugin is blocked, a replacement must implement {spec.name}"
                )
            continue
        stability = spec.stability if spec.fixed_stability else section.stability
        if (section.id, section.order, section.stability) != (spec.id, spec.order, stability):
            section = attrs.evolve(section, id=spec.id, order=spec.order, stability=stability)
        if section.text:
            sections.append(section)
    return sections


def collect_sections(hooks: Hooks, turn: TurnRun, history: Sequence[Message]) -> list[Section]:
    """Call the section producers the turn's profile selects and return the non-empty sections in order."""
    profile = turn.profile
    sections = _produce(hooks, turn, PROFILE_SECTIONS.get(profile, ()), history)
    if profile != "full":
        return sections
    seen = {s.id: s.source or "a catalogued section" for s in sections}
    for result in hooks.collect(hookspecs.extra_sections, turn=turn.view):
        for extra in (result,) if isinstance(result, Section) else result or ():
            if extra.id in seen or extra.id in _CATALOGUED:
                first = seen[extra.id] if extra.id in seen else f"the catalogued section of {_CATALOGUED[extra.id].name}"
                raise AssemblyError(
                    f"two sections have the id {extra.id!r}: from {first!r} "
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


def refresh_dynamic_sections(hooks: Hooks, turn: TurnRun, prompt: AssembledPrompt) -> AssembledPrompt:
    """``prompt`` for the next provider round of the same turn: the round-boundary re-render.

    Produces the per-round sections (:data:`PER_ROUND_SECTIONS`) again for the turn as it now
    stands (:attr:`~monoagent._kernel.turn.Turn.provider_round`: a tool failure to retry, the
    final round, a continuation) and recompiles around the same messages. Every other section is
    kept as it was, so the stable text and its fingerprint stay byte-identical and the provider's
    prompt cache keeps hitting. Returns ``prompt`` itself when the per-round sections did not
    change, and when there is nowhere to put them: a ``minimal`` or ``none`` profile, and a
    stateless retry of a ``continuous`` turn, whose user message already carries the block the
    run started with.
    """
    manifest = prompt.manifest
    if manifest.profile != "full" or (
        manifest.layout == "stateless" and not any(s.stability == "dynamic" for s in prompt.sections)
    ):
        return prompt
    fresh = _produce(hooks, turn, PER_ROUND_SECTIONS, ())
    old = [s for s in prompt.sections if s.id in _PER_ROUND_IDS]
    if [(s.id, s.text) for s in old] == [(s.id, s.text) for s in fresh]:
        return prompt
    sections = sorted([*(s for s in prompt.sections if s.id not in _PER_ROUND_IDS), *fresh], key=lambda s: s.order)
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
    diagnostics: Sequence[Diagnostic] = (),
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
