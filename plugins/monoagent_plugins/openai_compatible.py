"""The ``openai-compatible`` provider: any server with an OpenAI-style Chat Completions API.

For vLLM, the llama.cpp server, text-generation-inference and the like. The base URL is required
(``providers.openaiCompatible.baseUrl`` or ``MONO_AGENT_OPENAI_COMPATIBLE_BASE_URL``, for example
``http://127.0.0.1:8000/v1``); requests go to ``<baseUrl>/chat/completions``. A key is optional
(``MONO_AGENT_OPENAI_COMPATIBLE_API_KEY``), sent as ``Authorization: Bearer``. The wire format is in
:mod:`monoagent_plugins.lib.openai_wire`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from monoagent.kernel.config import setting
from monoagent.kernel.errors import ProviderError
from monoagent.kernel.host import bundled_impl
from monoagent.kernel.registrars import ConfigSectionRegistrar, ProviderRegistrar
from monoagent_plugins.lib.provider_http import normalise_base_url

if TYPE_CHECKING:
    from monoagent_plugins.lib.openai_wire import OpenAIChatRuntime

PROVIDER = "openai-compatible"


@attrs.define
class OpenAICompatibleConfig:
    """providers.openaiCompatible: a server speaking OpenAI's Chat Completions API."""

    base_url: str | None = setting(
        None, doc="Base URL, required (requests go to <baseUrl>/chat/completions).",
        env="MONO_AGENT_OPENAI_COMPATIBLE_BASE_URL", example="http://127.0.0.1:8000/v1",
    )
    api_key: str | None = setting(
        None, doc="Optional key, sent as 'Authorization: Bearer <key>'.", env="MONO_AGENT_OPENAI_COMPATIBLE_API_KEY", secret=True,
    )
    max_output_tokens: int | None = setting(
        None, doc="max_tokens of each request. Unset: the server's default.",
        env="MONO_AGENT_OPENAI_COMPATIBLE_MAX_OUTPUT_TOKENS", min=1, max=1_000_000,
    )
    timeout_seconds: float = setting(
        600.0, doc="Read timeout: the longest wait for the next piece of the stream (seconds).",
        env="MONO_AGENT_OPENAI_COMPATIBLE_TIMEOUT_SECONDS", min=0.1, max=3600,
    )
    connect_timeout_seconds: float = setting(
        10.0, doc="Connect timeout (seconds).", env="MONO_AGENT_OPENAI_COMPATIBLE_CONNECT_TIMEOUT_SECONDS", min=0.1, max=600,
    )
    context_window: int = setting(
        8192, doc="The context length the server runs the model with, in tokens (drives the compaction budget).",
        env="MONO_AGENT_OPENAI_COMPATIBLE_CONTEXT_WINDOW", min=1024, max=100_000_000,
    )


def make_runtime(agent: Any, model: str) -> OpenAIChatRuntime:
    from monoagent_plugins.lib.openai_wire import chat_runtime  # the wire code loads on first use

    config: OpenAICompatibleConfig = agent.config.section("providers.openaiCompatible")
    if not config.base_url:
        raise ProviderError(
            f"openai-compatible: no base URL for openai-compatible:{model}; set MONO_AGENT_OPENAI_COMPATIBLE_BASE_URL "
            f"(or providers.openaiCompatible.baseUrl), for example http://127.0.0.1:8000/v1",
            provider=PROVIDER,
        )
    return chat_runtime(
        PROVIDER, model, config,
        url=f"{normalise_base_url(config.base_url)}/chat/completions",
        setting="providers.openaiCompatible.baseUrl",
        url_env="MONO_AGENT_OPENAI_COMPATIBLE_BASE_URL",
        headers={"authorization": f"Bearer {config.api_key}"} if config.api_key else {},
        key_env="MONO_AGENT_OPENAI_COMPATIBLE_API_KEY",
        max_event_bytes=agent.config.providers.pi_native.max_stream_event_bytes,
    )


@bundled_impl
def register_providers(register: ProviderRegistrar) -> None:
    register(PROVIDER, make_runtime, description="any OpenAI-compatible server (vLLM, llama.cpp, ...)")


@bundled_impl
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("providers.openaiCompatible", OpenAICompatibleConfig)
