"""The ``openai-compatible`` provider: any server with an OpenAI-style Chat Completions API.

For vLLM, the llama.cpp server, text-generation-inference and the like. The base URL is required
(``providers.openaiCompatible.baseUrl`` or ``MONO_AGENT_OPENAI_COMPATIBLE_BASE_URL``, for example
``http://127.0.0.1:8000/v1``); requests go to ``<baseUrl>/chat/completions``. A key is optional
(``MONO_AGENT_OPENAI_COMPATIBLE_API_KEY``), sent as ``Authorization: Bearer``. The wire format is in
:mod:`monoagent_plugins.providers.openai_wire`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from monoagent import ComponentRegistrar, ConfigSectionRegistrar, ProviderRuntime, hookimpl, setting
from monoagent_plugins.providers import settings as provider_settings
from monoagent_plugins.providers.http import normalise_base_url

if TYPE_CHECKING:
    from monoagent import Agent
    from monoagent_plugins.providers.openai_wire import OpenAIChatRuntime

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
    max_output_tokens: int | None = provider_settings.max_output_tokens(
        "OPENAI_COMPATIBLE", None, "max_tokens of each request. Unset: the server's default."
    )
    timeout_seconds: float = provider_settings.read_timeout("OPENAI_COMPATIBLE")
    connect_timeout_seconds: float = provider_settings.connect_timeout("OPENAI_COMPATIBLE")
    context_window: int = provider_settings.context_window(
        "OPENAI_COMPATIBLE", 8_192, "The context length the server runs the model with"
    )


def make_runtime(agent: Agent, model: str) -> OpenAIChatRuntime:
    from monoagent_plugins.providers.openai_wire import chat_runtime  # the wire code loads on first use

    config = agent.config.section("providers.openaiCompatible", OpenAICompatibleConfig)
    if not config.base_url:
        raise provider_settings.missing_setting(
            PROVIDER, model, "base URL", "set MONO_AGENT_OPENAI_COMPATIBLE_BASE_URL (or providers.openaiCompatible.baseUrl), for example http://127.0.0.1:8000/v1"
        )
    return chat_runtime(
        PROVIDER, model, config,
        url=f"{normalise_base_url(config.base_url)}/chat/completions",
        setting="providers.openaiCompatible.baseUrl",
        url_env="MONO_AGENT_OPENAI_COMPATIBLE_BASE_URL",
        headers={"authorization": f"Bearer {config.api_key}"} if config.api_key else {},
        key_env="MONO_AGENT_OPENAI_COMPATIBLE_API_KEY",
        max_event_bytes=agent.config.providers.client.max_stream_event_bytes,
    )


@hookimpl(trylast=True)
def register_providers(register: ComponentRegistrar[ProviderRuntime]) -> None:
    register(PROVIDER, make_runtime, description="any OpenAI-compatible server (vLLM, llama.cpp, ...)")


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("providers.openaiCompatible", OpenAICompatibleConfig)
