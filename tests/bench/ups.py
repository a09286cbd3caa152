"""The `glovebox up`s the A/B benchmarks run, one per build: started in a temporary state
directory on loopback, and stopped as the user's Ctrl-C would (SIGINT), or killed with their
children if they have not stopped within 20 s; and the 4 KiB file the benchmarks read."""

import os
import signal
import subprocess


def start_up(binary, state, workdir, log):
    """Starts `binary up` with its own state directory and `workdir`, logging to `log`."""
    return subprocess.Popen([binary, "up", "--state-dir", state, "--workdir", workdir,
                             "--listen", "127.0.0.1:0"], stdout=log, stderr=log,
                            start_new_session=True)


def stop_ups(ups):
    """Stops every `up` of `ups`, all asked at once, then waited for."""
    for up in ups:
        up.send_signal(signal.SIGINT)
    for up in ups:
        try:
            up.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)


def write_read4k(workdir):
    """Writes the 4 KiB file the benchmarks read (`read4k.txt`, the alphabet over and over) in
    `workdir`; returns its path."""
    path = os.path.join(workdir, "read4k.txt")
    with open(path, "w") as f:
        f.write("".join(chr(97 + i % 26) for i in range(4096)))
    return path
