"""Child process: a checkpoint directory to a GGUF file, with llama.cpp's own converter.

    python -m engines.adapters.http.gguf_convert LLAMA_CPP_SRC CHECKPOINT OUT.gguf [TOKENIZER]
        [--outtype f32|f16|bf16|q8_0]

--outtype is the converter's own (default f32, the adapters' exact configuration): f16 and
bf16 store the matrices in that format, q8_0 quantizes them in blocks of 32 (an f16 scale per
block); norms and biases stay F32 in each.

LLAMA_CPP_SRC is a llama.cpp source tree (its convert_hf_to_gguf.py, conversion/ and
gguf-py/). Run as a process of its own because the converter is a script: it parses argv,
configures logging and puts its own gguf-py first on sys.path.

The one change to the converter: the vocabulary. A preset has no real tokenizer (prompts and
outputs are token ids), and the converter's BPE path refuses one it does not know. llama.cpp's
"test" tokenizer type fits: a token list and nothing else, no default BOS or EOS (the "gpt2"
type defaults both to token 11, and llama-server would then stop at every token 11), and
token i detokenizes to i in hex.

With TOKENIZER (a directory holding the presets' byte-level BPE, engines.tokenizer), the
vocabulary is that BPE instead, as llama.cpp's "gpt2" type: its tokens, its merges, and its
special `<|endoftext|>` (the last id) declared as EOS (so an end-of-generation token, what a
grammar needs to end on), no BOS added. Only the guided configuration uses it: llama-server
bans every end-of-generation token under `ignore_eos` (engines.adapters.http.llama_guided).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def _test_vocab(self: Any) -> None:
    import gguf  # the vendored gguf-py, put on sys.path by the converter

    n = int(self.hparams["vocab_size"])
    self.gguf_writer.add_tokenizer_model("test")
    self.gguf_writer.add_tokenizer_pre("default")
    self.gguf_writer.add_token_list([f"t{i}" for i in range(n)])
    self.gguf_writer.add_token_types([gguf.TokenType.NORMAL] * n)


def _bpe_vocab(tokenizer: str) -> Any:
    def set_vocab(self: Any) -> None:
        import json

        import gguf

        spec = json.loads((Path(tokenizer) / "tokenizer.json").read_text())
        n = int(self.hparams["vocab_size"])
        names = {int(i): t for t, i in spec["model"]["vocab"].items()}
        special = {int(t["id"]): t["content"] for t in spec.get("added_tokens", [])}
        names.update(special)
        if sorted(names) != list(range(n)):
            raise SystemExit(f"{tokenizer}: ids are not 0..{n - 1}")
        merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
        eos = next(i for i, t in special.items() if t == "<|endoftext|>")
        w = self.gguf_writer
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list([names[i] for i in range(n)])
        w.add_token_types([gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL
                           for i in range(n)])
        w.add_token_merges(merges)
        w.add_eos_token_id(eos)
        w.add_bos_token_id(eos)  # never added (below); "gpt2" would default it to token 11
        w.add_add_bos_token(False)
        w.add_add_eos_token(False)

    return set_vocab


OUTTYPES = ("f32", "f16", "bf16", "q8_0")  # the converter's, less its ternary and "auto" ones


def main(src: str, checkpoint: str, out: str, tokenizer: str | None = None, *,
         outtype: str = "f32") -> None:
    if outtype not in OUTTYPES:
        raise SystemExit(f"--outtype: {outtype!r}; expected one of {', '.join(OUTTYPES)}")
    sys.path.insert(0, src)
    import convert_hf_to_gguf as cli  # type: ignore[import-not-found]

    find = cli.get_model_class

    def with_test_vocab(*args: Any, **kwargs: Any) -> Any:
        cls = find(*args, **kwargs)
        # The converter's classes require model_arch in each subclass's own namespace.
        vocab = _test_vocab if tokenizer is None else _bpe_vocab(tokenizer)
        return type(cls.__name__, (cls,), {"set_vocab": vocab,
                                           "model_arch": cls.model_arch})

    cli.get_model_class = with_test_vocab
    sys.argv = ["convert_hf_to_gguf.py", checkpoint, "--outtype", outtype, "--outfile", out]
    cli.main()
    if not Path(out).is_file():
        raise SystemExit(f"convert_hf_to_gguf wrote no {out}")


def _cli(argv: list[str]) -> None:
    outtype = "f32"
    if "--outtype" in argv:
        at = argv.index("--outtype")
        if at + 1 == len(argv):
            raise SystemExit(__doc__)
        outtype = argv[at + 1]
        argv = argv[:at] + argv[at + 2:]
    if len(argv) not in (3, 4):
        raise SystemExit(__doc__)
    main(*argv, outtype=outtype)


if __name__ == "__main__":
    _cli(sys.argv[1:])
