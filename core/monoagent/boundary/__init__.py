"""Where bytes someone else controls enter or leave: files, documents, fences and the terminal.

* :mod:`~monoagent.boundary.files`: regular files only, a byte cap checked before reading;
* :mod:`~monoagent.boundary.strict_json` and :mod:`~monoagent.boundary.documents`: JSON and TOML
  with bounded nesting, finite numbers and one-line errors;
* :mod:`~monoagent.boundary.fences`: the one recogniser for every host fence, so text others
  control can be quoted into host-authored text without forging it;
* :mod:`~monoagent.boundary.terminal`: every byte that reaches a terminal, stripped and redacted.
"""
