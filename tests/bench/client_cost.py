"""What a read costs the client: the MCP Python SDK's own CPU per `tools/call` of a 4 KiB read,
against glovebox (`glovebox mcp`, under its own `glovebox up`) and against the MCP filesystem
server, in turns, with the system calls and context switches the client makes per call; then the
part of it that is the SDK checking each result against the tool's declared output schema (a
cached `jsonschema` validator, as `ClientSession.validate_tool_result` uses), on each server's
real answer and listed schema; then the same client against a replay of each server (this script
run with `--replay`: a server that answers at once with the tool list and the read's result that
server gave), which leaves the answers' shape as the only difference between the two.

One read at a time, the client's time is on the read's path; this tells how much of a read's
latency is the client's, and how much of that each server's answer shape decides.

Usage: python3 tests/bench/client_cost.py GLOVEBOX_BIN [ROUNDS] [READS]   (defaults 6 and 500)
(first `cd tests/bench && npm ci`, for the filesystem server)
"""

import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import timeit
from contextlib import AsyncExitStack

from jsonschema import exceptions as jsonschema_exceptions
from jsonschema.validators import validator_for
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from ab_builds import session
from ups import start_up, stop_ups, write_read4k

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "node_modules", ".bin", "mcp-server-filesystem")
WARM_UP = 200
VALIDATIONS = 5000


def io_counts():
    """This process's read and write system calls and its voluntary context switches so far."""
    with open("/proc/self/io") as f:
        io = dict(line.split(": ") for line in f.read().splitlines() if line)
    with open("/proc/self/status") as f:
        status = dict(line.split(":\t") for line in f.read().splitlines() if ":\t" in line)
    return int(io["syscr"]), int(io["syscw"]), int(status["voluntary_ctxt_switches"].strip())


async def reference_session(stack, workdir):
    params = StdioServerParameters(command=REFERENCE, args=[workdir])
    quiet = stack.enter_context(open(os.devnull, "w"))
    read, write = await stack.enter_async_context(stdio_client(params, errlog=quiet))
    s = await stack.enter_async_context(ClientSession(read, write))
    await s.initialize()
    return s


def serve_replay(recorded):
    """A stdio MCP server that answers `initialize` with the client's own protocol version,
    `tools/list` and `tools/call` with what `recorded` (a JSON file) holds, and anything else
    with an empty result; notifications get no answer."""
    with open(recorded) as f:
        answers = json.load(f)
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if "id" not in request:
            continue
        if request.get("method") == "initialize":
            result = {"protocolVersion": request["params"]["protocolVersion"],
                      "capabilities": {"tools": {}}, "serverInfo": {"name": "replay", "version": "1"}}
        else:
            result = answers.get(request.get("method"), {})
        answer = {"jsonrpc": "2.0", "id": request["id"], "result": result}
        out.write(json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
        out.flush()


async def record(s, call, path):
    """Writes what `s` lists and answers to `call`, as `serve_replay` reads it, to `path`, and
    returns it."""
    dump = {"mode": "json", "by_alias": True, "exclude_unset": True}
    answers = {"tools/list": (await s.list_tools()).model_dump(**dump),
               "tools/call": (await s.call_tool(*call)).model_dump(**dump)}
    with open(path, "w") as f:
        json.dump(answers, f)
    return answers


async def replay_session(stack, recorded):
    params = StdioServerParameters(command=sys.executable,
                                   args=[os.path.abspath(__file__), "--replay", recorded])
    read, write = await stack.enter_async_context(stdio_client(params))
    s = await stack.enter_async_context(ClientSession(read, write))
    await s.initialize()
    return s


async def cpu_in_turns(sides, rounds, reads):
    """Each side's client CPU per call and system calls per call, round by round, in turns (the
    first side first in even rounds, last in odd ones)."""
    for s, call in sides.values():
        for _ in range(WARM_UP):
            await s.call_tool(*call)
    cpu = {name: [] for name in sides}
    calls = {name: [] for name in sides}
    for n in range(rounds):
        for name, (s, call) in list(sides.items())[:: 1 if n % 2 == 0 else -1]:
            us, per_call = await one_round(s, call, reads)
            cpu[name].append(us)
            calls[name].append(per_call)
    return cpu, calls


def print_cpu(sides, cpu, calls=None):
    for name in sides:
        rounds = " ".join(f"{u:.0f}" for u in cpu[name])
        line = f"  {name:<18} {statistics.median(cpu[name]):6.0f} µs  (rounds {rounds}"
        if calls:
            reads_, writes, switches = (statistics.median(c[i] for c in calls[name]) for i in range(3))
            line += f"; per call {reads_:.2f} reads, {writes:.2f} writes, {switches:.2f} context switches"
        print(line + ")")
    # a round's two sides ran one after the other: their ratio is spared most of the host's drift
    ratio = statistics.median(g / f for g, f in zip(cpu["glovebox"], cpu["filesystem server"]))
    print(f"  glovebox ÷ filesystem server (median of the rounds' ratios): {ratio:.3f}")


async def one_round(s, call, reads):
    """The client's CPU per call (µs) over `reads` calls one at a time, and its system calls."""
    before, cpu = io_counts(), time.process_time()
    for _ in range(reads):
        await s.call_tool(*call)
    cpu = time.process_time() - cpu
    after = io_counts()
    return cpu * 1e6 / reads, [(a - b) / reads for a, b in zip(after, before)]


def validation_us(answers, tool):
    """The SDK's check of a recorded result of `tool` against the tool's listed output schema
    (µs), and how many properties the schema declares."""
    schema = next(t.get("outputSchema") for t in answers["tools/list"]["tools"] if t["name"] == tool)
    if schema is None:
        return 0.0, 0
    validator = validator_for(schema)(schema)
    instance = answers["tools/call"].get("structuredContent")
    check = lambda: jsonschema_exceptions.best_match(validator.iter_errors(instance))  # noqa: E731
    return timeit.timeit(check, number=VALIDATIONS) * 1e6 / VALIDATIONS, len(schema.get("properties", {}))


async def main(binary, rounds, reads):
    root = tempfile.mkdtemp(prefix="gb-client-cost-")
    work = os.path.join(root, "work")
    os.makedirs(work)
    path = write_read4k(work)
    state = os.path.join(root, "state")
    log = open(os.path.join(root, "up.log"), "w")
    up = start_up(binary, state, work, log)
    try:
        async with AsyncExitStack() as stack:
            sides = {
                "glovebox": (await session(stack, binary, state, ("file_read", {"path": path})),
                             ("file_read", {"path": path})),
                "filesystem server": (await reference_session(stack, work),
                                      ("read_text_file", {"path": path})),
            }
            cpu, calls = await cpu_in_turns(sides, rounds, reads)
            print(f"client CPU per read, one at a time ({rounds} rounds of {reads}, median):")
            print_cpu(sides, cpu, calls)
            print("output-schema check of one result (cached validator):")
            recorded = {}
            for n, (name, (s, call)) in enumerate(sides.items()):
                recorded[name] = os.path.join(root, f"recorded-{n}.json")
                answers = await record(s, call, recorded[name])
                us, properties = validation_us(answers, call[0])
                print(f"  {name:<18} {us:6.1f} µs  ({call[0]}: {properties} declared properties)")
            replays = {name: (await replay_session(stack, recorded[name]), call)
                       for name, (_, call) in sides.items()}
            cpu, _ = await cpu_in_turns(replays, rounds, reads)
            print("client CPU per read against a replay of each server's answers (their shape alone):")
            print_cpu(replays, cpu)
    finally:
        stop_ups([up])
        log.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--replay":
        sys.exit(serve_replay(sys.argv[2]))
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6,
                     int(sys.argv[3]) if len(sys.argv) > 3 else 500))
