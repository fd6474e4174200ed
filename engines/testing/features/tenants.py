"""Tenants in drawn workloads: requests under LoRA adapters and cache salts, for engines that
declare them, and the same prompt under several tenants to judge isolation by.

A tenant is a (lora, cache_salt) pair; (None, None) is the base tenant. Adapters are drawn
only for an engine that declares "lora" in supported_sampling and names its adapters
(`loras`), and only the adapters every config variant serves from the same directory (a
variant must serve every drawn request); salts only where every engine compared declares
"cache_salt". Anything else draws base requests only, as before.

Isolation groups: one prompt of whole KV blocks and a short tail (so that a prefix cache
holds its blocks), under two or three different tenants and one tenant twice, arriving one
after another: a block shared across tenants is a leak, and the same tenant's repeat shows
whether the engine shares at all (engines.testing.judging.tenant_blocks judges both).

Rows out of admission order (`adapters_out_of_order`, a seed workload): requests under
different adapters whose rows a chunking scheduler orders otherwise than they were admitted
(short prompts admitted while a long one is still being prefilled go before it): an engine
that takes each row's adapter from the admission order, not from the row's own request,
serves them under each other's adapters.

An adapter re-added under its own name with other weights (`readded_adapter`, a seed
workload, for an engine and variants with LoRAManagement): a prompt served under it, then
again once it names other weights; a prefix cache keyed by the adapter's name alone serves
the second request the first one's KV.

Adapter swaps (adapter_swaps), for the state machine (engines.testing.stateful): adapters
removed and added while an engine runs (engines.protocol.LoRAManagement). An engine that reuses
a removed adapter's slot, its cached KV or its name's old weights serves the next request under
the new adapter wrongly (vLLM's LoRA slot and cache bugs of this class), and parity against the
alone and reference runs, which serve the adapter by its directory
(engines.testing.tenant_oracle), says so.

Only for an engine with LoRAManagement that declares "lora" and serves at least two adapters
(the new one is another adapter's directory: the same directory again would hide a stale
slot).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from engines.protocol import (
    Engine,
    LoRAManagement,
    Request,
    SamplingParams,
    capabilities_of,
    loras,
)
from engines.testing.features.base import AloneFn, Drawing, Feature, Make, pseudo_tokens
from engines.testing.limits import EngineLimits
from engines.testing.workload import AdapterSwap, Workload

__all__ = ["FEATURE", "OUT_OF_ORDER", "READDED", "SALTS", "Swap", "Tenant", "adapter_swaps",
           "adapters_out_of_order", "has_tenants", "readded_adapter",
           "isolation_workload", "swappable", "swaps_note", "tenant_choices", "tenant_limits",
           "with_tenants"]

Tenant = tuple[str | None, str | None]  # (lora, cache_salt)
SALTS = ("tenant-a", "tenant-b")  # a tiny pool: the same salt comes round again


def tenant_limits(engine: Engine, variants: Sequence[Engine],
                  compared: Sequence[Engine]) -> dict[str, object]:
    """EngineLimits' tenant fields: the engine's adapters that every variant serves from the
    same directory (where all of them declare "lora"), whether every engine compared
    (reference included: its alone runs get the salt-free request, but a salt it refuses
    would say nothing) declares "cache_salt", and whether the engine and every variant can
    re-add one of those adapters with another's weights (LoRAManagement, two directories)."""
    names: tuple[str, ...] = ()
    if all("lora" in capabilities_of(e).supported_sampling for e in (engine, *variants)):
        own = loras(engine)
        names = tuple(sorted(n for n, path in own.items()
                             if all(loras(v).get(n) == path for v in variants)))
    salts = all("cache_salt" in capabilities_of(e).supported_sampling
                for e in (engine, *compared))
    own_dirs = {loras(engine)[n] for n in names}
    swaps = len(own_dirs) >= 2 and all(isinstance(e, LoRAManagement)
                                       for e in (engine, *variants))
    return {"loras": names, "salts": salts, "lora_swaps": swaps}


def tenant_choices(limits: EngineLimits) -> list[Tenant]:
    """Every tenant a request may be drawn under, the base tenant first (shrinking goes
    there)."""
    adapters: list[str | None] = [None, *limits.loras]
    salts: list[str | None] = [None, *SALTS] if limits.salts else [None]
    return [(a, s) for a in adapters for s in salts]


def has_tenants(limits: EngineLimits) -> bool:
    return len(tenant_choices(limits)) > 1


def _under(r: Request, tenant: Tenant) -> Request:
    return dataclasses.replace(r, lora=tenant[0], cache_salt=tenant[1])


@st.composite
def _group(draw: st.DrawFn, limits: Drawing, start: int, room: int,
           make_prompt: Callable[[int], tuple[int, ...]]) -> list[Request]:
    """One prompt (1-2 whole blocks and a 1-3 token tail) under 2-3 distinct tenants, then
    one of them again; every member with a budget long enough to be running while the later
    ones arrive."""
    choices = tenant_choices(limits)
    blocks = draw(st.integers(1, 2), label="isolation_blocks")
    tail = draw(st.integers(1, 3), label="isolation_tail")
    length = min(blocks * limits.block + tail, room)
    prompt = make_prompt(length)
    picked = draw(st.lists(st.sampled_from(choices), min_size=2, max_size=3, unique=True),
                  label="isolation_tenants")
    again = draw(st.sampled_from(picked), label="isolation_repeat")
    budget = max(1, min(limits.long_budget, limits.max_model_len - len(prompt)))
    params = SamplingParams(max_tokens=budget, logprobs=limits.logprobs,
                            prompt_logprobs=limits.prompt_logprobs)
    return [Request(prompt, params, request_id=f"r{start + i}", lora=t[0], cache_salt=t[1])
            for i, t in enumerate([*picked, again])]


@st.composite
def with_tenants(draw: st.DrawFn, limits: Drawing, requests: list[Request],
                 tokens: Callable[[int, int, int], tuple[int, ...]],
                 max_size: int | None) -> list[Request]:
    """`requests` each under a drawn tenant (the base one most often), and sometimes an
    isolation group after them (where `max_size` leaves room), its prompt `tokens(seed, n,
    vocab_size)`. Unchanged for an engine with no tenants to draw (nothing drawn)."""
    if not has_tenants(limits):
        return requests
    choices = tenant_choices(limits)
    out = []
    for r in requests:
        base = draw(st.integers(0, 2), label=f"{r.request_id}.base_tenant") == 0
        tenant = choices[0] if base else draw(st.sampled_from(choices),
                                              label=f"{r.request_id}.tenant")
        out.append(_under(r, tenant))
    room = limits.max_model_len - 1
    fits = max_size is None or len(out) + 4 <= max_size
    if fits and room > limits.block and draw(st.integers(0, 2), label="isolation_group_drawn") == 0:
        seed = draw(st.integers(0, 2**16), label="isolation_prompt_seed")
        out += draw(_group(limits, len(out), room,
                           lambda n: tokens(seed, n, limits.vocab_size)),
                    label="isolation_group")
    return out


def isolation_workload(limits: EngineLimits, req: Callable[..., Request],
                       make_prompt: Callable[[int], tuple[int, ...]]) -> Workload | None:
    """One prompt of two whole blocks and a tail under every kind of tenant: the base tenant
    (the control), adapters, salts, both. First one request per tenant, each arriving a step
    after the one before, running long; then each tenant's repeat, one a step, while every
    first still runs (its prompt blocks cached and held): the repeats must share their own
    tenant's blocks where the control's repeat shares the base tenant's, and nothing may be
    shared across tenants. Last, once all of them finished, each tenant again in reverse
    order (seats and adapter slots taken over by other tenants). None for an engine with no
    tenants, or a context too short for it."""
    if not has_tenants(limits):
        return None
    choices = tenant_choices(limits)
    adapters = [None, *limits.loras]
    salts = [None, *SALTS] if limits.salts else [None]
    wanted = [(None, None), (adapters[1 % len(adapters)], None),
              (None, salts[1 % len(salts)]), (adapters[1 % len(adapters)], salts[1 % len(salts)]),
              (adapters[-1], salts[-1])]
    tenants = list(dict.fromkeys(t for t in wanted if t in choices))
    n = len(tenants)
    length = 2 * limits.block + 3
    first_budget = 4 * n + 8
    if limits.max_model_len < length + first_budget + 1:
        return None
    prompt = make_prompt(length)
    reqs: list[Request] = []
    arrivals: list[int] = []
    for i, t in enumerate(tenants):  # the firsts, a step apart
        reqs.append(_under(req(len(reqs), prompt, first_budget), t))
        arrivals.append(i)
    for i, t in enumerate(tenants):  # the repeats, while the firsts run
        reqs.append(_under(req(len(reqs), prompt, 3), t))
        arrivals.append(n + i)
    late = 2 * (2 * n + first_budget) + 8
    for t in reversed(tenants):  # after all finished, in reverse order
        reqs.append(_under(req(len(reqs), prompt, 3), t))
        arrivals.append(late)
    return Workload(tuple(reqs), tuple(arrivals), label="one prompt under every tenant")


OUT_OF_ORDER = "adapters in rows out of admission order"
# The long prompt's length: past the token budget of a step of most engines (ours: 96), so
# that it is prefilled in chunks while the short ones behind it are admitted before it.
_CHUNKED = 240


def adapters_out_of_order(limits: EngineLimits, req: Callable[..., Request]
                          ) -> Workload | None:
    """A base request decoding (so that steps keep to the token budget); then a long prompt
    under one adapter; then, while it is being prefilled in chunks, short prompts under
    another adapter and none, which a scheduler that runs the fewest tokens left first puts
    before it in the step's rows. Every request runs on while the others are served. None
    without two adapters (the base counts as one) or room for a long prompt."""
    adapters = [None, *limits.loras]
    if len(adapters) < 2:
        return None
    budget = 6
    long = min(_CHUNKED, limits.max_model_len - budget - 1)
    if long <= limits.short_prompt + 2:
        return None
    v = limits.vocab_size
    first, second = adapters[1], adapters[-1] if len(adapters) > 2 else None
    reqs = [_under(req(0, pseudo_tokens(61, 5, v), 4 * budget), (None, None)),
            _under(req(1, pseudo_tokens(62, long, v), budget), (first, None)),
            _under(req(2, pseudo_tokens(63, 6, v), budget), (second, None)),
            _under(req(3, pseudo_tokens(64, 4, v), budget), (None, None)),
            _under(req(4, pseudo_tokens(65, 7, v), budget), (first, None))]
    return Workload(tuple(reqs), (0, 2, 3, 3, 3), label=OUT_OF_ORDER)


READDED = "an adapter re-added under its name with other weights"


def readded_adapter(limits: EngineLimits, req: Callable[..., Request]) -> Workload | None:
    """A prompt of two whole blocks and a tail under adapter A, served to the end (its
    blocks cached); then A removed and added again under the same name with adapter B's
    weights (AdapterSwap), and the same prompt under A again, beside B's own request of it
    and a base one. Served alone by directory, the second A request is B's: an engine whose
    prefix cache keys A's blocks by the name alone hands it KV computed under A's old
    weights. None without LoRAManagement on every engine run (or two directories), or a
    context too short for it."""
    if not limits.lora_swaps:
        return None
    budget = 6
    length = 2 * limits.block + 3
    if limits.max_model_len < length + budget + 1:
        return None
    a, b = limits.loras[0], limits.loras[-1]
    prompt = pseudo_tokens(71, length, limits.vocab_size)
    first = _under(req(0, prompt, budget), (a, None))
    # r0 is done by then on any sane scheduler (the step bound's allowance for one request:
    # its prompt 4 tokens a step, each token twice): an adapter in use cannot be removed.
    late = 2 * (budget + 2) + -(-length // 4) + 4
    again = [_under(req(1, prompt, budget), (a, None)), _under(req(2, prompt, budget), (b, None)),
             _under(req(3, prompt, budget), (None, None))]
    return Workload((first, *again), (0, late, late + 1, late + 1), label=READDED,
                    swaps=(AdapterSwap(late, a, b),))


@dataclass(frozen=True, slots=True)
class Swap:
    removed: str
    added: str
    path: str  # the added adapter's directory (another adapter's than the removed one's)

    def apply(self, engine: Engine) -> None:
        assert isinstance(engine, LoRAManagement)
        engine.remove_lora(self.removed)
        engine.add_lora(self.added, self.path)

    def __str__(self) -> str:
        return f"remove_lora({self.removed!r}), add_lora({self.added!r}, {self.path!r})"


def swaps_note(swaps: list[tuple[int, str]]) -> str:
    """The sentence a report adds: the swaps its script does not replay."""
    done = "; ".join(f"before step {k}: {what}" for k, what in swaps)
    return (f"Adapters were swapped during this run (LoRAManagement): {done}. The script below "
            "replays the requests only: make the same calls on the engine before those steps.")


def swappable(engine: Engine, limits: EngineLimits) -> bool:
    return (isinstance(engine, LoRAManagement) and bool(limits.loras)
            and len(set(loras(engine).values())) >= 2)


_serial = 0


@st.composite
def adapter_swaps(draw: st.DrawFn, engine: Engine, in_use: Collection[str | None]
                  ) -> Swap | None:
    """An adapter no unfinished request uses, removed; another served adapter's directory
    added under a new name, or under the removed one's name (which then names other
    weights). None where every adapter is in use."""
    global _serial
    served = loras(engine)
    idle = sorted(n for n in served if n not in in_use)
    if not idle:
        return None
    name = draw(st.sampled_from(idle), label="removed_adapter")
    others = sorted({p for n, p in served.items() if p != served[name]})
    if not others:
        return None
    path = draw(st.sampled_from(others), label="added_directory")
    _serial += 1
    same_name = draw(st.booleans(), label="same_name_again")
    return Swap(name, name if same_name else f"{name}-swapped{_serial}", path)


def _mix(drawing: Drawing, requests: list[Request],
         max_size: int | None) -> st.SearchStrategy[list[Request]]:
    return with_tenants(drawing, requests, pseudo_tokens, max_size)


def _seeds(drawing: Drawing, req: Make, alone: AloneFn | None) -> list[Workload]:
    found = [isolation_workload(drawing, req, lambda n: pseudo_tokens(11, n, drawing.vocab_size)),
             adapters_out_of_order(drawing, req), readded_adapter(drawing, req)]
    return [w for w in found if w is not None]


FEATURE = Feature("tenants", needs='"lora" in supported_sampling with adapters (`loras`), or '
                  '"cache_salt" (every engine compared declaring it)', declared=has_tenants,
                  mix=_mix, seeds=_seeds)
