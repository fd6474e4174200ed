"""Start a server process for the tests, and make sure it stops.

`launch` starts the command on 127.0.0.1 on a free port in a process group of its own, sends
its output to a log file, and waits for its health endpoint (a timeout, or the process
exiting, is an error quoting the log's tail). Every launched server is stopped by its process
group (SIGTERM, then SIGKILL) by `stop`, by `stop_all` at interpreter exit (atexit), and, on
Linux, by the guard (guard.py, the group's leader, the server its child) once this process
is gone without running atexit: it polls its parent, and the kernel's parent-death signal
reaches it too; it SIGTERMs the server and SIGKILLs the group after a grace period. Tests add
a fixture finalizer calling `stop_all` so a session stops its servers as it ends.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

__all__ = ["LaunchError", "Server", "free_port", "launch", "running", "stop_all"]

HOST = "127.0.0.1"
GRACE = 10.0  # seconds a server has to exit on SIGTERM before its group is killed
PORT = "{port}"  # stands for the free port in a launch command


class LaunchError(RuntimeError):
    """The server did not come up: the message says why and quotes its log."""


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    started_s: float  # seconds from launch to healthy
    argv: tuple[str, ...] = field(default=())

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        """Stop the server's whole process group: SIGTERM, then SIGKILL after `grace` s."""
        _running.pop(self.process.pid, None)
        if self.process.poll() is not None:
            return
        _signal_group(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            _signal_group(self.process.pid, signal.SIGKILL)
            self.process.wait(grace)
        # Workers the server forked into its group may outlive it by a moment.
        _signal_group(self.process.pid, signal.SIGKILL)


_running: dict[int, Server] = {}


def running() -> list[Server]:
    """Servers launched by this process and not stopped yet."""
    return list(_running.values())


def stop_all() -> None:
    for server in list(_running.values()):
        server.stop()


atexit.register(stop_all)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick; the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None

    def set_pdeathsig() -> None:  # runs in the child between fork and exec
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return set_pdeathsig


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def launch(argv: Sequence[str], *, health: str = "/health", timeout: float = 600.0,
           env: Mapping[str, str] | None = None, log: Path | None = None,
           name: str = "server") -> Server:
    """Run argv (with `{port}` standing for a free port) and wait up to `timeout` s until
    GET http://127.0.0.1:<port><health> answers 200."""
    port = free_port()
    args = tuple(a.replace(PORT, str(port)) for a in argv)
    if log is None:
        fd, path = tempfile.mkstemp(prefix=f"batching-engines-{name}-", suffix=".log")
        os.close(fd)
        log = Path(path)
    url = f"http://{HOST}:{port}"
    start = time.monotonic()
    with open(log, "wb") as out:
        # Under the guard (guard.py): it takes the server's whole group down once this
        # process is gone, which a server still loading its model may not do on its own.
        guarded = (sys.executable, str(Path(__file__).with_name("guard.py")), str(os.getpid()),
                   str(GRACE), "--", *args)
        process = subprocess.Popen(
            guarded, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})}, start_new_session=True,
            preexec_fn=_die_with_parent())
    server = Server(url, process, log, 0.0, args)
    _running[process.pid] = server
    while True:
        if process.poll() is not None:
            _running.pop(process.pid, None)
            raise LaunchError(f"{name} exited with status {process.returncode} before it was "
                              f"healthy; {' '.join(args)}\nlog {log}:\n{_tail(log)}")
        try:
            if httpx.get(url + health, timeout=5.0).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() - start > timeout:
            server.stop()
            raise LaunchError(f"{name} was not healthy at {url}{health} within {timeout} s "
                              f"(stopped); {' '.join(args)}\nlog {log}:\n{_tail(log)}")
        time.sleep(0.5)
    server.started_s = time.monotonic() - start
    # Start-up takes minutes for some servers: say where the time went, and where the log is.
    print(f"batching-engines: {name} healthy at {url} after {server.started_s:.1f} s "
          f"(pid {process.pid}, log {log})", file=sys.stderr, flush=True)
    return server
