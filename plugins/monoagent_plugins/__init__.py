"""The bundled default plugins, each registered through the monoagent entry-point group."""

from monoagent import log_as_library

log_as_library(__name__)
