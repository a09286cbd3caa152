"""A real MCP client session against glovebox's /mcp endpoint, for the end-to-end tests.

Usage: client_session.py http URL TOKEN
       client_session.py stdio GLOVEBOX_BIN STATE_DIR   (launches `glovebox mcp` as a stdio server)
       client_session.py list URL TOKEN                 (over HTTP, only lists the tools)
Prints one JSON object per line: the tool list, then the result of each call.
"""

import asyncio
import json
import sys

import contextlib

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


def result_of(step, result):
    is_error = getattr(result, "isError", None)
    if is_error is None:
        is_error = getattr(result, "is_error", False)
    text = "".join(getattr(c, "text", "") for c in result.content)
    return {"step": step, "is_error": bool(is_error), "text": text}


@contextlib.asynccontextmanager
async def http_streams(url, token):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams[0], streams[1]


@contextlib.asynccontextmanager
async def stdio_streams(binary, state_dir):
    params = StdioServerParameters(command=binary, args=["mcp", "--state-dir", state_dir])
    async with stdio_client(params) as streams:
        yield streams[0], streams[1]


async def main(mode, a, b):
    streams = http_streams(a, b) if mode in ("http", "list") else stdio_streams(a, b)
    async with streams as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            hints = {}
            for tool in tools.tools:
                annotations = tool.annotations
                read_only = None
                if annotations is not None:
                    read_only = getattr(annotations, "readOnlyHint", None)
                    if read_only is None:
                        read_only = getattr(annotations, "read_only_hint", None)
                hints[tool.name] = read_only
            print(json.dumps({"step": "tools", "names": [t.name for t in tools.tools], "read_only": hints}), flush=True)
            if mode == "list":
                return
            steps = [
                ("read", "file_read", {"path": "hello.txt"}),
                ("denied", "file_read", {"path": ".env"}),
                ("write", "file_write", {"path": "from-mcp.txt", "content": "written over MCP\n"}),
            ]
            for step, tool, args in steps:
                result = await session.call_tool(tool, args)
                print(json.dumps(result_of(step, result)), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
