"""Conversation history: the files store, tool-call history, compaction and the history commands."""
