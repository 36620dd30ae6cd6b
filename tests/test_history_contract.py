"""The bundled ``files`` store passes the reusable history-store conformance suite."""

from __future__ import annotations

import os

from monoagent.testing import HistoryStoreContract
from monoagent_plugins.files_history import FilesHistoryStore
from monoagent_plugins.lib.history_directory import FsOps
from monoagent_plugins.lib.history_records import record_name


class TestFilesStoreContract(HistoryStoreContract):
    def make_store(self, tmp_path, *, max_messages=64, max_message_bytes=64 * 1024):
        return FilesHistoryStore(tmp_path / "history", max_messages, max_message_bytes=max_message_bytes)

    def corrupt(self, store, conversation_id):
        path = os.path.join(store.directory, record_name(conversation_id))
        with open(path, "rb") as handle:
            data = handle.read()
        with open(path, "wb") as handle:
            handle.write(data[: len(data) // 2])

    def replace_record(self, store, conversation_id, data):
        with open(os.path.join(store.directory, record_name(conversation_id)), "wb") as handle:
            handle.write(data)

    def pause_inside_commit(self, store, pause):
        """Pause each commit after its stage is written and fsynced, before the rename publishes it."""
        inner = store.fs

        class Paused(FsOps):
            def replace(self, src, dst):
                pause()
                inner.replace(src, dst)

        store.fs = Paused()


def test_contract_is_exported_from_testing():
    import monoagent.testing as testing
    import monoagent.testing.history_contract as contract

    assert testing.HistoryStoreContract is contract.HistoryStoreContract
    assert "HistoryStoreContract" in testing.__all__
