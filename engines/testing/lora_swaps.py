"""Adapters removed and added while an engine runs (engines.protocol.LoRAManagement), for the
state machine: an engine that reuses a removed adapter's slot, its cached KV or its name's
old weights serves the next request under the new adapter wrongly (vLLM's LoRA slot and
cache bugs of this class), and parity against the alone and reference runs, which serve the
adapter by its directory (engines.testing.tenant_oracle), says so.

Only for an engine with LoRAManagement that declares "lora" and serves at least two adapters
(the new one is another adapter's directory: the same directory again would hide a stale
slot).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from hypothesis import strategies as st

from engines.protocol import Engine, LoRAManagement, loras
from engines.testing.limits import EngineLimits

__all__ = ["Swap", "adapter_swaps", "swappable", "swaps_note"]


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
