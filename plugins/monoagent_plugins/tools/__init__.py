"""Tools and their policy: MCP servers, subagents, permissions, tool domains."""
