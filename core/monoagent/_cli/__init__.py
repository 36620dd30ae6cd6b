"""The ``monoagent`` command line.

Plugins add commands through the ``register_commands`` hook, so the plugins are loaded before
click parses the command line. That early load needs only the ``plugins`` settings; the full
configuration is validated when a command first needs the Agent, so ``--help`` and
``config validate`` still work while the configuration is broken.

Each :func:`main` call builds its own root command (:func:`build_cli`) on its own plugin host, so
the module keeps no state between calls: a command that a ``--plugins-dir`` plugin added, or one
of a plugin blocked since, is gone on the next call (tox resets its plugin manager before
loading again for the same reason).

Everything printed goes through :mod:`monoagent._cli.terminal` (controls stripped, redacted by the
plugins' redaction chain), and the arguments are text: bytes that are not UTF-8 become U+FFFD,
with a notice on stderr, before any command sees them.

Every command, a plugin's included, ends the same way (:func:`main`): an error is one
``monoagent: error: ...`` message on stderr and the exit code of its type
(:class:`~monoagent._kernel.errors.ExitCode`, documented in docs/cli.md).
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from monoagent._boundary.text import scrub_unicode
from monoagent._cli.terminal import AnswerPrinter, echo, echo_json, notice, read_stdin
from monoagent._kernel import hookspecs
from monoagent._kernel.components import CHANNELS
from monoagent._kernel.errors import ConfigError, ExitCode, MonoagentError

if TYPE_CHECKING:
    from monoagent._agent import Agent
    from monoagent._kernel.host import PluginHost

DEFAULT_CONVERSATION = "cli:default"


def host_redactor(host: PluginHost | None) -> Callable[[str, str], str]:
    """The redaction chain of ``host``'s plugins (the text unchanged without a host or an answer)."""

    def redact(text: str, kind: str) -> str:
        value = host.hooks.first(hookspecs.redact, text=text, kind=kind) if host is not None else None
        return text if value is None else value

    return redact


class CliState:
    """What the root options selected; builds the Agent on first use, on the command line's plugin host."""

    def __init__(
        self,
        config: str | None,
        plugins_dirs: Sequence[str],
        debug: bool,
        host: PluginHost | None = None,
        config_error: ConfigError | None = None,
    ) -> None:
        self.config = config
        self.plugins_dirs = list(plugins_dirs)
        self.debug = debug
        self.config_error = config_error
        self._host = host
        self._agent: Agent | None = None

    def agent(self) -> Agent:
        if self._agent is None:
            from monoagent._agent import Agent

            self._agent = Agent(None, config_path=self.config, plugins_dirs=self.plugins_dirs, host=self._host)
        return self._agent

    def host(self) -> PluginHost:
        """The Agent's plugin host, else the one this command line loaded (loaded now if it has none)."""
        if self._agent is not None:
            return self._agent.host
        if self._host is None:
            self._host, self.config_error = load_plugins(self.config, self.plugins_dirs)
        return self._host

    def check_local_plugins(self) -> None:
        """End the command line (exit 3) if a local plugin file of this command line failed to load
        (without a plugin host yet, the Agent's own load raises it)."""
        if self._host is not None:
            self._host.check_local()

    def close(self) -> None:
        if self._agent is not None:
            self._agent.close()

    def redact(self, text: str, kind: str) -> str:
        """The Agent's redaction chain, or the plugin host's before the Agent exists."""
        if self._agent is not None:
            return self._agent.redact(text, kind)
        return host_redactor(self._host)(text, kind)


class MonoagentGroup(click.Group):
    """The root command: its arguments, the subcommands' included, are made valid text first.

    ``host`` is the plugin host whose plugins added their commands (see :func:`build_cli`);
    None on the module's template :data:`cli`, which holds the core commands only.
    """

    host: PluginHost | None = None
    config_error: ConfigError | None = None

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        scrubbed = [scrub_unicode(arg) for arg in args]
        replaced = [(i, n) for i, (_, n) in enumerate(scrubbed, start=1) if n]
        if replaced:
            notice(
                f"command-line argument(s) {', '.join(str(i) for i, _ in replaced)} held "
                f"{sum(n for _, n in replaced)} byte(s) that are not valid UTF-8; each became U+FFFD",
                redact=host_redactor(self.host),
            )
            args = [text for text, _ in scrubbed]
        return super().parse_args(ctx, args)


def _configure_logging(debug: bool) -> None:
    from monoagent._kernel.log import configure_cli

    configure_cli(debug, redact=_state().redact)


@click.group(cls=MonoagentGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config", type=click.Path(dir_okay=False), envvar=None, help="Config file (default: MONO_AGENT_CONFIG, ./monoagent.toml, the user config dir).")
@click.option("--plugins-dir", "plugins_dirs", multiple=True, type=click.Path(file_okay=False), help="Directory of *.py plugin files (repeatable).")
@click.option("--debug", is_flag=True, help="Log debug detail and show tracebacks.")
@click.version_option(package_name="monoagent", prog_name="monoagent")
@click.pass_context
def cli(ctx: click.Context, config: str | None, plugins_dirs: Sequence[str], debug: bool) -> None:
    """monoagent: build LLM agents from plugins."""
    root = ctx.find_root().command
    state = CliState(config, plugins_dirs, debug, getattr(root, "host", None), getattr(root, "config_error", None))
    ctx.obj = state
    _configure_logging(debug)
    ctx.call_on_close(state.close)
    if ctx.invoked_subcommand != "plugins":  # `plugins` lists the failure, then ends with it
        state.check_local_plugins()


def _state() -> CliState:
    state = click.get_current_context().find_object(CliState)
    assert state is not None, "the root command's callback sets it before any subcommand runs"
    return state


def _read_text(text: str) -> str:
    return read_stdin() if text == "-" else text


CONTEXT_FILE_MAX_BYTES = 1024 * 1024


def _context_from_file(context: str | None, path: str) -> str:
    """The text of ``--context-file`` (a regular UTF-8 file of at most 1 MiB); with ``--context`` too, a usage error."""
    from monoagent._boundary.files import read_regular_text

    if context is not None:
        raise click.UsageError("give the turn's context with --context or --context-file, not both")
    try:
        return read_regular_text(path, CONTEXT_FILE_MAX_BYTES, what="context file")
    except OSError as exc:
        raise click.BadParameter(f"{exc.strerror or exc} ({path})", param_hint="--context-file") from None


def _announce_default_model(agent: Any, model: str | None) -> None:
    if model is None and agent.model_is_default:
        echo(
            "monoagent: no runtime.model configured; using offline:echo "
            "(set runtime.model in monoagent.toml or MONO_AGENT_MODEL)",
            err=True,
        )


def tool_lines_stream(wanted: bool | None) -> IO[str] | None:
    """Where ``run`` and ``chat`` write their tool lines: standard error, unless ``wanted`` is
    False, or it is None (neither ``--tool-lines`` nor ``--quiet``) and standard error is not a
    terminal (a log file or a pipe keeps only what the command reports)."""
    if wanted is False or (wanted is None and not sys.stderr.isatty()):
        return None
    return sys.stderr


def _tool_lines(stream: IO[str] | None, redact: Callable[[str, str], str]) -> Any:
    if stream is None:
        return None
    from monoagent._cli.tool_lines import ToolLines

    return ToolLines(stream, redact)


MARKDOWN_HELP = (
    "Render answers as Markdown (needs the rich extra) or print them as plain text; default: Markdown when stdout "
    "is a terminal, rich is installed, NO_COLOR is unset and TERM is not dumb."
)

TOOL_LINES_HELP = (
    "Show each tool call as one line on stderr (name, arguments, outcome) while the answer streams; "
    "default: when stderr is a terminal. -q/--quiet hides them."
)


@cli.command()
@click.argument("text")
@click.option("-c", "--conversation", default=DEFAULT_CONVERSATION, show_default=True, help="Conversation id.")
@click.option("-m", "--model", default=None, help="'<provider>:<model>' for this turn.")
@click.option(
    "--json", "as_json", is_flag=True,
    help="Print the result as JSON instead of streaming text (with provider_steps: each step's text and tool calls).",
)
@click.option(
    "--proactive", is_flag=True,
    help="The host starts this turn, not a user (cron, heartbeat); with runtime.session.isolateProactive it runs isolated.",
)
@click.option("--tool-lines/--quiet", " /-q", "tool_lines", default=None, help=TOOL_LINES_HELP)
@click.option("--markdown/--plain", "markdown", default=None, help=MARKDOWN_HELP)
@click.option("--context", "context", default=None, help="Context for this turn only (the dynamic_context section; never stored in history).")
@click.option(
    "--context-file", "context_file", default=None, type=click.Path(dir_okay=False),
    help="Read --context from a UTF-8 file (at most 1 MiB).",
)
def run(
    text: str, conversation: str, model: str | None, as_json: bool, proactive: bool, tool_lines: bool | None,
    markdown: bool | None, context: str | None, context_file: str | None,
) -> None:
    """Run one agent turn and print the answer as it arrives (TEXT '-' reads stdin).

    The answer goes to stdout; tool lines, notices and errors go to stderr.
    """
    from monoagent._kernel.turn_request import TurnRequest

    if context_file is not None:
        context = _context_from_file(context, context_file)
    agent = _state().agent()
    _announce_default_model(agent, model)
    request = TurnRequest(
        _read_text(text), conversation_id=conversation, channel="cli", delivery="console", console="terminal", model=model,
        proactive=proactive, context=context,
    )

    if as_json:  # a script reads the steps from the JSON: no tool lines, no Markdown
        from monoagent._cli.run_steps import StepRecorder

        recorder = StepRecorder()
        printed = AnswerPrinter(sys.stdout, agent.redact)
        observe: Callable[[Any], None] = recorder
    else:
        console = None
        if markdown is not False:
            from monoagent._cli.markdown import markdown_console

            console = markdown_console(sys.stdout, markdown)
        printed = AnswerPrinter(
            sys.stdout, agent.redact, tool_lines=_tool_lines(tool_lines_stream(tool_lines), agent.redact), markdown=console
        )
        observe = printed

    import asyncio

    async def turn() -> Any:
        try:
            return await agent.respond(request, on_event=observe)
        finally:
            await agent.wait_settled()  # interrupted (Ctrl-C), the turn's account is published before the loop ends

    try:
        result = asyncio.run(turn())
    finally:
        click.echo(printed.end(), nl=False)
    if as_json:
        data = agent.unstructure(result)
        data["provider_steps"] = agent.unstructure(recorder.steps(result))
        echo_json(data)
    else:
        click.echo()


@cli.command()
@click.option("-c", "--conversation", default="cli:chat", show_default=True, help="Conversation id.")
@click.option("-m", "--model", default=None, help="'<provider>:<model>' for these turns.")
@click.option("--tool-lines/--quiet", " /-q", "tool_lines", default=None, help=TOOL_LINES_HELP)
@click.option("--markdown/--plain", "markdown", default=None, help=MARKDOWN_HELP)
def chat(conversation: str, model: str | None, tool_lines: bool | None, markdown: bool | None) -> None:
    """Chat in the terminal: one turn per line (/help lists the commands, /exit or Ctrl-D leaves)."""
    agent = _state().agent()
    _announce_default_model(agent, model)
    agent.check_selections(model)  # a bad -m or selection ends the command now (exit 2), as for run, not at the first line
    channel: Any = agent.components.new(CHANNELS, "console")
    channel.conversation_id = conversation
    channel.model = model
    channel.tool_lines = tool_lines_stream(tool_lines)
    channel.markdown = markdown
    import asyncio

    asyncio.run(channel.serve(agent))


@cli.command()
@click.argument("text")
@click.option("-c", "--conversation", default=DEFAULT_CONVERSATION, show_default=True, help="Conversation id.")
@click.option("--json", "as_json", is_flag=True, help="Print the assembled prompt, the manifest and the tools offered "
              "(name, description, input_schema; hidden ones by name and domain) as JSON.")
def prompt(text: str, conversation: str, as_json: bool) -> None:
    """Assemble and print the prompt for TEXT without calling a provider."""
    from monoagent._kernel.turn_request import TurnRequest

    agent = _state().agent()
    agent.check_selections()  # the prompt of a turn that could not run is not shown: exit 2, as run
    request = TurnRequest(_read_text(text), conversation_id=conversation, channel="cli", delivery="console", console="terminal")
    import asyncio

    turn = agent._preview_turn(request)  # kept: its tools are what the first provider round is offered
    assembled = asyncio.run(agent.harness.prepare(turn))
    if as_json:
        data = {
            "stable": assembled.stable_text,
            "boundary": assembled.boundary,
            "dynamic": assembled.dynamic_text,
            "messages": agent.unstructure(list(assembled.messages)),
            "manifest": agent.unstructure(assembled.manifest),
            "tools": [{"name": s.name, "description": s.description, "input_schema": s.input_schema} for s in turn.tools],
            "hidden_tools": [{"name": s.name, "domain": s.domain} for s in turn.hidden_tools],
        }
        echo_json(data)
        return
    echo("=== system prompt ===")
    echo(assembled.system_text)
    echo("=== messages ===")
    for message in assembled.messages:
        echo(f"--- {message.role}{f' ({message.name})' if message.name else ''} ---")
        echo(message.content)
    echo("=== manifest ===")
    echo_json(agent.unstructure(assembled.manifest))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def plugins(as_json: bool) -> None:
    """List plugins: name, version, source, status, the hooks each implements and what it registers.

    A local plugin file that failed to load (plugins.localFailures = "fatal") is listed as failed,
    then the command ends with its error and exit 3, so the listing is what diagnoses it.
    """
    state = _state()
    host = state.host()
    if state.config_error is not None:
        echo(
            "monoagent: warning: the configuration could not be read, so plugins.block and plugins.paths were not "
            f"applied to this listing: {state.config_error}",
            err=True,
        )
    if as_json:
        rows = [
            {
                "name": r.name,
                "version": r.version,
                "source": r.source,
                "location": r.location,
                "status": r.status,
                "reason": r.reason,
                "hooks": r.hooks,
                "registers": [{"kind": e.kind, "name": e.name, "description": e.description} for e in r.registrations],
            }
            for r in host.records
        ]
        echo_json(rows, ensure_ascii=True)
    else:
        _list_plugins(host)
    host.check_local()  # a local plugin file that failed: listed above, then the command ends with it (exit 3)


def _list_plugins(host: PluginHost) -> None:
    width = max((len(r.name) for r in host.records), default=4)
    for r in host.records:
        status = r.status + (f" ({r.reason})" if r.reason else "")
        echo(f"{r.name:<{width}}  {r.version or '-':<8}  {r.source:<12}  {status}")
        echo(f"{'':<{width}}  from {r.location}")
        if r.hooks:
            echo(f"{'':<{width}}  hooks: {', '.join(r.hooks)}")
        for entry in r.registrations:
            summary = entry.description.strip().split("\n")[0]
            echo(f"{'':<{width}}  {entry.kind} {entry.name}" + (f": {summary}" if summary else ""))


@cli.group()
def config() -> None:
    """Write, show and validate the configuration."""


@config.command("init")
@click.argument("path", required=False, type=click.Path(dir_okay=False), default="monoagent.toml")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def config_init(path: str, force: bool) -> None:
    """Write a commented starter config with the documented defaults."""
    from monoagent._cli.starter import starter_toml

    target = Path(path)
    if target.exists() and not force:
        raise click.ClickException(f"{target} exists; use --force to overwrite it")
    target.write_text(starter_toml(_state().host().config_sections()), encoding="utf-8")
    echo(f"wrote {target}")


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def config_show(as_json: bool) -> None:
    """Print the effective configuration with the source of every value (an unset path: where it points)."""
    from monoagent._kernel.config_keys import value_sources

    agent = _state().agent()
    rows = value_sources(agent.config)
    paths = agent.config.default_paths()
    if as_json:
        shown = {key: {"value": value, "source": source} for key, value, source in rows}
        for key, path in paths.items():
            shown[key]["resolved"] = str(path)
        echo_json(shown, ensure_ascii=True)
        return
    file = agent.config.source_file
    echo(f"# config file: {file if file else '(none: embedded defaults)'}")
    for key, value, source in rows:
        text = f"(default) {paths[key]}" if value is None and key in paths else json.dumps(value, default=str)
        echo(f"{key} = {text}  # {source}")


@config.command("validate")
def config_validate() -> None:
    """Validate the configuration and the components it selects."""
    agent = _state().agent()
    agent.check_selections()
    agent.memory_tiers()  # each tier built: a factory that fails is an error here, a warning in a turn
    file = agent.config.source_file
    echo(f"configuration is valid ({file if file else 'embedded defaults'})")


def _prescan(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """Find --config and --plugins-dir before click parses (plugins must add commands first)."""
    config: str | None = None
    dirs: list[str] = []
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--":
            break
        for name in ("--config", "--plugins-dir"):
            value = None
            if arg == name and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
            if value is not None:
                if name == "--config":
                    config = value
                else:
                    dirs.append(value)
    return config, dirs


def load_plugins(config: str | None, plugins_dirs: Sequence[str]) -> tuple[PluginHost, ConfigError | None]:
    """A fresh plugin host for one command line, with the error of a configuration it could not read.

    Plugins are loaded before click parses the arguments (they add commands), so this needs only
    the ``plugins`` settings; a configuration that cannot be read loads the plugins without
    them and the error is shown where it matters (``monoagent plugins``, or the first command
    that builds the Agent).
    """
    from monoagent._kernel.config_loading import load_raw, plugins_settings
    from monoagent._kernel.host import PluginHost, local_plugin_paths

    host = PluginHost()
    config_error: ConfigError | None = None
    try:
        raw = load_raw(config)
        settings = plugins_settings(raw)
        paths = local_plugin_paths(raw.source_file, settings.paths)
        block, local_failures = settings.block, settings.local_failures
    except ConfigError as exc:
        paths, block, local_failures = [], [], "fatal"
        config_error = exc
    host.load_entry_points(block)
    host.load_local(paths + [Path(d) for d in plugins_dirs], block, local_failures)
    return host, config_error


def build_cli(host: PluginHost | None = None, config_error: ConfigError | None = None) -> MonoagentGroup:
    """A fresh root command: the core commands of :data:`cli`, then the commands ``host``'s plugins add."""
    root = copy.copy(cli)
    root.commands = dict(cli.commands)
    root.host, root.config_error = host, config_error
    if host is not None:
        host.hooks.collect(hookspecs.register_commands, cli=root)
    return root


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: load the plugins, build the root command, run it.

    Ends with the exit code of what happened (:class:`~monoagent._kernel.errors.ExitCode`): a
    :class:`~monoagent._kernel.errors.MonoagentError` with its type's ``exit_code``, a click error
    with click's (2 for usage, 1 otherwise), Ctrl-C with 130, anything else, a bug, with 1 and
    its traceback. Each is one ``monoagent: error: ...`` message on stderr; ``--debug`` shows
    the traceback of every error above it.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    redact = host_redactor(None)
    try:
        host, config_error = load_plugins(*_prescan(argv))
        redact = host_redactor(host)
        root = build_cli(host, config_error)
        with root.make_context("monoagent", argv) as ctx:  # not root.main(): it drops ctx.exit(code) codes
            root.invoke(ctx)
    except click.exceptions.Exit as exc:  # --help, --version, ctx.exit(code)
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:
        _report_error("interrupted", exc, debug, redact)
        sys.exit(ExitCode.INTERRUPTED)
    except click.ClickException as exc:
        _show_usage(exc, redact)
        _report_error(exc.format_message(), exc, debug, redact)
        sys.exit(exc.exit_code)
    except MonoagentError as exc:
        _report_error(str(exc), exc, debug, redact)
        sys.exit(exc.exit_code)
    except BrokenPipeError:  # the reader left (`| head`): nothing to report, and nothing more to flush
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(ExitCode.FAILED)
    except Exception as exc:  # a bug, or a plugin's own exception: the traceback, cleaned like all output
        _report_error(f"{type(exc).__name__}: {exc} (an unexpected error, a bug in monoagent or in a plugin; the traceback is above)", exc, True, redact)
        sys.exit(ExitCode.FAILED)


def _show_usage(exc: click.ClickException, redact: Callable[[str, str], str]) -> None:
    """A usage error's usage line and help hint, as click prints them (its message line is ours)."""
    ctx = exc.ctx if isinstance(exc, click.UsageError) else None
    if ctx is None:
        return
    hint = ""
    if ctx.command.get_help_option(ctx) is not None:
        option = max(ctx.command.get_help_option_names(ctx), key=len)
        hint = f"Try '{ctx.command_path} {option}' for help.\n"
    echo(f"{ctx.get_usage()}\n{hint}", err=True, redact=redact)


def _report_error(message: str, exc: BaseException, traceback: bool, redact: Callable[[str, str], str]) -> None:
    """The one error line on stderr, after the traceback when asked for (``--debug``, or a bug)."""
    if traceback:
        import traceback as tb

        echo("".join(tb.format_exception(exc)).rstrip("\n"), err=True, redact=redact)
    echo(f"monoagent: error: {message}", err=True, redact=redact)


if __name__ == "__main__":  # pragma: no cover
    main()
