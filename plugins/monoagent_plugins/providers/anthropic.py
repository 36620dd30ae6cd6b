"""The ``anthropic`` provider: ``anthropic:<model>`` on the Anthropic Messages API, streamed.

The wire format lives in :mod:`monoagent_plugins.providers.anthropic_wire`, imported on first use.
The system prompt travels as two system blocks: the stable text marked
``cache_control: {"type": "ephemeral"}`` (the provider caches the prefix up to and including it)
and then the dynamic text, unmarked; an empty dynamic text sends no second block, and the cache
boundary marker is never sent. Tools travel in ``tools`` (name, description, input_schema);
assistant tool calls become ``tool_use`` blocks and tool results ``tool_result`` blocks, with
consecutive tool results grouped into one user message. With ``thinkingBudgetTokens`` set the
request turns on extended thinking; the ``thinking`` and ``redacted_thinking`` blocks the model
streams are kept on its assistant message (a warm session's transcript) and sent back verbatim,
before its text and tool calls. Usage maps ``input_tokens`` (uncached
input), ``output_tokens``, ``cache_read_input_tokens`` and ``cache_creation_input_tokens``.

Credentials and endpoint: ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL`` (or the
``providers.anthropic`` keys ``apiKey`` and ``baseUrl``). Needs the ``anthropic`` extra
(httpx, httpx-sse), imported on the first call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from monoagent import ComponentRegistrar, ConfigSectionRegistrar, ProviderRuntime, hookimpl, setting
from monoagent_plugins.providers import settings as provider_settings

if TYPE_CHECKING:
    from monoagent import Agent
    from monoagent_plugins.providers.anthropic_wire import AnthropicRuntime

API_VERSION = "2023-06-01"
PROVIDER = "anthropic"


@attrs.define
class AnthropicConfig:
    """providers.anthropic: the Anthropic Messages API."""

    base_url: str = setting(
        "https://api.anthropic.com", doc="Base URL of the Messages API (requests go to <baseUrl>/v1/messages).",
        env="ANTHROPIC_BASE_URL",
    )
    api_key: str | None = setting(
        None, doc="API key; prefer the environment variable over writing it into a file.", env="ANTHROPIC_API_KEY", secret=True,
    )
    max_output_tokens: int = provider_settings.max_output_tokens(
        "ANTHROPIC", 4096, "max_tokens of each request (the answer's length cap)."
    )
    timeout_seconds: float = provider_settings.read_timeout("ANTHROPIC")
    connect_timeout_seconds: float = provider_settings.connect_timeout("ANTHROPIC")
    context_window: int = provider_settings.context_window(
        "ANTHROPIC", 200_000, "The model's context window"
    )
    thinking_budget_tokens: int | None = setting(
        None,
        doc="Extended thinking: the tokens the model may spend reasoning before it answers (unset = thinking off). "
        "At least 1024 and below maxOutputTokens, which it counts against.",
        env="MONO_AGENT_ANTHROPIC_THINKING_BUDGET_TOKENS", min=1024, max=1_000_000,
    )

    def __attrs_post_init__(self) -> None:
        budget = self.thinking_budget_tokens
        if budget is not None and budget >= self.max_output_tokens:
            raise ValueError(
                f"thinkingBudgetTokens = {budget} must be below maxOutputTokens = {self.max_output_tokens} "
                f"(the thinking budget is part of the answer's token cap): lower it or raise maxOutputTokens"
            )


# --------------------------------------------------------------------------- the request body


def make_runtime(agent: Agent, model: str) -> AnthropicRuntime:
    """The runtime for ``anthropic:<model>``; the wire code is imported here, on first use."""
    from monoagent_plugins.providers.anthropic_wire import AnthropicRuntime

    config = agent.config.section("providers.anthropic", AnthropicConfig)
    if not config.api_key:
        raise provider_settings.missing_setting(
            PROVIDER, model, "API key", "set ANTHROPIC_API_KEY in the environment (or providers.anthropic.apiKey in the config file)"
        )
    return AnthropicRuntime(
        model, config, config.api_key, max_event_bytes=agent.config.providers.client.max_stream_event_bytes
    )


@hookimpl(trylast=True)
def register_providers(register: ComponentRegistrar[ProviderRuntime]) -> None:
    register(PROVIDER, make_runtime, description="Anthropic Messages API (ANTHROPIC_API_KEY)")


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("providers.anthropic", AnthropicConfig)
