"""The API reference (docs/api/) documents exactly the public API, by its public names.

Every name ``monoagent`` and ``monoagent.testing`` export has an entry (a ``::: monoagent.Name``
directive) on one page of docs/api/, and no entry names anything else: not a private module
(``monoagent._kernel.model.Section``), not a name the package does not export. So the reference
cannot drift from the surface either way: an export added without an entry fails here, and so does
an entry left behind by a removed export. ``__version__`` and underscored names are not documented.
"""

from __future__ import annotations

from pathlib import Path

import monoagent
import monoagent.testing
from devtools.docgen import api as docgen_api
from devtools.docgen import hook_families

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PACKAGES = {"monoagent": monoagent, "monoagent.testing": monoagent.testing}


def exported() -> set[str]:
    """Every public name, qualified by the package that exports it (``monoagent.Section``)."""
    return {
        f"{package}.{name}"
        for package, module in PACKAGES.items()
        for name in module.__all__
        if not name.startswith("_")
    }


def entries(docs: Path = DOCS) -> dict[str, list[str]]:
    """Each ``::: path`` of the API pages under ``docs`` -> the pages it is on."""
    found: dict[str, list[str]] = {}
    for page in sorted((docs / "api").glob("*.md")):
        for path, _options in docgen_api._directives(page):
            found.setdefault(path, []).append(page.name)
    return found


def test_every_export_has_an_entry() -> None:
    missing = sorted(exported() - set(entries()))
    assert not missing, "exported but not documented in docs/api/ (add `::: <name>` to the page of its group): " + ", ".join(missing)


def test_every_entry_names_an_export() -> None:
    """No entry documents a private module's object, another module, or a name nobody exports.

    The packages themselves may have an entry: their docstring (``members: false``).
    """
    stray = sorted(f"{path} ({', '.join(pages)})" for path, pages in entries().items() if path not in exported() | set(PACKAGES))
    assert not stray, "docs/api/ documents names that are not exported (use the public name, or remove the entry): " + ", ".join(stray)


def test_each_export_is_documented_once() -> None:
    twice = sorted(f"{path} ({', '.join(pages)})" for path, pages in entries().items() if len(pages) > 1)
    assert not twice, "documented on more than one API page: " + ", ".join(twice)


def test_the_checks_see_a_stray_and_a_missing_entry(tmp_path: Path) -> None:
    """Both directions are seen: an entry by a private path is stray, and the public name it hid is missing."""
    (tmp_path / "api").mkdir()
    for page in (DOCS / "api").glob("*.md"):
        text = page.read_text(encoding="utf-8").replace("::: monoagent.Section\n", "::: monoagent._kernel.model.Section\n")
        (tmp_path / "api" / page.name).write_text(text, encoding="utf-8")
    documented = entries(tmp_path)
    assert set(documented) - exported() - set(PACKAGES) == {"monoagent._kernel.model.Section"}
    assert exported() - set(documented) == {"monoagent.Section"}


def test_the_hook_reference_links_public_names() -> None:
    """A type a hook names is linked by the name a plugin imports (``api/model.md#monoagent.Section``)."""
    text = (DOCS / "hooks.md").read_text(encoding="utf-8")
    entry = text.split("### section_identity", 1)[1].split("\n### ", 1)[0]
    assert "returns [`Section`](api/model.md#monoagent.Section)" in entry
    assert "](api/" in text and "](api/model.md#monoagent._kernel" not in text


def test_hooks_name_only_exported_types() -> None:
    """The types hook signatures name are exported, so a plugin can import what a hook gives it."""
    hooks = [hook for _, hooks in hook_families() for hook in hooks]
    assert docgen_api.private_types(hooks) == {}
