"""Loading the configuration: the file, the ``MONO_AGENT_*`` overlay, validation, the :class:`Config`.

Precedence is env > file > defaults. :func:`load_raw` merges the file (or a mapping) and every
variable without validating, reading a renamed key or variable under its old name too
(:data:`~monoagent._kernel.config.RENAMED_KEYS`, :data:`~monoagent._kernel.config.RENAMED_ENV`) with
a warning; :func:`build_config` validates the result against the kernel's
classes and the plugins' sections (:mod:`monoagent._kernel.config_keys`) and structures it.
:func:`plugins_settings` reads just the ``plugins`` table, which is needed before any plugin
loads.
"""

from __future__ import annotations

import json
import os
import re
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from monoagent._kernel.config import CONFIG_FILENAME, IMPLIED_KEYS, RENAMED_ENV, RENAMED_KEYS, Config, PluginsConfig
from monoagent._kernel.config_keys import (
    KeyInfo,
    Problems,
    check_table,
    field_type,
    iter_keys,
    kernel_tables,
    structure_section,
    table_keys,
    unwrap_optional,
)
from monoagent._kernel.errors import ConfigError

# ============================================================================ env overlay


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


_ASCII_INTEGER = re.compile(r"-?[0-9]{1,30}")
_ASCII_DECIMAL = re.compile(r"-?[0-9]{1,30}(?:\.[0-9]{1,30})?")
_ASCII_SPACE = " \t\r\n"


def parse_ascii_number(text: str, kind: type, *, negative: bool) -> int | float:
    """``text`` as an int or float written in ASCII digits only, or ValueError saying what is allowed.

    ``int()`` and ``float()`` also take ``1_000``, fullwidth and other Unicode digits, ``+5``,
    ``1e3``, ``inf`` and ``nan``; a configuration value typed as text takes none of them: ASCII
    digits (at most 30, so no value reaches Python's digit limit), a ``.`` fraction for numbers,
    and a leading ``-`` only where ``negative`` allows it.
    """
    sign = "an optional leading '-' and " if negative else ""
    if kind is int:
        if _ASCII_INTEGER.fullmatch(text) and (negative or not text.startswith("-")):
            return int(text)
        raise ValueError(f"expected an integer: {sign}ASCII digits 0-9 only")
    if _ASCII_DECIMAL.fullmatch(text) and (negative or not text.startswith("-")):
        return float(text)
    raise ValueError(f"expected a number: {sign}ASCII digits 0-9 with an optional '.' fraction only")


def _parse_env(raw: str, hint: Any, *, negative: bool = True) -> Any:
    """Turn an env string into the raw value the key's type expects; return it or raise ValueError.

    ``negative`` is False for a key whose minimum is not below zero: its integer or number may
    not start with ``-``.
    """
    base, optional = unwrap_optional(hint)
    text = raw.strip(_ASCII_SPACE)
    if optional and text == "":
        return None
    if base is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError("expected a boolean (1/0, true/false, yes/no, on/off)")
    if base in (int, float):
        return parse_ascii_number(text, base, negative=negative)
    if typing.get_origin(base) is list:
        return [part.strip() for part in text.split(",") if part.strip()]
    if base is Path:
        return str(Path(raw).expanduser().absolute())  # relative to the working directory, not the file
    return raw


def _set_path(tree: dict[str, Any], path: str, value: Any) -> bool:
    """Set ``path`` in ``tree``; False, setting nothing, when a parent holds a non-table value.

    That value came from the file and is left for validation to report, not silently replaced.
    """
    *parents, leaf = path.split(".")
    node = tree
    for part in parents:
        if part not in node:
            node[part] = {}
        if not isinstance(node[part], dict):
            return False
        node = node[part]
    node[leaf] = value
    return True


def _record_sources(tree: Mapping[str, Any], prefix: str, label: str, sources: dict[str, str]) -> None:
    for key, value in tree.items():
        path = f"{prefix}{key}"
        sources[path] = label
        if isinstance(value, Mapping):
            _record_sources(value, path + ".", label, sources)


# ============================================================================ loading


def discover_config_file(explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path | None:
    """``--config PATH``, then ``MONO_AGENT_CONFIG``, then ``./monoagent.toml``, then the user config dir."""
    env = os.environ if env is None else env
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"--config {explicit}: no such file")
        return path.resolve()
    if env.get("MONO_AGENT_CONFIG"):
        path = Path(env["MONO_AGENT_CONFIG"]).expanduser()
        if not path.is_file():
            raise ConfigError(f"MONO_AGENT_CONFIG={env['MONO_AGENT_CONFIG']}: no such file")
        return path.resolve()
    local = Path.cwd() / CONFIG_FILENAME
    if local.is_file():
        return local.resolve()
    import platformdirs

    user = platformdirs.user_config_path("monoagent") / CONFIG_FILENAME
    if user.is_file():
        return user.resolve()
    return None


CONFIG_MAX_BYTES = 1024 * 1024


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse a TOML (or, by ``.json`` suffix, JSON) file into a dict, or raise ConfigError.

    The file must be a regular file of at most :data:`CONFIG_MAX_BYTES` (1 MiB), nested at most
    :data:`~monoagent._boundary.documents.MAX_NESTING` levels deep (see :mod:`monoagent._boundary.documents`).
    """
    from monoagent._boundary.documents import DocumentError, load_document

    try:
        loaded = load_document(path, max_bytes=CONFIG_MAX_BYTES, what="config file")
    except DocumentError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: the top level must be a JSON object")
    return loaded


@attrs.define
class RawConfig:
    """File and env data merged but not yet validated, with the source of every key."""

    data: dict[str, Any]
    sources: dict[str, str]
    source_file: Path | None
    problems: list[str] = attrs.Factory(list)
    env: Mapping[str, str] = attrs.Factory(dict)
    warnings: list[str] = attrs.Factory(list)


def load_raw(
    explicit: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    data: Mapping[str, Any] | None = None,
) -> RawConfig:
    """Merge defaults-free raw data: the file (or ``data``), then every ``MONO_AGENT_*`` variable."""
    env = os.environ if env is None else env
    sources: dict[str, str] = {}
    source_file: Path | None = None
    if data is not None:
        tree = json.loads(json.dumps(dict(data), default=str))
        _record_sources(tree, "", "python", sources)
    else:
        source_file = discover_config_file(explicit, env)
        tree = read_config_file(source_file) if source_file else {}
        if source_file:
            _record_sources(tree, "", f"file {source_file}", sources)
    raw = RawConfig(tree, sources, source_file, env=env)
    for old in RENAMED_KEYS:
        if old.rpartition(".")[0] not in RENAMED_KEYS:  # a key inside a renamed table moves with its table
            _rename_key(raw, old, RENAMED_KEYS[old])
    _overlay_env(raw, iter_keys())
    return raw


def renamed_keys() -> dict[str, str]:
    """Every key still read under an old name, old path -> new path: a renamed table's keys one by one."""
    tables = kernel_tables()
    own = {new: old for old, new in RENAMED_KEYS.items() if new not in tables}  # a key's own entry
    pairs: dict[str, str] = {}
    for old, new in RENAMED_KEYS.items():
        if new in tables:
            for key in iter_keys(tables[new], new + "."):
                pairs[own.pop(key.path, f"{old}.{key.path[len(new) + 1:]}")] = key.path
    pairs.update((old, new) for new, old in own.items())
    return pairs


_MISSING = object()


def _lookup(tree: dict[str, Any], path: str) -> tuple[list[dict[str, Any]], Any]:
    """The tables along ``path`` (the root first) and the value at its end, or ``_MISSING``."""
    *parents, leaf = path.split(".")
    nodes = [tree]
    for part in parents:
        node = nodes[-1].get(part)
        if not isinstance(node, dict):
            return nodes, _MISSING
        nodes.append(node)
    return nodes, nodes[-1].get(leaf, _MISSING)


def _rename_key(raw: RawConfig, old: str, new: str) -> None:
    """Move the value set under ``old`` (an old name of ``new``) to ``new``; a table left empty goes."""
    nodes, value = _lookup(raw.data, old)
    if value is _MISSING:
        return
    parents = old.split(".")
    del nodes[-1][parents[-1]]
    if len(nodes) > 1 and not nodes[-1]:
        del nodes[-2][parents[-2]]
    label = raw.sources.get(old, "python")
    for path in [p for p in raw.sources if p == old or p.startswith(old + ".")]:
        del raw.sources[path]
    _move(raw, old, new, value, label)


def _move(raw: RawConfig, old: str, new: str, value: Any, label: str) -> None:
    """Set ``value``, found under ``old`` in ``label``, at ``new``, with a warning naming both.

    A table moves key by key, so each key is checked and named on its own, and a key of it with
    an entry of its own in :data:`RENAMED_KEYS` goes where that says. A key set under both names
    is a problem naming both.
    """
    if isinstance(value, dict) and new in kernel_tables():
        for key, inner in value.items():
            _move(raw, f"{old}.{key}", RENAMED_KEYS.get(f"{old}.{key}", f"{new}.{key}"), inner, label)
        return
    if _lookup(raw.data, new)[1] is not _MISSING:
        raw.problems.append(f"{new} and {old} are both set (in {label}); {old} is the old name of {new}: keep only {new}")
        return
    if _set_path(raw.data, new, value):
        where = f"{label}, under its old name {old}"
        raw.sources[new] = where
        if isinstance(value, Mapping):
            _record_sources(value, new + ".", where, raw.sources)
        raw.warnings.append(f"config key {old} (in {label}) is deprecated; rename it to {new}")


#: The old name of each renamed environment variable, by its new name.
_OLD_ENV = {new: old for old, new in RENAMED_ENV.items()}


def _overlay_env(raw: RawConfig, keys: list[KeyInfo]) -> None:
    env, tree, sources = raw.env, raw.data, raw.sources
    for key in keys:
        if not key.env:
            continue
        name, old = key.env, _OLD_ENV.get(key.env)
        if old is not None and old in env:
            if name in env:
                raw.problems.append(
                    f"{name} and {old} are both set; {old} is the old name of {name}: unset {old}"
                )
                continue
            name = old
            raw.warnings.append(f"environment variable {old} is deprecated; rename it to {key.env}")
        if name not in env:
            continue
        try:
            minimum = key.attribute.metadata.get("min")
            value = _parse_env(env[name], field_type(key.owner, key.attribute), negative=minimum is None or minimum < 0)
        except ValueError as exc:
            raw.problems.append(f"{key.path} = {env[name]!r} (from env {name}): {exc}; allowed: {key.allowed}")
            continue
        if _set_path(tree, key.path, value):
            sources[key.path] = f"env {name}"


def build_config(
    raw: RawConfig,
    plugin_sections: Mapping[str, type] | None = None,
    *,
    inactive_owner: Callable[[str], str | None] | None = None,
    strict: bool = False,
) -> Config:
    """Validate ``raw`` against the kernel's classes and the plugins' sections; structure it.

    A plugin section at the path of a kernel table (``history``) holds the plugin's keys of that
    table: they are taken out of the table and checked against the plugin's class, the rest
    against the kernel's, and an unknown key there suggests from both.

    Raises :class:`~monoagent._kernel.errors.ConfigError` listing every problem found, each naming the
    key path, the value, its source and what is allowed. A key nobody declares is such a
    problem, unless ``inactive_owner`` says it is the section of a plugin that is blocked or
    failed to load (it returns that plugin, described, else None): that section is ignored with
    a line in ``config.warnings``, or is a problem when ``strict``.
    """
    plugin_sections = dict(plugin_sections or {})
    for path, cls in plugin_sections.items():
        _overlay_env(raw, iter_keys(cls, path + "."))
    tables = kernel_tables()
    plugin_paths = {path for path in plugin_sections if path not in tables}
    plugin_paths.update(f"{path}.{key}" for path, cls in plugin_sections.items() if path in tables for key in table_keys(cls))
    _imply(raw, plugin_paths)
    problems = Problems(raw.sources, list(raw.problems), frozenset(plugin_paths), inactive_owner, strict)
    data = json.loads(json.dumps(raw.data, default=str))  # a private deep copy
    extracted: dict[str, Any] = {}
    for path in sorted(plugin_sections, key=lambda p: -p.count(".")):
        *parents, leaf = path.split(".")
        node: Any = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            continue
        if path in tables:  # the plugin's keys in a kernel table: take those, leave the kernel's
            table, keys = node[leaf], table_keys(plugin_sections[path])
            if isinstance(table, dict):
                extracted[path] = {key: table.pop(key) for key in list(table) if key in keys}
        else:
            extracted[path] = node.pop(leaf)
    check_table("", data, Config, problems)
    for path, cls in plugin_sections.items():
        if path in extracted:
            check_table(path, extracted[path], cls, problems)
    if problems.items:
        raise ConfigError(problems.items)
    for path in problems.ignored:
        *parents, leaf = path.split(".")
        node = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    config: Config = structure_section(data, Config, "")
    for path, cls in plugin_sections.items():
        config.sections[path] = structure_section(extracted.get(path, {}), cls, path)
    config.source_file = raw.source_file
    config.base_dir = raw.source_file.parent if raw.source_file else Path.cwd()
    config.sources = dict(raw.sources)
    config.warnings = [*raw.warnings, *problems.warnings]
    return config


def _imply(raw: RawConfig, plugin_paths: set[str]) -> None:
    """Set each key :data:`~monoagent._kernel.config.IMPLIED_KEYS` implies: its implying key is set (not
    to null) and declared, by the kernel or an active plugin, and the implied key is not set."""
    kernel = {key.path for key in iter_keys()}
    for key, (implied, value) in IMPLIED_KEYS.items():
        if key not in kernel and key not in plugin_paths:
            continue
        found = _lookup(raw.data, key)[1]
        if found is _MISSING or found is None or _lookup(raw.data, implied)[1] is not _MISSING:
            continue
        if _set_path(raw.data, implied, value):
            raw.sources[implied] = f"implied by {key} ({raw.sources.get(key, 'python')})"


def add_plugin_sections(config: Config, plugin_sections: Mapping[str, type], env: Mapping[str, str]) -> None:
    """Give a ready-made Config the plugin sections it lacks, as :func:`build_config` builds them
    without a file: their defaults overlaid by their environment variables (``Agent(Config(...))``)."""
    missing = {path: cls for path, cls in plugin_sections.items() if path not in config.sections}
    if not missing:
        return
    built = build_config(RawConfig({}, {}, None, env=env), missing)
    config.sections.update(built.sections)
    for key, source in built.sources.items():
        config.sources.setdefault(key, source)


def plugins_settings(raw: RawConfig) -> PluginsConfig:
    """Validate and return just the ``plugins`` table: it is needed before any plugin loads."""
    problems = Problems(raw.sources)
    section = raw.data.get("plugins", {})
    check_table("plugins", section, PluginsConfig, problems)
    plugin_problems = [p for p in raw.problems if p.startswith("plugins.")]
    if problems.items or plugin_problems:
        raise ConfigError(plugin_problems + problems.items)
    # Checked flat values: built directly, so the CLI's early plugin load needs no cattrs.
    return PluginsConfig(
        paths=[Path(p) for p in section.get("paths", [])],
        block=list(section.get("block", [])),
        local_failures=section.get("localFailures", "fatal"),
    )


def load_config(
    explicit: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    data: Mapping[str, Any] | None = None,
    plugin_sections: Mapping[str, type] | None = None,
) -> Config:
    """Discover, read, overlay and validate in one call (no plugin sections unless given)."""
    return build_config(load_raw(explicit, env, data=data), plugin_sections)
