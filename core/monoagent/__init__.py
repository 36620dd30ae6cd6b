"""monoagent: build LLM agents from plugins.

The public API, importable from here: :class:`Agent`, :data:`hookimpl` (mark hook
implementations), the data model (:class:`TurnRequest`, :class:`Section`, :class:`Message`,
:class:`ToolSpec`, ...), :class:`ToolContext` (what a tool handler receives), :func:`tool` (a typed
function as a tool) and the errors.
Names are loaded on first use, so ``import monoagent`` stays cheap for the command line.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Agent": "_agent",
    "RunHandle": "_pipeline.run_handle",
    "hookimpl": "_kernel.hookspecs",
    "hookspec": "_kernel.hookspecs",
    "Config": "_kernel.config",
    "load_config": "_kernel.config_loading",
    "Turn": "_kernel.turn",
    "StepOutcome": "_kernel.turn",
    "ToolContext": "_kernel.tool_context",
    "tool": "_kernel.typed_tool",
    "TypedTool": "_kernel.typed_tool",
    "Tool": "_kernel.interfaces",
    "ToolSourceFailure": "_kernel.interfaces",
    "CompactionOutcome": "_kernel.interfaces",
    "CommitReceipt": "_kernel.interfaces",
    "ConversationInfo": "_kernel.interfaces",
    "SubagentSpec": "_kernel.subagents",
    "Approval": "_kernel.permissions",
    "ApprovalRequest": "_kernel.permissions",
    "PermissionProfile": "_kernel.permissions",
    "permission_profile": "_kernel.permissions",
    "ToolApprover": "_kernel.permissions",
    **{
        name: "_kernel.model"
        for name in (
            "AssembledPrompt", "Attachment", "Diagnostic", "MemoryHit", "Message", "PrecedingMessage",
            "PromptManifest", "ProviderRequest", "RunEvent", "Section", "Speaker", "StepFinished",
            "Surface", "TextDelta", "ToolCall", "ToolCallRequested", "ToolResult", "ToolSpec",
            "ToolStatus", "TurnRequest", "TurnResult", "Usage", "UserMessagePart",
        )
    },
    **{
        name: "_kernel.errors"
        for name in (
            "MonoagentError", "ConfigError", "PluginError", "HookError", "ComponentError",
            "AdmissionRejected", "ProviderError", "ContextLimitError", "TurnFailed", "EmptyResponse",
            "HookDeprecationWarning", "ToolDefinitionError", "ExitCode", "UsageError", "HookResultError",
            "LocalPluginError", "ComponentFactoryError",
        )
    },
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'monoagent' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
