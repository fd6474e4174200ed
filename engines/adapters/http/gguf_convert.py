"""Child process: a checkpoint directory to a GGUF F32 file, with llama.cpp's own converter.

    python -m engines.adapters.http.gguf_convert LLAMA_CPP_SRC CHECKPOINT OUT.gguf

LLAMA_CPP_SRC is a llama.cpp source tree (its convert_hf_to_gguf.py, conversion/ and
gguf-py/). Run as a process of its own because the converter is a script: it parses argv,
configures logging and puts its own gguf-py first on sys.path.

The one change to the converter: the vocabulary. A preset has no real tokenizer (prompts and
outputs are token ids), and the converter's BPE path refuses one it does not know. llama.cpp's
"test" tokenizer type fits: a token list and nothing else, no default BOS or EOS (the "gpt2"
type defaults both to token 11, and llama-server would then stop at every token 11), and
token i detokenizes to i in hex.
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


def main(src: str, checkpoint: str, out: str) -> None:
    sys.path.insert(0, src)
    import convert_hf_to_gguf as cli  # type: ignore[import-not-found]

    find = cli.get_model_class

    def with_test_vocab(*args: Any, **kwargs: Any) -> Any:
        cls = find(*args, **kwargs)
        # The converter's classes require model_arch in each subclass's own namespace.
        return type(cls.__name__, (cls,), {"set_vocab": _test_vocab,
                                           "model_arch": cls.model_arch})

    cli.get_model_class = with_test_vocab
    sys.argv = ["convert_hf_to_gguf.py", checkpoint, "--outtype", "f32", "--outfile", out]
    cli.main()
    if not Path(out).is_file():
        raise SystemExit(f"convert_hf_to_gguf wrote no {out}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
