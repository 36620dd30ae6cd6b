"""Delivering a turn's final answer to the notify destinations a channel names.

A cron job or a webhook hook with ``notify = ["ops", ...]`` holds one :class:`NotifyDispatch`
(per channel). At start-up (and for ``monoagent serve --check``) it calls :meth:`NotifyDispatch.check`
for each list, so a destination that is not configured, whose ``type`` no plugin registered, or
whose notifier refuses its options is a start-up error naming the list and the destination.
After a turn it calls :meth:`NotifyDispatch.start` (a background task: a webhook's answer, a
cron tick, never waits for a receiver that retries for minutes) and, at shutdown,
:meth:`NotifyDispatch.drain` (a bounded wait, then what is left is cancelled and reported).

Outcomes are run events through ``on_run_event`` (so the ``artifacts`` plugin records them in
the run's file), carrying the run id and conversation id of the turn they deliver:
``notify_delivered`` (``destination``, ``attempts``), ``notify_failed`` (``destination``,
``error``) and ``notify_skipped`` (``destination``, ``reason`` ``"silent"``); each also has
``channel`` and ``source``. They are emitted after the run settled, so they are not numbered in
its stream: their ``seq`` is 0.

The silent-result sentinel: an answer that is exactly :data:`~monoagent._kernel.model.SILENT_RESULT`
(``NO_REPLY``), surrounding whitespace aside, delivers nothing. Only that exact text: ``NO_REPLY.``,
``no_reply`` or a sentence containing it are delivered like any answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from monoagent import (
    NOTIFIERS,
    SILENT_RESULT,
    ConfigError,
    Notification,
    Notifier,
    RunEvent,
    TurnResult,
    failure_text,
    logger,
)
from monoagent_plugins.serving.notify import NotifyConfig, NotifyDestination

if TYPE_CHECKING:
    from monoagent import Agent

IMPLICIT = {"web:new": "web"}
"""Destination names that need no table under ``notify.destinations``: the notifier type each one is (when registered)."""


def is_silent(result: TurnResult) -> bool:
    """Whether ``result`` is the silent-result sentinel (a host notice in front of it aside)."""
    text = result.text.removeprefix(result.notice) if result.notice else result.text
    return text.strip() == SILENT_RESULT


class NotifyDispatch:
    """The notify destinations of one channel's agent: checked at start-up, delivered to after each turn."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._notifiers: dict[str, Notifier] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def check(self, destinations: Sequence[str], where: str) -> None:
        """Raise :class:`ConfigError` naming ``where`` (e.g. ``"cron.jobs[0].notify"``) when a destination
        is not configured in ``notify.destinations``, its type is not a registered notifier, or its
        notifier refuses its options."""
        for name in destinations:
            self._notifier(name, where)

    def start(self, destinations: Sequence[str], result: TurnResult, *, channel: str, source: str) -> asyncio.Task[None]:
        """:meth:`deliver` as a background task, tracked until it ends so :meth:`drain` can wait for it."""
        task = asyncio.get_running_loop().create_task(self.deliver(destinations, result, channel=channel, source=source),
                                                      name=f"notify {result.run_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def drain(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for the deliveries :meth:`start` began, then cancel the rest (each emits
        ``notify_failed``); returns how many were cancelled."""
        pending = set(self._tasks)
        if not pending:
            return 0
        _, late = await asyncio.wait(pending, timeout=max(timeout_s, 0.0))
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)
            logger.warning("notify: {} delivery task(s) still running at shutdown were cancelled", len(late))
        return len(late)

    async def deliver(self, destinations: Sequence[str], result: TurnResult, *, channel: str, source: str) -> None:
        """Deliver ``result.text`` to each destination, at once, unless it is exactly ``SILENT_RESULT``
        (whitespace aside). Never raises: a notifier's ``NotifyFailed``, or any error, becomes a
        ``notify_failed`` event and a log line. Emits ``notify_delivered`` / ``notify_failed`` /
        ``notify_skipped`` with the run id of ``result``."""
        if not destinations:
            return
        if is_silent(result):
            for name in destinations:
                self._emit("notify_skipped", result, destination=name, reason="silent", channel=channel, source=source)
            return
        created = time.time()
        await asyncio.gather(*(self._deliver_one(name, result, channel, source, created) for name in destinations))

    async def _deliver_one(self, name: str, result: TurnResult, channel: str, source: str, created: float) -> None:
        common = {"destination": name, "channel": channel, "source": source}
        try:
            notifier = self._notifier(name, f"{channel} {source!r} notify")
            attempts = await notifier.notify(Notification(result.text, channel, source, name, result.conversation_id,
                                                          result.run_id, created))
        except asyncio.CancelledError:
            self._failed(result, "cancelled at shutdown before it was delivered", common)
            raise
        except Exception as exc:
            self._failed(result, failure_text(exc), common)
        else:
            self._emit("notify_delivered", result, attempts=attempts if isinstance(attempts, int) else 1, **common)

    def _failed(self, result: TurnResult, error: str, common: dict[str, Any]) -> None:
        logger.warning("notify: run {} of {} {!r} not delivered to {!r}: {}", result.run_id, common["channel"],
                       common["source"], common["destination"], error)
        self._emit("notify_failed", result, error=error, **common)

    def _notifier(self, name: str, where: str) -> Notifier:
        notifier = self._notifiers.get(name)
        if notifier is not None:
            return notifier
        from monoagent_plugins.serving.notify import destination_options

        configured = self.agent.config.section("notify", NotifyConfig).destinations
        destination = configured.get(name)
        if destination is None and name in IMPLICIT and IMPLICIT[name] in self.agent.components.registered(NOTIFIERS):
            destination = NotifyDestination(type=IMPLICIT[name])  # web:new: no table needed
        if destination is None:
            known = ", ".join(sorted(configured)) or "none are configured"
            raise ConfigError(f"{where}: {name!r} is not a notify destination; allowed: a name under "
                              f"notify.destinations ({known})")
        registry = self.agent.components.registered(NOTIFIERS)
        kind = registry.get(destination.type)
        if kind is None:
            raise ConfigError(f"notify.destinations.{name}.type: {destination.type!r} is not a registered notifier "
                              f"(named by {where}); allowed: {', '.join(sorted(registry)) or 'none'}")
        options = destination_options(name, destination, self.agent.env)
        try:
            notifier = kind.factory(agent=self.agent, options=options)
        except ConfigError as exc:
            raise ConfigError([f"notify.destinations.{name}.{problem} (named by {where})" for problem in exc.problems]) from None
        except Exception as exc:
            raise ConfigError(f"notify.destinations.{name} (named by {where}): the {destination.type!r} notifier "
                              f"could not be built: {failure_text(exc)}") from exc
        if not isinstance(notifier, Notifier):
            raise ConfigError(f"notify.destinations.{name} (named by {where}): the {destination.type!r} notifier's "
                              f"factory returned {type(notifier).__name__}, which has no async notify(notification)")
        self._notifiers[name] = notifier
        return notifier

    def _emit(self, type: str, result: TurnResult, **data: Any) -> None:
        event = RunEvent(type, result.run_id, result.conversation_id, 0, time.time(), data)
        self.agent.publish_event(event)
