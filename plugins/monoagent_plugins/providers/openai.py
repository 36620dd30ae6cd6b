"""The ``openai`` provider: ``openai:<model>`` on OpenAI's Chat Completions API, streamed.

Credentials and endpoint: ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` (or the
``providers.openai`` keys ``apiKey`` and ``baseUrl``). The wire format is in
:mod:`monoagent_plugins.providers.openai_wire`. Needs the ``openai`` extra (httpx, httpx-sse).
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

PROVIDER = "openai"


@attrs.define
class OpenAIConfig:
    """providers.openai: OpenAI's Chat Completions API."""

    base_url: str = setting(
        "https://api.openai.com/v1", doc="Base URL (requests go to <baseUrl>/chat/completions).", env="OPENAI_BASE_URL",
    )
    api_key: str | None = setting(
        None, doc="API key; prefer the environment variable over writing it into a file.", env="OPENAI_API_KEY", secret=True,
    )
    max_output_tokens: int | None = provider_settings.max_output_tokens(
        "OPENAI", None, "max_completion_tokens of each request. Unset: the model's own limit."
    )
    timeout_seconds: float = provider_settings.read_timeout("OPENAI")
    connect_timeout_seconds: float = provider_settings.connect_timeout("OPENAI")
    context_window: int = provider_settings.context_window(
        "OPENAI", 128_000, "The model's context window"
    )


def make_runtime(agent: Agent, model: str) -> OpenAIChatRuntime:
    from monoagent_plugins.providers.openai_wire import chat_runtime  # the wire code loads on first use

    config = agent.config.section("providers.openai", OpenAIConfig)
    if not config.api_key:
        raise provider_settings.missing_setting(
            PROVIDER, model, "API key", "set OPENAI_API_KEY in the environment (or providers.openai.apiKey in the config file)"
        )
    return chat_runtime(
        PROVIDER, model, config,
        url=f"{normalise_base_url(config.base_url)}/chat/completions",
        setting="providers.openai.baseUrl",
        url_env="OPENAI_BASE_URL",
        headers={"authorization": f"Bearer {config.api_key}"},
        key_env="OPENAI_API_KEY",
        max_tokens_field="max_completion_tokens",
        max_event_bytes=agent.config.providers.client.max_stream_event_bytes,
    )


@hookimpl(trylast=True)
def register_providers(register: ComponentRegistrar[ProviderRuntime]) -> None:
    register(PROVIDER, make_runtime, description="OpenAI Chat Completions (OPENAI_API_KEY)")


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("providers.openai", OpenAIConfig)
