"""The Anthropic and OpenAI stand-ins of ``monoagent.testing``, as a plugin author uses them.

A plugin author's test module (written below, run by pytest in a fresh interpreter) holds a tiny
provider of its own that speaks Anthropic's Messages API with the standard library, and tests it
against :class:`monoagent.testing.AnthropicWireServer` with nothing but ``monoagent`` and
``monoagent.testing``: the interpreter refuses to import starlette, uvicorn, httpx and the
vendors' SDKs, so the stand-ins cannot lean on an extra.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PLUGIN_AUTHORS_TEST = '''
import asyncio
import json
import urllib.request

from monoagent import StepFinished, TextDelta, Usage, hookimpl
from monoagent.testing import AnthropicWireServer, Reply, fresh_agent


class MyLabRuntime:
    """The provider under test: Anthropic's wire, read with urllib in a thread."""

    def __init__(self, base_url, model):
        self.name = f"mylab:{model}"
        self.base_url, self.model = base_url, model

    async def stream(self, request):
        body = {"model": self.model, "stream": True, "max_tokens": 64,
                "system": request.prompt.system_text_without_boundary,
                "messages": [{"role": m.role, "content": m.content} for m in request.messages]}
        sent = urllib.request.Request(f"{self.base_url}/v1/messages", data=json.dumps(body).encode(),
                                      headers={"x-api-key": "k", "content-type": "application/json"})
        events = await asyncio.to_thread(lambda: urllib.request.urlopen(sent).read().decode().split("\\n\\n"))
        usage = {}
        for event in filter(None, events):
            data = json.loads(event.split("data: ", 1)[1])
            if data["type"] == "message_start":
                usage["input"] = data["message"]["usage"]["input_tokens"]
            elif data["type"] == "content_block_delta" and data["delta"]["type"] == "text_delta":
                yield TextDelta(data["delta"]["text"])
            elif data["type"] == "message_delta":
                yield StepFinished(data["delta"]["stop_reason"], Usage(usage["input"], data["usage"]["output_tokens"]))


class MyLab:
    def __init__(self, base_url):
        self.base_url = base_url

    @hookimpl
    def register_providers(self, register):
        register("mylab", lambda agent, model: MyLabRuntime(self.base_url, model))


def test_my_provider_reads_the_anthropic_stream(tmp_path):
    with AnthropicWireServer() as server:
        server.enqueue(Reply(text_pieces=("Hello ", "from the wire.")))
        agent = fresh_agent(tmp_path, plugins=[MyLab(server.url)], config={"runtime": {"model": "mylab:claude-x"}})
        result = agent.run_sync("hi", conversation_id="t")
    assert result.text == "Hello from the wire."
    assert result.usage.output_tokens > 0
    (sent,) = server.requests
    assert sent.path == "/v1/messages" and sent.json["model"] == "claude-x"
    assert sent.json["messages"][-1]["content"].endswith("hi")
'''

# The plugin author's interpreter: the server libraries and the vendors' SDKs cannot be imported.
BLOCKED = ("starlette", "uvicorn", "httpx", "anthropic", "openai", "mcp")
RUNNER = f'''
import importlib.abc, sys

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {BLOCKED!r}:
            raise ImportError(f"{{name}} is not installed in a plugin author's test environment")
        return None

sys.meta_path.insert(0, Refuse())
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:anyio", sys.argv[1]]))
'''


def test_a_plugin_author_tests_a_provider_against_the_anthropic_stand_in(tmp_path: Path) -> None:
    module = tmp_path / "test_mylab.py"
    module.write_text(textwrap.dedent(PLUGIN_AUTHORS_TEST), encoding="utf-8")
    imported = set(re.findall(r"^(?:from|import) (\w+)", PLUGIN_AUTHORS_TEST, flags=re.MULTILINE))
    assert imported == {"asyncio", "json", "urllib", "monoagent"}  # monoagent and monoagent.testing only
    run = subprocess.run(
        [sys.executable, "-c", RUNNER, str(module)], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "1 passed" in run.stdout


def test_the_stand_ins_are_exported_and_tests_keep_no_copy() -> None:
    import monoagent.testing as testing

    for name in ("AnthropicWireServer", "OpenAIWireServer", "LocalServerWire", "WholeCallsWire"):
        assert name in testing.__all__ and issubclass(getattr(testing, name), testing.WireServer)
    assert not (ROOT / "tests" / "providers_wire.py").exists()
    importers = [
        path.relative_to(ROOT).as_posix()
        for folder in ("tests", "bench")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if re.search(r"^\s*(from|import) providers_wire\b", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
    ]
    assert importers == []
