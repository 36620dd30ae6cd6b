"""The ``files`` history store's record format: names, versions, errors and (de)serialisation.

A record is one owner-only JSON file per exact conversation id (the layout and the rules are in
:mod:`monoagent_plugins.history.files`), named by :func:`record_name`, read by :func:`decode_record`
(strictly: no coercion between JSON types, finite numbers, the right conversation) and written
from messages serialised once (:func:`serialise_message`, :func:`cap_message`) and spliced into
the envelope; :func:`split_messages` recovers those serialisations from a record this writer wrote.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from monoagent import (
    HistoryStoreError,
    Message,
    ProviderSessionState,
    StrictJSONError,
    logical_conversation_id,
    utf8_prefix,
)
from monoagent import strict_json_loads as strict_loads

if TYPE_CHECKING:
    import cattrs

RECORD_VERSION = 2
SUPPORTED_VERSIONS = (1, 2)
SHARDS = 16
SUFFIX = ".json"
STAGE_SUFFIX = ".stage"
RESET_PREFIX = ".reset."
UNREADABLE = "history_record_unreadable"
MiB = 1024 * 1024
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

RECORD_NAME = re.compile(r"[0-9a-f]{16}\.[0-9a-f]{64}\.json")
JOURNAL_NAME = re.compile(r"\.reset\.[0-9a-f]{16}")
STAGE_NAME = re.compile(r"[0-9a-f]{64}\.[0-9a-f]{12}\.stage")
MAX_DEPTH = 128
"""How deep a record's arrays and objects may nest (the envelope and message list take two levels)."""
DOCUMENTED_MAX_MESSAGES = 64
DOCUMENTED_MESSAGE_BYTES = 64 * 1024
FRAMING_BYTES = MiB
"""The envelope allowance of :meth:`~monoagent_plugins.history.files.FilesHistoryStore.record_cap` when the conversation id is not known."""
LATEST_UPDATE = 253402300800.0
EPOCH_SHAPE = re.compile(r"[0-9a-f]{32}")
"""A provider-session epoch: ``secrets.token_hex(16)``."""
"""``updatedAt`` must be before 10000-01-01 (UTC) so that every listing can print it."""


class HistoryRecordError(HistoryStoreError):
    """A history record or directory is unsafe (symlink, foreign owner, loose mode) or of a newer version."""


class HistoryWriteError(HistoryStoreError):
    """A turn could not be published; the previously committed record is intact."""


class HistoryStageQuotaError(HistoryWriteError):
    """Live unpublished stages already fill ``history.maxStageBytes``."""


class NewerRecordError(HistoryRecordError):
    """A record was written by a newer version of the store; this one neither reads nor replaces it."""


class UnreadableRecord(ValueError):
    """Why some bytes are not a record this store can read (the conversation starts cold)."""


@attrs.define
class ProviderSessionRecord:
    """The on-disk shape of a record's provider session (:class:`~monoagent._kernel.stores.ProviderSessionState`)."""

    epoch: str
    revision: int
    model: str | None = None

    def state(self) -> ProviderSessionState:
        return ProviderSessionState(self.epoch, self.revision, self.model)


@attrs.define
class HistoryRecord:
    """The on-disk shape (cattrs structures it; the message list is spliced for speed, see ``_record_bytes``).

    ``providerSession`` is absent from records committed without one (and from every record
    written before it existed); a store without it reads such a record and ignores the key.
    """

    version: int
    conversationId: str
    updatedAt: float
    messages: list[Message]
    logicalConversationId: str | None = None
    providerSession: ProviderSessionRecord | None = None


@attrs.define
class ResetJournal:
    """The on-disk shape of a logical-session reset in progress."""

    logicalConversationId: str


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def record_name(conversation_id: str) -> str:
    """The record's file name: ``<logical digest[:16]>.<sha256(id)>.json``."""
    return f"{digest(logical_conversation_id(conversation_id))[:16]}.{digest(conversation_id)}{SUFFIX}"


def shard_of(logical_digest16: str) -> int:
    return int(logical_digest16[:8], 16) % SHARDS


def short_id(conversation_id: str) -> str:
    text = repr(conversation_id)
    return text if len(text) <= 80 else text[:77] + "..."


def compact_json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def _shape_problems(error: Exception) -> str:
    """What cattrs found wrong, as ``problem @ field path`` (at most three), instead of its summary line."""
    from cattrs import transform_error

    try:
        problems = transform_error(error, path="")
    except Exception:  # not a cattrs validation error: its own message is all there is
        return str(error)
    problems = [one_line(p.replace("@ .", "@ ", 1), 160) for p in problems]
    return "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")


def one_line(text: str, limit: int = 300) -> str:
    """``text`` with control characters escaped and cut to ``limit`` characters, for a one-line report."""
    flat = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: limit + 1])
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _converter() -> cattrs.Converter:
    from monoagent import converter

    return converter


def _exactly(kind: type) -> Callable[[Any, Any], Any]:
    def structure(value: Any, _: Any) -> Any:
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}, not {type(value).__name__}")
        return value

    return structure


def _finite_number(value: Any, _: Any) -> float:
    if type(value) not in (int, float):
        raise TypeError(f"expected a number, not {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError("expected a finite number")
    return number


def _json_array(kind: Any, converter: Any) -> Callable[[Any, Any], Any]:
    """The structure hook of a list or tuple type: :func:`_array_of` over cattrs' own for that type."""
    from cattrs.cols import homogenous_tuple_structure_factory, list_structure_factory

    origin = getattr(kind, "__origin__", kind)
    return functools.partial(_array_of, (homogenous_tuple_structure_factory if origin is tuple else list_structure_factory)(kind, converter))


def _array_of(items: Callable[[Any, Any], Any], value: Any, target: Any) -> Any:
    """A JSON array only, structured by ``items``.

    cattrs builds a sequence from any iterable, so without this an empty object (``{}``) or an
    empty string became an empty message list or no tool calls, and a damaged record read as an
    empty conversation without a warning.
    """
    if type(value) is not list:
        raise TypeError(f"expected a JSON array, not {type(value).__name__}")
    return items(value, target)


@functools.cache
def record_converter() -> cattrs.Converter:
    """The project's converter made strict for records: no coercion between JSON types
    (``12345`` is not a string, ``"1"`` not a number, ``true`` not an int) and finite numbers
    only. A key it does not know is ignored, as before: a newer version may add an optional
    field without a new record version (the continuity envelope did), and a downgrade must not
    turn such a record into a cold start that the next commit would make a loss. A list or a
    tuple takes a JSON array only (:func:`_array_of`).
    """
    strict = _converter().copy()
    for kind in (str, int, bool):
        strict.register_structure_hook(kind, _exactly(kind))
    strict.register_structure_hook(float, _finite_number)
    from cattrs.cols import is_sequence

    strict.register_structure_hook_factory(is_sequence, _json_array)
    return strict


def decode_record(data: bytes, name: str) -> tuple[HistoryRecord, str, dict[str, Any]]:
    """The record in ``data``, read from the file ``name``, with its text and raw JSON.

    Raises :class:`UnreadableRecord` when the bytes are not a record of the conversation the
    file name is derived from, :class:`NewerRecordError` for a record of a newer version.
    """
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise UnreadableRecord(f"it is not UTF-8 (byte {exc.start})") from None
    try:
        raw = strict_loads(text, max_depth=MAX_DEPTH)
    except StrictJSONError as exc:
        raise UnreadableRecord(str(exc)) from None
    if not isinstance(raw, dict):
        raise UnreadableRecord(f"it holds a JSON {type(raw).__name__}, not a record object")
    version = raw.get("version")
    supported = f"{SUPPORTED_VERSIONS[0]}-{SUPPORTED_VERSIONS[-1]}"
    if type(version) is int and version > RECORD_VERSION:
        raise NewerRecordError(
            f"history record {name} was written by a newer version of monoagent (record version "
            f"{one_line(str(version), 40)}; this one reads versions {supported}); it is neither read nor replaced: "
            f"upgrade monoagent, or discard it with `monoagent history reset CONVERSATION`"
        )
    if type(version) is not int or version not in SUPPORTED_VERSIONS:
        raise UnreadableRecord(f"its version {one_line(repr(version), 40)} is not one this store writes ({supported})")
    try:
        record = record_converter().structure(raw, HistoryRecord)
    except Exception as exc:  # cattrs raises a family of errors; each means "not the record shape"
        raise UnreadableRecord(f"it is not of the record shape: {_shape_problems(exc)}") from None
    if digest(record.conversationId) != name[17 : -len(SUFFIX)]:
        raise UnreadableRecord("it names another conversation than the one its file name is derived from")
    if record.logicalConversationId not in (None, logical_conversation_id(record.conversationId)):
        raise UnreadableRecord("its logicalConversationId is not the logical session of its conversationId")
    if not 0 <= record.updatedAt < LATEST_UPDATE:
        raise UnreadableRecord(f"its updatedAt {record.updatedAt!r} is not a time")
    session = record.providerSession
    if session is not None and (not EPOCH_SHAPE.fullmatch(session.epoch) or not 0 <= session.revision < 2**53):
        raise UnreadableRecord("its providerSession is not an epoch of 32 hex digits with a revision from 0 to 2**53")
    return record, text, raw


def envelope_bytes(conversation_id: Any, logical: Any, updated_at: Any, version: Any = RECORD_VERSION,
                   provider_session: Any = None) -> bytes:
    """The record up to and including the opening bracket of its message array, as this writer writes it.

    ``provider_session`` is the unstructured ``providerSession`` (omitted when None).
    """
    envelope: dict[str, Any] = {"version": version, "conversationId": conversation_id, "logicalConversationId": logical,
                                "updatedAt": updated_at}
    if provider_session is not None:
        envelope["providerSession"] = provider_session
    envelope["messages"] = []
    return compact_json(envelope)[:-2]


def provider_session_json(state: ProviderSessionState | None) -> dict[str, Any] | None:
    """``state`` as the record's ``providerSession`` object (None stays None)."""
    if state is None:
        return None
    return {"epoch": state.epoch, "revision": state.revision, "model": state.model}


def serialise_message(message: Message) -> bytes:
    return compact_json(_converter().unstructure(message))


def truncation_marker(original_bytes: int, cap: int) -> str:
    return f"\n[message truncated to fit the {cap}-byte history cap; original content {original_bytes} bytes]"


def cap_message(message: Message, cap: int) -> tuple[Message, bytes]:
    """``message`` and its serialisation, cut so that the serialisation is at most ``cap`` bytes.

    Within the cap the message is unchanged. Over it, the content keeps its longest prefix of
    whole code points that fits together with :func:`truncation_marker` (which states the
    original byte count of the content), found by bisection on the serialised size, so JSON
    escaping is accounted for exactly. Lone surrogates become ``?`` first, so the result is valid
    UTF-8. Should the other fields alone not fit, they are cut to 256 bytes each and tool calls
    and artifact references are dropped.
    """
    data = serialise_message(message)
    if len(data) <= cap:
        return message, data
    content = message.content.encode("utf-8", "replace").decode("utf-8")
    marker = truncation_marker(len(content.encode("utf-8")), cap)
    base = attrs.evolve(message, content=marker)
    if len(serialise_message(base)) > cap:
        base = attrs.evolve(
            base,
            name=utf8_prefix(message.name, 256).text if message.name else message.name,
            tool_call_id=utf8_prefix(message.tool_call_id, 256).text if message.tool_call_id else message.tool_call_id,
            tool_calls=(),
            attachments=(),
        )
    budget = cap - len(serialise_message(base))
    if budget < 0:
        raise HistoryWriteError(f"a message cannot be reduced to the {cap}-byte history cap (history.maxMessageBytes)")
    low, high = 0, min(len(content), budget)
    best = serialise_message(base)
    while low < high:
        middle = (low + high + 1) // 2
        candidate = serialise_message(attrs.evolve(base, content=content[:middle] + marker))
        if len(candidate) <= cap:
            low, best = middle, candidate
        else:
            high = middle - 1
    if low == 0:
        return base, best
    final = attrs.evolve(base, content=content[:low] + marker)
    return final, best


_DECODER = json.JSONDecoder()


def split_messages(text: str, raw: dict[str, Any]) -> tuple[bytes, ...] | None:
    """The exact serialised bytes of each message of a record this writer wrote, else None.

    A record in this store's own layout is the envelope followed by the message array; the
    decoder's end positions cut that array into its elements, so a commit after a cache miss
    (another process wrote last, or a cold start) reuses the bytes instead of re-serialising.
    """
    try:
        envelope = envelope_bytes(raw.get("conversationId"), raw.get("logicalConversationId"), raw.get("updatedAt"),
                                  raw.get("version"), raw.get("providerSession")).decode("utf-8", "surrogatepass")
    except (TypeError, ValueError):
        return None
    if not text.startswith(envelope):
        return None
    pos, fragments = len(envelope), []
    try:
        if text[pos] != "]":
            while True:
                _, end = _DECODER.raw_decode(text, pos)
                fragments.append(text[pos:end].encode("utf-8", "surrogatepass"))
                if text[end] == "]":
                    pos = end
                    break
                if text[end] != ",":
                    return None
                pos = end + 1
    except (ValueError, IndexError):  # whitespace or anything else this writer never writes: re-serialise
        return None
    return tuple(fragments) if text[pos:] == "]}" else None


@attrs.frozen
class CachedRecord:
    """A parsed record, valid while the file keeps this stat identity."""

    key: tuple[int, ...]
    messages: tuple[Message, ...]
    fragments: tuple[bytes, ...] | None
    size: int
    provider_session: ProviderSessionState | None = None


@attrs.frozen
class Unreadable:
    """A record that cannot be read, and why (one line)."""

    reason: str


def stat_key(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
