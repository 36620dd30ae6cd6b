"""The bundled plugin ``serve``: ``monoagent serve`` runs every enabled HTTP channel in one process.

Channels come from ``register_channels``; those that are
:class:`~monoagent_plugins.lib.http_serving.HttpChannel` and enabled in their own config section
are mounted on one Starlette application served by uvicorn on one asyncio loop
(:func:`~monoagent_plugins.lib.http_serving.serve_channels`). Each channel keeps its own harness,
so the concurrency limits apply per channel. The ``serve`` section holds what the server owns:
where it listens, the request body cap and the shutdown grace period.
"""

from __future__ import annotations

from typing import Any

import attrs
import click

from monoagent.kernel.config import setting
from monoagent.kernel.errors import ConfigError
from monoagent.kernel.host import bundled_impl
from monoagent.kernel.log import logger
from monoagent.kernel.registrars import ConfigSectionRegistrar
from monoagent_plugins.lib.command_line import command_agent, run

HTTP_CHANNEL_MEMBERS = ("name", "enabled", "has_credentials", "credential_hint", "routes", "start", "cancel_in_flight", "shutdown")
"""The members of :class:`~monoagent_plugins.lib.http_serving.HttpChannel`, named when a channel misses one."""


@attrs.define
class ServeConfig:
    """serve: where ``monoagent serve`` listens and how it bounds requests and shutdown."""

    host: str = setting("127.0.0.1", doc="Address to bind; an address other than loopback needs every channel to have credentials.",
                        env="MONO_AGENT_SERVE_HOST")
    port: int = setting(8080, doc="TCP port to bind (0: any free port, printed at start-up).", env="MONO_AGENT_SERVE_PORT",
                        min=0, max=65535)
    max_body_bytes: int = setting(1_048_576, doc="Largest request body accepted, in bytes; a larger one is answered 413.",
                                  env="MONO_AGENT_SERVE_MAX_BODY_BYTES", min=1024, max=67_108_864)
    shutdown_grace_ms: int = setting(10_000, doc="On SIGTERM/SIGINT, how long turns in flight may run on before they are cancelled.",
                                     env="MONO_AGENT_SERVE_SHUTDOWN_GRACE_MS", min=0, max=600_000)
    allow_unauthenticated: bool = setting(False, doc="Serve channels that have no credentials, on a loopback address only "
                                          "(a non-loopback bind always needs every channel's credentials).",
                                          env="MONO_AGENT_SERVE_ALLOW_UNAUTHENTICATED")


def enabled_channels(agent: Any) -> list[Any]:
    """The enabled HTTP channels of ``agent``, made by their registered factories, in name order.

    A channel without ``routes`` (the console) is not served. One that has ``routes`` but misses
    another member of :class:`~monoagent_plugins.lib.http_serving.HttpChannel` is a
    :class:`ConfigError` naming what it lacks, rather than a channel silently left unserved.
    """
    from monoagent_plugins.lib.http_serving import HttpChannel

    channels = []
    registry = agent.host.components["channel"]
    for name in sorted(registry):
        channel = registry[name].factory(agent=agent)
        if isinstance(channel, HttpChannel):
            if channel.enabled:
                channels.append(channel)
        elif hasattr(channel, "routes") and getattr(channel, "enabled", False):
            missing = [member for member in HTTP_CHANNEL_MEMBERS if not hasattr(channel, member)]
            raise ConfigError(f"channel {name!r} (plugin {registry[name].plugin}) is enabled but is not a complete "
                              f"HTTP channel: it lacks {', '.join(missing)}")
    return channels


@click.command("serve")
@click.option("--host", default=None, help="Address to bind (serve.host; default 127.0.0.1).")
@click.option("--port", default=None, type=click.IntRange(0, 65535), help="TCP port (serve.port; 0 = any free port).")
def serve_command(host: str | None, port: int | None) -> None:
    """Serve every enabled channel over HTTP until SIGTERM or Ctrl-C."""
    try:
        import uvicorn  # noqa: F401  (the serve extra)
    except ImportError as exc:
        raise click.ClickException(f"monoagent serve needs the serve extra: pip install 'monoagent[serve]' ({exc})") from None
    agent = command_agent("serve")
    settings: ServeConfig = agent.config.section("serve")
    channels = enabled_channels(agent)
    if not channels:
        raise click.ClickException("no channel is enabled: set openaiApi.enabled = true (or MONO_AGENT_OPENAI_API_ENABLED=1)")
    bind_host = settings.host if host is None else host
    bind_port = settings.port if port is None else port
    from monoagent_plugins.lib.http_serving import check_bind

    try:
        unauthenticated = check_bind(bind_host, channels, settings.allow_unauthenticated)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if unauthenticated:
        logger.warning("serve: {} served WITHOUT credentials (serve.allowUnauthenticated, loopback only): any local "
                       "process can run turns", ", ".join(unauthenticated))

    def on_listening(bound_host: str, bound_port: int) -> None:
        names = ", ".join(c.name for c in channels)
        click.echo(f"monoagent serve: listening on http://{bound_host}:{bound_port} ({names})", err=False)

    async def serve() -> None:
        from monoagent_plugins.lib.http_serving import serve_channels

        try:
            await serve_channels(channels, bind_host, bind_port, settings.shutdown_grace_ms / 1000, on_listening)
        finally:
            await agent.aclose()

    try:
        run(serve())
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


@bundled_impl
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("serve", ServeConfig)


@bundled_impl
def register_commands(cli: click.Group) -> None:
    cli.add_command(serve_command)
