"""One decode step of a full batch, timed by asv."""

from __future__ import annotations

from benchmarks.common import ENGINES, config
from engines.bench import comparison
from engines.bench.draws import uniform
from engines.protocol import Engine

PROMPT_LEN = 16


class DecodeStep:
    params = ENGINES
    param_names = ["engine"]
    number = 1  # each call is one step; a sample is one step
    repeat = 20
    warmup_time = 0.0

    def setup(self, engine: str) -> None:
        cfg = config()
        self.engine: Engine = comparison.default_engines(cfg)[engine]()
        budget = self.engine.max_model_len - PROMPT_LEN  # far more steps than asv will take
        items = uniform(cfg.max_batch_size, prompt_len=PROMPT_LEN, max_tokens=budget,
                        vocab_size=self.engine.vocab_size)
        for i, item in enumerate(items):
            self.engine.add_request(item.to_request(f"step-{i}"))
        self.engine.step()  # admission and prefill: every later step is a pure decode

    def time_decode_step(self, engine: str) -> None:
        self.engine.step()
