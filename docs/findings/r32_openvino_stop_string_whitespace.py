"""Report 32: OpenVINO GenAI, a stop string ending in whitespace is cut out of the output even
with include_stop_str_in_output, and a request whose whole output is such a stop string ends
with nothing to read.

`ContinuousBatchingPipeline`, greedy, `ignore_eos`, the step API (`add_request` / `step` /
`GenerationHandle.read`, and `read_all`), set beside the same pipeline's `generate()` for the
same request. OpenVINO's own `GenerationConfig` docs: "include_stop_str_in_output: if set to
true stop string that matched generation will be included in generation output". The sampler
(`match_stop_string`, src/cpp/src/sampling/sampler.cpp) strips trailing spaces and newlines
from the text up to the end of the stop string before counting the tokens to keep, so a stop
string that ends in whitespace ("\\n\\n", "r ") loses its tokens; "r a" keeps them.

Model files: `python -m engines.findings models DIR` (batching-engines) writes the `tiny`
preset as a plain transformers checkpoint with a byte-level BPE tokenizer under DIR/tiny/.
The script converts it with OpenVINO's documented route, `optimum-cli export openvino --task
text-generation-with-past --weight-format fp32` (optimum-intel, which also converts the
tokenizer into openvino_tokenizer.xml / openvino_detokenizer.xml), into IR-DIR/tiny/
(default DIR/openvino-ir/), once. optimum-intel must be importable: in the venv of `bash
ci/openvino-env.sh` it is the layer in <venv>/optimum-export, which the script puts on the
exporter's PYTHONPATH itself; OPTIMUM_EXPORT_PATH names another folder. An IR converted
elsewhere can be given with --ir-dir.

    python -m engines.findings models /tmp/m
    .venv-openvino/bin/python docs/findings/r32_openvino_stop_string_whitespace.py \
        --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 32,
    "library": "openvino-genai",
    "venv": "openvino",
    "presets": ["tiny"],
    "workaround": None,
    "upstream": "not filed (nearest: openvinotoolkit/openvino.genai PR #817, #1382, #1676, #1719, "
                "#4050)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("OpenVINO GenAI: a stop string ending in whitespace is cut out of the output even with "
         "include_stop_str_in_output, and a request whose whole output is one ends with nothing "
         "to read")


class CannotRun(Exception):
    pass


def convert(model_dir: Path, ir_root: Path | None, preset: str) -> Path:
    """The preset's IR, exported once with optimum-cli (see the docstring)."""
    source = model_dir / preset
    if not (source / "config.json").is_file():
        raise CannotRun(f"no checkpoint at {source} (python -m engines.findings models DIR)")
    out = (ir_root or model_dir / "openvino-ir") / preset
    if (out / "openvino_model.xml").is_file():
        return out
    layer = os.environ.get("OPTIMUM_EXPORT_PATH") or str(Path(sys.prefix) / "optimum-export")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    if Path(layer).is_dir():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [layer, env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "optimum.commands.optimum_cli", "export", "openvino",
           "--model", str(source), "--task", "text-generation-with-past",
           "--weight-format", "fp32", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (out / "openvino_model.xml").is_file():
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise CannotRun(f"optimum-cli export openvino failed on {source}: {' | '.join(tail)}")
    return out


def pipeline(ir: Path):
    import openvino_genai as ov_genai

    sc = ov_genai.SchedulerConfig()
    sc.cache_size, sc.num_kv_blocks, sc.max_num_seqs = 0, 16, 8
    return ov_genai.ContinuousBatchingPipeline(
        str(ir), sc, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"})


def config(n: int, stop: str | None, include: bool):
    import openvino_genai as ov_genai

    gc = ov_genai.GenerationConfig()
    gc.max_new_tokens, gc.ignore_eos, gc.do_sample = n, True, False
    if stop is not None:
        gc.stop_strings, gc.include_stop_str_in_output = {stop}, include
    return gc


def reason(r) -> str:
    return str(r).rsplit(".", 1)[-1]


def serve(ir: Path, prompt: list[int], n: int, stop: str | None, include: bool) -> dict:
    """The request through the step API (every read, then what read_all gives on a second
    pipeline) and through generate(), each on a fresh pipeline."""
    import numpy as np
    import openvino as ov

    ids = ov.Tensor(np.array([prompt], dtype=np.int64))
    pipe = pipeline(ir)
    h = pipe.add_request(0, ids, config(n, stop, include))
    tokens, finish, reads = [], "none", 0
    while pipe.has_non_finished_requests():
        pipe.step()
        while h.can_read():
            reads += 1
            for out in h.read().values():
                tokens += [int(t) for t in out.generated_ids]
                finish = reason(out.finish_reason) if reason(out.finish_reason) != "NONE" \
                    else finish
    pipe = pipeline(ir)
    h2 = pipe.add_request(0, ids, config(n, stop, include))
    while pipe.has_non_finished_requests():
        pipe.step()
    read_all = [([int(t) for t in o.generated_ids], reason(o.finish_reason))
                for o in h2.read_all()]
    res = pipeline(ir).generate([ids], [config(n, stop, include)])[0]
    generate = ([[int(t) for t in s] for s in res.m_generation_ids],
                [reason(f) for f in res.finish_reasons])
    return {"tokens": tokens, "finish": finish, "reads": reads, "read_all": read_all,
            "generate": generate}


# Prompts (token ids of the preset's vocabulary) and what they give greedily without stops.
TWO_TOKENS = [1, 2, 3]                       # [81, 477, 477]: "r", " ar", " ar"
TEXT_THEN_BLANK = [934, 570, 198]            # [475, 506, 694, 771, 467, 198, 198, 198]
BLANK_FIRST = [434, 465, 665, 129, 826, 198]  # [198, 198, 198, 626, 994, 477, 454, 477]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--ir-dir", type=Path, default=None)
    args = ap.parse_args()
    print(f"report 32: {TITLE}")
    try:
        import openvino_genai as ov_genai
        print(f"openvino-genai {ov_genai.__version__}")
        ir = convert(args.model_dir, args.ir_dir, "tiny")
        tok = ov_genai.Tokenizer(str(ir))
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2

    def text(tokens: list[int]) -> str:
        return repr(tok.decode(tokens)) if tokens else "''"

    bad = 0

    def check(what: str, expected: tuple[list[int], str], got: dict) -> None:
        nonlocal bad
        observed = (got["tokens"], got["finish"])
        print(what)
        print(f"  expected: tokens {expected[0]} (text {text(expected[0])}), finish "
              f"{expected[1]}")
        print(f"  observed: tokens {observed[0]} (text {text(observed[0])}), finish "
              f"{observed[1]}; {got['reads']} read(s); read_all {got['read_all']}; "
              f"generate() {got['generate']}")
        bad += observed != expected

    plain = serve(ir, TEXT_THEN_BLANK, 8, None, False)["tokens"]
    blank = serve(ir, BLANK_FIRST, 8, None, False)["tokens"]
    two = serve(ir, TWO_TOKENS, 3, None, False)["tokens"]
    print(f"without stop strings: {TEXT_THEN_BLANK} -> {plain} ({text(plain)}); "
          f"{BLANK_FIRST} -> {blank} ({text(blank)}); {TWO_TOKENS} -> {two} ({text(two)})")
    cut = plain.index(198)
    # (a) the whole output so far is the stop string: generate() gives an empty sequence
    # finished STOP; the step API must give the same (its only way to say the request ended).
    check('(a) stop "\\n\\n", include False, the output starts with a blank line',
          ([], "STOP"), serve(ir, BLANK_FIRST, 8, "\n\n", False))
    check('(a) stop "r ", include False, completed by the 2nd token',
          ([], "STOP"), serve(ir, TWO_TOKENS, 3, "r ", False))
    # (b) include_stop_str_in_output: the output ends with the stop string.
    check('(b) stop "\\n\\n", include True',
          (plain[:cut + 2], "STOP"), serve(ir, TEXT_THEN_BLANK, 8, "\n\n", True))
    check('(b) stop "\\n\\n", include True, the output starts with a blank line',
          (blank[:2], "STOP"), serve(ir, BLANK_FIRST, 8, "\n\n", True))
    check('(b) stop "r ", include True', (two[:2], "STOP"), serve(ir, TWO_TOKENS, 3, "r ", True))
    # not a bug: the same two tokens, the stop string not ending in whitespace
    ok = serve(ir, TWO_TOKENS, 3, "r a", True)
    print(f'control, stop "r a", include True: tokens {ok["tokens"]} ({text(ok["tokens"])}), '
          f'finish {ok["finish"]}')
    # (c) the stop string completed by the last token of the budget: STOP, the text cut
    check('(c) stop "\\n\\n", include False, completed by the last of 7 tokens',
          (plain[:cut], "STOP"), serve(ir, TEXT_THEN_BLANK, cut + 2, "\n\n", False))
    print(f"{bad} of 6 checks differ")
    print("RESULT: reproduces" if bad else "RESULT: fixed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
