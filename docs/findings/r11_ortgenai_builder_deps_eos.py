"""Report 11: onnxruntime-genai's builder, undeclared dependencies, and EOS 0 for a checkpoint
without one.

Two checks on `onnxruntime_genai.models.builder`:

- the distribution's declared requirements (`importlib.metadata.requires`) against the
  modules the builder imports (found by parsing its source files, nothing imported);
- the builder run on a copy of the checkpoint without an EOS anywhere (`eos_token_id: null`
  in config.json, no tokenizer files), then the `eos_token_id` it wrote into
  `genai_config.json`, and the tokenizer it wrote beside it.

Expected: every module the builder imports is declared (or the builder says what to
install), and a checkpoint with no EOS is refused or gets none, not token 0, which the
library then ends every request on.

Model files: `python -m engines.findings models DIR` (batching-engines) writes plain
transformers checkpoints under DIR/<preset>/ (here `tiny`, a Qwen2). The script copies its
config and weights (not its tokenizer) to DIR/ortgenai-<version>/r11-no-eos-checkpoint/ and
runs `python -m onnxruntime_genai.models.builder -i COPY -o OUT -p fp32 -e cpu` on it, once.

    python -m engines.findings models /tmp/m
    .venv-ortgenai/bin/python docs/findings/r11_ortgenai_builder_deps_eos.py --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 11,
    "library": "onnxruntime-genai",
    "venv": "ortgenai",
    "presets": ["tiny"],
    "workaround": "ci/ortgenai-env.sh installs onnx and onnx-ir; engines/adapters/ortgenai/"
                  "convert.py names the last token as EOS",
    "upstream": "dependencies: microsoft/onnxruntime-genai#1759 (open; duplicate #1758), #1920 "
                "(closed); EOS: not filed",
}

import argparse  # noqa: E402
import ast  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("onnxruntime-genai's builder: undeclared dependencies, and EOS 0 for a checkpoint "
         "without one")


class CannotRun(Exception):
    pass


def imported_modules(package_dir: Path) -> set[str]:
    """The top-level modules imported anywhere under the builder's package."""
    names: set[str] = set()
    for file in package_dir.rglob("*.py"):
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    args = ap.parse_args()
    print(f"report 11: {TITLE}")
    try:
        from importlib.metadata import requires
        from importlib.util import find_spec

        import onnxruntime_genai as og

        print(f"onnxruntime-genai {og.__version__}")
        spec = find_spec("onnxruntime_genai.models")
        if spec is None or not spec.submodule_search_locations:
            raise CannotRun("no onnxruntime_genai.models package (the builder) in this wheel")
        builder_dir = Path(next(iter(spec.submodule_search_locations)))
        source = args.model_dir / "tiny"
        if not (source / "config.json").is_file():
            raise CannotRun(f"no checkpoint at {source} (python -m engines.findings models DIR)")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    wrong = 0

    declared = {re.split(r"[ ;<>=!~\[]", r)[0].lower().replace("-", "_")
                for r in requires("onnxruntime-genai") or []}
    wanted = {"onnx", "onnx_ir", "torch", "transformers"}
    used = imported_modules(builder_dir) & wanted
    undeclared = sorted(used - declared)
    print("the builder's imports against the wheel's declared requirements:")
    print(f"  expected: {sorted(used)} declared (the wheel declares {sorted(declared)})")
    print(f"  observed: imported but undeclared: {undeclared}")
    wrong += bool({"onnx", "onnx_ir"} & set(undeclared))

    work = args.model_dir / f"ortgenai-{og.__version__}"
    copy, out = work / "r11-no-eos-checkpoint", work / "r11-no-eos"
    if not (out / "genai_config.json").is_file():
        shutil.rmtree(copy, ignore_errors=True)
        copy.mkdir(parents=True)
        for name in ("model.safetensors", "generation_config.json"):
            if (source / name).is_file():
                shutil.copy(source / name, copy / name)
        config = json.loads((source / "config.json").read_text())
        config.update(eos_token_id=None, bos_token_id=None, pad_token_id=None)
        (copy / "config.json").write_text(json.dumps(config, indent=2))
        generation = copy / "generation_config.json"
        if generation.is_file():
            g = json.loads(generation.read_text())
            g.pop("eos_token_id", None)
            generation.write_text(json.dumps(g, indent=2))
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(copy),
               "-o", str(out), "-p", "fp32", "-e", "cpu", "-c", str(work / ".cache-r11")]
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not (out / "genai_config.json").is_file():
            tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-2:])
            print("a checkpoint without an EOS (config null, no tokenizer files):")
            print("  expected: refused, or built with no EOS")
            print(f"  observed: the builder failed ({done.returncode}): {tail}")
            print("RESULT: reproduces" if wrong else "RESULT: fixed")
            return 1 if wrong else 0
    eos = json.loads((out / "genai_config.json").read_text())["model"]["eos_token_id"]
    written = ""
    if (out / "tokenizer.json").is_file():
        tokenizer = json.loads((out / "tokenizer.json").read_text())
        written = (f"; the tokenizer.json it wrote has {len(tokenizer['model']['vocab'])} "
                   f"vocabulary entries and added tokens "
                   f"{[(t['id'], t['content']) for t in tokenizer.get('added_tokens', [])]}")
    print("a checkpoint without an EOS (config null, no tokenizer files):")
    print("  expected: refused, or built with no EOS")
    print(f"  observed: genai_config.json eos_token_id {eos}{written}")
    wrong += eos in (0, [0])
    print("RESULT: reproduces" if wrong else "RESULT: fixed")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
