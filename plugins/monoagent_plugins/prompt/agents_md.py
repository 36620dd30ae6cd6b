"""The ``agents_md`` section (dynamic, order 650): the effective AGENTS.md of the turn, as project instructions.

Which file:

* a channel with a folder in ``context.agentsMd.channels.<channel>`` (the request's
  ``channel``: ``openai-api``, ``webhook``, ``cron``, ``cli``...) uses ``<folder>/AGENTS.md``;
* otherwise a console turn (``delivery = "console"``: ``monoagent run``, ``chat``, ``prompt``) uses
  the nearest AGENTS.md walking up from the process's working directory, looking no further than
  the first directory that holds a ``monoagent.toml`` or ``.git`` (the project root) and never
  above the home directory when the walk starts inside it;
* any other turn has none, and so does a walk that finds nothing: no section, no diagnostic.

The nearest entry named AGENTS.md is the file, whatever it is: one that cannot be read (a
directory, a FIFO, a symlink loop, a file over the byte cap) is reported as an
``agents_md_unreadable`` diagnostic and nothing further up is used in its place.

Reading reuses the bootstrap files' bounded reader (:func:`monoagent_plugins.prompt.bootstrap.read_text_cached`:
a regular file only, at most ``context.bootstrapMaxChars`` x 4 bytes, checked before a byte is
read, invalid UTF-8 replaced). The text is cut to ``context.bootstrapMaxChars`` characters and to
what the bootstrap files of the turn left of ``context.bootstrapTotalMaxChars``, each cut an
``agents_md_truncated`` diagnostic. The section names the file's path in its heading and is
dynamic (the file may change between turns without touching the cached stable prompt); the
manifest's ``source`` is the path.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from monoagent import ConfigSectionRegistrar, Section, Turn, hookimpl, quote_inline, setting
from monoagent_plugins.prompt import bootstrap
from monoagent_plugins.prompt.section_text import cut, quoted_text

FILE_NAME = "AGENTS.md"
PROJECT_MARKERS = ("monoagent.toml", ".git")
CONFIG_PATH = "context.agentsMd"


@attrs.define
class AgentsMdConfig:
    """Where channel turns find their AGENTS.md (context.agentsMd)."""

    channels: dict[str, Path] = setting(
        doc="Folder whose AGENTS.md a channel's turns use, by channel name (openai-api, webhook, cron, cli...); "
        "relative paths are resolved against the config file's directory. Console turns of a channel without one "
        "use the nearest AGENTS.md above the working directory.",
        factory=dict,
    )


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register(CONFIG_PATH, AgentsMdConfig)


def nearest_agents_md(start: Path, home: Path | None) -> Path | None:
    """The nearest entry named AGENTS.md from ``start`` upwards, or None.

    The walk ends after the first directory holding a project marker (``monoagent.toml`` or
    ``.git``), at ``home`` when ``start`` is inside it, and at the file-system root otherwise.
    """
    inside_home = home is not None and (start == home or home in start.parents)
    for directory in (start, *start.parents):
        candidate = directory / FILE_NAME
        if os.path.lexists(candidate):
            return candidate
        if any(os.path.lexists(directory / marker) for marker in PROJECT_MARKERS):
            return None
        if inside_home and directory == home:
            return None
    return None


def effective_agents_md(turn: Turn) -> Path | None:
    """The AGENTS.md path that applies to ``turn`` (see the module docstring), or None."""
    request = turn.request
    folder = turn.config.section(CONFIG_PATH, AgentsMdConfig).channels.get(request.channel)
    if folder is not None:
        return turn.config.resolve(folder) / FILE_NAME
    if request.delivery != "console":
        return None
    try:
        start = Path.cwd()
    except OSError:  # the working directory was removed under the process
        turn.diagnose("agents_md_unreadable", "the working directory no longer exists; no AGENTS.md looked for", "agents_md")
        return None
    try:
        home: Path | None = Path.home()
    except RuntimeError:
        home = None
    return nearest_agents_md(start, home)


def _remaining_total(turn: Turn) -> int:
    """What the turn's bootstrap files left of ``context.bootstrapTotalMaxChars`` (all of it when none were read)."""
    total = turn.config.context.bootstrap_total_max_chars
    files = turn.state.get(bootstrap.STATE_KEY)
    if files is None:
        return total
    used = sum(len(f.text) for f in (files.soul, files.identity, files.user) if f is not None and f.present)
    return max(total - used, 0)


@hookimpl(trylast=True)
def section_agents_md(turn: Turn) -> Section | None:
    path = effective_agents_md(turn)
    if path is None:
        return None
    per_file = turn.config.context.bootstrap_max_chars
    shown = quote_inline(str(path), 400)
    try:
        text = bootstrap.read_text_cached(path, per_file * bootstrap.BYTES_PER_CHAR, what=FILE_NAME)
    except FileNotFoundError:
        if turn.config.section(CONFIG_PATH, AgentsMdConfig).channels.get(turn.request.channel) is not None:
            turn.diagnose("agents_md_missing", f"no AGENTS.md in the folder configured for channel {quote_inline(turn.request.channel)}", "agents_md")
        return None
    except OSError as exc:
        limit = f"context.bootstrapMaxChars {per_file:,} x {bootstrap.BYTES_PER_CHAR} bytes per character"
        turn.diagnose("agents_md_unreadable", f"{shown} could not be read: {bootstrap.unreadable_reason(exc, limit)}", "agents_md")
        return None
    original = len(text)
    text, over_file = cut(text, per_file)
    if over_file:
        turn.diagnose("agents_md_truncated", f"{shown} truncated from {original} to {per_file} characters (context.bootstrapMaxChars)", "agents_md")
    remaining = _remaining_total(turn)
    text, over_total = cut(text, remaining)
    if over_total:
        turn.diagnose(
            "agents_md_truncated", f"{shown} truncated to {remaining} characters by the total bootstrap budget (context.bootstrapTotalMaxChars)",
            "agents_md",
        )
    if not text.strip():
        return None
    body = quoted_text(text.rstrip())
    if over_file or over_total:
        body += f"\n\n[AGENTS.md truncated: kept {len(text)} of {original} characters]"
    heading = (
        f"# Project instructions from {shown}\n\n"
        "The following is the project's AGENTS.md file, read from disk for this turn: instructions for working "
        "in this project. The person you are serving and the guardrails above take precedence over it."
    )
    return Section("agents_md", f"{heading}\n\n{body}", order=650, stability="dynamic", source=str(path))
