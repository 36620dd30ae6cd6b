"""Where the API reference documents each object, and which objects a hook's signature names.

The hook reference (``docs/hooks.md``) links every monoagent type a hook receives or returns to
its entry in the API reference (``docs/api/``). Neither side is a hand-kept table:

* the entries come from the mkdocstrings directives of the API pages (``::: dotted.path``, with
  an optional ``members`` list), read the way mkdocstrings reads them, so an object gets a link
  exactly when a page renders an anchor for it (``api/model.md#monoagent.Section``);
* the types come from the hookspecs' annotations, resolved through the imports of
  :mod:`monoagent._kernel.hookspecs` (its ``TYPE_CHECKING`` imports included, as mypy reads them)
  and named by their public name when ``monoagent`` exports them (``monoagent.Section``, the name
  the API reference documents and a plugin imports). A registry hook's registrar also leads to
  what its ``__call__`` takes and to the protocol the factory must build
  (``ComponentRegistrar[ProviderRuntime]`` -> ``ProviderRuntime``). Type variables are left out:
  they name no object.

An exported type a hook names that no API page documents is an :class:`UndocumentedType` error, so
the hook reference cannot be generated (and the suite fails) until a page documents it. A type
``monoagent`` does not export has no entry to link (the reference documents public names only):
:func:`private_types` lists those, so that a test keeps the list short and known.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, TypeVar

import attrs
import yaml

DIRECTIVE = re.compile(r"^:::\s+(?P<path>[\w.]+)\s*$")
PROJECT_PREFIX = "monoagent."


class UndocumentedType(ValueError):
    """A hook's signature names a monoagent type that no page of ``docs/api/`` documents."""


def _directives(page: Path) -> list[tuple[str, dict[str, Any]]]:
    """Each ``::: path`` of an API page with its YAML options (the indented block under it)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found = []
    for i, line in enumerate(lines):
        match = DIRECTIVE.match(line)
        if not match:
            continue
        end = i + 1
        while end < len(lines) and (not lines[end].strip() or lines[end].startswith((" ", "\t"))):
            end += 1
        block = yaml.safe_load(textwrap.dedent("\n".join(lines[i + 1 : end]))) or {}
        found.append((match["path"], dict(block.get("options") or {})))
    return found


def _public_names(module: ModuleType) -> list[str]:
    """The public top-level names a module defines in its source, as griffe sees them (plus ``__all__``)."""
    names: list[str] = list(getattr(module, "__all__", ()))
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names.extend(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [name for name in dict.fromkeys(names) if not name.startswith("_")]


def api_index(docs_dir: Path) -> dict[str, str]:
    """Dotted path -> the API page (relative to ``docs_dir``) that renders an anchor for it."""
    index: dict[str, str] = {}
    for page in sorted((docs_dir / "api").glob("*.md")):
        where = page.relative_to(docs_dir).as_posix()
        for path, options in _directives(page):
            index.setdefault(path, where)
            target = _import(path)
            if isinstance(target, ModuleType):
                for name in options.get("members") or _public_names(target):
                    index.setdefault(f"{path}.{name}", where)
    return index


def _import(path: str) -> Any:
    """The module or object at a dotted path."""
    module_path, _, attribute = path.rpartition(".")
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError:
        return getattr(importlib.import_module(module_path), attribute)


@functools.cache
def _scope(module_name: str) -> dict[str, str]:
    """Every name a module's annotations may use -> its dotted path: the module's own top-level
    definitions and its imports, those under ``if TYPE_CHECKING:`` included."""
    module = importlib.import_module(module_name)
    names = {name: f"{module_name}.{name}" for name in _public_names(module)}
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            names.update({a.asname or a.name: a.name for a in node.names})
    return names


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := _dotted(node.value)):
        return f"{base}.{node.attr}"
    return None


def annotation_types(annotation: Any, module_name: str) -> list[str]:
    """The monoagent objects an annotation names, as dotted paths, in the order they are written.

    ``annotation`` is what ``from __future__ import annotations`` leaves: a string, resolved
    through the names of ``module_name`` (:func:`_scope`); names from elsewhere (``str``,
    ``Sequence``, ``click.Group``) are not monoagent's and are left out.
    """
    if not isinstance(annotation, str):
        return []
    scope = _scope(module_name)
    found: list[str] = []
    nodes = [n for n in ast.walk(ast.parse(annotation, mode="eval")) if isinstance(n, (ast.Name, ast.Attribute, ast.Constant))]
    for node in sorted(nodes, key=lambda n: n.col_offset):
        if isinstance(node, ast.Constant):  # a quoted forward reference inside the annotation
            found.extend(annotation_types(node.value, module_name) if isinstance(node.value, str) else [])
            continue
        name = _dotted(node)
        head, _, rest = (name or "").partition(".")
        path = scope.get(head)
        if path and path.startswith(PROJECT_PREFIX):
            path = f"{path}.{rest}" if rest else path
            if not isinstance(_import(path), TypeVar):
                found.append(public_names().get(path, path))
    return list(dict.fromkeys(found))


@attrs.frozen
class HookTypes:
    """The monoagent types of one hook's signature, by role, as dotted paths."""

    arguments: tuple[str, ...] = ()
    returns: tuple[str, ...] = ()
    registrar: str | None = None
    registers: tuple[str, ...] = ()
    """What the registrar's ``__call__`` takes (the factory protocol, a tool spec, ...)."""
    builds: tuple[str, ...] = ()
    """What the factories it takes must return (the component's protocol)."""

    def every(self) -> tuple[str, ...]:
        paths = (*self.arguments, *self.returns, *([self.registrar] if self.registrar else []), *self.registers, *self.builds)
        return tuple(dict.fromkeys(paths))


def _called_with(cls: type) -> list[str]:
    """The monoagent types the parameters of ``cls.__call__`` name (a registrar's, a factory's)."""
    call = inspect.signature(cls.__call__)
    module = cls.__module__
    return list(dict.fromkeys(p for param in call.parameters.values() for p in annotation_types(param.annotation, module)))


def hook_types(hook: Callable[..., Any]) -> HookTypes:
    """The monoagent types ``hook`` receives and returns; for a registry hook, its registrar's too."""
    from monoagent._kernel.registrars import Registrar

    signature = inspect.signature(hook)
    module = hook.__module__
    arguments: list[str] = []
    registrar: str | None = None
    builds: list[str] = []
    for param in signature.parameters.values():
        paths = annotation_types(param.annotation, module)
        for index, path in enumerate(paths):
            target = _import(path)
            if registrar is None and isinstance(target, type) and issubclass(target, Registrar):
                registrar = path
                builds.extend(paths[index + 1 :])  # ComponentRegistrar[ProviderRuntime]: the kind's protocol
                break
            arguments.append(path)
    registers: list[str] = []
    if registrar is not None:
        registers = _called_with(_import(registrar))
        for path in registers:
            factory = _import(path)
            if isinstance(factory, type) and Protocol in factory.__mro__ and "__call__" in vars(factory):  # a factory
                returned = inspect.signature(factory.__call__).return_annotation
                builds.extend(annotation_types(returned, factory.__module__))
    return HookTypes(
        arguments=tuple(dict.fromkeys(arguments)),
        returns=tuple(annotation_types(signature.return_annotation, module)),
        registrar=registrar,
        registers=tuple(registers),
        builds=tuple(dict.fromkeys(builds)),
    )


def exported_paths() -> dict[str, str]:
    """The names ``monoagent`` exports (``monoagent.tool``) -> the dotted path where each is defined."""
    import monoagent

    return {name: f"{module}.{original}" for name, (module, original) in monoagent._exports().items()}


@functools.cache
def public_names() -> dict[str, str]:
    """Where an exported object is defined -> its public name
    (``monoagent._kernel.model.Section`` -> ``monoagent.Section``)."""
    return {path: f"{PROJECT_PREFIX}{name}" for name, path in exported_paths().items()}


def _is_public(path: str) -> bool:
    return path.startswith(PROJECT_PREFIX) and not any(part.startswith("_") for part in path.split("."))


def undocumented(hooks: list[Callable[..., Any]], index: dict[str, str]) -> list[str]:
    """One line per exported monoagent type a hook names that ``index`` has no entry for."""
    return [
        f"hook {hook.__name__!r} names {path}, which no page of docs/api/ documents (add `::: {path}` to one)"
        for hook in hooks
        for path in hook_types(hook).every()
        if _is_public(path) and path not in index
    ]


def private_types(hooks: list[Callable[..., Any]]) -> dict[str, list[str]]:
    """The types hooks name that ``monoagent`` does not export -> the hooks naming each."""
    found: dict[str, list[str]] = {}
    for hook in hooks:
        for path in hook_types(hook).every():
            if not _is_public(path):
                found.setdefault(path, []).append(hook.__name__)
    return found
