"""stop_strings: its planted bug caught (a stop string spanning two steps missed), by the
seed workloads and by the search alone. Our engines' stop strings against the tokenizer's
decode: tests/engines/core/test_detokenize.py."""

from __future__ import annotations

import ast
import re
from typing import Any

import pytest

from engines.slot.continuous import ContinuousBatchEngine
from engines.testing.features.stop_strings import HELD_BACK
from tests.planted import expect
from tests.planted.catalog import name_of, planted
from tests.planted.composition_bugs import COMPOSITION_PLANTED
from tests.planted.harness import hunt
from tests.planted.lifecycle_bugs import AbortDuringHoldBackEndsStop
from tests.planted.text_bugs import TEXT_PLANTED, StopStringAcrossStepsMissed

CHECK = "stop_strings"


@pytest.mark.parametrize("bug", planted(CHECK, TEXT_PLANTED), ids=name_of)
def test_suite_catches_text_bugs(bug: Any) -> None:
    """The seed workloads alone catch it."""
    expect.caught_by_seed_workloads(bug)


@pytest.mark.parametrize("bug", planted(CHECK, TEXT_PLANTED), ids=name_of)
def test_the_search_alone_finds_text_bugs(bug: Any) -> None:
    """Without the hand-picked workload the drawn stop strings and outputs find it too."""
    expect.found_by_the_search_alone(bug, 60)


@pytest.mark.parametrize("bug", planted(CHECK, COMPOSITION_PLANTED), ids=name_of)
def test_suite_catches_a_family_ended_by_one_childs_stop_string(bug: Any) -> None:
    """Only a family that carries stop strings shows it (tests/testing/test_composition.py):
    the children feature's seed workload holds one."""
    expect.caught_by_seed_workloads(bug)


def test_the_report_names_the_stop_string_and_the_tokens_it_spans() -> None:
    """Issue 51's done-when: the report of the missed spanning stop string says which stop
    string it was and which tokens (ids and their texts) it spans, and those tokens' text
    does hold it."""
    caught = hunt(StopStringAcrossStepsMissed, settings=expect.SEEDS_ONLY)
    assert caught is not None and caught.prop == CHECK, str(caught)
    text = str(caught)
    found = re.search(r"the stop string ('[^']+') \(tokens (\d+)\.\.(\d+): ids \[([\d, ]+)\], "
                      r"texts (.*?)\) (?:once its token|with its last token) (\d+)", text)
    assert found is not None, text
    stop, first, last, ids, texts, end = found.groups()
    ids_list = [int(i) for i in ids.split(", ")]
    # The bug misses only a stop string no one token holds: it spans two tokens or more.
    assert int(last) == int(end) and len(ids_list) == int(last) - int(first) + 1 >= 2, text
    # The report's own texts of those tokens, joined, hold the stop string.
    joined = "".join(ast.literal_eval(f"[{texts}]"))
    assert ast.literal_eval(stop) in joined, (stop, joined)


def test_the_hard_case_catches_an_abort_during_the_hold_back_finishing_stop() -> None:
    """Issue 51's abort during a stop string's hold-back: the feature's seed workload aborts
    requests while their streams hold text back; the correct engine finishes them ABORT."""
    expect.caught_by_the_hard_case_not_its_control(
        AbortDuringHoldBackEndsStop, ContinuousBatchEngine, CHECK, HELD_BACK)
