"""A pack server written with the official MCP Python SDK's high-level server (FastMCP, called
MCPServer since mcp 2): the tests run it as a real pack, under glovebox's pack host.

Tools: `read_note` (read-only, a path argument), `write_note` (writes a path argument),
`token_set` (whether the secret API_TOKEN reached its environment, never its value) and `dial`
(tries a TCP connection to a loopback port).
"""

import os
import socket

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("notes")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def read_note(path: str) -> str:
    """Reads a note."""
    with open(path, encoding="utf-8") as f:
        return f.read()


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
def write_note(path: str, text: str) -> str:
    """Writes a note."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return f"wrote {len(text)} characters"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def token_set() -> str:
    """Says whether API_TOKEN is set, and how long it is."""
    value = os.environ.get("API_TOKEN")
    return "unset" if value is None else f"set, {len(value)} characters"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def dial(port: int) -> str:
    """Tries a TCP connection to 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return "connected"
    except OSError as e:
        return f"refused: {e}"


if __name__ == "__main__":
    server.run()
