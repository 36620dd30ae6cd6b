"""``replace_file_durably`` (cron state, compaction summaries, artifacts) under a power cut, in the manner of ALICE.

The helper's promise: a reader sees the old bytes or the new, and the new once it returns. Every
state a power cut during it could leave is rebuilt by the crash-state enumeration of
:mod:`monoagent.testing.durability.filesystem` and read back; without either of its fsyncs (the
stage's, the directory's) a state breaks the promise.
"""

from __future__ import annotations

import shutil

import pytest

from monoagent import replace_file_durably
from monoagent.testing.durability.filesystem import FileSystemTap, available, crash_states, materialise

pytestmark = pytest.mark.skipif(not available(), reason="the file-system tap needs /proc/self/fd (Linux)")


@pytest.mark.parametrize("before", [b"old state", None], ids=["replacing", "creating"])
def test_a_durable_replacement_leaves_the_old_bytes_or_the_new_and_the_new_once_it_returns(tmp_path, before):
    base = tmp_path / "base"
    base.mkdir()
    target = base / "state.json"
    if before is not None:
        target.write_bytes(before)
    new = b'{"state": "new"}' * 64
    with FileSystemTap(base) as tap:
        replace_file_durably(target, new, stage_prefix=".state.")
    final, broken = len(tap.operations), []
    for n, (k, files) in enumerate(crash_states(tap.initial, tap.operations)):
        root = materialise(files, tap.modes, tap.directories, tmp_path / f"state-{n}")
        found = (root / "state.json").read_bytes() if (root / "state.json").exists() else None
        allowed = [new] if k == final else [before, new]
        if found not in allowed:
            broken.append(f"after operation {k} of {final}: {found[:20] if found else found!r}")
        shutil.rmtree(root)
    log = "\n  ".join(op.describe() for op in tap.operations)
    assert not broken, "\n".join(broken[:6]) + f"\noperations:\n  {log}"
