"""The ``anthropic`` provider: ``anthropic:<model>`` on the Anthropic Messages API, streamed.

The wire format lives in :mod:`monoagent_plugins.lib.anthropic_wire`, imported on first use.
The system prompt travels as two system blocks: the stable text marked
``cache_control: {"type": "ephemeral"}`` (the provider caches the prefix up to and including it)
and then the dynamic text, unmarked; an empty dynamic text sends no second block, and the cache
boundary marker is never sent. Tools travel in ``tools`` (name, description, input_schema);
assistant tool calls become ``tool_use`` blocks and tool results ``tool_result`` blocks, with
consecutive tool results grouped into one user message. Usage maps ``input_tokens`` (uncached
input), ``output_tokens``, ``cache_read_input_tokens`` and ``cache_creation_input_tokens``.

Credentials and endpoint: ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL`` (or the
``providers.anthropic`` keys ``apiKey`` and ``baseUrl``). Needs the ``anthropic`` extra
(httpx, httpx-sse), imported on the first call.
"""

from __future__ import annotations

from typing import Any

import attrs

from monoagent.kernel.config import setting
from monoagent.kernel.errors import ProviderError
from monoagent.kernel.host import bundled_impl
from monoagent.kernel.registrars import ConfigSectionRegistrar, ProviderRegistrar

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
    max_output_tokens: int = setting(
        4096, doc="max_tokens of each request (the answer's length cap).",
        env="MONO_AGENT_ANTHROPIC_MAX_OUTPUT_TOKENS", min=1, max=1_000_000,
    )
    timeout_seconds: float = setting(
        600.0, doc="Read timeout: the longest wait for the next piece of the stream (seconds).",
        env="MONO_AGENT_ANTHROPIC_TIMEOUT_SECONDS", min=0.1, max=3600,
    )
    connect_timeout_seconds: float = setting(
        10.0, doc="Connect timeout (seconds).", env="MONO_AGENT_ANTHROPIC_CONNECT_TIMEOUT_SECONDS", min=0.1, max=600,
    )
    context_window: int = setting(
        200_000, doc="The model's context window in tokens (drives the compaction budget).",
        env="MONO_AGENT_ANTHROPIC_CONTEXT_WINDOW", min=1024, max=100_000_000,
    )


# --------------------------------------------------------------------------- the request body


def make_runtime(agent: Any, model: str) -> Any:
    """The runtime for ``anthropic:<model>``; the wire code is imported here, on first use."""
    from monoagent_plugins.lib.anthropic_wire import AnthropicRuntime

    config: AnthropicConfig = agent.config.section("providers.anthropic")
    if not config.api_key:
        raise ProviderError(
            f"anthropic: no API key for anthropic:{model}; set ANTHROPIC_API_KEY in the environment "
            f"(or providers.anthropic.apiKey in the config file)",
            provider=PROVIDER,
        )
    return AnthropicRuntime(
        model, config, config.api_key, max_event_bytes=agent.config.providers.pi_native.max_stream_event_bytes
    )


@bundled_impl
def register_providers(register: ProviderRegistrar) -> None:
    register(PROVIDER, make_runtime, description="Anthropic Messages API (ANTHROPIC_API_KEY)")


@bundled_impl
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("providers.anthropic", AnthropicConfig)
