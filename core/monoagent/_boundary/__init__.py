"""Where bytes someone else controls enter or leave: files, documents, fences and the terminal.

* :mod:`~monoagent._boundary.files`: regular files only, a byte cap checked before reading;
* :mod:`~monoagent._boundary.strict_json` and :mod:`~monoagent._boundary.documents`: JSON and TOML
  with bounded nesting, finite numbers and one-line errors;
* :mod:`~monoagent._boundary.fences`: the one recogniser for every host fence, so text others
  control can be quoted into host-authored text without forging it;
* :mod:`~monoagent._cli.terminal`: every byte that reaches a terminal, stripped and redacted.
"""
