"""An MCP server on the official SDK, for the agents' MCP tools tests.

Usage: python tests/_mcp_server.py            (stdio)
       python tests/_mcp_server.py PORT       (streamable HTTP on 127.0.0.1:PORT)
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")
NOTES: list[str] = []


@server.tool()
def add_note(text: str) -> str:
    """Keep a note."""
    NOTES.append(text)
    return f"noted ({len(NOTES)} in all)"


@server.tool()
def list_notes() -> list[str]:
    """Every note kept."""
    return NOTES


@server.tool()
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"exploded: {reason}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
    else:
        server.run()
