"""The bundled plugin ``openai-api``: the ``openai-api`` channel, an OpenAI-compatible chat API.

``POST /v1/chat/completions`` runs one request-driven turn (``delivery = "request"``, no
proactive follow-up possible) and answers in OpenAI's ``chat.completion`` shape, or with
``"stream": true`` as server-sent ``chat.completion.chunk`` events; ``GET /v1/models`` lists the
composed agent as one model id; ``POST /v1/responses`` and ``GET /v1/responses/{id}`` are OpenAI's
Responses API (:mod:`monoagent_plugins.serving.openai_responses`). The conversation id is the
``X-Conversation-Id`` header, else the body's ``user`` field, else a new one per request; in headers it is percent-encoded UTF-8 both
ways (:func:`~monoagent_plugins.serving.http.header_safe`), so the echo cannot fail after the
turn. The request's trailing user message is the turn; ``system`` and ``developer`` messages
become the turn's context (``TurnRequest.context``, the dynamic ``dynamic_context`` section;
never stored in history). Whose history the turn reads is ``openaiApi.conversations``
(:func:`conversation_rule`): a server conversation (the named one's canonical history; the
earlier messages the client resends are ignored, and the turn is committed to it), or the
client's (the request's earlier ``user``, ``assistant`` and ``tool`` messages are the turn's
history, ``TurnRequest.history``, bounded as stored history is by :func:`client_history`, and
the turn is isolated: nothing is stored). ``auto``, the default, takes the client's when the
request names no conversation (no ``X-Conversation-Id``, no ``user``).

Client-side tools: the request's function ``tools`` are the turn's ``client_tools`` and its
``tool_choice`` the turn's. A turn that ends on calls to them answers ``finish_reason:
"tool_calls"`` with the calls (:func:`completion_answer`; streamed as ``tool_calls`` deltas after
the text); a request whose messages end with ``tool`` results continues that turn
(``TurnRequest.tool_results``). A client tool named like the agent's, or results that answer no
waiting call, are a 400 (``ClientToolsRefused``): a streamed response starts only once the turn's
prompt is prepared (``prompt_manifest``), after those checks.

Errors use OpenAI's error shape, so the official ``openai`` client raises its typed exceptions
with our message.

Nothing that answers a committed turn can fail: the echoed header is made before the turn is
admitted and the JSON and SSE bytes cannot fail to encode, so a committed turn is never answered
5xx (a client would retry it). An ``Idempotency-Key`` is handled as the webhook handles it, in the
webhook's receipt store (hook ``openai-api/<token digest>``): a repeated key answers the first
answer (streamed or not) and runs no turn, another request under it is a 422, a running one a 409.

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
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from monoagent import (
    AdmissionRejected,
    Channel,
    ClientToolsRefused,
    ComponentRegistrar,
    ConfigError,
    ConfigSectionRegistrar,
    MonoagentError,
    TurnRequest,
    hookimpl,
    logger,
    setting,
)
from monoagent_plugins.serving.channel_runs import ChannelRuns, ShutdownCancelled
from monoagent_plugins.serving.http import (
    IDEMPOTENCY_HEADER,
    REPLAYED_HEADER,
    RETRY_AFTER_S,
    RequestRefused,
    authenticated,
    bearer_ok,
    header_safe,
    idempotency_key,
    json_bytes,
    parse_json,
    read_body,
)
from monoagent_plugins.serving.openai_requests import (
    CHANNEL,
    DOCUMENTED_MAX_MESSAGE_BYTES,
    DOCUMENTED_MAX_MESSAGES,
    CompletionRequest,
    completion_request,
)
from monoagent_plugins.serving.serve import ServeConfig

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from monoagent import Agent


@attrs.define
class OpenAIApiConfig:
    """openaiApi: the OpenAI-compatible chat API channel of ``monoagent serve``."""

    enabled: bool = setting(False, doc="Serve the OpenAI-compatible API (POST /v1/chat/completions, POST /v1/responses, GET /v1/models).",
                            env="MONO_AGENT_OPENAI_API_ENABLED")
    tokens: list[str] = setting(doc="Bearer tokens a client may present (Authorization: Bearer <token>); env: comma-separated.",
                                env="MONO_AGENT_OPENAI_API_TOKENS", factory=list, secret=True)
    conversations: Literal["auto", "server", "client"] = setting(
        "auto", doc="Whose history a chat completion reads: \"server\" (the conversation named by X-Conversation-Id or "
        "'user', else a new one, stored server-side; resent messages ignored), \"client\" (the request's own earlier "
        "messages, nothing stored), \"auto\" (client when the request names no conversation, else server).",
        env="MONO_AGENT_OPENAI_API_CONVERSATIONS")
    response_retention_days: int = setting(
        30, doc="How long a response created with store: true stays retrievable (GET /v1/responses/{id}) and continuable "
        "(previous_response_id), in days.", env="MONO_AGENT_OPENAI_API_RESPONSE_RETENTION_DAYS", min=1, max=3650)
    response_max_stored: int = setting(
        10_000, doc="The most responses kept (store: true); beyond it the oldest are removed first.",
        env="MONO_AGENT_OPENAI_API_RESPONSE_MAX_STORED", min=100, max=10_000_000)


CLIENT_GONE = "client_disconnected"
"""The cancel reason of a streamed run whose client went away (in its continuity account)."""


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: what the official client parses into its typed exceptions."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _error(status: int, message: str, kind: str, headers: dict[str, str] | None = None, *,
           param: str | None = None, code: str | None = None) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse(error_body(message, kind, param, code), status_code=status, headers=headers)


def _refusal(refused: RequestRefused) -> Response:
    return _error(refused.status, refused.message, refused.kind, refused.headers or None,
                  param=getattr(refused, "param", None), code=getattr(refused, "code", None))


def run_failure(exc: BaseException) -> tuple[int, str, str]:
    """``(status, message, type)`` for a run that did not complete: how the client hears of it."""
    if isinstance(exc, ShutdownCancelled):
        return 503, f"{exc}; retry it", "server_error"
    return 500, f"the turn failed ({type(exc).__name__}): {exc}", "server_error"


def sse(payload: Any) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line (JSON text holds no raw newline); never fails to encode."""
    return b"data: " + json_bytes(payload) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def replayed_chunks(answer: dict[str, Any], include_usage: bool) -> list[bytes]:
    """A stored ``chat.completion`` answer as the SSE events of a stream: role, the whole text, the tool calls, the
    finish reason, usage, ``[DONE]``."""
    chunk = {"id": answer["id"], "object": "chat.completion.chunk", "created": answer["created"], "model": answer["model"]}
    first = answer["choices"][0]
    text, calls = first["message"]["content"], first["message"].get("tool_calls") or []

    def choice(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        return sse({**chunk, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]})

    events = [choice({"role": "assistant", "content": ""}), *([choice({"content": text})] if text else []),
              *(choice({"tool_calls": [{"index": index, **call}]}) for index, call in enumerate(calls)),
              choice({}, first["finish_reason"])]
    if include_usage:
        events.append(sse({**chunk, "choices": [], "usage": answer["usage"]}))
    return [*events, DONE]


def completion_answer(result: Any) -> dict[str, Any]:
    """The ``chat.completion`` object answering a completed turn (also what an ``Idempotency-Key`` keeps).

    A turn that ended on client-side tool calls answers them as ``tool_calls`` with ``finish_reason:
    "tool_calls"`` (its text, if the model wrote any before the calls, as ``content``, else null).
    """
    calls = result.pending_tool_calls
    message: dict[str, Any] = {"role": "assistant", "content": result.text if result.text or not calls else None}
    if calls:
        message["tool_calls"] = [tool_call_body(call) for call in calls]
    return {
        "id": f"chatcmpl-{result.run_id}", "object": "chat.completion", "created": int(time.time()),
        "model": result.model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": usage_body(result.usage),
    }


def tool_call_body(call: Any) -> dict[str, Any]:
    """One client-side call as chat completions carries it: its arguments as a JSON string (that cannot fail)."""
    return {"id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False, default=str)}}


def request_digest(raw: bytes, conversation_header: str | None) -> str:
    """What an ``Idempotency-Key`` is bound to: the raw body and the ``X-Conversation-Id`` header as sent."""
    return hashlib.sha256(f"{conversation_header or ''}\n".encode("latin-1", "replace") + raw).hexdigest()


def usage_body(usage: Any) -> dict[str, int]:
    return {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens}


class RunStream:
    """What a streamed completion hears from its run: its prompt prepared (``prompt_manifest``: admitted, and past every
    check that refuses a request as a 4xx), then each ``text_delta``'s text.

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
        elif event.type == "prompt_manifest":  # prepared: what refuses a request (its tools, its results) has passed
            self.loop.call_soon_threadsafe(self.admitted.set)

    async def ready(self, outcome: asyncio.Future[Any]) -> bool:
        """Wait until the run's prompt is prepared or the run has ended: True when the response may stream (the run
        did not fail before it was prepared, so 429 and friends are still answered as JSON); :meth:`follow` then runs."""
        admitted = asyncio.ensure_future(self.admitted.wait())
        await asyncio.wait({admitted, outcome}, return_when=asyncio.FIRST_COMPLETED)
        admitted.cancel()
        if outcome.done() and outcome.exception() is not None:
            return False
        self.follow(outcome)
        return True

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
        self.receipts: Any = None
        self._settling: set[asyncio.Task[dict[str, Any] | None]] = set()
        from monoagent_plugins.serving.openai_responses import ResponsesEndpoint

        self.responses = ResponsesEndpoint(self)

    async def start(self) -> None:
        """Open the idempotency receipts (the webhook channel's store, shared: ``webhook.idempotencyTtlHours``)."""
        from monoagent_plugins.serving.webhook import WebhookConfig
        from monoagent_plugins.serving.webhook_receipts import ReceiptStore, WebhookStoreError

        try:
            ttl_hours = self.agent.config.section("webhook", WebhookConfig).idempotency_ttl_hours
        except KeyError:  # the webhook plugin is blocked: its section's default
            ttl_hours = WebhookConfig().idempotency_ttl_hours
        try:
            self.receipts = await asyncio.to_thread(ReceiptStore, self.agent.config.home, ttl_hours * 3600)
        except WebhookStoreError as exc:
            raise ConfigError(str(exc)) from exc
        await self.responses.start()

    async def serve(self, agent: Agent | None = None) -> None:
        """Not a standalone channel: ``monoagent serve`` mounts :meth:`routes` on its HTTP server."""
        raise NotImplementedError("the openai-api channel is served by `monoagent serve`")

    def routes(self) -> Sequence[Any]:
        from starlette.routing import Route

        return [Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/responses", self.responses.create, methods=["POST"]),
                Route("/v1/responses/{response_id}", self.responses.retrieve, methods=["GET"])]

    def _history_bounds(self) -> tuple[int, int]:
        """``history.maxMessages`` and ``history.maxMessageBytes`` of the files store, else their defaults."""
        from monoagent_plugins.history.files import CONFIG_PATH, FilesHistoryConfig

        try:
            files = self.agent.config.section(CONFIG_PATH, FilesHistoryConfig)
        except (KeyError, TypeError):
            return DOCUMENTED_MAX_MESSAGES, DOCUMENTED_MAX_MESSAGE_BYTES
        return files.max_messages, files.max_message_bytes

    def _authorised(self, request: Request) -> bool:
        if self.has_credentials and not bearer_ok(request.headers.get("authorization"), self.settings.tokens):
            return False
        authenticated(request)
        return True

    def _scope(self, request: Request) -> str:
        """The receipts' ``hook`` of this client's idempotency keys: the channel and a digest of its bearer token.

        One client's key never answers another's request. ``/`` keeps it apart from every webhook hook
        (a hook name is one path segment).
        """
        _, _, token = (request.headers.get("authorization") or "").partition(" ")
        digest = hashlib.sha256(token.strip().encode()).hexdigest()[:16] if self.has_credentials else "-"
        return f"{CHANNEL}/{digest}"

    async def read_request(self, request: Request) -> bytes:
        """The request's body, within ``serve.maxBodyBytes`` and the body timeout; :class:`RequestRefused` otherwise."""
        serve = self.agent.config.section("serve", ServeConfig)
        timeout = (serve.body_timeout_ms, "serve.bodyTimeoutMs") if self.has_credentials else (
            serve.unauthenticated_body_timeout_ms, "serve.unauthenticatedBodyTimeoutMs")  # no token: anyone's body
        return await read_body(request, serve.max_body_bytes, timeout[0] / 1000, timeout[1])

    async def models(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        if not self._authorised(request):
            return _error(401, "missing or wrong bearer token (Authorization: Bearer <token>)", "authentication_error")
        return JSONResponse({"object": "list", "data": [
            {"id": self.agent.model, "object": "model", "created": 0, "owned_by": "monoagent"}]})

    async def chat_completions(self, request: Request) -> Response:
        """One completion. Everything that can refuse it is checked before the turn is admitted (the body, the
        conversation id, the echoed header, the ``Idempotency-Key``); after the turn commits, the answer is
        built from parts that cannot fail (:func:`json_bytes`, a header made ASCII before), so a committed
        turn is never answered 5xx."""

        if not self._authorised(request):
            return _error(401, "missing or wrong bearer token (Authorization: Bearer <token>)", "authentication_error")
        try:
            raw = await self.read_request(request)
            asked = completion_request(parse_json(raw), request.headers, self.agent.model, self.settings.conversations,
                                       self._history_bounds())
            key = idempotency_key(request.headers)
        except RequestRefused as refused:
            return _refusal(refused)
        try:
            turn = TurnRequest(
                asked.text, conversation_id=asked.conversation_id, channel=CHANNEL, delivery="request", context=asked.context,
                history=asked.history, isolated=asked.history is not None,  # a client conversation: nothing stored
                client_tools=asked.client_tools, tool_results=asked.tool_results, tool_choice=asked.tool_choice,
            )
        except (TypeError, ValueError) as exc:  # the parser checks each part first; this is the turn's own word on it
            return _error(400, str(exc), "invalid_request_error")
        echoed = {"X-Conversation-Id": header_safe(turn.conversation_id.removeprefix(f"{CHANNEL}:"))}
        if asked.history is not None and not asked.named:  # a made-up id names nothing stored: sent back, it would
            echoed = {}                                      # turn the client's chat into an empty server one

        receipt: tuple[str, str, str] | None = None
        if key is not None:
            if self.receipts is None:
                return _error(503, "the openai-api channel is starting; retry", "server_error", {"Retry-After": "1"})
            scope, request_id = self._scope(request), uuid.uuid4().hex
            digest = request_digest(raw, request.headers.get("x-conversation-id"))
            admission = await asyncio.to_thread(self.receipts.admit, scope, key, digest, request_id, int(time.time()))
            if admission.outcome != "admitted":
                return self._idempotent(key, admission, asked.stream, echoed,
                                        lambda answer: replayed_chunks(answer, asked.include_usage))
            receipt = (scope, key, request_id)
        stream = RunStream() if asked.stream else None
        try:
            handle = self.runs.submit(turn, on_event=stream.on_event if stream else None)
        except (MonoagentError, ShutdownCancelled) as exc:
            await self._settle(receipt, None)
            return self._failed(exc)
        logger.debug("openai-api: run {} submitted for {}", handle.run_id, turn.conversation_id)
        outcome = asyncio.ensure_future(self.runs.finish(handle))
        settled = self._settle_when_done(receipt, outcome)
        def chunks() -> AsyncIterator[bytes]:
            assert stream is not None  # answer() streams only a request that has its RunStream
            return self._chunks(handle, stream, outcome, asked)

        return await self.answer(outcome, settled, echoed, stream, chunks)

    async def answer(self, outcome: asyncio.Future[Any], settled: asyncio.Task[dict[str, Any] | None], echoed: dict[str, str],
                     stream: RunStream | None, events: Callable[[], AsyncIterator[bytes]]) -> Response:
        """How a submitted run is answered (both APIs): with ``stream``, the SSE ``events`` once the run is prepared;
        otherwise, or when it failed before that, the JSON answer once ``settled`` (the receipt, and the stored
        response, hold it before the client sees it), or the JSON error of the run that did not complete."""
        from starlette.responses import Response, StreamingResponse

        if stream is not None and await stream.ready(outcome):
            return StreamingResponse(events(), media_type="text/event-stream",
                                     headers={**echoed, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        try:
            await outcome
        except (MonoagentError, ShutdownCancelled) as exc:
            await asyncio.shield(settled)
            return self._failed(exc)
        return Response(json_bytes(await asyncio.shield(settled)), media_type="application/json", headers=echoed)

    def _settle_when_done(self, receipt: tuple[str, str, str] | None,
                          outcome: asyncio.Future[Any]) -> asyncio.Task[dict[str, Any] | None]:
        """The ``chat.completion`` answer once the run completed (None when it did not), recorded in the receipts
        for a keyed request. A task kept until done, whoever still listens: a client that goes away
        mid-stream does not leave its key running."""
        async def settle() -> dict[str, Any] | None:
            try:
                result = await asyncio.shield(outcome)
            except BaseException:  # failed, cancelled: no completed turn, so a retry runs it
                await self._settle(receipt, None)
                return None
            answer = completion_answer(result)
            await self._settle(receipt, answer)
            return answer

        task = asyncio.ensure_future(settle())
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)
        return task

    async def _settle(self, receipt: tuple[str, str, str] | None, answer: dict[str, Any] | None,
                      run_id: str | None = None) -> None:
        """Keep the answer of a keyed completed turn (or forget the key of one that did not complete).

        A receipt that cannot be written is logged, never answered as an error: the turn committed.
        """
        from monoagent_plugins.serving.webhook_receipts import StoredAnswer

        if receipt is None:
            return
        scope, key, request_id = receipt
        try:
            if answer is None:
                await asyncio.to_thread(self.receipts.forget, scope, key, request_id)
            else:
                body = json_bytes(answer).decode("utf-8")
                await asyncio.to_thread(self.receipts.complete, scope, key,
                                        StoredAnswer(200, body, run_id or answer["id"].removeprefix("chatcmpl-")))
        except Exception as exc:  # the answer goes out anyway; a retry of the key then waits (409) or runs again
            logger.error("openai-api: the idempotency record of key {!r} could not be written: {}", key, exc)

    def _idempotent(self, key: str, admission: Any, stream: bool, echoed: dict[str, str],
                    replay: Callable[[dict[str, Any]], list[bytes]]) -> Response:
        """The answer to a known ``Idempotency-Key``: the first answer (``replay`` makes a streamed request's events of
        it), or why not (as the webhook answers)."""
        from starlette.responses import Response, StreamingResponse

        if admission.outcome == "conflict":
            return _error(422, f"{IDEMPOTENCY_HEADER} {key!r} was first used with a different request (body or "
                               f"X-Conversation-Id); use a new key for a new request", "invalid_request_error",
                          code="idempotency_conflict")
        if admission.outcome == "in_progress":
            return _error(409, f"the first request with {IDEMPOTENCY_HEADER} {key!r} is in progress, retry later",
                          "invalid_request_error", {"Retry-After": str(RETRY_AFTER_S)}, code="idempotency_in_progress")
        answer = admission.answer
        headers = {**echoed, REPLAYED_HEADER: "true"}
        logger.info("openai-api: {} {!r} answered with the first answer (run {}), no new turn", IDEMPOTENCY_HEADER, key,
                    answer.run_id)
        if not stream:
            return Response(answer.body.encode("utf-8"), status_code=answer.status, media_type="application/json",
                            headers=headers)
        events = replay(parse_json(answer.body.encode("utf-8")))

        async def replayed() -> AsyncIterator[bytes]:
            for event in events:
                yield event

        return StreamingResponse(replayed(), media_type="text/event-stream", headers={**headers, "Cache-Control": "no-cache"})

    def _failed(self, exc: BaseException) -> Response:
        """The JSON error answering a run that did not complete (the response has not started)."""
        if isinstance(exc, AdmissionRejected):
            return _error(429, f"{exc}; retry later", "rate_limit_error", {"Retry-After": str(RETRY_AFTER_S)})
        if isinstance(exc, ClientToolsRefused):
            return _error(400, str(exc), "invalid_request_error")
        status, message, kind = self._failure(exc)
        return _error(status, message, kind)

    def _failure(self, exc: BaseException) -> tuple[int, str, str]:
        """:func:`run_failure` with the message redacted, and a log line saying how the turn was answered."""
        status, message, kind = run_failure(exc)
        message = self.agent.redact(message, "error")
        logger.warning("openai-api: turn answered {} ({}): {}", status, kind, message)
        return status, message, kind

    async def _chunks(self, handle: Any, stream: RunStream, outcome: asyncio.Future[Any],
                      asked: CompletionRequest) -> AsyncIterator[bytes]:
        """The SSE body of a streamed completion, in OpenAI's ``chat.completion.chunk`` shape.

        A role chunk, one chunk per ``text_delta`` as the run emits it, a ``finish_reason: "stop"``
        chunk, with ``include_usage`` a ``usage`` chunk with no choices, then ``[DONE]``. A run that
        fails or is cancelled at shutdown ends the stream with an error object instead (the status
        line was sent already). A client that goes away cancels the run (reason
        :data:`CLIENT_GONE`), which publishes its continuity account. Every event is encoded by
        :func:`sse`, which cannot fail, so a committed turn's stream always ends with ``[DONE]``.
        """
        chunk = {"id": f"chatcmpl-{handle.run_id}", "object": "chat.completion.chunk", "created": int(time.time()),
                 "model": self.agent.model}

        def choice(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
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
            for index, call in enumerate(result.pending_tool_calls):
                yield choice({"tool_calls": [{"index": index, **tool_call_body(call)}]})
            yield choice({}, "tool_calls" if result.pending_tool_calls else "stop")
            if asked.include_usage:
                yield sse({**chunk, "choices": [], "usage": usage_body(result.usage)})
            yield DONE
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
        """Wait for the cancelled runs' continuity accounts and their idempotency records, then close the harness
        and the receipts."""
        await self.runs.shutdown()
        if self._settling:
            await asyncio.gather(*self._settling, return_exceptions=True)
        await self.responses.shutdown()
        if self.receipts is not None:
            await asyncio.to_thread(self.receipts.close)


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("openaiApi", OpenAIApiConfig)


@hookimpl
async def after_history_reset(agent: Agent, logical_conversation_id: str | None) -> None:
    """A reset conversation's stored responses go with its history (:func:`~.response_store.forget_conversation`)."""
    from monoagent_plugins.serving.response_store import forget_conversation

    if logical_conversation_id is None or logical_conversation_id.startswith(f"{CHANNEL}:"):
        await asyncio.to_thread(forget_conversation, agent.config.home, logical_conversation_id)


@hookimpl(trylast=True)
def register_channels(register: ComponentRegistrar[Channel]) -> None:
    register(CHANNEL, OpenAIApiChannel, description="OpenAI-compatible chat API (POST /v1/chat/completions), served by monoagent serve")
