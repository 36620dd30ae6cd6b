"""What a tool may be called and the documented action categories (the providers' and the permission profiles' rules)."""

from __future__ import annotations

import re

TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A tool's name (the providers' rule, ``^[a-zA-Z0-9_-]{1,64}$``), checked with ``fullmatch`` wherever a tool is made."""


def tool_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a tool's name (:data:`TOOL_NAME_PATTERN`), or None when it can."""
    ok = isinstance(name, str) and TOOL_NAME_PATTERN.fullmatch(name)
    return None if ok else f"tool name {name!r} is not valid: 1 to 64 ASCII letters, digits, '_' or '-' (the providers' tool-name rule)"


#: The documented tool action categories (a custom permission profile may name others).
TOOL_CATEGORIES: tuple[str, ...] = ("read", "pure", "file_write", "shell", "network", "subagent", "external")
