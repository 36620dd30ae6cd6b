"""The bundled plugin ``plugin-cli``: ``monoagent plugin new NAME``, a plugin distribution to start from.

It writes ``monoagent-NAME/`` in the current folder (or ``--dir``): a pip-installable
distribution with the entry point, a hook module (a configuration table, a system-prompt
section, a typed tool) and tests that drive each through an agent turn with monoagent's pytest
fixtures, passing as generated. The names and the files are
:mod:`monoagent_plugins.cli.plugin_scaffold`'s; this module is the command.

A NAME that cannot be a plugin's name is a usage error (exit 2) saying what is allowed; an
existing folder is refused (exit 1), never overwritten.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from monoagent import echo, hookimpl


@hookimpl(trylast=True)
def register_commands(cli: click.Group) -> None:
    @cli.group("plugin")
    def plugin() -> None:
        """Start a plugin of your own."""

    @plugin.command("new")
    @click.argument("name")
    @click.option(
        "--dir", "parent", default=".", show_default=True,
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        help="The folder to create the plugin's folder (monoagent-NAME) in.",
    )
    @click.option("--description", default="", help="One line for pyproject.toml and the README.")
    def new(name: str, parent: Path, description: str) -> None:
        """Write monoagent-NAME/: a plugin distribution with a hook module, a config table, a tool and tests.

        NAME is the plugin's one name (its entry point): lower-case words joined by '-'.
        """
        from monoagent_plugins.cli.plugin_scaffold import (
            PluginNameError,
            PluginScaffoldError,
            plugin_names,
            write_plugin,
        )

        try:
            names = plugin_names(name)
        except PluginNameError as exc:
            raise click.BadParameter(str(exc), param_hint="NAME") from exc
        try:
            target, files = write_plugin(parent, names, description)
        except PluginScaffoldError as exc:
            raise click.ClickException(str(exc)) from exc
        echo(f"wrote the plugin {names.name!r} ({names.distribution}, package {names.package}) in {target}:")
        for relative in files:
            echo(f"  {relative}")
        echo(f"next: cd {shlex.quote(str(target))} && python -m pip install -e '.[test]' && python -m pytest")
        echo(f"note: once installed, {names.name!r} loads in every monoagent run of this Python environment, in every "
             f"project that uses it; a project keeps it out with plugins.block = [{names.name!r}]")
