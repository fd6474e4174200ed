"""Token times from engines that stream: when each token reached the client, not when the
driver's step() returned it.

An engine that computes elsewhere (a server, over HTTP) delivers tokens on its own clock; its
step() only collects what arrived since the last call. Timed by the step that returned them,
a token's time would be whenever the driver happened to ask, and TTFT and ITL would be the
driver's polling pattern. Such an engine may offer (docs/usage.md, "Streaming engines"):

- `arrival_times()`: for the latest step's outputs, per request id, one instant per token on
  this process's time.perf_counter(), in token order;
- `step_by(deadline)`: step(), waiting for a first token only until `deadline`
  (time.perf_counter()), so an open-loop driver is back in time to send the next request.

The replay (engines.bench.replay.drive) then records each token at its arrival instant,
relative to the run's start. That needs the run's clock to be the wall clock itself
(replay.WallClock): a paused or skipping clock (engines.bench.paired.EngineClock) has no fixed
offset to perf_counter, and a server keeps computing while it is paused, so the paired driver
runs such engines alone, on the wall clock (paired.run_paired).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from engines.bench.declarations import ArrivalTimes, arrival_times, step_by
from engines.protocol import Engine, StepOutput


def streams(engine: Engine) -> bool:
    """Whether the engine reports token arrival times (and so runs on the wall clock)."""
    return arrival_times(engine) is not None


@dataclass(slots=True)
class TokenTimes:
    """The replay's reader of one streaming engine's arrival times; `origin` is the run's
    start on time.perf_counter()."""

    engine: Engine
    origin: float
    arrival_times: ArrivalTimes

    def step(self, due: float | None) -> list[StepOutput]:
        """One step; `due` (seconds after the origin) is when the next request must be sent:
        with step_by, the wait for tokens ends by then."""
        until = step_by(self.engine)
        if due is not None and until is not None:
            return until(self.origin + due)
        return self.engine.step()

    def record(self, outputs: Sequence[StepOutput], into: dict[str, list[float]]) -> None:
        """Append each output's token times (seconds after the origin) to into[request id]."""
        arrived = self.arrival_times()
        used: dict[Hashable, int] = {}
        for out in outputs:
            if not out.token_ids:
                continue
            at = arrived.get(out.request_id)
            start = used.get(out.request_id, 0)
            if at is None or len(at) < start + len(out.token_ids):
                raise ValueError(
                    f"arrival_times: request {out.request_id!r} has "
                    f"{0 if at is None else len(at)} time(s) for {start + len(out.token_ids)} "
                    f"token(s) in the latest step's outputs (one per token)")
            used[out.request_id] = start + len(out.token_ids)
            into.setdefault(str(out.request_id), []).extend(
                t - self.origin for t in at[start:start + len(out.token_ids)])


def token_times(engine: Engine, clock: object, origin: float) -> TokenTimes | None:
    """A TokenTimes when the engine streams and `clock` is the wall clock itself (its now()
    is time.perf_counter()); else None, and tokens are timed by their steps."""
    times = arrival_times(engine)
    if times is None or not getattr(clock, "is_perf_counter", False):
        return None
    return TokenTimes(engine, origin, times)
