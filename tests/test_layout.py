"""The layout keeps the architecture: the kernel imports no bundled plugin, and no module-level import cycles."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"monoagent": ROOT / "core" / "monoagent", "monoagent_plugins": ROOT / "plugins" / "monoagent_plugins"}


def modules() -> dict[str, Path]:
    found = {}
    for package, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def module_level_imports(name: str, path: Path) -> set[str]:
    """What a module imports when it is imported: not under ``if TYPE_CHECKING``, not inside functions."""
    imported: set[str] = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(sub, ast.Import):
                imported.update(alias.name for alias in sub.names)
            elif isinstance(sub, ast.ImportFrom):
                base = ".".join(package[: len(package) - sub.level + 1] + [sub.module or ""]).strip(".") if sub.level else sub.module
                imported.add(base)
                imported.update(f"{base}.{alias.name}" for alias in sub.names)
    return imported


def test_the_kernel_imports_no_bundled_plugin():
    kernel = {name: path for name, path in modules().items() if name.split(".")[0] == "monoagent"}
    offenders = {
        name: sorted(i for i in imports if i.split(".")[0] == "monoagent_plugins")
        for name, path in kernel.items()
        if (imports := {i for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                        for i in ([a.name for a in node.names] if isinstance(node, ast.Import)
                                  else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])})
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle met by a depth-first walk of ``graph`` (module -> modules it imports)."""
    cycles: list[list[str]] = []
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycles.append(trail[trail.index(name):] + [name])
            return
        if name in done:
            return
        for dependency in sorted(graph.get(name, ())):
            visit(dependency, [*trail, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    return cycles


def test_there_is_no_module_level_import_cycle():
    found = modules()
    graph = {name: {i for i in module_level_imports(name, path) if i in found and i != name} for name, path in found.items()}
    assert import_cycles(graph) == []


def test_the_cycle_check_finds_a_cycle_through_from_imports(tmp_path):
    (tmp_path / "a.py").write_text("import b\nif TYPE_CHECKING:\n    import c\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("from a import x\n\ndef later():\n    import c\n", encoding="utf-8")
    (tmp_path / "c.py").write_text("import a\n", encoding="utf-8")
    graph = {name: module_level_imports(name, tmp_path / f"{name}.py") & {"a", "b", "c"} for name in "abc"}
    assert graph == {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert import_cycles(graph) == [["a", "b", "a"]]
