"""The bundled plugin ``mcp``: the tools of MCP servers (``mcp.servers.<name>``) offered to the agent.

Each enabled server's tools are offered as ``<name>__<tool>`` through the ``provide_tools`` step
(see :mod:`monoagent_plugins.tools.mcp_servers` for the connection, :mod:`monoagent_plugins.tools.mcp_tools`
for what is accepted from a server). A server starts lazily, on the first turn (or ``monoagent
tools`` listing) that needs the tools, in that turn's event loop, and stays connected until the
Agent closes (``shutdown`` closes every session, which stops stdio servers). The official ``mcp``
SDK (the ``mcp`` extra) is imported only when a server is configured and enabled.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import attrs

from monoagent import ConfigSectionRegistrar, Tool, ToolSourceFailure, hookimpl, setting

if TYPE_CHECKING:
    from monoagent import Agent, Config, Turn
    from monoagent_plugins.tools.mcp_servers import McpServer

SERVER_NAME = re.compile(r"[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*")
"""A server's name: it prefixes its tools' names (``files__read``), so no '.', and no '__' that would blur the join."""

HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")


def _table(server: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = server.get(key)
    return value if isinstance(value, Mapping) else {}


def _server_problem(name: str, server: Mapping[str, Any]) -> str | None:
    """What is wrong with the table of server ``name`` beyond its keys' types (checked by the loader), or None."""
    where = f"mcp.servers.{name}"
    transports = [key for key in ("command", "url") if server.get(key) is not None]
    if len(transports) != 1:
        found = " and ".join(transports) or "neither"
        return f"{where} must set exactly one of command (a stdio server) or url (streamable HTTP); it sets {found}"
    stray = [key for key in (("headers",) if transports == ["command"] else ("args", "env", "cwd")) if server.get(key)]
    if stray:
        return f"{where}.{stray[0]} does not apply to a {transports[0]} server; remove it"
    url = server.get("url")
    if isinstance(url, str):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return f"{where}.url is not an http:// or https:// URL (scheme {parts.scheme[:20]!r})"
    for header, value in _table(server, "headers").items():
        if not HEADER_NAME.fullmatch(str(header)) or not isinstance(value, str) or any(c in value for c in "\r\n\x00"):
            return f"{where}.headers.{str(header)[:60]} is not a valid HTTP header (a token name, a value without line breaks)"
    for key, value in _table(server, "env").items():
        if not key or "=" in str(key) or "\x00" in str(key) or not isinstance(value, str) or "\x00" in value:
            return f"{where}.env.{str(key)[:60]} is not a valid environment variable (a name without '=', a string value without NUL)"
    return None


def _check_servers(servers: Any) -> str | None:
    if not isinstance(servers, Mapping):
        return None  # the table check has reported it
    for name, server in servers.items():
        if not SERVER_NAME.fullmatch(str(name)) or len(str(name)) > 32:
            return (f"server name {name!r} is not allowed: 1-32 letters and digits, single '-' or '_' between them "
                    f"(it prefixes the tool names, <name>__<tool>)")
        problem = _server_problem(str(name), server) if isinstance(server, Mapping) else None
        if problem:
            return problem
    return None


@attrs.define
class McpServerConfig:
    """One MCP server: started as a subprocess over stdio (``command``) or reached over streamable HTTP (``url``)."""

    command: str | None = setting(None, doc="The program that runs a stdio MCP server (exactly one of command and url).")
    args: list[str] = setting(doc="Its command-line arguments.", factory=list)
    env: dict[str, str] = setting(doc="Environment variables added to the server's (secret: config show hides the values).", factory=dict, secret=True)
    cwd: Path | None = setting(
        None, doc="The server's working directory; relative to the config file's directory, which is also the default."
    )
    url: str | None = setting(None, doc="The endpoint of a streamable HTTP MCP server, http:// or https:// (exactly one of command and url).")
    headers: dict[str, str] = setting(doc="HTTP headers sent to a url server, such as Authorization (secret: config show hides the values).", factory=dict, secret=True)
    timeout_ms: int = setting(60_000, doc="How long one tool call may take before it is answered with a timeout.", min=1, max=3_600_000)
    startup_timeout_ms: int = setting(20_000, doc="How long starting (or reaching) the server and listing its tools may take.", min=1, max=600_000)
    restart_interval_ms: int = setting(5_000, doc="After a crash or failed start, the least time before the next start attempt.", min=0, max=3_600_000)
    enabled: bool = setting(True, doc="false: the server is neither started nor listed.")
    include: list[str] = setting(doc="Only these tools of the server (its own names, without the prefix); empty: all.", factory=list)
    exclude: list[str] = setting(doc="Tools of the server never offered (its own names).", factory=list)


@attrs.define
class McpConfig:
    """mcp: tools from Model Context Protocol servers (the mcp plugin)."""

    servers: dict[str, McpServerConfig] = setting(
        doc="The MCP servers by name; their tools are offered as <name>__<tool>.", factory=dict,
        allowed="a table of server tables; names of 1-32 letters and digits with single '-' or '_' between them",
        check=_check_servers,
    )


class McpServers:
    """The MCP servers of one Agent; kept by the plugin per Agent, closed by ``shutdown``.

    Without the SDK installed every enabled server is a failed tool source naming the extra, so
    turns go on (with a ``runtime_warning``) and ``monoagent tools`` lists the servers as failed.
    """

    def __init__(self, config: McpConfig, base: Config) -> None:
        self.config = config
        self.base = base
        self.servers: dict[str, McpServer] | None = None
        self.missing_sdk: str | None = None

    def _servers(self) -> dict[str, McpServer]:
        if self.servers is None and self.missing_sdk is None:
            try:
                from monoagent_plugins.tools.mcp_servers import McpServer
            except ImportError as exc:
                from monoagent import missing_extra

                self.missing_sdk = missing_extra("mcp", "an MCP server (the official MCP SDK)", exc)
                return {}
            self.servers = {name: McpServer(name, s, cwd=self._cwd(s)) for name, s in self.config.servers.items() if s.enabled}
        return self.servers or {}

    def _cwd(self, server: McpServerConfig) -> Path:
        """Where a stdio server runs: its ``cwd`` resolved as every configured path is, else the config file's directory."""
        return self.base.resolve(server.cwd) if server.cwd is not None else self.base.base_dir

    async def offered(self, turn: Turn | None) -> list[Tool | ToolSourceFailure]:
        import asyncio

        answers = await asyncio.gather(*(server.offered(turn) for server in self._servers().values()))
        if self.missing_sdk is not None:
            return [ToolSourceFailure(f"mcp:{name}", self.missing_sdk) for name, s in self.config.servers.items() if s.enabled]
        offered: list[Tool | ToolSourceFailure] = []
        for answer in answers:
            if isinstance(answer, ToolSourceFailure):
                offered.append(answer)
            else:
                offered.extend(answer)
        return offered

    async def aclose(self) -> None:
        for server in (self.servers or {}).values():
            await server.aclose()


_AGENTS: weakref.WeakKeyDictionary[Agent, McpServers] = weakref.WeakKeyDictionary()
"""The servers of each configured Agent (this module is registered in every Agent's plugin manager);
``shutdown`` removes an Agent's entry, and an Agent dropped without closing takes its entry with it."""


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("mcp", McpConfig)


@hookimpl(trylast=True)
def configure(agent: Agent) -> None:
    config = agent.config.section("mcp", McpConfig)
    if any(server.enabled for server in config.servers.values()):
        _AGENTS[agent] = McpServers(config, agent.config)


@hookimpl(trylast=True)
def provide_tools(agent: Agent, turn: Turn | None) -> Awaitable[list[Tool | ToolSourceFailure]] | None:
    servers = _AGENTS.get(agent)
    return None if servers is None else servers.offered(turn)


@hookimpl(trylast=True)
def shutdown(agent: Agent) -> Awaitable[None] | None:
    servers = _AGENTS.pop(agent, None)
    return None if servers is None else servers.aclose()
