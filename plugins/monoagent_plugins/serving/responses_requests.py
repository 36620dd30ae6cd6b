"""What the ``openai-api`` channel takes from a ``POST /v1/responses`` body (see :mod:`monoagent_plugins.serving.openai_responses`).

``input`` is a string (the turn) or a list of items: message items (``role`` ``user``,
``assistant``, ``system`` or ``developer``; ``content`` a string or ``input_text``/``output_text``
parts), ``function_call`` items (an assistant's tool call; consecutive ones join the assistant step
before them) and ``function_call_output`` items (the ``tool`` message answering a call);
``reasoning`` items are accepted and dropped. The trailing user message is the turn; the trailing
``function_call_output`` items, when the input ends with them, are a client-tool continuation
(``tool_results``). ``instructions`` and every ``system``/``developer`` item are the turn's context.
The earlier items are the turn's history when the conversation is the client's, or the seed of a
new server conversation (:mod:`~monoagent_plugins.serving.openai_responses` decides), bounded as
stored history is (``history.maxMessages``, ``history.maxMessageBytes``, then
:func:`monoagent.paired_tool_messages`). ``tools`` of ``type: "function"`` and ``tool_choice`` are parsed into
the engine's names (``ToolSpec``, a tool name or ``auto``/``none``/``required``). Everything here
refuses bad input with a :class:`~monoagent_plugins.serving.openai_requests.CompletionRefused` in
OpenAI's error shape, before any turn is admitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from monoagent import Message, ToolCall, ToolResult, ToolSpec, TurnRequest, paired_tool_messages
from monoagent_plugins.serving.http import RequestRefused, parse_json
from monoagent_plugins.serving.openai_requests import (
    DOCUMENTED_MAX_MESSAGE_BYTES,
    DOCUMENTED_MAX_MESSAGES,
    MAX_CLIENT_TOOLS,
    CompletionRefused,
    checked_model,
    function_spec,
    named_conversation,
)
from monoagent_plugins.serving.openai_requests import tool_choice as completion_tool_choice

MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
"""OpenAI's limits of a response's ``metadata``."""

MAX_RESPONSE_ID_CHARS = 128

CONTEXT_ROLES = ("system", "developer")
ITEM_ROLES = ("user", "assistant", *CONTEXT_ROLES)
TEXT_PARTS = ("input_text", "output_text", "text")
UNSUPPORTED = {
    "background": "background responses are not supported: this server answers within the request",
    "conversation": "the Conversations API is not supported: name the conversation with the X-Conversation-Id "
                    "header or continue one with 'previous_response_id'",
    "prompt": "stored prompt templates are not supported: send 'instructions' and 'input'",
}
"""Fields refused when set (a value that cannot be honoured silently)."""


@attrs.frozen
class ResponsesRequest:
    """What the channel takes from a ``POST /v1/responses`` body."""

    text: str
    """The turn: the trailing user message ("" for a client-tool continuation)."""
    context: str | None = None
    earlier: tuple[Message, ...] = ()
    """The input's earlier items as messages, bounded (history of a client conversation, or a new one's seed)."""
    named: str | None = None
    """``X-Conversation-Id``, else ``user``: the server conversation the request names, or None."""
    previous_response_id: str | None = None
    store: bool = True
    metadata: dict[str, str] = attrs.field(factory=dict)
    stream: bool = False
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str | None = None
    tool_results: tuple[ToolResult, ...] = ()
    echo: dict[str, Any] = attrs.field(factory=dict)
    """What the Response object repeats of the request (``instructions``, ``tools``, ``tool_choice``, ...)."""


def _refused(message: str, param: str) -> CompletionRefused:
    return CompletionRefused(400, message, param=param)


def item_text(content: Any, where: str) -> str:
    """An item's text: a string, or the joined ``input_text``/``output_text`` parts; a 400 naming anything else."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _refused(f"{where}.content must be a string or a list of text parts ({', '.join(TEXT_PARTS[:2])})", "input")
    texts = []
    for n, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            named = f"of type {kind!r}" if isinstance(kind, str) else "not a {'type': 'input_text', 'text': ...} object"
            raise _refused(f"{where}.content[{n}] is {named}: this server takes text only (parts of type "
                           f"'input_text' or 'output_text')", "input")
        texts.append(part["text"])
    return "".join(texts)


def _arguments(item: dict[str, Any], where: str) -> dict[str, Any]:
    raw = item.get("arguments", "{}")
    try:
        arguments = parse_json((raw or "{}").encode("utf-8")) if isinstance(raw, str) else None
    except RequestRefused:
        arguments = None
    if not isinstance(arguments, dict):
        raise _refused(f"{where}.arguments must be a JSON object as a string", "input")
    return arguments


def _output_text(output: Any, where: str) -> str:
    if isinstance(output, str):
        return output
    return item_text(output, where)


def input_messages(items: list[Any]) -> tuple[list[Message], list[str]]:
    """The items as history messages (the context items' texts apart), in order; a 400 naming a bad item.

    A ``function_call`` joins the assistant message right before it (the step's text and its
    calls), else starts one with no text; a ``function_call_output`` is a ``tool`` message naming
    its call's tool when the input holds the call.
    """
    messages: list[Message] = []
    context: list[str] = []
    names: dict[str, str] = {}
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise _refused(f"{where} must be an object (a message, function_call or function_call_output item)", "input")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ITEM_ROLES:
                raise _refused(f"{where}.role is {role!r}: allowed are {', '.join(repr(r) for r in ITEM_ROLES)}", "input")
            text = item_text(item.get("content"), where)
            if role in CONTEXT_ROLES:
                if text.strip():
                    context.append(text.strip())
                continue
            messages.append(Message(role, text))
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
                raise _refused(f"{where} is a function_call: it needs 'call_id', 'name' and 'arguments'", "input")
            call = ToolCall(call_id, name, _arguments(item, where))
            names[call_id] = name
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant":
                messages[-1] = attrs.evolve(last, tool_calls=(*last.tool_calls, call))
            else:
                messages.append(Message("assistant", "", tool_calls=(call,)))
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise _refused(f"{where} is a function_call_output: it needs the 'call_id' it answers and 'output'", "input")
            messages.append(Message("tool", _output_text(item.get("output", ""), where), tool_call_id=call_id,
                                    name=names.get(call_id)))
        elif kind == "reasoning":
            continue
        else:
            raise _refused(f"{where} is of type {kind!r}: allowed are 'message', 'function_call', "
                           f"'function_call_output' (and 'reasoning', which is dropped)", "input")
    return messages, context


def bounded(messages: list[Message], max_messages: int, max_message_bytes: int) -> tuple[Message, ...]:
    """The newest ``max_messages`` messages, each cut to ``max_message_bytes``, calls and results paired
    (:func:`monoagent.paired_tool_messages`: a provider refuses a call with no result, or a result with no call)."""
    from monoagent_plugins.history.records import cap_message

    kept = [cap_message(message, max_message_bytes)[0] for message in messages[-max_messages:]] if max_messages else []
    return paired_tool_messages(kept)


def function_tools(tools: Any) -> tuple[ToolSpec, ...]:
    """``tools`` of ``type: "function"`` (``name``, ``description``, ``parameters`` at the top level, as the Responses
    API has them) as tool specs (:func:`~monoagent_plugins.serving.openai_requests.function_spec`, as chat
    completions makes them); a 400 naming a tool of another type, a bad one, or a name given twice."""
    if tools is None:
        return ()
    if not isinstance(tools, list) or len(tools) > MAX_CLIENT_TOOLS:
        raise _refused(f"'tools' must be a list of at most {MAX_CLIENT_TOOLS} {{'type': 'function', 'name': ..., "
                       f"'parameters': {{...}}}} objects", "tools")
    specs: list[ToolSpec] = []
    for n, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise _refused(f"tools[{n}] is of type {kind!r}: only client-side tools of type 'function' are supported "
                           f"(the agent's own tools run on the server)", "tools")
        spec = function_spec(tool, f"tools[{n}]")
        if any(known.name == spec.name for known in specs):
            raise _refused(f"tools[{n}].name {spec.name!r} is given twice", "tools")
        specs.append(spec)
    return tuple(specs)


def tool_choice(value: Any) -> str | None:
    """``tool_choice`` as the turn takes it (as chat completions reads it), refused in the Responses API's own form."""
    try:
        return completion_tool_choice(value)
    except CompletionRefused:
        raise _refused("'tool_choice' must be \"auto\", \"none\", \"required\" or {'type': 'function', 'name': ...}",
                       "tool_choice") from None


def checked_metadata(metadata: Any) -> dict[str, str]:
    """``metadata`` within OpenAI's limits (16 pairs, keys up to 64 characters, string values up to 512); a 400 beyond."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise _refused("'metadata' must be an object of string keys and string values", "metadata")
    if len(metadata) > MAX_METADATA_PAIRS:
        raise _refused(f"'metadata' has {len(metadata)} pairs: at most {MAX_METADATA_PAIRS} are allowed", "metadata")
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise _refused(f"metadata key {key[:20]!r}... is {len(key)} characters: at most {MAX_METADATA_KEY_CHARS} "
                           f"are allowed", "metadata")
        if not isinstance(value, str):
            raise _refused(f"metadata[{key!r}] must be a string (got {type(value).__name__})", "metadata")
        if len(value) > MAX_METADATA_VALUE_CHARS:
            raise _refused(f"metadata[{key!r}] is {len(value)} characters: at most {MAX_METADATA_VALUE_CHARS} are "
                           f"allowed", "metadata")
    return dict(metadata)


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _refused(f"'{name}' must be true or false", name)
    return value


def _turn(messages: list[Message]) -> tuple[str, tuple[ToolResult, ...], list[Message]]:
    """The turn at the end of the input: a user message's text, or the trailing ``function_call_output`` results."""
    if messages and messages[-1].role == "user":
        if not messages[-1].content.strip():
            raise _refused("the last input item's content must be non-empty text", "input")
        return messages[-1].content, (), messages[:-1]
    trailing = 0
    while trailing < len(messages) and messages[len(messages) - 1 - trailing].role == "tool":
        trailing += 1
    if not trailing:
        raise _refused("the last item of 'input' must be a user message (the turn) or function_call_output items "
                       "(the results of the client's function calls)", "input")
    results = tuple(ToolResult(m.tool_call_id or "", m.name or "", m.content) for m in messages[-trailing:])
    for n, result in enumerate(results):
        if any(other.call_id == result.call_id for other in results[:n]):
            raise _refused(f"the function_call_output items answer call {result.call_id!r} a second time: answer each "
                           f"call once", "input")
    return "", results, messages[:-trailing]


def responses_request(body: Any, headers: Mapping[str, str], model: str,
                      bounds: tuple[int, int] = (DOCUMENTED_MAX_MESSAGES, DOCUMENTED_MAX_MESSAGE_BYTES)) -> ResponsesRequest:
    """Check a ``POST /v1/responses`` body against what the channel honours; :class:`CompletionRefused` naming the problem.

    Honoured: ``input``, ``instructions``, ``model`` (absent or the agent's model id, else 404
    ``model_not_found``), ``previous_response_id``, ``store``, ``metadata``, ``stream``, ``user``,
    ``tools`` (``function`` only) and ``tool_choice``. Refused: :data:`UNSUPPORTED`. Every other
    field (``temperature``, ``max_output_tokens``, ``top_p``, ``parallel_tool_calls``, ``reasoning``,
    ``text``, ``truncation``, ``include``, ...) is accepted and ignored: the composed agent's
    configuration decides how the model is called.
    """
    if not isinstance(body, dict):
        raise RequestRefused(400, "request body must be a JSON object")
    checked_model(body.get("model"), model)
    for field, why in UNSUPPORTED.items():
        if body.get(field) not in (None, False):
            raise _refused(f"'{field}' is not supported: {why}", field)
    raw = body.get("input")
    if isinstance(raw, str):
        if not raw.strip():
            raise _refused("'input' must be non-empty text or a list of items", "input")
        raw = [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise _refused("'input' must be a string or a non-empty list of items", "input")
    messages, context = input_messages(raw)
    text, results, earlier = _turn(messages)
    if results:  # the open step's calls stay: they are answered by the results, which are split off after the bound
        kept = list(bounded(messages, *bounds))
        while kept and kept[-1].role == "tool":
            kept.pop()
        history = tuple(kept)
    else:
        history = bounded(earlier, *bounds)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _refused("'instructions' must be a string", "instructions")
    if instructions and instructions.strip():
        context.insert(0, instructions.strip())
    previous = body.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not 0 < len(previous) <= MAX_RESPONSE_ID_CHARS):
        raise _refused(f"'previous_response_id' must be a response id (1 to {MAX_RESPONSE_ID_CHARS} characters)",
                       "previous_response_id")
    tools = function_tools(body.get("tools"))
    choice = tool_choice(body.get("tool_choice"))
    echo = {"instructions": instructions, "tools": body.get("tools") or [],
            "tool_choice": body.get("tool_choice") or "auto", "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "user": body.get("user")}
    try:  # the turn's own word on what the parser let through (never a 500 for a bad request)
        TurnRequest(text, client_tools=tools, tool_results=results, tool_choice=choice)
    except (TypeError, ValueError) as exc:
        raise CompletionRefused(400, str(exc)) from None
    return ResponsesRequest(
        text, "\n\n".join(context) or None, history, named_conversation(headers, body), previous,
        _flag(body, "store", True), checked_metadata(body.get("metadata")), _flag(body, "stream", False), tools, choice,
        results, echo)
