"""The part of :class:`~monoagent.testing.MemoryTierContract` that runs through a real Agent, and what every part shares.

:class:`TierHarness` builds the tier under test (alone, or as the only tier of a fresh Agent)
and checks every search against the protocol; :class:`TierThroughAgentChecks` holds the tests
of recall (the kernel's gate of 5 hits and 8 KB, each at and either side of its boundary) and of
capture. ``MemoryTierContract`` (in :mod:`monoagent.testing.memory_contract`) adds the
protocol's own tests; tier authors subclass that, not these.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monoagent._boundary.text import utf8_len
from monoagent._kernel.hookspecs import hookimpl
from monoagent._kernel.interfaces import ClosableMemoryTier, MemoryTier, SelectiveMemoryTier
from monoagent._kernel.model import MemoryHit, PrecedingMessage, Speaker

CONTRACT_TIER = "contract-tier"
#: The documented line recalled memory rides behind (docs/memory.md), spelt as the documents spell it:
#: the suite checks the bundled plugins write exactly that (they spell it once, in the ``conversation`` plugin).
RECALL_DELIMITER = "[Recalled long-term memory — background context for this turn, not the user's words:]"
#: The documented recall gate of the bundled ``memory`` plugin: at most 5 hits and 8 KB of hit text.
RECALL_MAX_HITS = 5
RECALL_MAX_BYTES = 8 * 1024
#: The user message of the recall tests; every seeded entry holds each of its words.
RECALL_QUESTION = "Quokkas on Rottnest island?"
#: Words that make seeded entries distinct (no tier may take them for near-duplicates).
SALTS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def sized_text(head: str, size: int, salt: str) -> str:
    """``head`` and words of multi-byte filler unique to ``salt``: exactly ``size`` UTF-8 bytes, no blank at either end."""
    words = [head]
    used = utf8_len(head)
    n = 0
    while True:
        word = f"ünï{salt}会{n}"
        if used + 1 + utf8_len(word) > size - 9:
            break
        words.append(word)
        used += 1 + utf8_len(word)
        n += 1
    if size - used - 1 < 1:
        raise ValueError(f"{size} bytes cannot hold {head!r} and a filler word")
    return " ".join(words) + " " + "z" * (size - used - 1)


class TierHarness:
    """Builds the tier under test and checks what it answers; see :class:`~monoagent.testing.MemoryTierContract`."""

    #: The documented bound of what the tier keeps, in UTF-8 bytes (``None``: it declares none,
    #: and the boundary test skips): a text of exactly this many bytes is kept whole, one byte
    #: more is cut to no more than that, at a character boundary.
    entry_bound: int | None = None

    # ------------------------------------------------------------------ what a tier provides

    def make_tier(self, agent: Any, tmp_path: Path) -> MemoryTier:
        raise NotImplementedError("subclasses of MemoryTierContract implement make_tier(agent, tmp_path)")

    # ------------------------------------------------------------------ helpers

    def _plugin(self, tmp_path: Path) -> Any:
        contract = self

        class ContractTierPlugin:
            @hookimpl
            def register_memory_tiers(self, register: Any) -> None:
                register(CONTRACT_TIER, lambda agent, options: contract.make_tier(agent, tmp_path / "tier"))

        return ContractTierPlugin()

    def agent(self, tmp_path: Path, steps: Sequence[dict[str, Any]] | None = None, **config: Any) -> Any:
        """A fresh Agent whose only memory tier is this one (``offline:scripted`` when ``steps``).

        ``config`` is merged over it; a ``memory`` mapping is merged into the memory section.
        """
        from monoagent.testing import fresh_agent, scripted_agent

        data = {**config, "memory": {"tiers": [CONTRACT_TIER], **dict(config.get("memory", {}))}}
        (tmp_path / "agent").mkdir(parents=True, exist_ok=True)
        if steps is None:
            return fresh_agent(tmp_path / "agent", config=data, plugins=[self._plugin(tmp_path)])
        return scripted_agent(tmp_path / "agent", steps, config=data, plugins=[self._plugin(tmp_path)])

    def tier(self, tmp_path: Path) -> MemoryTier:
        """A tier on its own (built for a fresh Agent, as the registry would)."""
        from monoagent.testing import fresh_agent

        return self.make_tier(fresh_agent(tmp_path / "standalone"), tmp_path / "tier")

    @staticmethod
    def close(tier: MemoryTier) -> None:
        """Release ``tier`` when it is a :class:`~monoagent._kernel.interfaces.ClosableMemoryTier`."""
        if isinstance(tier, ClosableMemoryTier):
            value = tier.close()
            if asyncio.iscoroutine(value):
                _run(value)

    @staticmethod
    def automatic(tier: MemoryTier) -> bool:
        """Whether per-turn recall searches ``tier`` (True unless a :class:`SelectiveMemoryTier` says otherwise)."""
        return not isinstance(tier, SelectiveMemoryTier) or bool(tier.automatic_recall)

    @staticmethod
    def captures(tier: MemoryTier) -> bool:
        """Whether post-turn capture adds to ``tier`` (True unless a :class:`SelectiveMemoryTier` says otherwise)."""
        return not isinstance(tier, SelectiveMemoryTier) or bool(tier.captures)

    @staticmethod
    def search(tier: MemoryTier, query: str, limit: int = 10) -> list[MemoryHit]:
        """``tier.search``, checked against the protocol: at most ``limit`` hits of this tier, best first."""
        hits = list(_run(tier.search(query, limit=limit)))
        assert len(hits) <= limit, f"search(limit={limit}) returned {len(hits)} hits"
        for hit in hits:
            assert isinstance(hit, MemoryHit), f"search returned {hit!r}, not a MemoryHit"
            assert hit.source == tier.name, f"a hit's source is {hit.source!r}, not the tier's name {tier.name!r}"
            assert isinstance(hit.id, str) and hit.id, f"a hit's id is {hit.id!r}, not a non-empty string"
            score = hit.score
            assert isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score), score
            assert 0.0 <= score <= 1.0, f"a hit's score {score} is outside 0..1"
        scores = [hit.score for hit in hits]
        assert scores == sorted(scores, reverse=True), f"hits are not best first: scores {scores}"
        return hits


class TierThroughAgentChecks(TierHarness):
    """Recall and capture of the tier under test, through a fresh Agent with the bundled ``memory`` plugin."""

    def _seed(self, agent: Any, texts: Sequence[str]) -> None:
        tier = agent.memory_tiers()[CONTRACT_TIER]
        for text in texts:
            _run(tier.add(text))

    def _automatic_or_skip(self, tmp_path: Path) -> None:
        import pytest

        tier = self.tier(tmp_path / "probe")
        automatic = self.automatic(tier)
        self.close(tier)
        if not automatic:
            pytest.skip("the tier sets automatic_recall = False: it is never injected (test_contract_not_automatic_is_never_injected)")

    def _recall(self, tmp_path: Path, texts: Sequence[str]) -> tuple[dict[str, Any], str]:
        """Seed ``texts`` (each holding every word of the question), ask it on offline:echo: the event data and the reply.

        The score gate is opened (``minScore = 0``) so that only the count and byte caps can bind.
        """
        from monoagent.testing import collect_events

        agent = self.agent(tmp_path, memory={"recall": {"minScore": 0.0}})
        tier = agent.memory_tiers()[CONTRACT_TIER]
        self._seed(agent, texts)
        found = self.search(tier, RECALL_QUESTION, limit=10)
        assert len(found) == len(texts), f"the tier found {len(found)} of {len(texts)} entries holding every word of the query"
        events: list[Any] = []
        result = agent.run_sync(RECALL_QUESTION, conversation_id="c", on_event=collect_events(events))
        _run(agent.aclose())
        recalled = [e.data for e in events if e.type == "memory_recalled"]
        assert len(recalled) == 1, f"{len(recalled)} memory_recalled events for one turn"
        assert set(recalled[0]) == {"hits", "bytes"} and all(set(h) == {"source", "bytes"} for h in recalled[0]["hits"])
        assert RECALL_DELIMITER in result.text  # offline:echo repeats the user message
        return recalled[0], result.text

    def test_contract_recall_keeps_at_most_five_hits(self, tmp_path: Path) -> None:
        self._automatic_or_skip(tmp_path)
        for candidates in (4, 5, 6):
            texts = [sized_text(f"Quokka note {salt}: quokkas hop on Rottnest island.", 200, salt) for salt in SALTS[:candidates]]
            data, reply = self._recall(tmp_path / f"hits-{candidates}", texts)
            expected = min(candidates, RECALL_MAX_HITS)
            assert len(data["hits"]) == expected, f"{candidates} candidates recalled {len(data['hits'])} hits, not {expected}"
            assert sum(f"ünï{salt}会0" in reply for salt in SALTS[:candidates]) == expected
            assert data["bytes"] == 200 * expected

    def _hit_overhead(self, tmp_path: Path) -> int:
        """How many bytes the tier's hit adds around a stored text (0 for a tier that returns it as stored)."""
        import pytest

        tier = self.tier(tmp_path)
        text = sized_text("Quokka probe note:", 300, "probe")
        memory_id = _run(tier.add(text))
        hits = [hit for hit in self.search(tier, "quokka probe note") if hit.id == memory_id]
        self.close(tier)
        if not hits or text not in hits[0].text:
            pytest.skip("the tier's hits do not hold a 300-byte text whole, so no recall can be sized to the exact byte cap")
        return utf8_len(hits[0].text) - utf8_len(text)

    def test_contract_recall_keeps_at_most_8_kib(self, tmp_path: Path) -> None:
        import pytest

        self._automatic_or_skip(tmp_path)
        entry = RECALL_MAX_BYTES // 4
        if self.entry_bound is not None and self.entry_bound < entry + 1:
            pytest.skip(f"the tier's entry_bound {self.entry_bound} cannot hold the {entry + 1}-byte entries of this test")
        overhead = self._hit_overhead(tmp_path / "probe-size")
        for total, expected in ((RECALL_MAX_BYTES - 1, 4), (RECALL_MAX_BYTES, 4), (RECALL_MAX_BYTES + 1, 3)):
            sizes = [entry, entry, entry, entry + total - RECALL_MAX_BYTES]
            texts = [
                sized_text(f"Quokka note {salt}: quokkas hop on Rottnest island.", size - overhead, salt)
                for salt, size in zip(SALTS, sizes, strict=False)
            ]
            data, reply = self._recall(tmp_path / f"bytes-{total}", texts)
            assert len(data["hits"]) == expected, f"hits of {total} bytes in all recalled {len(data['hits'])}, not {expected}"
            assert sum(f"ünï{salt}会0" in reply for salt in SALTS[:4]) == expected
            assert data["bytes"] == sum(hit["bytes"] for hit in data["hits"]) <= RECALL_MAX_BYTES
            if expected == 4:
                assert data["bytes"] == total
            else:  # the hit that did not fit was skipped, whichever it was
                assert data["bytes"] in {3 * entry, 2 * entry + sizes[-1]}

    def test_contract_not_automatic_is_never_injected(self, tmp_path: Path) -> None:
        import pytest

        from monoagent.testing import collect_events

        agent = self.agent(tmp_path)
        if self.automatic(agent.memory_tiers()[CONTRACT_TIER]):
            _run(agent.aclose())
            pytest.skip("the tier recalls automatically (automatic_recall is not False): the recall cap tests cover it")
        self._seed(agent, [f"Quokka note {salt}: quokkas hop on Rottnest island." for salt in SALTS[:3]])
        events: list[Any] = []
        result = agent.run_sync(RECALL_QUESTION, conversation_id="c", on_event=collect_events(events))
        assert [e for e in events if e.type == "memory_recalled"] == []
        assert RECALL_DELIMITER not in result.text
        _run(agent.aclose())

    def test_contract_nothing_recalled_injects_nothing(self, tmp_path: Path) -> None:
        agent = self.agent(tmp_path)
        self._seed(agent, ["The heating engineer comes on Monday."])
        events: list[Any] = []
        from monoagent.testing import collect_events

        result = agent.run_sync("Zebra crossings near the harbour?", conversation_id="c", on_event=collect_events(events))
        assert [e for e in events if e.type == "memory_recalled"] == []
        assert RECALL_DELIMITER not in result.text
        assert "Recalled" not in result.text
        _run(agent.aclose())

    # ------------------------------------------------------------------ capture through an Agent

    def _captured(self, agent: Any, word: str) -> list[str]:
        tier = agent.memory_tiers()[CONTRACT_TIER]
        return [hit.text for hit in self.search(tier, word) if word in hit.text.casefold()]

    def test_contract_capture_is_attributed_to_the_speaker(self, tmp_path: Path) -> None:
        agent = self.agent(tmp_path, steps=[{"text": "Noted: the marmot report is due Friday."}, {"text": "Fine."}])
        agent.run_sync("The marmot report is due Friday.", conversation_id="c", sender=Speaker("Alice Chen", "alice", user_id="U123SECRET"))
        [entry] = self._captured(agent, "marmot")
        assert "User (Alice Chen (@alice)): The marmot report is due Friday." in entry
        assert "Assistant: Noted: the marmot report is due Friday." in entry
        assert "U123SECRET" not in entry
        agent.run_sync("Another note about the ibex survey.", conversation_id="c")
        [plain] = self._captured(agent, "ibex")
        assert "User: Another note about the ibex survey." in plain
        _run(agent.aclose())

    def test_contract_failed_turn_is_not_captured(self, tmp_path: Path) -> None:
        import pytest

        from monoagent._kernel.errors import MonoagentError

        agent = self.agent(tmp_path, steps=[{"error": "the provider fell over", "retryable": False}])
        with pytest.raises(MonoagentError):
            agent.run_sync("Please remember the narwhal password hint.", conversation_id="c")
        assert self._captured(agent, "narwhal") == []
        _run(agent.aclose())

    def test_contract_cancelled_turn_is_not_captured(self, tmp_path: Path) -> None:
        import pytest

        from monoagent._kernel.turn_request import TurnRequest

        agent = self.agent(tmp_path, steps=[{"text": "one two three four five six seven eight"}])

        async def cancelled_mid_answer() -> None:
            task: asyncio.Task[Any] | None = None

            def on_event(event: Any) -> None:
                if event.type == "text_delta" and task is not None:
                    task.cancel()

            task = asyncio.ensure_future(agent.respond(TurnRequest("Remember the tapir's name is Pim.", conversation_id="c"), on_event=on_event))
            with pytest.raises(asyncio.CancelledError):
                await task

        _run(cancelled_mid_answer())
        assert self._captured(agent, "tapir") == []
        _run(agent.aclose())

    def test_contract_recalled_and_preceding_text_is_not_captured(self, tmp_path: Path) -> None:
        agent = self.agent(tmp_path, steps=[{"text": "Here is what I know about the capybara."}])
        self._seed(agent, ["SEEDED-FACT the capybara sanctuary opens at nine."])
        preceding = (PrecedingMessage(Speaker("Bob"), "PRECEDING-CHATTER capybara gossip", 1_700_000_000.0),)
        agent.run_sync("Tell me about the capybara sanctuary.", conversation_id="c", preceding_messages=preceding)
        captured = [t for t in self._captured(agent, "capybara") if "Tell me about the capybara" in t]
        assert len(captured) == 1
        assert "SEEDED-FACT" not in captured[0]
        assert "PRECEDING-CHATTER" not in captured[0]
        _run(agent.aclose())
