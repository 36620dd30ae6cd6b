"""The bundled plugin ``openai-api``: the ``openai-api`` channel, an OpenAI-compatible chat API.

``POST /v1/chat/completions`` runs one request-driven turn (``delivery = "request"``, no
proactive follow-up possible) and answers in OpenAI's ``chat.completion`` shape, or with
``"stream": true`` as server-sent ``chat.completion.chunk`` events; ``GET /v1/models`` lists the
composed agent as one model id. The conversation id is the ``X-Conversation-Id`` header, else the
body's ``user`` field, else a new one per request; in headers it is percent-encoded UTF-8 both
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
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from monoagent import (
    AdmissionRejected,
    Channel,
    ComponentRegistrar,
    ConfigError,
    ConfigSectionRegistrar,
    Message,
    MonoagentError,
    ToolCall,
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
    header_text,
    idempotency_key,
    json_bytes,
    parse_json,
    read_body,
)
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
    conversations: Literal["auto", "server", "client"] = setting(
        "auto", doc="Whose history a chat completion reads: \"server\" (the conversation named by X-Conversation-Id or "
        "'user', else a new one, stored server-side; resent messages ignored), \"client\" (the request's own earlier "
        "messages, nothing stored), \"auto\" (client when the request names no conversation, else server).",
        env="MONO_AGENT_OPENAI_API_CONVERSATIONS")


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
    return _error(refused.status, refused.message, refused.kind, refused.headers or None,
                  param=getattr(refused, "param", None), code=getattr(refused, "code", None))


@attrs.frozen
class CompletionRequest:
    """What the channel takes from a ``POST /v1/chat/completions`` body: the turn and how to answer it."""

    text: str
    conversation_id: str
    stream: bool = False
    include_usage: bool = False
    context: str | None = None
    history: tuple[Message, ...] | None = None
    """The client's conversation (the turn reads it and stores nothing), or None: the server conversation's."""
    named: bool = True
    """The request named its conversation; a client conversation it did not name gets no ``X-Conversation-Id`` echo."""


ConversationRule = Literal["auto", "server", "client"]

HISTORY_ROLES = ("user", "assistant", "tool")
"""Roles of the earlier messages a client-side conversation keeps as the turn's history."""

DOCUMENTED_MAX_MESSAGES = 64
DOCUMENTED_MAX_MESSAGE_BYTES = 64 * 1024
"""The ``files`` store's defaults of ``history.maxMessages`` / ``history.maxMessageBytes``: the bound of a
client conversation under another history store."""


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
    """``X-Conversation-Id``, else ``user``, else a new id: the conversation the turn belongs to."""
    named = named_conversation(headers, body)
    return f"{CHANNEL}:{named if named is not None else uuid.uuid4()}"


def conversation_rule(setting: ConversationRule, named: str | None) -> Literal["server", "client"]:
    """Whose history the turn reads: ``auto`` is the client's when the request named no conversation."""
    if setting == "auto":
        return "server" if named is not None else "client"
    return setting


def _history_message(message: Any, index: int) -> Message | None:
    """One earlier message of a client conversation as history, or None (a context message, or empty).

    A role outside ``system``, ``developer`` and :data:`HISTORY_ROLES`, or content that is not
    text, is a 400 naming the message.
    """
    if not isinstance(message, dict):
        raise CompletionRefused(400, f"messages[{index}] must be an object with a 'role'", param="messages")
    role = message.get("role")
    if role in CONTEXT_ROLES:
        return None
    if role not in HISTORY_ROLES:
        raise CompletionRefused(400, f"messages[{index}].role is {role!r}: allowed are "
                                f"{', '.join(repr(r) for r in (*CONTEXT_ROLES, *HISTORY_ROLES))}", param="messages")
    content = message.get("content")
    text = "" if content is None and role == "assistant" else _text_content(content, index)
    if text is None:
        raise CompletionRefused(400, f"messages[{index}].content must be text (a string, or text parts)", param="messages")
    if role == "tool":
        call_id = message.get("tool_call_id")
        return Message("tool", text, tool_call_id=call_id if isinstance(call_id, str) else None)
    calls = tuple(_tool_call(call, index, n) for n, call in enumerate(message.get("tool_calls") or ()))
    if not text and not calls:
        return None
    name = message.get("name") if role == "user" and isinstance(message.get("name"), str) else None
    return Message(role, text, name=name, tool_calls=calls)


def _tool_call(call: Any, index: int, n: int) -> ToolCall:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise CompletionRefused(400, f"messages[{index}].tool_calls[{n}] must be "
                                f"{{'id': ..., 'type': 'function', 'function': {{'name': ..., 'arguments': ...}}}}",
                                param="messages")
    try:
        arguments = parse_json((function.get("arguments") or "{}").encode("utf-8"))
    except (RequestRefused, AttributeError):
        arguments = None
    if not isinstance(arguments, dict):
        raise CompletionRefused(400, f"messages[{index}].tool_calls[{n}].function.arguments must be a JSON object "
                                f"as a string", param="messages")
    return ToolCall(str(call.get("id") or f"call_{index}_{n}"), function["name"], arguments)


def client_history(messages: list[Any], max_messages: int, max_message_bytes: int) -> tuple[Message, ...]:
    """The earlier messages of a client conversation as the turn's history, bounded as stored history is.

    Only the newest ``max_messages`` history messages are kept (``history.maxMessages``), each cut to
    ``max_message_bytes`` serialised (``history.maxMessageBytes``, the store's own cap); the messages
    are read from the newest back and the walk stops once enough are kept, so a request of any number
    of earlier messages costs no more than its bound (the body itself is bounded by
    ``serve.maxBodyBytes``). Tool calls and results are then :func:`paired`. The turn's compaction
    and prompt budget apply as to stored history.
    """
    from monoagent_plugins.history.records import cap_message

    kept: list[Message] = []
    for index in range(len(messages) - 2, -1, -1):
        if len(kept) >= max_messages:
            break
        message = _history_message(messages[index], index)
        if message is not None:
            kept.append(cap_message(message, max_message_bytes)[0])
    kept.reverse()
    return paired(kept)


def paired(messages: list[Message]) -> tuple[Message, ...]:
    """``messages`` with every tool call answered and every tool result called: a provider refuses either alone.

    An assistant's call with no later ``tool`` message of its id is dropped (the message too when
    that leaves it empty), and so is a ``tool`` message answering no call kept before it (its call
    was cut by the bound, or the client never sent it).
    """
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    called: set[str] = set()
    kept: list[Message] = []
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            calls = tuple(call for call in message.tool_calls if call.id in answered)
            called.update(call.id for call in calls)
            if not calls and not message.content:
                continue
            message = attrs.evolve(message, tool_calls=calls)
        elif message.role == "tool" and message.tool_call_id not in called:
            continue
        kept.append(message)
    return tuple(kept)


def named_conversation(headers: Mapping[str, str], body: dict[str, Any]) -> str | None:
    """``X-Conversation-Id``, else ``user``, else None: the conversation the request names.

    Each one given is stripped of surrounding blanks and must then be 1 to
    :data:`MAX_CONVERSATION_ID_CHARS` printable characters; anything else is a 400 naming it.
    The header is read percent-decoded (:func:`~monoagent_plugins.serving.http.header_text`: a
    conversation id outside ASCII travels in headers as percent-encoded UTF-8, both ways).
    """
    header = headers.get("x-conversation-id")
    if header is not None:
        try:
            header = header_text(header, "X-Conversation-Id")
        except RequestRefused as refused:
            raise CompletionRefused(400, refused.message) from None
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise CompletionRefused(400, "'user' must be a string (it names the conversation)", param="user")
    named = [given for given in (_named(header, "the X-Conversation-Id header", None), _named(user, "'user'", "user"))
             if given is not None]
    return named[0] if named else None


def _named(given: str | None, where: str, param: str | None) -> str | None:
    if given is None:
        return None
    given = given.strip()
    if not given or len(given) > MAX_CONVERSATION_ID_CHARS or not given.isprintable():
        raise CompletionRefused(400, f"{where} must be 1 to {MAX_CONVERSATION_ID_CHARS} printable characters "
                                f"(no control characters): it names the conversation", param=param)
    return given


def completion_request(body: Any, headers: Mapping[str, str], model: str, rule: ConversationRule = "server",
                       bounds: tuple[int, int] = (DOCUMENTED_MAX_MESSAGES, DOCUMENTED_MAX_MESSAGE_BYTES)) -> CompletionRequest:
    """Check a chat completion body against what the channel honours; :class:`RequestRefused` naming the problem.

    Honoured: ``messages`` (the trailing user message is the turn; ``system`` and ``developer``
    messages are its context, :func:`client_context`), ``model`` (absent, or the
    agent's own model id: another one is 404 ``model_not_found``), ``stream``, the earlier
    ``user``/``assistant``/``tool`` messages when ``rule`` makes the conversation the client's
    (:func:`conversation_rule`, :func:`client_history` bounded by ``bounds``),
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
    named = named_conversation(headers, body)
    history = None
    if conversation_rule(rule, named) == "client":
        history = client_history(body["messages"], *bounds)
    conversation = f"{CHANNEL}:{named if named is not None else uuid.uuid4()}"
    return CompletionRequest(text, conversation, stream, include_usage, client_context(body["messages"]), history,
                             named is not None)


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
    """A stored ``chat.completion`` answer as the SSE events of a stream: role, the whole text, stop, usage, ``[DONE]``."""
    chunk = {"id": answer["id"], "object": "chat.completion.chunk", "created": answer["created"], "model": answer["model"]}
    text = answer["choices"][0]["message"]["content"]

    def choice(delta: dict[str, str], finish_reason: str | None = None) -> bytes:
        return sse({**chunk, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]})

    events = [choice({"role": "assistant", "content": ""}), choice({"content": text}), choice({}, "stop")]
    if include_usage:
        events.append(sse({**chunk, "choices": [], "usage": answer["usage"]}))
    return [*events, DONE]


def completion_answer(result: Any) -> dict[str, Any]:
    """The ``chat.completion`` object answering a completed turn (also what an ``Idempotency-Key`` keeps)."""
    return {
        "id": f"chatcmpl-{result.run_id}", "object": "chat.completion", "created": int(time.time()),
        "model": result.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text}, "finish_reason": "stop"}],
        "usage": usage_body(result.usage),
    }


def request_digest(raw: bytes, conversation_header: str | None) -> str:
    """What an ``Idempotency-Key`` is bound to: the raw body and the ``X-Conversation-Id`` header as sent."""
    return hashlib.sha256(f"{conversation_header or ''}\n".encode("latin-1", "replace") + raw).hexdigest()


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
        self.receipts: Any = None
        self._settling: set[asyncio.Task[dict[str, Any] | None]] = set()

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

    async def serve(self, agent: Agent | None = None) -> None:
        """Not a standalone channel: ``monoagent serve`` mounts :meth:`routes` on its HTTP server."""
        raise NotImplementedError("the openai-api channel is served by `monoagent serve`")

    def routes(self) -> Sequence[Any]:
        from starlette.routing import Route

        return [Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"])]

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
        from starlette.responses import Response, StreamingResponse

        if not self._authorised(request):
            return _error(401, "missing or wrong bearer token (Authorization: Bearer <token>)", "authentication_error")
        serve = self.agent.config.section("serve", ServeConfig)
        try:
            timeout = (serve.body_timeout_ms, "serve.bodyTimeoutMs") if self.has_credentials else (
                serve.unauthenticated_body_timeout_ms, "serve.unauthenticatedBodyTimeoutMs")  # no token: anyone's body
            raw = await read_body(request, serve.max_body_bytes, timeout[0] / 1000, timeout[1])
            asked = completion_request(parse_json(raw), request.headers, self.agent.model, self.settings.conversations,
                                       self._history_bounds())
            key = idempotency_key(request.headers)
        except RequestRefused as refused:
            return _refusal(refused)
        turn = TurnRequest(
            asked.text, conversation_id=asked.conversation_id, channel=CHANNEL, delivery="request", context=asked.context,
            history=asked.history, isolated=asked.history is not None,  # a client conversation: nothing stored
        )
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
                return self._idempotent(key, admission, asked, echoed)
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
        if stream is not None:  # answer 429 and friends as JSON until the run is admitted, then stream
            admitted = asyncio.ensure_future(stream.admitted.wait())
            await asyncio.wait({admitted, outcome}, return_when=asyncio.FIRST_COMPLETED)
            admitted.cancel()
            if not outcome.done() or outcome.exception() is None:
                stream.follow(outcome)
                return StreamingResponse(self._chunks(handle, stream, outcome, asked), media_type="text/event-stream",
                                         headers={**echoed, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        try:
            await outcome
        except (MonoagentError, ShutdownCancelled) as exc:
            await asyncio.shield(settled)
            return self._failed(exc)
        answer = await asyncio.shield(settled)  # the receipt holds the answer before the client sees it
        return Response(json_bytes(answer), media_type="application/json", headers=echoed)

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

    async def _settle(self, receipt: tuple[str, str, str] | None, answer: dict[str, Any] | None) -> None:
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
                                        StoredAnswer(200, body, answer["id"].removeprefix("chatcmpl-")))
        except Exception as exc:  # the answer goes out anyway; a retry of the key then waits (409) or runs again
            logger.error("openai-api: the idempotency record of key {!r} could not be written: {}", key, exc)

    def _idempotent(self, key: str, admission: Any, asked: CompletionRequest, echoed: dict[str, str]) -> Response:
        """The answer to a known ``Idempotency-Key``: the first answer, or why not (as the webhook answers)."""
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
        if not asked.stream:
            return Response(answer.body.encode("utf-8"), status_code=answer.status, media_type="application/json",
                            headers=headers)
        events = replayed_chunks(parse_json(answer.body.encode("utf-8")), asked.include_usage)

        async def replay() -> AsyncIterator[bytes]:
            for event in events:
                yield event

        return StreamingResponse(replay(), media_type="text/event-stream", headers={**headers, "Cache-Control": "no-cache"})

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

        def choice(delta: dict[str, str], finish_reason: str | None = None) -> bytes:
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
        if self.receipts is not None:
            await asyncio.to_thread(self.receipts.close)


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("openaiApi", OpenAIApiConfig)


@hookimpl(trylast=True)
def register_channels(register: ComponentRegistrar[Channel]) -> None:
    register(CHANNEL, OpenAIApiChannel, description="OpenAI-compatible chat API (POST /v1/chat/completions), served by monoagent serve")
