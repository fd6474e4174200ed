"""Report 12: onnxruntime-genai, on the CPU, `top_p` with `top_k` 0 (off) keeps more tokens
than the nucleus.

`TurnOptions.set_top_k(0)` is documented as "disables top-k"; `set_top_p(p)` is then the
nucleus filter alone: the fewest most likely tokens whose probabilities (after the
temperature) add up to at least p. The script reads the first token's logits from the
library (`Generator.get_logits`), computes that nucleus for p = 0.001 (the top token alone)
and p = 0.3, then draws 100 one-token samples (temperature 0.7) on the `Engine` (the static
scheduler: a model without paged attention, on the CPU) with top_k 0, and as a control with
top_k 1024 (the whole vocabulary: no top-k filter either), and the same with the `Generator`
(`set_search_options(do_sample=True, top_k=0, ...)`). It prints the likelihood ranks the
draws reached against the nucleus.

Model files: `python -m engines.findings models DIR` (batching-engines) writes plain
transformers checkpoints under DIR/<preset>/ (here `tiny`, a Qwen2, whose tokenizer names its
EOS). The script builds the ONNX model with the library's own builder, `python -m
onnxruntime_genai.models.builder -i DIR/tiny -o OUT -p fp32 -e cpu`, into
DIR/ortgenai-<version>/tiny/, once (the builder needs onnx, onnx-ir, torch and transformers
< 5.20: the venv of `bash ci/ortgenai-env.sh` has them).

    python -m engines.findings models /tmp/m
    .venv-ortgenai/bin/python docs/findings/r12_ortgenai_top_p_with_top_k_off.py --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 12,
    "library": "onnxruntime-genai",
    "venv": "ortgenai",
    "presets": ["tiny"],
    "workaround": "engines/adapters/ortgenai/adapter.py: top_k off is passed as the vocabulary "
                  "size",
    "upstream": "not filed (nearest: microsoft/onnxruntime-genai PR #2505 (merged), PR #1642, PR "
                "#1617 / #1631)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("onnxruntime-genai: on the CPU, top_p with top_k 0 (off) keeps more tokens than the "
         "nucleus")
PROMPT = [749, 508, 390, 11, 300, 42, 977]


class CannotRun(Exception):
    pass


def build(model_dir: Path, preset: str) -> Path:
    """The preset built by onnxruntime_genai.models.builder (fp32, cpu), once per version."""
    import onnxruntime_genai as og

    source = model_dir / preset
    if not (source / "config.json").is_file():
        raise CannotRun(f"no checkpoint at {source} (python -m engines.findings models DIR)")
    out = model_dir / f"ortgenai-{og.__version__}" / preset
    if (out / "genai_config.json").is_file():
        return out
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source),
           "-o", str(out), "-p", "fp32", "-e", "cpu", "-c", str(out.parent / f".cache-{preset}")]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (out / "genai_config.json").is_file():
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise CannotRun(f"the builder failed on {source}: {' | '.join(tail)}")
    return out


TEMPERATURE = 0.7
DRAWS = 100


def engine_draws(engine: object, top_k: int, top_p: float) -> list[int]:
    """DRAWS one-token turns on the prompt, sampled; the tokens drawn."""
    import numpy as np
    import onnxruntime_genai as og

    buffer = engine.create_event_buffer(16)
    drawn = []
    for _ in range(DRAWS):
        req = engine.create_request()
        opts = og.TurnOptions(req)
        opts.set_max_generated_tokens(1)
        opts.set_do_sample(True)
        opts.set_temperature(TEMPERATURE)
        opts.set_top_k(top_k)
        opts.set_top_p(top_p)
        req.begin_turn(np.array(PROMPT, dtype=np.int32), opts)
        while engine.has_pending_requests():
            drawn += [int(ev.token) for ev in engine.run(buffer) if ev.token is not None]
    return drawn


def generator_draws(model: object, top_k: int, top_p: float) -> list[int]:
    """The same draws with the Generator API."""
    import numpy as np
    import onnxruntime_genai as og

    drawn = []
    for _ in range(DRAWS):
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(PROMPT) + 1, do_sample=True, top_k=top_k,
                                  top_p=top_p, temperature=TEMPERATURE)
        gen = og.Generator(model, params)
        gen.append_tokens(np.array([PROMPT], dtype=np.int32))
        gen.generate_next_token()
        drawn.append(int(gen.get_next_tokens()[0]))
    return drawn


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    args = ap.parse_args()
    print(f"report 12: {TITLE}")
    try:
        import numpy as np
        import onnxruntime_genai as og

        print(f"onnxruntime-genai {og.__version__}")
        path = build(args.model_dir, "tiny")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    try:
        model = og.Model(og.Config(str(path)))
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(PROMPT) + 1, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(np.array([PROMPT], dtype=np.int32))
        logits = np.asarray(gen.get_logits(), dtype=np.float64).reshape(-1)
        engine = og.Engine(model)
    except Exception as e:  # noqa: BLE001
        print(f"RESULT: cannot-run the model does not load: {type(e).__name__}: {e}")
        return 2
    order = np.argsort(-logits, kind="stable")
    rank = {int(t): r for r, t in enumerate(order)}
    probs = np.exp((logits[order] - logits.max()) / TEMPERATURE)
    cumulative = np.cumsum(probs / probs.sum())
    print(f"prompt {PROMPT}: first-token probabilities at temperature {TEMPERATURE}, best "
          f"first: {[round(float(x), 4) for x in probs[:4] / probs.sum()]} ...")
    wrong = 0
    for top_p in (0.001, 0.3):
        nucleus = int(np.searchsorted(cumulative, top_p) + 1)
        # The source's cutoff (FindNucleus, src/sampling_distribution.h): the first i where
        # the sum so far passes top_p of itself plus a bound on the rest, (V - i - 1) times
        # token i's weight, which at i = 0 is the whole vocabulary's size.
        sums = np.cumsum(probs)
        bound = sums >= top_p * (sums + (len(probs) - 1 - np.arange(len(probs))) * probs)
        predicted = int(np.argmax(bound) + 1)
        print(f"top_p {top_p}: the nucleus is the {nucleus} most likely token(s) (the source's "
              f"tail-bound cutoff would keep {predicted})")
        print(f"  expected: {DRAWS} draws, every one of likelihood rank < {nucleus}")
        for label, top_k, draw in (("Engine, top_k 0", 0, engine_draws),
                                   ("Generator, top_k 0", 0, generator_draws),
                                   ("Engine, top_k 1024 (control)", 1024, engine_draws)):
            try:
                drawn = draw(engine if draw is engine_draws else model, top_k, top_p)
            except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
                print(f"  observed, {label}: {type(e).__name__}: {e}")
                wrong += top_k == 0
                continue
            ranks = sorted(rank[t] for t in drawn)
            outside = sum(r >= nucleus for r in ranks)
            print(f"  observed, {label}: {len(set(ranks))} distinct ranks, highest "
                  f"{ranks[-1]}; {outside} of {DRAWS} draws outside the nucleus")
            wrong += top_k == 0 and outside > 0
    print("RESULT: reproduces" if wrong else "RESULT: fixed")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
