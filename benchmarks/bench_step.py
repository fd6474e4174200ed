"""One decode step of a full batch, timed by asv (each sample is one step)."""

from __future__ import annotations

from benchmarks.common import ENGINES, config
from engines.bench.config import default_engines
from engines.bench.devices import synchronizer
from engines.bench.draws import uniform
from engines.protocol import Engine

PROMPT_LEN = 16
WARMUP_STEPS = 5  # first calls of each kernel shape, allocator growth: not what is measured


class DecodeStep:
    params = ENGINES
    param_names = ["engine"]
    number = 1  # each call is one step; a sample is one step
    repeat = 20
    warmup_time = 0.0  # the setup below warms up with real steps instead

    def setup(self, engine: str) -> None:
        cfg = config()
        self.engine: Engine = default_engines(cfg)[engine]()
        self.sync = synchronizer(cfg.device)
        budget = self.engine.max_model_len - PROMPT_LEN  # far more steps than asv will take
        items = uniform(cfg.max_batch_size, prompt_len=PROMPT_LEN, max_tokens=budget,
                        vocab_size=self.engine.vocab_size)
        for i, item in enumerate(items):
            self.engine.add_request(item.to_request(f"step-{i}"))
        for _ in range(1 + WARMUP_STEPS):  # admission and prefill, then warm decode steps
            self.engine.step()
        if self.sync is not None:
            self.sync()

    def time_decode_step(self, engine: str) -> None:
        self.engine.step()
        if self.sync is not None:
            self.sync()  # the step's queued kernels are part of its time
