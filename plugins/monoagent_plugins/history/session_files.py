"""The bundled plugin ``session-files``: the ``files`` session backend, warm sessions that survive the process.

``runtime.session.backend = "files"`` (or ``runtime.session.transcriptsDir`` set with no backend
chosen) selects :class:`~monoagent_plugins.history.durable_sessions.DurableSessionBackend`:
transcripts under ``runtime.session.transcriptsDir``, this plugin's key of the kernel's
``runtime.session`` table, bound to the history record of a
:class:`~monoagent._kernel.stores.ProviderSessionStore` (the bundled ``files`` history store is
one), with cross-process locks, fsynced fences and an idle sweep. The factory checks both before
a turn runs: the directory unset or unusable, or a history store that keeps no provider session,
is a :class:`~monoagent._kernel.errors.ComponentError` saying which and what to do (set the
directory, use such a store, or select ``memory``). The backend itself is imported when it is
built, so loading the plugin (every command line does) costs no more than its registrations.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from monoagent import (
    ComponentError,
    ComponentRegistrar,
    ConfigSectionRegistrar,
    ProviderSessionStore,
    SessionBackend,
    hookimpl,
    setting,
)

if TYPE_CHECKING:
    from monoagent import Agent
    from monoagent_plugins.history.durable_sessions import DurableSessionBackend

CONFIG_PATH = "runtime.session"
"""The backend's key lives in the kernel's ``runtime.session`` table, at its documented path."""


@attrs.define
class SessionFilesConfig:
    """The ``files`` session backend's key of the ``runtime.session`` table: where its transcripts live."""

    transcripts_dir: Path | None = setting(
        None, doc="Directory of the files session backend's durable transcripts (owner-only): with a history store "
        "that keeps provider sessions (a ProviderSessionStore, such as files), warm sessions survive restarts and are "
        "shared by processes. Set without runtime.session.backend, it selects files; unset, files has nowhere to keep them.",
        env="MONO_AGENT_SESSION_TRANSCRIPTS_DIR",
    )


def backend_from_config(agent: Agent) -> DurableSessionBackend:
    """The ``files`` backend of ``agent``'s configuration, once its preconditions hold.

    Raises :class:`~monoagent._kernel.errors.ComponentError` when ``runtime.session.transcriptsDir``
    is unset, when the history store keeps no provider session (it is not a
    :class:`~monoagent._kernel.stores.ProviderSessionStore`: transcripts would have no record to be
    bound to), or when the directory cannot hold transcripts (another user's, loose modes, a
    symlink, a parent this user cannot write in). Nothing is created until the first turn.
    """
    root = agent.config.section(CONFIG_PATH, SessionFilesConfig).transcripts_dir
    if root is None:
        raise ComponentError(
            'the session backend "files" keeps its transcripts under runtime.session.transcriptsDir, which is unset: set it '
            '(env MONO_AGENT_SESSION_TRANSCRIPTS_DIR), or select runtime.session.backend = "memory" (sessions in this '
            "process only)"
        )
    store = agent.history_store
    if not agent.components.supports(store, ProviderSessionStore):
        raise ComponentError(
            f'the session backend "files" binds each transcript to its conversation\'s history record, but the history '
            f"store {store.name!r} keeps no provider session (it is not a ProviderSessionStore: load_provider_session, "
            f'commit with provider_session=): use a history store that is one (the bundled "files" store is), or select '
            f'runtime.session.backend = "memory" (sessions in this process only, lost on restart)'
        )
    from monoagent_plugins.history.durable_sessions import DurableSessionBackend
    from monoagent_plugins.history.transcript_files import TranscriptRoot

    files = TranscriptRoot(agent.config.resolve(root))
    problem = files.problem()
    if problem is not None:
        raise ComponentError(f'the session backend "files" cannot use its directory: {problem}')
    return DurableSessionBackend(store, files.root, agent.config.runtime.session.idle_timeout_ms)


@hookimpl(trylast=True)
def register_session_backends(register: ComponentRegistrar[SessionBackend]) -> None:
    register("files", backend_from_config, description="durable transcripts under runtime.session.transcriptsDir, "
             "bound to the history record, with cross-process locks, fsynced fences and an idle sweep")


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register(CONFIG_PATH, SessionFilesConfig)
