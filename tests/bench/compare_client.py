"""One side of glovebox's comparison benchmark: drives a stdio MCP server with the official MCP
Python SDK and prints one JSON object with the timings (milliseconds) of each measure.

Usage: compare_client.py SIDE FIXTURE -- COMMAND [ARGS...]
  SIDE     fs (the MCP filesystem server's tool names) or gb (glovebox's)
  FIXTURE  the directory built by glovebox-compare (read4k.txt, dir1000/, tree/)
"""

import asyncio
import json
import os
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

WARMUP = 20
ROUNDS = {"read": 300, "list": 200, "list_sizes": 200, "ping": 300, "find": 8}
MEASURES = ("read", "list", "list_sizes", "find")
IN_FLIGHT = 8
CONCURRENT_READS = 800
TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


def cpu_ms(pid):
    """CPU time (user + system) a process has used so far, in milliseconds; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * TICK_MS


def processes():
    """The processes whose CPU the 8-in-flight measure accounts: this client, the server it
    started over stdio (glovebox's bridge or the reference server), and glovebox's services
    (named in GB_SERVICE_PIDS as name=pid,...)."""
    me = os.getpid()
    found = {"client": me}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me:
            found["server"] = int(entry)
    for item in filter(None, os.environ.get("GB_SERVICE_PIDS", "").split(",")):
        name, pid = item.split("=")
        found[name] = int(pid)
    return found


def calls(side, fixture):
    list_details = {} if os.environ.get("GB_LIST_DETAILS") == "1" else {"details": False}
    if side == "fs":
        return {
            "read": ("read_text_file", {"path": f"{fixture}/read4k.txt"}),
            "list": ("list_directory", {"path": f"{fixture}/dir1000"}),
            "list_sizes": ("list_directory_with_sizes", {"path": f"{fixture}/dir1000"}),
            "find": ("search_files", {"path": f"{fixture}/tree", "pattern": "**/match-*.txt"}),
        }
    return {
        "read": ("file_read", {"path": f"{fixture}/read4k.txt"}),
        # names and types, as list_directory gives them (GB_LIST_DETAILS=1: a build from before
        # file_list had `details`, measured against its full listing)
        "list": ("file_list", {"path": f"{fixture}/dir1000"} | list_details),
        # with each entry's size (and time): a stat per entry on both sides
        "list_sizes": ("file_list", {"path": f"{fixture}/dir1000"}),
        "find": ("file_find", {"path": f"{fixture}/tree", "names": ["match-*.txt"], "max_results": 1000}),
    }


def text_of(result):
    if getattr(result, "is_error", False) or getattr(result, "isError", False):
        raise RuntimeError("the call failed: " + "".join(getattr(c, "text", "") for c in result.content))
    return "".join(getattr(c, "text", "") for c in result.content)


async def timed(coro):
    start = time.perf_counter()
    value = await coro
    return (time.perf_counter() - start) * 1000.0, value


async def main(side, fixture, command):
    params = StdioServerParameters(command=command[0], args=command[1:])
    out = {"side": side}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            table = calls(side, fixture)
            watched = processes()
            for measure in MEASURES:
                name, args = table[measure]
                for _ in range(WARMUP if measure != "find" else 2):
                    text_of(await session.call_tool(name, args))
                samples = []
                found = None
                before = {name: cpu_ms(pid) for name, pid in watched.items()}
                for _ in range(ROUNDS[measure]):
                    ms, result = await timed(session.call_tool(name, args))
                    text = text_of(result)
                    found = text.count("match-") if measure == "find" else len(text)
                    samples.append(ms)
                out[measure] = samples
                out[measure + "_size"] = found
                out[measure + "_cpu_ms"] = {
                    name: (cpu_ms(pid) - before[name]) / ROUNDS[measure] for name, pid in watched.items()
                }
            samples = []
            for _ in range(WARMUP):
                await session.send_ping()
            for _ in range(ROUNDS["ping"]):
                ms, _ = await timed(session.send_ping())
                samples.append(ms)
            out["ping"] = samples
            name, args = table["read"]
            semaphore = asyncio.Semaphore(IN_FLIGHT)

            async def one():
                async with semaphore:
                    text_of(await session.call_tool(name, args))

            before = {name: cpu_ms(pid) for name, pid in watched.items()}
            start = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(CONCURRENT_READS)))
            out["reads_per_s"] = CONCURRENT_READS / (time.perf_counter() - start)
            out["cpu_ms_per_read"] = {
                name: (cpu_ms(pid) - before[name]) / CONCURRENT_READS for name, pid in watched.items()
            }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    side, fixture = sys.argv[1], sys.argv[2]
    command = sys.argv[sys.argv.index("--") + 1 :]
    asyncio.run(main(side, fixture, command))
