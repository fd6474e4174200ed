"""The launcher's guard: runs a server as its child in the guard's own process group, and
takes the whole group down when the process that launched it is gone.

Run as a script (`python guard.py PARENT_PID GRACE -- ARGV...`; stdlib only, so it starts in
a moment and imports nothing of ours). A server cannot be trusted to act on its parent-death
signal: vLLM's OpenAI server, killed at SIGTERM while still loading its model, came up anyway
and served on, orphaned, for 38 minutes. The guard polls its parent instead, and on the
parent's exit (or a SIGTERM: `Server.stop`, or its own parent-death signal) sends the server
SIGTERM, waits GRACE seconds, then SIGKILLs the group: the server and every worker it forked.
Its exit status is the server's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

_stopping = False


def _stop(signum: int, frame: object) -> None:
    global _stopping
    _stopping = True


def main(argv: list[str]) -> int:
    parent, grace, sep, *command = argv
    if sep != "--" or not command:
        print("usage: guard.py PARENT_PID GRACE -- ARGV...", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    child = subprocess.Popen(command)
    while True:
        try:
            return child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if _stopping or os.getppid() != int(parent):
            break
    child.terminate()
    try:
        return child.wait(timeout=float(grace))
    except subprocess.TimeoutExpired:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.killpg(os.getpgrp(), signal.SIGKILL)  # the server's workers too, and the guard
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
