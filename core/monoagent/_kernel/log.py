"""A lazily imported loguru logger.

loguru costs tens of milliseconds to import, more than the whole budget of ``monoagent --help``,
so modules log through :data:`logger`, which imports loguru on first use. As a library,
monoagent's log records are disabled (loguru's advice for libraries): enable them with
``loguru.logger.enable("monoagent")``. The CLI enables them at WARNING (DEBUG with ``--debug``);
a long-running server asks for INFO, and optionally one JSON object a line, with
:func:`configure_server_log`. A plugin package that logs through :data:`logger` asks for the same treatment of its own records
with :func:`log_as_library` (the bundled plugins do, in their package's ``__init__``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_cli_level: str | None = None
_cli_redact: Callable[[str, str], str] | None = None
_cli_json = False
_redacted: dict[str, str] = {}
REDACTED_CACHE_SIZE = 1024
REDACTED_CACHE_CHARS = 256
"""JSON log fields repeat (a method, a path, a channel): the redacted form of a short string is
kept, up to this many strings, so that each record does not run the redaction chain per field."""
_library_packages: list[str] = ["monoagent"]


def log_as_library(package: str) -> None:
    """Treat the records of ``package`` (a top-level package name) as monoagent's own.

    They are disabled while monoagent is used as a library, unless the application enabled or
    disabled the package itself first, and the CLI shows them at its level. Call it once, at the
    import of the package, before its modules log.
    """
    if package in _library_packages:
        return
    _library_packages.append(package)
    if _LazyLogger._real is not None:
        _decide(_LazyLogger._real, package)


def configure_cli(debug: bool, redact: Callable[[str, str], str] | None = None) -> None:
    """Send monoagent's records to stderr at WARNING, or DEBUG with ``--debug``, from first use on.

    Each record passes :func:`monoagent._cli.terminal.terminal_text` with ``redact`` (the command
    line's redaction chain) on its way to the terminal, as everything else the CLI prints.
    """
    global _cli_level, _cli_redact, _cli_json
    _cli_level = "DEBUG" if debug else "WARNING"
    _cli_redact = redact
    _cli_json = False
    _redacted.clear()
    _LazyLogger._real = None


def configure_server_log(*, json: bool) -> None:
    """Log as a server does, from the next record on: INFO and up (DEBUG stays DEBUG), on stderr.

    With ``json`` every record is one JSON object on one line (``monoagent serve --log-json``):
    ``time`` (ISO 8601), ``level``, ``logger`` (the module), ``message``, the record's bound and
    keyword fields (an access line's ``method``, ``path``, ``status``...), and ``exception`` when
    the record carries one. Strings pass the same redaction chain as the terminal's text. Called
    after :func:`configure_cli`, whose redaction it keeps.
    """
    global _cli_level, _cli_json
    if _cli_level != "DEBUG":
        _cli_level = "INFO"
    _cli_json = json
    _redacted.clear()
    _LazyLogger._real = None


def failure_text(exc: BaseException) -> str:
    """``Type: message`` of ``exc`` for a log line, even when its ``str()`` raises too.

    A log call that formats such an exception raises in its turn; where the line reports a
    failure that must not stop anything (an event observer, the artifact writer), use this.
    """
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return f"{type(exc).__name__} (its message cannot be shown)"


def _terminal_sink(message: Any) -> None:
    import sys

    from monoagent._cli.terminal import terminal_text

    sys.stderr.write(terminal_text(str(message), _cli_redact))


def _json_sink(message: Any) -> None:
    import json
    import sys
    import traceback

    from monoagent._boundary.text import valid_unicode
    from monoagent._cli.terminal import KIND

    def clean(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        known = _redacted.get(value)
        if known is None:
            known = valid_unicode(value) if _cli_redact is None else _cli_redact(valid_unicode(value), KIND)
            if len(value) <= REDACTED_CACHE_CHARS:
                if len(_redacted) >= REDACTED_CACHE_SIZE:
                    _redacted.clear()
                _redacted[value] = known
        return known

    record = message.record
    entry: dict[str, Any] = {"time": record["time"].isoformat(), "level": record["level"].name, "logger": record["name"],
                             "message": clean(record["message"])}
    for key, value in record["extra"].items():
        entry.setdefault(key, clean(value))
    if record["exception"] is not None:
        kind, error, trace = record["exception"]
        entry["exception"] = clean("".join(traceback.format_exception(kind, error, trace)))
    sys.stderr.write(json.dumps(entry, ensure_ascii=True, default=str) + "\n")


def _decide(real: Any, package: str) -> None:
    if _cli_level is not None:
        real.enable(package)
        return
    # Disabled by default, unless the application already enabled (or disabled) the package
    # before our first record: loguru's last enable/disable call wins.
    decided = {name for name, _ in getattr(getattr(real, "_core", None), "activation_list", ())}
    if package + "." not in decided:
        real.disable(package)


class _LazyLogger:
    _real: Any = None

    def _load(self) -> Any:
        if self._real is None:
            from loguru import logger as real

            if _cli_level is not None:
                real.remove()
                if _cli_json:
                    real.add(_json_sink, level=_cli_level, format="{message}")
                else:
                    real.add(_terminal_sink, level=_cli_level, format="monoagent: {level}: {message}")
            for package in _library_packages:
                _decide(real, package)
            type(self)._real = real
        return self._real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._load(), name)


logger = _LazyLogger()
