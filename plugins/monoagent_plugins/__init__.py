"""The bundled default plugins, each registered through the monoagent entry-point group."""
