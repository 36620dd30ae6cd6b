"""Records in the documented ``files`` layout: what a store that reads them must do with them.

docs/history.md ("Layout") shows the record a file-based store writes: one compact JSON object
per conversation, ``version``, ``conversationId``, ``logicalConversationId``, ``updatedAt``,
optionally ``providerSession`` and last ``messages``. A store that writes that layout (the bundled
``files`` store, a fork of it) proves these clauses here, each at and either side of its boundary:

- **A newer version's message field survives.** A key the store does not know is ignored, so a
  record written by a newer version that added an optional field to its messages loads after a
  downgrade; a commit by the older version then keeps that field in every message it retains,
  so an upgrade again finds it (the messages a commit keeps are written back as they were read).
  A lone surrogate written raw into a message loads as the model's replacement character, never
  as an error.
- **A damaged record's warning says what is wrong.** For a field of the wrong type, a missing
  field, a version it does not write or a malformed provider session, the one-line
  ``history_record_unreadable`` message names the field at fault; damage of any size (ids,
  versions, roles of thousands of characters) is such a warning, and a newer version number of
  any size fails closed with ``HistoryStoreError``.
- **The documented bounds and shapes.** ``updatedAt`` from 0 to before the year 10000; the record
  cap to the byte; whitespace is no damage; a symlink, FIFO or directory at a record's name fails
  closed without blocking; content over the per-message cap ends with the documented marker.
- **The documented lock table.** Another process holding a conversation's shard lock
  (``.locks/shard-NN.lock``, ``NN`` the first 8 hex digits of ``L16`` read as a number, modulo 16)
  holds its commit back until it lets go.

The records are written with :meth:`~monoagent.testing.history_contract_support.HistoryContractBase.replace_record`
into the directory named by :meth:`~monoagent.testing.history_contract_storage.HistoryStorageContract.storage_directory`;
a store that provides neither hook, or whose own commits do not write the documented layout (it
keeps its own), skips these tests and says which.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from monoagent._kernel.errors import HistoryStoreError
from monoagent._kernel.model import Message, ToolCall
from monoagent._kernel.stores import logical_conversation_id
from monoagent.testing.history_contract_support import (
    DEADLINE,
    STAMP,
    HistoryContractBase,
    StoreThread,
    contents,
    turn_messages,
    turns_text,
)

EPOCH = "0123456789abcdef" * 2


def layout_message(index: int, **fields: Any) -> dict[str, Any]:
    """Message ``index`` of a record in the documented layout, as the ``files`` store serialises it (its key order)."""
    return {"role": "user" if index % 2 == 0 else "assistant", "content": f"stored {index}", "name": None,
            "timestamp": STAMP + index, "tool_calls": [], "tool_call_id": None, **fields}


def layout_record(conversation_id: str, messages: Any, **fields: Any) -> bytes:
    """A record of ``conversation_id`` in the documented layout: compact JSON, UTF-8, the keys in the documented order.

    Lone surrogates (in the id or a message) are written as their raw code units, as the ``files``
    store writes them (``surrogatepass``).
    """
    record = {"version": 2, "conversationId": conversation_id, "logicalConversationId": logical_conversation_id(conversation_id),
              "updatedAt": 1_700_000_000.5, "providerSession": {"epoch": EPOCH, "revision": 7, "model": "m:x"}, "messages": messages}
    record.update(fields)
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def shard_lock(storage: Path, conversation_id: str) -> Path:
    """The documented shard lock of ``conversation_id`` (docs/history.md, "Locks") under ``storage``."""
    logical16 = hashlib.sha256(logical_conversation_id(conversation_id).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return storage / ".locks" / f"shard-{int(logical16[:8], 16) % 16:02d}.lock"


def flock_waiters(path: Path) -> int:
    """How many ``flock`` requests wait on ``path`` (Linux ``/proc/locks`` marks a blocked request ``->``)."""
    inode = f":{path.stat().st_ino} "
    return sum(1 for line in Path("/proc/locks").read_text().splitlines() if "->" in line and inode in line)


def as_message(stored: dict[str, Any]) -> Message:
    """What a store loads for the layout message ``stored`` (the fields the model knows)."""
    return Message(stored["role"], stored["content"], name=stored["name"], timestamp=stored["timestamp"],
                   tool_calls=tuple(ToolCall(**call) for call in stored["tool_calls"]), tool_call_id=stored["tool_call_id"])


class HistoryRecordsContract(HistoryContractBase):
    """Records in the documented layout (mixed into :class:`~monoagent.testing.HistoryStoreContract`)."""

    def layout_store(self, tmp_path: Path, conversation_id: str) -> Any:
        """A store that writes the documented layout, with a record of ``conversation_id`` in it; else a skip saying why.

        Whether a store keeps that layout is judged by what its own commit writes (a JSON object
        with the conversation's ``conversationId`` and a ``messages`` array in a file under
        :meth:`~monoagent.testing.history_contract_storage.HistoryStorageContract.storage_directory`),
        never by what it reads, so a store that fails to read the layout it writes fails here
        instead of skipping; such a record must hold the documented keys in their order.
        """
        store = self.make_store(tmp_path)
        self.commit_turns(store, conversation_id, range(1))
        written = self.record_file(store, conversation_id)
        if written is None:
            import pytest

            self.close(store)
            pytest.skip("the store does not write the documented files layout (docs/history.md, Layout): it keeps its own, "
                        "so the clauses of that layout do not apply to it")
        text = written.read_bytes().decode("utf-8", "surrogatepass")
        keys = list(json.loads(text))
        assert keys[:4] == ["version", "conversationId", "logicalConversationId", "updatedAt"] and keys[-1] == "messages", (
            f"a record in the files layout holds the documented keys in their order, not {keys}"
        )
        assert text == json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":")), (
            "a record in the files layout is compact JSON (no whitespace between tokens, text unescaped)"
        )
        plain = [layout_message(0), layout_message(1)]
        self.replace_record(store, conversation_id, layout_record(conversation_id, plain))
        assert self.load(self.make_store(tmp_path), conversation_id) == [as_message(m) for m in plain], (
            "a record in the documented layout, as this store writes it, does not load"
        )
        return store

    def record_file(self, store: Any, conversation_id: str) -> Path | None:
        """The file under the store's storage directory holding the record of ``conversation_id`` in the files layout, if any."""
        storage: Path = self._storage(store)  # type: ignore[attr-defined]  # HistoryStorageContract, mixed in beside this class
        for path in sorted(storage.rglob("*")):
            if not path.is_file() or path.is_symlink():
                continue
            try:
                record = json.loads(path.read_bytes().decode("utf-8", "surrogatepass"))
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("conversationId") == conversation_id and isinstance(record.get("messages"), list):
                return path
        return None

    @staticmethod
    def stored_bytes(storage: Path) -> bytes:
        """Every regular file under ``storage``, concatenated (where a file-based store keeps its records)."""
        return b"".join(p.read_bytes() for p in sorted(storage.rglob("*")) if p.is_file() and not p.is_symlink())

    def test_contract_a_newer_message_field_survives_a_commit(self, tmp_path: Path) -> None:
        """A field a newer version added to its messages loads (ignored) and is still in every retained message after a commit."""
        cid = "newer \ud800 field:2025-01-01"
        store = self.layout_store(tmp_path, cid)
        storage = self._storage(store)  # type: ignore[attr-defined]  # HistoryStorageContract, mixed in beside this class
        call = {"id": "call-0", "name": "search", "arguments": {"query": "]}", "nested": [1, {"deep": None}]}}
        stored = [layout_message(0, futureField={"kept": "future-0"}),
                  layout_message(1, content="lone \ud800 surrogate", tool_calls=[call], futureField={"kept": "future-1"}),
                  layout_message(2, content='"]}, {"role": "system"', futureField={"kept": "future-2"})]
        self.replace_record(store, cid, layout_record(cid, stored))
        expected = [as_message(m) for m in stored]
        fresh = self.make_store(tmp_path)
        assert self.load(fresh, cid) == expected, "a message with a field this store does not know did not load"
        self.run(fresh.commit(cid, turn_messages(5)))
        loaded = self.load(self.make_store(tmp_path), cid)
        assert loaded[:3] == expected and contents(loaded[3:]) == turns_text([5]), [m.content for m in loaded]
        kept = self.stored_bytes(storage)
        lost = [n for n in range(3) if f"future-{n}".encode() not in kept]
        assert not lost, f"the commit dropped the newer version's field from the retained messages {lost}"
        self.close(store, fresh)

    def test_contract_a_damaged_records_warning_names_the_field(self, tmp_path: Path) -> None:
        """The one-line warning of a record with one defect names the field at fault (a key of the record or of its message)."""
        cid = "named:2025-01-01"
        store = self.layout_store(tmp_path, cid)
        good = [layout_message(0)]
        cases = [(field, layout_record(cid, good, **{field: value})) for field, value in (
            ("version", "2"), ("version", 0), ("conversationId", 7), ("logicalConversationId", "named:x"), ("updatedAt", "1700000000"),
            ("updatedAt", -1), ("providerSession", {"epoch": "xyz", "revision": 1}), ("providerSession", {"epoch": EPOCH, "revision": "1"}),
            )]
        cases.append(("messages", layout_record(cid, {})))
        cases += [(field, layout_record(cid, [layout_message(0, **{field: value})])) for field, value in (
            ("content", 5), ("role", "robot"), ("name", 7), ("timestamp", "now"), ("tool_calls", "x"), ("is_error", 1), ("tool_call_id", 3))]
        cases.append(("content", layout_record(cid, [{k: v for k, v in layout_message(0).items() if k != "content"}])))
        without_messages = json.loads(layout_record(cid, good))
        del without_messages["messages"]
        cases.append(("messages", json.dumps(without_messages).encode()))
        for field, data in cases:
            self.replace_record(store, cid, data)
            warnings: list[tuple[str, str]] = []
            assert self.load(self.make_store(tmp_path), cid, on_warning=lambda *w: warnings.append(w)) == [], data[:80]  # noqa: B023  (called in this iteration)
            assert [code for code, _ in warnings] == ["history_record_unreadable"], data[:80]
            assert field in warnings[0][1], f"the warning of a record whose {field!r} is damaged does not name it: {warnings[0][1]!r}"
        self.close(store)

    def test_contract_damage_of_any_size_is_a_one_line_warning(self, tmp_path: Path) -> None:
        """A conversation id, a version or a role of thousands of characters: still a cold start with one one-line warning;
        a newer version number of any size still fails closed with ``HistoryStoreError``."""
        cid = "long " + "x" * 5_000 + ":2025-01-01"
        store = self.layout_store(tmp_path, cid)
        for data in (layout_record(cid, [layout_message(0)], version="v\n" * 2_500),
                     layout_record(cid, [layout_message(0, role="r\x1b" * 2_500)]),
                     layout_record(cid, [layout_message(0, content=["c"] * 2_500)])):
            self.replace_record(store, cid, data)
            warnings: list[tuple[str, str]] = []
            assert self.load(self.make_store(tmp_path), cid, on_warning=lambda *w: warnings.append(w)) == []  # noqa: B023  (called in this iteration)
            assert [code for code, _ in warnings] == ["history_record_unreadable"]
            assert len(warnings[0][1].splitlines()) == 1, f"the warning is one line: {warnings[0][1][:200]!r}"
        self.replace_record(store, cid, layout_record(cid, [layout_message(0)], version=10**400))
        try:
            self.load(self.make_store(tmp_path), cid)
        except HistoryStoreError:
            pass
        else:
            raise AssertionError("a record of version 10**400 (newer than any) was read")
        self.close(store)

    def unreadable(self, tmp_path: Path, conversation_id: str) -> bool:
        """Whether a fresh handle finds the record of ``conversation_id`` unreadable (a cold start with the one warning)."""
        warnings: list[tuple[str, str]] = []
        loaded = self.load(self.make_store(tmp_path), conversation_id, on_warning=lambda *w: warnings.append(w))
        assert [code for code, _ in warnings] in ([], ["history_record_unreadable"]), warnings
        assert not (loaded and warnings), "a record was both read and reported unreadable"
        return bool(warnings)

    def test_contract_updated_at_at_its_boundaries(self, tmp_path: Path) -> None:
        """``updatedAt`` 0 and just above, and just before the year 10000 (253402300800), are times; just either side is not."""
        cid = "times:2025-01-01"
        store = self.layout_store(tmp_path, cid)
        for updated_at, damaged in ((0, False), (0.0, False), (0.5, False), (253402300799.5, False),
                                    (-0.5, True), (253402300800.0, True), (253402300800.5, True)):
            self.replace_record(store, cid, layout_record(cid, [layout_message(0)], updatedAt=updated_at))
            assert self.unreadable(tmp_path, cid) is damaged, f"updatedAt {updated_at!r} {'is not' if damaged else 'is'} a time"
        self.close(store)

    def test_contract_a_pretty_printed_record_is_read_and_extended(self, tmp_path: Path) -> None:
        """Whitespace and indentation are not damage: such a record loads, and a commit extends it."""
        cid = "pretty:2025-01-01"
        store = self.layout_store(tmp_path, cid)
        stored = [layout_message(n) for n in range(3)]
        record = json.loads(layout_record(cid, stored))
        self.replace_record(store, cid, json.dumps(record, indent=2, ensure_ascii=False).encode())
        assert not self.unreadable(tmp_path, cid)
        fresh = self.make_store(tmp_path)
        assert self.load(fresh, cid) == [as_message(m) for m in stored]
        self.run(fresh.commit(cid, turn_messages(7)))
        loaded = self.load(self.make_store(tmp_path), cid)
        assert loaded[:3] == [as_message(m) for m in stored] and contents(loaded[3:]) == turns_text([7])
        self.close(store, fresh)

    def test_contract_the_record_cap_at_its_boundary(self, tmp_path: Path) -> None:
        """A record of exactly the cap (docs/history.md, "Record cap") is read, one byte more is not; with the bounds
        ``make_store`` gives by default (64 messages of 64 KiB) the cap is 64 x (65536 + 1) bytes plus the envelope
        allowance: 1 MiB, or twice the serialised conversation id plus 256 bytes when that is larger."""
        window = 64 * (64 * 1024 + 1)
        for cid in ("capped:2025-01-01", "i" * 600_000):
            serialised = len(json.dumps(cid, ensure_ascii=False).encode("utf-8"))
            cap = window + max(1024 * 1024, 2 * serialised + 256)
            store = self.layout_store(tmp_path / cid[:8], cid)
            base = layout_record(cid, [layout_message(0)])
            for size, damaged in ((cap - 1, False), (cap, False), (cap + 1, True)):
                self.replace_record(store, cid, base[:-1] + b" " * (size - len(base)) + b"}")
                assert self.unreadable(tmp_path / cid[:8], cid) is damaged, (
                    f"a record of {size:,} bytes, the cap {cap:,} {'+' if size >= cap else '-'} {abs(size - cap)}"
                )
            self.close(store)

    def test_contract_an_unsafe_path_at_a_records_name_fails_closed(self, tmp_path: Path) -> None:
        """A symlink, a FIFO or a directory where the record belongs: ``load`` and ``commit`` raise ``HistoryStoreError``
        without blocking, and leave it as it was; once it is moved away, commits work again."""
        import os

        from monoagent.testing.history_contract_support import StoreThread

        cid = "unsafe:2025-01-01"
        store = self.layout_store(tmp_path, cid)
        path = self.record_file(store, cid)
        assert path is not None
        aside = tmp_path / "aside.json"
        aside.write_bytes(path.read_bytes())
        for kind, plant in (("a symlink", lambda: path.symlink_to(aside)), ("a FIFO", lambda: os.mkfifo(path)),
                            ("a directory", lambda: path.mkdir())):
            path.unlink()
            plant()
            fresh = self.make_store(tmp_path)
            for what in ("load", "commit"):
                attempt = StoreThread(lambda: fresh.load(cid) if what == "load" else fresh.commit(cid, turn_messages(9)), what)  # noqa: B023  (run in this iteration)
                attempt.start()
                try:
                    attempt.result()
                except HistoryStoreError:
                    pass
                else:
                    raise AssertionError(f"{what} used {kind} at the record's name")
            assert path.is_symlink() if kind == "a symlink" else (os.path.exists(path) and not path.is_file()), f"{kind} was replaced"
            assert aside.read_bytes() == layout_record(cid, [layout_message(0), layout_message(1)])
            self.close(fresh)
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink()
            path.write_bytes(aside.read_bytes())
            path.chmod(0o600)
        self.commit_turns(store, cid, range(9, 10))
        assert contents(self.load(self.make_store(tmp_path), cid))[-2:] == turns_text([9])
        self.close(store)

    def test_contract_a_cut_message_ends_with_the_documented_marker(self, tmp_path: Path) -> None:
        """Content over the per-message cap ends with the documented marker, naming the cap and the original byte count."""
        cid = "cut:2025-01-01"
        store = self.layout_store(tmp_path, cid)
        self.run(store.commit(cid, [Message("user", "é" * 40_000, timestamp=STAMP)]))
        (*_, cut) = self.load(self.make_store(tmp_path), cid)
        marker = "\n[message truncated to fit the 65536-byte history cap; original content 80000 bytes]"
        assert cut.content.endswith(marker) and cut.content[: -len(marker)].strip("é") == "", cut.content[-120:]
        self.close(store)

    def test_contract_holding_the_documented_shard_lock_holds_the_commit_back(self, tmp_path: Path) -> None:
        """Another holder of a conversation's ``.locks/shard-NN.lock`` keeps its commit waiting until it lets go."""
        if not os.path.exists("/proc/locks"):
            import pytest

            pytest.skip("needs Linux's /proc/locks to see a commit waiting for the lock")
        store = self.layout_store(tmp_path, "shards")
        storage = self._storage(store)  # type: ignore[attr-defined]  # HistoryStorageContract, mixed in beside this class
        for n, cid in enumerate(("shard a", "shard b:2025-01-01", "shard c", "shard \ud800 d")):
            self.commit_turns(store, cid, range(1))
            lock = shard_lock(storage, cid)
            assert lock.is_file(), f"the commit of {cid!r} made no documented shard lock {lock.name} under .locks/"
            fd = os.open(lock, os.O_RDWR)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                thread = StoreThread(lambda: store.commit(cid, turn_messages(1)), f"commit-{n}")  # noqa: B023  (joined in this iteration)
                thread.start()
                deadline = time.monotonic() + DEADLINE
                while not flock_waiters(lock):
                    if not thread.is_alive():
                        thread.result()
                        raise AssertionError(f"the commit of {cid!r} went through while another process held its shard "
                                             f"lock {lock.name}")
                    assert time.monotonic() < deadline, f"the commit of {cid!r} neither waited for {lock.name} nor ended"
                    time.sleep(0.01)  # polling /proc/locks, not synchronising: the waiter's presence is the condition
                assert contents(self.load(self.make_store(tmp_path), cid)) == turns_text([0]), "a held-back commit is not visible"
            finally:
                os.close(fd)
            thread.result()
            assert contents(self.load(self.make_store(tmp_path), cid)) == turns_text([0, 1])
        self.close(store)
