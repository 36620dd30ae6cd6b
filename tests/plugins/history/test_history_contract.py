"""The bundled ``files`` store passes the reusable history-store conformance suite."""

from __future__ import annotations

import asyncio
import json
import os
from types import SimpleNamespace

import pytest

from monoagent._kernel.errors import HistoryStoreError
from monoagent._kernel.model import Message
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


def test_a_handle_checks_its_directories_at_first_use_and_the_next_handle_refuses_them_loosened(tmp_path):
    """docs/history.md, "Owner-only": the checks run once per store handle, at its first operation.

    A directory loosened after that (here to 0755) is not tightened again by anyone; the running
    handle carries on, and the next one (the next process) refuses it, naming the mode.
    """
    store = TestFilesStoreContract().make_store(tmp_path)
    asyncio.run(store.commit("c", [Message("user", "one")]))
    os.chmod(store.directory, 0o755)
    asyncio.run(store.commit("c", [Message("user", "two")]))
    assert [m.content for m in asyncio.run(store.load("c"))] == ["one", "two"]
    assert os.stat(store.directory).st_mode & 0o777 == 0o755, "nothing tightens the directory again"
    with pytest.raises(HistoryStoreError, match=r"mode 0755; it must be owner-only \(0700\)"):
        asyncio.run(TestFilesStoreContract().make_store(tmp_path).load("c"))



def files_store(tmp_path, **kwargs):
    return TestFilesStoreContract().make_store(tmp_path, **kwargs)


def test_files_named_like_the_stores_are_logged_once_as_one_line_naming_them(tmp_path):
    """docs/history.md, "Only its own files": look-alikes are left alone and logged once, as one line per directory."""
    from monoagent import logger

    store = files_store(tmp_path)
    asyncio.run(store.commit("c", [Message("user", "one")]))
    root, stages = store.directory, os.path.join(store.directory, ".stages")
    planted = {
        root: ["-" + "y" * 200 + ".json", "NOTES.JSON", ".reset.x"] + [f"look-{i:02d}.json" for i in range(8)],  # 11
        stages: [f"junk-{i}" for i in range(10)],
    }
    for directory, names in planted.items():
        for name in names:
            with open(os.path.join(directory, name), "w") as handle:
                handle.write("{}")
    with open(os.path.join(root, "README.txt"), "w") as handle:
        handle.write("not named like a record")
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="WARNING", format="{message}")
    logger.enable("monoagent_plugins")
    try:
        for _ in range(2):
            asyncio.run(store.conversations())
            asyncio.run(store.stats())
    finally:
        logger.disable("monoagent_plugins")
        logger.remove(sink)

    def shown(name: str) -> str:
        text = repr(name)
        return text if len(text) <= 120 else text[:117] + "..."

    def line(directory: str, names: list[str]) -> str:
        ordered = sorted(names)
        more = f" and {len(ordered) - 10} more" if len(ordered) > 10 else ""
        return (f"{len(ordered)} file(s) in {directory} are not the store's own (a name of its exact shape, a regular file, "
                f"this user's) and were left untouched: " + ", ".join(shown(n) for n in ordered[:10]) + more)

    logged = sorted(line for line in lines if "not the store's own" in line)
    assert logged == sorted(line(directory, names) for directory, names in planted.items()), logged


@pytest.mark.parametrize(
    ("failing", "says"),
    [("fsync", "could not stage the turn of conversation 'write \\u2028 fails'"),
     ("replace", "could not publish the turn of conversation 'write \\u2028 fails'"),
     ("fsync_dir", "the turn of conversation 'write \\u2028 fails' was written but the history directory could not be synced")],
)
def test_a_failed_commit_names_the_conversation_and_the_os_error(tmp_path, failing, says):
    """docs/history.md, "Failures": the message names the conversation and the OS error."""

    class Failing(FsOps):
        pass

    def fail(self, *args):
        raise OSError(5, "Input/output error (planted)")

    setattr(Failing, failing, fail)
    store = files_store(tmp_path)
    asyncio.run(store.commit("write \u2028 fails", [Message("user", "one")]))
    store.fs = Failing()
    with pytest.raises(HistoryStoreError) as raised:
        asyncio.run(store.commit("write \u2028 fails", [Message("user", "two")]))
    assert says in str(raised.value) and "Input/output error (planted)" in str(raised.value), str(raised.value)


@pytest.mark.parametrize("unsafe", ["a symlink", "a fifo"])
def test_an_unsafe_file_at_a_records_name_is_refused_with_an_error_naming_it(tmp_path, unsafe):
    """docs/history.md, "Owner-only": the store refuses a symlinked record with an error naming the path."""
    store = files_store(tmp_path)
    asyncio.run(store.commit("c", [Message("user", "one")]))
    path = os.path.join(store.directory, record_name("c"))
    os.unlink(path)
    if unsafe == "a symlink":
        os.symlink(tmp_path / "elsewhere.json", path)
    else:
        os.mkfifo(path)
    with pytest.raises(HistoryStoreError, match=record_name("c").replace(".", r"\.")):
        asyncio.run(files_store(tmp_path).commit("c", [Message("user", "two")]))


@pytest.mark.parametrize(
    ("data", "says"),
    [(b"\xff\xfe not text", "it is not UTF-8 (byte 0)"),
     (b'{"version": 2, ', "not valid JSON"),
     (b"[1, 2]", "it holds a JSON list, not a record object"),
     (json.dumps({"version": 2, "conversationId": "another", "logicalConversationId": "another", "updatedAt": 1.0,
                  "messages": []}).encode(), "it names another conversation")],
    ids=["not UTF-8", "not JSON", "not an object", "another conversation"],
)
def test_an_unreadable_records_warning_says_what_is_wrong(tmp_path, data, says):
    """docs/history.md, "Unreadable records start cold": a one-line message saying what is wrong."""
    store = files_store(tmp_path)
    asyncio.run(store.commit("c", [Message("user", "one")]))
    with open(os.path.join(store.directory, record_name("c")), "wb") as handle:
        handle.write(data)
    warnings: list[tuple[str, str]] = []
    assert asyncio.run(files_store(tmp_path).load("c", on_warning=lambda code, message: warnings.append((code, message)))) == ()
    [(code, message)] = warnings
    assert code == "history_record_unreadable" and says in message and "\n" not in message, message
