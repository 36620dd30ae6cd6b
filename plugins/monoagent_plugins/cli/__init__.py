"""The terminal: the console channel behind monoagent chat, and the info, registry and plugin commands."""
