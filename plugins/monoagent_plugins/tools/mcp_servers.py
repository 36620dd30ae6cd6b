"""One configured MCP server as the agent uses it: started on first need, bounded at every await, restarted after a crash.

:class:`McpServer` holds the connection to one ``mcp.servers.<name>`` entry through the official
SDK's ``mcp.Client`` (over ``stdio_client`` for ``command``, ``streamable_http_client`` for
``url``). The SDK's transports are anyio task groups that must be entered and left in one task, so
the connection lives in a task of its own (:meth:`McpServer._hold`) that connects, lists the tools,
hands the client over and waits to be told to close; calls go through the client from the turn's
task. The task belongs to the event loop that started it: a later loop (``Agent.run_sync`` runs
each turn in a fresh one, whose end cancels the task and so stops the server) connects afresh.

Every await is bounded: connecting and listing by ``startupTimeoutMs``, a call by ``timeoutMs``,
closing by :data:`CLOSE_TIMEOUT_S`. A server that fails to start, times out or crashes is one
line in the log, a ``runtime_warning`` event when there is a turn, and an ``error`` (or
``timeout``) result to the model; after a crash the next call starts it again, at most once per
``restartIntervalMs``.

This module imports the SDK (the ``mcp`` extra); the ``mcp`` plugin imports it only when a server
is configured, and reports an ``ImportError`` as a failed tool source naming the extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from monoagent import Tool, ToolContext, ToolResult, ToolSourceFailure, ToolStatus, logger
from monoagent_plugins.tools.mcp_tools import SkippedTool, tool_result, tool_spec

if TYPE_CHECKING:
    from monoagent import Turn
    from monoagent_plugins.tools.mcp import McpServerConfig

CLOSE_TIMEOUT_S = 10.0
"""How long closing one server may take (the SDK stops a stdio server in about 2 s, killing it at worst)."""

LIST_MAX_PAGES = 32
"""Pages of ``tools/list`` read from one server; a server that paginates forever cannot hang start-up."""

LIST_MAX_TOOLS = 512
"""Tools taken from one server; the rest are skipped with a warning."""

CALL_GRACE_S = 1.0
"""Beyond ``timeoutMs``, how long the plugin waits for the SDK's own timeout before it gives up itself."""


class McpServerUnavailable(Exception):
    """An MCP server that could not be started or listed; the message is the one line the user sees."""


def _reason(exc: BaseException) -> str:
    """One line for ``exc``: an ExceptionGroup's first leaf, the SDK error's message, the type otherwise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


def _abandon(ready: asyncio.Future[Any]) -> None:
    """Nobody waits for ``ready`` any more: cancel it, or read its outcome, so asyncio reports no exception never retrieved."""
    if not ready.cancel() and not ready.cancelled():
        ready.exception()


class McpServer:
    """The connection to one MCP server (see the module docstring).

    ``clock`` (seconds, monotonic) times the restart interval; tests may inject one. ``cwd`` is
    where a stdio server runs (the plugin passes ``cwd`` resolved against the config file's
    directory, or that directory).
    """

    def __init__(
        self, name: str, settings: McpServerConfig, clock: Callable[[], float] = time.monotonic, *, cwd: Path | None = None
    ) -> None:
        self.name = name
        self.settings = settings
        self.cwd = cwd if cwd is not None else settings.cwd
        self.source = f"mcp:{name}"
        self.tools: tuple[Tool, ...] = ()
        self.failure: str | None = None
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._client: Any = None
        self._started_at: float | None = None

    # ------------------------------------------------------------------ connecting

    @property
    def connected(self) -> bool:
        return self._client is not None and self._task is not None and not self._task.done()

    async def offered(self, turn: Turn | None) -> tuple[Tool, ...] | ToolSourceFailure:
        """The server's tools, connecting first if needed; a :class:`ToolSourceFailure` when it never listed any.

        A server that listed its tools once and is down now keeps offering them: a call then
        answers with the failure (and restarts the server when the interval allows). A failure
        returned as a ``ToolSourceFailure`` is reported by the caller (the harness, ``monoagent
        tools``), so it is not reported here as well.
        """
        failure = await self.ensure(turn, report=bool(self.tools))
        return ToolSourceFailure(self.source, failure) if failure is not None and not self.tools else self.tools

    async def ensure(self, turn: Turn | None, *, report: bool = True) -> str | None:
        """Connect unless connected; None when connected, else why not (a failed attempt is reported when ``report``).

        A start is attempted at most once per ``restartIntervalMs``; within the interval the last
        failure is the answer. A new event loop starts afresh: its predecessor's connection ended with it.
        """
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._lock, self._task, self._client = loop, asyncio.Lock(), None, None
            self._started_at = self.failure = None
        async with self._lock:
            if self.connected:
                return None
            interval_ms = self.settings.restart_interval_ms
            if self._started_at is not None and self._clock() - self._started_at < interval_ms / 1000:
                return self.failure or (
                    f"MCP server {self.name!r} stopped; it is started again at most once per {interval_ms} ms "
                    f"(mcp.servers.{self.name}.restartIntervalMs)"
                )
            self._started_at = self._clock()
            try:
                await self._start()
            except McpServerUnavailable as exc:
                self.failure = str(exc)
                if report:
                    self._report(turn, "mcp_server_unavailable", self.failure)
                return self.failure
            self.failure = None
            return None

    async def _start(self) -> None:
        timeout_ms = self.settings.startup_timeout_ms
        ready: asyncio.Future[tuple[Any, Any]] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        task = asyncio.create_task(self._hold(ready, stop), name=f"mcp server {self.name}")
        try:
            client, listing = await asyncio.wait_for(asyncio.shield(ready), timeout_ms / 1000)
        except asyncio.CancelledError:  # the turn was cancelled while the server started: stop it, leave no process
            _abandon(ready)
            await self._end(task, stop, connecting=True)
            raise
        except TimeoutError:
            _abandon(ready)
            await self._end(task, stop, connecting=True)
            raise McpServerUnavailable(
                f"MCP server {self.name!r} did not start within {timeout_ms} ms (mcp.servers.{self.name}.startupTimeoutMs)"
            ) from None
        except Exception as exc:
            await self._end(task, stop)
            raise McpServerUnavailable(f"MCP server {self.name!r} failed to start{self._started_as()}: {_reason(exc)}") from None
        self._task, self._stop, self._client = task, stop, client
        self.tools = self._tools(listing)
        logger.bind(plugin="mcp").info("MCP server {} connected: {} tool(s)", self.name, len(self.tools))

    def _started_as(self) -> str:
        """`` (command 'X' in DIR)`` for a stdio server: what was started where, for its start failure (the
        arguments, which may carry credentials, are left out); nothing for an HTTP server, whose reason names it."""
        if self.settings.command is None:
            return ""
        return f" (command {self.settings.command!r} in {self.cwd if self.cwd is not None else Path.cwd()})"

    async def _hold(self, ready: asyncio.Future[tuple[Any, Any]], stop: asyncio.Event) -> None:
        """Connect, list, hand the client to :meth:`_start` through ``ready``, and keep the connection until ``stop``."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await stack.enter_async_context(Client(await self._transport(stack), mode="auto"))
                listing = await self._list(client)
                if not ready.done():
                    ready.set_result((client, listing))
                await stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.set_exception(McpServerUnavailable("connecting was cancelled"))
            raise
        except Exception as exc:  # ends the connection; reported by whoever waits on ready, or by the next call
            if not ready.done():
                ready.set_exception(exc)
            else:
                logger.bind(plugin="mcp").warning("MCP server {} connection ended: {}", self.name, _reason(exc))

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        settings = self.settings
        if settings.command is not None:
            params = StdioServerParameters(
                command=settings.command, args=list(settings.args), env=dict(settings.env) or None,
                cwd=str(self.cwd) if self.cwd is not None else None,
            )
            return stdio_client(params, errlog=sys.__stderr__ or sys.stderr)
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=dict(settings.headers), timeout=httpx2.Timeout(30.0, read=300.0))
        )
        return streamable_http_client(str(settings.url), http_client=http)

    async def _list(self, client: Any) -> list[Any]:
        listed: list[Any] = []
        cursor = None
        for _ in range(LIST_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor or len(listed) >= LIST_MAX_TOOLS:
                break
        return listed

    def _tools(self, listing: list[Any]) -> tuple[Tool, ...]:
        """The listed tools the configuration keeps (``include``/``exclude``) and the safety rules allow."""
        settings, log = self.settings, logger.bind(plugin="mcp")
        if len(listing) > LIST_MAX_TOOLS:
            log.warning("MCP server {} lists {} tools; only the first {} are offered", self.name, len(listing), LIST_MAX_TOOLS)
        tools: dict[str, Tool] = {}
        for listed in listing[:LIST_MAX_TOOLS]:
            name = listed.name
            if (settings.include and name not in settings.include) or name in settings.exclude:
                continue
            try:
                spec = tool_spec(self.name, listed)
            except SkippedTool as exc:
                log.warning("{}; the tool is not offered", exc)
                continue
            if spec.name in tools:
                log.warning("MCP server {} lists tool {!r} twice; the first is offered", self.name, name)
                continue
            tools[spec.name] = Tool(spec, self._handler(name), source=self.source)
        return tuple(tools.values())

    # ------------------------------------------------------------------ calling

    def _handler(self, remote: str) -> Callable[[ToolContext], Any]:
        async def handle(context: ToolContext) -> ToolResult:
            return await self.call(remote, context)

        return handle

    async def call(self, remote: str, context: ToolContext) -> ToolResult:
        """Call tool ``remote`` with the model's arguments; every failure is a result, never a hang."""
        failure = await self.ensure(context.turn)
        if failure is not None:
            return context.result(f"{failure}; {remote!r} was not called", ToolStatus.ERROR)
        timeout_ms = self.settings.timeout_ms
        client = self._client
        try:
            answer = await asyncio.wait_for(
                client.call_tool(remote, dict(context.arguments), read_timeout_seconds=timeout_ms / 1000),
                timeout_ms / 1000 + CALL_GRACE_S,
            )
        except (TimeoutError, MCPError) as exc:
            if isinstance(exc, MCPError) and exc.code not in (REQUEST_TIMEOUT, CONNECTION_CLOSED):
                return context.result(f"MCP server {self.name!r} refused the call to {remote!r}: {_reason(exc)}", ToolStatus.ERROR)
            if isinstance(exc, TimeoutError) or exc.code == REQUEST_TIMEOUT:
                message = f"MCP server {self.name!r} did not answer {remote!r} within {timeout_ms} ms (mcp.servers.{self.name}.timeoutMs)"
                self._report(context.turn, "mcp_call_timeout", message)
                return context.result(message, ToolStatus.TIMEOUT)
            return await self._crashed(context, remote, exc)
        except (OSError, RuntimeError) as exc:  # the transport broke under the call (a closed stream, a dead process)
            return await self._crashed(context, remote, exc)
        return tool_result(context, answer)

    async def _crashed(self, context: ToolContext, remote: str, exc: BaseException) -> ToolResult:
        self.failure = (
            f"MCP server {self.name!r} crashed during {remote!r} ({_reason(exc)}); it is started again on a later call, "
            f"at most once per {self.settings.restart_interval_ms} ms (mcp.servers.{self.name}.restartIntervalMs)"
        )
        self._report(context.turn, "mcp_server_crashed", self.failure)
        await self._drop()
        return context.result(self.failure, ToolStatus.ERROR)

    # ------------------------------------------------------------------ closing

    def _report(self, turn: Turn | None, code: str, message: str) -> None:
        logger.bind(plugin="mcp").warning(message)
        if turn is not None:
            turn.emit("runtime_warning", code=code, source=self.source, message=message)

    async def _drop(self) -> None:
        task, stop = self._task, self._stop
        self._task = self._stop = self._client = None
        if task is not None and stop is not None:
            await self._end(task, stop)

    async def _end(self, task: asyncio.Task[None], stop: asyncio.Event, *, connecting: bool = False) -> None:
        """Let the connection task leave its transport (which stops a stdio server); cancel it if that takes too long.

        A task still ``connecting`` never reaches its wait for ``stop``: it is cancelled at once,
        and the transport's clean-up (which stops a stdio server) runs under the cancellation.
        """
        stop.set()
        done, _ = await asyncio.wait({task}, timeout=0 if connecting else CLOSE_TIMEOUT_S)
        if not done:
            if not connecting:
                logger.bind(plugin="mcp").warning("MCP server {} did not close within {} s; cancelling", self.name, CLOSE_TIMEOUT_S)
            task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_S)

    async def aclose(self) -> None:
        """Close the connection if it belongs to the running loop (a connection of an ended loop ended with it)."""
        if self._loop is asyncio.get_running_loop():
            await self._drop()
