"""The system prompt: the sections from guardrails to runtime facts, and the user message."""
