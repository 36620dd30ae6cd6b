"""The runs of one served channel: its own harness, the runs it has in flight, and their shutdown.

Every channel ``monoagent serve`` runs (openai-api, webhook, cron) holds one :class:`ChannelRuns`:
one :class:`~monoagent._pipeline.harness.Harness` per channel is what makes ``concurrency.*`` a
per-channel bound (``maxConcurrentRuns`` 4 with three channels allows 12 provider runs). The
channel submits its turns here; once the shutdown grace period is over :meth:`cancel_in_flight`
cancels what is still running (each such run publishes its continuity account, with
:data:`SHUTDOWN_REASON`), and :meth:`shutdown` waits for those accounts and closes the harness.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from monoagent import Agent, RunHandle, TurnRequest, TurnResult

SHUTDOWN_REASON = "server_shutdown"
"""The cancel reason of a run still in flight when the grace period ends (in its continuity account)."""


class ShutdownCancelled(Exception):
    """The run was cancelled because the server is shutting down (the grace period is over)."""


class ChannelRuns:
    """One channel's harness and the runs it has in flight."""

    def __init__(self, agent: Agent) -> None:
        from monoagent import Harness  # the turn path: imported when serving, not at CLI start-up

        self.agent = agent
        self.harness = Harness(agent)
        self._live: set[RunHandle] = set()
        self.accepting = True
        self.stopping = False

    @property
    def in_flight(self) -> int:
        return len(self._live)

    def submit(self, request: TurnRequest, *, on_event: Any = None) -> RunHandle:
        """Start ``request`` on this channel's harness and track it until :meth:`finish`; raises ``AdmissionRejected``,
        or :class:`ShutdownCancelled` once :meth:`stop_accepting` was called."""
        if not self.accepting:
            raise ShutdownCancelled("the server is shutting down: no new turn is accepted")
        handle = self.harness.submit(request, on_event=on_event)
        self._live.add(handle)
        return handle

    async def finish(self, handle: RunHandle) -> TurnResult:
        """Await a submitted run; :class:`ShutdownCancelled` when :meth:`cancel_in_flight` cancelled it.

        A caller that is itself cancelled (its client went away, the server stopped) cancels
        the run with :data:`SHUTDOWN_REASON` and is cancelled in turn.
        """
        try:
            return await handle
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                handle.cancel(SHUTDOWN_REASON)
                raise
            raise ShutdownCancelled("the server is shutting down: this turn was cancelled after the grace period") from None
        finally:
            self._live.discard(handle)

    async def run(self, request: TurnRequest, *, on_event: Any = None) -> TurnResult:
        """:meth:`submit` then :meth:`finish`."""
        return await self.finish(self.submit(request, on_event=on_event))

    def stop_accepting(self) -> None:
        """Refuse every later :meth:`submit` (the server received SIGTERM/SIGINT); runs in flight go on."""
        self.accepting = False

    def cancel_in_flight(self) -> int:
        """Cancel every run still in flight (the shutdown grace period is over); returns how many."""
        self.accepting = False
        self.stopping = True
        return sum(handle.cancel(SHUTDOWN_REASON) for handle in list(self._live))

    async def shutdown(self) -> None:
        """Cancel what is left, wait for the cancelled runs' continuity accounts, then close the harness."""
        self.cancel_in_flight()
        await self.harness.wait_settled()
        await self.harness.close()
