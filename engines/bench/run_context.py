"""One run context: how every paired run of a comparison is driven, passed down as one object.

The stages (closed runs, capacity and goodput searches, the reference and disturbance runs)
all drive engines the same way: on the same device sync, the same time source for their
clocks, the same progress bar, the same host hook between steps (engines.bench.host, off by
default), with request ids kept unique by a tag and traces drawn from a seed. These travel
together here instead of as keywords threaded through every floor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from engines.bench.clocks import TimeSource
from engines.bench.devices import Sync
from engines.bench.fresh import FreshPrompts
from engines.bench.paired import run_paired
from engines.bench.progress import Progress
from engines.bench.replay import Clock, Run
from engines.bench.traces import ArrivalTrace
from engines.protocol import Engine

Turn = Callable[[], None]


@dataclass(frozen=True, slots=True)
class RunContext:
    sync: Sync | None = None  # around every step (engines.bench.devices: CUDA)
    time_source: TimeSource = time.perf_counter  # what the engines' clocks count
    # The one hook between cycles of steps: the noisy-host kit's gauge (engines.bench.host),
    # None when the kit is off (the default)
    hook: Turn | None = None
    bar: Progress | None = None  # a stage opened by the caller; None: no progress
    clocks: Mapping[str, Clock] | None = None  # tests: virtual clocks the fakes advance
    seed: int = 0  # traces' seed
    tag: str = ""  # request-id prefix, unique per stage
    # Every paired run's prompts shifted by its number (engines.bench.fresh), so no run finds
    # an earlier one's prompts in a prefix cache; one object for every context derived from
    # this one. None: traces as given (tests that count on exact prompts).
    fresh: FreshPrompts | None = None

    def with_(self, **changes: Any) -> RunContext:
        return replace(self, **changes)

    def tick(self, postfix: Mapping[str, Any] | None = None) -> None:
        if self.bar is not None:
            self.bar.tick(postfix=postfix)

    def finish(self) -> None:
        """The bar's stage ended before its plan did (engines.bench.progress)."""
        if self.bar is not None:
            self.bar.finish()

    def paired(self, engines: Mapping[str, Engine], traces: Mapping[str, ArrivalTrace], *,
               id_suffix: str = "", record_slots: bool = False,
               give_up_wait_s: Mapping[str, float] | None = None,
               between: Turn | None = None) -> dict[str, Run]:
        """run_paired under this context; `between` (a per-round timer, engines.bench.slo)
        turns after the host hook."""
        turns = [t for t in (self.hook, between) if t is not None]

        def cycle() -> None:
            for turn in turns:
                turn()

        clocks = None if self.clocks is None else {n: self.clocks[n] for n in engines}
        if self.fresh is not None:
            traces = self.fresh.next(traces)
        return run_paired(engines, traces, clocks=clocks, record_slots=record_slots,
                          give_up_wait_s=give_up_wait_s, id_suffix=id_suffix, sync=self.sync,
                          between=cycle if turns else None, time_source=self.time_source)

    def closed(self, engines: Mapping[str, Engine], trace: ArrivalTrace, *, warmup: int,
               runs: int, between: Turn | None = None,
               after_run: Turn | None = None) -> dict[str, list[Run]]:
        """The closed protocol (docs/references.md): `warmup` unrecorded paired runs of
        `trace`, then `runs` recorded ones, each ticking the bar; `after_run` turns after
        each recorded run."""
        recorded: dict[str, list[Run]] = {name: [] for name in engines}
        for i in range(warmup + runs):
            paired = self.paired(engines, dict.fromkeys(engines, trace),
                                 id_suffix=f"{self.tag}#{i}", between=between)
            if i >= warmup:
                for name, run in paired.items():
                    recorded[name].append(run)
                if after_run is not None:
                    after_run()
            self.tick()
        return recorded
