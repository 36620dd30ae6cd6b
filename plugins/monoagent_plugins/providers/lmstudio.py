"""The ``lmstudio`` provider: ``lmstudio:<model>`` on LM Studio's local OpenAI-compatible server.

Base URL ``providers.lmstudio.baseUrl`` (env ``MONO_AGENT_LMSTUDIO_BASE_URL``), default
``http://127.0.0.1:1234/v1``; requests go to ``<baseUrl>/chat/completions``; no key is needed.
The wire format is in :mod:`monoagent_plugins.providers.openai_wire`.
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

PROVIDER = "lmstudio"


@attrs.define
class LMStudioConfig:
    """providers.lmstudio: LM Studio's local server."""

    base_url: str = setting(
        "http://127.0.0.1:1234/v1", doc="Base URL (requests go to <baseUrl>/chat/completions).",
        env="MONO_AGENT_LMSTUDIO_BASE_URL",
    )
    max_output_tokens: int | None = provider_settings.max_output_tokens(
        "LMSTUDIO", None, "max_tokens of each request. Unset: the server's default."
    )
    timeout_seconds: float = provider_settings.read_timeout("LMSTUDIO", model_loading=True)
    connect_timeout_seconds: float = provider_settings.connect_timeout("LMSTUDIO")
    context_window: int = provider_settings.context_window(
        "LMSTUDIO", 8_192, "The context length the model is loaded with"
    )


def make_runtime(agent: Agent, model: str) -> OpenAIChatRuntime:
    from monoagent_plugins.providers.openai_wire import chat_runtime  # the wire code loads on first use

    config = agent.config.section("providers.lmstudio", LMStudioConfig)
    return chat_runtime(
        PROVIDER, model, config,
        url=f"{normalise_base_url(config.base_url)}/chat/completions",
        setting="providers.lmstudio.baseUrl",
        url_env="MONO_AGENT_LMSTUDIO_BASE_URL",
        max_event_bytes=agent.config.providers.client.max_stream_event_bytes,
    )


@hookimpl(trylast=True)
def register_providers(register: ComponentRegistrar[ProviderRuntime]) -> None:
    register(PROVIDER, make_runtime, description="LM Studio local server")


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("providers.lmstudio", LMStudioConfig)
