"""``@monoagent.tool``: the schema a typed function gets, the checks its arguments pass, and what the model sees."""

from __future__ import annotations

import asyncio
import enum
import json
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import annotated_types as at  # the test extra has both; the kernel needs neither
import attrs
import pydantic
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from monoagent import (
    LocalPluginError,
    ToolContext,
    ToolDefinitionError,
    ToolResult,
    ToolSpec,
    ToolStatus,
    TypedTool,
    hookimpl,
    tool,
)
from monoagent._kernel.tool_constraints import Constrained
from monoagent.testing import fresh_agent, scripted_agent, tool_context
from monoagent_plugins.providers.anthropic_wire import request_body


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.frozen
class Place:
    """Where to look.

    Attributes:
        lat: latitude in degrees.
        lon: longitude in degrees.
    """

    lat: float
    lon: float = 0.0
    names: tuple[str, ...] = attrs.field(factory=tuple)


def schema_of(function: Any) -> dict[str, Any]:
    return tool(function).spec.input_schema


def obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


# ---------------------------------------------------------------------------------------------- the schema


def test_scalars_and_defaults() -> None:
    def probe(text: str, count: int, ratio: float, flag: bool = False, label: str = "x") -> str:
        """Probe."""
        return ""

    assert schema_of(probe) == obj(
        {
            "text": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean", "default": False},
            "label": {"type": "string", "default": "x"},
        },
        ["text", "count", "ratio"],
    )


def test_enums_and_literals() -> None:
    def probe(unit: Unit, level: Level, mode: Literal["fast", "slow"] = "fast", mixed: Literal["a", 1] = 1) -> str:
        """Probe."""
        return ""

    assert schema_of(probe) == obj(
        {
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "level": {"type": "integer", "enum": [1, 2]},
            "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
            "mixed": {"enum": ["a", 1], "default": 1},
        },
        ["unit", "level"],
    )


def test_optional_values_allow_null_and_are_required_only_without_a_default() -> None:
    def probe(a: str | None, b: Optional[int] = None, c: Unit | None = Unit.CELSIUS, d: list[str] | None = None) -> str:  # noqa: UP045
        """Probe."""
        return ""

    assert schema_of(probe) == obj(
        {
            "a": {"type": ["string", "null"]},
            "b": {"type": ["integer", "null"], "default": None},
            "c": {"type": ["string", "null"], "enum": ["celsius", "fahrenheit", None], "default": "celsius"},
            "d": {"type": ["array", "null"], "items": {"type": "string"}, "default": None},
        },
        ["a"],
    )


def test_lists_tuples_and_string_keyed_maps() -> None:
    def probe(tags: list[str], points: tuple[float, ...] = (1.0, 2.5), scores: dict[str, list[int]] | None = None) -> str:
        """Probe."""
        return ""

    assert schema_of(probe) == obj(
        {
            "tags": {"type": "array", "items": {"type": "string"}},
            "points": {"type": "array", "items": {"type": "number"}, "default": [1.0, 2.5]},
            "scores": {"type": ["object", "null"], "additionalProperties": {"type": "array", "items": {"type": "integer"}}, "default": None},
        },
        ["tags"],
    )


def test_attrs_classes_are_nested_objects_with_their_documented_fields() -> None:
    def probe(place: Place, more: list[Place] | None = None) -> str:
        """Probe.

        Args:
            place: the main place.
        """
        return ""

    place = obj(
        {
            "lat": {"type": "number", "description": "latitude in degrees."},
            "lon": {"type": "number", "description": "longitude in degrees.", "default": 0.0},
            "names": {"type": "array", "items": {"type": "string"}},
        },
        ["lat"],
    )
    assert schema_of(probe) == obj(
        {"place": {**place, "description": "the main place."}, "more": {"type": ["array", "null"], "items": place, "default": None}},
        ["place"],
    )


GOOGLE = '''Look up the weather.

    Uses the nearest station.

    Args:
        city: the city's name.
        days: how many days
            ahead.
    '''
NUMPY = '''Look up the weather.

    Uses the nearest station.

    Parameters
    ----------
    city : str
        the city's name.
    days : int
        how many days
        ahead.
    '''
SPHINX = '''Look up the weather.

    Uses the nearest station.

    :param city: the city's name.
    :param days: how many days
        ahead.
    :returns: the forecast.
    '''


@pytest.mark.parametrize("docstring", [GOOGLE, NUMPY, SPHINX], ids=["google", "numpy", "sphinx"])
def test_docstring_styles_give_the_description_and_each_argument_s_text(docstring: str) -> None:
    def weather(city: str, context: ToolContext, days: int = 1) -> str:
        return ""

    weather.__doc__ = docstring
    spec = tool(weather).spec
    assert spec == ToolSpec(
        "weather",
        "Look up the weather.\n\nUses the nearest station.",
        obj(
            {"city": {"type": "string", "description": "the city's name."},
             "days": {"type": "integer", "description": "how many days ahead.", "default": 1}},
            ["city"],
        ),
    )


def test_name_and_description_can_be_given() -> None:
    @tool(name="forecast", description="The forecast.")
    async def weather(city: str) -> str:
        """Ignored for the description."""
        return city

    assert (weather.spec.name, weather.spec.description) == ("forecast", "The forecast.")
    assert isinstance(weather, TypedTool) and weather.__name__ == "weather"
    assert asyncio.run(weather("Paris")) == "Paris", "the decorated function is still the function"


# ------------------------------------------------------------------------------------- definition errors


class NotAttrs:
    pass


@attrs.frozen
class Loop:
    children: list[Loop]


def _def(annotation: Any, default: Any = None) -> Any:
    def probe(value: Any = default) -> str:
        """Probe."""
        return ""

    probe.__annotations__ = {"value": annotation}
    if default is None:
        probe.__defaults__ = None
    return probe


@pytest.mark.parametrize(
    ("annotation", "why"),
    [
        (set[str], "set[str] is not supported"),
        (dict, "dict is not supported"),
        (list, "list is not supported"),
        (int | str, "(a union is only supported as X | None)"),
        (NotAttrs, "NotAttrs is not supported"),
        (tuple[int, str], "tuple[int, str] is not supported"),
        (dict[int, str], "(JSON object keys are strings: use dict[str, X])"),
        (list[set[int]], "set[int] is not supported"),
        (Loop, "(an attrs class that contains itself has no finite schema)"),
        (Any, "Any is not supported"),
    ],
)
def test_an_unsupported_annotation_names_the_function_the_argument_and_what_is_allowed(annotation: Any, why: str) -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        tool(_def(annotation))
    message = str(caught.value)
    assert message.startswith("tool function '_def.<locals>.probe', argument 'value'"), message
    assert why in message and "use str, int, float, bool, an enum.Enum subclass, Literal[...]" in message


def test_other_definition_errors() -> None:
    def untyped(city) -> str:  # type: ignore[no-untyped-def]
        """Probe."""
        return ""

    def varargs(*cities: str) -> str:
        """Probe."""
        return ""

    def no_doc(city: str) -> str:
        return ""

    def misdocumented(city: str) -> str:
        """Probe.

        Args:
            cty: the city.
        """
        return ""

    def bad_default(count: int = None) -> str:  # type: ignore[assignment]  # noqa: RUF013
        """Probe."""
        return ""

    cases = {
        untyped: "argument 'city': the argument has no type annotation",
        varargs: "argument 'cities': a tool's arguments are passed by name",
        no_doc: "a tool needs a description for the model; write a docstring or pass @tool(description=...)",
        misdocumented: "the docstring describes cty, which the function does not take",
        bad_default: "the default None does not match the annotation (default: expected an integer, got null (null)); a None default needs X | None",
    }
    for function, expected in cases.items():
        with pytest.raises(ToolDefinitionError, match="tool function") as caught:
            tool(function)
        assert expected in str(caught.value), function.__name__


def test_a_plugin_file_defining_an_unsupported_tool_fails_to_load_naming_it(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "weather_tools.py").write_text(
        "from monoagent import hookimpl, tool\n\n\n"
        "@tool\n"
        "def weather(cities: set[str]) -> str:\n"
        "    'The forecast.'\n"
        "    return ''\n\n\n"
        "@hookimpl\n"
        "def register_tools(register):\n"
        "    register(weather)\n",
        encoding="utf-8",
    )
    with pytest.raises(LocalPluginError, match=r"'weather_tools'.*ToolDefinitionError: tool function 'weather'"):
        fresh_agent(tmp_path, plugins_dirs=[plugins])  # a local plugin file that fails to load is fatal by default
    agent = fresh_agent(tmp_path, plugins_dirs=[plugins], env={"MONO_AGENT_LOCAL_PLUGIN_FAILURES": "warn"})
    (record,) = [r for r in agent.host.records if "weather_tools" in r.name]
    assert record.status == "failed" and "weather" not in agent.tools
    assert "ToolDefinitionError: tool function 'weather', argument 'cities': set[str] is not supported" in (record.reason or "")


# ---------------------------------------------------------------------------- registration, end to end


def recorded_agent(tmp_path: Path, calls: list[dict[str, Any]], *tools: Any) -> tuple[Any, list[Any]]:
    """A scripted agent offering ``tools``, and the provider requests it sends (what the model sees)."""
    requests: list[Any] = []

    class Plugin:
        @hookimpl
        def register_tools(self, register: Any) -> None:
            for each in tools:
                register(each)

        @hookimpl
        def after_provider_call(self, turn: Any, request: Any, outcome: Any) -> None:
            requests.append(request)

    agent = scripted_agent(tmp_path, [{"tool_calls": calls}, {"text": "done"}], plugins=[Plugin()])
    return agent, requests


def test_a_bad_argument_reaches_the_model_as_an_error_naming_it_and_the_function_never_runs(tmp_path: Path) -> None:
    ran: list[Any] = []

    @tool
    def weather(city: str, days: int = 1) -> str:
        """The forecast.

        Args:
            city: the city's name.
        """
        ran.append(city)
        return city.upper()  # 123 would raise AttributeError here

    agent, requests = recorded_agent(tmp_path, [{"id": "c1", "name": "weather", "arguments": {"city": 123, "days": True, "when": "now"}}], weather)
    result = agent.run_sync("go", conversation_id="c")
    assert ran == [] and result.text == "done"
    wire = json.loads(request_body(requests[1], max_tokens=64))
    assert {"name": "weather", "description": "The forecast.", "input_schema": weather.spec.input_schema} in wire["tools"]
    (answer,) = wire["messages"][-1]["content"]
    answer.pop("cache_control", None)
    assert answer == {
        "type": "tool_result",
        "tool_use_id": "c1",
        "content": "Invalid arguments for tool 'weather'; it did not run:\n"
        "- when: unknown argument; allowed: city, days\n"
        "- city: expected a string, got 123 (integer)\n"
        "- days: expected an integer, got true (boolean)\n"
        "Call it again with corrected arguments.",
        "is_error": True,
    }
    (activity,) = result.tool_activity
    assert activity.result.status is ToolStatus.ERROR


@attrs.frozen
class Forecast:
    city: str
    highs: list[float]
    unit: Unit


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_valid_arguments_arrive_typed_with_the_call_s_context(tmp_path: Path, asynchronous: bool) -> None:
    seen: list[tuple[Any, ...]] = []

    def body(city: str, place: Place, call: ToolContext, unit: Unit = Unit.CELSIUS, days: float = 1.0, tags: tuple[str, ...] = ()) -> Forecast:
        call.progress(f"looking up {city}")
        seen.append((city, place, unit, days, tags, call.call.id, call.turn.request.text))
        return Forecast(city, [21.5, 19.0], unit)

    async def async_body(city: str, place: Place, call: ToolContext, unit: Unit = Unit.CELSIUS, days: float = 1.0, tags: tuple[str, ...] = ()) -> Forecast:
        return body(city, place, call, unit, days, tags)

    chosen = async_body if asynchronous else body
    chosen.__doc__ = "The forecast."
    weather = tool(name="weather")(chosen)
    assert "call" not in weather.spec.input_schema["properties"]
    arguments = {"city": "Oslo", "place": {"lat": 60, "names": ["Christiania"]}, "unit": "fahrenheit", "days": 2, "tags": ["x"]}
    agent, requests = recorded_agent(tmp_path, [{"id": "c9", "name": "weather", "arguments": arguments}], weather)
    events: list[Any] = []
    agent.run_sync("go", conversation_id="c", on_event=events.append)
    assert seen == [("Oslo", Place(60.0, 0.0, ("Christiania",)), Unit.FAHRENHEIT, 2.0, ("x",), "c9", "go")]
    assert isinstance(seen[0][3], float) and isinstance(seen[0][1].lat, float)
    (message,) = [m for m in requests[1].messages if m.role == "tool"]
    assert (message.content, message.is_error) == ('{"city": "Oslo", "highs": [21.5, 19.0], "unit": "fahrenheit"}', False)
    assert [e.data["text"] for e in events if e.type == "tool_progress"] == ["looking up Oslo"]


@pytest.mark.parametrize(
    ("returned", "content", "status"),
    [
        ("plain", "plain", ToolStatus.SUCCESS),
        (None, "", ToolStatus.SUCCESS),
        ({"a": [1, "é"]}, '{"a": [1, "é"]}', ToolStatus.SUCCESS),
        ([Place(1.0)], '[{"lat": 1.0, "lon": 0.0, "names": []}]', ToolStatus.SUCCESS),
        (ToolResult("x", "y", "refused here", ToolStatus.REJECTED), "refused here", ToolStatus.REJECTED),
        ({1, 2}, "Tool 'probe' failed: TypeError: tool 'probe' returned set, which is not JSON", ToolStatus.ERROR),
    ],
    ids=["str", "none", "dict", "attrs-list", "tool-result", "not-json"],
)
def test_return_values_become_results(tmp_path: Path, returned: Any, content: str, status: ToolStatus) -> None:
    @tool
    def probe() -> Any:
        """Probe."""
        return returned

    agent, _ = recorded_agent(tmp_path, [{"id": "c1", "name": "probe", "arguments": {}}], probe)
    (activity,) = agent.run_sync("go", conversation_id="c").tool_activity
    assert activity.result.content.startswith(content) and activity.result.status is status
    assert (activity.result.call_id, activity.result.name) == ("c1", "probe")


def test_an_exception_takes_the_tool_loop_s_error_path_redacted(tmp_path: Path) -> None:
    @tool
    async def probe(key: str) -> str:
        """Probe."""
        raise RuntimeError(f"token {key} was refused")

    agent, _ = recorded_agent(tmp_path, [{"id": "c1", "name": "probe", "arguments": {"key": "sk-ant-abcdefghijklmnopqrstuvwx"}}], probe)
    (activity,) = agent.run_sync("go", conversation_id="c").tool_activity
    assert (activity.result.status, activity.result.content) == (ToolStatus.ERROR, "Tool 'probe' failed: RuntimeError: token [REDACTED:anthropic_key] was refused")


def test_register_forms(tmp_path: Path) -> None:
    @tool
    def probe(city: str) -> str:
        """Probe."""
        return city

    class Plugin:
        @hookimpl
        def register_tools(self, register: Any) -> None:
            register(probe)
            register(ToolSpec("renamed", "Same function, another spec.", probe.spec.input_schema), probe)

    agent = fresh_agent(tmp_path, plugins=[("typed", Plugin())])
    assert [(t.spec.name, t.spec.description) for t in agent.tools.values() if t.plugin == "typed"] == [
        ("probe", "Probe."), ("renamed", "Same function, another spec."),
    ]
    context = tool_context(agent, "renamed", {"city": 5})
    refused = asyncio.run(agent.tools["renamed"].handler(context))
    assert isinstance(refused, ToolResult) and refused.status is ToolStatus.ERROR and "city: expected a string" in refused.content


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (lambda register, probe: register(lambda city: city), "expected a function decorated with @monoagent.tool or a monoagent.ToolSpec, "
         "not function"),
        (lambda register, probe: register(probe, lambda context: ""), "a decorated tool ('probe') is registered alone, as register(func)"),
        (lambda register, probe: register(ToolSpec("x", "X.")), "tool 'x' has no handler: call register(spec, handler)"),
    ],
    ids=["undecorated", "decorated-with-handler", "spec-without-handler"],
)
def test_wrong_register_calls_fail_the_plugin_naming_it(tmp_path: Path, call: Any, problem: str) -> None:
    @tool
    def probe(city: str) -> str:
        """Probe."""
        return city

    class Wrong:
        @hookimpl
        def register_tools(self, register: Any) -> None:
            call(register, probe)

    agent = fresh_agent(tmp_path, plugins=[("wrong", Wrong())])
    (record,) = [r for r in agent.host.records if r.name == "wrong"]
    assert record.status == "failed" and problem in (record.reason or ""), record.reason
    assert "register(func) or register(spec, handler) in register_tools wrongly" in (record.reason or "")


# ------------------------------------------------------------------------------------- argument checks


@attrs.frozen
class Window:
    """A time window.

    Attributes:
        start: the first hour.
        end: the last hour.
    """

    start: int = attrs.field(validator=attrs.validators.ge(0))
    end: int = 24


@tool
def survey(
    city: str,
    unit: Unit = Unit.CELSIUS,
    level: Level | None = None,
    mode: Literal["fast", "slow"] = "fast",
    ratio: float = 1.0,
    days: int = 1,
    live: bool = False,
    tags: list[str] | None = None,
    points: tuple[float, ...] = (),
    scores: dict[str, int] | None = None,
    place: Place | None = None,
    window: Window | None = None,
) -> str:
    """Survey a city."""
    return "surveyed"


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return fresh_agent(tmp_path_factory.mktemp("typed"))


def answer(agent: Any, typed: TypedTool, arguments: Any) -> ToolResult | str:
    return asyncio.run(typed.handle(tool_context(agent, typed.spec.name, arguments)))


@pytest.mark.parametrize(
    ("arguments", "problems"),
    [
        ({}, ["city: missing; this argument is required (a string)"]),
        ({"city": None}, ["city: expected a string, got null (null)"]),
        ({"city": "x", "unit": "kelvin", "mode": "FAST"}, [
            'unit: expected one of "celsius", "fahrenheit", got "kelvin" (string)',
            'mode: expected one of "fast", "slow", got "FAST" (string)']),
        ({"city": "x", "level": True}, ["level: expected one of 1, 2, got true (boolean)"]),
        ({"city": "x", "days": 1.5, "ratio": "1", "live": 1}, [
            "ratio: expected a number, got \"1\" (string)", "days: expected an integer, got 1.5 (number)",
            "live: expected a boolean, got 1 (integer)"]),
        ({"city": "x", "ratio": float("inf")}, ["ratio: expected a number, got Infinity (number)"]),
        ({"city": "x", "days": "sk-ant-abcdefghijklmnopqrstuvwx"}, ['days: expected an integer, got "[REDACTED:anthropic_key]" (string)']),
        ({"city": "x", "tags": "a", "points": [1, "2"]}, ["tags: expected an array, got \"a\" (string)", 'points[1]: expected a number, got "2" (string)']),
        ({"city": "x", "scores": {"a": 1, "b": None}}, ['scores["b"]: expected an integer, got null (null)']),
        ({"city": "x", "place": {"lon": 2, "alt": 3}}, [
            "place.alt: unknown field; allowed: lat, lon, names", "place.lat: missing; this field is required (a number)"]),
        ({"city": "x", "window": {"start": -1}}, ["window: 'start' must be >= 0: -1"]),
        ({"city": "x", "a b": 1}, ['"a b": unknown argument; allowed: city, unit, level, mode, ratio, days, live, tags, points, scores, place, window']),
    ],
)
def test_every_bad_argument_is_named_with_why(agent: Any, arguments: dict[str, Any], problems: list[str]) -> None:
    result = answer(agent, survey, arguments)
    assert isinstance(result, ToolResult) and result.status is ToolStatus.ERROR
    listed = result.content.split("\n")[1:-1]
    assert [line.removeprefix("- ") for line in listed] == problems


def test_a_flood_of_bad_elements_is_listed_up_to_a_bound(agent: Any) -> None:
    result = answer(agent, survey, {"city": "x", "tags": list(range(1000))})
    assert isinstance(result, ToolResult)
    lines = result.content.split("\n")
    assert lines[1] == "- tags[0]: expected a string, got 0 (integer)" and lines[-2] == "- (and 980 more)" and len(lines) == 23


def faithful(value: Any, sent: Any, annotation: Any) -> bool:
    """Whether ``value`` is exactly of ``annotation`` and is what the model ``sent``, with no coercion but
    the documented ones (an integer for a float, enum members, attrs instances and tuples built from JSON)."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in (str, int, float, bool):
        numeric = annotation in (int, float) and type(sent) in (int, float)
        return type(value) is annotation and (type(sent) is annotation or numeric) and value == sent
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return isinstance(value, annotation) and type(value.value) is type(sent) and value.value == sent
    if origin is Literal:
        return type(value) is type(sent) and value == sent and value in args
    if origin in (typing.Union, types.UnionType):
        return (value is None and sent is None) or faithful(value, sent, next(a for a in args if a is not type(None)))
    if origin in (list, tuple):
        return type(value) is origin and type(sent) is list and len(value) == len(sent) and all(map(faithful, value, sent, [args[0]] * len(sent)))
    if origin is dict:
        return type(value) is dict and value.keys() == sent.keys() and all(faithful(value[k], sent[k], args[1]) for k in sent)
    if attrs.has(annotation):
        hints = typing.get_type_hints(annotation)
        return type(value) is annotation and type(sent) is dict and all(
            faithful(getattr(value, f.name), sent[f.name], hints[f.name]) for f in attrs.fields(annotation) if f.name in sent
        )
    raise AssertionError(f"unexpected annotation {annotation!r}")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6) | st.sampled_from(["celsius", "fast", "slow", 1, 2]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["lat", "lon", "names", "start", "end", "x"]) | st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)
finite = st.integers() | st.floats(allow_nan=False, allow_infinity=False)
valid_values = {
    "city": st.text(max_size=5),
    "unit": st.sampled_from(["celsius", "fahrenheit"]),
    "level": st.sampled_from([1, 2, None]),
    "mode": st.sampled_from(["fast", "slow"]),
    "ratio": finite,
    "days": st.integers() | st.floats(allow_nan=False, allow_infinity=False).map(float.__floor__).map(float),
    "live": st.booleans(),
    "tags": st.none() | st.lists(st.text(max_size=3), max_size=3),
    "points": st.lists(finite, max_size=3),
    "scores": st.none() | st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
    "place": st.none() | st.fixed_dictionaries({"lat": finite}, optional={"lon": finite, "names": st.lists(st.text(max_size=3), max_size=2)}),
    "window": st.none() | st.fixed_dictionaries({"start": st.integers()}, optional={"end": st.integers()}),
}


@st.composite
def arguments_objects(draw: Any) -> dict[str, Any]:
    """Mostly valid argument objects, some with a few arguments replaced, dropped or added as random JSON."""
    arguments = draw(st.fixed_dictionaries({"city": valid_values["city"]}, optional={k: v for k, v in valid_values.items() if k != "city"}))
    for name in draw(st.lists(st.sampled_from([*valid_values, "extra"]), max_size=3, unique=True)):
        if draw(st.booleans()):
            arguments[name] = draw(json_values)
        else:
            arguments.pop(name, None)
    return arguments


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arguments_objects())
def test_random_json_never_raises_and_never_reaches_the_function_mistyped(agent: Any, arguments: Any) -> None:
    import typing

    received: list[dict[str, Any]] = []

    def record(**kwargs: Any) -> str:
        received.append(kwargs)
        return "ran"

    checked = TypedTool(record, survey.spec, survey.arguments, None)
    result = answer(agent, checked, arguments)
    hints = typing.get_type_hints(survey.func)
    event("ran" if received else "refused")
    if received:
        assert result == "ran"
        assert received[0].keys() == arguments.keys()
        assert all(faithful(value, arguments[name], hints[name]) for name, value in received[0].items()), received
    else:
        assert isinstance(result, ToolResult) and result.status is ToolStatus.ERROR
        assert result.content.startswith("Invalid arguments for tool 'survey'; it did not run:")


def test_a_tool_declares_its_action_categories_and_domain():
    @tool(categories=["file_write", "network"], domain="files")
    def save(path: str) -> str:
        """Save a file."""
        return path

    assert (save.spec.categories, save.spec.domain) == (("file_write", "network"), "files")
    assert (ToolSpec("plain", "A tool.").categories, ToolSpec("plain", "A tool.").domain) == ((), None)
    with pytest.raises(ToolDefinitionError, match=r"list of category names, such as \['shell'\], not 'shell'"):
        tool(categories="shell")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="categories is a list of names, not 'shell'"):
        ToolSpec("plain", "A tool.", categories="shell")  # type: ignore[arg-type]


@pytest.mark.parametrize("sent", [2**53 + 1, -(2**53) - 1, 10**400])
def test_an_integer_a_float_cannot_hold_is_refused_for_a_float_argument(agent, sent):
    """A float argument receives the model's integer unchanged or not at all: 2**53 + 1 would be rounded, 10**400 overflow."""
    received: list[float] = []

    @tool
    def scale(ratio: float) -> str:
        """Scale.

        Args:
            ratio: the ratio.
        """
        received.append(ratio)
        return "ran"

    result = answer(agent, scale, {"ratio": sent})
    assert received == [] and isinstance(result, ToolResult) and result.status is ToolStatus.ERROR
    assert "ratio: expected a number a float holds exactly" in result.content
    assert answer(agent, scale, {"ratio": 2**53}) == "ran" and received == [float(2**53)]


# ------------------------------------------------------------------ Annotated bounds (issue 24 item 15)

@attrs.frozen
class Span:
    start: Annotated[int, at.Ge(0)]


@tool
def booking(
    guests: Annotated[int, at.Ge(1), at.Le(12)],
    name: Annotated[str, at.MinLen(2), at.MaxLen(20)],
    nights: Annotated[int, at.Interval(gt=0, lt=31)] = 1,
    rooms: Annotated[list[str], at.Len(1, 3)] = ["double"],  # noqa: B006  (a default shown to the model, never mutated)
    budget: Annotated[float, at.MultipleOf(0.5), at.Gt(0)] | None = None,
    extras: Annotated[dict[str, int], at.MaxLen(2)] | None = None,
    note: Annotated[str, "what the guest asked for"] = "",
) -> str:
    """Book rooms.

    Args:
        guests: how many people.
    """
    return f"booked {guests}"


def test_annotated_bounds_are_in_the_schema_the_model_is_shown() -> None:
    properties = booking.spec.input_schema["properties"]
    assert properties["guests"] == {"type": "integer", "minimum": 1, "maximum": 12, "description": "how many people."}
    assert properties["name"] == {"type": "string", "minLength": 2, "maxLength": 20}
    assert properties["nights"] == {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 31, "default": 1}
    assert properties["rooms"] == {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3, "default": ["double"]}
    assert properties["budget"] == {"type": ["number", "null"], "multipleOf": 0.5, "exclusiveMinimum": 0, "default": None}
    assert properties["extras"] == {"type": ["object", "null"], "additionalProperties": {"type": "integer"}, "maxProperties": 2, "default": None}
    assert properties["note"] == {"type": "string", "description": "what the guest asked for", "default": ""}
    assert booking.spec.input_schema["required"] == ["guests", "name"]


@pytest.mark.parametrize(("arguments", "problems"), [
    ({"guests": 0, "name": "Al"}, ["guests: must be >= 1, got 0"]),
    ({"guests": 13, "name": "A"}, ["guests: must be <= 12, got 13", 'name: must be at least 2 characters, got "A" (1 characters)']),
    ({"guests": 2, "name": "Al", "nights": 31, "rooms": []}, ["nights: must be < 31, got 31", "rooms: must be at least 1 items, got 0 items"]),
    ({"guests": 2, "name": "Al", "budget": 10.25}, ["budget: must be a multiple of 0.5, got 10.25"]),
    ({"guests": 2, "name": "Al", "budget": -1.0, "extras": {"a": 1, "b": 2, "c": 3}}, [
        "budget: must be > 0, got -1.0", "extras: must be at most 2 entries, got 3 entries"]),
    ({"guests": True, "name": "Al"}, ["guests: expected an integer, got true (boolean)"]),  # a wrong type is not also out of bounds
])
def test_a_value_outside_its_bounds_reaches_the_model_as_an_error_and_the_function_never_runs(
    agent: Any, arguments: dict[str, Any], problems: list[str],
) -> None:
    result = answer(agent, booking, arguments)
    assert isinstance(result, ToolResult) and result.status is ToolStatus.ERROR
    assert [line.removeprefix("- ") for line in result.content.split("\n")[1:-1]] == problems


def test_values_within_their_bounds_arrive_typed(agent: Any) -> None:
    assert answer(agent, booking, {"guests": 12, "name": "Al", "nights": 30, "budget": 10.5, "rooms": ["a", "b", "c"]}) == "booked 12"


def test_a_bound_out_of_range_is_sent_back_to_the_model_through_a_turn(tmp_path: Path) -> None:
    agent, requests = recorded_agent(tmp_path, [{"id": "c1", "name": "booking", "arguments": {"guests": 40, "name": "Al"}}], booking)
    result = agent.run_sync("go", conversation_id="c")
    wire = json.loads(request_body(requests[1], max_tokens=64))
    sent = next(t for t in wire["tools"] if t["name"] == "booking")
    assert sent["input_schema"]["properties"]["guests"]["maximum"] == 12
    (answer_block,) = wire["messages"][-1]["content"]
    assert answer_block["is_error"] is True and "- guests: must be <= 12, got 40" in answer_block["content"]
    assert result.tool_activity[0].result.status is ToolStatus.ERROR


def test_pydantic_field_bounds_pattern_and_description(agent: Any) -> None:
    @tool
    def find(
        code: Annotated[str, pydantic.Field(pattern=r"^[A-Z]{3}$", description="an airport code")],
        limit: Annotated[int, pydantic.Field(ge=1, le=50, strict=True)] = 10,
        tags: Annotated[list[str], pydantic.Field(max_length=4)] = [],  # noqa: B006
    ) -> str:
        """Find flights."""
        return code

    properties = find.spec.input_schema["properties"]
    assert properties["code"] == {"type": "string", "pattern": "^[A-Z]{3}$", "description": "an airport code"}
    assert properties["limit"] == {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}
    assert properties["tags"] == {"type": "array", "items": {"type": "string"}, "maxItems": 4, "default": []}
    refused = answer(agent, find, {"code": "osl", "limit": 51})
    assert isinstance(refused, ToolResult) and refused.content.split("\n")[1:-1] == [
        "- code: must be matching the pattern '^[A-Z]{3}$', got \"osl\" (3 characters)", "- limit: must be <= 50, got 51"]
    assert answer(agent, find, {"code": "OSL"}) == "OSL"


def _annotated(annotation: Any) -> Any:
    def f(x: int) -> str:
        """A tool."""
        return ""

    f.__annotations__["x"] = annotation
    return f


@pytest.mark.parametrize(("annotation", "message"), [
    (Annotated[int, at.Predicate(lambda x: x % 2 == 0)], r"argument 'x': Annotated\[int, Predicate\(.*\)\] cannot be a tool argument's bound: a predicate"),
    (at.LowerCase[str], r"argument 'x': Annotated\[str, Predicate\(str\.islower\)\] cannot be a tool argument's bound"),
    (Annotated[int, at.Timezone(None)], r"argument 'x': Annotated\[int, Timezone\(tz=None\)\]: this metadata is not understood"),
    (Annotated[int, object()], r"argument 'x': Annotated\[int, <object object at .*>\]: this metadata is not understood"),
    (Annotated[str, at.Ge(1)], r"argument 'x': Annotated\[str, \.\.\.\] has ge=1, a bound on a number; it applies to int and float, not str"),
    (Annotated[int, at.MaxLen(3)], r"argument 'x': Annotated\[int, \.\.\.\] has max_length=3, a length; it applies to str"),
    (Annotated[bool, at.Ge(0)], r"has ge=0, a bound on a number; it applies to int and float, not bool"),
    (Annotated[int, at.Ge("1")], r"has ge='1'; the bound must be a finite number"),
    (Annotated[float, at.MultipleOf(0)], r"has multiple_of=0; the bound must be a finite number above 0"),
    (Annotated[str, at.MinLen(-1)], r"has min_length=-1; a length is an integer of 0 or more"),
])
def test_metadata_that_is_not_understood_is_refused_naming_the_argument_and_the_metadata(annotation: Any, message: str) -> None:
    with pytest.raises(ToolDefinitionError, match=message):
        tool(_annotated(annotation))


def test_pydantic_field_arguments_a_tool_does_not_take_are_refused() -> None:
    with pytest.raises(ToolDefinitionError, match=r"argument 'x': Annotated\[int, Field\(\.\.\.\)\] sets alias, .*title.*, which a tool"):
        tool(_annotated(Annotated[int, pydantic.Field(title="X", alias="y")]))
    with pytest.raises(ToolDefinitionError, match=r"argument 'x': .*has pattern='\(', which is not a regular expression"):
        tool(_annotated(Annotated[str, pydantic.Field(pattern="(")]))


def test_a_default_outside_its_bounds_and_bounds_in_an_attrs_field() -> None:
    with pytest.raises(ToolDefinitionError, match=r"the default 0 does not match the annotation \(default: must be >= 1, got 0\)"):
        @tool
        def f(x: Annotated[int, at.Ge(1)] = 0) -> str:
            """A tool."""
            return ""

    @tool
    def g(span: Span) -> str:
        """A tool."""
        return ""

    assert g.spec.input_schema["properties"]["span"]["properties"]["start"] == {"type": "integer", "minimum": 0}
    assert isinstance(g.arguments.members[0].shape.members[0].shape, Constrained)
