"""asv's long setup is watched (benchmarks.watch): its progress reaches asv's console while it
runs, and it does not outlive asv. Run against asv itself (`--python=same`: no environment to
build), with the real benchmarks; and the watcher's choices of console, one by one."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import asv  # noqa: F401  # the bench extra (and dev) installs it: without it, fail here
import pytest

from benchmarks.common import progress_interval
from benchmarks.watch import asv_console

ROOT = Path(__file__).resolve().parents[2]
ASV = [sys.executable, "-m", "asv"]
PROGRESS = re.compile(r"^ +bench_serving setup, (\d+) s: ")


def _state(pid: int) -> str | None:
    """The process's state letter, None once it is gone (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
    return None if state in ("Z", "X") else state


def _setup_children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"setup_cache" in argv and _state(int(entry.name)):
            found.append(int(entry.name))
    return found


def _lines(fd: int, until: float, enough: int | None = None,
           progress: re.Pattern[str] = PROGRESS) -> list[str]:
    """What arrives on fd until then (a pipe read without blocking), or until `enough`
    lines matching `progress` have come."""
    os.set_blocking(fd, False)
    data = b""
    while time.monotonic() < until:
        text = data.decode(errors="replace")
        if enough is not None and sum(map(bool, map(progress.match, text.splitlines()))) >= enough:
            break
        try:
            data += os.read(fd, 65536)
        except BlockingIOError:
            time.sleep(0.05)
    return data.decode(errors="replace").splitlines()


@pytest.fixture
def asv_home(tmp_path: Path) -> dict[str, str]:
    """An environment whose HOME holds an asv machine file (asv run refuses to start without
    one), with this checkout's engines importable in asv's benchmark processes."""
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
           "BENCH_PROGRESS_S": "0.5"}
    subprocess.run([*ASV, "machine", "--yes"], cwd=ROOT, env=env, check=True,
                   capture_output=True, timeout=120)
    return env


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_setup_reports_progress_and_ends_with_asv(asv_home: dict[str, str],
                                                  how: signal.Signals) -> None:
    # SIGINT: asv ends the setup's process group itself. SIGTERM and SIGKILL (a cancelled CI
    # job, `timeout`): asv dies without doing so, and before the watcher the setup ran on.
    run = subprocess.Popen(
        [*ASV, "run", "--python=same", "--quick", "--show-stderr", "--bench", "bench_serving"],
        cwd=ROOT, env=asv_home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    setup: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not setup and time.monotonic() < deadline and run.poll() is None:
            setup = _setup_children(run.pid)
            time.sleep(0.1)
        assert setup, "asv started no setup_cache"
        assert run.stdout is not None
        # A line at each stage and at least every 0.5 s (BENCH_PROGRESS_S), on asv's stdout
        # while asv shows nothing else: watch it for up to 20 s (torch's import holds the GIL
        # for seconds on a loaded machine, and the heartbeat thread waits for it).
        lines = [line for line in _lines(run.stdout.fileno(), time.monotonic() + 20, enough=3)
                 if PROGRESS.match(line)]
        assert len(lines) >= 3, lines
        os.kill(run.pid, how)
        run.wait(timeout=30)
        gone = time.monotonic() + 10
        while _state(setup[0]) is not None and time.monotonic() < gone:
            time.sleep(0.1)
        assert _state(setup[0]) is None, f"asv's setup_cache outlived asv ({how.name})"
    finally:
        for pid in setup:
            if _state(pid) is not None:
                os.killpg(pid, signal.SIGKILL)
        if run.poll() is None:
            run.kill()
            run.wait()


FAKE_ASV = "import time\ntime.sleep(60)\n"  # a process whose command line names asv


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize(("name", "args", "stdout", "found"), [
    ("asv", [], "pipe", True),
    ("asv", [], "append", True),
    ("asv", [], "write", False),  # a plain `>` file: asv's writes would land over ours
    ("asv", ["-v"], "pipe", False),  # -v: asv shows the setup's output itself
    ("pytest", [], "pipe", False),  # not asv
])
def test_the_console_is_asvs_stdout_where_two_writers_can_share_it(
        tmp_path: Path, name: str, args: list[str], stdout: str, found: bool) -> None:
    script = tmp_path / name
    script.write_text(FAKE_ASV)
    out: int | IO[bytes] = subprocess.PIPE
    if stdout != "pipe":
        out = open(tmp_path / "out.txt", "ab" if stdout == "append" else "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, str(script), *args], stdout=out)
    try:
        deadline = time.monotonic() + 10  # its command line can read empty for a moment
        while (str(script).encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
               and time.monotonic() < deadline):
            time.sleep(0.01)
        console = asv_console(proc.pid)
        assert (console is not None) == found
        if console is not None:
            console.close()
    finally:
        proc.kill()
        proc.wait()
        if not isinstance(out, int):
            out.close()


def test_progress_interval_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_PROGRESS_S", "0.25")
    assert progress_interval() == 0.25
    for bad in ("0", "-1", "soon"):
        monkeypatch.setenv("BENCH_PROGRESS_S", bad)
        with pytest.raises(ValueError, match=f"BENCH_PROGRESS_S: must be > 0 seconds, got "
                                             f"'{bad}'"):
            progress_interval()


SETUP = """
import time
from benchmarks.watch import watched
with watched("demo setup", interval=0.2, stall={stall}) as watch:
    watch.stage("stuck")
    time.sleep(60)
"""


def _setup(stall: float | None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", SETUP.format(stall=stall)],
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True,  # a group of its own, as asv gives it
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_a_setup_without_progress_stops_at_its_timeout() -> None:
    # The heartbeat lines keep asv's silence timeout from firing: the watcher applies it to
    # progress instead (a stage begun, a step done), not to its own lines.
    proc = _setup(stall=1.0)
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    text = out.decode()
    assert proc.returncode == -signal.SIGTERM, text
    assert "demo setup, 0 s: stuck" in text
    # The time it says is when the watcher woke: 1 s, or later on a loaded machine (2 s seen
    # beside a second test run).
    found = re.search(r"no progress in stuck for (\d+) s \(the setup's timeout is 1 s\): "
                      r"stopping", text)
    assert found is not None and int(found.group(1)) >= 1, text


def test_an_interrupted_setup_ends_and_says_where() -> None:
    proc = _setup(stall=None)
    try:
        assert proc.stdout is not None
        # 0.2 s apart; a generous deadline, as a busy machine starts the process slowly.
        lines = _lines(proc.stdout.fileno(), time.monotonic() + 20, enough=3,
                       progress=re.compile(r".*demo setup"))
        assert sum("demo setup" in line for line in lines) >= 3, lines
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=10)
        rest = _lines(proc.stdout.fileno(), time.monotonic() + 0.2)
    finally:
        proc.kill()
    assert any("stopped in stuck: KeyboardInterrupt" in line for line in rest), rest


def test_the_watch_takes_every_call_the_bench_makes_on_its_progress() -> None:
    # The serving setup hands compare() a Watch in place of engines.bench.progress.Progress:
    # a method or parameter the bench uses and the Watch lacks fails the setup in asv only.
    import inspect

    from benchmarks.watch import Watch
    from engines.bench.progress import Progress

    for name in ("stage", "tick", "grow", "finish"):
        theirs = inspect.signature(getattr(Progress, name)).parameters
        ours = inspect.signature(getattr(Watch, name)).parameters
        assert list(theirs) == list(ours), (name, list(theirs), list(ours))
