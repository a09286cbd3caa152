"""Two glovebox builds side by side: each runs its own `glovebox up` (a temporary state directory,
one shared workdir with a 4 KiB file), and one MCP Python SDK client alternates bursts of
`file_read` calls between their `glovebox mcp` bridges, so a machine whose speed drifts drifts for
both. Prints, per build, reads/s with 8 in flight (median burst) and the p50, p90 and p99 of reads
one at a time, each with the CPU per read of all the build's processes and this client.

Usage: python3 tests/bench/ab_builds.py BIN_A BIN_B [BURSTS]   (BURSTS of each kind, default 30)
  AB_CALL=list: list a directory of 1,000 names (names and types) instead of reading the file.
"""

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from compare_client import cpu_ms
from ups import start_up, stop_ups, write_read4k

IN_FLIGHT, PAR_CALLS, SEQ_CALLS = 8, 200, 40


def pids_of(state):
    """This build's processes: every one whose command line names its state directory."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if state.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            pass
    return found


async def session(stack, binary, state, call):
    deadline = time.monotonic() + 60
    while True:
        inner = AsyncExitStack()
        try:
            params = StdioServerParameters(command=binary, args=["mcp", "--state-dir", state])
            quiet = inner.enter_context(open(os.devnull, "w"))
            read, write = await inner.enter_async_context(stdio_client(params, errlog=quiet))
            s = await inner.enter_async_context(ClientSession(read, write))
            await s.initialize()
            await s.call_tool(*call)
            stack.push_async_exit(inner)
            return s
        except Exception:
            await inner.aclose()
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def main(binaries, bursts):
    root = tempfile.mkdtemp(prefix="gb-ab-")
    work = os.path.join(root, "work", "sub")
    os.makedirs(work)
    path = write_read4k(work)
    listed = os.path.join(work, "dir1000")
    os.makedirs(listed)
    for i in range(1000):
        open(os.path.join(listed, f"file-{i:03}.txt"), "w").close()
    call = {
        "read": ("file_read", {"path": path}),
        "list": ("file_list", {"path": listed, "details": False}),
    }[os.environ.get("AB_CALL", "read")]
    ups, builds = [], []
    try:
        for n, binary in enumerate(binaries):
            state = os.path.join(root, f"state-{n}")
            log = open(os.path.join(root, f"up-{n}.log"), "w")
            ups.append(start_up(binary, state, os.path.dirname(work), log))
            builds.append({"name": f"{'AB'[n]} {binary}", "binary": binary, "state": state,
                           "tput": [], "lat": [], "par_cpu": 0.0, "seq_cpu": 0.0})
        async with AsyncExitStack() as stack:
            for b in builds:
                b["session"] = await session(stack, b["binary"], b["state"], call)
                for _ in range(30):
                    await b["session"].call_tool(*call)
                b["pids"] = pids_of(b["state"]) + [os.getpid()]
            for burst in range(bursts):
                for b in builds if burst % 2 == 0 else builds[::-1]:
                    s = b["session"]
                    before = sum(map(cpu_ms, b["pids"]))
                    gate = asyncio.Semaphore(IN_FLIGHT)

                    async def one():
                        async with gate:
                            await s.call_tool(*call)

                    start = time.perf_counter()
                    await asyncio.gather(*(one() for _ in range(PAR_CALLS)))
                    b["tput"].append(PAR_CALLS / (time.perf_counter() - start))
                    middle = sum(map(cpu_ms, b["pids"]))
                    for _ in range(SEQ_CALLS):
                        start = time.perf_counter()
                        await s.call_tool(*call)
                        b["lat"].append((time.perf_counter() - start) * 1000)
                    b["par_cpu"] += middle - before
                    b["seq_cpu"] += sum(map(cpu_ms, b["pids"])) - middle
        for b in builds:
            lat = sorted(b["lat"])
            print(f"{b['name']}\n  reads/s with {IN_FLIGHT} in flight {statistics.median(b['tput']):.0f}"
                  f" (CPU {b['par_cpu'] / (bursts * PAR_CALLS):.3f} ms/read);"
                  f" one at a time p50 {lat[len(lat) // 2]:.3f} ms p90 {lat[int(len(lat) * 0.9)]:.3f} ms"
                  f" p99 {lat[int(len(lat) * 0.99)]:.3f} ms (p99/p50 {lat[int(len(lat) * 0.99)] / lat[len(lat) // 2]:.2f})"
                  f" (CPU {b['seq_cpu'] / (bursts * SEQ_CALLS):.3f} ms/read)")
        a, b = builds
        print(f"B / A: reads/s {statistics.median(b['tput']) / statistics.median(a['tput']):.3f},"
              f" CPU per read with {IN_FLIGHT} in flight {b['par_cpu'] / a['par_cpu']:.3f},"
              f" p50 {sorted(b['lat'])[len(b['lat']) // 2] / sorted(a['lat'])[len(a['lat']) // 2]:.3f}")
    finally:
        stop_ups(ups)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1:3], int(sys.argv[3]) if len(sys.argv) > 3 else 30))
