"""The bundled plugin ``session-memory``: the ``memory`` session backend, the default one.

``runtime.session.backend = "memory"`` keeps each channel harness's warm sessions in this process
(:class:`~monoagent._kernel.sessions.InMemorySessionBackend`, evicted after
``runtime.session.idleTimeoutMs``): they are lost on restart, so a conversation's first turn after
one is cold. Blocking this plugin leaves continuous mode without its default backend: select
another (``files``) or ``runtime.session.mode = "per-message"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from monoagent import ComponentRegistrar, InMemorySessionBackend, SessionBackend, hookimpl

if TYPE_CHECKING:
    from monoagent import Agent


def backend_from_config(agent: Agent) -> InMemorySessionBackend:
    """An in-memory backend with the configured idle timeout."""
    return InMemorySessionBackend(agent.config.runtime.session.idle_timeout_ms)


@hookimpl(trylast=True)
def register_session_backends(register: ComponentRegistrar[SessionBackend]) -> None:
    register("memory", backend_from_config, description="warm sessions in this process only, lost on restart")
