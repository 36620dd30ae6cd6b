"""The bundled plugin ``openai-api``: the ``openai-api`` channel, an OpenAI-compatible chat API.

``POST /v1/chat/completions`` runs one request-driven turn (``delivery = "request"``, no
proactive follow-up possible) and answers in OpenAI's ``chat.completion`` shape, or with
``"stream": true`` as server-sent ``chat.completion.chunk`` events; ``GET /v1/models`` lists the
composed agent as one model id. The conversation id is the ``X-Conversation-Id`` header, else the
body's ``user`` field, else a new one per request. Only the request's trailing user message is the
turn: earlier client-sent messages are ignored in favour of the conversation's canonical history,
except ``system`` and ``developer`` messages, whose text becomes the turn's context
(``TurnRequest.context``, the dynamic ``dynamic_context`` section; never stored in history).
Errors use OpenAI's error shape, so the official ``openai`` client raises its typed exceptions
with our message.

The channel has one harness of its own (one limiter: ``concurrency.*`` bound this channel alone);
an admission overload is answered 429 with ``Retry-After``. Requests need ``Authorization: Bearer
<token>`` with one of ``openaiApi.tokens``; without tokens ``monoagent serve`` refuses to start
unless ``serve.allowUnauthenticated`` (loopback only), when any request is accepted.

Streaming forwards each ``text_delta`` of the run as it is emitted. The committed answer is the
answering attempt's last step, so the streamed text equals it unless the model wrote text before a
tool call or a provider attempt failed after streaming part of its text and was retried: that text
already reached the client and is not taken back (docs/serving.md says what the client sees).
Starlette's ``StreamingResponse`` frames the events (``sse-starlette`` is not used: it stops every
stream at the first shutdown signal, where the server's grace period lets in-flight turns finish).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from monoagent import (
    AdmissionRejected,
    Channel,
    ComponentRegistrar,
    ConfigSectionRegistrar,
    MonoagentError,
    TurnRequest,
    hookimpl,
    logger,
    setting,
)
from monoagent_plugins.serving.channel_runs import ChannelRuns, ShutdownCancelled
from monoagent_plugins.serving.http import RETRY_AFTER_S, RequestRefused, bearer_ok, read_json
from monoagent_plugins.serving.serve import ServeConfig

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from monoagent import Agent

CHANNEL = "openai-api"


@attrs.define
class OpenAIApiConfig:
    """openaiApi: the OpenAI-compatible chat API channel of ``monoagent serve``."""

    enabled: bool = setting(False, doc="Serve the OpenAI-compatible API (POST /v1/chat/completions, GET /v1/models).",
                            env="MONO_AGENT_OPENAI_API_ENABLED")
    tokens: list[str] = setting(doc="Bearer tokens a client may present (Authorization: Bearer <token>); env: comma-separated.",
                                env="MONO_AGENT_OPENAI_API_TOKENS", factory=list, secret=True)


MAX_CONVERSATION_ID_CHARS = 256
"""The longest conversation id a client may name (``X-Conversation-Id`` or ``user``)."""

TOOL_FIELDS = ("tools", "tool_choice", "functions", "function_call")
"""Request fields that ask for client-side tools: refused, the channel runs tool-free text turns."""

CLIENT_GONE = "client_disconnected"
"""The cancel reason of a streamed run whose client went away (in its continuity account)."""


class CompletionRefused(RequestRefused):
    """A refused request, with OpenAI's ``param`` (the field at fault) and ``code`` (``model_not_found``)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", *,
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(status, message, kind)
        self.param = param
        self.code = code


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: what the official client parses into its typed exceptions."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _error(status: int, message: str, kind: str, headers: dict[str, str] | None = None, *,
           param: str | None = None, code: str | None = None) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse(error_body(message, kind, param, code), status_code=status, headers=headers)


def _refusal(refused: RequestRefused) -> Response:
    return _error(refused.status, refused.message, refused.kind,
                  param=getattr(refused, "param", None), code=getattr(refused, "code", None))


@attrs.frozen
class CompletionRequest:
    """What the channel takes from a ``POST /v1/chat/completions`` body: the turn and how to answer it."""

    text: str
    conversation_id: str
    stream: bool = False
    include_usage: bool = False
    context: str | None = None


CONTEXT_ROLES = ("system", "developer")


def _text_content(content: Any, index: int) -> str | None:
    """A message's text: a string, or the joined ``{'type': 'text'}`` parts; None for anything else.

    :class:`CompletionRefused` 400 names a part that is not text.
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = []
    for part_index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text" or not isinstance(part.get("text"), str):
            named = f"of type {kind!r}" if isinstance(kind, str) else "not a {'type': 'text', 'text': ...} object"
            raise CompletionRefused(400, f"messages[{index}].content[{part_index}] is {named}: this channel takes "
                                    f"text only (a string, or parts {{'type': 'text', 'text': ...}})", param="messages")
        texts.append(part["text"])
    return "".join(texts)


def client_context(messages: list[Any]) -> str | None:
    """The text of the request's ``system`` and ``developer`` messages, joined by blank lines, or None.

    A client's system prompt is the caller's context for this turn (``TurnRequest.context``); the
    composed agent's own prompt stays in charge. A context message whose content is not text is a 400.
    """
    texts = []
    for index, message in enumerate(messages[:-1]):
        if isinstance(message, dict) and message.get("role") in CONTEXT_ROLES:
            text = _text_content(message.get("content"), index)
            if text is None:
                raise CompletionRefused(400, f"messages[{index}].content must be text (a string, or text parts)", param="messages")
            if text.strip():
                texts.append(text.strip())
    return "\n\n".join(texts) or None


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
    content = _text_content(last.get("content"), len(messages) - 1)
    if not isinstance(content, str) or not content.strip():
        raise RequestRefused(400, "the last message's 'content' must be non-empty text")
    return content


def conversation_id(headers: Mapping[str, str], body: dict[str, Any]) -> str:
    """``X-Conversation-Id``, else ``user``, else a new id: the conversation the turn belongs to.

    Each one given is stripped of surrounding blanks and must then be 1 to
    :data:`MAX_CONVERSATION_ID_CHARS` printable characters; anything else is a 400 naming it.
    """
    header = headers.get("x-conversation-id")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise CompletionRefused(400, "'user' must be a string (it names the conversation)", param="user")
    named = [given for given in (_named(header, "the X-Conversation-Id header", None), _named(user, "'user'", "user"))
             if given is not None]
    return f"{CHANNEL}:{named[0] if named else uuid.uuid4()}"


def _named(given: str | None, where: str, param: str | None) -> str | None:
    if given is None:
        return None
    given = given.strip()
    if not given or len(given) > MAX_CONVERSATION_ID_CHARS or not given.isprintable():
        raise CompletionRefused(400, f"{where} must be 1 to {MAX_CONVERSATION_ID_CHARS} printable characters "
                                f"(no control characters): it names the conversation", param=param)
    return given


def completion_request(body: Any, headers: Mapping[str, str], model: str) -> CompletionRequest:
    """Check a chat completion body against what the channel honours; :class:`RequestRefused` naming the problem.

    Honoured: ``messages`` (the trailing user message is the turn; ``system`` and ``developer``
    messages are its context, :func:`client_context`), ``model`` (absent, or the
    agent's own model id: another one is 404 ``model_not_found``), ``stream``,
    ``stream_options.include_usage``, ``user`` and ``n`` (1 only). Refused: client-side tools
    (:data:`TOOL_FIELDS`) and non-text content parts. Every other field (``temperature``,
    ``max_tokens``, ``top_p``, ``stop``, ...) is accepted and ignored: the composed agent's
    configuration decides how the model is called.
    """
    text = trailing_user_text(body)
    asked = body.get("model")
    if asked is not None and not isinstance(asked, str):
        raise CompletionRefused(400, "'model' must be a string: the agent's model id from GET /v1/models", param="model")
    if asked is not None and asked != model:
        raise CompletionRefused(404, f"The model `{asked}` does not exist or you do not have access to it: this server "
                                f"serves `{model}` (GET /v1/models), or omit 'model'", param="model", code="model_not_found")
    for field in TOOL_FIELDS:
        if body.get(field) is not None:
            raise CompletionRefused(400, f"'{field}' is not supported: this channel runs tool-free text turns only "
                                    f"(the agent's own tools run on the server); remove '{field}'", param=field)
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        raise CompletionRefused(400, f"'n' must be 1 (got {n!r}): this channel answers one choice per turn", param="n")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise CompletionRefused(400, "'stream' must be true or false", param="stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise CompletionRefused(400, "'stream_options' is only allowed when 'stream' is true", param="stream_options")
        usage = options.get("include_usage", False) if isinstance(options, dict) else None
        if not isinstance(usage, bool):
            raise CompletionRefused(400, "'stream_options' must be an object whose 'include_usage' is true or false",
                                    param="stream_options")
        include_usage = usage
    return CompletionRequest(text, conversation_id(headers, body), stream, include_usage, client_context(body["messages"]))


def run_failure(exc: BaseException) -> tuple[int, str, str]:
    """``(status, message, type)`` for a run that did not complete: how the client hears of it."""
    if isinstance(exc, ShutdownCancelled):
        return 503, f"{exc}; retry it", "server_error"
    return 500, f"the turn failed ({type(exc).__name__}): {exc}", "server_error"


def sse(payload: Any) -> str:
    """One server-sent event: ``data: <json>`` and a blank line (JSON text holds no raw newline)."""
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


def usage_body(usage: Any) -> dict[str, int]:
    return {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens}


class RunStream:
    """What a streamed completion hears from its run: admission (``run_started``), then each ``text_delta``'s text.

    ``texts`` ends with None once the run's outcome is known (:meth:`follow`). Events may be
    emitted from any thread, so they reach the loop through ``call_soon_threadsafe``, which
    keeps their order.
    """

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.admitted = asyncio.Event()
        self.texts: asyncio.Queue[str | None] = asyncio.Queue()

    def on_event(self, event: Any) -> None:
        if event.type == "text_delta":
            self.loop.call_soon_threadsafe(self.texts.put_nowait, event.data["text"])
        elif event.type == "run_started":
            self.loop.call_soon_threadsafe(self.admitted.set)

    def follow(self, outcome: asyncio.Future[Any]) -> None:
        """End ``texts`` once ``outcome`` is known (after every text the run emitted before it)."""
        outcome.add_done_callback(lambda _: self.loop.call_soon_threadsafe(self.texts.put_nowait, None))


class OpenAIApiChannel:
    """The ``openai-api`` channel: its routes, its own harness, and the runs it has in flight."""

    name = CHANNEL
    credential_hint = "openaiApi.tokens or MONO_AGENT_OPENAI_API_TOKENS=tok1,tok2"

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.settings = agent.config.section("openaiApi", OpenAIApiConfig)
        self.enabled = self.settings.enabled
        self.has_credentials = bool(self.settings.tokens)
        self.runs = ChannelRuns(agent)

    async def start(self) -> None:
        """Nothing to start: the channel answers requests on the routes it mounts."""

    async def serve(self, agent: Agent | None = None) -> None:
        """Not a standalone channel: ``monoagent serve`` mounts :meth:`routes` on its HTTP server."""
        raise NotImplementedError("the openai-api channel is served by `monoagent serve`")

    def routes(self) -> Sequence[Any]:
        from starlette.routing import Route

        return [Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"])]

    def _authorised(self, request: Request) -> bool:
        return not self.has_credentials or bearer_ok(request.headers.get("authorization"), self.settings.tokens)

    async def models(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        if not self._authorised(request):
            return _error(401, "missing or wrong bearer token (Authorization: Bearer <token>)", "authentication_error")
        return JSONResponse({"object": "list", "data": [
            {"id": self.agent.model, "object": "model", "created": 0, "owned_by": "monoagent"}]})

    async def chat_completions(self, request: Request) -> Response:
        from starlette.responses import JSONResponse, StreamingResponse

        if not self._authorised(request):
            return _error(401, "missing or wrong bearer token (Authorization: Bearer <token>)", "authentication_error")
        try:
            body = await read_json(request, self.agent.config.section("serve", ServeConfig).max_body_bytes)
            asked = completion_request(body, request.headers, self.agent.model)
        except RequestRefused as refused:
            return _refusal(refused)
        turn = TurnRequest(
            asked.text, conversation_id=asked.conversation_id, channel=CHANNEL, delivery="request", context=asked.context
        )
        echoed = {"X-Conversation-Id": turn.conversation_id.removeprefix(f"{CHANNEL}:")}
        stream = RunStream() if asked.stream else None
        try:
            handle = self.runs.submit(turn, on_event=stream.on_event if stream else None)
        except (MonoagentError, ShutdownCancelled) as exc:
            return self._failed(exc)
        logger.debug("openai-api: run {} submitted for {}", handle.run_id, turn.conversation_id)
        outcome: asyncio.Future[Any] | None = None
        if stream is not None:  # answer 429 and friends as JSON until the run is admitted, then stream
            outcome = asyncio.ensure_future(self.runs.finish(handle))
            admitted = asyncio.ensure_future(stream.admitted.wait())
            await asyncio.wait({admitted, outcome}, return_when=asyncio.FIRST_COMPLETED)
            admitted.cancel()
            if not outcome.done() or outcome.exception() is None:
                stream.follow(outcome)
                return StreamingResponse(self._chunks(handle, stream, outcome, asked), media_type="text/event-stream",
                                         headers={**echoed, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        try:
            result = await (outcome if outcome is not None else self.runs.finish(handle))
        except (MonoagentError, ShutdownCancelled) as exc:
            return self._failed(exc)
        return JSONResponse({
            "id": f"chatcmpl-{result.run_id}", "object": "chat.completion", "created": int(time.time()),
            "model": result.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text}, "finish_reason": "stop"}],
            "usage": usage_body(result.usage),
        }, headers=echoed)

    def _failed(self, exc: BaseException) -> Response:
        """The JSON error answering a run that did not complete (the response has not started)."""
        if isinstance(exc, AdmissionRejected):
            return _error(429, f"{exc}; retry later", "rate_limit_error", {"Retry-After": str(RETRY_AFTER_S)})
        status, message, kind = self._failure(exc)
        return _error(status, message, kind)

    def _failure(self, exc: BaseException) -> tuple[int, str, str]:
        """:func:`run_failure` with the message redacted, and a log line saying how the turn was answered."""
        status, message, kind = run_failure(exc)
        message = self.agent.redact(message, "error")
        logger.warning("openai-api: turn answered {} ({}): {}", status, kind, message)
        return status, message, kind

    async def _chunks(self, handle: Any, stream: RunStream, outcome: asyncio.Future[Any],
                      asked: CompletionRequest) -> AsyncIterator[str]:
        """The SSE body of a streamed completion, in OpenAI's ``chat.completion.chunk`` shape.

        A role chunk, one chunk per ``text_delta`` as the run emits it, a ``finish_reason: "stop"``
        chunk, with ``include_usage`` a ``usage`` chunk with no choices, then ``[DONE]``. A run that
        fails or is cancelled at shutdown ends the stream with an error object instead (the status
        line was sent already). A client that goes away cancels the run (reason
        :data:`CLIENT_GONE`), which publishes its continuity account.
        """
        chunk = {"id": f"chatcmpl-{handle.run_id}", "object": "chat.completion.chunk", "created": int(time.time()),
                 "model": self.agent.model}

        def choice(delta: dict[str, str], finish_reason: str | None = None) -> str:
            return sse({**chunk, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]})

        try:
            yield choice({"role": "assistant", "content": ""})
            while (text := await stream.texts.get()) is not None:
                yield choice({"content": text})
            try:
                result = outcome.result()
            except (MonoagentError, ShutdownCancelled) as exc:
                _, message, kind = self._failure(exc)
                yield sse(error_body(message, kind))
                return
            chunk["model"] = result.model
            yield choice({}, "stop")
            if asked.include_usage:
                yield sse({**chunk, "choices": [], "usage": usage_body(result.usage)})
            yield "data: [DONE]\n\n"
        finally:
            if not outcome.done():
                logger.info("openai-api: the client of run {} went away; cancelling it", handle.run_id)
                handle.cancel(CLIENT_GONE)
                outcome.cancel()

    def stop_accepting(self) -> None:
        """Start no new turn (the server is stopping): a request that arrives now is answered 503."""
        self.runs.stop_accepting()

    def cancel_in_flight(self) -> int:
        """Cancel every run still in flight (the shutdown grace period is over); returns how many."""
        return self.runs.cancel_in_flight()

    async def shutdown(self) -> None:
        """Wait for the cancelled runs' continuity accounts, then close the harness."""
        await self.runs.shutdown()


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("openaiApi", OpenAIApiConfig)


@hookimpl(trylast=True)
def register_channels(register: ComponentRegistrar[Channel]) -> None:
    register(CHANNEL, OpenAIApiChannel, description="OpenAI-compatible chat API (POST /v1/chat/completions), served by monoagent serve")
