"""The stored text of attachments, for the ``artifact-refs`` plugin's ``artifact_read`` tool.

History keeps only an attachment's metadata (:class:`~monoagent._kernel.model.ArtifactRef`); its
text is kept here, beside the history, content-addressed by its artifact id
(:attr:`~monoagent._kernel.model.Attachment.artifact_id`, a digest of name, media type and text)::

    <history.dir>/artifacts/          0700
      art_<24 hex>.txt                0600, the attachment's text as UTF-8, at most MAX_BYTES

A file is written once (the same id is the same content), through a private stage that is
fsynced and renamed into place with the directory fsynced, as history publications are. Text
over :data:`MAX_BYTES` keeps its longest UTF-8-safe prefix and a marker saying so. Reading is
bounded before a byte is read (:func:`monoagent._boundary.files.read_regular_text`), and only a
name of exactly the id's shape ever reaches a path. Nothing here decides who may read what: the
tool checks that the id belongs to the turn's conversation first.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from monoagent import read_regular_text, replace_file_durably, utf8_prefix

DIRECTORY = "artifacts"
ARTIFACT_ID = re.compile(r"art_[0-9a-f]{24}")
MAX_BYTES = 1024 * 1024
"""The most of an attachment's text that is stored, in UTF-8 bytes."""


def artifact_path(root: Path, artifact_id: str) -> Path:
    """Where the artifact ``artifact_id`` is stored under the history directory ``root``."""
    if not ARTIFACT_ID.fullmatch(artifact_id):
        raise ValueError(f"{artifact_id!r} is not an artifact id (art_ and 24 hex digits)")
    return root / DIRECTORY / f"{artifact_id}.txt"


def store_text(root: Path, artifact_id: str, text: str) -> bool:
    """Store ``text`` as the artifact ``artifact_id`` unless it is stored already; True when written."""
    path = artifact_path(root, artifact_id)
    if os.path.lexists(path):
        return False
    kept = utf8_prefix(text, MAX_BYTES)
    data = kept.text
    if kept.truncated:
        data += f"\n[artifact text truncated: stored {kept.kept_bytes} of {kept.original_bytes} bytes]"
    replace_file_durably(path, data.encode("utf-8"), stage_prefix=".stage.", root=root)  # no symlink below root
    return True


def read_text(root: Path, artifact_id: str) -> str:
    """The stored text of ``artifact_id``; ``FileNotFoundError`` when none is stored, another
    ``OSError`` when the file is not a regular file or is over the cap."""
    return read_regular_text(artifact_path(root, artifact_id), MAX_BYTES + 256, what="artifact")
