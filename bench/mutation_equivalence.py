"""Which surviving mutants are equivalent: by rule (mechanically) or by review (a checked-in entry).

A mutant is *equivalent* when no caller can tell it from the original through the documented
interface; no contract can kill it, so the score leaves it out (the raw score beside it counts every
survivor). Two ways to say a mutant is equivalent, both reported apart, never hidden:

By rule. The mutant's only change is to one string literal (mutmut's string mutants wrap the text in
``XX`` or change its letter case), recognised from its syntax tree against the original's:

- ``log text``: the literal is inside a call on a logger (``logger``/``log``, ``.bind``/``.opt``
  chains included). Diagnostics: their wording is no part of any protocol.
- ``message wording``: the literal holds a space (so it is prose, not a code such as
  ``too_many_tool_calls``) and is inside a ``raise`` or an ``...Error(...)``/``...Exception(...)``
  construction. The words all stay; the contracts check what a message must name, not its case.
- ``SQL case``: the literal is SQL (it holds an upper-case SQL keyword, or a ``column = ?``
  comparison with a placeholder) and the mutant only changes its letter case outside its quoted SQL
  strings ('...', which are case-sensitive and must come out unchanged); SQLite ignores the case of
  keywords and identifiers.
- ``Row key case``: a case-only change of an ASCII string key subscripting a row that comes from a
  function of the same module declared to return ``sqlite3.Row`` values (``rows = self.query(...)``
  then ``rows[0]["n"]``, ``for r in rows: r["id"]``, ``self.query(...)[0]["n"]``): ``sqlite3.Row``
  looks its keys up without regard to ASCII case.
- ``codec case``: a case-only change of an encoding name passed to ``.encode``/``.decode`` (first
  argument) or as ``encoding=``, which :func:`codecs.lookup` resolves to the same codec either way.

By review. ``bench/mutation_equivalent/<target>.toml`` holds entries

    [[equivalent]]
    mutant = "monoagent_plugins.history.records.x_f__mutmut_3"
    digest = "<sha256 of the original and the mutated function>"
    reason = "one concrete line: why no caller can observe the change"

written by a person who read the mutant (``mutation.py TARGET --review-entry GLOB`` prints them with the
digest filled in and the diff as comments). An entry whose mutant changes only an error's text or a
log line that the docs promise adds ``promised = "<page>: <what the docs promise>"``. An entry applies only while its digest matches: when the
function's code changes the entry is reported stale and the mutant counts as a survivor again until
someone reviews it afresh. An entry for a mutant the contracts killed is reported too (the review was
wrong). Honest cases: a speed-up whose fallback gives byte-identical results; a defensive branch the
documented inputs cannot reach; a diagnostic string no rule covers. "Hard to test" is not one.

Strict. The strict score counts as survivors the equivalent mutants that are observable only through
error text or a log line *the docs promise*: the reviewed entries with ``promised``, and the
equivalent-by-rule ``log text`` and ``message wording`` mutants whose changed literal holds a
passage of at least :data:`PROMISE_MIN` characters that a page under ``docs/`` quotes verbatim
outside its Python blocks (:func:`promised_literal`).
"""

from __future__ import annotations

import ast
import codecs
import hashlib
import re
import tomllib
from pathlib import Path
from typing import Any

import attrs

REVIEW_DIR = Path(__file__).resolve().parent / "mutation_equivalent"
DOCS_DIR = Path(__file__).resolve().parent.parent / "docs"
PROMISE_MIN = 24
"""The shortest passage of a literal that, quoted verbatim by the docs, makes its text a promise."""

LOGGERS = {"logger", "log", "_log", "_logger", "logging"}
SQL_KEYWORD = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|PRAGMA|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|"
                         r"FROM|WHERE|VALUES|INTO|TABLE|INDEX|VACUUM|ANALYZE|REPLACE|AND|OR)\b")
SQL_COMPARISON = re.compile(r"\w\s*(?:=|!=|<>|<=|>=|<|>|\bIS\b|\bIN\b)\s*\(?\?")  # ``logical_id = ?``: a bound parameter
SQL_LITERAL = re.compile(r"'(?:[^']|'')*'")  # a quoted SQL string: its case matters
ROW_TYPE = "sqlite3.Row"


def _root_name(node: ast.expr) -> str | None:
    """The name an attribute/call chain starts from: ``logger`` for ``logger.bind(x=1).warning``."""
    while True:
        if isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Name):
            return node.id
        else:
            return None


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _differences(a: Any, b: Any, parents: tuple[ast.AST, ...]) -> list[tuple[Any, Any, tuple[ast.AST, ...]]]:
    """Where two syntax trees differ: the outermost differing nodes, each with its ancestors."""
    if type(a) is not type(b):
        return [(a, b, parents)]
    if isinstance(a, list):
        if len(a) != len(b):
            return [(a, b, parents)]
        return [d for x, y in zip(a, b, strict=True) for d in _differences(x, y, parents)]
    if not isinstance(a, ast.AST):
        return [] if a == b else [(a, b, parents)]
    found: list[tuple[Any, Any, tuple[ast.AST, ...]]] = []
    for field in a._fields:
        if field == "ctx":
            continue
        x, y = getattr(a, field, None), getattr(b, field, None)
        if isinstance(x, (ast.AST, list)):
            found += _differences(x, y, (*parents, a))
        elif x != y:
            return [(a, b, parents)]
    return found


def _one_difference(original: ast.AST, mutant: ast.AST) -> tuple[Any, Any, tuple[ast.AST, ...]] | None:
    """The one difference between two versions of a function (old node, new node, its parents), or None when not one."""
    assert isinstance(original, (ast.FunctionDef, ast.AsyncFunctionDef))
    assert isinstance(mutant, (ast.FunctionDef, ast.AsyncFunctionDef))
    differences = [d for field in ("args", "body", "decorator_list", "returns")
                   for d in _differences(getattr(original, field), getattr(mutant, field), (original,))]
    return differences[0] if len(differences) == 1 else None


def row_functions(module: ast.Module) -> frozenset[str]:
    """Names of the module's functions and methods declared to return ``sqlite3.Row`` values."""
    return frozenset(node.name for node in ast.walk(module)
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None
                     and ROW_TYPE in ast.unparse(node.returns) and "__mutmut_" not in node.name)


class _Rows:
    """Which expressions of one function are rows (``sqlite3.Row``) or lists of rows, by data flow."""

    def __init__(self, function: ast.FunctionDef | ast.AsyncFunctionDef, producers: frozenset[str]) -> None:
        self.producers = producers
        self.row_lists: set[str] = set()
        self.rows: set[str] = set()
        bindings: list[tuple[ast.expr, ast.expr, bool]] = []  # (target, value, iterated)
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                bindings.append((node.targets[0], node.value, False))
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                bindings.append((node.target, node.iter, True))
        for _ in range(3):  # a short chain of names at most
            for target, value, iterated in bindings:
                if not isinstance(target, ast.Name):
                    continue
                if (iterated and self.is_row_list(value)) or (not iterated and self.is_row(value)):
                    self.rows.add(target.id)
                elif not iterated and self.is_row_list(value):
                    self.row_lists.add(target.id)

    def is_row_list(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Call):
            return _callee(node) in self.producers
        return isinstance(node, ast.Name) and node.id in self.row_lists

    def is_row(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Subscript) and not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            return self.is_row_list(node.value)
        return isinstance(node, ast.Name) and node.id in self.rows


def _same_codec(a: str, b: str) -> bool:
    try:
        return codecs.lookup(a).name == codecs.lookup(b).name
    except LookupError:
        return False


def equivalence_rule(original: ast.AST, mutant: ast.AST, producers: frozenset[str] = frozenset()) -> str | None:
    """The rule (see the module docstring) under which ``mutant`` is equivalent, or None.

    ``producers`` names the module's functions declared to return ``sqlite3.Row`` values.
    """
    difference = _one_difference(original, mutant)
    if difference is None:
        return None
    a, b, parents = difference
    if not (isinstance(a, ast.Constant) and isinstance(b, ast.Constant) and isinstance(a.value, str) and isinstance(b.value, str)):
        return None
    calls = [p for p in parents if isinstance(p, ast.Call)]
    if any(_root_name(call.func) in LOGGERS for call in calls):
        return "log text"
    if " " in a.value and (any(isinstance(p, ast.Raise) for p in parents)
                           or any(_callee(call).endswith(("Error", "Exception")) for call in calls)):
        return "message wording"
    if a.value.lower() != b.value.lower():
        return None
    if ((SQL_KEYWORD.search(a.value) or SQL_COMPARISON.search(a.value))
            and SQL_LITERAL.findall(a.value) == SQL_LITERAL.findall(b.value)):
        return "SQL case"
    parent = parents[-1]
    if (isinstance(parent, ast.Subscript) and parent.slice is a and a.value.isascii()
            and _Rows(original, producers).is_row(parent.value)):
        return "Row key case"
    if isinstance(parent, ast.Call) and _same_codec(a.value, b.value) and (
            parent.args[:1] == [a] and _callee(parent) in ("encode", "decode")):
        return "codec case"
    if isinstance(parent, ast.keyword) and parent.arg == "encoding" and _same_codec(a.value, b.value):
        return "codec case"
    return None


PYTHON_BLOCK = re.compile(r"^```(?:python|py)\n.*?^```", re.MULTILINE | re.DOTALL)


def docs_text(directory: Path = DOCS_DIR) -> str:
    """Every page under ``directory`` (``docs/``), for :func:`promised_literal`, without its Python blocks.

    A Python block is example code (a third party's tier, a plugin): what it raises or logs is the
    example's, no promise about the bundled components; prose, tables and console blocks are kept.
    """
    return "\n".join(PYTHON_BLOCK.sub("", path.read_text(encoding="utf-8")) for path in sorted(directory.rglob("*.md")))


def promised_literal(original: ast.AST, mutant: ast.AST, docs: str) -> str | None:
    """The passage of the one string literal ``mutant`` changes that ``docs`` quotes verbatim, or None.

    A passage is a run of the literal between its format fields (``{}``), stripped, of at least
    :data:`PROMISE_MIN` characters; an f-string's parts are literals of their own.
    """
    difference = _one_difference(original, mutant)
    if difference is None:
        return None
    a, b, _ = difference
    if not (isinstance(a, ast.Constant) and isinstance(b, ast.Constant) and isinstance(a.value, str)):
        return None
    for passage in re.split(r"\{[^{}]*\}", a.value):
        passage = passage.strip(" ;:,.()")
        if len(passage) >= PROMISE_MIN and passage in docs:
            return passage
    return None


def digest(original: ast.FunctionDef | ast.AsyncFunctionDef, mutant: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """What a review entry was written against: the original and the mutated function's code."""
    text = ast.unparse(original) + "\n\0\n" + ast.unparse(mutant).replace(mutant.name, original.name, 1)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@attrs.frozen
class Review:
    mutant: str
    digest: str
    reason: str
    promised: str | None = None  # where the docs promise the text this mutant changes: strict counts it a survivor


class ReviewError(ValueError):
    """A review file that cannot be used; the message names the file, the entry and what is allowed."""


def load_reviews(target: str, directory: Path = REVIEW_DIR) -> dict[str, Review]:
    """The review entries of ``target`` (none when it has no file)."""
    path = directory / f"{target}.toml"
    if not path.is_file():
        return {}
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ReviewError(f"{path}: not valid TOML ({exc})") from None
    unknown = set(document) - {"equivalent"}
    if unknown:
        raise ReviewError(f"{path}: unknown table {sorted(unknown)[0]!r}; the file holds only [[equivalent]] entries")
    reviews: dict[str, Review] = {}
    for number, entry in enumerate(document.get("equivalent", []), 1):
        where = f"{path}: entry {number}"
        if not isinstance(entry, dict) or not {"mutant", "digest", "reason"} <= set(entry) <= {"mutant", "digest", "reason", "promised"}:
            keys = sorted(entry) if isinstance(entry, dict) else entry
            raise ReviewError(f"{where} has keys {keys}; an entry has exactly mutant, digest and reason, and may have promised")
        mutant, sha, reason, promised = entry["mutant"], entry["digest"], entry["reason"], entry.get("promised", "")
        if not all(isinstance(v, str) for v in (mutant, sha, reason, promised)):
            raise ReviewError(f"{where}: mutant, digest, reason and promised must be strings")
        if "promised" in entry and not re.fullmatch(r"docs/[\w./-]+\.md: .{10,}", promised):
            raise ReviewError(f"{where} ({mutant}): promised names the page and what it promises, "
                              f"as 'docs/<page>.md: <the promise>', not {promised!r}")
        if "__mutmut_" not in mutant:
            raise ReviewError(f"{where}: {mutant!r} is not a mutmut mutant name (module.function__mutmut_N)")
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ReviewError(f"{where} ({mutant}): digest must be 64 hex digits; --review-entry prints it")
        if len(reason.strip()) < 10:
            raise ReviewError(f"{where} ({mutant}): the reason is empty or too short; say why no caller can observe the change")
        if mutant in reviews:
            raise ReviewError(f"{where}: {mutant} is reviewed twice")
        reviews[mutant] = Review(mutant, sha, reason.strip(), promised or None)
    return reviews


def review_entry(mutant: str, sha: str, diff: str) -> str:
    """A TOML entry to fill in: the diff as comments, the digest set, the reason empty."""
    comments = "\n".join(f"# {line}".rstrip() for line in diff.splitlines())
    return f'{comments}\n[[equivalent]]\nmutant = "{mutant}"\ndigest = "{sha}"\nreason = ""\n'
