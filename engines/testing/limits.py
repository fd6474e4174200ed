"""What the strategies need to know about an engine, read through the protocol only: its
limits and declarations, and what the run compares it with. What one check draws on top of
these (the features it uses, their settings) is its Drawing (engines.testing.features)."""

from __future__ import annotations

from dataclasses import dataclass

from engines.protocol import (
    BASE_PARAMS,
    Abortable,
    Engine,
    KVIntrospection,
    LoadIntrospection,
    SlotIntrospection,
    capabilities_of,
)

__all__ = ["DEFAULT_BLOCK", "DEFAULT_CONCURRENCY", "EngineLimits"]

# For engines that do not say: the concurrency bursts must exceed (vLLM and transformers both
# default to more than 8 running requests on a CPU, so bursts reach at least twice this), and
# the KV block size that prompts and outputs are drawn to cross (16: vLLM's, transformers').
DEFAULT_CONCURRENCY = 8
DEFAULT_BLOCK = 16


@dataclass(frozen=True, slots=True)
class EngineLimits:
    vocab_size: int
    max_model_len: int  # what every engine compared accepts (the engine's, reference, variants)
    own_max_model_len: int | None = None  # the engine under test's own: bad input is past it
    max_batch_size: int | None = None  # None: no SlotIntrospection
    concurrency: int | None = None  # requests the engine runs at once, where it says
    block_size: int | None = None  # KV block size, where the engine has KVIntrospection
    kv_blocks: int | None = None  # blocks in its pool, likewise
    abortable: bool = False
    kv: bool = False  # the engine has KVIntrospection
    load: bool = False  # the engine has LoadIntrospection
    sampling: bool = True  # draw sampled requests (off when the engine declares no seeds)
    logprobs: int = 0  # top candidates every request asks for (tie-aware parity)
    # SamplingParams fields drawn away from their defaults: those every engine compared
    # declares (Capabilities.supported_sampling); the rest are never sent.
    sampling_fields: frozenset[str] = BASE_PARAMS
    # Positions past which the model computes differently (a sliding window, a RoPE scaling
    # threshold), by name, sorted: what the engine declares (Capabilities.
    # position_thresholds), else an engine compared with it over the same model.
    thresholds: tuple[tuple[str, int], ...] = ()
    thresholds_from: str = ""  # who declared them: "the engine", "the reference engine", ...
    # (kv_total_blocks, requests run at once) of each config variant with a KV view: the
    # seed workloads overflow each pool that can overflow (engines.testing.seed_workloads).
    variant_pools: tuple[tuple[int, int], ...] = ()
    # The directory of the engine's tokenizer.json (Capabilities.tokenizer): guided
    # decoding is drawn only with one, and judged by it.
    tokenizer: str | None = None
    # Tenants (engines.testing.features.tenants): the LoRA adapters drawn requests may name (the
    # engine's declared `loras`, where it declares "lora" and every variant serves the same
    # name from the same directory), and whether cache salts are drawn (every engine
    # compared declares "cache_salt"). Empty / False: every request is the base tenant.
    loras: tuple[str, ...] = ()
    salts: bool = False
    # The engine and every variant re-add adapters at run time (LoRAManagement), and two of
    # `loras` are served from different directories: a seed workload re-adds one under its
    # own name with the other's weights (engines.testing.workload.AdapterSwap).
    lora_swaps: bool = False
    # The engine reports StepOutput.cached_prompt_tokens (declared in its output_fields).
    cached_counts: bool = False
    # The lowest temperature every engine compared samples at (Capabilities.min_temperature):
    # no lower one is drawn, as it would be served at this one.
    min_temperature: float = 0.0
    # Fields some engine compared refuses on a beam search (Capabilities.refused_with_beams):
    # never drawn on beams.
    refused_with_beams: frozenset[str] = frozenset()
    max_tokens: int = 6  # the usual budget cap: small budgets keep examples cheap
    short_prompt: int = 8  # the usual prompt length cap; some prompts are far longer

    @classmethod
    def of(cls, engine: Engine, **overrides: object) -> EngineLimits:
        slots = isinstance(engine, SlotIntrospection)
        kv = isinstance(engine, KVIntrospection)
        declared = capabilities_of(engine)
        fields: dict[str, object] = {
            "vocab_size": int(engine.vocab_size),
            "max_model_len": int(engine.max_model_len),
            "own_max_model_len": int(engine.max_model_len),
            "max_batch_size": int(engine.max_batch_size) if slots else None,  # type: ignore[attr-defined]
            "concurrency": declared.max_concurrency,
            "block_size": int(engine.kv_block_size) if kv else None,  # type: ignore[attr-defined]
            "kv_blocks": int(engine.kv_total_blocks) if kv else None,  # type: ignore[attr-defined]
            "abortable": isinstance(engine, Abortable),
            "kv": kv,
            "load": isinstance(engine, LoadIntrospection),
            "sampling_fields": declared.supported_sampling,
            "tokenizer": declared.tokenizer,
            "cached_counts": "cached_prompt_tokens" in declared.output_fields,
            "min_temperature": declared.min_temperature,
            "refused_with_beams": declared.refused_with_beams,
        }
        if declared.position_thresholds:
            fields["thresholds"] = tuple(sorted(declared.position_thresholds.items()))
            fields["thresholds_from"] = "the engine"
        fields.update(overrides)
        return cls(**fields)  # type: ignore[arg-type]

    @property
    def refuse_past(self) -> int:
        """The context a bad request must exceed: the engine under test's own, not the
        smallest of the engines compared (a variant with a shorter context would otherwise
        make the suite expect a refusal of a request the engine rightly accepts)."""
        return self.own_max_model_len or self.max_model_len

    @property
    def slots(self) -> int:
        """How many requests run at once: max_batch_size, else the declared concurrency,
        else a stated default."""
        return self.max_batch_size or self.concurrency or DEFAULT_CONCURRENCY

    @property
    def block(self) -> int:
        return self.block_size or DEFAULT_BLOCK

    @property
    def burst(self) -> int:
        """Requests in a burst: more than twice what the engine runs at once."""
        return 2 * self.slots + 1

    @property
    def reachable_thresholds(self) -> tuple[tuple[str, int], ...]:
        """The declared thresholds a request can pass: below the context."""
        return tuple((n, t) for n, t in self.thresholds if t < self.max_model_len - 1)

    @property
    def pool_overflows(self) -> bool | None:
        """Whether requests running at once can need more KV blocks than the pool holds, so
        that the engine must preempt (None: no pool declared)."""
        if self.kv_blocks is None:
            return None
        return self.slots * -(-self.max_model_len // self.block) > self.kv_blocks

    @property
    def long_budget(self) -> int:
        """A budget whose output crosses a KV block boundary at least twice."""
        return max(self.max_tokens, min(2 * self.block + 3, self.max_model_len - 1))
