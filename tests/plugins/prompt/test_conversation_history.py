"""The bundled conversation-history section renders each message as it is, turn after turn.

Entries are cached by message identity (the history store hands back the same objects every
turn); these tests hold the cache to giving each message its own entry and to staying bounded.
"""

from __future__ import annotations

import gc

from monoagent._kernel.model import Message, ToolCall
from monoagent_plugins.prompt import conversation


def test_each_message_renders_its_own_entry_even_where_a_freed_one_lived() -> None:
    for i in range(2000):  # freed messages' memory (and so their id) is reused at once by the next
        message = Message("user", f"message {i}", name=f"speaker {i % 3}")
        assert conversation.render_history(None, [message]).text.endswith(f"User (speaker {i % 3}): message {i}")
        del message
        if i % 500 == 0:
            gc.collect()
    assert len(conversation._ENTRIES) <= conversation._ENTRIES_MAX


def test_a_retained_message_renders_the_same_every_turn_and_like_an_equal_copy() -> None:
    history = [
        Message("user", "list the files"),
        Message("assistant", "done\nsecond line", tool_calls=(ToolCall("c1", "shell", {"cmd": "ls"}),)),
    ]
    first = conversation.render_history(None, history).text
    assert conversation.render_history(None, history).text == first
    copies = [Message(m.role, m.content, tool_calls=m.tool_calls) for m in history]
    assert conversation.render_history(None, copies).text == first
    assert first.endswith("Assistant: done\n  second line\n  [called tools: shell]")
