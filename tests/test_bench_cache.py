"""bench/cache.py measures what its docstring says, on hand-built request bodies of each wire."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def cache():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("cache")
    finally:
        sys.path.remove(str(BENCH))


def size(block) -> int:
    return len(json.dumps(block, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode())


def text(value, marked=False):
    block = {"type": "text", "text": value}
    return {**block, "cache_control": {"type": "ephemeral"}} if marked else block


def test_anthropic_serves_the_prefix_through_a_breakpoint_of_the_previous_request(cache):
    system = [text("S" * 500, marked=True)]
    first = {"system": system, "messages": [{"role": "user", "content": [text("q1")]}]}
    second = {"system": system, "messages": [
        {"role": "user", "content": [text("q1")]},
        {"role": "assistant", "content": [text("a1", marked=True)]},
        {"role": "user", "content": [text("q2")]},
    ]}
    third = {"system": system, "messages": [
        {"role": "user", "content": [text("q1")]},
        {"role": "assistant", "content": [text("a1")]},
        {"role": "user", "content": [text("q2")]},
        {"role": "assistant", "content": [text("a2", marked=True)]},
        {"role": "user", "content": [text("q3")]},
    ]}
    stable = len("system:") + size(text("S" * 500))
    served, total = cache.anthropic_served(first, second)
    assert served == stable, "q1 matches too, but no breakpoint of the first request covers it"
    served, total = cache.anthropic_served(second, third)
    assert served == stable + len("user:") + size(text("q1")) + len("assistant:") + size(text("a1"))
    assert total == served + len("user:") + size(text("q2")) + len("assistant:") + size(text("a2")) + len("user:") + size(text("q3"))
    history_in_system = dict(third, system=[text("S" * 500, marked=True), text("history changed")])
    assert cache.anthropic_served(third, history_in_system)[0] == stable


def test_openai_serves_the_common_prefix_with_the_previous_request(cache):
    first = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "q1"}]}
    second = {"messages": [*first["messages"], {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]}
    served, total = cache.openai_served(first, second)
    assert served == len(cache.openai_text(first)) - 1 and total == len(cache.openai_text(second))  # all but the closing ']'
    changed = {"messages": [{"role": "system", "content": "T"}, *second["messages"][1:]]}
    assert cache.openai_served(second, changed)[0] == len('[][{"content":"')
