"""What an HTTP provider puts on the wire, and where: part of :class:`~monoagent.testing.ProviderContract`.

A provider that streams answers well can still send the wrong request: another model, no
streaming, the output cap in a field its server ignores, the system prompt under a role the
server reads as the user's, an assistant's text dropped beside its tool calls, a key the server
never sees. The server of the contract answers whatever it is sent, so these tests read the
request it recorded, through methods the provider's test class implements in its wire's terms
(each test skips, naming the method or attribute, when the class does not supply it):

- :meth:`ProviderRequestContract.sent_request`: the model, whether the answer is streamed, the
  output cap and the system text of a body (:class:`SentRequest`). The cap is the request's own
  (``ProviderRequest.max_output_tokens``, a compaction summary's) when it sets one, else the
  configured one (``configured_output_cap``, the ``maxOutputTokens`` the fixture set);
- :meth:`ProviderRequestContract.sent_assistant_messages`: each assistant message's text and
  tool calls, so a tool exchange over several steps round-trips exactly;
- ``request_path``: the path the configured base URL makes the provider post to;
- ``credential_headers``: the headers the configured key travels in, value for value (None: the
  header is absent, as it must be when no key is configured);
- ``key_names`` / ``url_names``: what an authentication error, and an unreachable server, name
  for the user to fix (the key's variable, the base URL's setting);
- ``context_limit_bodies``: HTTP 400 error bodies, in the wire's words, that the provider
  documents as context-length errors whatever their message says (a code or type decides);
- ``context_window``: the window the fixture configured, which the runtime reports to the harness
  (it sets the compaction budget).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from monoagent._kernel.errors import ContextLimitError
from monoagent._kernel.interfaces import ProviderRuntime, WindowedProviderRuntime
from monoagent._kernel.model import Message, ToolCall
from monoagent.testing.wire_server import (
    DYNAMIC_TEXT,
    LOOKUP,
    STABLE_TEXT,
    Reply,
    WireServer,
    collect,
    contract_request,
    expect_error,
)

__all__ = ["ProviderRequestContract", "SentRequest"]

REQUEST_CAPS = (321, 9_000)
"""The output caps a request asks for itself in the contract: below and above any configured one."""


@attrs.frozen
class SentRequest:
    """What one request body asks for, as :meth:`ProviderRequestContract.sent_request` reads it.

    ``model``: the model name sent; ``streamed``: the body asks for a streamed answer (with usage,
    where the wire needs asking for it); ``output_cap``: the answer's token cap sent in the field
    the provider's API documents (None when the body sends none); ``system``: the system
    prompt's text as the API's system instruction (its parts joined in order), None when the body
    holds none at the system position.
    """

    model: str | None
    streamed: bool
    output_cap: int | None
    system: str | None


def _skip(reason: str) -> None:
    import pytest

    pytest.skip(reason)


class ProviderRequestContract:
    """The request half of the provider contract (see the module docstring for what to supply)."""

    configured_output_cap: int | None = None
    request_path: str | None = None
    credential_headers: Mapping[str, str | None] = MappingProxyType({})
    key_names: tuple[str, ...] = ()
    url_names: tuple[str, ...] = ()
    context_limit_bodies: tuple[bytes, ...] = ()
    context_window: int | None = None

    def sent_request(self, body: Any) -> SentRequest:
        """The model, streaming, output cap and system text of a request body (see :class:`SentRequest`)."""
        raise NotImplementedError

    def sent_assistant_messages(self, body: Any) -> list[tuple[str, list[tuple[str, str, Any]]]]:
        """Each assistant message of a request body, in order: its text (``""`` when it has none)
        and its tool calls as ``(id, name, arguments as a dict)``."""
        raise NotImplementedError

    def _read(self, reader: Any, body: Any) -> Any:
        try:
            return reader(body)
        except NotImplementedError:
            _skip(f"{type(self).__name__} implements no {reader.__name__}(body)")

    # ------------------------------------------------------------------ the body

    def test_the_request_says_what_was_asked(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        """The model asked for, a streamed answer, the system prompt at the system position (stable
        part first), and the output cap: the request's own when it sets one, else the configured one."""
        provider_server.enqueue(Reply(text_pieces=("ok",)))
        request = contract_request()
        asyncio.run(collect(runtime, request))
        sent = self._read(self.sent_request, provider_server.last_request.json)
        assert sent.model == request.model, f"the request asked for {request.model!r}; the body says {sent.model!r}"
        assert sent.streamed is True, "the body asks for a streamed answer"
        assert sent.system is not None, "the system prompt travels as the API's system instruction"
        assert STABLE_TEXT in sent.system and DYNAMIC_TEXT in sent.system, sent.system
        assert sent.system.index(STABLE_TEXT) < sent.system.index(DYNAMIC_TEXT), "the stable part comes first"
        assert "Hello there" not in sent.system, "the user's message is not part of the system prompt"
        if self.configured_output_cap is not None:
            assert sent.output_cap == self.configured_output_cap, f"the configured cap is {self.configured_output_cap}"
        for cap in REQUEST_CAPS:
            provider_server.enqueue(Reply(text_pieces=("ok",)))
            asyncio.run(collect(runtime, attrs.evolve(request, max_output_tokens=cap)))
            capped = self._read(self.sent_request, provider_server.last_request.json)
            assert capped.output_cap == cap, f"a request that caps its own answer at {cap} sends {capped.output_cap}"

    def test_a_tool_exchange_round_trips_text_and_calls(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        """Two steps of a tool loop and the answer after them: each assistant message goes back with
        its own text (none where it had none) and exactly its tool calls (none where it made none)."""
        first = (ToolCall("call_prev_1", "lookup", {"word": "café", "limit": 2}), ToolCall("call_prev_2", "lookup", {"word": "tea"}))
        second = (ToolCall("call_prev_3", "lookup", {"word": "naïve", "tags": ["a", {"b": None}]}),)
        messages = (
            Message("user", "Look three words up"),
            Message("assistant", "Looking them up.", tool_calls=first),
            Message("tool", "a coffee house", tool_call_id="call_prev_1"),
            Message("tool", "lookup failed: no such word", tool_call_id="call_prev_2", is_error=True),
            Message("assistant", "", tool_calls=second),
            Message("tool", "without guile", tool_call_id="call_prev_3"),
            Message("assistant", "Found: café, naïve."),
            Message("user", "And tea?"),
        )
        provider_server.enqueue(Reply(text_pieces=("ok",)))
        asyncio.run(collect(runtime, contract_request(messages=messages, tools=[LOOKUP])))
        sent = self._read(self.sent_assistant_messages, provider_server.last_request.json)
        expected = [(m.content, [(c.id, c.name, c.arguments) for c in m.tool_calls]) for m in messages if m.role == "assistant"]
        assert sent == expected

    # ------------------------------------------------------------------ the configuration

    def test_the_request_goes_where_the_configuration_says(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        """A POST to the path the configured base URL makes, carrying the configured key in exactly
        the headers the API reads it from (and no such header when no key is configured)."""
        if self.request_path is None and not self.credential_headers:
            _skip(f"{type(self).__name__} sets neither request_path nor credential_headers")
        provider_server.enqueue(Reply(text_pieces=("ok",)))
        asyncio.run(collect(runtime, contract_request()))
        sent = provider_server.last_request
        assert sent.method == "POST"
        if self.request_path is not None:
            assert sent.path == self.request_path, f"the configured base URL makes {self.request_path}; the request went to {sent.path}"
        for name, value in self.credential_headers.items():
            assert sent.headers.get(name.lower()) == value, f"header {name}: {sent.headers.get(name.lower())!r}"

    def test_errors_name_the_settings_to_fix(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        """A 401 names the key's variable (``key_names``); a server that cannot be reached names the
        base URL's setting (``url_names``)."""
        if not self.key_names and not self.url_names:
            _skip(f"{type(self).__name__} sets neither key_names nor url_names")
        for status in (401, 403):
            provider_server.enqueue(Reply(status=status, error_message="invalid key"))
            error = expect_error(runtime, contract_request())
            assert not error.retryable and all(name in str(error) for name in self.key_names), (status, str(error))
        provider_server.stop()
        error = expect_error(runtime, contract_request())
        assert all(name in str(error) for name in self.url_names), str(error)

    def test_context_limit_codes_decide(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        """Error bodies the provider documents as context-length errors by their code or type are
        ``ContextLimitError`` on a 400 whatever their message says."""
        if not self.context_limit_bodies:
            _skip(f"{type(self).__name__}.context_limit_bodies is empty")
        for body in self.context_limit_bodies:
            provider_server.enqueue(Reply(status=400, error_payload=body))
            error = expect_error(runtime, contract_request())
            assert isinstance(error, ContextLimitError) and not error.retryable, (body, str(error))

    def test_the_runtime_reports_the_configured_context_window(self, runtime: ProviderRuntime) -> None:
        if self.context_window is None:
            _skip(f"{type(self).__name__}.context_window is None")
        assert isinstance(runtime, WindowedProviderRuntime), "the runtime has no context_window (WindowedProviderRuntime)"
        assert runtime.context_window == self.context_window
