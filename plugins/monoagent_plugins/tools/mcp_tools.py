"""What an MCP server tells the agent, made safe: tool specs from its listing, tool results from its answers.

An MCP server is untrusted: its tool names, descriptions, input schemas and results are text and
data someone else wrote. :func:`tool_spec` turns one listed tool into a
:class:`~monoagent._kernel.model.ToolSpec` or says why it is skipped: the name offered is the
namespaced ``<server>__<tool>`` when that satisfies the providers' tool-name rule
(:data:`WIRE_TOOL_NAME`), else a valid, stable name made from it (:func:`offered_name`); the description
is capped at :data:`DESCRIPTION_MAX_CHARS` with host fence tokens neutralised, and the input schema
must be a JSON object schema of at most :data:`SCHEMA_MAX_BYTES` and :data:`SCHEMA_MAX_DEPTH`
levels. :func:`tool_result` maps a ``CallToolResult``'s content to a
:class:`~monoagent._kernel.model.ToolResult`: text stays text, images, audio and binary resources
become blocks (which the tool-output bloat guard measures), ``isError`` an ``error`` result.

This module does not import the MCP SDK: it reads the SDK's objects by attribute, so it is
importable (and its rules testable) without the ``mcp`` extra.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from typing import Any

from monoagent import (
    TOOL_NAME_PATTERN,
    BinaryBlock,
    ContentBlock,
    ImageBlock,
    TextBlock,
    ToolContext,
    ToolResult,
    ToolSpec,
    ToolStatus,
    neutralise_untrusted,
    quote_inline,
)

SEPARATOR = "__"
"""Between the server's name and its tool's name: ``files__read``."""

WIRE_TOOL_NAME = TOOL_NAME_PATTERN
"""The tool names every provider accepts (Anthropic and OpenAI: ``^[a-zA-Z0-9_-]{1,64}$``), the kernel's rule."""

NAME_MAX_CHARS = 64
"""The longest tool name a provider accepts."""

NAME_HASH_CHARS = 8
"""Hex digits of the SHA-256 of the server's and the tool's own names that end a name made valid."""

_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_-]")

DESCRIPTION_MAX_CHARS = 1024
"""Characters of a server's tool description the model is shown; the rest is cut with a marker."""

SCHEMA_MAX_BYTES = 65_536
"""Bytes of a tool's input schema (as compact JSON); a larger one is refused, the tool skipped."""

SCHEMA_MAX_DEPTH = 32
"""Nesting of objects and arrays in a tool's input schema; a deeper one is refused, the tool skipped."""


class SkippedTool(Exception):
    """A listed tool that is not offered to the model; the message says which and why."""


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of ``value``, counting no further than ``limit + 1`` (a hostile schema may be very deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level > limit:
                return level
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def _schema(server: str, tool: str, schema: Any) -> dict[str, Any]:
    where = f"MCP server {server!r} tool {tool!r}"
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise SkippedTool(f"{where}: its input schema is not a JSON object schema ({type(schema).__name__} {str(schema)[:60]!r})")
    depth = _depth(schema, SCHEMA_MAX_DEPTH)
    if depth > SCHEMA_MAX_DEPTH:
        raise SkippedTool(f"{where}: its input schema nests more than {SCHEMA_MAX_DEPTH} levels")
    try:
        size = len(json.dumps(schema, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode())
    except (TypeError, ValueError) as exc:
        raise SkippedTool(f"{where}: its input schema is not JSON ({exc})") from None
    if size > SCHEMA_MAX_BYTES:
        raise SkippedTool(f"{where}: its input schema is {size:,} bytes, over the {SCHEMA_MAX_BYTES:,}-byte limit")
    return {**schema, "type": "object"}


def _description(text: str | None) -> str:
    text = " ".join((text or "").split())
    if len(text) > DESCRIPTION_MAX_CHARS:
        text = text[: DESCRIPTION_MAX_CHARS - 1] + "…"
    return neutralise_untrusted(text)


def offered_name(server: str, tool: str) -> str:
    """The name ``server``'s tool ``tool`` is offered under: ``<server>__<tool>`` when that satisfies
    the providers' rule (:data:`WIRE_TOOL_NAME`), else a valid name made from it.

    The name made valid is ``<server>__<tool's name with every other character as '_', cut to fit>_<hash>``,
    where the hash is the first :data:`NAME_HASH_CHARS` hex digits of the SHA-256 of the server's
    and the tool's own names, so it is stable (the same tool has the same name on every turn and in
    every process), at most :data:`NAME_MAX_CHARS` characters, and distinct for two tools that read
    alike once cut or made valid. The call still reaches the server under the tool's own name.
    Raises :class:`SkippedTool` when not even that is valid (a server name outside its rule).
    """
    combined = f"{server}{SEPARATOR}{tool}"
    if WIRE_TOOL_NAME.fullmatch(combined):
        return combined
    digest = hashlib.sha256(f"{server}\0{tool}".encode("utf-8", "surrogatepass")).hexdigest()[:NAME_HASH_CHARS]
    room = NAME_MAX_CHARS - len(server) - len(SEPARATOR) - 1 - NAME_HASH_CHARS
    made = f"{server}{SEPARATOR}{_NOT_IN_A_NAME.sub('_', tool)[:max(room, 0)]}_{digest}"
    if not WIRE_TOOL_NAME.fullmatch(made):
        raise SkippedTool(f"MCP server {server!r} tool {tool[:80]!r}: no name of {NAME_MAX_CHARS} letters, digits, '_' or '-' "
                          f"can be made for it (the providers' tool-name rule)")
    return made


def tool_spec(server: str, listed: Any) -> ToolSpec:
    """The model-visible spec of ``listed`` (an MCP ``Tool``) of ``server``; :class:`SkippedTool` says why not.

    Its name is :func:`offered_name`'s; its tool domain is ``mcp:<server>`` (``tools.visible``
    shows ``mcp:*`` by default); it declares no action category, so a restricted permission
    profile treats it as ``external``.
    """
    name = listed.name if isinstance(listed.name, str) else repr(listed.name)
    offered = offered_name(server, name)
    return ToolSpec(offered, _description(listed.description), _schema(server, name, listed.input_schema), domain=f"mcp:{server}")


def _decoded(data: Any) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True) if isinstance(data, str) else None
    except (binascii.Error, ValueError):
        return None


def _block(item: Any) -> tuple[str, ContentBlock | None]:
    """One content item as (its text form, its block); an item with no text form says what it was."""
    kind = getattr(item, "type", None)
    if kind == "text":
        return item.text, TextBlock(item.text)
    if kind in ("image", "audio"):
        data = _decoded(item.data)
        media = quote_inline(str(getattr(item, "mime_type", "") or "application/octet-stream"), 100)
        if data is None:
            return f"[{kind} of type {media}: its base64 data is invalid, omitted]", None
        block: ContentBlock = ImageBlock(data, media) if kind == "image" else BinaryBlock(data, media)
        return f"[{kind} of type {media}, {len(data):,} bytes]", block
    if kind == "resource":
        resource = item.resource
        uri = quote_inline(str(getattr(resource, "uri", "")), 200)
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return f"[resource {uri}]\n{text}", TextBlock(text)
        data = _decoded(getattr(resource, "blob", None))
        media = quote_inline(str(getattr(resource, "mime_type", None) or "application/octet-stream"), 100)
        if data is None:
            return f"[resource {uri} of type {media}: its base64 data is invalid, omitted]", None
        return f"[resource {uri} of type {media}, {len(data):,} bytes]", BinaryBlock(data, media, name=uri or None)
    if kind == "resource_link":
        return f"[resource link {quote_inline(str(item.uri), 200)}]", None
    return f"[content of type {quote_inline(str(kind), 40)!r}, not shown]", None


def tool_result(context: ToolContext, answer: Any) -> ToolResult:
    """``answer`` (an MCP ``CallToolResult``) as the result of ``context``'s call.

    The text form joins the items' texts (a non-text item reads as a one-line description). The
    blocks are kept only when some item is not text, so a text answer is an ordinary result; a
    structured result without content reads as its JSON.
    """
    texts: list[str] = []
    blocks: list[ContentBlock] = []
    for item in answer.content or ():
        text, block = _block(item)
        texts.append(text)
        if block is not None:
            blocks.append(block)
    if not texts and answer.structured_content is not None:
        texts.append(json.dumps(answer.structured_content, ensure_ascii=False, default=str))
    status = ToolStatus.ERROR if answer.is_error else ToolStatus.SUCCESS
    content = "\n".join(texts) or ("The tool reported an error without a message." if answer.is_error else "")
    keep = tuple(blocks) if any(not isinstance(b, TextBlock) for b in blocks) else ()
    return ToolResult(context.call.id, context.call.name, content, status, keep)
