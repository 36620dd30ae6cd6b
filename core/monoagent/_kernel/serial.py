"""cattrs at the text boundaries of the data model: events, records, JSON output."""

from __future__ import annotations

import base64
import functools
import json
from typing import Any, TypeVar

import cattrs

T = TypeVar("T")

converter = cattrs.Converter()
# Raw bytes (image and binary tool-result blocks) become base64 text at JSON boundaries.
converter.register_unstructure_hook(bytes, lambda data: base64.b64encode(data).decode("ascii"))
converter.register_structure_hook(bytes, lambda value, _: base64.b64decode(value) if isinstance(value, str) else bytes(value))


def _message_hook() -> Any:
    """Messages serialise as before unless they carry a continuity envelope, an error flag, reasoning or attachments (records stay byte-identical)."""
    from cattrs.gen import make_dict_unstructure_fn, override

    from monoagent._kernel.model import Message

    omit = override(omit_if_default=True)
    return Message, make_dict_unstructure_fn(Message, converter, continuity=omit, is_error=omit, reasoning=omit, attachments=omit)


converter.register_unstructure_hook(*_message_hook())


@functools.cache
def wire_converter() -> cattrs.Converter:
    """The converter of provider request bodies (attrs classes of a wire format): a field left at
    its default is not sent. Built on first use and shared by every wire module."""
    return cattrs.Converter(omit_if_default=True)


def unstructure(value: Any) -> Any:
    """A JSON-ready view of an attrs value (tuples become lists, enums their values)."""
    return converter.unstructure(value)


def structure(data: Any, cls: type[T]) -> T:
    return converter.structure(data, cls)


def dumps(value: Any) -> str:
    """Compact JSON of an attrs value or of JSON-ready data."""
    return json.dumps(unstructure(value), ensure_ascii=False, separators=(",", ":"), default=str)
