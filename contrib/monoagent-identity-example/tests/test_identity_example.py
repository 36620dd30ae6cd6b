"""The example plugin, in process: its identity wins and its config section is validated."""

from __future__ import annotations

import asyncio

import monoagent_identity_example as example
import pytest

from monoagent import ConfigError, TurnRequest
from monoagent.testing import fresh_agent


def assemble(agent):
    return asyncio.run(agent.assemble(TurnRequest("hi", conversation_id="t")))


def identity_of(assembled):
    [section] = [s for s in assembled.manifest.sections if s.id == "identity"]
    return section


def test_identity_section_replaces_the_bundled_one(tmp_path):
    agent = fresh_agent(tmp_path, plugins=[example])
    assembled = assemble(agent)
    assert "You are Ada, a helpful assistant." in assembled.system_text
    assert "IDENTITY.md" not in assembled.system_text
    assert identity_of(assembled).source == "identity-example"


def test_other_sections_stay_bundled(tmp_path):
    assembled = assemble(fresh_agent(tmp_path, plugins=[example]))
    sources = {s.id: s.source for s in assembled.manifest.sections}
    assert sources["core_guardrails"] == "guardrails"
    assert sources["session"] == "session"


def test_identity_reads_its_config_section(tmp_path):
    config = {"identityExample": {"name": "Grace", "role": "the release captain"}}
    agent = fresh_agent(tmp_path, config=config, plugins=[example])
    assert agent.config.section("identityExample") == example.IdentityExampleConfig("Grace", "the release captain")
    assert "You are Grace, the release captain." in assemble(agent).system_text


def test_unknown_config_key_is_an_error_with_did_you_mean(tmp_path):
    with pytest.raises(ConfigError) as info:
        fresh_agent(tmp_path, config={"identityExample": {"nmae": "Grace"}}, plugins=[example])
    message = str(info.value)
    assert "identityExample.nmae: unknown key" in message
    assert "did you mean 'name'?" in message


def test_wrong_type_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"identityExample\.name"):
        fresh_agent(tmp_path, config={"identityExample": {"name": 42}}, plugins=[example])


def test_without_the_plugin_the_section_is_unknown(tmp_path):
    with pytest.raises(ConfigError, match="identityExample"):
        fresh_agent(tmp_path, config={"identityExample": {"name": "Grace"}})
