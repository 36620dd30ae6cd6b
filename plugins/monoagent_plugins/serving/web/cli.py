"""``monoagent web`` (the web console alone on loopback) and ``monoagent web reset --all --yes``."""

from __future__ import annotations

import secrets
import sys

import attrs
import click

from monoagent import ConfigError, ExitCode, command_agent, echo, logger, run_async

HOST = "127.0.0.1"


def start(port: int) -> None:
    """Serve only the ``web`` channel on 127.0.0.1:``port`` and print ``Open http://127.0.0.1:<port>/web/#token=<token>``.

    With ``web.tokens`` empty a random token is made for this start (it lives as long as the process;
    sessions signed in with it last ``web.sessionTtlHours``). With tokens configured the URL carries
    none: sign in with one of them.
    """
    from monoagent import configure_server_log

    configure_server_log(json=False)
    try:
        import starlette  # noqa: F401  (the serve extra)
        import uvicorn  # noqa: F401
    except ImportError as exc:
        from monoagent import missing_extra

        raise click.ClickException(missing_extra("serve", "monoagent web", exc)) from None
    agent = command_agent("web")
    agent.check_selections()
    from monoagent_plugins.serving.serve import ServeConfig
    from monoagent_plugins.serving.web.channel import WebChannel

    channel = WebChannel(agent)
    token = None
    if not channel.settings.tokens:
        token = secrets.token_urlsafe(24)
        channel.settings = attrs.evolve(channel.settings, tokens=[token])
    channel.enabled = channel.has_credentials = True
    settings = agent.config.section("serve", ServeConfig)

    def on_listening(host: str, bound_port: int) -> None:
        fragment = f"#token={token}" if token else ""
        click.echo(f"monoagent web: listening on http://{host}:{bound_port} (web)")
        click.echo(f"Open http://{host}:{bound_port}/web/{fragment}" + ("" if token else "  (sign in with a token of web.tokens)"))
        sys.stdout.flush()

    async def serve() -> None:
        from monoagent_plugins.serving.http import serve_channels

        try:
            await serve_channels([channel], HOST, port, settings.shutdown_grace_ms / 1000, on_listening,
                                 forwarded_allow_ips=[], limits=settings.guard_limits())
        finally:
            await agent.aclose()

    try:
        run_async(serve())
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def reset(everything: bool, yes: bool) -> None:
    """Delete the console store of the agent home; exit 1 when refused (no --all/--yes, or a server runs on it)."""
    from monoagent_plugins.serving.web.store import ConsoleStoreError, remove_store, store_path

    if not everything:
        raise click.UsageError("say what to reset: --all (the whole console store; there is no finer reset yet)")
    agent = command_agent("web")
    home = agent.config.home
    if not yes:
        raise click.UsageError(f"this deletes every thread of {store_path(home)}: add --yes to confirm")
    try:
        removed = remove_store(home)
    except ConsoleStoreError as exc:
        echo(f"monoagent: error: web reset: {exc}", err=True)
        sys.exit(ExitCode.FAILED)
    if removed:
        logger.info("web: the console store under {} was deleted", home)
        echo(f"Deleted the console store {store_path(home).parent} (threads, messages, receipts, sessions).")
    else:
        echo(f"No console store under {home}; nothing to delete.")
