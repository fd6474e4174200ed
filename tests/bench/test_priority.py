"""The stepping thread's scheduling (engines.bench.host.priority): SCHED_FIFO only under the
CPU-time clock, restored afterwards, refused by name where it cannot be honoured."""

from __future__ import annotations

import os
import threading

import pytest

from engines.bench import cli
from engines.bench.host import priority


class FakeScheduler:
    """Records os.sched_setscheduler calls; refuses them when `refuse`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, refuse: bool = False) -> None:
        self.calls: list[tuple[int, int]] = []
        self.refuse = refuse
        monkeypatch.setattr(os, "sched_setscheduler", self.set, raising=False)
        monkeypatch.setattr(os, "sched_getscheduler", lambda pid: os.SCHED_OTHER, raising=False)
        monkeypatch.setattr(os, "sched_getparam", lambda pid: os.sched_param(0), raising=False)

    def set(self, pid: int, policy: int, param: os.sched_param) -> None:
        if self.refuse:
            raise PermissionError(1, "Operation not permitted")
        self.calls.append((policy, param.sched_priority))


@pytest.mark.parametrize(("mode", "clock", "field"), [
    ("fast", "cpu", "'fast'"), ("realtime", "wall", "--clock wall")])
def test_a_mode_that_cannot_be_honoured_is_refused_by_name(mode: str, clock: str,
                                                           field: str) -> None:
    with pytest.raises(ValueError, match="priority") as raised:
        priority.check(mode, clock)
    assert field in str(raised.value)


def test_auto_raises_the_stepping_thread_under_the_cpu_clock_and_restores_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeScheduler(monkeypatch)
    with priority.stepping_priority("auto", "cpu") as sched:
        assert sched.realtime and "SCHED_FIFO" in sched.note
        assert fake.calls == [(os.SCHED_FIFO, priority.RT_PRIORITY)]
    assert fake.calls[-1] == (os.SCHED_OTHER, 0)  # restored on the way out


@pytest.mark.parametrize("mode", ["auto", "normal"])
def test_the_wall_clock_and_normal_leave_scheduling_alone(
        monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    # Under the wall clock an engine may compute in worker threads that a real-time stepping
    # thread would starve on its core.
    fake = FakeScheduler(monkeypatch)
    clock = "wall" if mode == "auto" else "cpu"
    with priority.stepping_priority(mode, clock) as sched:
        assert not sched.realtime
    assert fake.calls == []


def test_auto_says_so_when_the_os_refuses_and_realtime_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    FakeScheduler(monkeypatch, refuse=True)
    with priority.stepping_priority("auto", "cpu") as sched:
        assert not sched.realtime and "not permitted" in sched.note
    with pytest.raises(ValueError, match="'realtime' was refused by the OS"):
        with priority.stepping_priority("realtime", "cpu"):
            pass


def test_the_real_policy_is_per_thread_and_restored() -> None:
    before = os.sched_getscheduler(0)
    seen: dict[str, int] = {}
    try:
        with priority.stepping_priority("realtime", "cpu"):
            seen["inside"] = os.sched_getscheduler(0)
            other = threading.Thread(target=lambda: seen.update(other=os.sched_getscheduler(0)))
            other.start()
            other.join()
    except ValueError as exc:  # an unprivileged run: said, not hidden
        pytest.skip(f"SCHED_FIFO not permitted for this user: {exc}")
    assert seen["inside"] == os.SCHED_FIFO
    # A thread started inside inherits it (Linux), as the module's docstring says.
    assert seen["other"] == os.SCHED_FIFO
    assert os.sched_getscheduler(0) == before


def test_the_cli_refuses_realtime_on_the_wall_clock(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--quick", "--no-progress", "--clock", "wall", "--priority", "realtime"])
    assert "priority: 'realtime' needs --clock cpu" in capsys.readouterr().err
