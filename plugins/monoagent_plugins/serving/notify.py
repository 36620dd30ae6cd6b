"""The bundled plugin ``notify``: notify destinations, and the ``webhook`` and ``file`` notifiers.

A request-driven channel (a cron job, a webhook hook) that names destinations in its ``notify``
list delivers its turn's successful final answer to each of them through
:class:`~monoagent_plugins.serving.notify_dispatch.NotifyDispatch`. Destinations are named tables
of the ``notify`` section (``[notify.destinations.ops]``); each has a ``type``, the name of a
notifier registered through ``register_notifiers``. This plugin registers two:

- ``webhook``: POST the answer as JSON to ``url``, signed with HMAC-SHA256 under ``secret``
  (:mod:`monoagent_plugins.serving.signatures`), retried with backoff
  (:class:`~monoagent_plugins.serving.notifiers.WebhookNotifier`);
- ``file``: append one JSON line per answer to ``path``
  (:class:`~monoagent_plugins.serving.notifiers.FileNotifier`).

The notifiers' modules (and httpx) are imported when a destination is built, not at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from monoagent import ComponentRegistrar, ConfigSectionRegistrar, Notifier, hookimpl, setting
from monoagent import camel_case as camel

if TYPE_CHECKING:
    from monoagent import Agent
    from monoagent_plugins.serving.notifiers import FileNotifier, WebhookNotifier

SECRET_ENV_PREFIX = "MONO_AGENT_NOTIFY_SECRET_"
"""``MONO_AGENT_NOTIFY_SECRET_<NAME>`` holds ``notify.destinations.<name>.secret`` (and wins over the file)."""


@attrs.define
class NotifyDestination:
    """One notify destination: where a notifying turn's final answer goes, and how."""

    type: str = setting(doc="The notifier that delivers here: 'webhook', 'file', or one a plugin registers.")
    url: str | None = setting(None, doc="webhook: the http:// or https:// URL the answer is POSTed to.")
    secret: str | None = setting(None, doc="webhook: the HMAC-SHA256 signing secret (required); env: MONO_AGENT_NOTIFY_SECRET_<NAME>.",
                                 secret=True)
    path: str | None = setting(None, doc="file: the JSONL file answers are appended to (relative to the config file's directory).")
    max_attempts: int | None = setting(None, doc="webhook: attempts before giving up (default 5).", min=1, max=20)
    timeout_ms: int | None = setting(None, doc="webhook: timeout of each attempt in milliseconds (default 10000).",
                                     min=100, max=600_000)
    options: dict[str, Any] = setting(doc="Free options for a notifier a plugin registers (passed to its factory).", factory=dict)


@attrs.define
class NotifyConfig:
    """notify: the destinations cron jobs and webhook hooks name in their ``notify`` lists."""

    destinations: dict[str, NotifyDestination] = setting(
        doc="Notify destinations by name, each a table with its type ([notify.destinations.ops] type = 'webhook').",
        factory=dict)


def destination_options(name: str, destination: NotifyDestination, env: Any) -> dict[str, Any]:
    """What a notifier's factory receives: the keys the user set (camelCase, ``type`` left out,
    ``options`` merged in), with the secret from ``MONO_AGENT_NOTIFY_SECRET_<NAME>`` when set."""
    options: dict[str, Any] = dict(destination.options)
    for field in attrs.fields(NotifyDestination):
        value = getattr(destination, field.name)
        if field.name not in ("type", "options") and value is not None:
            options[camel(field.name)] = value
    secret = env.get(secret_env(name))
    if secret:
        options["secret"] = secret
    return options


def secret_env(name: str) -> str:
    """The environment variable holding destination ``name``'s secret (``ops-2`` -> ``MONO_AGENT_NOTIFY_SECRET_OPS_2``)."""
    return SECRET_ENV_PREFIX + "".join(c if c.isascii() and c.isalnum() else "_" for c in name.upper())


def webhook_notifier(*, agent: Agent, options: dict[str, Any]) -> WebhookNotifier:
    from monoagent_plugins.serving.notifiers import WebhookNotifier

    return WebhookNotifier.from_options(options)


def file_notifier(*, agent: Agent, options: dict[str, Any]) -> FileNotifier:
    from monoagent_plugins.serving.notifiers import FileNotifier

    return FileNotifier.from_options(options, agent.config.resolve)


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("notify", NotifyConfig)


@hookimpl(trylast=True)
def register_notifiers(register: ComponentRegistrar[Notifier]) -> None:
    register("webhook", webhook_notifier, description="POST the answer as signed JSON (HMAC-SHA256), retried with backoff")
    register("file", file_notifier, description="append one JSON line per answer to a file")
