"""``monoagent config init``: a commented starter file with the documented defaults.

Values are written with tomli-w; the comments (what a key does, what is allowed, its env var)
come from the same field metadata that validation and the docs use. Every key is written
commented out, with its default (or, for a key without one, an example value where one is
documented): a new file pins nothing, so a default that a later release improves still reaches
the user, and uncommenting a line is how a value is chosen. The table headers stay, so an
uncommented key lands in its table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tomli_w

from monoagent._kernel.config import Config
from monoagent._kernel.config_keys import KeyInfo, field_type, iter_keys, nested_table

HEADER = """\
# monoagent configuration. Every key is optional and commented out with its default:
# uncomment a line to choose a value; what stays commented follows the defaults of each release.
# Precedence: MONO_AGENT_* environment variables > this file > defaults.
# Relative paths are relative to this file's directory. Reference: docs/configuration.md
"""


def _value_line(name: str, value: Any) -> str:
    return tomli_w.dumps({name: value}).strip()


def _key_lines(key: KeyInfo) -> list[str]:
    name = key.path.rsplit(".", 1)[-1]
    notes = f"allowed: {key.allowed}" + (f"; env: {key.env}" if key.env else "")
    lines = [f"# {key.doc}", f"# {notes}"]
    default = key.default
    if nested_table(field_type(key.owner, key.attribute)) is not None:
        lines.append(f"# {name}: tables of their own, see docs/configuration.md")
    elif default is None:
        example = key.example
        lines.append(f"# {_value_line(name, example)}" if example is not None else f"# {name} = (unset)")
    else:
        value = _value_line(name, [str(v) for v in default] if isinstance(default, list) else default)
        lines.extend(f"# {line}" for line in value.splitlines())
    return lines


def _tables(cls: type, prefix: str = "") -> dict[str, list[KeyInfo]]:
    tables: dict[str, list[KeyInfo]] = {}
    for key in iter_keys(cls, prefix):
        table = key.path.rsplit(".", 1)[0] if "." in key.path else ""
        tables.setdefault(table, []).append(key)
    return tables


def starter_toml(plugin_sections: Mapping[str, type] | None = None) -> str:
    """The starter file's text: kernel tables, then each plugin's section."""
    tables = _tables(Config)
    for path, cls in sorted((plugin_sections or {}).items()):
        for table, keys in _tables(cls, path + ".").items():
            tables.setdefault(table, []).extend(keys)
    out = [HEADER]
    for table, keys in tables.items():
        out.append(f"\n[{table}]" if table else "")
        for key in keys:
            out.extend(_key_lines(key))
            out.append("")
    return "\n".join(out).rstrip() + "\n"
