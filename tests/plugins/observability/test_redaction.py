"""The bundled redactor against a corpus of realistic FAKE secrets and paths (tests/data/redaction_corpus.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monoagent._kernel.hookspecs import hookimpl
from monoagent.testing import fresh_agent
from monoagent_plugins.observability.redaction import redact_structure, redact_text
from monoagent_plugins.observability.redaction_paths import opaque_path

CORPUS = json.loads((Path(__file__).parents[2] / "data" / "redaction_corpus.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("entry", CORPUS["secrets"], ids=[e["name"] for e in CORPUS["secrets"]])
def test_every_fake_secret_in_the_corpus_is_redacted(entry):
    out = redact_text(entry["text"])
    assert entry["secret"] not in out
    assert "[REDACTED:" in out


@pytest.mark.parametrize("entry", CORPUS["paths"], ids=[e["name"] for e in CORPUS["paths"]])
def test_every_path_in_the_corpus_becomes_an_opaque_root(entry):
    out = redact_text(entry["text"])
    assert "<root:" in out
    for hidden in entry["hidden"]:
        assert hidden not in out
    for kept in entry["kept"]:
        assert kept in out


@pytest.mark.parametrize("url", CORPUS["urls"])
def test_ordinary_web_urls_stay_readable(url):
    assert redact_text(f"see {url} for details") == f"see {url} for details"


def test_opaque_paths_keep_at_most_two_trailing_components():
    token = opaque_path("/opt/data/a/b/c/d.txt")
    assert token.startswith("<root:") and token.endswith("/c/d.txt") and token.count("/") == 2
    assert opaque_path("/opt/data/a/b/c/d.txt").split("/")[0] == opaque_path("/opt/data/a/b/c/x.txt").split("/")[0]
    assert opaque_path("/home/alice") == opaque_path("/home/alice").split("/")[0]  # the account is never kept


def test_relative_paths_and_prose_are_untouched():
    text = "edit src/app/main.py, then run ./scripts/test.sh and/or make; 3/4 done"
    assert redact_text(text) == text


def test_structures_redact_keys_and_values_and_keep_colliding_values():
    value = {
        "/home/alice/x/notes.txt": "one",
        "/home/alice/y/../x/notes.txt": "two",
        "sk-ant-api03-FAKEfakeFAKEfake0123456789": 1,
        "sk-ant-api03-FAKEfakeFAKEfake9876543210": 2,
        "password": "hunter2",
        "nested": [{"cmd": "cat /etc/ssl/private/server.key", "max_tokens": 1000}],
    }
    out = redact_structure(value)
    text = json.dumps(out)
    assert "alice" not in text and "FAKEfake" not in text and "hunter2" not in text and "server.key" not in text
    assert sorted(out.values(), key=str) == sorted(["one", "two", 1, 2, "[REDACTED:secret_value]", out["nested"]], key=str)
    keys = list(out)
    assert keys[2] == "[REDACTED:anthropic_key]" and keys[3] == "[REDACTED:anthropic_key]#2"
    assert out["nested"][0]["max_tokens"] == 1000
    assert redact_structure(value) == out  # deterministic


def test_the_redact_hook_chain_runs_the_default_then_wrappers(tmp_path):
    class Codename:
        @hookimpl(wrapper=True)
        def redact(self, text, kind):
            text = yield
            return text.replace("ACME-INTERNAL", "[REDACTED:codename]")

    agent = fresh_agent(tmp_path, plugins=[Codename()])
    out = agent.redact("ACME-INTERNAL key sk-proj-FAKE1234567890abcdefghijklmnop in /home/alice/a/b/c", "tool_result")
    assert "ACME-INTERNAL" not in out and "FAKE1234" not in out and "alice" not in out
    assert "[REDACTED:codename]" in out and "[REDACTED:openai_key]" in out


def test_structures_redact_registry_auth_values_under_auth_keys():
    docker = {"auths": {"https://index.docker.io/v1/": {"auth": "ZmFrZXVzZXI6RkFLRWRvY2tlclBhc3M="}}}
    npmrc = {"//registry.npmjs.org/:_authToken": "8a2b7c9d-FAKE-4567-89ab-cdef01234567", "_auth": "ZmFrZTpGQUtF"}
    out = json.dumps([redact_structure(docker), redact_structure(npmrc)])
    assert "ZmFrZXVzZXI6RkFLRWRvY2tlclBhc3M=" not in out and "8a2b7c9d-FAKE" not in out and "ZmFrZTpGQUtF" not in out
    assert "https://index.docker.io/v1/" in out  # the registry URL stays readable


def test_netrc_and_cli_credential_rules_leave_ordinary_text_alone():
    for text in ("use login and password fields", "ps -u root", "curl -u https://example.com", "run: machine learning"):
        assert redact_text(text) == text


def test_a_placeholder_under_a_secret_key_keeps_its_trailing_comment_and_a_value_does_not():
    assert redact_text("providers.anthropic.apiKey = null  # default") == "providers.anthropic.apiKey = null  # default"
    assert redact_text("token: ${TOKEN}  # from the environment") == "token: ${TOKEN}  # from the environment"
    for text in ("api_key = sk-live-5f3a9c2e71b  # default", "token = null#x", "password = hunter2hunter  # prod"):
        assert "[REDACTED:" in redact_text(text), text
