"""The provider conformance suite (monoagent.testing.ProviderContract) against every bundled provider."""

from __future__ import annotations

from typing import Any

import pytest
from providers_wire import AnthropicWireServer, OpenAIWireServer

from monoagent.testing import ProviderContract, fresh_agent


def _tool_names_anthropic(body: Any) -> list[str]:
    return [tool["name"] for tool in body.get("tools", [])]


def _tool_names_openai(body: Any) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", []) if tool.get("type") == "function"]


class TestAnthropicContract(ProviderContract):
    @pytest.fixture
    def provider_server(self):
        with AnthropicWireServer() as server:
            yield server

    @pytest.fixture
    def runtime(self, provider_server, tmp_path):
        agent = fresh_agent(
            tmp_path,
            config={"runtime": {"model": "anthropic:model-x"}, "providers": {"anthropic": {"baseUrl": provider_server.url}}},
            env={"ANTHROPIC_API_KEY": "test-key"},
        )
        return agent.provider("anthropic:model-x")

    def sent_tool_names(self, body):
        return _tool_names_anthropic(body)


class _OpenAIFamily(ProviderContract):
    reports_cache_writes = False
    prefix = ""
    config: dict[str, Any] = {}
    env: dict[str, str] = {}

    @pytest.fixture
    def provider_server(self):
        with OpenAIWireServer() as server:
            yield server

    @pytest.fixture
    def runtime(self, provider_server, tmp_path):
        url = provider_server.url
        config = {"providers": {key: {field: value.format(url=url) for field, value in fields.items()} for key, fields in self.config.items()}}
        env = {name: value.format(url=url) for name, value in self.env.items()}
        agent = fresh_agent(tmp_path, config=config, env=env)
        return agent.provider(f"{self.prefix}:model-x")

    def sent_tool_names(self, body):
        return _tool_names_openai(body)


class TestOpenAIContract(_OpenAIFamily):
    prefix = "openai"
    config = {"openai": {"baseUrl": "{url}/v1"}}
    env = {"OPENAI_API_KEY": "sk-test"}


class TestOllamaContract(_OpenAIFamily):
    prefix = "ollama"
    env = {"OLLAMA_HOST": "{url}"}


class TestLMStudioContract(_OpenAIFamily):
    prefix = "lmstudio"
    config = {"lmstudio": {"baseUrl": "{url}/v1"}}


class TestOpenAICompatibleContract(_OpenAIFamily):
    prefix = "openai-compatible"
    env = {"MONO_AGENT_OPENAI_COMPATIBLE_BASE_URL": "{url}/v1"}
