"""Meta-tests that keep the documentation honest.

* the generated references (``docs/hooks.md``, ``docs/configuration.md``) match the code;
* every hook is documented, in the fixed docstring shape, and every hook has a test;
* every configuration key and its environment variable is documented;
* the code examples marked as tested in the docs run, in a fresh directory.

Marking a doc example: put ``<!-- test: run -->`` on the line before a ```` ```python ```` fence
to execute the block, or ``<!-- test: write NAME -->`` before any fence to write the block to the
file ``NAME`` (a ``monoagent.toml``, a ``monoagent_local.py``) for the blocks after it. The blocks
of one page run in order, in one temporary directory.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
from pathlib import Path

import attrs
import pluggy
import pytest

import monoagent.kernel.hookspecs
from monoagent.cli import docgen
from monoagent.kernel.config_keys import iter_keys

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TESTS = ROOT / "tests"
REGENERATE = "run `python -m monoagent.cli.docgen` and commit the result"

MARKER = re.compile(r"^<!--\s*test:\s*(?P<action>run|write)(?:\s+(?P<target>\S+))?\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")


def hook_names() -> list[str]:
    pm = pluggy.PluginManager(monoagent.kernel.hookspecs.PROJECT)
    pm.add_hookspecs(monoagent.kernel.hookspecs)
    return sorted(name for name, caller in vars(pm.hook).items() if getattr(caller, "spec", None) is not None)


# ============================================================================ generated references


@pytest.mark.parametrize(("name", "render"), [("hooks.md", docgen.render_hooks), ("configuration.md", docgen.render_configuration)])
def test_generated_docs_are_fresh(name: str, render) -> None:
    path = DOCS / name
    assert path.is_file(), f"docs/{name} is missing; {REGENERATE}"
    assert render() == path.read_text(encoding="utf-8"), f"docs/{name} is stale; {REGENERATE}"


def test_docgen_check_names_the_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert docgen.main(["--docs-dir", str(tmp_path)]) == 0
    assert docgen.main(["--check", "--docs-dir", str(tmp_path)]) == 0
    (tmp_path / "hooks.md").write_text("# stale\n", encoding="utf-8")
    capsys.readouterr()
    assert docgen.main(["--check", "--docs-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "hooks.md is stale" in err and "configuration.md" not in err


def test_generated_docs_are_deterministic() -> None:
    hooks, configuration = docgen.render_hooks(), docgen.render_configuration()
    assert (hooks, configuration) == (docgen.render_hooks(), docgen.render_configuration())
    for text in (hooks, configuration):
        assert str(ROOT) not in text and str(Path.home()) not in text


# ============================================================================ hooks


def test_every_hook_is_documented() -> None:
    text = (DOCS / "hooks.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^#{2,4} `?(\w+)`?\s*$", text, flags=re.MULTILINE))
    problems = []
    for name in hook_names():
        if name not in headings:
            problems.append(f"{name}: no heading in docs/hooks.md")
        doc = " ".join((getattr(monoagent.kernel.hookspecs, name).__doc__ or "").split())
        if "First non-None result wins" not in doc and "Results are collected" not in doc:
            problems.append(f"{name}: docstring says neither 'First non-None result wins' nor 'Results are collected'")
        if "Bundled default" not in doc:
            problems.append(f"{name}: docstring does not say what the 'Bundled default' is")
    assert not problems, "\n".join(problems)


def test_hook_families_follow_the_banners() -> None:
    families = docgen.hook_families()
    assert [family for family, _ in families] == ["registries", "lifecycle", "section producers", "turn steps"]
    documented = sorted(hook.__name__ for _, hooks in families for hook in hooks)
    assert documented == hook_names()


def test_firstresult_wording_matches_the_marker() -> None:
    for name in hook_names():
        hook = getattr(monoagent.kernel.hookspecs, name)
        doc = " ".join((hook.__doc__ or "").split())  # the phrases may wrap
        if hook.monoagent_spec["firstresult"]:
            assert "First non-None result wins" in doc, name
        else:
            assert "Results are collected" in doc, name


def _test_functions(root: Path) -> set[str]:
    names: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names.update(
            node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        )
    return names


def test_every_hook_has_a_test() -> None:
    defined = _test_functions(TESTS)
    missing = [name for name in hook_names() if f"test_hook_{name}" not in defined]
    assert not missing, "hooks without a test_hook_<name> test under tests/: " + ", ".join(missing)


# ============================================================================ configuration


def test_every_config_key_is_documented() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    keys = list(iter_keys())
    for path, _plugin, cls in docgen.bundled_config_sections():
        keys.extend(iter_keys(cls, path + "."))
    problems = []
    for key in keys:
        if f"`{key.path}`" not in text:
            problems.append(f"{key.path}: not in docs/configuration.md")
        if key.env and f"`{key.env}`" not in text:
            problems.append(f"{key.path}: its env var {key.env} is not in docs/configuration.md")
    assert not problems, "\n".join(problems) + f"\n{REGENERATE}"


@pytest.mark.parametrize(
    "switch",
    [
        "MONO_AGENT_CONFIG",
        "MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD",
        "MONO_AGENT_LOAD_PLUGINS",
        "MONO_AGENT_BLOCK_PLUGINS",
        "MONO_AGENT_STRICT_PLUGINS",
        "MONO_AGENT_TRACE_HOOKS",
        "MONO_AGENT_HOME",
    ],
)
def test_every_switch_is_documented(switch: str) -> None:
    assert f"| `{switch}` |" in (DOCS / "configuration.md").read_text(encoding="utf-8")


def test_switch_precedence_matches_plugins_docstring() -> None:
    """writing-plugins.md repeats the switch list of plugins.py word for word."""
    guide = (DOCS / "writing-plugins.md").read_text(encoding="utf-8")
    assert docgen.switch_precedence() in guide, (
        "the switch list in docs/writing-plugins.md differs from monoagent.kernel.host' docstring; "
        "copy it from docs/configuration.md after regenerating"
    )


# ============================================================================ hand-written pages


def _emitted_event_names() -> set[str]:
    """Every literal event name the turn pipeline emits (``turn.emit("name", ...)``)."""
    names = set()
    nodes = [
        node
        for path in sorted((ROOT / "core" / "monoagent" / "pipeline").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
    ]
    for node in nodes:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "emit"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def test_architecture_lists_every_event() -> None:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    names = _emitted_event_names()
    assert "run_started" in names and "run_completed" in names
    missing = sorted(name for name in names if f"`{name}`" not in text)
    assert not missing, f"events the harness emits but docs/architecture.md does not list: {missing}"


def test_architecture_lists_every_manifest_field() -> None:
    from monoagent.kernel.model import PromptManifest

    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    missing = [f.name for f in attrs.fields(PromptManifest) if f"`{f.name}`" not in text]
    assert not missing, f"PromptManifest fields missing from docs/architecture.md: {missing}"


def test_mkdocs_nav_points_at_existing_pages() -> None:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = re.findall(r":\s*(\S+\.md)\s*$", text, flags=re.MULTILINE)
    assert pages, "mkdocs.yml has no nav"
    missing = [page for page in pages if not (DOCS / page).is_file()]
    assert not missing, f"mkdocs.yml lists pages that do not exist: {missing}"


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's ``toc`` extension (mkdocs) gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    anchors, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"^#{1,6}\s+(.*?)\s*$", line)):
            anchors.add(_slug(match[1]))
    return anchors


def test_relative_links_resolve() -> None:
    """Every relative link in the README and the docs points at an existing file and heading."""
    problems = []
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path) if path else page
            if not linked.exists():
                problems.append(f"{page.relative_to(ROOT)} links to {target}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                problems.append(f"{page.relative_to(ROOT)} links to {target}: no such heading")
    assert not problems, "\n".join(problems)


def test_readme_has_exactly_two_setup_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```(?:bash|sh|shell|console)\s*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    assert len(blocks) == 2, f"README.md must have exactly two shell blocks (the set-up commands), found {len(blocks)}"
    assert all(block.strip().startswith("python3 -m venv .venv && ") for block in blocks)


# ============================================================================ executable examples


@attrs.frozen
class Example:
    page: str
    line: int
    action: str
    target: str | None
    lang: str
    code: str


def doc_examples(path: Path) -> list[Example]:
    """The marked code blocks of one page, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    examples = []
    i = 0
    while i < len(lines):
        marker = MARKER.match(lines[i].strip())
        i += 1
        if not marker:
            continue
        while i < len(lines) and not lines[i].strip():
            i += 1
        fence = FENCE.match(lines[i].strip()) if i < len(lines) else None
        assert fence, f"{path.name}:{i}: a '<!-- test: ... -->' marker must be followed by a code fence"
        start = i + 1
        end = start
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        action, target = marker["action"], marker["target"]
        assert action != "run" or fence["lang"] == "python", f"{path.name}:{i + 1}: only python blocks can run"
        assert action != "write" or target, f"{path.name}:{i}: 'write' needs a file name"
        examples.append(Example(path.name, start + 1, action, target, fence["lang"], "\n".join(lines[start:end]) + "\n"))
        i = end + 1
    return examples


PAGES_WITH_EXAMPLES = [p for p in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))] if p.is_file() and doc_examples(p)]


def test_writing_plugins_examples_are_marked() -> None:
    examples = doc_examples(DOCS / "writing-plugins.md")
    runnable = [e.code for e in examples if e.action == "run"]
    assert len(runnable) >= 2
    assert any("register_tools" in code for code in runnable), "the 'register a tool' example must run"
    written = {e.target for e in examples if e.action == "write"}
    assert "monoagent_local.py" in written, "the 'override one section' example must be executed"


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory; no MONO_AGENT_* or user config of the machine leaks in."""
    for name in list(os.environ):
        if name.startswith("MONO_AGENT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MONO_AGENT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("page", PAGES_WITH_EXAMPLES, ids=lambda p: p.name)
def test_docs_python_examples_run(page: Path, isolated: Path) -> None:
    for example in doc_examples(page):
        if example.action == "write":
            target = isolated / example.target
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(example.code, encoding="utf-8")
            continue
        # padded so that a traceback shows the line number of the page itself
        code = compile("\n" * (example.line - 1) + example.code, str(page.relative_to(ROOT)), "exec")
        exec(code, {"__name__": f"doc_example_{example.line}"})


def test_readme_local_override_replaces_identity(isolated: Path) -> None:
    """The README's monoagent_local.py, dropped next to a monoagent.toml, replaces the identity section."""
    from monoagent.agent import Agent
    from monoagent.kernel.model import TurnRequest

    written = [e for e in doc_examples(ROOT / "README.md") if e.target == "monoagent_local.py"]
    assert len(written) == 1, "README.md must carry one '<!-- test: write monoagent_local.py -->' example"
    assert len(written[0].code.strip().splitlines()) <= 12, "keep the README example about ten lines"
    (isolated / "monoagent.toml").write_text("", encoding="utf-8")
    bundled = Agent.from_config("monoagent.toml")
    (isolated / "monoagent_local.py").write_text(written[0].code, encoding="utf-8")
    agent = Agent.from_config("monoagent.toml")
    before = asyncio.run(bundled.assemble(TurnRequest("hi")))
    after = asyncio.run(agent.assemble(TurnRequest("hi")))
    sources = {s.id: s.source for s in after.manifest.sections}
    assert sources["identity"] != {s.id: s.source for s in before.manifest.sections}["identity"]
    assert [s.id for s in after.manifest.sections] == [s.id for s in before.manifest.sections]
