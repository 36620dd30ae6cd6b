"""Meta-tests that keep the documentation honest.

* the generated references (``docs/hooks.md``, ``docs/configuration.md``) match the code;
* every hook is documented, in the fixed docstring shape, and every hook has a test;
* every configuration key and its environment variable is documented;
* the code examples marked as tested in the docs run, in a fresh directory;
* the whole site builds with ``mkdocs build --strict`` (the API reference included), every type a
  hook names has an API reference entry, and the built hook reference's sidebar lists every hook.

Marking a doc example: put ``<!-- test: run -->`` on the line before a ```` ```python ```` fence
to execute the block, or ``<!-- test: write NAME -->`` before any fence to write the block to the
file ``NAME`` (a ``monoagent.toml``, a ``monoagent_local.py``) for the blocks after it. The blocks
of one page run in order, in one temporary directory. Shell blocks (``console``, ``sh``, ``bash``)
carry ``<!-- test: console -->``, ``<!-- test: syntax REASON -->`` or ``<!-- test: skip REASON -->``:
tests/test_docs_console.py runs them (the convention is in tests/doc_console.py).
"""

from __future__ import annotations

import ast
import asyncio
import functools
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import attrs
import pluggy
import pytest

import monoagent._kernel.hookspecs
from devtools import docgen
from devtools.docgen import api as docgen_api
from monoagent._kernel.config_keys import iter_keys

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TESTS = ROOT / "tests"
REGENERATE = "run `python -m devtools.docgen` and commit the result"

MARKER = re.compile(r"^<!--\s*test:\s*(?P<action>run|write)(?:\s+(?P<target>\S+))?\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")


def hook_names() -> list[str]:
    pm = pluggy.PluginManager(monoagent._kernel.hookspecs.PROJECT)
    pm.add_hookspecs(monoagent._kernel.hookspecs)
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
        doc = " ".join((getattr(monoagent._kernel.hookspecs, name).__doc__ or "").split())
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
        hook = getattr(monoagent._kernel.hookspecs, name)
        doc = " ".join((hook.__doc__ or "").split())  # the phrases may wrap
        if hook.monoagent_spec["firstresult"]:
            assert "First non-None result wins" in doc, name
        else:
            assert "Results are collected" in doc, name


def test_hook_reference_lists_the_section_catalogue() -> None:
    """The catalogue table of docs/hooks.md says, row by row, what each section hook's declaration says."""
    from monoagent._kernel.hookspecs import SECTIONS

    text = (DOCS / "hooks.md").read_text(encoding="utf-8")
    header = "| Order | Id | Hook | Stability | Assembly sets | Required | Profiles | Per round |"
    assert header in text, f"docs/hooks.md has no section catalogue table; {REGENERATE}"
    lines = text[text.index(header):].splitlines()[2:]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[: lines.index("")]]
    documented = [
        (
            int(order), ident.strip("`"), re.findall(r"\[`(\w+)`\]", hook), stability,
            assembly_sets == "id, order and stability", required == "yes",
            tuple(re.findall(r"`(\w+)`", profiles)), per_round == "yes",
        )
        for order, ident, hook, stability, assembly_sets, required, profiles, per_round in rows
    ]
    declared = [
        (spec.order, spec.id, [hook.__name__ for hook in spec.hooks], spec.stability, spec.fixed_stability,
         spec.required, spec.profiles, spec.per_round)
        for spec in SECTIONS
    ]
    assert documented == declared, REGENERATE


def test_every_section_hook_states_its_catalogue_facts() -> None:
    text = (DOCS / "hooks.md").read_text(encoding="utf-8")
    from monoagent._kernel.hookspecs import SECTIONS

    for spec in SECTIONS:
        entry = text[text.index(f"### {spec.name}\n"):]
        line = next(line for line in entry.splitlines() if line.startswith("**Section:**"))
        assert line.startswith(f"**Section:** `{spec.id}`, order {spec.order}, {spec.stability};"), (spec.name, line)
        for alias in spec.aliases:
            entry = text[text.index(f"### {alias.__name__}\n"):]
            assert f"as a deprecated alias of [`{spec.name}`]" in entry.split("\n### ", 1)[0], alias.__name__


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
        "the switch list in docs/writing-plugins.md differs from monoagent._kernel.host' docstring; "
        "copy it from docs/configuration.md after regenerating"
    )


# ============================================================================ hand-written pages


def _emitted_event_names() -> set[str]:
    """Every literal event name the turn pipeline emits (``turn.emit("name", ...)``)."""
    names = set()
    nodes = [
        node
        for path in sorted((ROOT / "core" / "monoagent" / "_pipeline").glob("*.py"))
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
    from monoagent._kernel.model import PromptManifest

    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    missing = [f.name for f in attrs.fields(PromptManifest) if f"`{f.name}`" not in text]
    assert not missing, f"PromptManifest fields missing from docs/architecture.md: {missing}"


def test_mkdocs_nav_points_at_existing_pages() -> None:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = re.findall(r":\s*(\S+\.md)\s*$", text, flags=re.MULTILINE)
    assert pages, "mkdocs.yml has no nav"
    missing = [page for page in pages if not (DOCS / page).is_file()]
    assert not missing, f"mkdocs.yml lists pages that do not exist: {missing}"


@functools.cache
def _api_index() -> dict[str, str]:
    return docgen_api.api_index(DOCS)


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's ``toc`` extension (mkdocs) gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    """The headings' anchors, and on an API page the anchors mkdocstrings gives what it documents."""
    page = page.resolve()
    where = page.relative_to(DOCS).as_posix() if page.is_relative_to(DOCS) else None
    anchors = {path for path, api_page in _api_index().items() if api_page == where}
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"^#{1,6}\s+(.*?)\s*$", line)):
            anchors.add(_slug(match[1]))
    return anchors


def test_relative_links_resolve() -> None:
    """Every relative link in the README and the docs points at an existing file and heading."""
    problems = []
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
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


# ============================================================================ the site (mkdocs, the API reference)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole site, built as CI builds it: ``mkdocs build --strict`` (any warning fails it)."""
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stdout}{build.stderr}"
    return out


class _Sidebar(HTMLParser):
    """The link texts of the theme's table-of-contents sidebar (``div.bs-sidebar``) of one page."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0  # open <div>s inside the sidebar; 0 = outside it
        self.in_link = False
        self.entries: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "div" and (self.depth or "bs-sidebar" in classes):
            self.depth += 1
        elif tag == "a" and self.depth and "nav-link" in classes:
            self.in_link = True
            self.entries.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "div" and self.depth:
            self.depth -= 1
        elif tag == "a":
            self.in_link = False

    def handle_data(self, data: str) -> None:
        if self.in_link:
            self.entries[-1] += data.strip()


def sidebar_entries(page: Path) -> list[str]:
    parser = _Sidebar()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.entries


@pytest.mark.slow
def test_site_builds_strict_with_the_api_reference(site: Path) -> None:
    """The build passed (the fixture); each API page rendered what its directives name."""
    for page in sorted((DOCS / "api").glob("*.md")):
        built = site / "api" / ("" if page.stem == "index" else page.stem) / "index.html"
        assert built.is_file(), f"{page.relative_to(ROOT)} was not built"
    html = (site / "api" / "model" / "index.html").read_text(encoding="utf-8")
    assert 'id="monoagent.Section"' in html and 'id="monoagent.TurnRequest"' in html  # by their public names


@pytest.mark.slow
def test_hook_reference_sidebar_lists_every_hook(site: Path) -> None:
    entries = sidebar_entries(site / "hooks" / "index.html")
    assert [family.capitalize() for family, _ in docgen.hook_families()] == [e for e in entries if e in {"Registries", "Lifecycle", "Section producers", "Turn steps"}]
    missing = [name for name in hook_names() if name not in entries]
    assert not missing, f"hooks missing from the hook reference's sidebar: {missing}"


@pytest.mark.slow
def test_api_reference_renders_rest_roles_as_links(site: Path) -> None:
    """Sphinx roles in docstrings become links to the documented object; none shows as raw reST."""
    pages = {p.relative_to(site).as_posix(): p.read_text(encoding="utf-8") for p in sorted((site / "api").rglob("index.html"))}
    raw = [page for page, html in pages.items() if re.search(r":(?:class|func|meth|attr|data|mod|exc|obj):", html)]
    assert not raw, f"raw reST roles in {raw}"
    # ProviderRuntime's docstring says :class:`~monoagent._kernel.model.TextDelta`: it links the public entry
    assert re.search(r'<a [^>]*href="\.\./model/#monoagent\.TextDelta"[^>]*><code>TextDelta</code></a>', pages["api/interfaces/index.html"])
    # monoagent.testing's "Typical use with pytest::" literal block is a code block, not prose
    testing = pages["api/testing/index.html"]
    assert "pytest::" not in testing and re.search(r"<pre>.*fresh_agent\(tmp_path", testing, flags=re.DOTALL)
    # a role naming a hook links its entry in the hook reference
    assert 'href="../../hooks/#register_providers"' in pages["api/registrars/index.html"]


def test_every_type_a_hook_names_has_an_api_entry() -> None:
    hooks = [hook for _, hooks in docgen.hook_families() for hook in hooks]
    assert docgen_api.undocumented(hooks, _api_index()) == []
    section = docgen_api.hook_types(monoagent._kernel.hookspecs.section_identity)
    assert section.returns == ("monoagent.Section",)  # named as a plugin imports it
    providers = docgen_api.hook_types(monoagent._kernel.hookspecs.register_providers)
    assert providers.registrar == "monoagent.ComponentRegistrar"
    assert providers.registers == ()  # the registrar's type variable names no object
    assert providers.builds == ("monoagent.ProviderRuntime",)


def test_hook_reference_links_the_returned_interface() -> None:
    text = (DOCS / "hooks.md").read_text(encoding="utf-8")
    entry = text.split("### section_identity", 1)[1].split("\n### ", 1)[0]
    assert "returns [`Section`](api/model.md#monoagent.Section)" in entry
    entry = text.split("### register_providers", 1)[1].split("\n### ", 1)[0]
    assert "[`ComponentRegistrar`](api/registrars.md#monoagent.ComponentRegistrar)" in entry
    assert "builds [`ProviderRuntime`](api/interfaces.md#monoagent.ProviderRuntime)" in entry


def test_a_hook_type_without_an_api_entry_stops_the_hook_reference(tmp_path: Path) -> None:
    """Without the data model's page, Section (and every other model type) has no entry: an error naming each."""
    shutil.copytree(DOCS / "api", tmp_path / "api")
    (tmp_path / "api" / "model.md").unlink()
    with pytest.raises(docgen_api.UndocumentedType) as raised:
        docgen.render_hooks(tmp_path)
    message = str(raised.value)
    assert "hook 'section_identity' names monoagent.Section, which no page of docs/api/ documents" in message
    assert "monoagent.Turn," not in message  # documented on api/agent.md


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
    from monoagent import Agent, TurnRequest

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
