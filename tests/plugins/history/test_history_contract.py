"""The bundled ``files`` store passes the reusable history-store conformance suite."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

from monoagent.testing import HistoryStoreContract
from monoagent_plugins.history.directory import FsOps
from monoagent_plugins.history.files import CONFIG_PATH, FilesHistoryConfig, store_from_config
from monoagent_plugins.history.records import record_name


class TestFilesStoreContract(HistoryStoreContract):
    def make_store(self, tmp_path, *, max_messages=64, max_message_bytes=64 * 1024, **bounds):
        """The store as the ``files`` registry entry builds it, from a ``history`` config section.

        ``bounds``: the optional ``max_stage_bytes``, ``max_conversations`` and ``max_bytes`` of the contract.
        """
        section = FilesHistoryConfig(max_messages=max_messages, max_message_bytes=max_message_bytes, **bounds)
        sections = {CONFIG_PATH: section}
        config = SimpleNamespace(history_dir=tmp_path / "history", section=lambda path, cls=None: sections[path])
        return store_from_config(SimpleNamespace(config=config))

    def storage_directory(self, store):
        return store.directory

    def corrupt(self, store, conversation_id):
        path = os.path.join(store.directory, record_name(conversation_id))
        with open(path, "rb") as handle:
            data = handle.read()
        with open(path, "wb") as handle:
            handle.write(data[: len(data) // 2])

    def replace_record(self, store, conversation_id, data):
        with open(os.path.join(store.directory, record_name(conversation_id)), "wb") as handle:
            handle.write(data)

    def newer_record(self, conversation_id):
        return json.dumps({"version": 3, "conversationId": conversation_id, "updatedAt": 1.0, "messages": []}).encode()

    def pause_inside_commit(self, store, pause):
        """Pause each commit after its stage is written and fsynced, before the rename publishes it."""
        inner = store.fs

        class Paused(FsOps):
            def replace(self, src, dst):
                pause()
                inner.replace(src, dst)

        store.fs = Paused()

    def pause_inside_reset(self, store, pause):
        """Pause before each record a logical reset removes (the journal is written by then)."""
        inner = store.fs

        class Paused(FsOps):
            def unlink(self, path):
                if path.endswith(".json"):
                    pause()
                inner.unlink(path)

        store.fs = Paused()

    def set_clock(self, store, clock):
        store.clock = clock


def test_contract_is_exported_from_testing():
    import monoagent.testing as testing
    import monoagent.testing.history_contract as contract

    assert testing.HistoryStoreContract is contract.HistoryStoreContract
    assert "HistoryStoreContract" in testing.__all__
