"""The bounds of the history-store conformance suite, each checked at and either side of its boundary.

- ``history.maxMessages``: N-1, N and N+1 messages retained (the newest kept), by single messages
  and by one turn longer than the window.
- ``history.maxMessageBytes``: the largest content that is kept unchanged is found by bisection
  (the store's own serialisation decides where the cap falls, so the suite measures it rather than
  assuming a framing), separately for 1-, 2- and 4-byte characters, so the boundary is crossed by
  a whole multi-byte character; the content one character longer is cut, UTF-8-safely, to the
  longest prefix that still fits with the marker, the marker states the original byte count, and
  the cut message fits the cap (committed again, it is unchanged). The handle that wrote a message
  reads back exactly what a new handle reads.
- Every field over the cap: a name or a tool-call id that alone passes the cap comes back as a
  UTF-8-safe prefix of at most 256 bytes; a tool call whose arguments alone pass it, or an
  attachment reference whose name does, is dropped whole (never cut); each such commit succeeds
  and the message's fields together fit the cap.
- Lowered limits: a record written under a 1 MiB per-message cap (four messages of about 1 MB,
  within the documented 64 x 64 KiB window) reads back under the default cap, and a turn committed
  under it that passes the record's bound drops the oldest earlier messages, as few as it must.
- The record: a window over the documented 64 messages, each at the per-message cap, under a
  1 MiB conversation id, reads back whole from a new handle (a commit never writes a record that
  a load refuses).
- Nesting: tool-call arguments nested 100 levels deep round-trip; nested 200 or 1,000 deep they either
  round-trip or the commit is refused with ``HistoryStoreError`` and the history stays intact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from monoagent._boundary.text import utf8_len
from monoagent._kernel.errors import HistoryStoreError
from monoagent._kernel.model import ArtifactRef, Message, ToolCall
from monoagent._kernel.stores import HistoryStore, ProviderSessionState, ProviderSessionStore
from monoagent.testing.history_contract_support import STAMP, HistoryContractBase, contents, turn_messages, turns_text

SESSION = ProviderSessionState("5e55" * 8, 2, None)
"""The provider session the lowered-cap test commits with, for a store that keeps one."""
FIELD_CAP = 256
"""Bytes a name or a tool-call id is cut to when it alone does not fit the per-message cap (docs/history.md)."""

CAP = 4096
"""The ``max_message_bytes`` the per-message tests give the store (the smallest the ``files`` store allows is 1024)."""


class HistoryBoundsContract(HistoryContractBase):
    """The message-count, message-size, record and nesting bounds (mixed into :class:`~monoagent.testing.HistoryStoreContract`)."""

    def test_contract_message_window_at_its_boundary(self, tmp_path: Path) -> None:
        """With ``max_messages`` N, N-1 and N messages are all kept and N+1 keep the newest N."""
        window = 7
        store = self.make_store(tmp_path, max_messages=window)
        for total in (window - 1, window, window + 1):
            cid = f"window-{total}"
            for k in range(total):
                receipt = self.run(store.commit(cid, [Message("user", f"m{k}")]))
                assert receipt.message_count == min(k + 1, window), f"the receipt of message {k + 1} of {total}"
            kept = [f"m{k}" for k in range(max(0, total - window), total)]
            assert contents(self.load(self.make_store(tmp_path, max_messages=window), cid)) == kept, f"{total} messages"
        long_turn = [Message("user", f"t{k}") for k in range(window + 1)]
        receipt = self.run(store.commit("one-long-turn", long_turn))
        assert receipt.message_count == window
        assert contents(self.load(self.make_store(tmp_path, max_messages=window), "one-long-turn")) == contents(long_turn[1:])
        self.close(store)

    # ------------------------------------------------------------------ the per-message cap

    def _stored(self, writer: HistoryStore, reader: HistoryStore, content: str, probe: list[int]) -> str:
        """``content`` as the store keeps it: committed as one message of a new conversation, read back by ``reader``."""
        probe[0] += 1
        cid = f"probe-{probe[0]}"
        self.run(writer.commit(cid, [Message("assistant", content, timestamp=STAMP)]))
        (message,) = self.load(reader, cid)
        assert message.role == "assistant"
        assert self.load(writer, cid) == [message], "the writing handle reads back another message than a new handle"
        return message.content

    def _check_cut(self, writer: HistoryStore, reader: HistoryStore, original: str, cut: str, probe: list[int]) -> None:
        """``cut`` is ``original`` cut UTF-8-safely to its longest prefix that fits with a marker stating its size."""
        assert cut != original and utf8_len(cut) <= CAP, f"a cut message of {utf8_len(cut)} bytes, capped at {CAP}"
        n = 0
        while n < min(len(cut), len(original)) and cut[n] == original[n]:
            n += 1
        head, marker = cut[:n], cut[n:]
        assert marker, "a cut message ends with a marker"
        assert str(utf8_len(original)) in marker, f"the marker {marker!r} states the original content's byte count"
        assert utf8_len(head) > CAP // 4, f"a cut kept only {utf8_len(head)} bytes of a message capped at {CAP}"
        cut.encode("utf-8")  # whole code points: no lone surrogate is left by the cut
        assert self._stored(writer, reader, cut, probe) == cut, "the cut message does not fit the cap it was cut to"
        longer = head + original[n] + marker
        assert self._stored(writer, reader, longer, probe) != longer, "the cut did not keep the longest prefix that fits"

    def test_contract_message_cap_at_its_boundary(self, tmp_path: Path) -> None:
        """The largest content kept unchanged, for 1-, 2- and 4-byte characters; one character more is cut."""
        writer = self.make_store(tmp_path, max_message_bytes=CAP)
        reader = self.make_store(tmp_path, max_message_bytes=CAP)
        probe = [0]
        for char in ("x", "é", "🎉"):
            width = utf8_len(char)
            low, high = CAP // (2 * width), CAP // width + 1  # contents of ``low`` characters fit, of ``high`` do not
            assert self._stored(writer, reader, char * low, probe) == char * low, f"{low * width} bytes of {char!r} were cut"
            over = char * high
            assert self._stored(writer, reader, over, probe) != over, f"content of {utf8_len(over)} bytes was kept whole"
            while high - low > 1:
                middle = (low + high) // 2
                if self._stored(writer, reader, char * middle, probe) == char * middle:
                    low = middle
                else:
                    high = middle
            for fits in (low - 1, low):
                assert self._stored(writer, reader, char * fits, probe) == char * fits, f"{fits} x {char!r} (under the largest that fits)"
            over = char * (low + 1)
            self._check_cut(writer, reader, over, self._stored(writer, reader, over, probe), probe)
            longer = "x" * CAP + char * CAP
            self._check_cut(writer, reader, longer, self._stored(writer, reader, longer, probe), probe)
        self.close(writer, reader)

    def test_contract_message_cap_cuts_every_field_over_it(self, tmp_path: Path) -> None:
        """A name, a tool-call id, tool-call arguments or an attachment reference that alone passes the cap: each commit
        succeeds and fits the cap."""
        writer = self.make_store(tmp_path, max_message_bytes=CAP)
        call = ToolCall("call-1", "search", {"query": "y" * (2 * CAP)})
        cases = {
            "name": Message("user", "hello", name="n" * (2 * CAP), timestamp=STAMP),
            "tool_call_id": Message("tool", "result", name=None, tool_call_id="i" * (2 * CAP), timestamp=STAMP),
            "tool_calls": Message("assistant", "calling", tool_calls=(call,), timestamp=STAMP),
            "attachments": Message("user", "see the file", attachments=(ArtifactRef("a1", "f" * (2 * CAP)),), timestamp=STAMP),
        }
        for case, original in cases.items():
            receipt = self.run(writer.commit(f"over-{case}", [original]))
            assert receipt.message_count == 1, case
            (kept,) = self.load(self.make_store(tmp_path, max_message_bytes=CAP), f"over-{case}")
            assert self.load(writer, f"over-{case}") == [kept], f"{case}: the writing handle reads back another message"
            assert kept.role == original.role, case
            for field in ("name", "tool_call_id"):
                value, was = getattr(kept, field), getattr(original, field)
                if was is None or utf8_len(was) <= CAP:
                    assert value == was, f"{case}: {field} {was!r:.40} fits the cap and was changed to {value!r:.40}"
                else:
                    assert value and was.startswith(value) and utf8_len(value) <= FIELD_CAP, (
                        f"{case}: a {field} of {utf8_len(was)} bytes must come back as a prefix of at most {FIELD_CAP} bytes, "
                        f"not {utf8_len(value or '')} bytes")
            assert kept.tool_calls in ((), original.tool_calls), f"{case}: a tool call was cut instead of kept or dropped whole"
            assert kept.attachments in ((), original.attachments), f"{case}: an attachment reference was cut, not kept or dropped"
            size = sum(utf8_len(text or "") for text in (kept.content, kept.name, kept.tool_call_id))
            assert size <= CAP, f"{case}: the kept message's fields hold {size} bytes, over the {CAP}-byte cap"
        (dropped,) = self.load(writer, "over-tool_calls")
        assert dropped.tool_calls == (), "a tool call whose arguments alone pass the cap was kept"
        assert dropped.content.startswith("calling"), "the content of a message whose tool call was dropped"
        (unattached,) = self.load(writer, "over-attachments")
        assert unattached.attachments == () and unattached.content.startswith("see the file"), (
            "an attachment reference that alone passes the cap is dropped whole, the content kept")
        self.close(writer)

    def test_contract_a_lowered_message_cap_keeps_the_earlier_messages(self, tmp_path: Path) -> None:
        """Messages written under a 1 MiB cap read back under the default 64 KiB; a turn that passes the
        record's bound then drops only the oldest messages, and no more than it must (turns of 21 and
        40 messages of 62 KB: about one and about two earlier messages' worth)."""
        big = 1 << 20
        earlier = [Message("assistant", f"E{k}:" + "x" * 1_000_000, timestamp=STAMP) for k in range(4)]

        def commit_under_lowered_cap(cid: str, before: list[Message], turn: list[Message]) -> list[Message]:
            self.run(self.make_store(tmp_path, max_message_bytes=big).commit(cid, before))
            assert self.load(self.make_store(tmp_path), cid) == before, "a record within 64 x 64 KiB written under a larger cap"
            writer = self.make_store(tmp_path)
            if isinstance(writer, ProviderSessionStore):
                receipt = self.run(writer.commit(cid, turn, provider_session=SESSION))
                reader: Any = self.make_store(tmp_path)
                assert self.run(reader.load_provider_session(cid)) == SESSION, (
                    "the provider session of a commit that dropped earlier messages")
            else:
                receipt = self.run(writer.commit(cid, turn))
            kept = self.load(self.make_store(tmp_path), cid)
            assert receipt.message_count == len(kept), "the receipt counts another history than a new handle reads"
            assert self.load(writer, cid) == kept == self.load(self.make_store(tmp_path, max_message_bytes=big), cid)
            assert kept[-len(turn):] == turn, "the new turn is kept whole, newest last"
            assert kept[: -len(turn)] == before[len(before) + len(turn) - len(kept) :], "earlier messages kept are the newest ones"
            listed = {info.conversation_id: info.message_count for info in self.run(self.make_store(tmp_path).conversations())}
            assert listed.get(cid) == len(kept), f"conversations() lists {listed.get(cid)} messages, a load reads {len(kept)}"
            self.close(writer)
            return kept

        for length in (21, 40):
            turn = [Message("user", f"T{k}:" + "y" * 62_000, timestamp=STAMP) for k in range(length)]
            kept = commit_under_lowered_cap(f"lowered-{length}", earlier, turn)
            dropped = len(earlier) + len(turn) - len(kept)
            most = 1 + sum(utf8_len(m.content) for m in turn) // utf8_len(earlier[0].content)
            assert dropped <= most, f"{dropped} earlier messages dropped; {most} of them hold more bytes than the new turn"
            if dropped:
                # one dropped message put back: had the store dropped more than it must, this record would keep it
                again = commit_under_lowered_cap(f"lowered-{length}-again", earlier[dropped - 1 :], turn)
                assert len(again) < len(earlier) - dropped + 1 + len(turn), (
                    f"{dropped} earlier messages were dropped, but the same turn after {len(earlier) - dropped + 1} of them "
                    f"drops none: the store dropped more than the record's bound required")

    def test_contract_a_full_window_of_full_messages_reads_back(self, tmp_path: Path) -> None:
        """96 messages at the 64 KiB cap, under a 1 MiB conversation id, read back whole from a new handle."""
        window, cap, per_turn = 96, 64 * 1024, 24
        cid = "w" * (1 << 20)
        store = self.make_store(tmp_path, max_messages=window, max_message_bytes=cap)
        body = "é" * (cap // 2)
        for turn in range(window // per_turn):
            self.run(store.commit(cid, [Message("assistant", f"{turn * per_turn + k:03d}{body}") for k in range(per_turn)]))
        loaded = self.load(self.make_store(tmp_path, max_messages=window, max_message_bytes=cap), cid)
        assert [m.content[:3] for m in loaded] == [f"{k:03d}" for k in range(window)]
        assert all(m.content != f"{k:03d}{body}" and str(utf8_len(body) + 3) in m.content for k, m in enumerate(loaded))
        self.close(store)

    def test_contract_deep_tool_call_arguments(self, tmp_path: Path) -> None:
        """Arguments 100 levels deep round-trip; 200 and 1,000 deep round-trip or are refused with the history intact."""
        store = self.make_store(tmp_path)
        self.commit_turns(store, "c", range(1))

        def nested(depth: int) -> dict[str, object]:
            value: dict[str, object] = {"leaf": depth}
            for _ in range(depth - 1):
                value = {"n": value}
            return value

        shallow = [Message("assistant", "", tool_calls=(ToolCall("call-1", "deep", nested(100)),))]
        self.run(store.commit("c", shallow))
        assert self.load(self.make_store(tmp_path), "c")[2:] == shallow
        for depth in (200, 1000):
            deep = [Message("assistant", "", tool_calls=(ToolCall("call-2", "deep", nested(depth)),))]
            try:
                self.run(store.commit(f"deep-{depth}", turn_messages(0) + deep))
            except HistoryStoreError:
                assert self.load(self.make_store(tmp_path), f"deep-{depth}") == [], "a refused commit left history behind"
            else:
                assert self.load(self.make_store(tmp_path), f"deep-{depth}")[2:] == deep, f"{depth} levels were committed, not read back"
            try:
                self.run(store.commit("c", deep))
            except HistoryStoreError:
                assert self.load(self.make_store(tmp_path), "c")[2:] == shallow, "a refused commit changed the history"
            else:
                assert self.load(self.make_store(tmp_path), "c")[-1:] == deep, "a commit wrote what a load does not read back"
                break
        self.commit_turns(store, "c", range(1, 2))
        assert contents(self.load(self.make_store(tmp_path), "c"))[-2:] == turns_text(range(1, 2))
        self.close(store)
