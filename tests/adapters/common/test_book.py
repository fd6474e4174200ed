"""The adapters' shared bookkeeping: cumulative outputs to deltas, ids, owed ABORTs."""

from __future__ import annotations

from engines.adapters.common.book import RequestBook, stop_or_length
from engines.protocol import BASE_PARAMS, FinishReason, Request, SamplingParams, StepOutput


def test_cumulative_outputs_become_deltas() -> None:
    book = RequestBook()
    request = Request((1, 2), SamplingParams(max_tokens=4, logprobs=1), request_id="a")
    live = book.get(book.add(request, vocab_size=1024, max_model_len=512))
    assert live is not None
    # The sampled token's logprob comes from its entry among the top ones.
    assert book.delta(live, [5], None, [{5: -0.1}]) == StepOutput("a", (5,), None, ({5: -0.1},),
                                                                  (-0.1,))
    assert book.delta(live, [5], None) is None  # nothing new, not finished: no output
    last = book.delta(live, [5, 6, 7], FinishReason.LENGTH, [{6: -1.0}, {8: -2.0}])
    # Token 7 is not among its top ones: no sampled logprobs rather than a made-up one.
    assert last == StepOutput("a", (6, 7), FinishReason.LENGTH, ({6: -1.0}, {8: -2.0}))
    assert not book.has_work() and book.get(live.key) is None


def test_abort_is_owed_once_and_keys_are_never_reused() -> None:
    book = RequestBook()
    key = book.add(Request((1,), request_id="x"), vocab_size=1024, max_model_len=512)
    assert book.abort("x") == key
    assert book.abort("x") is None
    assert book.abort(["unhashable"]) is None  # type: ignore[arg-type]  # bad id on purpose
    assert "x" in book.in_flight() and book.has_work()  # until its ABORT is returned
    assert book.take_aborts() == [StepOutput("x", (), FinishReason.ABORT)]
    assert book.take_aborts() == [] and not book.has_work()
    assert book.add(Request((1,), request_id="x"), vocab_size=1024, max_model_len=512) != key


def test_finish_reason_is_read_from_the_last_token() -> None:
    request = Request((1,), SamplingParams(max_tokens=3, stop_token_ids=(9,)))
    assert stop_or_length(request, [4, 9]) is FinishReason.STOP
    assert stop_or_length(request, [9, 4, 4]) is FinishReason.LENGTH
    assert stop_or_length(request, []) is FinishReason.LENGTH


def test_a_request_the_library_refused_is_forgotten_without_an_abort() -> None:
    book = RequestBook()
    book.add(Request((1,), request_id="keep"), vocab_size=1024, max_model_len=512)
    book.abort("keep")  # an ABORT owed to another request survives the discard
    key = book.add(Request((1,), request_id="x"), vocab_size=1024, max_model_len=512)
    book.discard("x")
    assert book.get(key) is None and "x" not in book.in_flight()
    assert book.take_aborts() == [StepOutput("keep", (), FinishReason.ABORT)]
    book.discard("never-added")  # a no-op
    assert not book.has_work()
    book.add(Request((1,), request_id="x"), vocab_size=1024, max_model_len=512)  # id free again


def test_an_aborted_family_owes_its_abort_to_each_unfinished_child() -> None:
    book = RequestBook()
    book.add(Request((1, 2), SamplingParams(max_tokens=4, n=3), request_id="f"), vocab_size=10,
             max_model_len=16, supported=BASE_PARAMS | {"n"})
    book.add(Request((1,), SamplingParams(max_tokens=4), request_id="g"), vocab_size=10,
             max_model_len=16)
    book.abort("f")
    book.abort_children("f", [0, 2])  # child 1 had finished
    book.abort("g")
    book.abort_children("h", [1])  # never aborted: nothing owed
    assert book.take_aborts() == [StepOutput("f", (), FinishReason.ABORT, index=0),
                                  StepOutput("f", (), FinishReason.ABORT, index=2),
                                  StepOutput("g", (), FinishReason.ABORT)]
    assert book.take_aborts() == [] and not book.has_work()
