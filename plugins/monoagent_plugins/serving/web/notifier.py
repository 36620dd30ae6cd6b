"""The ``web`` notifier: a cron job's or a webhook's answer delivered into a new web console thread.

Named ``notify = ["web:new"]`` (no table needed under ``notify.destinations``), or by a table of
``type = "web"`` with an optional ``title``. Each answer becomes a new thread titled
``<title or channel source>`` holding one completed assistant message (the answer, its run id),
written to the console store of the agent home, where the console lists it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from monoagent import ConfigError, Notification, NotifyFailed

DESTINATION = "web:new"
TITLE_MAX = 200


class WebNotifier:
    """Delivers each notification into a new console thread."""

    name = "web"

    def __init__(self, home: Path, title: str | None = None) -> None:
        self.home = Path(home)
        self.title = title

    @classmethod
    def from_options(cls, agent: Any, options: Mapping[str, Any]) -> WebNotifier:
        unknown = sorted(set(options) - {"title"})
        if unknown:
            raise ConfigError(f"{', '.join(unknown)}: not an option of a 'web' destination; allowed: title")
        title = options.get("title")
        if title is not None and (not isinstance(title, str) or not title.strip() or len(title) > TITLE_MAX):
            raise ConfigError(f"title: {title!r} is not allowed; allowed: 1 to {TITLE_MAX} characters")
        return cls(agent.config.home, title)

    async def notify(self, notification: Notification) -> int:
        try:
            await asyncio.to_thread(self.deliver, notification)
        except Exception as exc:
            raise NotifyFailed(f"notify destination {notification.destination!r}: not written to the web console "
                               f"store: {type(exc).__name__}: {exc}") from exc
        return 1

    def deliver(self, notification: Notification) -> str:
        """Write the new thread and its message; returns the thread id."""
        from monoagent_plugins.serving.web.store import ConsoleStore

        title = self.title or " ".join(f"{notification.channel} {notification.source}".split())[:TITLE_MAX] or "Notification"
        store = ConsoleStore(self.home)
        try:
            thread = store.create_thread(title)
            store.add_message(thread["id"], "assistant", notification.text, run_id=notification.run_id)
        finally:
            store.close()
        return str(thread["id"])
