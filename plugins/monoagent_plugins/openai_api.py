"""The bundled plugin ``openai-api``: the ``openai-api`` channel, an OpenAI-compatible chat API.

``POST /v1/chat/completions`` runs one request-driven turn (``delivery = "request"``, no
proactive follow-up possible) and answers in OpenAI's ``chat.completion`` shape; ``GET /v1/models``
lists the composed agent as one model id. The conversation id is the ``X-Conversation-Id``
header, else the body's ``user`` field, else a new one per request. Only the request's trailing
user message is the turn: earlier client-sent messages are ignored in favour of the
conversation's canonical history. Errors use OpenAI's error shape.

The channel has one harness of its own (one limiter: ``concurrency.*`` bound this channel alone);
an admission overload is answered 429 with ``Retry-After``. Requests need ``Authorization: Bearer
<token>`` with one of ``openaiApi.tokens``; without tokens ``monoagent serve`` refuses to start
unless ``serve.allowUnauthenticated`` (loopback only), when any request is accepted.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

import attrs

from monoagent.kernel.config import setting
from monoagent.kernel.errors import AdmissionRejected
from monoagent.kernel.host import bundled_impl
from monoagent.kernel.model import TurnRequest
from monoagent.kernel.registrars import ChannelRegistrar, ConfigSectionRegistrar
from monoagent_plugins.lib.channel_runs import ChannelRuns, ShutdownCancelled
from monoagent_plugins.lib.http_serving import RETRY_AFTER_S, RequestRefused, bearer_ok, read_json

CHANNEL = "openai-api"


@attrs.define
class OpenAIApiConfig:
    """openaiApi: the OpenAI-compatible chat API channel of ``monoagent serve``."""

    enabled: bool = setting(False, doc="Serve the OpenAI-compatible API (POST /v1/chat/completions, GET /v1/models).",
                            env="MONO_AGENT_OPENAI_API_ENABLED")
    tokens: list[str] = setting(doc="Bearer tokens a client may present (Authorization: Bearer <token>); env: comma-separated.",
                                env="MONO_AGENT_OPENAI_API_TOKENS", factory=list, secret=True)


def _error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": None}},
                        status_code=status, headers=headers)


def trailing_user_text(body: Any) -> str:
    """The text of the request's last message, which must be the user's; :class:`RequestRefused` 400 otherwise."""
    if not isinstance(body, dict):
        raise RequestRefused(400, "request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestRefused(400, "'messages' must be a non-empty array")
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        raise RequestRefused(400, "the last entry of 'messages' must have role 'user' (it is the turn)")
    content = last.get("content")
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if len(parts) != len(content) or not all(isinstance(p, str) for p in parts):
            raise RequestRefused(400, "the last message's content parts must all be {'type': 'text', 'text': ...}")
        content = "".join(parts)  # type: ignore[arg-type]
    if not isinstance(content, str) or not content.strip():
        raise RequestRefused(400, "the last message's 'content' must be non-empty text")
    return content


def conversation_id(headers: Any, body: dict[str, Any]) -> str:
    """``X-Conversation-Id``, else ``user``, else a new id: the conversation the turn belongs to."""
    given = headers.get("x-conversation-id") or body.get("user")
    if isinstance(given, str) and given.strip():
        return f"openai-api:{given.strip()}"
    return f"openai-api:{uuid.uuid4()}"


class OpenAIApiChannel:
    """The ``openai-api`` channel: its routes, its own harness, and the runs it has in flight."""

    name = CHANNEL
    credential_hint = "openaiApi.tokens or MONO_AGENT_OPENAI_API_TOKENS=tok1,tok2"

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.settings: OpenAIApiConfig = agent.config.section("openaiApi")
        self.enabled = self.settings.enabled
        self.has_credentials = bool(self.settings.tokens)
        self.runs = ChannelRuns(agent)

    async def start(self) -> None:
        """Nothing to start: the channel answers requests on the routes it mounts."""

    async def serve(self, agent: Any = None) -> None:
        """Not a standalone channel: ``monoagent serve`` mounts :meth:`routes` on its HTTP server."""
        raise NotImplementedError("the openai-api channel is served by `monoagent serve`")

    def routes(self) -> Sequence[Any]:
        from starlette.routing import Route

        return [Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"])]

    def _authorised(self, request: Any) -> bool:
        return not self.has_credentials or bearer_ok(request.headers.get("authorization"), self.settings.tokens)

    async def models(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        if not self._authorised(request):
            return _error(401, "missing or wrong bearer token (Authorization: Bearer <token>)", "authentication_error")
        return JSONResponse({"object": "list", "data": [
            {"id": self.agent.model, "object": "model", "created": 0, "owned_by": "monoagent"}]})

    async def chat_completions(self, request: Any) -> Any:

        from starlette.responses import JSONResponse

        if not self._authorised(request):
            return _error(401, "missing or wrong bearer token (Authorization: Bearer <token>)", "authentication_error")
        try:
            body = await read_json(request, self.agent.config.section("serve").max_body_bytes)
            text = trailing_user_text(body)
            if body.get("stream"):
                raise RequestRefused(400, "'stream': true is not supported yet; send it without 'stream'")
        except RequestRefused as refused:
            return _error(refused.status, refused.message, refused.kind)
        turn = TurnRequest(text, conversation_id=conversation_id(request.headers, body), channel=CHANNEL, delivery="request")
        try:
            result = await self.runs.run(turn)
        except AdmissionRejected as exc:
            return _error(429, f"{exc}; retry later", "rate_limit_error", {"Retry-After": str(RETRY_AFTER_S)})
        except ShutdownCancelled as exc:
            return _error(503, f"{exc}; retry it", "server_error")
        usage = result.usage
        return JSONResponse({
            "id": f"chatcmpl-{result.run_id}", "object": "chat.completion", "created": int(time.time()),
            "model": result.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
                      "total_tokens": usage.input_tokens + usage.output_tokens},
        }, headers={"X-Conversation-Id": turn.conversation_id.removeprefix("openai-api:")})

    def cancel_in_flight(self) -> int:
        """Cancel every run still in flight (the shutdown grace period is over); returns how many."""
        return self.runs.cancel_in_flight()

    async def shutdown(self) -> None:
        """Wait for the cancelled runs' continuity accounts, then close the harness."""
        await self.runs.shutdown()


@bundled_impl
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("openaiApi", OpenAIApiConfig)


@bundled_impl
def register_channels(register: ChannelRegistrar) -> None:
    register(CHANNEL, OpenAIApiChannel, description="OpenAI-compatible chat API (POST /v1/chat/completions), served by monoagent serve")
