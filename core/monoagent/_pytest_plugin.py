"""monoagent's pytest plugin (the ``pytest11`` entry point ``monoagent``): fixtures and assertion rewriting.

Installed with monoagent, pytest loads it in every run (``-p no:monoagent`` turns it off). It
registers the contract suites of :mod:`monoagent.testing` for assertion rewriting *before* they
are imported, so a failing contract shows the values it compared (``assert ['answer 0'] ==
['question 0', ...]``) rather than a bare ``AssertionError``; and it offers four fixtures, each
building on pytest's ``tmp_path`` and closing what it made when the test ends:

``monoagent_agent``
    A fresh :class:`~monoagent._agent.Agent` (:func:`~monoagent.testing.fresh_agent`): its home,
    history and artifacts under ``tmp_path``, no configuration file, an empty environment, no
    third-party plugins, the ``offline:echo`` model.
``scripted_agent``
    A factory ``scripted_agent(steps, **kwargs) -> Agent`` on ``offline:scripted`` replaying
    ``steps``: each a reply text or a mapping ``{"text", "tool_calls", "error", "retryable"}``
    (:func:`~monoagent.testing.scripted_agent`).
``function_provider``
    A factory ``function_provider(fn, *, name=None, **kwargs) -> Agent`` whose model is
    :class:`~monoagent.testing.FunctionProvider` ``(fn)``; ``agent.provider(agent.model)`` is
    that provider (its ``requests`` list what it was sent).
``hook_recorder``
    A factory ``hook_recorder(agent) -> HookRecorder`` recording every hook call the agent makes
    from then on, with its arguments, result and implementations
    (:class:`~monoagent.testing.HookRecorder`). It is an observer of the agent's hook facade,
    which watches every call through pluggy's ``add_hookcall_monitoring`` (pluggy runs every hook
    call, the registries' and the observer hooks' included) and adds what the monitor alone does
    not know: which plugin's answer won a firstresult hook.

``**kwargs`` of the factories go to :func:`~monoagent.testing.fresh_agent` (``config``,
``plugins``, ``env``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# The contract suites (monoagent.testing.*_contract) and the helpers they use: registered before
# anything imports them, which is why this module lives outside the monoagent.testing package.
pytest.register_assert_rewrite("monoagent.testing")

if TYPE_CHECKING:
    from monoagent._agent import Agent
    from monoagent._kernel.model import ProviderRequest
    from monoagent.testing import HookRecorder


class _Agents:
    """The agents a test's fixtures made, closed at teardown in reverse order."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.made: list[Agent] = []

    def home(self) -> Path:
        """A directory of its own for each agent, so two agents of one test share no history."""
        path = self.tmp_path / f"monoagent-{len(self.made) + 1}"
        path.mkdir()
        return path

    def keep(self, agent: Agent) -> Agent:
        self.made.append(agent)
        return agent

    def close(self) -> None:
        for agent in reversed(self.made):
            agent.close()


@pytest.fixture
def _monoagent_agents(tmp_path: Path) -> Iterator[_Agents]:
    agents = _Agents(tmp_path)
    yield agents
    agents.close()


@pytest.fixture
def monoagent_agent(_monoagent_agents: _Agents) -> Agent:
    """A fresh Agent on ``offline:echo`` under ``tmp_path``: no config file, empty environment, no third-party plugins."""
    from monoagent.testing import fresh_agent

    return _monoagent_agents.keep(fresh_agent(_monoagent_agents.home()))


@pytest.fixture
def scripted_agent(_monoagent_agents: _Agents) -> Callable[..., Agent]:
    """``scripted_agent(steps, **kwargs)``: a fresh Agent on ``offline:scripted`` replaying ``steps`` (str or step mapping)."""
    from monoagent.testing import scripted_agent as make_scripted

    def make(steps: Sequence[str | Mapping[str, Any]], **kwargs: Any) -> Agent:
        if isinstance(steps, (str, Mapping)):
            raise TypeError("scripted_agent takes a list of steps (a reply text or a step mapping each), not one step")
        script = [{"text": step} if isinstance(step, str) else dict(step) for step in steps]
        return _monoagent_agents.keep(make_scripted(_monoagent_agents.home(), script, **kwargs))

    return make


@pytest.fixture
def function_provider(_monoagent_agents: _Agents) -> Callable[..., Agent]:
    """``function_provider(fn, *, name=None, **kwargs)``: a fresh Agent whose model is ``FunctionProvider(fn)``."""
    from monoagent.testing import FunctionProvider, fresh_agent

    def make(fn: Callable[[ProviderRequest], Any], *, name: str | None = None, **kwargs: Any) -> Agent:
        provider = FunctionProvider(fn, name=name)
        return _monoagent_agents.keep(fresh_agent(_monoagent_agents.home(), provider=provider, **kwargs))

    return make


@pytest.fixture
def hook_recorder() -> Iterator[Callable[[Agent], HookRecorder]]:
    """``hook_recorder(agent)``: a started HookRecorder on ``agent``, stopped when the test ends."""
    from monoagent.testing import HookRecorder

    started: list[HookRecorder] = []

    def record(agent: Agent) -> HookRecorder:
        recorder = HookRecorder(agent).__enter__()
        started.append(recorder)
        return recorder

    yield record
    for recorder in reversed(started):
        recorder.__exit__(None, None, None)
