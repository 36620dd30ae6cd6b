"""The OpenAI Responses API of the ``openai-api`` channel: ``POST /v1/responses`` and ``GET /v1/responses/{id}``.

Mounted by :class:`~monoagent_plugins.serving.openai_api.OpenAIApiChannel` beside chat completions, with its
bearer tokens, body limits, harness, receipts and error shape. ``POST /v1/responses`` runs one
request-driven turn and answers a ``response`` object (``output`` holds one assistant ``message``
item with one ``output_text`` part; ``output_text`` in the official client), or with ``"stream": true``
the documented server-sent events, each with its ``sequence_number``: ``response.created``,
``response.in_progress``, ``response.output_item.added``, ``response.content_part.added``, one
``response.output_text.delta`` per ``text_delta`` of the run, ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done``, ``response.completed``; a run that
fails after the stream started ends with ``response.failed`` (its ``error`` says why). The body is
read by :mod:`~monoagent_plugins.serving.responses_requests`: the input's trailing user message is
the turn, ``instructions`` and ``system``/``developer`` items its context (``TurnRequest.context``).

Which conversation the turn belongs to (:meth:`ResponsesEndpoint._plan`):

- ``previous_response_id``: the server conversation of that stored response; the input's earlier
  items are ignored (server history is canonical, as chat completions under ``server``). An unknown
  id (never stored, ``store: false``, past ``openaiApi.responseRetentionDays``) or one of another
  conversation than ``X-Conversation-Id``/``user`` names is a 404 ``response_not_found``. The id must
  be its conversation's latest response: continuing an older one is a 409 ``response_not_latest``
  naming the latest (a fork would need the history cut at that response, which the history stores
  do not offer; the client resends the conversation as input, with no ``previous_response_id``, to
  branch it). A response is its conversation's latest from admission (reserved ``in_progress``), so
  two continuations of one response cannot both run; one that failed does not count.
- ``X-Conversation-Id`` or ``user``: that server conversation (shared with chat completions), the
  earlier items ignored.
- neither: the client's conversation: the earlier items are the turn's history
  (``TurnRequest.history``) and no conversation is stored. With ``store: true`` the response keeps
  that conversation (the earlier items, the turn, the answer: :func:`seed_messages`, the newest
  :data:`SEED_MAX_BYTES`) as its seed, and a later ``previous_response_id`` of it makes the seed a new
  server conversation (``openai-api:conv_<hex>``) then (:meth:`ResponsesEndpoint._adopt`): a client
  that resends its conversation on every request (openai-agents' default) makes no conversation per
  request.

``openaiApi.conversations`` applies: ``auto`` is the rule above; ``server`` never reads the input's
earlier items (a request naming nothing starts an empty conversation, as chat completions does);
``client`` always reads them and stores no conversation (``previous_response_id`` is then a 400;
``store: true`` still keeps the response for ``GET``). ``store: false`` keeps nothing: the turn runs
isolated (it reads a named conversation's history but commits nothing to it), ``GET`` answers 404
and the id cannot be a ``previous_response_id``. ``store: true`` keeps the response in the
:class:`~monoagent_plugins.serving.response_store.ResponseStore` with its conversation and position;
``metadata`` (OpenAI's limits) is kept and echoed.

``usage`` follows OpenAI: ``input_tokens`` counts every prompt token, cache reads and writes included,
and ``input_tokens_details.cached_tokens`` the cache reads the provider reported. An
``Idempotency-Key`` is handled as chat completions handles it (the same receipts and scope, the key
bound to this endpoint as well as to the body): a repeated key answers the first response (streamed or not, ``Idempotent-Replayed: true``) and runs no
turn. Client-side function tools (``tools`` of ``type: "function"``, ``tool_choice``) are the turn's
``client_tools``: a call of one ends the response with ``function_call`` output items after the
step is committed, and ``function_call_output`` items continue it (``tool_results``; the
conversation, stored or the client's, ends with the step holding the calls). A client tool the
engine refuses (``ClientToolsRefused``: a name the agent uses, results that do not answer the
waiting calls) is a 400; a streamed response therefore starts once the turn's prompt is assembled.
As with chat completions, nothing that answers a committed turn can fail, so a committed turn is
never answered 5xx.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import attrs

from monoagent import ConfigError, Message, MonoagentError, ToolCall, TurnRequest, Usage, logger
from monoagent_plugins.serving.channel_runs import ShutdownCancelled
from monoagent_plugins.serving.http import RequestRefused, header_safe, idempotency_key, json_bytes, parse_json
from monoagent_plugins.serving.openai_api import RunStream, _error, _refusal, request_digest, run_failure, sse
from monoagent_plugins.serving.openai_requests import CHANNEL, CompletionRefused
from monoagent_plugins.serving.responses_requests import ResponsesRequest, responses_request

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from monoagent_plugins.serving.openai_api import OpenAIApiChannel


@attrs.frozen
class Plan:
    """Where a response's turn runs: its conversation, the history it reads, and what is stored."""

    conversation_id: str
    history: tuple[Message, ...] | None = None
    """The client's conversation (read instead of the store), or None: the server conversation's."""
    isolated: bool = False
    stored_conversation: str | None = None
    """The conversation the stored response names (None: a client conversation, nothing can continue it)."""
    seeded: bool = False
    """The client carries the conversation (nothing named, ``store: true``): the turn runs on the input's items and
    stores nothing, and the response keeps the conversation's messages (its ``seed``) in case a
    ``previous_response_id`` continues it (:meth:`ResponsesEndpoint._adopt`)."""


SEED_MAX_BYTES = 256 * 1024
"""The most bytes of messages a response of a conversation the client carries keeps as its seed (the newest)."""


def seed_messages(asked: ResponsesRequest, result: Any) -> list[Message]:
    """The conversation a seeded response continues into: the input's earlier items, the turn, and its answer (the
    assistant's text and the client calls it handed over, when it ended on them)."""
    ending = Message("assistant", result.text, tool_calls=result.pending_tool_calls)
    if asked.tool_results:
        names = {call.id: call.name for message in asked.earlier for call in message.tool_calls}
        answered = [Message("tool", r.content, name=names.get(r.call_id, r.name), tool_call_id=r.call_id, is_error=r.is_error)
                    for r in asked.tool_results]
        return [*asked.earlier, *answered, ending]
    return [*asked.earlier, Message("user", asked.text), ending]


def encode_seed(messages: list[Message]) -> str:
    """``messages`` as the JSON a seed keeps: the newest of them within :data:`SEED_MAX_BYTES`, starting at a user message."""
    from monoagent_plugins.history.records import serialise_message

    kept: list[bytes] = []
    size = 2
    for message in reversed(messages):
        data = serialise_message(message)
        if size + len(data) + 1 > SEED_MAX_BYTES:
            break
        kept.append(data)
        size += len(data) + 1
    kept.reverse()
    decoded = [json.loads(data) for data in kept]
    while decoded and decoded[0].get("role") != "user":  # what the cut left of an older turn
        decoded.pop(0)
    return json_bytes(decoded).decode("utf-8")


def decode_seed(seed: str) -> list[Message]:
    from monoagent_plugins.history.records import record_converter

    converter = record_converter()
    return [converter.structure(item, Message) for item in json.loads(seed)]


def response_usage(usage: Usage) -> dict[str, Any]:
    """OpenAI's ``usage``: every prompt token in ``input_tokens``, the provider's cache reads in ``cached_tokens`` and
    its cache writes in ``cache_write_tokens``."""
    prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": usage.cache_read_tokens,
                                                             "cache_write_tokens": usage.cache_write_tokens},
            "output_tokens": usage.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + usage.output_tokens}


def message_item(response_id: str, text: str | None, status: str = "completed") -> dict[str, Any]:
    """The assistant ``message`` output item (no content part yet when ``text`` is None)."""
    content = [] if text is None else [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {"type": "message", "id": f"msg_{response_id.removeprefix('resp_')}", "status": status, "role": "assistant",
            "content": content}


def call_item(call: ToolCall, status: str = "completed") -> dict[str, Any]:
    """A ``function_call`` output item: a call of a client tool the client runs and answers with ``function_call_output``."""
    arguments = json.dumps(call.arguments, ensure_ascii=False, default=str) if status == "completed" else ""
    return {"type": "function_call", "id": f"fc_{call.id}", "call_id": call.id, "name": call.name, "arguments": arguments,
            "status": status}


def response_object(response_id: str, created_at: int, model: str, asked: ResponsesRequest, *, status: str = "in_progress",
                    text: str | None = None, calls: tuple[ToolCall, ...] = (), usage: Usage | None = None,
                    error: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``response`` object the official client parses: ``output`` is the assistant ``message`` item (its text is the
    client's ``output_text``), then a ``function_call`` item per pending client-tool call."""
    output = [] if text is None else [message_item(response_id, text), *map(call_item, calls)]
    return {
        "id": response_id, "object": "response", "created_at": created_at, "status": status, "model": model,
        "output": output, "error": error, "incomplete_details": None,
        "instructions": asked.echo.get("instructions"), "metadata": asked.metadata,
        "previous_response_id": asked.previous_response_id, "store": asked.store, "background": False,
        "tools": asked.echo.get("tools", []), "tool_choice": asked.echo.get("tool_choice", "auto"),
        "parallel_tool_calls": asked.echo.get("parallel_tool_calls", True), "temperature": None, "top_p": None,
        "max_output_tokens": None, "truncation": "disabled", "text": {"format": {"type": "text"}}, "reasoning": None,
        "user": asked.echo.get("user"), "usage": None if usage is None else response_usage(usage),
    }


class EventSequence:
    """Server-sent events of a streamed response: ``event: <type>`` and its JSON with the next ``sequence_number``."""

    def __init__(self) -> None:
        self.number = 0

    def __call__(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, **fields, "sequence_number": self.number}
        self.number += 1
        return f"event: {kind}\n".encode() + sse(payload)

    def opening(self, started: dict[str, Any]) -> list[bytes]:
        """``response.created`` to ``response.content_part.added``: the events before the first text."""
        item = message_item(started["id"], None, "in_progress")
        return [self("response.created", response=started), self("response.in_progress", response=started),
                self("response.output_item.added", output_index=0, item=item),
                self("response.content_part.added", item_id=item["id"], output_index=0, content_index=0,
                     part={"type": "output_text", "text": "", "annotations": []})]

    def delta(self, item_id: str, text: str) -> bytes:
        return self("response.output_text.delta", item_id=item_id, output_index=0, content_index=0, delta=text,
                    logprobs=[])

    def closing(self, done: dict[str, Any]) -> list[bytes]:
        """``response.output_text.done`` to ``response.completed`` for the completed ``done`` object; each
        ``function_call`` item between (``output_item.added``, its arguments' delta and done, ``output_item.done``)."""
        item = done["output"][0]
        part = item["content"][0]
        events = [self("response.output_text.done", item_id=item["id"], output_index=0, content_index=0, text=part["text"],
                       logprobs=[]),
                  self("response.content_part.done", item_id=item["id"], output_index=0, content_index=0, part=part),
                  self("response.output_item.done", output_index=0, item=item)]
        for index, call in enumerate(done["output"][1:], start=1):
            events += [self("response.output_item.added", output_index=index, item={**call, "arguments": "", "status": "in_progress"}),
                       self("response.function_call_arguments.delta", item_id=call["id"], output_index=index,
                            delta=call["arguments"]),
                       self("response.function_call_arguments.done", item_id=call["id"], output_index=index,
                            name=call["name"], arguments=call["arguments"]),
                       self("response.output_item.done", output_index=index, item=call)]
        return [*events, self("response.completed", response=done)]


def replayed_events(done: dict[str, Any]) -> list[bytes]:
    """A stored completed response as the events of a stream: the opening, the whole text as one delta, the closing."""
    events = EventSequence()
    started = {**done, "status": "in_progress", "output": [], "usage": None}
    text = done["output"][0]["content"][0]["text"] if done.get("output") else ""
    return [*events.opening(started), events.delta(message_item(done["id"], None)["id"], text), *events.closing(done)]


class ResponseRun(RunStream):
    """A response's run: its streamed texts (when streaming) and the conversation's message count once committed."""

    def __init__(self, streaming: bool) -> None:
        super().__init__()
        self.streaming = streaming
        self.committed_messages: int | None = None

    def on_event(self, event: Any) -> None:
        if event.type == "run_committed":
            self.committed_messages = event.data.get("messages")
        elif event.type != "text_delta" or self.streaming:
            super().on_event(event)


def not_found(response_id: str, why: str = "") -> CompletionRefused:
    return CompletionRefused(404, f"Response with id '{response_id}' not found{why}.", param="previous_response_id",
                             code="response_not_found")


class ResponsesEndpoint:
    """``POST /v1/responses`` and ``GET /v1/responses/{id}`` of one :class:`OpenAIApiChannel`."""

    def __init__(self, channel: OpenAIApiChannel) -> None:
        self.channel = channel
        self.store: Any = None
        self._settling: set[asyncio.Task[dict[str, Any] | None]] = set()

    async def start(self) -> None:
        """Open the response store under the agent home (``openaiApi.responseRetentionDays``, ``responseMaxStored``)."""
        from monoagent_plugins.serving.response_store import ResponseStore, ResponseStoreError

        settings = self.channel.settings
        try:
            self.store = await asyncio.to_thread(ResponseStore, self.channel.agent.config.home,
                                                 settings.response_retention_days * 86400, settings.response_max_stored)
        except ResponseStoreError as exc:
            raise ConfigError(str(exc)) from exc

    async def shutdown(self) -> None:
        if self._settling:
            await asyncio.gather(*self._settling, return_exceptions=True)
        if self.store is not None:
            await asyncio.to_thread(self.store.close)

    async def retrieve(self, request: Request) -> Response:
        from starlette.responses import Response

        if not self.channel._authorised(request):
            return _error(401, "missing or wrong bearer token (Authorization: Bearer <token>)", "authentication_error")
        if self.store is None:
            return _error(503, "the openai-api channel is starting; retry", "server_error", {"Retry-After": "1"})
        response_id = request.path_params["response_id"]
        stored = await asyncio.to_thread(self.store.get, response_id)
        if stored is None:
            return _error(404, f"Response with id '{response_id}' not found (never stored, stored with store: false, "
                               f"or past openaiApi.responseRetentionDays).", "invalid_request_error",
                          param="response_id", code="response_not_found")
        body = parse_json(stored.body.encode("utf-8"))
        if stored.state == "failed" and body.get("status") == "in_progress":  # its server stopped mid-turn
            body = {**body, "status": "failed", "error": {"code": "server_error",
                                                          "message": "the server stopped before the turn completed"}}
        return Response(json_bytes(body), media_type="application/json")

    async def _plan(self, asked: ResponsesRequest) -> Plan:
        """The conversation of the turn (see the module docstring); a 400/404 naming what was wrong."""
        rule = self.channel.settings.conversations
        isolated = not asked.store
        if asked.previous_response_id is not None:
            if rule == "client":
                raise CompletionRefused(400, "'previous_response_id' cannot be used: openaiApi.conversations is "
                                        "\"client\" (no server conversation is kept); send the conversation as 'input'",
                                        param="previous_response_id")
            stored = await asyncio.to_thread(self.store.get, asked.previous_response_id)
            if stored is None or (stored.conversation_id is None and stored.seed is None):
                raise not_found(asked.previous_response_id)
            if asked.named is not None and stored.conversation_id != f"{CHANNEL}:{asked.named}":
                raise not_found(asked.previous_response_id, " in the conversation X-Conversation-Id or 'user' names")
            conversation: str = stored.conversation_id or await self._adopt(stored)
            return Plan(conversation, isolated=isolated, stored_conversation=conversation)
        if asked.named is not None and rule != "client":
            conversation = f"{CHANNEL}:{asked.named}"
            return Plan(conversation, isolated=isolated, stored_conversation=conversation)
        if rule == "client" or rule == "auto":  # the client carries the conversation; with store, the response keeps a seed
            return Plan(f"{CHANNEL}:{uuid.uuid4()}", history=asked.earlier, isolated=True, seeded=rule == "auto" and asked.store)
        conversation = f"{CHANNEL}:conv_{uuid.uuid4().hex}"  # "server": a new, empty conversation
        return Plan(conversation, isolated=isolated, stored_conversation=None if isolated else conversation)

    async def _adopt(self, stored: Any) -> str:
        """The conversation of a seeded response a ``previous_response_id`` continues: a new one holding its seed, made
        now (or the one a concurrent request made first); a 404 when the response went meanwhile."""
        conversation = f"{CHANNEL}:conv_{uuid.uuid4().hex}"
        await self.channel.agent.history_store.commit(conversation, decode_seed(stored.seed))
        adopted = await asyncio.to_thread(self.store.adopt, stored.id, conversation)
        if adopted is None:
            raise not_found(stored.id)
        return str(adopted)

    async def create(self, request: Request) -> Response:
        """One response. Everything that can refuse it is checked before the turn is admitted (the body, the
        conversation, the ``previous_response_id``, the ``Idempotency-Key``); after the turn commits the answer is
        built from parts that cannot fail, so a committed turn is never answered 5xx."""

        channel = self.channel
        if not channel._authorised(request):
            return _error(401, "missing or wrong bearer token (Authorization: Bearer <token>)", "authentication_error")
        try:
            raw = await channel.read_request(request)
            asked = responses_request(parse_json(raw), request.headers, channel.agent.model, channel._history_bounds())
            key = idempotency_key(request.headers)
        except RequestRefused as refused:
            return _refusal(refused)
        if self.store is None or channel.receipts is None:
            return _error(503, "the openai-api channel is starting; retry", "server_error", {"Retry-After": "1"})
        receipt: tuple[str, str, str] | None = None
        echoed = {"X-Conversation-Id": header_safe(asked.named)} if asked.named is not None else {}
        if key is not None:
            scope, request_id = channel._scope(request), uuid.uuid4().hex
            # bound to this endpoint too: the same key on chat completions is another request (422)
            digest = request_digest(b"POST /v1/responses\n" + raw, request.headers.get("x-conversation-id"))
            admission = await asyncio.to_thread(channel.receipts.admit, scope, key, digest, request_id, int(time.time()))
            if admission.outcome != "admitted":
                return channel._idempotent(key, admission, asked.stream, echoed, replayed_events)
            receipt = (scope, key, request_id)
        response_id, created_at = f"resp_{uuid.uuid4().hex}", int(time.time())
        started = response_object(response_id, created_at, channel.agent.model, asked)
        try:
            plan = await self._plan(asked)
            if asked.store or asked.previous_response_id is not None:
                await self._reserve(asked, plan, started)
        except RequestRefused as refused:
            await channel._settle(receipt, None)
            return _refusal(refused)
        except Exception as exc:  # a seeded conversation could not be written (_adopt): no turn ran
            await self._finish(asked, response_id, None, exc, started)
            await channel._settle(receipt, None)
            return channel._failed(exc)
        if plan.stored_conversation is not None and not plan.isolated:
            echoed = {"X-Conversation-Id": header_safe(plan.stored_conversation.removeprefix(f"{CHANNEL}:"))}
        turn = TurnRequest(asked.text, conversation_id=plan.conversation_id, channel=CHANNEL, delivery="request",
                           context=asked.context, history=plan.history, isolated=plan.isolated,
                           metadata={"response_id": response_id}, client_tools=asked.tools,
                           tool_results=asked.tool_results, tool_choice=asked.tool_choice)
        run = ResponseRun(asked.stream)
        try:
            handle = channel.runs.submit(turn, on_event=run.on_event)
        except (MonoagentError, ShutdownCancelled) as exc:
            await self._finish(asked, response_id, None, exc, started)
            await channel._settle(receipt, None)
            return channel._failed(exc)
        logger.debug("openai-api: run {} submitted for response {} in {}", handle.run_id, response_id, turn.conversation_id)
        outcome = asyncio.ensure_future(channel.runs.finish(handle))
        settled = self._settle_when_done(asked, plan, response_id, started, run, outcome, receipt)
        return await channel.answer(outcome, settled, echoed, run if asked.stream else None,
                                    lambda: self._events(handle, run, outcome, settled, started))

    async def _reserve(self, asked: ResponsesRequest, plan: Plan, started: dict[str, Any]) -> None:
        """Keep the response ``in_progress`` (``store: true``), and check a ``previous_response_id`` is its conversation's
        latest (409 ``response_not_latest`` naming the latest otherwise)."""
        previous = asked.previous_response_id
        if asked.store:
            reservation = await asyncio.to_thread(self.store.reserve, started["id"], plan.stored_conversation, previous,
                                                  json_bytes(started).decode("utf-8"))
            latest = reservation.latest if reservation.outcome == "not_latest" else previous
        else:
            latest = await asyncio.to_thread(self.store.latest, plan.stored_conversation) if previous else None
        if previous is not None and latest != previous:
            now = f"the latest is '{latest}'" if latest is not None else "it has no response that did not fail"
            raise CompletionRefused(409, f"previous_response_id '{previous}' is not the latest response of its "
                                    f"conversation ({now}): continue from the latest, or send the "
                                    f"conversation as 'input' without previous_response_id to branch it",
                                    param="previous_response_id", code="response_not_latest")

    async def _finish(self, asked: ResponsesRequest, response_id: str, result: Any, exc: BaseException | None,
                      started: dict[str, Any], committed: int | None = None, plan: Plan | None = None) -> dict[str, Any]:
        """The final ``response`` object of a run (completed, or failed with ``exc``), recorded when ``store`` is true.

        A record that cannot be written is logged, never answered as an error: the turn committed.
        """
        if result is not None:
            done = response_object(response_id, started["created_at"], result.model, asked, status="completed",
                                   text=result.text, calls=result.pending_tool_calls, usage=result.usage)
        else:
            _, message, _ = run_failure(exc) if exc is not None else (500, "the turn failed", "")
            done = {**started, "status": "failed", "error": {
                "code": "server_error", "message": self.channel.agent.redact(message, "error")}}
        if asked.store:
            try:
                seed = encode_seed(seed_messages(asked, result)) if plan is not None and plan.seeded and result is not None else None
                await asyncio.to_thread(self.store.finish, response_id, done["status"], json_bytes(done).decode("utf-8"),
                                        committed, seed)
            except Exception as error:
                logger.error("openai-api: response {} could not be recorded: {}", response_id, error)
        return done

    def _settle_when_done(self, asked: ResponsesRequest, plan: Plan, response_id: str, started: dict[str, Any], run: ResponseRun,
                          outcome: asyncio.Future[Any], receipt: tuple[str, str, str] | None) -> asyncio.Task[dict[str, Any] | None]:
        """The completed ``response`` object once the run completed (None when it did not), stored and recorded in the
        receipts; a task kept until done, whoever still listens."""
        async def settle() -> dict[str, Any] | None:
            try:
                result = await asyncio.shield(outcome)
            except BaseException as exc:  # failed, cancelled: no completed turn, so a retry runs it
                failed = exc if isinstance(exc, Exception) else None
                await self._finish(asked, response_id, None, failed, started)
                await self.channel._settle(receipt, None)
                return None
            done = await self._finish(asked, response_id, result, None, started, run.committed_messages, plan)
            await self.channel._settle(receipt, done, result.run_id)
            return done

        task = asyncio.ensure_future(settle())
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)
        return task

    async def _events(self, handle: Any, run: ResponseRun, outcome: asyncio.Future[Any],
                      settled: asyncio.Task[dict[str, Any] | None], started: dict[str, Any]) -> AsyncIterator[bytes]:
        """The SSE body of a streamed response (see the module docstring). A client that goes away cancels the run."""
        from monoagent_plugins.serving.openai_api import CLIENT_GONE

        events = EventSequence()
        item_id = message_item(started["id"], None)["id"]
        try:
            for event in events.opening(started):
                yield event
            while (text := await run.texts.get()) is not None:
                yield events.delta(item_id, text)
            done = await asyncio.shield(settled)
            if done is None:
                exc = outcome.exception() if not outcome.cancelled() else None
                _, message, _ = self.channel._failure(exc) if exc is not None else (0, "the turn was cancelled", "")
                failed = {**started, "status": "failed", "error": {"code": "server_error", "message": message}}
                yield events("response.failed", response=failed)
                return
            for event in events.closing(done):
                yield event
        finally:
            if not outcome.done():
                logger.info("openai-api: the client of run {} went away; cancelling it", handle.run_id)
                handle.cancel(CLIENT_GONE)
                outcome.cancel()
