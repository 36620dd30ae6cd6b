"""What the ``openai-api`` channel takes from a ``POST /v1/chat/completions`` body (see :mod:`monoagent_plugins.serving.openai_api`).

The turn's text (the trailing user message), its context (``system`` and ``developer``
messages), the conversation it names (``X-Conversation-Id`` or ``user``), and, when the
conversation is the client's (``openaiApi.conversations``), the history the request carries,
bounded as stored history is. Everything here refuses bad input with a :class:`CompletionRefused`
in OpenAI's error shape, before any turn is admitted.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Literal

import attrs

from monoagent import (
    TOOL_CHOICES,
    TOOL_NAME_PATTERN,
    Message,
    ToolCall,
    ToolResult,
    ToolSpec,
    ToolStatus,
    paired_tool_messages,
)
from monoagent_plugins.serving.http import RequestRefused, header_text, parse_json

CHANNEL = "openai-api"

MAX_CONVERSATION_ID_CHARS = 256
"""The longest conversation id a client may name (``X-Conversation-Id`` or ``user``)."""

LEGACY_TOOL_FIELDS = ("functions", "function_call")
"""The deprecated function-calling fields: refused, naming ``tools`` and ``tool_choice``, which replace them."""

MAX_CLIENT_TOOLS = 128
"""The most client-side tools one request may offer (OpenAI's own limit)."""

class CompletionRefused(RequestRefused):
    """A refused request, with OpenAI's ``param`` (the field at fault) and ``code`` (``model_not_found``)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", *,
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(status, message, kind)
        self.param = param
        self.code = code


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
    client_tools: tuple[ToolSpec, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    """The trailing ``tool`` messages: results of the client's tools that continue the open turn (``text`` is "")."""
    tool_choice: str | None = None


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
    messages = _messages(body)
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        raise RequestRefused(400, "the last entry of 'messages' must have role 'user' (it is the turn), or be the "
                             "'tool' results of the assistant's tool calls")
    content = _text_content(last.get("content"), len(messages) - 1)
    if not isinstance(content, str) or not content.strip():
        raise RequestRefused(400, "the last message's 'content' must be non-empty text")
    return content


def _messages(body: Any) -> list[Any]:
    if not isinstance(body, dict):
        raise RequestRefused(400, "request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestRefused(400, "'messages' must be a non-empty array")
    return messages


def trailing_tool_results(messages: list[Any]) -> tuple[ToolResult, ...]:
    """The ``tool`` messages that end ``messages`` (the client's results of its tools' calls), oldest first.

    Each needs a ``tool_call_id`` and text content; its name is the call's, from the assistant
    message that made it (the run binds each result to its call either way).
    """
    start = len(messages)
    while start > 0 and isinstance(messages[start - 1], dict) and messages[start - 1].get("role") == "tool":
        start -= 1
    names = {}
    if start > 0 and isinstance(messages[start - 1], dict):
        for call in messages[start - 1].get("tool_calls") or ():
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                names[call.get("id")] = call["function"].get("name")
    results: list[ToolResult] = []
    for index in range(start, len(messages)):
        message = messages[index]
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise CompletionRefused(400, f"messages[{index}].tool_call_id must name the tool call this result answers",
                                    param="messages")
        text = _text_content(message.get("content"), index)
        if text is None:
            raise CompletionRefused(400, f"messages[{index}].content must be text (a string, or text parts)", param="messages")
        if any(result.call_id == call_id for result in results):
            raise CompletionRefused(400, f"messages[{index}] answers tool call {call_id!r} a second time", param="messages")
        name = names.get(call_id)
        results.append(ToolResult(call_id, name if isinstance(name, str) else "", text, ToolStatus.SUCCESS))
    return tuple(results)


def client_tools(body: dict[str, Any]) -> tuple[ToolSpec, ...]:
    """The request's ``tools`` (``{"type": "function", "function": {"name", "description", "parameters"}}``) as
    tool specs; a 400 naming the entry for anything else."""
    tools = body.get("tools")
    if tools is None:
        return ()
    if not isinstance(tools, list) or len(tools) > MAX_CLIENT_TOOLS:
        raise CompletionRefused(400, f"'tools' must be an array of at most {MAX_CLIENT_TOOLS} function tools", param="tools")
    specs: list[ToolSpec] = []
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(function, dict):
            raise CompletionRefused(400, f"tools[{index}] must be {{'type': 'function', 'function': {{'name': ..., "
                                    f"'description': ..., 'parameters': {{...}}}}}}: only function tools are supported",
                                    param="tools")
        spec = function_spec(function, f"tools[{index}].function")
        if any(other.name == spec.name for other in specs):
            raise CompletionRefused(400, f"tools[{index}] repeats the name {spec.name!r}: each tool needs its own", param="tools")
        specs.append(spec)
    return tuple(specs)


def function_spec(function: dict[str, Any], where: str) -> ToolSpec:
    """A client's function definition (``name``, ``description``, ``parameters``) as a tool spec; a 400 naming
    ``where`` when it is not one (the name follows the providers' rule, the parameters are a JSON Schema object)."""
    name, description = function.get("name"), function.get("description", "")
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.fullmatch(name):
        raise CompletionRefused(400, f"{where}.name must be 1 to 64 ASCII letters, digits, '_' or '-' (got {name!r:.80})",
                                param="tools")
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise CompletionRefused(400, f"{where}.description must be a string", param="tools")
    parameters = function.get("parameters")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise CompletionRefused(400, f"{where}.parameters must be a JSON Schema object", param="tools")
    return ToolSpec(name, description, parameters, categories=("external",))


def tool_choice(value: Any, where: str = "tool_choice") -> str | None:
    """``tool_choice`` as the turn takes it: ``"auto"``, ``"none"``, ``"required"`` or a function's name."""
    if value is None or value in TOOL_CHOICES:
        return str(value) if value is not None else None
    function = value.get("function") if isinstance(value, dict) and value.get("type") == "function" else None
    name = function.get("name") if isinstance(function, dict) else value.get("name") if isinstance(value, dict) else None
    if isinstance(name, str) and name:
        return name
    raise CompletionRefused(400, f"'{where}' must be \"auto\", \"none\", \"required\" or "
                            f"{{'type': 'function', 'function': {{'name': ...}}}}", param=where)


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


def client_history(messages: list[Any], max_messages: int, max_message_bytes: int, *, results: int = 0) -> tuple[Message, ...]:
    """The earlier messages of a client conversation as the turn's history, bounded as stored history is.

    Only the newest ``max_messages`` history messages are kept (``history.maxMessages``), each cut to
    ``max_message_bytes`` serialised (``history.maxMessageBytes``, the store's own cap); the messages
    are read from the newest back and the walk stops once enough are kept, so a request of any number
    of earlier messages costs no more than its bound (the body itself is bounded by
    ``serve.maxBodyBytes``). Tool calls and results are then paired
    (:func:`~monoagent.paired_tool_messages`). The turn's compaction and prompt budget apply as to
    stored history. With ``results`` (a continuation: the last ``results`` messages are the
    client's ``tool`` results, :func:`trailing_tool_results`), the history ends with the open
    assistant step those results answer, its calls kept.
    """
    from monoagent_plugins.history.records import cap_message

    kept: list[Message] = []
    last = len(messages) - 1 - results if results else len(messages) - 2
    for index in range(last, -1, -1):
        if len(kept) >= max_messages:
            break
        message = _history_message(messages[index], index)
        if message is not None:
            kept.append(cap_message(message, max_message_bytes)[0])
    kept.reverse()
    answers = [Message("tool", "", tool_call_id=m.get("tool_call_id")) for m in messages[len(messages) - results :]] if results else []
    return tuple(m for m in paired_tool_messages([*kept, *answers]) if all(m is not answer for answer in answers))


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


def checked_model(asked: Any, model: str) -> None:
    """A request's ``model``: absent, or the agent's own model id; another one is 404 ``model_not_found``."""
    if asked is not None and not isinstance(asked, str):
        raise CompletionRefused(400, "'model' must be a string: the agent's model id from GET /v1/models", param="model")
    if asked is not None and asked != model:
        raise CompletionRefused(404, f"The model `{asked}` does not exist or you do not have access to it: this server "
                                f"serves `{model}` (GET /v1/models), or omit 'model'", param="model", code="model_not_found")


def completion_request(body: Any, headers: Mapping[str, str], model: str, rule: ConversationRule = "server",
                       bounds: tuple[int, int] = (DOCUMENTED_MAX_MESSAGES, DOCUMENTED_MAX_MESSAGE_BYTES)) -> CompletionRequest:
    """Check a chat completion body against what the channel honours; :class:`RequestRefused` naming the problem.

    Honoured: ``messages`` (the trailing user message is the turn; ``system`` and ``developer``
    messages are its context, :func:`client_context`), ``model`` (absent, or the
    agent's own model id: another one is 404 ``model_not_found``), ``stream``, the earlier
    ``user``/``assistant``/``tool`` messages when ``rule`` makes the conversation the client's
    (:func:`conversation_rule`, :func:`client_history` bounded by ``bounds``),
    ``stream_options.include_usage``, ``user``, ``n`` (1 only), the client's function ``tools``
    (:func:`client_tools`) and ``tool_choice``, and trailing ``tool`` messages, which continue the
    turn whose calls they answer (:func:`trailing_tool_results`). Refused: the deprecated
    ``functions``/``function_call`` (:data:`LEGACY_TOOL_FIELDS`) and non-text content parts. Every other field (``temperature``,
    ``max_tokens``, ``top_p``, ``stop``, ...) is accepted and ignored: the composed agent's
    configuration decides how the model is called.
    """
    messages = _messages(body)
    results = trailing_tool_results(messages)
    text = "" if results else trailing_user_text(body)
    checked_model(body.get("model"), model)
    for field in LEGACY_TOOL_FIELDS:
        if body.get(field) is not None:
            raise CompletionRefused(400, f"'{field}' (deprecated function calling) is not supported: send the functions "
                                    f"as 'tools' and 'tool_choice'", param=field)
    tools, choice = client_tools(body), tool_choice(body.get("tool_choice"))
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
        history = client_history(messages, *bounds, results=len(results))
    conversation = f"{CHANNEL}:{named if named is not None else uuid.uuid4()}"
    return CompletionRequest(text, conversation, stream, include_usage, client_context(messages[: len(messages) - len(results)]),
                             history, named is not None, tools, results, choice)
