"""The bundled SQLite tool-history store of the ``tool-history`` plugin, split by job.

None of these modules is a plugin: :mod:`monoagent_plugins.history.tool_history` holds the hooks and
imports them (lazily, so CLI start-up does not load SQLite and the writer thread machinery).

* :mod:`.sidecar`: the files (paths, owner-only creation, symlinks refused), the schema and the
  SQLite helpers every other module uses;
* :mod:`.writer`: the one writer thread per sidecar and process, its liveness lock, the locks
  and back-off for a sidecar that cannot be opened, and recovery of dead writers' calls;
* :mod:`.store`: :class:`~.store.SqliteToolHistory`, the store (bounds, redaction, retention,
  maintenance, reading), configured by the plugin's
  :class:`~monoagent_plugins.history.tool_history.ToolHistoryConfig`;
* :mod:`.projection`: the cold projection (the dynamic ``tool_history`` section);
* :mod:`.spec`: the SessionHistory tool's spec, light enough to register at start-up;
* :mod:`.session_history`: the SessionHistory tool.
"""
