"""The bundled plugin ``web``: the web console, a page to talk to the composed agent in threads.

The ``web`` channel of ``monoagent serve`` (:mod:`monoagent_plugins.serving.web.channel`, off by
default: ``web.enabled``) serves the page under ``/web/`` and its API under ``/web/api``; the
console store (:mod:`monoagent_plugins.serving.web.store`) keeps threads, messages, submission
receipts and browser sessions under the agent home. ``monoagent web`` starts just this channel on
loopback and prints the URL to open (a token made up when ``web.tokens`` is empty);
``monoagent web reset --all --yes`` deletes the console store. The notifier ``web`` (the notify
destination ``web:new``) delivers a cron job's or a webhook's answer into a new console thread.
The channel's modules, Starlette and the store are imported only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import click

from monoagent import Channel, ComponentRegistrar, ConfigSectionRegistrar, Notifier, hookimpl, setting

if TYPE_CHECKING:
    from monoagent import Agent
    from monoagent_plugins.serving.web.channel import WebChannel
    from monoagent_plugins.serving.web.notifier import WebNotifier


@attrs.define
class WebConfig:
    """web: the web console (the ``web`` channel of ``monoagent serve``, and ``monoagent web``)."""

    enabled: bool = setting(False, doc="Serve the web console under /web/ (monoagent web turns it on by itself).",
                            env="MONO_AGENT_WEB_ENABLED")
    tokens: list[str] = setting(doc="Tokens a browser signs in with (exchanged for a session cookie); env: "
                                    "comma-separated. Empty: monoagent web makes one per start.",
                                env="MONO_AGENT_WEB_TOKENS", factory=list, secret=True)
    session_ttl_hours: int = setting(24 * 14, doc="How long a signed-in browser session lasts, in hours.",
                                     env="MONO_AGENT_WEB_SESSION_TTL_HOURS", min=1, max=24 * 366)
    title: str = setting("monoagent", doc="The agent's name the page shows.", env="MONO_AGENT_WEB_TITLE")
    keepalive_seconds: float = setting(15.0, doc="How often an idle event stream sends a keepalive comment, in seconds.",
                                       env="MONO_AGENT_WEB_KEEPALIVE_SECONDS", min=0.05, max=300)


def web_channel(agent: Agent) -> WebChannel:
    from monoagent_plugins.serving.web.channel import WebChannel

    return WebChannel(agent)


def web_notifier(*, agent: Agent, options: dict[str, Any]) -> WebNotifier:
    from monoagent_plugins.serving.web.notifier import WebNotifier

    return WebNotifier.from_options(agent, options)


@click.group("web", invoke_without_command=True)
@click.option("--port", default=0, type=click.IntRange(0, 65535), show_default=True,
              help="TCP port on 127.0.0.1 (0: any free port).")
@click.pass_context
def web_command(context: click.Context, port: int) -> None:
    """Start the web console on 127.0.0.1 and print the URL to open (until Ctrl-C)."""
    if context.invoked_subcommand is not None:
        return
    from monoagent_plugins.serving.web.cli import start

    start(port)


@web_command.command("reset")
@click.option("--all", "everything", is_flag=True, help="Delete the whole console store (every thread).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def reset_command(everything: bool, yes: bool) -> None:
    """Delete the web console store (threads, messages, receipts, sessions); nothing else. Refused while it is served."""
    from monoagent_plugins.serving.web.cli import reset

    reset(everything, yes)


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("web", WebConfig)


@hookimpl(trylast=True)
def register_channels(register: ComponentRegistrar[Channel]) -> None:
    register("web", web_channel, description="the web console (GET /web/), served by monoagent serve or monoagent web")


@hookimpl(trylast=True)
def register_notifiers(register: ComponentRegistrar[Notifier]) -> None:
    register("web", web_notifier, description="deliver the answer into a new web console thread (destination web:new)")


@hookimpl(trylast=True)
def register_commands(cli: click.Group) -> None:
    cli.add_command(web_command)
