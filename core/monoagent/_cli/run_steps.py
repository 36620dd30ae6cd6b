"""The provider steps of one turn, for ``monoagent run --json`` (its ``provider_steps`` list).

A :class:`~monoagent._kernel.model.TurnResult` holds the answer (the last step's text), the step
count and every tool call with its result, but not which step said what. :class:`StepRecorder`
listens to the run's events (``provider_request``, ``text_delta``, ``provider_response``,
``tool_call``, ``tool_result``, ``provider_attempt_discarded``) and, with the result's tool
activity for the full arguments, gives one :class:`ProviderStep` per step the provider was asked
for, in order, discarded attempts included and marked. Nothing is stored; the records become
JSON through cattrs like the result.
"""

from __future__ import annotations

import io
from typing import Any

import attrs

from monoagent._kernel.model import RunEvent, Usage
from monoagent._kernel.turn_request import TurnResult


@attrs.define
class StepToolCall:
    """One tool call a step requested: its arguments (the model's, in full) and how its result came back.

    ``status``, ``is_error`` and ``result_bytes`` are None for a call that never finished.
    """

    id: str
    name: str
    arguments: dict[str, Any] = attrs.Factory(dict)
    status: str | None = None
    is_error: bool | None = None
    result_bytes: int | None = None


@attrs.define
class ProviderStep:
    """One provider step: the text it streamed, the tool calls it requested, its usage.

    ``step`` counts the run's provider steps (as in the events); ``attempt`` is the provider
    attempt (1 is the primary's first); ``discarded`` marks the steps of an attempt whose
    output was dropped for a retry or a fallback. ``usage`` and ``stop_reason`` are None when
    the step never finished.
    """

    step: int
    attempt: int
    model: str
    text: str = ""
    tool_calls: list[StepToolCall] = attrs.Factory(list)
    stop_reason: str | None = None
    usage: Usage | None = None
    discarded: bool = False


class StepRecorder:
    """An ``on_event`` callback that records the provider steps of one turn (see the module docstring)."""

    def __init__(self) -> None:
        self._steps: dict[tuple[int, int], ProviderStep] = {}
        self._texts: dict[tuple[int, int], io.StringIO] = {}
        self._calls: dict[str, StepToolCall] = {}
        self._current: ProviderStep | None = None

    def __call__(self, event: RunEvent) -> None:
        data = event.data
        kind = event.type
        if kind == "provider_request":
            key = (data["attempt"], data["step"])
            self._current = self._steps[key] = ProviderStep(data["step"], data["attempt"], data["model"])
            self._texts[key] = io.StringIO()
        elif kind == "text_delta" and (data.get("attempt"), data.get("step")) in self._texts:
            self._texts[(data["attempt"], data["step"])].write(data["text"])
        elif kind == "provider_response" and (data["attempt"], data["step"]) in self._steps:
            step = self._steps[(data["attempt"], data["step"])]
            step.stop_reason = data.get("stop_reason")
            step.usage = Usage(**{key: value for key, value in data.get("usage", {}).items() if key in attrs.fields_dict(Usage)})
        elif kind == "tool_call" and self._current is not None:
            call = self._calls[data["id"]] = StepToolCall(data["id"], data["name"])
            self._current.tool_calls.append(call)
        elif kind == "tool_result" and data["id"] in self._calls:
            call = self._calls[data["id"]]
            call.status, call.result_bytes = data["status"], data["bytes"]
            call.is_error = data["status"] != "success"
        elif kind == "provider_attempt_discarded":
            for (attempt, _), step in self._steps.items():
                if attempt == data["attempt"]:
                    step.discarded = True

    def steps(self, result: TurnResult | None = None) -> list[ProviderStep]:
        """The steps so far, in order, each call's arguments taken from ``result``'s tool activity."""
        arguments = {activity.call.id: activity.call.arguments for activity in (result.tool_activity if result else ())}
        for call in self._calls.values():
            call.arguments = dict(arguments.get(call.id, call.arguments))
        for key, step in self._steps.items():
            step.text = self._texts[key].getvalue()
        return list(self._steps.values())
