"""Structured files the operator points monoagent at: the config file and offline scripts.

A JSON or TOML document is read through :func:`monoagent._boundary.files.read_regular_file` (a regular
file, its byte cap checked before a byte is read) and its nesting depth is bounded twice:

* **before parsing**, by a linear scan of the brackets outside strings and comments (for JSON
  :func:`monoagent._boundary.strict_json.nesting_over`), because ``json`` and ``tomllib`` recurse once per
  level: a 100k-deep ``[[[[...`` would be a ``RecursionError`` instead of an error about the file;
* **after parsing**, by walking the result without recursion, because TOML nests without
  brackets too (``a.b.c.d... = 1``, ``[a.b.c.d...]``) and everything downstream (validation,
  ``config show``, cattrs) walks the tree recursively.

Every problem is a :class:`DocumentError` with a one-line message naming the file and what is
allowed; callers turn it into their own error type (a ``ConfigError`` for both callers today).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from monoagent._boundary.files import read_regular_file
from monoagent._boundary.strict_json import nesting_over
from monoagent._kernel.errors import MonoagentError

__all__ = ["MAX_NESTING", "DocumentError", "check_nesting", "load_document"]

MAX_NESTING = 64
"""Deepest nesting of tables and arrays a config file or script may have (the top level is 1)."""

Syntax = Literal["json", "toml"]

# Each token pattern always matches once it has started (an unterminated string runs to the end of
# its line or of the text), so the scan never backtracks to retry a string: it stays linear.
_TOML_TOKENS = re.compile(
    r'"""(?:[^\\]|\\.)*?(?:"""|\Z)'
    r"|'''.*?(?:'''|\Z)"
    r'|"(?:[^"\\\n]|\\.)*"?'
    r"|'[^'\n]*'?"
    r"|#[^\n]*"
    r"|[\[\]{}]"
    r"|[A-Za-z0-9_+:-]+"  # a bare key, or a number or date in a value
    r"|[ \t]+"
    r"|.",
    re.DOTALL,
)
_KEY_PART = re.compile(r"""["'A-Za-z0-9_+:-]|[ \t]""")  # a token that may sit between the dots of a key
_OPEN = frozenset("[{")
_CLOSE = frozenset("]}")


class DocumentError(MonoagentError):
    """A config file or script could not be read or parsed; the message is one line."""


def check_nesting(text: str, syntax: Syntax, *, where: str, limit: int = MAX_NESTING) -> None:
    """Raise :class:`DocumentError` when the text nests deeper than ``limit``, before it is parsed.

    Counts brackets outside strings and comments; for TOML the top-level table is the first
    level, as JSON's outer ``{`` is, and a dotted key (``a.b.c = 1``, ``[a.b.c]``) may have at
    most ``limit`` parts: ``tomllib`` keeps every prefix of a dotted key, so its memory grows
    with the square of the key's length (a 100,000-part key exhausts memory before any depth
    check after parsing could run). ``where`` opens the message (the file's path).
    """
    too_deep = f"{where}: arrays and tables nest more than {limit} levels deep (at most {limit} allowed); refused"
    if syntax == "json":
        if nesting_over(text, limit):
            raise DocumentError(too_deep)
        return
    depth = 1
    parts = 1
    for match in _TOML_TOKENS.finditer(text):
        token = match.group()
        if token in _OPEN:
            depth, parts = depth + 1, 1
            if depth > limit:
                raise DocumentError(too_deep)
        elif token in _CLOSE:
            depth, parts = depth - 1, 1
        elif token == ".":
            parts += 1
            if parts > limit:
                raise DocumentError(f"{where}: a dotted key has more than {limit} parts (at most {limit} allowed); refused")
        elif not _KEY_PART.match(token):
            parts = 1


def _check_tree(value: Any, *, where: str, limit: int) -> None:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > limit:
            raise DocumentError(f"{where}: tables, arrays and dotted keys nest more than {limit} levels deep (at most {limit} allowed); refused")
        stack.extend((child, depth + 1) for child in children)


def load_document(path: str | os.PathLike[str], *, max_bytes: int, what: str, syntax: Syntax | None = None) -> Any:
    """Read and parse a JSON or TOML file (by ``syntax``, else by a ``.json`` suffix) under the bounds above.

    ``what`` names the kind of file in the messages about the file itself (``"config file"``);
    the others open with its path.
    """
    path = Path(path)
    syntax = syntax or ("json" if path.suffix.lower() == ".json" else "toml")
    try:
        data = read_regular_file(path, max_bytes, what=what)
    except MonoagentError as exc:  # not a regular file, or over the cap: the message names both
        raise DocumentError(str(exc)) from None
    except OSError as exc:
        raise DocumentError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        text = data.decode(json.detect_encoding(data), "surrogatepass") if syntax == "json" else data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"{path}: not valid {syntax.upper()}: {exc}") from None
    check_nesting(text, syntax, where=str(path))
    try:
        loaded = json.loads(text) if syntax == "json" else tomllib.loads(text)
    except ValueError as exc:  # JSONDecodeError, TOMLDecodeError, or an integer over Python's digit limit
        raise DocumentError(f"{path}: not valid {syntax.upper()}: {' '.join(str(exc).split())[:200]}") from None
    except RecursionError:  # the scan above bounds nesting; this only guards against a form it missed
        raise DocumentError(f"{path}: nests deeper than the parser can follow; refused") from None
    _check_tree(loaded, where=str(path), limit=MAX_NESTING)
    return loaded
