"""The bundled plugin ``serve``: ``monoagent serve`` runs every enabled HTTP channel in one process.

Channels come from ``register_channels``; those that are
:class:`~monoagent._kernel.interfaces.ServedChannel` and enabled in their own config section
are mounted on one Starlette application served by uvicorn on one asyncio loop
(:func:`~monoagent_plugins.serving.http.serve_channels`). Each channel keeps its own harness,
so the concurrency limits apply per channel. The ``serve`` section holds what the server owns:
where it listens, the request body cap and the shutdown grace period.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn

import attrs
import click

from monoagent import (
    CHANNELS,
    AgentComponents,
    CheckedChannel,
    ComponentError,
    ConfigError,
    ConfigSectionRegistrar,
    ExitCode,
    ServedChannel,
    command_agent,
    echo,
    hookimpl,
    logger,
    run_async,
    setting,
)

if TYPE_CHECKING:
    from monoagent import Agent
    from monoagent_plugins.serving.guard import GuardLimits


def _check_networks(value: list[str]) -> str | None:
    import ipaddress

    for item in value:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            return f"{item!r} is not an IP address or network (allowed: addresses such as 10.0.0.5 or networks such as 10.0.0.0/24)"
    return None


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
    forwarded_allow_ips: list[str] = setting(
        doc="Peers trusted to set X-Forwarded-For / X-Forwarded-Proto (a reverse proxy): addresses or networks "
            "(env: comma-separated); empty: the headers are ignored.",
        env="MONO_AGENT_SERVE_FORWARDED_ALLOW_IPS", factory=lambda: ["127.0.0.1", "::1"], check=_check_networks)
    allow_unauthenticated: bool = setting(False, doc="Serve channels that have no credentials, on a loopback address only "
                                          "(a non-loopback bind always needs every channel's credentials).",
                                          env="MONO_AGENT_SERVE_ALLOW_UNAUTHENTICATED")
    header_timeout_ms: int = setting(10_000, doc="How long a client may take to send a request's line and headers (from the "
                                     "connection's opening, or a kept-alive request's first byte); later: 408, connection closed.",
                                     env="MONO_AGENT_SERVE_HEADER_TIMEOUT_MS", min=100, max=600_000)
    body_timeout_ms: int = setting(30_000, doc="How long an authenticated request's body may take to arrive in full, from the "
                                   "end of its headers; later: 408, connection closed.",
                                   env="MONO_AGENT_SERVE_BODY_TIMEOUT_MS", min=100, max=600_000)
    unauthenticated_body_timeout_ms: int = setting(
        5_000, doc="The same for a body read before its credential is checked (a webhook's signature is over its body).",
        env="MONO_AGENT_SERVE_UNAUTHENTICATED_BODY_TIMEOUT_MS", min=100, max=600_000)
    max_unauthenticated_connections: int = setting(
        64, doc="Connections open at once that have not presented an accepted credential; one more evicts the oldest "
                "of them (answered 503 with Retry-After: 1). Authenticated connections do not count.",
        env="MONO_AGENT_SERVE_MAX_UNAUTHENTICATED_CONNECTIONS", min=1, max=100_000)

    def guard_limits(self) -> GuardLimits:
        """The connection guard's limits (:mod:`monoagent_plugins.serving.guard`), in seconds."""
        from monoagent_plugins.serving.guard import GuardLimits

        return GuardLimits(self.header_timeout_ms / 1000, self.body_timeout_ms / 1000,
                           self.unauthenticated_body_timeout_ms / 1000, self.max_unauthenticated_connections)


def enabled_channels(agent: Agent) -> list[ServedChannel]:
    """The enabled HTTP channels of ``agent``, made by their registered factories, in name order.

    Raises the :class:`ConfigError` of :func:`build_channels` when a channel cannot be made.
    """
    channels, problems = build_channels(agent)
    if problems:
        raise ConfigError(problems)
    return channels


def build_channels(agent: Agent) -> tuple[list[ServedChannel], list[str]]:
    """Every enabled HTTP channel of ``agent`` that could be made, and one problem line for each that could not.

    A channel that is not a :class:`~monoagent._kernel.interfaces.ServedChannel` (the console) is
    not served. One that has some of its members but not all is refused when it is built
    (:class:`ComponentError` naming what it lacks), which is a problem here, rather than a channel
    silently left unserved; so is a factory's or a ``check()``'s :class:`ConfigError`.
    """
    channels: list[ServedChannel] = []
    problems: list[str] = []
    for name in sorted(agent.components.registered(CHANNELS)):
        try:
            channel = agent.components.new(CHANNELS, name)
        except ConfigError as exc:
            problems.extend(f"channel {name!r}: {problem}" for problem in exc.problems)
            continue
        except ComponentError as exc:
            problems.append(str(exc))
            continue
        if agent.components.supports(channel, ServedChannel) and channel.enabled:
            channels.append(channel)
    return channels, problems


def check_lines(agent: Agent, channel: ServedChannel) -> list[str]:
    """What ``channel`` says it would do (a :class:`~monoagent._kernel.interfaces.CheckedChannel`'s ``check()``;
    none for another channel); raises its :class:`ConfigError`."""
    components: AgentComponents = agent.components
    return [str(line) for line in channel.check()] if components.supports(channel, CheckedChannel) else []


def route_lines(channel: Any) -> list[str]:
    """``METHOD /path`` for each route of ``channel`` (HEAD, implied by GET, left out)."""
    lines = []
    for route in channel.routes():
        methods = sorted(set(getattr(route, "methods", None) or ()) - {"HEAD"}) or ["*"]
        lines.append(f"{'|'.join(methods)} {getattr(route, 'path', route)}")
    return lines


NO_CHANNEL = ("no channel is enabled: set openaiApi.enabled = true (MONO_AGENT_OPENAI_API_ENABLED=1), "
              "webhook.enabled = true with a hook in webhook.hooks, a job in cron.jobs, or web.enabled = true "
              "(or run monoagent web)")


def check_report(agent: Agent, host: str, port: int) -> tuple[list[str], list[str]]:
    """``monoagent serve --check``: the lines saying what would listen where, and the problems found.

    Nothing is bound and no turn runs: every enabled channel is made and asked for its routes and
    its own ``check()``, and the bind is checked against the channels' credentials.
    """
    from monoagent_plugins.serving.http import bind_problems

    settings = agent.config.section("serve", ServeConfig)
    channels, problems = build_channels(agent)
    if not channels and not problems:
        problems.append(NO_CHANNEL)
    problems.extend(bind_problems(host, channels, settings.allow_unauthenticated))
    lines = [f"would listen on http://{host}:{port}", "  server: GET /healthz, GET /readyz"]
    for channel in channels:
        credentials = "" if channel.has_credentials else " (WITHOUT credentials: serve.allowUnauthenticated)"
        lines.append(f"  {channel.name}{credentials}")
        lines.extend(f"    {line}" for line in route_lines(channel))
        try:
            lines.extend(f"    {line}" for line in check_lines(agent, channel))
        except ConfigError as exc:
            problems.extend(f"channel {channel.name!r}: {problem}" for problem in exc.problems)
    return lines, problems


@click.command("serve")
@click.option("--host", default=None, help="Address to bind (serve.host; default 127.0.0.1).")
@click.option("--port", default=None, type=click.IntRange(0, 65535), help="TCP port (serve.port; 0 = any free port).")
@click.option("--check", "check_only", is_flag=True,
              help="Validate the channel configuration and print what would listen where; bind nothing, run no turn.")
@click.option("--log-json", is_flag=True, help="Log every line as one JSON object (access log included), for a log collector.")
def serve_command(host: str | None, port: int | None, check_only: bool, log_json: bool) -> None:
    """Serve every enabled channel over HTTP until SIGTERM or Ctrl-C."""
    from monoagent import configure_server_log

    configure_server_log(json=log_json)

    def refuse(message: str) -> NoReturn:
        if log_json:
            logger.error("serve: {}", message)
            sys.exit(ExitCode.FAILED)
        raise click.ClickException(message)  # exit 1, "monoagent: error: ..." (docs/cli.md)

    try:
        import starlette  # noqa: F401  (the serve extra)
        import uvicorn  # noqa: F401
    except ImportError as exc:
        from monoagent import missing_extra

        refuse(missing_extra("serve", "monoagent serve", exc))
    if check_only:
        check_command(host, port)
        return
    agent = command_agent("serve")
    agent.check_selections()  # a component the configuration names and no plugin registers: exit 2 before listening
    settings = agent.config.section("serve", ServeConfig)
    bind_host = settings.host if host is None else host
    bind_port = settings.port if port is None else port
    from monoagent_plugins.serving.http import check_bind

    try:
        channels = enabled_channels(agent)
        if not channels:
            refuse(NO_CHANNEL)
        unauthenticated = check_bind(bind_host, channels, settings.allow_unauthenticated)
    except ConfigError as exc:
        refuse(str(exc))
    if unauthenticated:
        logger.warning("serve: {} served WITHOUT credentials (serve.allowUnauthenticated, loopback only): any local "
                       "process can run turns", ", ".join(unauthenticated))

    def on_listening(bound_host: str, bound_port: int) -> None:
        names = ", ".join(c.name for c in channels)
        click.echo(f"monoagent serve: listening on http://{bound_host}:{bound_port} ({names})", err=False)

    async def serve() -> None:
        from monoagent_plugins.serving.http import serve_channels

        try:
            await serve_channels(channels, bind_host, bind_port, settings.shutdown_grace_ms / 1000, on_listening,
                                 forwarded_allow_ips=settings.forwarded_allow_ips, limits=settings.guard_limits())
        finally:
            await agent.aclose()

    try:
        run_async(serve())
    except ConfigError as exc:
        refuse(str(exc))


def check_command(host: str | None, port: int | None) -> None:
    """``serve --check``: print the report and exit 0, or the problems (stderr) and exit 1 (docs/serving.md)."""
    try:
        agent = command_agent("serve")
        settings = agent.config.section("serve", ServeConfig)
        lines, problems = check_report(agent, settings.host if host is None else host, settings.port if port is None else port)
    except ConfigError as exc:
        lines, problems = [], exc.problems
    else:
        try:
            agent.check_selections()
        except ConfigError as exc:
            problems.extend(exc.problems)
        except ComponentError as exc:
            problems.append(str(exc))
    if problems:
        echo(f"monoagent: error: serve --check: {len(problems)} problem(s)", err=True)
        for problem in problems:
            echo(f"  - {problem}", err=True)
        sys.exit(ExitCode.FAILED)
    echo("monoagent serve --check: the configuration is valid")
    for line in lines:
        echo(line)


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("serve", ServeConfig)


@hookimpl(trylast=True)
def register_commands(cli: click.Group) -> None:
    cli.add_command(serve_command)
