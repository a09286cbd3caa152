"""A real MCP client (the official Python SDK) that the end-to-end tests drive line by line.

Usage: driver.py http URL TOKEN
       driver.py stdio GLOVEBOX_BIN STATE_DIR     (launches `glovebox mcp` as a stdio server)
       driver.py direct COMMAND_JSON CWD          (launches a server itself, no glovebox between)

Reads one JSON command a line from stdin and prints one JSON line for each (calls run
concurrently and print when they finish):
  {"op": "list"}                                  -> {"op": "list", "names": [...], "tools": {...}}
  {"op": "call", "id": ID, "tool": T, "args": {}} -> {"op": "call", "id": ID, "is_error", "text", "structured", "types", "content"}
      ("progress": true asks for the server's progress: the answer then has "progress": [[done, total, message], ...])
  {"op": "wait_change"}                           -> {"op": "changed"} once tools/list_changed arrives
  {"op": "instructions"}                          -> {"op": "instructions", "text": ...}
  {"op": "quit"}                                  ends the session (and so the process)
"""

import asyncio
import contextlib
import json
import sys

try:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
    import mcp.types as types
except ImportError as e:  # say what to install, not just that an import failed
    print(f"the MCP Python SDK is missing ({e}): pip install -r tests/mcp/requirements.txt", file=sys.stderr)
    sys.exit(3)


def emit(value):
    print(json.dumps(value), flush=True)


@contextlib.asynccontextmanager
async def http_streams(url, token):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams[0], streams[1]


@contextlib.asynccontextmanager
async def direct_streams(command_json, cwd):
    command = json.loads(command_json)
    params = StdioServerParameters(command=command[0], args=command[1:], cwd=cwd)
    async with stdio_client(params) as streams:
        yield streams[0], streams[1]


@contextlib.asynccontextmanager
async def stdio_streams(binary, state_dir):
    params = StdioServerParameters(command=binary, args=["mcp", "--state-dir", state_dir])
    async with stdio_client(params) as streams:
        yield streams[0], streams[1]


def tool_facts(tool):
    annotations = tool.annotations
    read_only = None
    if annotations is not None:
        read_only = getattr(annotations, "readOnlyHint", None)
        if read_only is None:
            read_only = getattr(annotations, "read_only_hint", None)
    output = getattr(tool, "outputSchema", None)
    if output is None:
        output = getattr(tool, "output_schema", None)
    schema = getattr(tool, "inputSchema", None)
    if schema is None:
        schema = getattr(tool, "input_schema", None)
    def hint(name, snake):
        if annotations is None:
            return None
        value = getattr(annotations, name, None)
        return value if value is not None else getattr(annotations, snake, None)

    meta = getattr(tool, "meta", None)
    if meta is None:
        meta = getattr(tool, "_meta", None)
    return {"read_only": read_only, "output_schema": output is not None, "input_schema": schema,
            "output": output, "title": getattr(tool, "title", None), "meta": meta,
            "idempotent": hint("idempotentHint", "idempotent_hint"),
            "open_world": hint("openWorldHint", "open_world_hint")}


def call_line(call_id, result):
    is_error = getattr(result, "isError", None)
    if is_error is None:
        is_error = getattr(result, "is_error", False)
    structured = getattr(result, "structuredContent", None)
    if structured is None:
        structured = getattr(result, "structured_content", None)
    text = "".join(getattr(c, "text", "") for c in result.content)
    kinds = [getattr(c, "type", None) for c in result.content]
    content = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in result.content]
    return {"op": "call", "id": call_id, "is_error": bool(is_error), "text": text, "structured": structured,
            "types": kinds, "content": content}


async def lines():
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        if line.strip():
            yield json.loads(line)


async def main(mode, a, b):
    changed = asyncio.Event()

    async def on_message(message):
        root = getattr(message, "root", message)
        if isinstance(root, types.ToolListChangedNotification):
            changed.set()

    streams = {"http": http_streams, "stdio": stdio_streams, "direct": direct_streams}[mode](a, b)
    async with streams as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            init = await session.initialize()
            instructions = getattr(init, "instructions", None)
            calls = []

            async def call(command):
                progress = []

                async def on_progress(done, total, message):
                    progress.append([done, total, message])

                callback = on_progress if command.get("progress") else None
                try:
                    result = await session.call_tool(command["tool"], command.get("args", {}),
                                                     progress_callback=callback)
                    line = call_line(command["id"], result)
                    if callback is not None:
                        line["progress"] = progress
                    emit(line)
                except Exception as e:  # the test reads the failure
                    emit({"op": "call", "id": command["id"], "exception": str(e)})

            async for command in lines():
                op = command["op"]
                if op == "list":
                    tools = (await session.list_tools()).tools
                    emit({"op": "list", "names": [t.name for t in tools],
                          "tools": {t.name: tool_facts(t) for t in tools}})
                elif op == "call":
                    calls.append(asyncio.create_task(call(command)))
                elif op == "wait_change":
                    await asyncio.wait_for(changed.wait(), 20)
                    changed.clear()
                    emit({"op": "changed"})
                elif op == "instructions":
                    emit({"op": "instructions", "text": instructions})
                elif op == "quit":
                    break
            for task in calls:
                await task
    emit({"op": "closed"})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
