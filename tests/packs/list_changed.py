"""An MCP client that waits for `notifications/tools/list_changed`, for the pack tests.

Usage: list_changed.py URL TOKEN
Prints one JSON object per line: the tool names at initialize ("before"), a line ("changed")
when the server says its tool list changed, then the names listed after it ("after").
"""

import asyncio
import json
import sys

import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


async def main(url, token):
    changed = asyncio.Event()

    async def on_message(message):
        root = getattr(message, "root", message)
        if isinstance(root, types.ToolListChangedNotification):
            changed.set()

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1], message_handler=on_message) as session:
                await session.initialize()
                tools = await session.list_tools()
                print(json.dumps({"step": "before", "names": [t.name for t in tools.tools]}), flush=True)
                await asyncio.wait_for(changed.wait(), 25)
                print(json.dumps({"step": "changed"}), flush=True)
                tools = await session.list_tools()
                print(json.dumps({"step": "after", "names": [t.name for t in tools.tools]}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
