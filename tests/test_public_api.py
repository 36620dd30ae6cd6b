"""The public API: what `monoagent` exports, recorded so that a change of it is seen.

docs/api/public-api.txt records every name ``monoagent`` and ``monoagent.testing`` export, with its
signature (``python -m devtools.public_api`` writes it). A change of the surface makes the record
stale: the test lists what was removed or changed (a breaking change for plugins: say so under
"Plugin API" in CHANGELOG.md) and what was added, and the record is regenerated on purpose.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import monoagent
from devtools import public_api

ROOT = Path(__file__).resolve().parent.parent


def test_the_public_api_record_is_current():
    recorded = public_api.RECORD.read_text(encoding="utf-8")
    changed = public_api.difference(recorded, public_api.render())
    assert changed == [], (
        "the public API changed; a removed or changed line breaks plugins (say so in CHANGELOG.md), then run "
        "`python -m devtools.public_api`:\n" + "\n".join(changed)
    )


def test_every_export_resolves_and_is_named_by_its_declaration():
    for name in monoagent.__all__:
        assert getattr(monoagent, name) is not None, name
    assert set(dir(monoagent)) >= set(monoagent.__all__)
    try:
        monoagent.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no attribute 'no_such_name'" in str(exc)
    else:
        raise AssertionError("an unknown name must be an AttributeError")


def test_importing_monoagent_imports_no_private_module():
    """``import monoagent`` stays cheap: a name's module is imported only when the name is first used."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, monoagent; print(sorted(m for m in sys.modules if m.startswith('monoagent.')))"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )
    assert done.stdout.strip() == "[]"


def test_a_stale_record_names_the_difference(tmp_path, monkeypatch, capsys):
    record = tmp_path / "public-api.txt"
    current = public_api.render()
    assert "class Section(" in current
    record.write_text(current.replace("class Section(", "class Sections("), encoding="utf-8")
    monkeypatch.setattr(public_api, "RECORD", record)
    assert public_api.main(["--check"]) == 1
    shown = capsys.readouterr()
    assert "-class Sections(" in shown.out and "+class Section(" in shown.out
    assert "is stale; run: python -m devtools.public_api" in shown.err
