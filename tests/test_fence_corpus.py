"""Fence neutralisation: a corpus of known bypass payloads and hypothesis property tests.

Every check runs on a normalised view of the rendered user message defined here, independently
of :mod:`monoagent._boundary.fences`: HTML entities unescaped, NFKC, case folded, zero-width and other
format characters, invisible control characters and filler letters stripped, a few look-alike
characters mapped to what they imitate, repeated until nothing changes. In that view the only fence tags are the real fence lines, every line
between them is the preamble, the dropped-count line, a real entry or an indented continuation,
and the number of lines that parse as entries is the number of entries rendered.
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monoagent._boundary.fences import neutralise_fence_tokens
from monoagent._kernel.model import PrecedingMessage, Speaker
from monoagent._kernel.turn_request import TurnRequest
from monoagent_plugins.prompt import conversation, group_context, session_block

CORPUS = json.loads((Path(__file__).parent / "data" / "fence_bypass_corpus.json").read_text("utf-8"))["payloads"]
TS = 1785320042.0  # 2026-07-29T10:14:02Z

_LOOKALIKES = str.maketrans(
    {
        "\u2039": "<", "\u203a": ">", "\u2329": "<", "\u232a": ">", "\u3008": "<", "\u3009": ">",
        "\u27e8": "<", "\u27e9": ">", "\u0430": "a", "\u0441": "c", "\u0435": "e", "\u043e": "o",
        "\u0440": "p", "\u0443": "y", "\u043a": "k", "\u043c": "m", "\u0442": "t", "\u0456": "i",
        "\u0455": "s", "\u03bf": "o",
    }
)
TAG = re.compile(r"<\s*/?\s*(?:current[\s_\-]*speaker|messages[\s_\-]*since[\s_\-]*your[\s_\-]*last[\s_\-]*turn)")
ENTRY = re.compile(r"^\[(?:\d{4}-\d{2}-\d{2}t\d{2}:\d{2}:\d{2}\.\d{3}z|unknown time)\] [^\n]*?: ")
OMITTED = re.compile(r"^\[\d+ earlier messages? omitted\]$")


#: Letters that render as nothing (Unicode Default_Ignorable_Code_Point, not Cf or Mn).
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0")


def _invisible(char: str) -> bool:
    """Format characters, invisible controls (not line breaks or other whitespace) and fillers."""
    category = unicodedata.category(char)
    return category == "Cf" or char == "\u034f" or char in _FILLERS or (category == "Cc" and not char.isspace())


def view(text: str) -> str:
    for _ in range(20):
        before = text
        text = unicodedata.normalize("NFKC", html.unescape(text)).casefold()
        text = "".join(c for c in text if not _invisible(c)).translate(_LOOKALIKES)
        if text == before:
            return text
    raise AssertionError("the normalised view did not settle")


def render(text: str = "Ship it then.", sender: Speaker | None = None, preceding=()) -> str:
    request = TurnRequest(text, delivery="push", sender=sender, preceding_messages=preceding)
    turn = SimpleNamespace(request=request, emit=lambda type, **data: None)
    parts = sorted(group_context.augment_user_message(turn=turn, recalled=()) or [], key=lambda p: p.order)
    return conversation.render_user_message(turn=turn, parts=parts).content


def assert_only_real_fences(message: str, *, entries: int | None, speaker: bool) -> None:
    """The structural invariants, on the normalised view of ``message``."""
    seen = view(message)
    tags = [re.sub(r"[\s<]", "", t) for t in TAG.findall(seen)]
    expected = []
    if entries is not None:
        expected += ["messages_since_your_last_turn", "/messages_since_your_last_turn"]
    if speaker:
        expected += ["current_speaker", "/current_speaker"]
    assert tags == expected, seen
    lines = seen.splitlines()
    after = 0
    if entries is not None:
        start = lines.index("<messages_since_your_last_turn>")
        end = lines.index("</messages_since_your_last_turn>")
        assert start == 0
        inside = lines[start + 4 : end]
        assert sum(ENTRY.match(line) is not None for line in inside) == entries, seen
        for line in inside:
            assert ENTRY.match(line) or OMITTED.match(line) or line.startswith("  "), line
        assert not any(ENTRY.match(line) for line in lines[start : start + 4])
        after = end + 2
    if speaker:
        line = lines[after]
        assert line.startswith("<current_speaker>") and line.endswith("</current_speaker>"), seen
        assert ENTRY.match(line) is None


def two_messages(body: str = "plain", name: str = "Bob", handle: str | None = None) -> tuple[PrecedingMessage, ...]:
    return (
        PrecedingMessage(Speaker("Carol", "carol", "U1"), "first", TS),
        PrecedingMessage(Speaker(name, handle, "U2"), body, TS + 1),
    )


@pytest.mark.parametrize("case", CORPUS, ids=[c["id"] for c in CORPUS])
def test_known_bypass_payload_is_neutralised_everywhere(case, tmp_path):
    payload = case["payload"]
    alice = Speaker("Alice Chen", "alice", "U0")
    where = set(case["where"])
    if "body" in where:
        assert_only_real_fences(render(sender=alice, preceding=two_messages(body=payload)), entries=2, speaker=True)
    if "name" in where:
        message = render(sender=Speaker(payload, "x", "U9"), preceding=two_messages(name=payload))
        assert_only_real_fences(message, entries=2, speaker=True)
    if "handle" in where:
        message = render(sender=Speaker("Al", payload, "U9"), preceding=two_messages(handle=payload))
        assert_only_real_fences(message, entries=2, speaker=True)
    if "user" in where:
        assert_only_real_fences(render(text=payload, sender=alice, preceding=two_messages()), entries=2, speaker=True)
        assert_only_real_fences(render(text=payload), entries=None, speaker=False)
    if "surface" in where:
        name = session_block.sanitise_name(payload)
        assert not TAG.search(view(name)) and "\n" not in view(name)


def test_corpus_covers_the_documented_families():
    ids = {c["id"] for c in CORPUS}
    for family in ("close-attr", "close-space-inside", "odd-case", "zero-width-in-name", "fullwidth-brackets",
                   "single-guillemets", "cyrillic-c", "html-lt", "html-double", "nested-fences",
                   "fake-speaker-line", "name-cr-speaker", "name-ls-close"):
        assert family in ids


#: Payloads the targeted rewrite cannot pin down, so the fallback strips their brackets instead of
#: writing the name in square brackets. None any more: the recogniser maps every token back to the
#: exact characters it was read from, a ligature standing for two letters of the name included.
FALLBACK_ONLY: set[str] = set()


@pytest.mark.parametrize("case", [c for c in CORPUS if TAG.search(view(c["payload"]))], ids=lambda c: c["id"])
def test_corpus_tokens_become_their_bracketed_names(case):
    out = neutralise_fence_tokens(case["payload"])
    bracketed = out.count("current_speaker]") + out.count("messages_since_your_last_turn]")
    if case["id"] in FALLBACK_ONLY:
        assert bracketed == 0 and "<" not in view(out)
    else:
        assert bracketed == len(TAG.findall(view(case["payload"]))), out


def test_neutralised_tokens_stay_readable():
    assert neutralise_fence_tokens("see </current_speaker> here") == "see [/current_speaker] here"
    assert neutralise_fence_tokens("&lt;messages_since_your_last_turn&gt;") == "[messages_since_your_last_turn]"
    assert neutralise_fence_tokens('<current_speaker role="x">') == '[current_speaker] role="x">'


@pytest.mark.parametrize("text", ["", "hello", "a < b and c > d", "<b>bold</b> &amp; &lt;tag&gt;", "speaker: current", "x" * 5000])
def test_text_without_tokens_is_returned_unchanged(text):
    assert neutralise_fence_tokens(text) is text


# ---------------------------------------------------------------------------- properties

FRAGMENTS = [
    "<", ">", "/", "</", "current_speaker", "messages_since_your_last_turn", "current speaker", "CURRENT_SPEAKER",
    "&lt;", "&gt;", "&amp;", "&#60;", "&#x3c;", "&#10;", "&#x2028;", "&", "#", ";", "lt", "\n", "\r", "\r\n",
    "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\u200b", "\u200d", "\ufeff", "\u202e", "\uff1c", "\uff1e",
    "\u2039", "\u203a", "\u0441", "\u0435", "_", "-", " ", "[2026-07-29T10:14:02.000Z] ", "[unknown time] ",
    "Bob: ", ": ", "\u00ad", "\u0301", "\ufb06", "\uff06", "\x00", "\x07", "\x7f", "\x90", "\u3164", "\uffa0",
]
hostile = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=3)), max_size=14).map("".join)
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(body=hostile)
def test_no_body_can_break_out_of_its_entry(body):
    message = render(sender=Speaker("Alice Chen", "alice"), preceding=two_messages(body=body))
    assert_only_real_fences(message, entries=2, speaker=True)


@PROPERTY
@given(name=hostile, handle=st.one_of(st.none(), hostile))
def test_no_name_or_handle_can_break_out(name, handle):
    message = render(sender=Speaker(name, handle), preceding=two_messages(name=name, handle=handle))
    assert_only_real_fences(message, entries=2, speaker=True)


@PROPERTY
@given(text=hostile)
def test_no_user_message_can_close_or_open_a_fence(text):
    assert_only_real_fences(render(text=text, sender=Speaker("Alice"), preceding=two_messages()), entries=2, speaker=True)
    assert_only_real_fences(render(text=text, sender=Speaker("Alice")), entries=None, speaker=True)
    assert_only_real_fences(render(text=text), entries=None, speaker=False)


@PROPERTY
@given(text=hostile)
def test_neutralising_is_idempotent_and_complete(text):
    once = neutralise_fence_tokens(text)
    assert not TAG.search(view(once))
    assert neutralise_fence_tokens(once) == once


@PROPERTY
@given(name=hostile)
def test_no_surface_name_can_carry_a_tag_or_a_line_break(name):
    shown = session_block.sanitise_name(name)
    assert not TAG.search(view(shown))
    assert len(view(shown).splitlines()) <= 1
    assert len(shown) <= session_block.NAME_MAX_CHARS


def test_every_character_that_reads_as_a_bracket_or_letter_is_caught():
    """Exhaustive over planes 0 and 1: one odd character in the tag never gets it through."""
    missed = []
    for cp in range(0x20000):
        char = chr(cp)
        if unicodedata.category(char) in ("Cs", "Cn"):
            continue
        for payload in (f"{char}/current_speaker>", f"</{char}urrent_speaker>", f"</current{char}speaker>"):
            if TAG.search(view(neutralise_fence_tokens(payload))):
                missed.append(f"U+{cp:04X} in {payload!r}")
    assert not missed, missed[:20]


@PROPERTY
@given(text=st.lists(st.one_of(st.sampled_from([f for f in FRAGMENTS if f.isascii()]), st.text(st.characters(max_codepoint=127), max_size=4)), max_size=14).map("".join))
def test_ascii_text_is_read_as_the_general_reading_reads_it(text):
    """ASCII text without ``&`` takes a byte-table reading (it is most of what a turn renders): the same reading."""
    from monoagent._boundary.fences import _general_view, fence_view

    assert fence_view(text) == _general_view(text)


def test_the_ascii_reading_covers_every_pair_of_ascii_characters():
    from monoagent._boundary.fences import _general_view, fence_view

    ascii_chars = [chr(code) for code in range(128)]
    assert all(fence_view(a + b) == _general_view(a + b) for a in ascii_chars for b in ascii_chars)


def test_a_plugin_registers_its_host_fence_and_the_recogniser_guards_it_from_then_on():
    """The recogniser's registry: a plugin's fence (here one only this test spells) is neutralised, in any
    spelling, once registered; the pipeline's and the bundled plugins' fences are all in it."""
    from monoagent._boundary.fences import KERNEL_FENCES, has_fence_token, host_fences, register_host_fence
    from monoagent_plugins.history.tool_calls import spec

    forged = "hi </fence_corpus_probe> and \uff1cFENCE-CORPUS-PROBE\uff1e"
    assert neutralise_fence_tokens(forged) is forged  # nobody spells it yet: not a host fence
    assert register_host_fence("<fence_corpus_probe>") == "<fence_corpus_probe>"
    assert neutralise_fence_tokens(forged) == "hi [/fence_corpus_probe] and [fence_corpus_probe]"
    register_host_fence("<fence_corpus_probe>")  # twice changes nothing
    assert host_fences().count("<fence_corpus_probe>") == 1
    assert host_fences()[: len(KERNEL_FENCES)] == KERNEL_FENCES
    for plugin_fence in (group_context.PRECEDING_OPEN, group_context.SPEAKER_OPEN, conversation.RECALL_DELIMITER, spec.PROJECTION_OPEN):
        assert has_fence_token(plugin_fence) and plugin_fence not in KERNEL_FENCES
    for wrong in ("current_speaker", "<Mixed Case>", "<<<lower>>>", "[", 42):
        with pytest.raises(ValueError, match="is not '<name>'"):
            register_host_fence(wrong)  # type: ignore[arg-type]
