"""The client of glovebox's comparison benchmark: drives the reference MCP servers and glovebox's
`glovebox mcp` ("gb") over stdio with the official MCP Python SDK, all sessions open at once, each
measure taken in short turns that alternate between glovebox and its reference (the order swapped
every turn), so a machine whose speed drifts drifts for both. The file measures compare with the
MCP filesystem server ("fs"); the pack measures compare glovebox's `everything__echo` (the
server-everything pack it runs) with the same server called directly ("ev"). Prints one JSON
object, {"fs": {...}, "gb": {...}, "ev": {...}}, with each side's timings (milliseconds) and CPU
per call.

Usage: compare_client.py FIXTURE FS_COMMAND_JSON GB_COMMAND_JSON EV_COMMAND_JSON
  FIXTURE  the directory built by glovebox-compare (read4k.txt, dir1000/, tree/)
  *_JSON   each server's command line as a JSON array
  GB_SERVICE_PIDS (environment): glovebox's services as name=pid,... (their CPU counts for gb)
"""

import asyncio
import json
import os
import sys
import time
from contextlib import AsyncExitStack

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

WARMUP = 20
# Calls per measure and side, taken in TURNS alternating turns.
ROUNDS = {"read": 300, "read_spaced": 12, "list": 200, "list_sizes": 200, "ping": 300, "find": 8,
          "echo": 200, "echo4k": 200}
TURNS = {"read": 10, "read_spaced": 6, "list": 10, "list_sizes": 10, "ping": 10, "find": 4,
         "echo": 10, "echo4k": 10}
MEASURES = ("read", "read_spaced", "list", "list_sizes", "find", "echo", "echo4k")
# The reference each measure is taken against.
REFERENCE = {"echo": "ev", "echo4k": "ev"}
# The pack's server as glovebox names its tools (glovebox-compare's mcp.json).
PACK = "everything"
ECHO_4K = "x" * 4096
# Seconds idle before each call of a measure: an agent's calls come between a model's turns, each
# after a pause longer than the gate's WAL checkpoint interval (1 s).
PAUSE_S = {"read_spaced": 1.1}
IN_FLIGHT = 8
CONCURRENT_READS = 800
CONCURRENT_TURNS = 8
TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")
SIDES = ("fs", "gb", "ev")


def cpu_ms(pid):
    """CPU time (user + system) a process has used so far, in milliseconds; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * TICK_MS


def child_running(command):
    """The pid of this process's child started with `command` (its first word)."""
    me = os.getpid()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and command[0].encode() in argv[:2]:
            return int(entry)
    raise RuntimeError(f"no child process runs {command[0]}")


def calls(side, fixture):
    list_details = {} if os.environ.get("GB_LIST_DETAILS") == "1" else {"details": False}
    if side == "ev":
        return {"echo": ("echo", {"message": "hi"}), "echo4k": ("echo", {"message": ECHO_4K})}
    if side == "fs":
        return {
            "read": ("read_text_file", {"path": f"{fixture}/read4k.txt"}),
            "read_spaced": ("read_text_file", {"path": f"{fixture}/read4k.txt"}),
            "list": ("list_directory", {"path": f"{fixture}/dir1000"}),
            "list_sizes": ("list_directory_with_sizes", {"path": f"{fixture}/dir1000"}),
            "find": ("search_files", {"path": f"{fixture}/tree", "pattern": "**/match-*.txt"}),
        }
    return {
        "read": ("file_read", {"path": f"{fixture}/read4k.txt"}),
        "read_spaced": ("file_read", {"path": f"{fixture}/read4k.txt"}),
        # names and types, as list_directory gives them (GB_LIST_DETAILS=1: a build from before
        # file_list had `details`, measured against its full listing)
        "list": ("file_list", {"path": f"{fixture}/dir1000"} | list_details),
        # with each entry's size (and time): a stat per entry on both sides
        "list_sizes": ("file_list", {"path": f"{fixture}/dir1000"}),
        "find": ("file_find", {"path": f"{fixture}/tree", "names": ["match-*.txt"], "max_results": 1000}),
        "echo": (f"{PACK}__echo", {"message": "hi"}),
        "echo4k": (f"{PACK}__echo", {"message": ECHO_4K}),
    }


def text_of(result):
    if getattr(result, "is_error", False) or getattr(result, "isError", False):
        raise RuntimeError("the call failed: " + "".join(getattr(c, "text", "") for c in result.content))
    return "".join(getattr(c, "text", "") for c in result.content)


class Side:
    """One server: its session, the processes whose CPU it is charged, what was measured."""

    def __init__(self, name, session, watched):
        self.name, self.session, self.watched = name, session, watched
        self.out = {}

    def cpu(self):
        return {name: cpu_ms(pid) for name, pid in self.watched.items()}

    def charge(self, key, before, calls):
        """Adds the CPU used since `before` to `key` (per call, summed over turns)."""
        now = self.cpu()
        spent = self.out.setdefault(key, {name: 0.0 for name in now})
        for name, ms in now.items():
            spent[name] += (ms - before[name]) / calls


async def in_turns(sides, turns, run_turn):
    """Runs `run_turn(side)` `turns` times per side, alternating, the first side swapped each
    turn."""
    for turn in range(turns):
        for side in sides if turn % 2 == 0 else sides[::-1]:
            await run_turn(side)


def pair(sides, measure):
    """glovebox and the reference `measure` is taken against."""
    wanted = ("gb", REFERENCE.get(measure, "fs"))
    return [side for side in sides if side.name in wanted]


async def measure_one_at_a_time(sides, fixture, measure):
    sides = pair(sides, measure)
    per_turn = ROUNDS[measure] // TURNS[measure]
    for side in sides:
        name, args = calls(side.name, fixture)[measure]
        for _ in range(WARMUP if measure not in ("find", "read_spaced") else 2):
            text_of(await side.session.call_tool(name, args))
        side.out[measure] = []

    async def turn(side):
        name, args = calls(side.name, fixture)[measure]
        before = side.cpu()
        pause = PAUSE_S.get(measure)
        for _ in range(per_turn):
            if pause:
                await asyncio.sleep(pause)
            start = time.perf_counter()
            text = text_of(await side.session.call_tool(name, args))
            side.out[measure].append((time.perf_counter() - start) * 1000.0)
            side.out[measure + "_size"] = text.count("match-") if measure == "find" else len(text)
        side.charge(measure + "_cpu_ms", before, ROUNDS[measure])

    await in_turns(sides, TURNS[measure], turn)


async def measure_ping(sides):
    sides = pair(sides, "ping")
    per_turn = ROUNDS["ping"] // TURNS["ping"]
    for side in sides:
        for _ in range(WARMUP):
            await side.session.send_ping()
        side.out["ping"] = []

    async def turn(side):
        for _ in range(per_turn):
            start = time.perf_counter()
            await side.session.send_ping()
            side.out["ping"].append((time.perf_counter() - start) * 1000.0)

    await in_turns(sides, TURNS["ping"], turn)


async def measure_in_flight(sides, fixture):
    sides = pair(sides, "read")
    per_turn = CONCURRENT_READS // CONCURRENT_TURNS
    elapsed = {side.name: 0.0 for side in sides}

    async def turn(side):
        name, args = calls(side.name, fixture)["read"]
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one():
            async with gate:
                text_of(await side.session.call_tool(name, args))

        before = side.cpu()
        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(per_turn)))
        elapsed[side.name] += time.perf_counter() - start
        side.charge("cpu_ms_per_read", before, CONCURRENT_READS)

    await in_turns(sides, CONCURRENT_TURNS, turn)
    for side in sides:
        side.out["reads_per_s"] = CONCURRENT_READS / elapsed[side.name]


async def open_side(stack, name, command):
    params = StdioServerParameters(command=command[0], args=command[1:])
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    watched = {"client": os.getpid(), "server": child_running(command)}
    if name == "gb":
        for item in filter(None, os.environ.get("GB_SERVICE_PIDS", "").split(",")):
            service, pid = item.split("=")
            watched[service] = int(pid)
    return Side(name, session, watched)


async def until_pack_listed(session, timeout_s=90.0):
    """Waits for glovebox's listing to hold the pack's echo (its server starts beside glovebox)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        listed = await session.list_tools()
        if any(tool.name == f"{PACK}__echo" for tool in listed.tools):
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"glovebox never listed {PACK}__echo")


async def main(fixture, commands):
    async with AsyncExitStack() as stack:
        sides = [await open_side(stack, name, commands[name]) for name in SIDES]
        await until_pack_listed(sides[1].session)
        for measure in MEASURES:
            await measure_one_at_a_time(sides, fixture, measure)
        await measure_ping(sides)
        await measure_in_flight(sides, fixture)
        print(json.dumps({side.name: side.out for side in sides}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    fixture = sys.argv[1]
    commands = dict(zip(SIDES, map(json.loads, sys.argv[2:5])))
    asyncio.run(main(fixture, commands))
