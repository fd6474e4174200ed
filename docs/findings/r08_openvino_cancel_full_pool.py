"""Report 8: OpenVINO GenAI, after a cancel in a full KV pool the next request is dropped
unserved (status IGNORED, no output, no error).

`ContinuousBatchingPipeline` with two 32-token KV blocks (`num_kv_blocks=2`) and 16 tokens a
step: a 33-token request fills both blocks over three `step()`s and is cancelled
(`GenerationHandle.cancel()`); a 1-token request added right after never runs.

Model files: `python -m engines.findings models DIR` (batching-engines) writes the `tiny`
preset as a plain transformers checkpoint under DIR/tiny/. The script converts it with
OpenVINO's documented route, `optimum-cli export openvino --task text-generation-with-past
--weight-format fp32` (optimum-intel), into IR-DIR/tiny/ (default DIR/openvino-ir/), once.
optimum-intel must be importable: in the venv of `bash ci/openvino-env.sh` it is the layer in
<venv>/optimum-export, which the script puts on the exporter's PYTHONPATH itself;
OPTIMUM_EXPORT_PATH names another folder. An IR converted elsewhere can be given with
--ir-dir.

    python -m engines.findings models /tmp/m
    .venv-openvino/bin/python docs/findings/r08_openvino_cancel_full_pool.py --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 8,
    "library": "openvino-genai",
    "venv": "openvino",
    "presets": ["tiny"],
    "workaround": "engines/adapters/openvino/adapter.py: raises RequestDropped when the "
                  "library ends a request unasked",
    "upstream": "not filed (nearest: openvinotoolkit/openvino.genai PR #4050 (merged); "
                "openvinotoolkit/model_server#4503)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "OpenVINO GenAI: after a cancel in a full KV pool, the next request is dropped unserved"


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


def pipeline(ir: Path, blocks: int):
    import openvino_genai as ov_genai

    sc = ov_genai.SchedulerConfig()
    sc.cache_size, sc.num_kv_blocks, sc.max_num_seqs = 0, blocks, 4
    sc.dynamic_split_fuse, sc.max_num_batched_tokens = True, 16
    return ov_genai.ContinuousBatchingPipeline(
        str(ir), sc, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"})


def scenario(ir: Path, blocks: int, steps_before_cancel: int) -> dict[str, tuple]:
    """A 33-token request (2 new tokens), cancelled after some steps; then a 1-token request
    (1 new token); step until nothing is left. Each request's tokens, finish and status."""
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    def cfg(n: int):
        gc = ov_genai.GenerationConfig()
        gc.max_new_tokens, gc.ignore_eos, gc.do_sample = n, True, False
        return gc

    pipe = pipeline(ir, blocks)
    handles = {"long": pipe.add_request(0, ov.Tensor(np.array([list(range(1, 34))], np.int64)),
                                        cfg(2))}
    got: dict[str, list] = {"long": [[], "none"], "short": [[], "none"]}

    def drain() -> None:
        for name, h in handles.items():
            while h.can_read():
                for out in h.read().values():
                    got[name][0] += [int(t) for t in out.generated_ids]
                    r = str(out.finish_reason).rsplit(".", 1)[-1]
                    got[name][1] = r if r != "NONE" else got[name][1]

    for _ in range(steps_before_cancel):
        pipe.step()
        drain()
    usage = pipe.get_metrics().cache_usage
    handles["long"].cancel()
    handles["short"] = pipe.add_request(1, ov.Tensor(np.array([[0]], np.int64)), cfg(1))
    while pipe.has_non_finished_requests():
        pipe.step()
        drain()
    # one more 1-token request once the pipeline is idle: were the blocks leaked?
    handles["after"] = pipe.add_request(2, ov.Tensor(np.array([[0]], np.int64)), cfg(1))
    got["after"] = [[], "none"]
    while pipe.has_non_finished_requests():
        pipe.step()
        drain()
    drain()
    return {name: (got[name][0], got[name][1], str(h.get_status()).rsplit(".", 1)[-1], usage)
            for name, h in handles.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--ir-dir", type=Path, default=None)
    args = ap.parse_args()
    print(f"report 8: {TITLE}")
    try:
        import openvino_genai as ov_genai
        print(f"openvino-genai {ov_genai.__version__}")
        ir = convert(args.model_dir, args.ir_dir, "tiny")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    try:
        got = scenario(ir, 2, 3)
    except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
        print(f"observed: {type(e).__name__}: {e}")
        print("RESULT: reproduces")
        return 1
    short = got["short"]
    print("two 32-token blocks, 16 tokens a step; the 33-token request cancelled after 3 steps "
          f"(cache usage {got['long'][3]:.0f} %), then a 1-token request added:")
    print("expected: long CANCEL (or STOP/LENGTH if it finished first); short served: one "
          "token, finish LENGTH, status FINISHED")
    print(f"observed: long {got['long'][:3]}; short tokens {short[0]}, finish {short[1]}, "
          f"status {short[2]}")
    after = got["after"]
    print(f"then, the pipeline idle, another 1-token request: tokens {after[0]}, finish "
          f"{after[1]}, status {after[2]}")
    for blocks, steps in ((2, 2), (3, 3)):
        c = scenario(ir, blocks, steps)["short"]
        print(f"control, {blocks} blocks, cancelled after {steps} steps: short tokens {c[0]}, "
              f"finish {c[1]}, status {c[2]}")
    bad = not (len(short[0]) == 1 and short[1] == "LENGTH" and short[2] == "FINISHED")
    print("RESULT: reproduces" if bad else "RESULT: fixed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
