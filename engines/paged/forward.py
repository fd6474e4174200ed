"""One forward pass over a block KV pool: decode rows and prompt chunks packed together.

Every row is a span of one request's tokens at positions start..start+n-1 with its block
table. The projections and MLP run once over all tokens packed end to end; each token's K and
V are written to its block slot; attention reads each row's own blocks only
(engines.paged.attention).

Our own forward over the preset architectures (Llama-family decoders), not transformers'
modules: on the tiny CPU preset a step is the fixed cost of dispatching small ops, and the
modules spend ~50 ops a layer where the arithmetic needs ~30. Tokens stay packed [T, hidden]
and heads [T, heads, D] from embedding to logits (no batch dimension); RMSNorm is its own
ops without a module call (engines.core.ops.rms_norm, the same bits); RoPE is 4 ops on q and
k together from a table of the model's own cos/sin made at start-up; q/k/v and gate/up are
one matmul each, and large weights go to oneDNN packed once (engines.core.ops.Linear). Each
layer's pool views are made once.

Persistent state, updated in place: the block tables ([seats + scratch, blocks] int64, one
row per seat, rewritten only from the first entry that changed: a decode row's table changes
once every block_size tokens), the RoPE table and the causal mask table every mask is a view
or rows of. A step builds one small int64 tensor for tokens, positions and slots, and one for
the attention plan.

Logits: `Row.logits_at` names the span's positions whose logits come back (speculative
verification wants several of one row); by default the last one, where `wants_logits`.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

import engines.paged.compiled as compiled_steps
from engines.core import native, native_ops
from engines.core.decoder import DecoderParts
from engines.core.ops import Linear, Norm, activation, rope, rope_tables
from engines.paged.attention import (
    PAD_ELEMENTS,
    attend,
    causal_table,
    long_tensor,
    plan_attention,
)
from engines.paged.lora import LoraStacks


@dataclass(frozen=True, slots=True)
class Row:
    tokens: Sequence[int]  # token ids to compute, at positions start, start+1, ...
    start: int  # tokens before them already have KV in `blocks`
    blocks: Sequence[int]  # the request's block table, covering start + len(tokens) tokens
    wants_logits: bool  # sample after the last token (the span reaches the request's end)
    # Offsets into `tokens` whose logits forward() returns, in this order; None: the last
    # one where wants_logits, else none.
    logits_at: Sequence[int] | None = None
    seat: int = -1  # the request's seat (0..seats-1), whose table row persists; -1: none
    lora: int = 0  # the adapter's slot in the forward's LoraStacks (0: the base model)

    def logit_offsets(self) -> Sequence[int]:
        if self.logits_at is not None:
            return self.logits_at
        return (len(self.tokens) - 1,) if self.wants_logits else ()


@dataclass(slots=True)
class _PackedLayer:
    ln1: Norm
    ln2: Norm
    qkv: Linear
    o: Linear
    gate_up: Linear
    down: Linear
    act: Any
    q_norm: Norm | None
    k_norm: Norm | None


class PagedForward(DecoderParts):
    def __init__(self, model: Any, *, num_blocks: int, block_size: int,
                 max_model_len: int, seats: int = 1, compiled: str = "off") -> None:
        super().__init__(model)
        param = next(model.parameters())
        device, dtype = param.device, param.dtype
        config: Any = model.config
        self.block_size = block_size
        self.pad = PAD_ELEMENTS // (self.num_kv_heads * self.head_dim)
        # Each layer's keys and values: [blocks, block_size, kv_heads, head_dim], or for a
        # compiled forward the keys transposed per block, [blocks, kv_heads, head_dim,
        # block_size] (its attention reads them so, engines.paged.compiled; the eager
        # attention pays one more copy for it). Separate tensors, so a compiled step can
        # write them in place. One block more than the pool's: block `num_blocks`, where
        # padded rows of a compiled decode bucket write (no request ever holds it).
        self.scratch_block = num_blocks
        self.transposed = compiled != "off"
        kvh, d = self.num_kv_heads, self.head_dim
        key_shape = (kvh, d, block_size) if self.transposed else (block_size, kvh, d)
        self._kv = [(torch.zeros(num_blocks + 1, *key_shape, device=device, dtype=dtype),
                     torch.zeros(num_blocks + 1, block_size, kvh, d, device=device, dtype=dtype))
                    for _ in range(self.num_layers)]
        # The keys as [blocks, block_size, kv_heads, head_dim] (views), for eager writes.
        self._key_writes = [k.permute(0, 3, 1, 2) if self.transposed else k
                            for k, _ in self._kv]
        self.causal = causal_table(max_model_len, device, dtype)
        self.rope = rope_tables(self.rotary, max_model_len, device, dtype)  # [len, 2, D]
        act = activation(None, getattr(config, "hidden_act", None))
        # oneDNN for small weights' many-row calls too (engines.core.ops.ROW_PACK_ELEMENTS),
        # only where the engine compiles: the default forward keeps MKL's products, whose
        # rows do not depend on the step's other rows, as the sequential reference's do.
        by_rows = self.transposed
        self.packed_layers = [
            _PackedLayer(
                ln1=Norm(layer.ln1), ln2=Norm(layer.ln2),
                qkv=Linear(layer.qkv_w, layer.qkv_b, by_rows=by_rows),
                o=Linear(layer.o_w, layer.o_b, by_rows=by_rows),
                gate_up=Linear(layer.gate_up_w, None, by_rows=by_rows),
                down=Linear(layer.down_w, None, by_rows=by_rows),
                act=act or layer.act,
                q_norm=Norm(layer.q_norm) if layer.q_norm is not None else None,
                k_norm=Norm(layer.k_norm) if layer.k_norm is not None else None)
            for layer in self.layers]
        self.final_norm = Norm(self.norm)
        head: Any = self.lm_head
        self.head = Linear(head.weight, head.bias, by_rows=by_rows)
        self.embed_weight: torch.Tensor = self.embed.weight  # type: ignore[assignment]
        # Block tables: a row per seat, then `seats` scratch rows for rows without one
        # (rewritten every step). Entries past a request's blocks are stale or 0: valid ids,
        # masked by attention.
        self.seats = seats
        self.max_blocks = -(-max_model_len // block_size)
        self.tables = torch.zeros(2 * seats, self.max_blocks, dtype=torch.long, device=device)
        self._mirror: list[list[int]] = [[] for _ in range(2 * seats)]
        # LoRA adapters' stacked weights (engines.paged.lora), made by the first adapter.
        self.lora: LoraStacks | None = None
        self.lora_tokens = 0  # tokens computed with an adapter's delta, ever
        self.compiled = compiled_steps.CompiledSteps(compiled, device)
        self.graph_steps = 0  # steps the compiled graph ran (the others ran eagerly)
        self.graph_fallbacks = 0  # steps eager because torch.compile's graph cache was full
        # Multi-token rows (eager chunks, the compiled step's rows) through the native causal
        # kernel (fp32 on a CPU, head_dim a multiple of 32, the kernel built): unpadded, so
        # the compiled step needs no cap for them.
        self.native_rows = native.refusal(dtype, device, self.head_dim) is None
        self.native_decodes = self.native_rows and native_ops.decodes(
            self.num_heads // self.num_kv_heads, block_size)
        self.prompt_attention = native.describe(dtype, device, self.head_dim)
        if compiled != "off":
            self._graph_args = self._compilable(config)
            if device.type == "cuda" and compiled == "graphs":
                compiled_steps.static_inputs(self._graph_args)
            # A bucket's padded rows: a table row of scratch blocks; every row's logits.
            self._scratch_table = torch.full((1, self.max_blocks), num_blocks,
                                             dtype=torch.long, device=device)
            self._all_rows = torch.arange(seats, device=device)
            self._no_rows = torch.zeros((0, self.max_blocks), dtype=torch.long, device=device)
            self._no_owners = torch.zeros(0, dtype=torch.long, device=device)
            self._no_index = torch.zeros((0, 2), dtype=torch.long, device=device)
            self._no_back = torch.zeros(0, dtype=torch.long, device=device)
            if compiled == "step":
                # The engine's own sizes (pool blocks, context, seats) dynamic from the first
                # compile: every engine in the process shares the graph (8 at most), and a
                # size compiled static costs a graph per engine shape, per kind of step.
                for pool in (t for pair in self._kv for t in pair):
                    torch._dynamo.maybe_mark_dynamic(pool, 0)
                torch._dynamo.maybe_mark_dynamic(self.rope, 0)
                torch._dynamo.maybe_mark_dynamic(self.tables, [0, 1])

    def _compilable(self, config: Any) -> tuple[Any, ...]:
        """The compiled graphs' weight arguments; refuses what they do not compute."""
        eps = {n.eps for layer in self.packed_layers for n in (layer.ln1, layer.ln2,
                                                             layer.q_norm, layer.k_norm)
               if n is not None and n.module is None}
        plain = all(n.module is None for layer in self.packed_layers
                    for n in (layer.ln1, layer.ln2, layer.q_norm, layer.k_norm) if n is not None)
        if not plain or len(eps) != 1 or self.final_norm.module is not None \
                or getattr(config, "hidden_act", None) != "silu" or self.final_norm.eps not in eps:
            raise ValueError("compile: the compiled forward computes Llama-family decoders "
                             "with RMSNorm (one eps) and SiLU; this model is served eagerly "
                             "only (compile='off')")
        layers = tuple(
            (layer.ln1.weight, layer.qkv.weight, layer.qkv.bias, layer.o.weight, layer.o.bias,
             layer.ln2.weight, layer.gate_up.weight, layer.down.weight,
             layer.q_norm.weight if layer.q_norm else None,
             layer.k_norm.weight if layer.k_norm else None)
            for layer in self.packed_layers)
        return (self.embed_weight, self.rope, self.final_norm.weight, self.head.weight,
                self.head.bias, layers, tuple(self._kv),
                (self.num_heads, self.num_kv_heads, self.head_dim), eps.pop(), self.scale,
                # oneDNN's packed products where the eager forward uses them (any weight:
                # engines.core.ops.linear multiplies the others by F.linear).
                any(lin.always_packed for layer in self.packed_layers
                    for lin in (layer.qkv, layer.o, layer.gate_up, layer.down, self.head)),
                self.native_rows, self.native_decodes)

    def lora_shapes(self) -> list[dict[str, tuple[int, tuple[int, ...]]]]:
        """Per layer, per packed projection: (in features, each part's out features)."""
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        out = []
        for layer in self.packed_layers:
            hidden = layer.qkv.weight.shape[1]
            inter = layer.down.weight.shape[1]
            out.append({"qkv": (hidden, (h * d, hkv * d, hkv * d)), "o": (h * d, (hidden,)),
                        "gate_up": (hidden, (inter, inter)), "down": (inter, (hidden,))})
        return out

    @property
    def kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's (keys, values) pool, [blocks, block_size, kv_heads, D] (keys
        [blocks, kv_heads, D, block_size] where `transposed`)."""
        return self._kv

    def slots(self, blocks: Sequence[int], start: int, end: int) -> list[int]:
        """Pool slots of positions start..end-1: a range per block, not a sum per token."""
        bs = self.block_size
        out: list[int] = []
        for j in range(start // bs, (end - 1) // bs + 1):
            base = blocks[j] * bs - j * bs  # slot of position p in block j: base + p
            out.extend(range(base + max(start, j * bs), base + min(end, (j + 1) * bs)))
        return out

    def _table_rows(self, rows: Sequence[Row]) -> list[int]:
        """Each row's table row, brought up to date in place from its first changed entry."""
        out = []
        scratch = self.seats
        for row in rows:
            if 0 <= row.seat < self.seats:
                t = row.seat
            else:
                t, scratch = scratch, scratch + 1
            blocks, mirror = row.blocks, self._mirror[t]
            if mirror != blocks:
                n = len(blocks)
                first = next((j for j, (a, b) in enumerate(zip(mirror, blocks, strict=False))
                              if a != b), min(len(mirror), n))
                if first < n:
                    self.tables[t, first:n] = long_tensor(list(blocks[first:n]),
                                                          self.tables.device)
                self._mirror[t] = list(blocks)
            out.append(t)
        return out

    @torch.inference_mode()
    def forward(self, rows: Sequence[Row]) -> torch.Tensor:
        """Compute every row's span; return logits [positions asked for, vocab]: each row's
        Row.logit_offsets(), rows in order."""
        table_rows = self._table_rows(rows)
        if any(row.lora for row in rows):  # the compiled graphs compute the base model only
            return self._eager(rows, table_rows)
        try:
            if self.compiled.mode == "graphs" and self._decodes_only(rows):
                logits = self._decode_bucket(rows, table_rows)
                self.graph_steps += 1
                return logits
            if self.compiled.graph is not None and self._fits(rows):
                logits = self._graph_step(self.compiled.graph, rows, table_rows)
                self.graph_steps += 1
                return logits
        except torch._dynamo.exc.FailOnRecompileLimitHit:
            # A shape that would be one graph too many (raised before the graph runs, so
            # nothing was written): this step runs eagerly, and exercised() counts it.
            self.graph_fallbacks += 1
        return self._eager(rows, table_rows)

    def _eager(self, rows: Sequence[Row], table_rows: Sequence[int]) -> torch.Tensor:
        device = self.tables.device
        plan = plan_attention(rows, table_rows, self.tables, self.block_size, self.pad,
                              self.causal)
        bs = self.block_size
        tokens, positions, slots = array("q"), array("q"), array("q")
        first = [0] * len(rows)  # row -> packed index of its first token
        for i in plan.order:
            row = rows[i]
            start = row.start
            first[i] = len(tokens)
            if len(row.tokens) == 1:  # most rows: one decode token
                tokens.append(row.tokens[0])
                positions.append(start)
                slots.append(row.blocks[start // bs] * bs + start % bs)
            else:
                end = start + len(row.tokens)
                tokens.extend(row.tokens)
                positions.extend(range(start, end))
                slots.extend(self.slots(row.blocks, start, end))
        n = len(tokens)
        wanted = array("q", [first[i] + o for i, row in enumerate(rows)
                             for o in row.logit_offsets()])
        packed = long_tensor(tokens + positions + slots + wanted, device)  # one tensor, 4 views
        write = packed[2 * n : 3 * n]
        write_blocks, write_offsets = write // bs, write % bs
        x = self.embed_weight.index_select(0, packed[:n])  # [T, hidden]
        cos, sin = self.rope.index_select(0, packed[n : 2 * n]).unsqueeze(2).unbind(1)
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        index = self._lora_index(rows, plan.order, n)
        lora = self.lora
        for i, (layer, (keys, values), key_writes) in enumerate(zip(
                self.packed_layers, self._kv, self._key_writes, strict=True)):
            hx = layer.ln1(x)
            qkv = layer.qkv(hx)
            if index is not None and lora is not None:
                qkv = qkv + lora.delta(i, "qkv", hx, index)
            if layer.q_norm is None:
                qk = rope(qkv[:, : (h + hkv) * d].view(n, h + hkv, d), cos, sin)
                q, k = qk[:, :h], qk[:, h:]
            else:
                assert layer.k_norm is not None
                q = rope(layer.q_norm(qkv[:, : h * d].view(n, h, d)), cos, sin)
                k = rope(layer.k_norm(qkv[:, h * d : (h + hkv) * d].view(n, hkv, d)), cos,
                         sin)
            v = qkv[:, (h + hkv) * d :].view(n, hkv, d)
            key_writes[write_blocks, write_offsets] = k
            values[write_blocks, write_offsets] = v
            attn = attend(plan, q, k, v, keys, values, self.scale, transposed=self.transposed,
                          native_chunks=self.native_rows).reshape(n, -1)
            if index is None or lora is None:
                x = x + layer.o(attn)
                gate, up = layer.gate_up(layer.ln2(x)).chunk(2, dim=-1)
                x = x + layer.down(layer.act(gate) * up)
                continue
            x = x + (layer.o(attn) + lora.delta(i, "o", attn, index))
            hx = layer.ln2(x)
            gate, up = (layer.gate_up(hx) + lora.delta(i, "gate_up", hx, index)).chunk(2, dim=-1)
            mid = layer.act(gate) * up
            x = x + (layer.down(mid) + lora.delta(i, "down", mid, index))
        out = x.index_select(0, packed[3 * n :])
        return self.head(self.final_norm(out))

    def _lora_index(self, rows: Sequence[Row], order: Sequence[int],
                    n: int) -> torch.Tensor | None:
        """Each packed token's adapter slot [n] (rows packed in `order`), or None when no row
        has an adapter."""
        if self.lora is None or not any(row.lora for row in rows):
            return None
        slots = array("q")
        for i in order:
            slots.extend([rows[i].lora] * len(rows[i].tokens))
        self.lora_tokens += sum(len(row.tokens) for row in rows if row.lora)
        assert len(slots) == n
        return long_tensor(slots, self.tables.device)

    # --- compiled (engines.paged.compiled) --------------------------------------------------

    def _fits(self, rows: Sequence[Row]) -> bool:
        """Whether the step's query-key pairs (engines.paged.compiled.step_graph's: each
        one-token row over the longest such row, each multi-token row's L over the longest
        such row) stay under MAX_PAIRS. Native rows attend causally, each over its own
        prefix (no padded square), so only the one-token rows count."""
        singles = [row.start + 1 for row in rows if len(row.tokens) == 1]
        multi = [row for row in rows if len(row.tokens) > 1]
        pairs = len(singles) * max(singles, default=0)
        if multi and not self.native_rows:
            pairs += (len(multi) * max(len(row.tokens) for row in multi)
                      * max(row.start + len(row.tokens) for row in multi))
        return pairs <= compiled_steps.MAX_PAIRS

    def _graph_step(self, graph: Any, rows: Sequence[Row], table_rows: Sequence[int]
                    ) -> torch.Tensor:
        """Any step as the dynamic graph (engines.paged.compiled.step_graph): one-token rows
        first, each token with its row's table, then the multi-token rows row by row."""
        device, bs = self.tables.device, self.block_size
        singles = [i for i, row in enumerate(rows) if len(row.tokens) == 1]
        multi = [i for i, row in enumerate(rows) if len(row.tokens) > 1]
        ones = [rows[i] for i in singles]
        # Built by comprehension, a list per field: a step's fixed cost on the tiny preset,
        # where a 16-row decode step takes ~0.8 ms in all.
        tokens = array("q", [row.tokens[0] for row in ones])
        positions = array("q", [row.start for row in ones])
        slots = array("q", [row.blocks[row.start // bs] * bs + row.start % bs for row in ones])
        owner = array("q", [table_rows[i] for i in singles])
        width_a = max((row.start + 1 for row in ones), default=0)
        first = [0] * len(rows)  # row -> packed index of its first token
        for at, i in enumerate(singles):
            first[i] = at
        # No size below 2 reaches the graph's one-token group: torch.compile specializes
        # sizes 0 and 1, each a graph of its own (a compile, and one of its 8 cached entries).
        # A padding token writes the scratch block and reads table row 0 at position 0.
        pad = 2 - len(tokens)
        if pad > 0:
            tokens.extend([0] * pad)
            positions.extend([0] * pad)
            slots.extend([self.scratch_block * bs] * pad)
            owner.extend([0] * pad)
        split = len(tokens)
        length = max((len(rows[i].tokens) for i in multi), default=2)
        index, back, row_owner = array("q"), array("q"), array("q")
        width_b = 0
        for r, i in enumerate(multi):
            row = rows[i]
            start, end = row.start, row.start + len(row.tokens)
            first[i] = len(tokens)
            at = len(tokens) - split
            index.extend(range(at, at + end - start))
            index.extend([at] * (length - (end - start)))  # padding: the row's first token
            back.extend(range(r * length, r * length + end - start))
            tokens.extend(row.tokens)
            positions.extend(range(start, end))
            slots.extend(self.slots(row.blocks, start, end))
            row_owner.append(table_rows[i])
            width_b = max(width_b, end)
        if len(multi) == 1:
            # Nor does a group of one row (sizes 0 and 1 would each be graphs of their own,
            # times every engine shape in the process: the suite ran out of graphs). A second,
            # empty row: the native kernel skips a row that ends where it starts; the padded
            # SDPA computes it from the first token and `back` drops it.
            at = len(tokens) - split if self.native_rows else 0
            index.extend([at] * length)
            row_owner.append(0)
        wanted = array("q", [first[i] + o for i, row in enumerate(rows)
                             for o in row.logit_offsets()])
        asked = len(wanted)
        wanted.extend([0] * (2 - asked))  # padded logits are dropped
        # One int64 tensor a step, split into views of its parts.
        parts = (tokens, positions, slots, owner, wanted, index, back, row_owner)
        packed = long_tensor(tokens + positions + slots + owner + wanted + index + back
                             + row_owner, device)
        (tokens_t, positions_t, slots_t, owner_t, wanted_t, index_t, back_t,
         row_owner_t) = packed.split([len(part) for part in parts])
        logits = graph(tokens_t, positions_t, slots_t,
                       self._tables_for(width_a, self.native_decodes), owner_t,
                       self._tables_for(width_b, self.native_rows), row_owner_t,
                       index_t.view(len(row_owner), length), back_t, wanted_t,
                       *self._graph_args)
        return logits[:asked]

    def _tables_for(self, width: int, native_kernel: bool) -> torch.Tensor:
        """The table rows a graph group gathers from: every column where the native kernel
        reads them (it stops at each token's position, so the width is static and no graph
        is compiled for it), else the columns up to `width` (inductor's attention reads a
        table's whole width), copied dense: always a copy (a full-width slice is contiguous
        already, and `.contiguous()` would pass it as the view it is, whose dispatch keys
        differ from a copy's, a graph of its own)."""
        if native_kernel:
            return self.tables
        tables = self.tables[:, : self._blocks(width)].clone(memory_format=torch.contiguous_format)
        torch._dynamo.maybe_mark_dynamic(tables, 0)  # seats: per engine (see __init__)
        return tables

    def _blocks(self, width: int) -> int:
        """Table columns a group's attention reads for rows up to `width` tokens: at least 2
        (torch.compile specializes sizes 0 and 1)."""
        return min(max(2, -(-width // self.block_size)), self.max_blocks)

    def _decodes_only(self, rows: Sequence[Row]) -> bool:
        return bool(rows) and len(rows) <= self.seats and all(
            len(row.tokens) == 1 and tuple(row.logit_offsets()) == (0,) for row in rows)

    def _decode_bucket(self, rows: Sequence[Row], table_rows: list[int]) -> torch.Tensor:
        """A decode-only step as its batch bucket's static graph; padded rows are dropped."""
        device, bs = self.tables.device, self.block_size
        size = compiled_steps.bucket(len(rows), self.seats)
        pad = size - len(rows)
        tokens = array("q", [row.tokens[0] for row in rows] + [0] * pad)
        positions = array("q", [row.start for row in rows] + [0] * pad)
        slots = array("q", [row.blocks[row.start // bs] * bs + row.start % bs for row in rows]
                      + [self.scratch_block * bs] * pad)
        packed = long_tensor(tokens + positions + slots, device)
        tables = self.tables.index_select(0, long_tensor(table_rows, device))
        if pad:
            tables = torch.cat((tables, self._scratch_table.expand(pad, -1)))
        graph = self.compiled.bucket_graph(size)
        logits = graph(packed[:size], packed[size : 2 * size], packed[2 * size :], tables,
                       self._all_rows[:size], self._no_rows, self._no_owners, self._no_index,
                       self._no_back, self._all_rows[:size], *self._graph_args)
        return logits[: len(rows)]

