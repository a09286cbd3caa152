"""Two glovebox builds side by side, each called over one loopback TCP WebSocket with 8 calls in
flight (an agent runtime pipelining its calls): each build runs its own `glovebox up` (a temporary
state directory, one shared workdir with a 4 KiB file), and the rounds alternate between them, so
a machine whose speed drifts drifts for both. Prints, per round, calls/s and the p50, p99 and
worst latency of an allowed `file_read` (tests/bench/ws_pipelined.mjs, with `ws` from
`npm ci --prefix tests`).

Usage: python3 tests/bench/ws_pipelined.py BIN_A BIN_B [ROUNDS]   (default 6; 3,000 calls each)
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

from ups import start_up, stop_ups, write_read4k

CALLS, IN_FLIGHT = 3000, 8
CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ws_pipelined.mjs")


def start(binary, state, work, log):
    """Starts `glovebox up`; returns the process, the broker's URL and the account's token."""
    up = start_up(binary, state, work, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        urls = glob.glob(os.path.join(state, "**", "broker.url"), recursive=True)
        tokens = glob.glob(os.path.join(state, "accounts", "*", "token"))
        if urls and tokens:
            with open(urls[0]) as u, open(tokens[0]) as t:
                url, token = u.read().strip(), t.read().strip()
            if url:
                return up, url, token
        time.sleep(0.1)
    raise RuntimeError(f"{binary} up did not publish its URL")


def main(binaries, rounds):
    root = tempfile.mkdtemp(prefix="gb-ws-")
    work = os.path.join(root, "work")
    os.makedirs(work)
    path = write_read4k(work)
    ups, targets = [], []
    try:
        for n, binary in enumerate(binaries):
            log = open(os.path.join(root, f"up-{n}.log"), "w")
            up, url, token = start(binary, os.path.join(root, f"state-{n}"), work, log)
            ups.append(up)
            targets.append((url, token))
        time.sleep(1)
        for r in range(rounds):
            for n in (0, 1) if r % 2 == 0 else (1, 0):
                url, token = targets[n]
                out = subprocess.run(["node", CLIENT, url, token, path, str(CALLS), str(IN_FLIGHT)],
                                     capture_output=True, text=True, check=True)
                print(f"{'AB'[n]} {binaries[n]}: {out.stdout.strip()}", flush=True)
    finally:
        stop_ups(ups)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1:3], int(sys.argv[3]) if len(sys.argv) > 3 else 6)
