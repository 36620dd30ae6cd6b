"""Sections 5 and 6: the Skill Index and the Selected Skill Instructions.

A skill is ``<skillsRoot>/<name>/SKILL.md`` for each name in ``context.selectedSkills``, in
that order; there is no auto-selection. The file may open with YAML front matter (``---`` lines
around a mapping) giving a ``description`` and optionally a display ``name``. The index lists
one line per skill; the instructions carry each body, front matter removed, capped at
``context.skillMaxBytes`` UTF-8 bytes without splitting a character.

Problems are diagnostics, never failures: a missing or unreadable SKILL.md, one whose resolved
path leaves the skills root (a symlink out of it), malformed front matter, a truncated body.
A skill that could not be read is left out of both sections. Each skill is loaded once per
turn (both sections share the result) and file reads are cached by path, mtime and size.

A SKILL.md is read only when it is a regular file of at most ``context.skillMaxBytes`` + 64 KiB
(the body's budget plus room for front matter); a FIFO, a device or a larger file is left out
with a ``skill_unreadable`` diagnostic before a byte is read. Front matter nested more than
:data:`~monoagent._boundary.documents.MAX_NESTING` levels deep is reported as invalid and ignored (it is
measured on YAML's event stream, before anything recursive builds it).

``context.skillsMode`` chooses how the bodies reach the model. ``inline`` (the default) renders
both sections as above. ``on_demand`` renders
the index as a compact list of each skill's exact slug (its directory name) and description, says
that the skills are loaded on demand, and leaves the instructions section out; the ``read_skill``
tool (category ``read``, no domain: offered on every such turn that has selected skills) returns
one body, capped and marked exactly as the instructions section would. An unknown slug is an
``error`` result listing the valid ones.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, Literal

import attrs

from monoagent import DOCUMENT_MAX_NESTING as MAX_NESTING
from monoagent import (
    Config,
    ConfigSectionRegistrar,
    Section,
    ToolContext,
    ToolRegistrar,
    ToolResult,
    ToolSpec,
    ToolStatus,
    Turn,
    hookimpl,
    setting,
    utf8_prefix,
)
from monoagent_plugins.prompt.bootstrap import kept_path, read_text_cached, unreadable_reason

NAME = "skills"
"""This plugin's name (its entry point), which keys its ``turn.state``."""
CONFIG_PATH = "context"
"""The skill keys live in the kernel's ``context`` table, at their documented paths."""
INDEX_HEADING = "# Skills"
INSTRUCTIONS_HEADING = "# Selected skill instructions"
ON_DEMAND_NOTE = (
    "Skills mode: on demand. The instructions of these skills are not in this prompt. Before you follow a "
    "skill, call read_skill with its exact slug (the first word of its line) and follow what it returns."
)
READ_SKILL = "read_skill"
MAX_LISTED_SLUGS = 50
SKILL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
FRONT_MATTER_MAX_BYTES = 64 * 1024
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)^---[ \t]*(?:\n|\Z)", re.DOTALL | re.MULTILINE)


def _check_skills(value: list[str]) -> str | None:
    bad = [name for name in value if not SKILL_NAME.match(name)]
    if bad:
        return f"skill names must be directory names of letters, digits, '.', '_' or '-' (got {bad!r})"
    return None


@attrs.define
class SkillsConfig:
    """The skill keys of the ``context`` table: where skills live, which to load, their cap."""

    skills_root: Path | None = setting(
        None, doc="Directory holding <name>/SKILL.md. Unset: <home>/skills.", env="MONO_AGENT_SKILLS_ROOT"
    )
    selected_skills: list[str] = setting(
        doc="Skills to load, by directory name; there is no auto-selection (env: comma-separated).",
        env="MONO_AGENT_SELECTED_SKILLS",
        check=_check_skills,
        factory=list,
    )
    skill_max_bytes: int = setting(
        48000, doc="Cap on each skill's instruction body, in UTF-8 bytes (a SKILL.md over this + 64 KiB is not read).",
        env="MONO_AGENT_SKILL_MAX_BYTES",
        min=256, max=1_000_000,
    )
    skills_mode: Literal["inline", "on_demand"] = setting(
        "inline", doc="inline: the selected skills' bodies are in the prompt. on_demand: the prompt lists each "
        "skill's slug and description, and the model reads a body with the read_skill tool.",
        env="MONO_AGENT_SKILLS_MODE",
    )


def skills_root(config: Config) -> Path:
    """``context.skillsRoot`` resolved against the config file's directory, else ``<home>/skills``."""
    root = config.section(CONFIG_PATH, SkillsConfig).skills_root
    return config.resolve(root) if root else kept_path(config.home, "skills")



@attrs.frozen
class LoadedSkill:
    """One selected skill as read this turn: display name, one-line description, body, and its
    ``slug``, the directory name ``read_skill`` takes."""

    name: str
    description: str | None
    body: str
    slug: str


def _one_line(value: object) -> str | None:
    """A front-matter string collapsed to one line, or None when it is not a non-blank string."""
    if not isinstance(value, str):
        return None
    return " ".join(value.split()) or None


@functools.lru_cache(maxsize=256)
def _split_front_matter(text: str) -> tuple[dict[str, Any], str, str | None]:
    """``(metadata, body, problem)``; the metadata is empty when absent or malformed.

    Cached by text: an unchanged SKILL.md is parsed once, not on every turn. Callers must not
    mutate the returned metadata.
    """
    match = _FRONT_MATTER.match(text)
    if match is None:
        problem = "front matter is not closed by a '---' line" if text.startswith("---\n") else None
        return {}, text.lstrip("\n").rstrip(), problem
    body = text[match.end():].lstrip("\n").rstrip()
    import yaml  # imported on first use: keeps `monoagent --help` fast

    try:
        if _yaml_depth(match.group(1), yaml) > MAX_NESTING:
            return {}, body, f"front matter nests more than {MAX_NESTING} levels deep"
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        return {}, body, f"front matter is not valid YAML ({getattr(exc, 'problem', None) or type(exc).__name__})"
    if meta is None:
        return {}, body, None
    if not isinstance(meta, dict):
        return {}, body, "front matter is not a mapping"
    description = meta.get("description")
    if description is not None and not isinstance(description, str):
        return {**meta, "description": None}, body, "description is not a string"
    return meta, body, None


def _yaml_depth(text: str, yaml: Any) -> int:
    """How deep collections nest in ``text``, from the parser's event stream (no recursion),
    stopping as soon as it passes :data:`MAX_NESTING`."""
    depth = deepest = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_NESTING:
                break
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return deepest


_resolved: dict[tuple[Path, str, int, int], Path | None] = {}


def _contained(root: Path, name: str) -> Path | None:
    """The real path of ``<root>/<name>/SKILL.md`` if it lies inside the real root, else None.

    Resolving costs a syscall per path component, so the answer is kept while the file the path
    leads to (its device and inode, following symlinks) stays the same; a re-pointed symlink
    leads to another inode and is resolved again.
    """
    candidate = kept_path(root, name, "SKILL.md")
    info = os.stat(candidate)
    key = (root, name, info.st_dev, info.st_ino)
    if key not in _resolved:
        real_root = root.resolve()
        path = candidate.resolve()
        _resolved[key] = path if path.is_relative_to(real_root) else None
    return _resolved[key]


def _load(turn: Turn, root: Path, name: str) -> LoadedSkill | None:
    """Read and parse one selected skill, or record why it is left out."""

    def skip(code: str, why: str) -> None:
        turn.diagnose(code, f"skill {name!r}: {why}", "skill_instructions")

    try:
        path = _contained(root, name)
    except FileNotFoundError:
        skip("skill_missing", f"{name}/SKILL.md not found in the skills root")
        return None
    except (OSError, RuntimeError) as exc:
        skip("skill_unreadable", f"SKILL.md could not be resolved ({type(exc).__name__})")
        return None
    if path is None:
        skip("skill_outside_root", "SKILL.md resolves outside the skills root")
        return None
    cap = turn.config.section(CONFIG_PATH, SkillsConfig).skill_max_bytes
    try:
        text = read_text_cached(path, cap + FRONT_MATTER_MAX_BYTES, what="SKILL.md")
    except FileNotFoundError:
        skip("skill_missing", f"{name}/SKILL.md not found in the skills root")
        return None
    except OSError as exc:
        skip("skill_unreadable", f"SKILL.md could not be read: {unreadable_reason(exc, f'context.skillMaxBytes {cap:,} + 64 KiB')}")
        return None
    meta, body, problem = _split_front_matter(text.removeprefix("\ufeff"))
    if problem:
        turn.diagnose("skill_front_matter_invalid", f"skill {name!r}: {problem}", "skill_index")
    return LoadedSkill(_one_line(meta.get("name")) or name, _one_line(meta.get("description")), body, name)


def selected_skills(turn: Turn) -> tuple[LoadedSkill, ...]:
    """The turn's selected skills that could be read, loaded once per turn."""
    loaded = turn.state.get(NAME)
    if loaded is None:
        root = skills_root(turn.config)
        names = dict.fromkeys(turn.config.section(CONFIG_PATH, SkillsConfig).selected_skills)
        loaded = tuple(skill for skill in (_load(turn, root, name) for name in names) if skill is not None)
        turn.state[NAME] = loaded
    return loaded


def on_demand(turn: Turn) -> bool:
    """Whether ``context.skillsMode`` is ``on_demand``."""
    return bool(turn.config.section(CONFIG_PATH, SkillsConfig).skills_mode == "on_demand")


def capped_body(turn: Turn, skill: LoadedSkill) -> tuple[str, str | None]:
    """``skill``'s body capped at ``context.skillMaxBytes`` with its truncation notice, and what was cut (or None)."""
    cap = turn.config.section(CONFIG_PATH, SkillsConfig).skill_max_bytes
    cut = utf8_prefix(skill.body, cap)
    if not cut.truncated:
        return cut.text, None
    what = f"body truncated from {cut.original_bytes} to {cut.kept_bytes} bytes (context.skillMaxBytes = {cap})"
    return f"{cut.text}\n\n[skill truncated: kept {cut.kept_bytes} of {cut.original_bytes} bytes]", what


@hookimpl(trylast=True)
def section_skill_index(turn: Turn) -> Section:
    """One ``- name: description`` line per loaded skill under ``# Skills``; empty without skills.

    On demand: one ``- slug: description`` line per skill (the display name follows the slug in
    parentheses when it differs), after a note that the skills are read with ``read_skill``.
    """
    skills = selected_skills(turn)
    if on_demand(turn):
        lines = [
            f"- {s.slug}{f' ({s.name})' if s.name != s.slug else ''}{f': {s.description}' if s.description else ''}"
            for s in skills
        ]
        text = f"{INDEX_HEADING}\n\n{ON_DEMAND_NOTE}\n\n" + "\n".join(lines) if lines else ""
    else:
        lines = [f"- {s.name}: {s.description}" if s.description else f"- {s.name}" for s in skills]
        text = INDEX_HEADING + "\n\n" + "\n".join(lines) if lines else ""
    return Section(id="skill_index", text=text, order=500, stability="stable", source="skills")


@hookimpl(trylast=True)
def section_skill_instructions(turn: Turn) -> Section | None:
    """Each loaded skill's body under ``## Skill: <name>``, capped at ``context.skillMaxBytes``; none on demand."""
    if on_demand(turn):
        return None
    blocks = []
    for skill in selected_skills(turn):
        body, truncated = capped_body(turn, skill)
        if truncated:
            turn.diagnose("skill_truncated", f"skill {skill.name!r}: {truncated}", "skill_instructions")
        blocks.append(f"## Skill: {skill.name}\n\n{body}".rstrip())
    text = INSTRUCTIONS_HEADING + "\n\n" + "\n\n".join(blocks) if blocks else ""
    return Section(id="skill_instructions", text=text, order=600, stability="stable", source="skills")


READ_SKILL_SPEC = ToolSpec(
    READ_SKILL,
    "Read the full instructions of one of the skills listed in the Skills section, before following it.",
    {
        "type": "object",
        "properties": {"slug": {"type": "string", "description": "The skill's exact slug: the first word of its line in the Skills section."}},
        "required": ["slug"],
        "additionalProperties": False,
    },
    categories=("read",),
)


def read_skill(context: ToolContext) -> ToolResult:
    """The ``read_skill`` handler: one selected skill's body, capped as the instructions section caps it."""
    skills = {skill.slug: skill for skill in selected_skills(context.turn)}
    slug = context.arguments.get("slug")
    skill = skills.get(slug) if isinstance(slug, str) else None
    if skill is None:
        listed = list(skills)[:MAX_LISTED_SLUGS]
        more = f" and {len(skills) - len(listed)} more" if len(skills) > len(listed) else ""
        asked = f"the slug {slug[:128]!r}" if isinstance(slug, str) else "no slug (a string)"
        return context.result(f"No skill has {asked}. Valid slugs: {', '.join(listed) or 'none'}{more}.", ToolStatus.ERROR)
    body, _ = capped_body(context.turn, skill)
    return context.result(f"## Skill: {skill.name}\n\n{body}".rstrip())


@hookimpl(trylast=True)
def register_tools(register: ToolRegistrar) -> None:
    register(READ_SKILL_SPEC, read_skill, enabled=_reads_on_demand)


def _reads_on_demand(turn: Turn) -> bool:
    """``read_skill`` is offered when ``context.skillsMode`` is ``on_demand`` and skills are selected."""
    return on_demand(turn) and bool(turn.config.section(CONFIG_PATH, SkillsConfig).selected_skills)




@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register(CONFIG_PATH, SkillsConfig)
