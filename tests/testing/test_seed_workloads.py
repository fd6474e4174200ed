"""The two seed workloads of engines.testing.seed_workloads that each reach a one-line bug
planted in the paged engine (tests/planted/revisit_bugs.py; the tests of `liveness` and
`variants` show each reached and caught, and no other seed workload reaching it): the
unmutated engine passes both. And features' hard cases (issue 52) that no planted bug here
needs: the adapter swap a seed workload makes (the tenants feature's re-added adapter), made,
recorded and put back; forked families preempted; a stop string ending in whitespace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engines.paged.engine import PagedEngine
from engines.paged.variants import small_pool
from engines.protocol import Request, SamplingParams, loras
from engines.sequential import SequentialEngine
from engines.testing.context import SuiteOptions, build_context
from engines.testing.features.children import PAST_THE_POOL
from engines.testing.recorder import run_workload
from engines.testing.rerun_script import ScriptSetup, rerun_script
from engines.testing.search import drawing_of
from engines.testing.seed_workloads import seed_workloads
from engines.testing.verdict import verify
from engines.testing.workload import AdapterSwap, Workload
from engines.zoo import paged_with_loras
from tests.planted.revisit_bugs import FullHitComputesNothing, ReseedsOnResume
from tests.planted.seed_reach import AGAIN, SEEDED, seed_context, split

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("label", [AGAIN, SEEDED])
def test_the_correct_paged_engine_passes_them(label: str) -> None:
    ctx = seed_context(PagedEngine, small_pool=small_pool)
    found, _ = split(ctx, label)
    assert found
    checks: list[Any] = [FullHitComputesNothing.caught_by, ReseedsOnResume.caught_by]
    for w in found:
        for check in checks:
            outcome = verify(ctx, w, check)
            assert outcome.ok, (w.label, check, outcome.failure)


def test_an_adapter_swap_is_made_and_put_back() -> None:
    """A workload's AdapterSwap (the tenants feature's re-added adapter): the recorder
    re-adds the adapter with the other's weights before its step, each request is recorded
    under the directory it was served from, and the engine serves its own adapters again
    after the drain (a pooled engine is reused); a report's script carries the swap."""
    engine = paged_with_loras()
    own = dict(loras(engine))
    a, b = sorted(own)[0], sorted(own)[-1]
    assert own[a] != own[b]
    p = SamplingParams(max_tokens=2)
    w = Workload((Request((1, 2, 3), p, request_id="r0", lora=a),
                  Request((1, 2, 3), p, request_id="r1", lora=a)), (0, 4),
                 swaps=(AdapterSwap(4, a, b),))
    trace = run_workload(engine, w)
    assert trace.lora_paths == {"r0": own[a], "r1": own[b]}
    assert dict(loras(engine)) == own
    script = rerun_script("parity", w, ScriptSetup("from engines.zoo import paged_with_loras "
                                                   "as make_engine"))
    assert f"swaps=(AdapterSwap(4, {a!r}, {b!r}),)" in script
    # The script replays the swap and judges the run: the correct engine passes (exit 0).
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_forked_families_are_preempted_and_pass() -> None:
    """The children feature's families past a small pool: the engine preempts forked
    children, and the correct engine passes children and kv_accounting on them."""
    ctx = build_context(small_pool, name="small_pool",
                        options=SuiteOptions(reference=SequentialEngine))
    for check in ("children", "kv_accounting"):
        found = [w for w in seed_workloads(drawing_of(ctx, check), alone=ctx.oracle.tokens)
                 if PAST_THE_POOL in w.label]
        assert found, check
        for w in found:
            outcome = verify(ctx, w, check)
            assert outcome.ok, (w.label, check, outcome.failure)
            assert outcome.trace is not None and outcome.trace.exercised["preemptions"] > 0


def test_a_stop_string_ends_in_whitespace() -> None:
    ctx = build_context(PagedEngine, name="paged")
    found = [w for w in seed_workloads(drawing_of(ctx, "stop_strings"), alone=ctx.oracle.tokens)
             if w.label == "stop strings at the edges"]
    assert found
    stops = [s for r in found[0].requests for s in r.params.stop]
    assert any(len(s) > 1 and s[-1].isspace() and not s[0].isspace() for s in stops), stops
