"""The layout keeps the architecture: the kernel imports no bundled plugin, and no module-level import cycles."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
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


def names_outside_docstrings(path: Path) -> set[str]:
    """Every imported module and string constant of a module's code; docstrings and comments aside."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.add(node.value)
    return found


def test_the_kernel_never_names_a_bundled_plugin():
    offenders = {
        name: sorted(n for n in names_outside_docstrings(path) if "monoagent_plugins" in n)
        for name, path in modules().items()
        if name.split(".")[0] == "monoagent"
    }
    assert {name: found for name, found in offenders.items() if found} == {}


FRESH_IMPORTS = """\
import importlib, sys, traceback
failed = {}
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m.split(".")[0] in ("monoagent", "monoagent_plugins")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception:
        failed[name] = traceback.format_exc(limit=-3)
for name, error in failed.items():
    print(f"--- {name}\\n{error}")
"""


def fresh_import_failures(names: list[str], *, path: Path | None = None) -> str:
    """What importing each module first, with none of its packages loaded yet, prints when it fails."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(path or ""), os.environ.get("PYTHONPATH", "")]))}
    run = subprocess.run([sys.executable, "-c", FRESH_IMPORTS, *names], capture_output=True, text=True, env=env, check=True)
    return run.stdout


def test_every_module_imports_first_without_a_partially_initialised_module():
    assert fresh_import_failures(sorted(name for name in modules() if not name.endswith(".__main__"))) == ""


def test_the_fresh_import_check_finds_a_runtime_cycle(tmp_path):
    package = tmp_path / "monoagent_plugins_probe"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "a.py").write_text("from monoagent_plugins_probe.b import B\nA = 1\n", encoding="utf-8")
    (package / "b.py").write_text("from monoagent_plugins_probe.a import A\nB = 2\n", encoding="utf-8")
    out = fresh_import_failures(["monoagent_plugins_probe.a"], path=tmp_path)
    assert "--- monoagent_plugins_probe.a" in out
    assert "partially initialized module" in out


MAX_LINES = 700
EXEMPT = {"monoagent._kernel.hookspecs"}  # the hook catalogue: one docstring per hook is its reference


def test_no_module_is_too_long_to_read_in_one_sitting():
    lengths = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules().items()}
    assert {name: n for name, n in lengths.items() if n > MAX_LINES and name not in EXEMPT} == {}


AMERICAN = re.compile(r"(?<!s)iz(e|es|ed|ing|er|ers|ation|ations)(?![a-z])")  # "size" is no spelling choice


def test_names_are_spelt_the_british_way():
    """``neutralise``, ``serialise``, ``sanitise``: the spelling the docs use, for every name we define."""
    defined = {
        (name, target)
        for name, path in modules().items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        for target in (
            [node.name] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            else [t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign)
            else []
        )
    }
    assert sorted((name, target) for name, target in defined if AMERICAN.search(target.lower())) == []
