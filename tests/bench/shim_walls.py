"""What a job's walls cost at its start: `glovebox job-shim` running `true`, with namespaces (the
strong wall; as root also the mapped user namespace and idmapped roots), with namespaces and a
network of its own, and with the seccomp wall alone, in alternating rounds; medians and their
ratios to the seccomp wall, measured in the same run.

    python3 tests/bench/shim_walls.py [path/to/glovebox] [rounds]
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

MODES = {
    "namespaces": [],
    "namespaces + loopback": ["--network", "loopback"],
    "seccomp": ["--no-namespaces"],
}


def start_once(binary, root, tmp, extra):
    """Seconds from starting the shim to its end (its job: `true`)."""
    began = time.perf_counter()
    shim = subprocess.Popen(
        [binary, "job-shim", "--root", root, "--tmp", tmp, *extra, "--", "true"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=root)
    if shim.wait() != 0:
        sys.exit(f"the shim failed with {extra}")
    return time.perf_counter() - began


def main():
    binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/debug/glovebox")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as tmp:
        times = {mode: [] for mode in MODES}
        for _ in range(rounds):
            for mode, extra in MODES.items():
                times[mode].append(start_once(binary, root, tmp, extra))
    reference = statistics.median(times["seccomp"])
    for mode, samples in times.items():
        median = statistics.median(samples)
        print(f"{mode:24s} median {median * 1000:7.2f} ms   ratio to seccomp {median / reference:5.2f}")


if __name__ == "__main__":
    main()
