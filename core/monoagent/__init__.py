"""monoagent: build LLM agents from plugins.

This module is the public API. Plugins, contrib distributions and users import from ``monoagent``
alone (and, in their tests, from :mod:`monoagent.testing`); everything else in the package is
private by name (``monoagent._kernel``, ``monoagent._pipeline``, ...) and may change without notice.
A lint rule refuses deep imports from the bundled plugins and from ``contrib/``, which are the
proof that this surface suffices. The API reference documents each name by what it is for
(docs/api/), and docs/api/public-api.txt records the surface so that a change that breaks it is
seen (tests/test_public_api.py).

Each name is declared once, in the ``TYPE_CHECKING`` block below, which type checkers and the
documentation generator read as they read any import. At run time a name is imported on first
use, from the module that block names, so ``import monoagent`` stays cheap for the command line.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    # ---------------------------------------------------------------- the Agent, its configuration and its runs
    from monoagent._agent import Agent as Agent
    from monoagent._kernel.config import Config as Config
    from monoagent._kernel.config import ProviderClientConfig as ProviderClientConfig
    from monoagent._kernel.config import check_model as check_model
    from monoagent._kernel.config import setting as setting
    from monoagent._kernel.config_keys import NAME_ALLOWED as CONFIG_NAME_ALLOWED
    from monoagent._kernel.config_keys import NAME_PATTERN as CONFIG_NAME_PATTERN
    from monoagent._kernel.config_keys import camel as camel_case
    from monoagent._kernel.config_keys import kernel_tables as kernel_config_tables
    from monoagent._kernel.config_loading import load_config as load_config
    from monoagent._kernel.config_loading import parse_ascii_number as parse_ascii_number
    from monoagent._kernel.turn_request import TurnRequest as TurnRequest
    from monoagent._kernel.turn_request import TurnResult as TurnResult
    from monoagent._kernel.turn_request import TOOL_CHOICES as TOOL_CHOICES
    from monoagent._pipeline.client_tools import paired_tool_messages as paired_tool_messages
    from monoagent._kernel.tool_summary import one_line_cut as one_line_cut
    from monoagent._kernel.tool_summary import tool_argument_summary as tool_argument_summary
    from monoagent._kernel.subagents import SubagentSpec as SubagentSpec
    from monoagent._pipeline.harness import Harness as Harness
    from monoagent._pipeline.run_control import new_run_id as new_run_id
    from monoagent._pipeline.run_handle import RunHandle as RunHandle

    # ---------------------------------------------------------------- hooks, plugins and components
    from monoagent._kernel.components import CHANNELS as CHANNELS
    from monoagent._kernel.components import COMPACTION_POLICIES as COMPACTION_POLICIES
    from monoagent._kernel.components import EMBEDDERS as EMBEDDERS
    from monoagent._kernel.components import HISTORY_STORES as HISTORY_STORES
    from monoagent._kernel.components import KINDS as COMPONENT_KINDS
    from monoagent._kernel.components import MEMORY_TIERS as MEMORY_TIERS
    from monoagent._kernel.components import NOTIFIERS as NOTIFIERS
    from monoagent._kernel.components import PROVIDERS as PROVIDERS
    from monoagent._kernel.components import SESSION_BACKENDS as SESSION_BACKENDS
    from monoagent._kernel.components import TOOL_HISTORY_STORES as TOOL_HISTORY_STORES
    from monoagent._kernel.components import AgentComponents as AgentComponents
    from monoagent._kernel.components import Component as Component
    from monoagent._kernel.components import ComponentKind as ComponentKind
    from monoagent._kernel.components import missing_members as missing_members
    from monoagent._kernel.hooks import Answer as Answer
    from monoagent._kernel.hooks import HookCall as HookCall
    from monoagent._kernel.hookspecs import hookimpl as hookimpl
    from monoagent._kernel.hookspecs import hookspec as hookspec
    from monoagent._kernel.host import PluginRecord as PluginRecord
    from monoagent._kernel.host import await_me_maybe as await_me_maybe
    from monoagent._kernel.registrars import ComponentRegistrar as ComponentRegistrar
    from monoagent._kernel.registrars import ConfigSectionRegistrar as ConfigSectionRegistrar
    from monoagent._kernel.registrars import Registration as Registration
    from monoagent._kernel.registrars import ToolRegistrar as ToolRegistrar
    from monoagent._kernel.sections import SectionSpec as SectionSpec

    # ---------------------------------------------------------------- the turn a hook reads, and a tool's call
    from monoagent._kernel.tool_context import ToolContext as ToolContext
    from monoagent._kernel.turn import RECOVERABLE_TOOL_STATUSES as RECOVERABLE_TOOL_STATUSES
    from monoagent._kernel.turn import FailedToolCall as FailedToolCall
    from monoagent._kernel.turn import ProviderRound as ProviderRound
    from monoagent._kernel.turn import SessionInfo as SessionInfo
    from monoagent._kernel.turn import StepOutcome as StepOutcome
    from monoagent._kernel.turn import Turn as Turn
    from monoagent._kernel.typed_tool import TypedTool as TypedTool
    from monoagent._kernel.typed_tool import tool as tool

    # ---------------------------------------------------------------- the data model
    from monoagent._kernel.turn_request import REQUEST_CONTEXT_MAX_CHARS as REQUEST_CONTEXT_MAX_CHARS
    from monoagent._kernel.model import SILENT_RESULT as SILENT_RESULT
    from monoagent._kernel.tool_names import TOOL_CATEGORIES as TOOL_CATEGORIES
    from monoagent._kernel.tool_names import TOOL_NAME_PATTERN as TOOL_NAME_PATTERN
    from monoagent._kernel.model import ArtifactRef as ArtifactRef
    from monoagent._kernel.model import AssembledPrompt as AssembledPrompt
    from monoagent._kernel.model import Attachment as Attachment
    from monoagent._kernel.model import BinaryBlock as BinaryBlock
    from monoagent._kernel.model import ContentBlock as ContentBlock
    from monoagent._kernel.model import ContinuityEnvelope as ContinuityEnvelope
    from monoagent._kernel.model import Diagnostic as Diagnostic
    from monoagent._kernel.model import ImageBlock as ImageBlock
    from monoagent._kernel.model import MemoryHit as MemoryHit
    from monoagent._kernel.model import Message as Message
    from monoagent._kernel.model import PrecedingMessage as PrecedingMessage
    from monoagent._kernel.model import PromptManifest as PromptManifest
    from monoagent._kernel.model import ProviderEvent as ProviderEvent
    from monoagent._kernel.model import ProviderRequest as ProviderRequest
    from monoagent._kernel.model import ReasoningBlock as ReasoningBlock
    from monoagent._kernel.model import RunEvent as RunEvent
    from monoagent._kernel.model import Section as Section
    from monoagent._kernel.model import Speaker as Speaker
    from monoagent._kernel.model import StepFinished as StepFinished
    from monoagent._kernel.model import StreamProgress as StreamProgress
    from monoagent._kernel.model import Surface as Surface
    from monoagent._kernel.model import TextBlock as TextBlock
    from monoagent._kernel.model import TextDelta as TextDelta
    from monoagent._kernel.model import ToolActivity as ToolActivity
    from monoagent._kernel.model import ToolCall as ToolCall
    from monoagent._kernel.model import ToolCallRequested as ToolCallRequested
    from monoagent._kernel.model import ToolResult as ToolResult
    from monoagent._kernel.model import ToolSpec as ToolSpec
    from monoagent._kernel.model import ToolStatus as ToolStatus
    from monoagent._kernel.model import Usage as Usage
    from monoagent._kernel.model import UserMessagePart as UserMessagePart

    # ---------------------------------------------------------------- the protocols components implement
    from monoagent._kernel.interfaces import BrowsableMemoryTier as BrowsableMemoryTier
    from monoagent._kernel.interfaces import Channel as Channel
    from monoagent._kernel.interfaces import CheckedChannel as CheckedChannel
    from monoagent._kernel.interfaces import ClosableMemoryTier as ClosableMemoryTier
    from monoagent._kernel.interfaces import CompactionOutcome as CompactionOutcome
    from monoagent._kernel.interfaces import CompactionPolicy as CompactionPolicy
    from monoagent._kernel.interfaces import Embedder as Embedder
    from monoagent._kernel.interfaces import MemoryRecord as MemoryRecord
    from monoagent._kernel.interfaces import MemoryStats as MemoryStats
    from monoagent._kernel.interfaces import MemoryTier as MemoryTier
    from monoagent._kernel.interfaces import Notification as Notification
    from monoagent._kernel.interfaces import Notifier as Notifier
    from monoagent._kernel.interfaces import ProviderRuntime as ProviderRuntime
    from monoagent._kernel.interfaces import SelectiveMemoryTier as SelectiveMemoryTier
    from monoagent._kernel.interfaces import ServedChannel as ServedChannel
    from monoagent._kernel.interfaces import StoredCompaction as StoredCompaction
    from monoagent._kernel.interfaces import Tool as Tool
    from monoagent._kernel.interfaces import ToolEnabled as ToolEnabled
    from monoagent._kernel.interfaces import ToolHandler as ToolHandler
    from monoagent._kernel.interfaces import ToolSourceFailure as ToolSourceFailure
    from monoagent._kernel.interfaces import WindowedProviderRuntime as WindowedProviderRuntime
    from monoagent._kernel.sessions import ClearableSessionBackend as ClearableSessionBackend
    from monoagent._kernel.sessions import InMemorySessionBackend as InMemorySessionBackend
    from monoagent._kernel.sessions import OpenedSession as OpenedSession
    from monoagent._kernel.sessions import SessionBackend as SessionBackend
    from monoagent._kernel.sessions import SessionClearReport as SessionClearReport
    from monoagent._kernel.sessions import SessionCommit as SessionCommit
    from monoagent._kernel.sessions import WarmSession as WarmSession
    from monoagent._kernel.sessions import new_epoch as new_epoch
    from monoagent._kernel.sessions import session_clock as session_clock
    from monoagent._kernel.stores import CommitReceipt as CommitReceipt
    from monoagent._kernel.stores import ConversationInfo as ConversationInfo
    from monoagent._kernel.stores import DurableHistoryStore as DurableHistoryStore
    from monoagent._kernel.stores import HistoryResetReport as HistoryResetReport
    from monoagent._kernel.stores import HistoryStats as HistoryStats
    from monoagent._kernel.stores import HistoryStore as HistoryStore
    from monoagent._kernel.stores import HistoryWarningCallback as HistoryWarningCallback
    from monoagent._kernel.stores import LogicalLookupStore as LogicalLookupStore
    from monoagent._kernel.stores import ManagedHistoryStore as ManagedHistoryStore
    from monoagent._kernel.stores import ProviderSessionState as ProviderSessionState
    from monoagent._kernel.stores import ProviderSessionStore as ProviderSessionStore
    from monoagent._kernel.stores import ToolHistoryClearReport as ToolHistoryClearReport
    from monoagent._kernel.stores import ToolHistoryStats as ToolHistoryStats
    from monoagent._kernel.stores import ToolHistoryStore as ToolHistoryStore
    from monoagent._kernel.stores import ToolInvocation as ToolInvocation
    from monoagent._kernel.stores import ToolRecord as ToolRecord
    from monoagent._kernel.stores import logical_conversation_id as logical_conversation_id
    from monoagent._kernel.stores import record_id as record_id

    # ---------------------------------------------------------------- what a provider, a policy or a tool builds on
    from monoagent._pipeline.assembly import compile_prompt as compile_prompt
    from monoagent._pipeline.assembly import current_user_message as current_user_message
    from monoagent._pipeline.continuity_account import accounted_records as accounted_records
    from monoagent._pipeline.sessions import artifact_refs_block as artifact_refs_block
    from monoagent._pipeline.stream import MAX_ARGUMENT_DEPTH as MAX_ARGUMENT_DEPTH
    from monoagent._pipeline.stream import MAX_TOOL_CALLS_PER_STEP as MAX_TOOL_CALLS_PER_STEP
    from monoagent._pipeline.stream import StreamLimits as StreamLimits
    from monoagent._pipeline.stream import read_step as read_step
    from monoagent._pipeline.stream import too_deep as too_deep
    from monoagent._pipeline.tool_loop import ToolOffer as ToolOffer
    from monoagent._pipeline.tool_loop import provided_tools as provided_tools

    # ---------------------------------------------------------------- permissions
    from monoagent._kernel.permissions import ALL as ALL_CATEGORIES
    from monoagent._kernel.permissions import READ as READ_CATEGORY
    from monoagent._kernel.permissions import Approval as Approval
    from monoagent._kernel.permissions import ApprovalRequest as ApprovalRequest
    from monoagent._kernel.permissions import PermissionProfile as PermissionProfile
    from monoagent._kernel.permissions import ToolApprover as ToolApprover
    from monoagent._kernel.permissions import permission_profile as permission_profile

    # ---------------------------------------------------------------- errors
    from monoagent._boundary.documents import DocumentError as DocumentError
    from monoagent._boundary.files import FileTooLarge as FileTooLarge
    from monoagent._boundary.files import NotRegularFile as NotRegularFile
    from monoagent._boundary.files import SymlinkedPath as SymlinkedPath
    from monoagent._boundary.files import UnsafeFileError as UnsafeFileError
    from monoagent._boundary.strict_json import StrictJSONError as StrictJSONError
    from monoagent._kernel.errors import AdmissionRejected as AdmissionRejected
    from monoagent._kernel.errors import ClientToolsRefused as ClientToolsRefused
    from monoagent._kernel.errors import CommitFailed as CommitFailed
    from monoagent._kernel.errors import ComponentError as ComponentError
    from monoagent._kernel.errors import ComponentFactoryError as ComponentFactoryError
    from monoagent._kernel.errors import ConfigError as ConfigError
    from monoagent._kernel.errors import ContextLimitError as ContextLimitError
    from monoagent._kernel.errors import EmptyResponse as EmptyResponse
    from monoagent._kernel.errors import ExitCode as ExitCode
    from monoagent._kernel.errors import HistoryStoreError as HistoryStoreError
    from monoagent._kernel.errors import HookDeprecationWarning as HookDeprecationWarning
    from monoagent._kernel.errors import HookError as HookError
    from monoagent._kernel.errors import HookResultError as HookResultError
    from monoagent._kernel.errors import InputTooLarge as InputTooLarge
    from monoagent._kernel.errors import LocalPluginError as LocalPluginError
    from monoagent._kernel.errors import MonoagentError as MonoagentError
    from monoagent._kernel.errors import NotifyFailed as NotifyFailed
    from monoagent._kernel.errors import PluginError as PluginError
    from monoagent._kernel.errors import ProviderError as ProviderError
    from monoagent._kernel.errors import RepeatedToolCall as RepeatedToolCall
    from monoagent._kernel.errors import RunDeadlineExceeded as RunDeadlineExceeded
    from monoagent._kernel.errors import ToolDefinitionError as ToolDefinitionError
    from monoagent._kernel.errors import ToolHistoryError as ToolHistoryError
    from monoagent._kernel.errors import ToolHistoryRejected as ToolHistoryRejected
    from monoagent._kernel.errors import ToolHistoryUnavailable as ToolHistoryUnavailable
    from monoagent._kernel.errors import TurnFailed as TurnFailed
    from monoagent._kernel.errors import UsageError as UsageError
    from monoagent._kernel.registrars import RegistrationError as RegistrationError
    from monoagent._pipeline.assembly import AssemblyError as AssemblyError

    # ---------------------------------------------------------------- untrusted text, JSON, documents and files
    from monoagent._boundary.documents import MAX_NESTING as DOCUMENT_MAX_NESTING
    from monoagent._boundary.documents import load_document as load_document
    from monoagent._boundary.fences import capped as capped
    from monoagent._boundary.fences import host_fences as host_fences
    from monoagent._boundary.fences import indent_continuations as indent_continuations
    from monoagent._boundary.fences import neutralise_fence_tokens as neutralise_fence_tokens
    from monoagent._boundary.fences import neutralise_untrusted as neutralise_untrusted
    from monoagent._boundary.fences import one_line as one_line
    from monoagent._boundary.fences import quote_block as quote_block
    from monoagent._boundary.fences import quote_inline as quote_inline
    from monoagent._boundary.fences import register_host_fence as register_host_fence
    from monoagent._boundary.fences import speaker_label as speaker_label
    from monoagent._boundary.files import fsync_directory as fsync_directory
    from monoagent._boundary.files import open_directory_under as open_directory_under
    from monoagent._boundary.files import open_file_under as open_file_under
    from monoagent._boundary.files import private_directory_problem as private_directory_problem
    from monoagent._boundary.files import private_directory_under as private_directory_under
    from monoagent._boundary.files import read_open_file as read_open_file
    from monoagent._boundary.files import read_regular_text as read_regular_text
    from monoagent._boundary.files import replace_file_durably as replace_file_durably
    from monoagent._boundary.processes import ProcessIdentity as ProcessIdentity
    from monoagent._boundary.strict_json import loads as strict_json_loads
    from monoagent._boundary.strict_json import nesting_over as json_nesting_over
    from monoagent._boundary.text import LINE_BREAKS as LINE_BREAKS
    from monoagent._boundary.text import LazyPattern as LazyPattern
    from monoagent._boundary.text import Truncated as Truncated
    from monoagent._boundary.text import scrub_unicode as scrub_unicode
    from monoagent._boundary.text import utf8_len as utf8_len
    from monoagent._boundary.text import utf8_prefix as utf8_prefix
    from monoagent._boundary.text import quote_json as quote_json
    from monoagent._boundary.text import utf8_suffix as utf8_suffix
    from monoagent._boundary.text import valid_unicode as valid_unicode

    # ---------------------------------------------------------------- records at the text edges, and logs
    from monoagent._kernel.log import configure_server_log as configure_server_log
    from monoagent._kernel.extras import missing_extra as missing_extra
    from monoagent._kernel.log import failure_text as failure_text
    from monoagent._kernel.log import log_as_library as log_as_library
    from monoagent._kernel.log import logger as logger
    from monoagent._kernel.serial import converter as converter
    from monoagent._kernel.serial import unstructure as unstructure
    from monoagent._kernel.serial import wire_converter as wire_converter

    # ---------------------------------------------------------------- the terminal and plugin commands
    from monoagent._cli.markdown import markdown_console as markdown_console
    from monoagent._cli.params import AsciiIntRange as AsciiIntRange
    from monoagent._cli.plugin_commands import command_agent as command_agent
    from monoagent._cli.plugin_commands import run_async as run_async
    from monoagent._cli.terminal import AnswerPrinter as AnswerPrinter
    from monoagent._cli.terminal import KeptTerminal as KeptTerminal
    from monoagent._cli.terminal import accept_undecodable as accept_undecodable
    from monoagent._cli.terminal import echo as echo
    from monoagent._cli.terminal import echo_json as echo_json
    from monoagent._cli.terminal import edited_input as edited_input
    from monoagent._cli.terminal import input_text as input_text
    from monoagent._cli.terminal import kept_terminal_state as kept_terminal_state
    from monoagent._cli.terminal import read_capped as read_capped
    from monoagent._cli.terminal import read_stdin as read_stdin
    from monoagent._cli.terminal import terminal_text as terminal_text
    from monoagent._cli.tool_lines import ToolLines as ToolLines


@functools.cache
def _exports() -> dict[str, tuple[str, str]]:
    """Public name -> (module, name in it): the imports of the ``TYPE_CHECKING`` block above, read once."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING")
    return {
        alias.asname or alias.name: (node.module, alias.name)
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module is not None
        for alias in node.names
    }


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return sorted(_exports())
    found = _exports().get(name)
    if found is None:
        raise AttributeError(f"module 'monoagent' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(found[0]), found[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*_exports(), "__version__"])
