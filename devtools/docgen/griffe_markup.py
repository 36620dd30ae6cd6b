"""The griffe extension the API reference (``docs/api/``) is built with: reST in Markdown docstrings.

The docstrings are Google-style sections (``Args:``, ``Returns:``) around reST inline markup:
Sphinx roles (:class:`~monoagent._kernel.model.Section`) and ``::`` literal blocks. They stay the
one source of truth, for ``help()``, for the hook reference (:mod:`devtools.docgen` renders
the same markup) and for this reference, so instead of rewriting them this extension translates
them as mkdocstrings loads them:

* a role becomes an autorefs cross-reference, shown as code, to the object's page anchor. A
  target that is not a dotted ``monoagent.`` path is looked up from the docstring's module, as
  Python would resolve the name there. The reference is *optional*: a role naming an object the
  reference does not document (a pipeline internal) renders as plain code instead of failing the
  strict build, because documenting a name is the page's choice, not the docstring's. A name
  exported by the package (``monoagent.tool``) links where it is defined; a hook
  (``monoagent._kernel.hookspecs.<name>``) links to its entry in the hook reference;
* a paragraph ending in ``::`` followed by an indented block becomes the paragraph (one colon)
  and a fenced Python block, which is what it means in reST;
* a definition list item, a ````term```` line with its indented definition under it, becomes a
  Markdown definition (``def_list``) instead of running into one paragraph with its neighbours.

mkdocs.yml names it (``extensions: [devtools.docgen.griffe_markup:RestMarkup]``); it needs the ``docs`` extra
(griffe) and is imported by nothing else.
"""

from __future__ import annotations

import html
import re
import textwrap
from typing import Any

import griffe

from devtools.docgen.api import exported_paths

HOOKSPECS = "monoagent._kernel.hookspecs."
ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj):`(?P<tilde>~?)(?P<target>[^`<>]+)`")
_LITERAL_INTRO = re.compile(r"(?P<text>.*?)\s*::\s*$")


def _resolve(target: str, obj: griffe.Object) -> str:
    """The dotted path ``target`` names, seen from ``obj``'s docstring (unchanged when unknown)."""
    if target.startswith("monoagent."):
        return exported_paths().get(target.removeprefix("monoagent."), target)  # monoagent.tool, monoagent.Agent, ...
    head = target.split(".", 1)[0]
    for scope in (obj if isinstance(obj, griffe.Class) else None, obj.parent, obj.module):
        if isinstance(scope, griffe.Object) and head in scope.members:
            member = scope.members[head]
            path = member.target_path if isinstance(member, griffe.Alias) else member.path
            return path + target[len(head):]
    return target


def roles_to_autorefs(text: str, obj: griffe.Object) -> str:
    """Every Sphinx role in ``text`` as an optional autorefs cross-reference shown as code."""

    def autoref(match: re.Match[str]) -> str:
        target = match["target"].strip()
        shown = target.rsplit(".", 1)[-1] if match["tilde"] else target
        path = _resolve(target, obj)
        if path.startswith(HOOKSPECS) and path[len(HOOKSPECS) :].isidentifier():
            path = path[len(HOOKSPECS) :]  # the hook's heading in hooks.md, which autorefs knows by its id
        identifier = html.escape(path, quote=True)
        return f'<autoref identifier="{identifier}" optional><code>{html.escape(shown)}</code></autoref>'

    return ROLE.sub(autoref, text)


def _indented(line: str) -> bool:
    return line.startswith((" ", "\t"))


def literal_blocks_to_fences(text: str) -> str:
    """reST ``paragraph::`` + indented block -> ``paragraph:`` + a fenced Python block."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        match = _LITERAL_INTRO.fullmatch(line)
        if not match or not line.strip() or _indented(line):
            out.append(line)
            i += 1
            continue
        end = i + 1
        while end < len(lines) and (not lines[end].strip() or _indented(lines[end])):
            end += 1
        block = textwrap.dedent("\n".join(lines[i + 1 : end])).strip("\n")
        if not block:
            out.append(line)
            i += 1
            continue
        if match["text"].strip():
            out.extend([match["text"] + ":", ""])
        out.extend(["```python", *block.splitlines(), "```", ""])
        i = end
    return "\n".join(out)


_TERM = re.compile(r"``[^`]+``")


def definition_lists(text: str) -> str:
    """reST ````term```` + indented definition -> Markdown's ``term`` / ``:   definition``."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if not _TERM.fullmatch(line.strip()) or _indented(line) or i >= len(lines) or not _indented(lines[i]):
            continue
        end = i
        while end < len(lines) and (_indented(lines[end]) or (not lines[end].strip() and end + 1 < len(lines) and _indented(lines[end + 1]))):
            end += 1
        definition = textwrap.dedent("\n".join(lines[i:end])).splitlines()
        out.extend([f":   {definition[0]}", *(f"    {d}" if d.strip() else "" for d in definition[1:]), ""])
        i = end
    return "\n".join(out)


class RestMarkup(griffe.Extension):
    """Translates each loaded docstring's reST markup (see the module docstring) before it is parsed."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        docstring = obj.docstring
        if docstring is None or obj.is_alias:
            return
        docstring.value = roles_to_autorefs(definition_lists(literal_blocks_to_fences(docstring.value)), obj)
