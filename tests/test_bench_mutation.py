"""bench/mutation.py stages what it says and refuses what it cannot run (mutmut itself is not run here)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def mutation():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("mutation")
    finally:
        sys.path.remove(str(BENCH))


def test_every_target_names_modules_and_contract_tests_that_exist(mutation):
    repo = BENCH.parent
    for target in mutation.TARGETS.values():
        for module in target.modules:
            assert module.startswith("src/")
            source = repo / ("core" if module.startswith("src/monoagent/") else "plugins") / module.removeprefix("src/")
            assert source.is_file(), f"{target.name}: {module} is gone; update bench/mutation.py"
        for node in target.tests:
            path, _, cls = node.partition("::")
            text = (repo / path).read_text(encoding="utf-8")
            assert "Contract" in (cls or text), f"{target.name}: {node} is not a contract suite"
            if cls:
                assert f"class {cls}(" in text, f"{target.name}: no class {cls} in {path}"


def test_a_staging_tree_holds_the_code_the_tests_and_the_target_alone(mutation, tmp_path):
    target = mutation.TARGETS["offline"]
    root = mutation.stage(target, tmp_path)
    assert (root / "src" / "monoagent" / "kernel" / "hookspecs.py").is_file()
    assert (root / "src" / "monoagent_plugins" / "offline.py").is_file()
    assert (root / "tests" / "test_provider_runtime_contract.py").is_file()
    assert not list(root.rglob("__pycache__"))
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]
    assert config["only_mutate"] == list(target.modules)
    assert config["pytest_add_cli_args_test_selection"] == list(target.tests)
    # staging again starts from a clean copy (a previous run's mutants never leak into the next)
    (root / "mutants").mkdir()
    assert not (mutation.stage(target, tmp_path) / "mutants").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["nosuch"], "unknown target 'nosuch'; the targets are: files, "), (["--jobs", "0"], "--jobs must be at least 1, not 0")],
)
def test_bad_arguments_name_what_is_allowed(argv, message):
    run = subprocess.run([sys.executable, str(BENCH / "mutation.py"), *argv], capture_output=True, text=True, check=False)
    assert run.returncode == 2
    assert message in run.stderr
