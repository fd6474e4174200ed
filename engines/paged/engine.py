"""Paged engine: one block KV pool for all requests, chunked prefill under a per-step token
budget, prefix caching and preemption by recompute (the vLLM V1 / Sarathi-Serve design).

One step: retire aborted requests; schedule (engines.paged.schedule): decode rows first,
then prompt chunks, fewest tokens left first, admitting waiting requests first come first
served while the token budget, the batch size and free blocks allow; one forward pass over
every scheduled span; sample for each request whose span reached its last token; retire
finished requests.

Blocks are allocated as tokens need them. When a running request needs a block and none is
free, the most recently admitted request gives its blocks back and goes to the front of the
queue; on return it is recomputed from its prompt and every token generated so far (its full
blocks are usually still in the prefix cache), and its output goes on from where it stopped.

By default 16 seats share the KV memory of 8 whole contexts (what the slot engines' 8
slots reserve): a paged request holds only the blocks its tokens need, so the same memory
runs twice the requests at once, and requests that do grow long make it preempt. (A pool of
a whole context per seat could never run out, and preemption would be dead code.)

LoRA adapters (`loras`, name -> PEFT directory, or `add_lora` at run time) are batched
together: each row carries its adapter's slot and the forward adds every token's own delta
(engines.paged.lora). A request's prefix keys start from a digest of its adapter (the name
and which load of it: a name removed and added again is other weights) and its cache salt,
so requests differing in either never share a block.

Speculative decoding (`speculation=Speculation(...)`, off by default; engines.paged
.speculate): a prompt-lookup or draft-model drafter proposes up to k tokens per decoding
request, verified in the step's one forward; a request's tokens are the same as without it.

Not SlotIntrospection: requests have no slots that stay compact (Capabilities.max_concurrency
says how many run at once); KVIntrospection describes the pool instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from engines.core.beams import check_beam_request
from engines.core.engine import EngineCore
from engines.core.lora import LoraNames, read_peft
from engines.core.prompt_logprobs import prompt_entries
from engines.core.sampling import sample
from engines.models import DEFAULT_PRESET
from engines.paged.beams import PagedBeams
from engines.paged.blocks import BlockKey, BlockPool
from engines.paged.fork import PagedForks
from engines.paged.forward import PagedForward, Row
from engines.paged.invariant import InvariantForward
from engines.paged.lora import DEFAULT_MAX_LORA_RANK, DEFAULT_MAX_LORAS, LoraStacks
from engines.paged.schedule import PagedSchedule
from engines.paged.speculate import Speculation, SpeculativeSteps
from engines.paged.state import PagedRequest
from engines.protocol import (
    BASE_PARAMS,
    CONSTRAINT_PARAMS,
    PROCESSING_PARAMS,
    TEXT_PARAMS,
    Capabilities,
    InvalidRequest,
    Request,
    StepOutput,
    child_key,
)

DEFAULT_BLOCK_SIZE = 16
# Seats, and the whole contexts of KV they share (kv_slots defaults to half the seats): the
# memory of the slot engines' default 8 slots, shared by twice as many requests.
DEFAULT_MAX_BATCH_SIZE = 16
# Tokens one step may compute while any request is decoding, decode rows and prompt chunks
# together: a CPU default. It bounds what a step costs the decoding requests (the ITL spike);
# with none decoding a step takes up to max_prefill_only_tokens. On the tiny preset a decode
# step of 7 rows costs ~0.6 ms, almost all of it fixed (dispatching the model's small ops);
# a prompt token adds ~5.5 us plus its attention over everything before it: a 62-token chunk
# over 420 cached tokens makes that step 2.4x (attention 560 of the 840 us it adds). The bench
# (--quick, its default rotation static/continuous/paged, ratios to continuous within each
# paired run, 2 runs a budget; shared 2-core machine at load 2.0-2.2):
#   budget   ITL spike (continuous 6.9-8.1x)   capacity / continuous   closed tok/s
#     96       1.73-1.79                        0.95-0.97               0.99-1.00
#    104       2.35                             0.96-0.97               0.97-1.00
#    112       1.99-2.17                        0.99-1.00               0.99-1.00
#    128       2.56-2.65                        0.99-1.00               0.99-1.00
# (64 and 80, scheduled oldest prompt first and under the budget in every step: spike 1.10-1.31,
# capacity 0.87-0.92.) The spike is not monotone in the budget because the bench times only the
# step that produced a prompt's first token, its last chunk: the 482-token class leaves a last
# chunk of ~94 tokens at 104 and ~62 at 112. scripts/chunk_steps.py (at 685ed42, since removed)
# timed every chunk step; at 96 the median one cost its incumbents ~2.1x a pure decode step.
# Above 112 throughput stops growing: with 8 seats (the table's configuration, as
# scripts/paged_budgets.py built it at 685ed42; the default is 16 now) a prompt's chunks hold a
# seat that does not decode, and the seat count, not the budget, sets the steps. 96 is the
# largest budget measured whose spike stayed under 2x in every run; 112 buys 2-4% throughput for
# a spike of 2.0-2.2 (the table: measured at 685ed42). On a GPU, where a step's cost is flat
# over hundreds of tokens, pass a larger budget (vLLM's run to thousands).
DEFAULT_TOKEN_BUDGET = 96


class PagedEngine(SpeculativeSteps, PagedBeams, PagedForks, PagedSchedule,
                  EngineCore[PagedRequest]):
    name = "paged"
    # n > 1: engines.paged.fork (children share the prompt's blocks copy-on-write); beam
    # search: engines.paged.beams (a group of rows whose tables fork copy-on-write).
    # Each request's prefix-cache hit tokens at its first admission, on its next output
    # (output_fields).
    CAPABILITIES = dataclasses.replace(
        EngineCore.CAPABILITIES,
        supported_sampling=(BASE_PARAMS | PROCESSING_PARAMS | CONSTRAINT_PARAMS | TEXT_PARAMS
                            | {"lora", "cache_salt", "prompt_logprobs", "n", "beam_width",
                               "length_penalty"}),
        output_fields=frozenset({"cached_prompt_tokens"}))

    def __init__(
        self,
        model: Any = DEFAULT_PRESET,
        *,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype = torch.float32,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        max_model_len: int | None = None,
        seed: int = 0,
        block_size: int = DEFAULT_BLOCK_SIZE,
        num_blocks: int | None = None,  # default: kv_slots whole-context requests' worth
        kv_slots: int | None = None,  # default: half max_batch_size, rounded up
        max_num_batched_tokens: int = DEFAULT_TOKEN_BUDGET,
        max_prefill_only_tokens: int | None = None,  # default: batch x context
        enable_prefix_caching: bool = True,
        compiled: str = "off",  # engines.paged.compiled: "step" (CPU), "graphs" (CUDA)
        loras: Mapping[str, str | Path] | None = None,  # adapter name -> PEFT directory
        max_loras: int = DEFAULT_MAX_LORAS,  # adapters served at once
        max_lora_rank: int = DEFAULT_MAX_LORA_RANK,
        speculation: Speculation | None = None,  # engines.paged.speculate; None: off
        batch_invariant: bool = False,  # engines.paged.invariant: the same bits in any batch
    ) -> None:
        super().__init__(model, device=device, dtype=dtype, max_batch_size=max_batch_size,
                         max_model_len=max_model_len, seed=seed)
        if block_size < 1:
            raise ValueError(f"block_size: must be >= 1, got {block_size}")
        if max_num_batched_tokens < max_batch_size:
            raise ValueError(f"max_num_batched_tokens: {max_num_batched_tokens} is below "
                             f"max_batch_size {max_batch_size}; every running request must "
                             "be able to decode in every step")
        if max_prefill_only_tokens is None:
            max_prefill_only_tokens = max(max_num_batched_tokens,
                                          max_batch_size * self.max_model_len)
        if max_prefill_only_tokens < max_num_batched_tokens:
            raise ValueError(f"max_prefill_only_tokens: {max_prefill_only_tokens} is below "
                             f"max_num_batched_tokens {max_num_batched_tokens}")
        if num_blocks is None:
            # Half the seats' whole contexts: seats can need up to twice the pool.
            slots = -(-max_batch_size // 2) if kv_slots is None else kv_slots
            num_blocks = slots * -(-self.max_model_len // block_size)
        if num_blocks < 1:
            raise ValueError(f"num_blocks: must be >= 1, got {num_blocks}")
        self.kv_block_size = block_size
        self.kv_total_blocks = num_blocks
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_prefill_only_tokens = max_prefill_only_tokens
        self.pool = BlockPool(num_blocks, enable_prefix_caching=enable_prefix_caching)
        if batch_invariant and compiled != "off":
            raise ValueError(f"compiled: {compiled!r} with batch_invariant=True; the invariant "
                             "forward is eager only (compiled='off')")
        self.batch_invariant = batch_invariant
        self.runner = (InvariantForward(self.model, num_blocks=num_blocks, block_size=block_size,
                                        max_model_len=self.max_model_len, seats=max_batch_size)
                       if batch_invariant else
                       PagedForward(self.model, num_blocks=num_blocks, block_size=block_size,
                                    max_model_len=self.max_model_len, seats=max_batch_size,
                                    compiled=compiled))
        self.free_seats = list(range(max_batch_size))
        self._init_forks()
        self._init_beams()
        self.first_hits = {}  # engines.paged.schedule: StepOutput.cached_prompt_tokens
        self.preemptions = 0  # requests sent back to the queue to free blocks, ever
        self.chunked_prompts = 0  # requests whose prefill took more than one step, ever
        if max_loras < 1 or max_lora_rank < 1:
            raise ValueError(f"max_loras {max_loras} and max_lora_rank {max_lora_rank}: "
                             "each must be >= 1")
        self.max_loras, self.max_lora_rank = max_loras, max_lora_rank
        self._loras = LoraNames(None)
        self._lora_slots: dict[str, int] = {}  # adapter name -> its slot in the stacks
        self._lora_loads: dict[str, int] = {}  # adapter name -> which load of it (a serial)
        self._load_serial = itertools.count(1)
        for name, path in (loras or {}).items():
            self.add_lora(name, str(path))
        param = next(self.model.parameters())
        self._init_speculation(speculation, vocab_size=self.vocab_size, num_blocks=num_blocks,
                               block_size=block_size, max_model_len=self.max_model_len,
                               seats=max_batch_size, seed=seed, device=param.device,
                               dtype=param.dtype)

    @property
    def execution(self) -> str:
        mode = self.runner.compiled.mode
        # Which kernel prompt chunks attend with: it moves a prefill's speed ~2x on a CPU.
        chunks = f"prompt attention: {self.runner.prompt_attention}"
        if mode == "off":
            return f"{super().execution}, {chunks}"
        return (f"torch {torch.__version__.split('+')[0]} on {self.device.type}, "
                f"compiled={mode!r} (engines.paged.compiled; {self.runner.graph_steps} "
                f"steps compiled so far, the others eager), {chunks}")

    @property
    def prefix_cache_hits(self) -> int:
        """Blocks taken from the prefix cache instead of being computed, ever."""
        return self.pool.hits

    def capabilities(self) -> Capabilities:
        """EngineCore's, and how many requests run at once: it has no slots to count them."""
        return dataclasses.replace(super().capabilities(), max_concurrency=self.max_batch_size)

    def exercised(self) -> dict[str, int]:
        """engines.protocol.Exercised: what the features did, for the suite's summary."""
        counts = {"preemptions": self.preemptions, "chunked_prompts": self.chunked_prompts,
                  "prefix_cache_hit_tokens": self.prefix_cache_hits * self.kv_block_size}
        if self.runner.lora is not None:
            counts["lora_tokens"] = self.runner.lora_tokens
        if self.runner.compiled.enabled:  # which steps the compiled graph ran
            counts["compiled_steps"] = self.runner.graph_steps
            counts["compiled_fallback_steps"] = self.runner.graph_fallbacks
        if self.forked_prefills:  # n > 1 (engines.paged.fork)
            counts["forked_prefills"] = self.forked_prefills
            counts["copy_on_write_blocks"] = self.cow_copies
        if self.beam_steps:  # engines.paged.beams
            counts["beam_steps"] = self.beam_steps
            counts["beam_reparented_rows"] = self.beam_reparents
            counts["beam_group_preemptions"] = self.beam_group_preemptions
        if self.drafter is not None:  # engines.paged.speculate
            counts["spec_draft_tokens"] = self.spec_draft_tokens
            counts["spec_accepted_tokens"] = self.spec_accepted_tokens
        return counts

    # --- KVIntrospection ----------------------------------------------------------------------

    def kv_free_blocks(self) -> int:
        return self.pool.num_free()

    def kv_block_tables(self) -> dict[Hashable, Sequence[int]]:
        return {self._kv_key(seq): tuple(seq.blocks) for seq in self.running}

    def kv_cached_tokens(self) -> dict[Hashable, int]:
        return {self._kv_key(seq): seq.num_computed for seq in self.running}

    def _kv_key(self, seq: PagedRequest) -> Hashable:
        row = self._row_key(seq)  # a beam search's row i: child_key(id, i)
        if row is not None:
            return row
        rid = seq.request.request_id
        return rid if seq.family == 1 else child_key(rid, seq.index)

    # --- requests ------------------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        family = self._live[request.request_id]
        if not self._hold_beams(family):  # beam search: engines.paged.beams
            self._hold_siblings(family)  # n > 1: engines.paged.fork

    def _check(self, request: Request) -> None:
        super()._check(request)
        self._loras.check_request(request)
        check_beam_request(request.params)
        self._check_beams(request)
        prompt, budget = len(request.prompt_token_ids), request.params.max_tokens
        need = self._blocks_for(prompt + budget - 1)  # the last token's KV is never computed
        if need > self.kv_total_blocks:
            field = "prompt_token_ids" if self._blocks_for(prompt) > self.kv_total_blocks else (
                "max_tokens")
            raise InvalidRequest(
                f"{field}: prompt length {prompt} + max_tokens {budget} needs {need} KV blocks "
                f"of {self.kv_block_size} tokens; the pool has {self.kv_total_blocks} "
                "(num_blocks), so this request could never run")

    def _new_state(self, request: Request, generator: torch.Generator | None) -> PagedRequest:
        seq = PagedRequest(request, generator)
        seq.root = self._key_root(request)
        if request.lora is not None:
            seq.lora_slot = self._lora_slots[request.lora]
        return seq

    # --- LoRA (engines.protocol.LoRAManagement) ------------------------------------------------

    @property
    def loras(self) -> dict[str, str]:
        """engines.protocol.loras: the adapters served now, name -> directory."""
        return dict(self._loras.paths)

    def add_lora(self, name: str, path: str) -> None:
        self._loras.check_new(name, path)
        weights = read_peft(path)
        if self.runner.lora is None:
            param = next(self.model.parameters())
            self.runner.lora = self._lora_stacks(param.device, param.dtype)
        self._lora_slots[name] = self.runner.lora.load(weights)
        self._lora_loads[name] = next(self._load_serial)
        self._loras.paths[name] = str(path)

    def _lora_stacks(self, device: torch.device, dtype: torch.dtype) -> LoraStacks:
        return LoraStacks(self.runner.lora_shapes(), max_loras=self.max_loras,
                          max_rank=self.max_lora_rank, device=device, dtype=dtype)

    def remove_lora(self, name: str) -> None:
        users = [s.request.request_id for s in self._states() if s.request.lora == name]
        self._loras.check_removable(name, users)
        assert self.runner.lora is not None
        self.runner.lora.unload(self._lora_slots.pop(name))
        del self._lora_loads[name], self._loras.paths[name]

    def _key_root(self, request: Request) -> BlockKey | None:
        """The parent of a request's first prefix key: a digest of its adapter (by name and
        load) and its salt, None for a base request without one (its keys stay the plain
        token chain)."""
        if request.lora is None and request.cache_salt is None:
            return None
        digest = hashlib.blake2b(b"prefix-root", digest_size=32)
        for part in (request.lora, self._lora_loads.get(request.lora or ""),
                     request.cache_salt):
            digest.update(repr(part).encode() + b"\0")
        return digest.digest()

    # --- one step ------------------------------------------------------------------------------

    def step(self) -> list[StepOutput]:
        return self._report_hits(self._step())

    def _report_hits(self, outputs: list[StepOutput]) -> list[StepOutput]:
        """Each request's first-admission prefix-cache hits on its first output since, once
        (StepOutput.cached_prompt_tokens); requests that left are forgotten."""
        for i, out in enumerate(outputs):
            hits = self.first_hits.get(out.request_id)
            if hits is not None:
                outputs[i] = dataclasses.replace(out, cached_prompt_tokens=hits)
                self.first_hits[out.request_id] = None
        for rid in [r for r in self.first_hits if r not in self._live]:
            del self.first_hits[rid]
        return outputs

    def _step(self) -> list[StepOutput]:
        outputs: list[StepOutput] = []
        self._release_held_aborts()
        self._release_beam_aborts()
        for seq in self._take_aborts(outputs):
            self._retire(seq)
        plan = self._schedule()
        if not plan:
            return outputs
        if self.drafter is not None:
            return self._spec_step(outputs, plan)
        rows = [self._row(seq, n) for seq, n in plan.items()]
        logits = self._take_prompt_logprobs(plan, rows, self.runner.forward(rows))
        ready, logits = self._fork(self._advance(plan), logits)  # n > 1: engines.paged.fork
        ready, logits = self._beam_ready(ready, logits, outputs)  # engines.paged.beams
        tokens, tops, logprobs = sample(logits, ready)
        for seq, token, top, logprob in zip(ready, tokens, tops, logprobs, strict=True):
            outputs.append(seq.append(token, top, logprob))
            if seq.finished:
                self._finish(seq)
                self._retire(seq)
        return outputs

    def _advance(self, plan: dict[PagedRequest, int]) -> list[PagedRequest]:
        """Count each row's computed tokens; the requests whose span reached their end
        (their next token is sampled now), in plan order."""
        ready = []
        for seq, n in plan.items():
            if n < seq.num_pending and not seq.chunked:
                seq.chunked = True
                self.chunked_prompts += 1
            seq.num_computed += n
            self._cache_full_blocks(seq)
            if seq.num_computed == seq.num_tokens:
                ready.append(seq)
        return ready

    def _row(self, seq: PagedRequest, n: int) -> Row:
        start = seq.num_computed
        last = start + n == seq.num_tokens
        wanted = self._prompt_offsets(seq, start, n)
        if wanted:  # the prompt positions whose entries are not out yet, then the last one
            return Row(seq.tokens(start, start + n), start, seq.blocks, last,
                       logits_at=(*wanted, n - 1) if last else wanted, seat=seq.seat,
                       lora=seq.lora_slot)
        return Row(seq.tokens(start, start + n), start, seq.blocks, last, seat=seq.seat,
                   lora=seq.lora_slot)

    # --- prompt logprobs ------------------------------------------------------------------------
    # Computed once, from the logits of the forward that computes each prompt position: a
    # chunked prompt adds each chunk's entries as it goes, and a request preempted before its
    # first token recomputes only the positions it has no entry for. A cached prefix block
    # has no logits to give, so a request whose entries are incomplete takes no cached block
    # beyond the positions it has entries for (PagedSchedule._cached_prefix): it recomputes
    # its prompt, as vLLM does for prompt-logprobs requests, rather than keeping entries per
    # cached block (which would have to be of every k asked and evicted with the block). Its
    # own full blocks still enter the cache for others.

    def _prompt_offsets(self, seq: PagedRequest, start: int, n: int) -> tuple[int, ...]:
        k, prompt = seq.request.params.prompt_logprobs, len(seq.request.prompt_token_ids)
        done = len(seq.prompt_logprobs)
        if not k or done >= prompt:
            return ()
        # Offset j's logits predict position start + j + 1; entries are wanted for positions
        # max(done, 1) .. prompt - 1.
        first, last = max(done, 1) - 1 - start, prompt - 2 - start
        return tuple(range(max(first, 0), min(last, n - 1) + 1))

    def _take_prompt_logprobs(self, plan: dict[PagedRequest, int], rows: Sequence[Row],
                              logits: torch.Tensor) -> torch.Tensor:
        """Add each row's prompt entries to its request; return the logits to sample from
        (one per row that reached its request's end, in order)."""
        if all(row.logits_at is None for row in rows):
            return logits
        keep, at = [], 0
        for seq, row in zip(plan, rows, strict=True):
            offsets = row.logit_offsets()
            wanted = len(offsets) - row.wants_logits
            if wanted:
                if not seq.prompt_logprobs:
                    seq.prompt_logprobs.append(None)  # position 0: nothing predicts it
                p = len(seq.prompt_logprobs)
                targets = seq.request.prompt_token_ids[p : p + wanted]
                seq.prompt_logprobs.extend(prompt_entries(
                    logits[at : at + wanted], targets, seq.request.params.prompt_logprobs))
            if row.wants_logits:
                keep.append(at + wanted)
            at += len(offsets)
        return logits[keep]

    def _retire(self, seq: PagedRequest) -> None:
        self.running.remove(seq)
        self._unseat(seq)
        self._release_blocks(seq)
