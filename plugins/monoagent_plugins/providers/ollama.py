"""The ``ollama`` provider: ``ollama:<model>`` on a local Ollama server's OpenAI-compatible API.

The server is ``OLLAMA_HOST`` (or ``providers.ollama.host``), default ``http://127.0.0.1:11434``;
a value without a scheme gets ``http://`` and, without a port, Ollama's 11434 (as ``ollama``
itself reads it: ``OLLAMA_HOST=0.0.0.0`` is port 11434, not 80), and ``0.0.0.0`` (the server's
listen-everywhere address) is called as ``127.0.0.1``. Requests go to ``<host>/v1/chat/completions``; no key is needed.
The wire format is in :mod:`monoagent_plugins.providers.openai_wire`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import attrs

from monoagent import ComponentRegistrar, ConfigSectionRegistrar, ProviderRuntime, hookimpl, setting
from monoagent_plugins.providers import settings as provider_settings
from monoagent_plugins.providers.http import normalise_base_url

if TYPE_CHECKING:
    from monoagent import Agent
    from monoagent_plugins.providers.openai_wire import OpenAIChatRuntime

PROVIDER = "ollama"
DEFAULT_PORT = 11434
DEFAULT_HOST = f"http://127.0.0.1:{DEFAULT_PORT}"


@attrs.define
class OllamaConfig:
    """providers.ollama: a local Ollama server."""

    host: str = setting(DEFAULT_HOST, doc="The Ollama server (requests go to <host>/v1/chat/completions).", env="OLLAMA_HOST")
    max_output_tokens: int | None = provider_settings.max_output_tokens(
        "OLLAMA", None, "max_tokens of each request. Unset: the server's default."
    )
    timeout_seconds: float = provider_settings.read_timeout("OLLAMA", model_loading=True)
    connect_timeout_seconds: float = provider_settings.connect_timeout("OLLAMA")
    context_window: int = provider_settings.context_window(
        "OLLAMA", 8_192, "The context window the server runs the model with"
    )


def host_url(host: str) -> str:
    """The base URL for ``OLLAMA_HOST`` read as Ollama reads it.

    Without a scheme the port defaults to 11434 (``OLLAMA_HOST=0.0.0.0`` means
    ``http://127.0.0.1:11434``), with ``http://`` or ``https://`` to the scheme's own; an empty
    value is the default server.
    """
    host = host.strip() or DEFAULT_HOST
    if "://" not in host:
        authority = host.partition("/")[0]
        if not re.search(r"(^\[.*\]|^[^:]*):\d+$", authority):  # no port given
            host = f"{authority}:{DEFAULT_PORT}{host[len(authority):]}"
    url = normalise_base_url(host)
    return url.replace("://0.0.0.0", "://127.0.0.1", 1)


def make_runtime(agent: Agent, model: str) -> OpenAIChatRuntime:
    from monoagent_plugins.providers.openai_wire import chat_runtime  # the wire code loads on first use

    config = agent.config.section("providers.ollama", OllamaConfig)
    return chat_runtime(
        PROVIDER, model, config,
        url=f"{host_url(config.host)}/v1/chat/completions",
        setting="providers.ollama.host",
        url_env="OLLAMA_HOST",
        max_event_bytes=agent.config.providers.client.max_stream_event_bytes,
    )


@hookimpl(trylast=True)
def register_providers(register: ComponentRegistrar[ProviderRuntime]) -> None:
    register(PROVIDER, make_runtime, description="local Ollama server (OLLAMA_HOST)")


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("providers.ollama", OllamaConfig)
