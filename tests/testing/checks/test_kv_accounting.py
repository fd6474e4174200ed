"""kv_accounting: the property on hand-built KV snapshots (a sound pool passes; leaked, double
counted, short, wrongly shared or lingering blocks fail), its planted bugs caught (in the
paged engine's pool, its forked children and beams, its speculation), and the correct
speculating engine passing."""

from __future__ import annotations

from typing import Any

import pytest

from engines.testing.checks import check_named
from engines.testing.recorder import KVSnapshot, Trace
from tests.helpers import GOOD, fails, judge, trace
from tests.planted import expect
from tests.planted.beam_bugs import BEAM_PLANTED
from tests.planted.catalog import REFERENCE_ENGINES, name_of, planted
from tests.planted.children_bugs import CHILDREN_PLANTED
from tests.planted.composition_bugs import COMPOSITION_PLANTED
from tests.planted.spec_bugs import SPEC_SEARCHED

CHECK = "kv_accounting"
check_kv_accounting = check_named(CHECK)


def _kv(tables: dict[str, tuple[int, ...]], cached: dict[str, int], free: int,
        total: int = 6) -> KVSnapshot:
    return KVSnapshot(block_size=2, total=total, free=free,
                      tables=tables, cached=cached)  # type: ignore[arg-type]


def _kv_trace(*snapshots: KVSnapshot, after: KVSnapshot | None = None) -> Trace:
    # r0 prompt (1, 2) then 5 6 7; r1 shares no prefix with it.
    t = trace(GOOD)
    for rec, kv in zip(t.steps, snapshots, strict=False):
        rec.kv = kv
    t.kv_after_drain = after or _kv({}, {}, 6)
    return t


def test_kv_accounting_accepts_a_sound_pool() -> None:
    check_kv_accounting(_kv_trace(_kv({"r0": (0,), "r1": (1,)}, {"r0": 2, "r1": 1}, 4),
                                  _kv({"r0": (0, 2), "r1": (1,)}, {"r0": 3, "r1": 2}, 3)),
                        judge())


@pytest.mark.parametrize(("snapshot", "after", "match"), [
    (_kv({"r0": (0,), "r1": (1,)}, {"r0": 2, "r1": 1}, 3), None, "blocks leaked"),
    (_kv({"r0": (0,), "r1": (1,)}, {"r0": 2, "r1": 1}, 5), None, "counted free while"),
    (_kv({"r0": (0,), "r1": (1,)}, {"r0": 3, "r1": 1}, 4), None, "it needs 2"),
    (_kv({"r0": (0,), "r1": (0,)}, {"r0": 2, "r1": 1}, 5), None, "not a full block of a prefix"),
    (_kv({"r0": (0,), "r1": (1,)}, {"r0": 2, "r1": 1}, 4), _kv({"r0": (0,)}, {"r0": 3}, 5),
     "still hold blocks"),
])
def test_kv_accounting_rejects(snapshot: KVSnapshot, after: KVSnapshot | None,
                               match: str) -> None:
    fails(check_kv_accounting, _kv_trace(snapshot, after=after), match)


@pytest.mark.parametrize("bug", planted(CHECK, REFERENCE_ENGINES), ids=name_of)
def test_suite_catches_bugs_planted_in_the_reference_engines(bug: Any) -> None:
    expect.caught_by_seed_workloads(bug)


@pytest.mark.parametrize("bug", planted(CHECK, CHILDREN_PLANTED), ids=name_of)
def test_suite_catches_children_bugs(bug: Any) -> None:
    expect.caught_in_a_fresh_process(bug)


@pytest.mark.parametrize("bug", planted(CHECK, BEAM_PLANTED), ids=name_of)
def test_suite_catches_beam_bugs(bug: Any) -> None:
    expect.caught_in_a_fresh_process(bug)


@pytest.mark.parametrize("bug", planted(CHECK, SPEC_SEARCHED), ids=name_of)
def test_suite_catches_speculation_bug(bug: Any) -> None:
    expect.a_speculation_bug_is_caught(bug)


def test_the_correct_speculating_engine_passes() -> None:
    expect.the_speculating_control_passes(CHECK)


@pytest.mark.parametrize("bug", planted(CHECK, COMPOSITION_PLANTED), ids=name_of)
def test_suite_catches_blocks_leaked_by_aborting_a_family_after_a_child_finished(
        bug: Any) -> None:
    """Only a family aborted after a child finished shows it: the children feature's seed
    workload holds two."""
    expect.caught_by_seed_workloads(bug)
