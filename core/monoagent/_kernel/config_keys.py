"""Configuration keys as data: describe them, validate raw data against them, structure it.

Every leaf key of an attrs configuration class (the kernel's :class:`~monoagent._kernel.config.Config`
or a plugin's section) is a :class:`KeyInfo` (:func:`iter_keys`), whose metadata comes from
:func:`~monoagent._kernel.config.setting`. Validation happens on the raw data before it is
structured, so that each problem names the key path, the value, where the value came from (the
file or the env var) and what is allowed (:class:`Problems`, :func:`check_table`). cattrs then
structures the checked data (:func:`structure_section`) and unstructures it for ``config show``
(:func:`value_sources`).
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, cast

import attrs

from monoagent._kernel.config import Config
from monoagent._kernel.errors import ConfigError


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)



def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


# ============================================================================ introspection


def public_fields(cls: type) -> list[attrs.Attribute[object]]:
    return [f for f in attrs.fields(cls) if not f.metadata.get("internal")]


@attrs.frozen
class KeyInfo:
    """One leaf key of the configuration, for docs, env overlay and ``config init``."""

    path: str
    attribute: attrs.Attribute[object]
    owner: type

    @property
    def env(self) -> str | None:
        return cast("str | None", self.attribute.metadata.get("env"))  # setting(env=...) takes a str or None

    @property
    def doc(self) -> str:
        return cast(str, self.attribute.metadata.get("doc", ""))  # setting(doc=...) takes a str

    @property
    def default(self) -> Any:
        default: Any = self.attribute.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]  # attrs' stubs declare Factory a function; it is a class
            return default.factory()
        return default

    @property
    def example(self) -> Any:
        return self.attribute.metadata.get("example")

    @property
    def allowed(self) -> str:
        return describe_allowed(self.attribute, field_type(self.owner, self.attribute))


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, worked out once per class: loading, checks and docs all read them."""
    return typing.get_type_hints(cls)


def field_type(owner: type, attribute: attrs.Attribute[object]) -> Any:
    return type_hints(owner)[attribute.name]


def iter_keys(cls: type = Config, prefix: str = "") -> list[KeyInfo]:
    """Every leaf key below ``cls``, depth first, in declaration order."""
    keys: list[KeyInfo] = []
    hints = type_hints(cls)
    for field in public_fields(cls):
        path = f"{prefix}{camel(field.name)}"
        hint = hints[field.name]
        if attrs.has(hint):
            keys.extend(iter_keys(hint, path + "."))
        else:
            keys.append(KeyInfo(path, field, cls))
    return keys


def kernel_tables(cls: type = Config, prefix: str = "") -> dict[str, type]:
    """Every table of the kernel's configuration below ``cls``, by dotted path, with its class."""
    tables: dict[str, type] = {}
    hints = type_hints(cls)
    for field in public_fields(cls):
        hint = hints[field.name]
        if attrs.has(hint):
            path = f"{prefix}{camel(field.name)}"
            tables[path] = hint
            tables.update(kernel_tables(hint, path + "."))
    return tables


def table_keys(cls: type) -> set[str]:
    """The keys (camelCase) directly in the table of attrs class ``cls``: its leaves and subtables."""
    return {camel(field.name) for field in public_fields(cls)}


def nested_table(hint: Any) -> tuple[str, type] | None:
    """``("list", C)`` for ``list[C]`` and ``("dict", C)`` for ``dict[str, C]`` with ``C`` an attrs class, else None.

    Such a key holds tables: ``cron.jobs`` is a list of job tables (``[[cron.jobs]]``),
    ``webhook.hooks`` a table of named hook tables (``[webhook.hooks.deploy]``). Each table is
    checked against ``C``, its problems named by the item's path (``cron.jobs[1].schedule``,
    ``webhook.hooks.deploy.secret``).
    """
    base, _ = unwrap_optional(hint)
    args = typing.get_args(base)
    if typing.get_origin(base) is list and len(args) == 1 and attrs.has(args[0]):
        return "list", args[0]
    if typing.get_origin(base) is dict and len(args) == 2 and args[0] is str and attrs.has(args[1]):
        return "dict", args[1]
    return None


def nested_keys(key: KeyInfo) -> list[KeyInfo]:
    """The keys of the tables a list- or dict-of-tables key holds (``cron.jobs[].schedule``,
    ``webhook.hooks.<name>.secret``), for the reference docs; none for any other key."""
    nested = nested_table(field_type(key.owner, key.attribute))
    if nested is None:
        return []
    shape, cls = nested
    return iter_keys(cls, key.path + ("[]." if shape == "list" else ".<name>."))


def unwrap_optional(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _fmt_num(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def describe_allowed(attribute: attrs.Attribute[object], hint: Any) -> str:
    meta = attribute.metadata
    if meta.get("allowed"):
        return cast(str, meta["allowed"])  # setting() keeps a str here (a collection goes to allowed_values)
    base, optional = unwrap_optional(hint)
    if meta.get("allowed_values") is not None:
        each = "each one of " if typing.get_origin(base) is list else "one of "
        text = each + ", ".join(repr(v) for v in meta["allowed_values"])
    elif typing.get_origin(base) is Literal:
        text = "one of " + ", ".join(repr(v) for v in typing.get_args(base))
    elif base is bool:
        text = "true or false"
    elif base in (int, float):
        kind = "an integer" if base is int else "a number"
        lo, hi = meta.get("min"), meta.get("max")
        if lo is not None and hi is not None:
            text = f"{kind} from {_fmt_num(lo)} to {_fmt_num(hi)}"
        elif lo is not None:
            text = f"{kind} of at least {_fmt_num(lo)}"
        else:
            text = kind
    elif base is Path:
        text = "a path"
    elif base is str:
        text = "a string"
    elif (nested := nested_table(base)) is not None:
        shape, cls = nested
        keys = ", ".join(camel(f.name) for f in public_fields(cls))
        text = (f"a list of tables (keys: {keys})" if shape == "list"
                else f"a table of named tables (keys of each: {keys})")
    elif typing.get_origin(base) is dict:
        text = "a table"
    elif typing.get_origin(base) is list:
        (item,) = typing.get_args(base)
        text = "a list of " + ("paths" if item is Path else "strings")
    else:
        text = str(base)
    return text + (" (or unset)" if optional else "")


# ============================================================================ validation of raw data

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
NAME_ALLOWED = "1-64 letters, digits, '_', '-' or '.', starting with a letter or digit"
"""The names of a table of named tables (``webhook.hooks.<name>``): they appear in URLs, file names and logs."""


@attrs.define
class Problems:
    sources: Mapping[str, str]
    items: list[str] = attrs.Factory(list)
    plugin_paths: frozenset[str] = frozenset()
    inactive_owner: typing.Callable[[str], str | None] | None = None
    strict: bool = False
    warnings: list[str] = attrs.Factory(list)
    ignored: list[str] = attrs.Factory(list)

    def add(self, path: str, value: Any, message: str) -> None:
        where = self.sources.get(path)
        origin = f" (from {where})" if where else ""
        shown = json.dumps(value, default=str) if not isinstance(value, Mapping) else "{...}"
        if len(shown) > 80:
            shown = shown[:77] + "..."
        self.items.append(f"{path} = {shown}{origin}: {message}")

    def unknown(self, path: str, key: str, known: list[str], named_tables: list[str] | None = None) -> None:
        """``path.key`` is not a key here; ``named_tables`` are the keys at ``path`` that hold tables by name
        (``agents.named``): a table given where such a name belongs is pointed there."""
        full = f"{path}.{key}" if path else key
        where = self.sources.get(full)
        origin = f" (in {where})" if where else ""
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        if not close:
            lowered = {k.lower(): k for k in known}
            if key.lower().replace("_", "") in {k.replace("_", "") for k in lowered}:
                close = [next(v for k, v in lowered.items() if k.replace("_", "") == key.lower().replace("_", ""))]
        hint = f"; did you mean {close[0]!r}?" if close else ""
        if not close and named_tables:
            prefix = f"{path}." if path else ""
            places = " or ".join(f"[{prefix}{table}.{key}]" for table in named_tables)
            hint = f"; did you mean {places}?"
        allowed = ", ".join(known) if known else "no keys"
        self.items.append(f"{full}: unknown key{origin}{hint} (known keys here: {allowed})")

    def of_inactive_plugin(self, full: str) -> bool:
        """Whether ``full`` is a section of a blocked or failed plugin: then a warning (strict: an
        error) naming the plugin instead of an unknown key, and the section is ignored."""
        owner = self.inactive_owner(full) if self.inactive_owner is not None else None
        if owner is None:
            return False
        where = self.sources.get(full)
        origin = f" (in {where})" if where else ""
        if self.strict:
            self.items.append(
                f"{full}: section of {owner}{origin}; remove it or make the plugin load "
                f"(an error because MONO_AGENT_STRICT_PLUGINS=1)"
            )
        else:
            self.warnings.append(f"config section {full!r}{origin} belongs to {owner}; it is ignored")
            self.ignored.append(full)
        return True


def _check_value(path: str, value: Any, hint: Any, attribute: attrs.Attribute[object] | None, problems: Problems) -> None:
    base, optional = unwrap_optional(hint)
    meta = attribute.metadata if attribute is not None else {}
    allowed = describe_allowed(attribute, hint) if attribute is not None else str(hint)
    if value is None:
        if not optional:
            problems.add(path, value, f"must be set; allowed: {allowed}")
        return
    origin = typing.get_origin(base)
    if origin is Literal:
        if value not in typing.get_args(base):
            problems.add(path, value, f"not an allowed value; allowed: {allowed}")
            return
    elif base is bool:
        if not isinstance(value, bool):
            problems.add(path, value, f"wrong type ({type(value).__name__}); allowed: {allowed}")
            return
    elif base is int:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.add(path, value, f"wrong type ({type(value).__name__}); allowed: {allowed}")
            return
    elif base is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.add(path, value, f"wrong type ({type(value).__name__}); allowed: {allowed}")
            return
        if value != value:  # NaN would pass every range check below
            problems.add(path, value, f"not a number; allowed: {allowed}")
            return
    elif base in (str, Path):
        if not isinstance(value, str):
            problems.add(path, value, f"wrong type ({type(value).__name__}); allowed: {allowed}")
            return
        if base is Path and "\x00" in value:
            problems.add(path, value, "a path cannot contain a NUL character")
            return
    elif (nested := nested_table(base)) is not None:
        shape, cls = nested
        if shape == "list":
            if not isinstance(value, list):
                problems.add(path, value, f"wrong type ({type(value).__name__}); allowed: {allowed}")
                return
            for index, item in enumerate(value):
                check_table(f"{path}[{index}]", item, cls, problems)
        else:
            if not isinstance(value, Mapping):
                problems.add(path, value, f"wrong type ({type(value).__name__}); allowed: {allowed}")
                return
            for name, item in value.items():
                if not NAME_PATTERN.fullmatch(name):
                    problems.add(f"{path}.{name}", item, f"not an allowed name; allowed: {NAME_ALLOWED}")
                    continue
                check_table(f"{path}.{name}", item, cls, problems)
        check = meta.get("check")
        message = check(value) if check is not None else None
        if message:
            problems.add(path, value, message)
        return
    elif origin is dict:
        if not isinstance(value, Mapping):
            problems.add(path, value, f"wrong type ({type(value).__name__}); allowed: {allowed}")
            return
    elif origin is list:
        (_item,) = typing.get_args(base)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problems.add(path, value, f"wrong type; allowed: {allowed}")
            return
    elif attrs.has(base):
        check_table(path, value, base, problems)
        return
    lo, hi = meta.get("min"), meta.get("max")
    if base in (int, float) and ((lo is not None and value < lo) or (hi is not None and value > hi)):
        problems.add(path, value, f"out of range; allowed: {allowed}")
        return
    values = meta.get("allowed_values")
    if values is not None and any(item not in values for item in (value if origin is list else [value])):
        problems.add(path, value, f"not an allowed value; allowed: {allowed}")
        return
    check = meta.get("check")
    if check is not None:
        message = check(value)
        if message:
            problems.add(path, value, message)


def _named_tables(hints: dict[str, Any], fields: dict[str, Any]) -> list[str]:
    """The keys of ``fields`` that hold tables by name: ``dict[str, <attrs class>]`` (``agents.named``, ``mcp.servers``)."""
    found = []
    for key, field in fields.items():
        hint = hints.get(field.name)
        arguments = typing.get_args(hint) if typing.get_origin(hint) is dict else ()
        if len(arguments) == 2 and attrs.has(arguments[1]):
            found.append(key)
    return found


def check_table(path: str, raw: Any, cls: type, problems: Problems) -> None:
    """Check the table at ``path`` against attrs class ``cls``; keys of plugin sections are skipped
    (and suggested for a misspelt key), each is checked against its own class."""
    if not isinstance(raw, Mapping):
        problems.add(path, raw, f"must be a table of keys ({', '.join(camel(f.name) for f in public_fields(cls))})")
        return
    hints = type_hints(cls)
    fields = {camel(f.name): f for f in public_fields(cls)}
    prefix = f"{path}." if path else ""
    plugin_keys = sorted(
        p[len(prefix):] for p in problems.plugin_paths if p.startswith(prefix) and "." not in p[len(prefix):]
    )
    known = list(fields) + [key for key in plugin_keys if key not in fields]
    for key, value in raw.items():
        full = f"{path}.{key}" if path else key
        field = fields.get(key)
        if field is None:
            if full not in problems.plugin_paths and not problems.of_inactive_plugin(full):  # another section's key
                problems.unknown(path, key, known, _named_tables(hints, fields) if isinstance(value, Mapping) else None)
            continue
        _check_value(full, value, hints[field.name], field, problems)
    for key, field in fields.items():
        if key not in raw and field.default is attrs.NOTHING:  # a key the table must set (a notify destination's type)
            problems.items.append(f"{prefix}{key}: missing; this table must set it ({field.metadata.get('doc', '')})")


# ============================================================================ structuring (cattrs)


@functools.cache
def converter() -> Any:
    """The cattrs converter for configuration classes (camelCase keys, strict extra keys), built on first use."""
    import cattrs
    from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

    built = cattrs.Converter(forbid_extra_keys=True)
    built.register_structure_hook(Path, lambda value, _: Path(value))
    built.register_unstructure_hook(Path, str)

    def renames(cls: type) -> dict[str, Any]:
        return {
            f.name: override(rename=camel(f.name)) if not f.metadata.get("internal") else override(omit=True)
            for f in attrs.fields(cls)
        }

    built.register_structure_hook_factory(
        attrs.has, lambda cls: make_dict_structure_fn(cls, built, _cattrs_forbid_extra_keys=True, **renames(cls))
    )
    built.register_unstructure_hook_factory(
        attrs.has, lambda cls: make_dict_unstructure_fn(cls, built, **renames(cls))
    )
    return built


def structure_section(data: Any, cls: type, path: str) -> Any:
    """Structure checked data; an attrs validator's own failure becomes a ConfigError naming the path."""
    import cattrs

    def leaves(exc: BaseException, where: str) -> list[str]:
        if isinstance(exc, BaseExceptionGroup):
            found: list[str] = []
            for sub in exc.exceptions:
                names = [note.name for note in getattr(sub, "__notes__", []) if hasattr(note, "name")]
                found.extend(leaves(sub, f"{where}.{camel(names[0])}" if names and where else camel(names[0]) if names else where))
            return found
        return [f"{where or 'configuration'}: {exc}"]

    try:
        return converter().structure(data, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError) as exc:
        raise ConfigError(leaves(exc, path)) from None



def value_sources(config: Config) -> list[tuple[str, Any, str]]:
    """(key path, effective value, source) for every kernel and plugin key, for ``config show``."""
    conv = converter()
    rows: list[tuple[str, Any, str]] = []

    def hidden(value: Any) -> Any:
        """A secret's value as ``config show`` prints it: a table of secrets (headers, env) keeps its keys."""
        return {key: "<set, not shown>" for key in value} if isinstance(value, dict) else "<set, not shown>"

    def masked(obj: Any) -> Any:
        """``obj`` unstructured, every secret key at any depth (a hook's ``secret``) replaced."""
        if attrs.has(type(obj)):
            out = {}
            for field in public_fields(type(obj)):
                value = getattr(obj, field.name)
                out[camel(field.name)] = (hidden(value) if field.metadata.get("secret") and value not in (None, [], "")
                                          else masked(value))
            return out
        if isinstance(obj, dict):
            return {key: masked(value) for key, value in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [masked(value) for value in obj]
        return conv.unstructure(obj)

    def walk(obj: Any, prefix: str) -> None:
        for key, value in conv.unstructure(obj).items():
            path = f"{prefix}{key}"
            if isinstance(value, dict) and attrs.has(type(getattr(obj, snake(key), None))):
                walk(getattr(obj, snake(key)), path + ".")
            else:
                field = attrs.fields_dict(type(obj)).get(snake(key))
                if field is not None and field.metadata.get("secret") and value is not None:
                    value = hidden(value)
                elif field is not None:
                    value = masked(getattr(obj, snake(key)))
                rows.append((path, value, config.sources.get(path, "default")))

    walk(config, "")
    for path, section in sorted(config.sections.items()):
        walk(section, path + ".")
    return rows
