"""Wave 4's request fields (constraints, the output surface, LoRA and cache salts): defaults
that mean "off", bad values refused by field, and engines that do not declare a field refusing
it by name rather than ignoring it. An engine that declared the token-choice surface
(BASE_PARAMS | PROCESSING_PARAMS, once ALL_PARAMS) is sent nothing else."""

from __future__ import annotations

import pytest

from engines.core.validation import check_request
from engines.protocol import (
    BASE_PARAMS,
    CONSTRAINT_PARAMS,
    DECLARABLE_FIELDS,
    OUTPUT_PARAMS,
    PROCESSING_PARAMS,
    REQUEST_FIELDS,
    Guided,
    InvalidRequest,
    LoRAManagement,
    Request,
    SamplingParams,
    StepOutput,
)

V = 64
EVERYTHING = DECLARABLE_FIELDS


def check(request: Request, supported: frozenset[str] = EVERYTHING) -> None:
    check_request(request, vocab_size=V, max_model_len=64, in_flight=(), supported=supported)


def test_the_defaults_change_nothing_and_old_declarations_keep_their_meaning() -> None:
    # every default passes an old declaration
    check(Request((1, 2)), supported=BASE_PARAMS | PROCESSING_PARAMS)
    assert not (BASE_PARAMS | PROCESSING_PARAMS) & (CONSTRAINT_PARAMS | OUTPUT_PARAMS
                                                    | REQUEST_FIELDS)
    assert DECLARABLE_FIELDS == (BASE_PARAMS | PROCESSING_PARAMS | CONSTRAINT_PARAMS
                                 | OUTPUT_PARAMS | REQUEST_FIELDS)
    out = StepOutput("r", (3,))
    assert (out.index, out.prompt_logprobs, out.text) == (0, None, None)


def test_lists_and_dicts_are_frozen_so_params_stay_hashable() -> None:
    params = SamplingParams(allowed_token_ids=[3, 1], logit_bias={5: 1.0, 2: -3.0},  # type: ignore[arg-type]
                            bad_words=[[1, 2], [7]], stop=["ab"],  # type: ignore[arg-type]
                            guided=Guided("choice", ["yes", "no"]))  # type: ignore[arg-type]
    assert params.allowed_token_ids == (3, 1) and params.logit_bias == ((2, -3.0), (5, 1.0))
    assert params.bad_words == ((1, 2), (7,)) and params.stop == ("ab",)
    assert params.guided is not None and params.guided.spec == ("yes", "no")
    hash(params)
    check(Request((1,), params))


@pytest.mark.parametrize(("field", "params"), [
    ("allowed_token_ids", SamplingParams(allowed_token_ids=())),
    ("allowed_token_ids[1]", SamplingParams(allowed_token_ids=(1, V))),
    ("logit_bias[0]", SamplingParams(logit_bias=((1, 100.5),))),
    ("logit_bias[0]", SamplingParams(logit_bias=((-1, 1.0),))),
    ("logit_bias[0]", SamplingParams(logit_bias=((1,),))),  # type: ignore[arg-type]
    ("logit_bias[1]", SamplingParams(logit_bias=((1, 2.0), (1, 3.0)))),
    ("bad_words[0]", SamplingParams(bad_words=((),))),
    ("bad_words[1][0]", SamplingParams(bad_words=((1,), (V,)))),
    ("guided.kind", SamplingParams(guided=Guided("lark", "x"))),  # type: ignore[arg-type]
    ("guided.spec", SamplingParams(guided=Guided("choice", ()))),
    ("guided.spec", SamplingParams(guided=Guided("regex", ""))),
    ("n", SamplingParams(n=0)),
    ("beam_width", SamplingParams(beam_width=0)),
    ("n", SamplingParams(n=3, beam_width=2)),
    ("length_penalty", SamplingParams(length_penalty=float("nan"))),
    ("prompt_logprobs", SamplingParams(prompt_logprobs=V + 1)),
    ("stop", SamplingParams(stop=("",))),
    ("include_stop_str_in_output", SamplingParams(include_stop_str_in_output=1)),  # type: ignore[arg-type]
])
def test_each_wave4_field_past_its_boundary_is_refused_by_name(field: str,
                                                               params: SamplingParams) -> None:
    with pytest.raises(InvalidRequest, match=f"^{field.replace('[', '.').replace(']', '.')}"):
        check(Request((1, 2), params))


@pytest.mark.parametrize("field", ["lora", "cache_salt"])
def test_request_fields_are_strings_and_refused_where_not_declared(field: str) -> None:
    with pytest.raises(InvalidRequest, match=f"^{field}: must be a non-empty string"):
        check(Request((1,), **{field: ""}))  # type: ignore[arg-type]
    request = Request((1,), **{field: "tenant-a"})  # type: ignore[arg-type]
    check(request)
    with pytest.raises(InvalidRequest, match=f"^{field}: 'tenant-a' is not supported"):
        check(request, supported=BASE_PARAMS | PROCESSING_PARAMS)


@pytest.mark.parametrize(("field", "value"), [
    ("allowed_token_ids", (1,)), ("logit_bias", ((1, 2.0),)), ("bad_words", ((1,),)),
    ("guided", Guided("regex", "a+")), ("n", 2), ("beam_width", 2), ("length_penalty", 0.5),
    ("prompt_logprobs", 1), ("stop", ("x",)), ("include_stop_str_in_output", True),
])
def test_an_engine_that_did_not_declare_a_wave4_field_refuses_it(field: str,
                                                                 value: object) -> None:
    request = Request((1, 2), SamplingParams(**{field: value}))  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match=f"^{field}: .* is not supported by this engine"):
        check(request, supported=BASE_PARAMS | PROCESSING_PARAMS)
    check(request)


def test_our_engines_refuse_what_they_do_not_serve_yet() -> None:
    from engines.slot.continuous import ContinuousBatchEngine

    # Beam search: the sequential and paged engines only (engines.core.beams).
    engine = ContinuousBatchEngine()
    with pytest.raises(InvalidRequest, match="^beam_width: 2 is not supported"):
        engine.add_request(Request((1, 2), SamplingParams(beam_width=2)))
    assert not engine.has_work()


def test_lora_management_is_a_structural_protocol() -> None:
    class Manager:
        def add_lora(self, name: str, path: str) -> None: ...

        def remove_lora(self, name: str) -> None: ...

    assert isinstance(Manager(), LoRAManagement) and not isinstance(object(), LoRAManagement)
