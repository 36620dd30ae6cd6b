"""The section catalogue: what the kernel knows about each section of the system prompt, declared on its hook.

Every section hook in :mod:`~monoagent._kernel.hookspecs` carries one :func:`section` declaration,
which records a frozen :class:`SectionSpec` on the spec function: the section's id, its order, its
stability, whether a turn needs it, the prompt profiles that produce it and whether it is produced
again between the provider rounds of a turn. :data:`monoagent._kernel.hookspecs.SECTIONS`, the
catalogue, is every declaration in order; prompt assembly, the hook facade's answer checks, the
hook reference and the assembly benchmark read it. Adding a section is one decorated spec.

The catalogue covers the sections with a hook of their own. Sections from ``extra_sections`` are
placed by the ``order`` they carry, below :data:`USER_MESSAGE_ORDER`, with an id no catalogued
section has.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import attrs

if TYPE_CHECKING:
    from monoagent._kernel.model import Section, Stability

F = TypeVar("F", bound=Callable[..., Any])
SectionHook = Callable[..., "Section | None"]

#: The prompt profiles that produce sections (``none`` sends no system prompt at all).
SectionProfile = Literal["full", "minimal"]
PROFILES: tuple[SectionProfile, ...] = ("full", "minimal")
#: Where the current user message sits: every system section orders below it.
USER_MESSAGE_ORDER = 700
#: The attribute of a spec function that holds its :class:`SectionSpec`.
ATTRIBUTE = "monoagent_section"


def _check_profiles(instance: SectionSpec, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    if not value or any(profile not in PROFILES for profile in value):
        raise ValueError(f"section {instance.id!r}: profiles must be some of {PROFILES}, not {value!r}")


def _check_stability(instance: SectionSpec, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in ("stable", "dynamic"):
        raise ValueError(f"section {instance.id!r}: stability must be 'stable' or 'dynamic', not {value!r}")


def _check_order(instance: SectionSpec, attribute: attrs.Attribute[Any], value: int) -> None:
    if not 0 < value < USER_MESSAGE_ORDER:
        raise ValueError(f"section {instance.id!r}: order {value} is outside 1 to {USER_MESSAGE_ORDER - 1} "
                         f"(the current user message, {USER_MESSAGE_ORDER}, is always last)")


@attrs.frozen
class SectionSpec:
    """One section of the system prompt as the kernel knows it: the facts assembly enforces.

    ``id`` and ``order`` are what assembly gives the section whatever its producer answers, and
    so is ``stability`` unless ``fixed_stability`` is false (the six sections from core
    guardrails to the skill instructions keep the stability their producer gives; the declared
    one is what the bundled default gives). A ``required`` section must be produced: assembly
    fails, naming ``hook``, when no plugin answers. ``profiles`` are the prompt profiles that
    produce it (``full``, ``minimal``; ``none`` produces no section). A ``per_round`` section is
    produced again before every provider round after a turn's first, so it must be dynamic: the
    stable text stays byte-identical from round to round.

    ``hook`` is the spec function that produces it; ``aliases`` are deprecated spec functions
    whose implementations still produce it: while a plugin implements one, assembly asks it
    after ``hook`` when a plugin overrides ``hook``, else before (so an implementation written
    before a rename keeps its place ahead of the bundled default; see
    :func:`~monoagent._pipeline.assembly.produce_section`).
    ``arguments`` are the hook's parameter names (``render_history`` also gets ``messages``).
    """

    id: str
    order: int = attrs.field(validator=_check_order)
    stability: Stability = attrs.field(validator=_check_stability)
    hook: SectionHook = attrs.field(repr=lambda hook: hook.__name__)
    required: bool = False
    profiles: tuple[SectionProfile, ...] = attrs.field(default=("full",), validator=_check_profiles)
    per_round: bool = False
    fixed_stability: bool = True
    aliases: tuple[SectionHook, ...] = attrs.field(default=(), repr=lambda hooks: repr(tuple(h.__name__ for h in hooks)))
    arguments: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        if self.per_round and self.stability != "dynamic":
            raise ValueError(f"section {self.id!r}: produced every provider round, so it must be dynamic")
        if self.per_round and "minimal" in self.profiles:
            raise ValueError(f"section {self.id!r}: only the full profile re-renders sections between provider rounds")

    @property
    def name(self) -> str:
        """The name of the hook that produces the section (``section_identity``)."""
        return self.hook.__name__

    @property
    def hooks(self) -> tuple[SectionHook, ...]:
        """Every spec whose implementations produce the section: ``hook``, then its deprecated aliases."""
        return (self.hook, *self.aliases)


def section(
    id: str,
    *,
    order: int,
    stability: Stability,
    required: bool = False,
    profiles: tuple[SectionProfile, ...] = ("full",),
    per_round: bool = False,
    fixed_stability: bool = True,
    aliases: tuple[SectionHook, ...] = (),
) -> Callable[[F], F]:
    """Declare the section a hook spec produces (see :class:`SectionSpec`); returns the spec unchanged.

    Example (in :mod:`~monoagent._kernel.hookspecs`)::

        @hookspec(firstresult=True)
        @section("identity", order=200, stability="stable", required=True, profiles=("full", "minimal"))
        def section_identity(turn: Turn) -> Section | None: ...
    """

    def declare(function: F) -> F:
        spec = SectionSpec(
            id, order, stability, function, required=required, profiles=tuple(profiles), per_round=per_round,
            fixed_stability=fixed_stability, aliases=tuple(aliases),
            arguments=tuple(inspect.signature(function).parameters),
        )
        setattr(function, ATTRIBUTE, spec)
        return function

    return declare


def declared(function: object) -> SectionSpec | None:
    """The :class:`SectionSpec` declared on ``function``, or None for a hook that produces no catalogued section."""
    spec = getattr(function, ATTRIBUTE, None)
    return spec if isinstance(spec, SectionSpec) else None


def catalogue(namespace: Iterable[object]) -> tuple[SectionSpec, ...]:
    """The sections declared on the functions of ``namespace``, by order.

    Raises:
        ValueError: two sections share an id or an order, or one hook produces two sections.
    """
    specs = sorted((spec for value in namespace if (spec := declared(value)) is not None), key=lambda s: s.order)
    for kind, key in (("id", lambda s: s.id), ("order", lambda s: s.order)):
        seen: dict[object, str] = {}
        for spec in specs:
            if key(spec) in seen:
                raise ValueError(f"sections {seen[key(spec)]!r} and {spec.name!r} declare the same {kind} {key(spec)!r}")
            seen[key(spec)] = spec.name
    hooks = [hook.__name__ for spec in specs for hook in spec.hooks]
    twice = sorted({name for name in hooks if hooks.count(name) > 1})
    if twice:
        raise ValueError(f"hooks that produce more than one section: {', '.join(twice)}")
    return tuple(specs)
