"""The bench's rows as typed, frozen records: every figure's name spelled once, as a field.

A record's field names are its table's column names, in its CSV's order: metrics.summarize
builds a RunSummary, probes.verdict a ProbeSummary, output.summary_row a Summary (summary.csv),
and so on; a table's rows are `rows(records)`, its columns `columns(Record)`. A part
(`part(...)`) is a record inside a record whose fields are its parent's columns at the part's
place (a run's SLO figures inside its summary, the targets inside a probe's verdict and the
summary row), so that tables sharing figures share their one spelling; an optional part that
is None, and an `optional()` field that is None, leave no column (a run summarized without an
SLO has no SLO columns; `closed` has vs_hf_generate only beside HF generate).

Readers of a table (the winner table, the plots, the asv suite) name its columns through
COLUMN: `COLUMN.goodput_rps == "goodput_rps"`, and a name that is no record's field is an
AttributeError where it is read. Column names are a contract (scripts and asv read them, and
docs/benchmarks.md names them): a new one is appended, none is renamed. Standard library only,
so that asv's suite may import it without the bench.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

PART = "bench.part"  # metadata: the field holds a record whose fields are columns here
OPTIONAL = "bench.optional"  # metadata: a None value leaves no column
REFERENCE = "bench.reference"  # metadata: the summary row's copy of the reference run's figure


def part(record: type, *, optional: bool = False) -> Any:
    """A field holding a record of type `record`, its fields inlined as columns; `optional`:
    it may be None (then no columns), which is its default."""
    metadata = {PART: record, OPTIONAL: optional}
    return field(default=None, metadata=metadata) if optional else field(metadata=metadata)


def optional() -> Any:
    """A column that a None value leaves out of the row (and a table of such rows)."""
    return field(default=None, metadata={OPTIONAL: True})


def reference() -> Any:
    """A summary row's column holding the reference run's figure of the same name."""
    return field(metadata={REFERENCE: True})


def _flat(record: type) -> Iterator[str]:
    for f in dataclasses.fields(record):
        inner = f.metadata.get(PART)
        if inner is not None:
            yield from _flat(inner)
        else:
            yield f.name


def columns(record: type) -> tuple[str, ...]:
    """Its table's columns, in order: every field, each part's fields in its place."""
    return tuple(_flat(record))


def row(record: Any) -> dict[str, Any]:
    """A record as one row of its table: columns -> values, in order (see `columns`), less
    the optional fields and parts that are None."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if value is None and f.metadata.get(OPTIONAL):
            continue
        if f.metadata.get(PART) is not None:
            out.update(row(value))
        else:
            out[f.name] = value
    return out


def rows(records: Iterable[Any]) -> list[dict[str, Any]]:
    return [row(r) for r in records]


@dataclass(frozen=True, slots=True, kw_only=True)
class SLOFigures:
    """A run judged against an SLO (engines.bench.slo): what met it and the latencies it
    judges."""

    slo_attained: float  # share of the trace's requests within both targets
    slo_met_rps: float  # those requests over the run's span
    ttft_p90_s: float
    itl_mean_p90_s: float  # p90 over requests of each request's mean ITL


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """One recorded run's figures (engines.bench.metrics.summarize): probes.csv, closed.csv
    and replay.csv start from it; the summary row takes its latencies from the reference
    run's."""

    engine: str
    offered_rps: float  # the trace's rate (inf for a closed batch)
    n_requests: int
    completed: int
    achieved_rps: float
    output_tokens: int
    output_tokens_per_s: float
    ttft_p50_s: float
    ttft_p95_s: float
    queue_wait_p50_s: float
    queue_wait_p95_s: float
    e2e_p50_s: float
    e2e_p95_s: float
    queue_wait_mean_s: float
    itl_p50_s: float
    itl_p95_s: float
    itl_max_s: float
    slo: SLOFigures | None = part(SLOFigures, optional=True)  # None: run without an SLO
    wasted_slot_steps: int | None  # None: the engine does not count them
    steps: int
    step_time_s: float
    driver_overhead_pct: float
    gave_up: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetsUsed:
    """The latency targets a figure was judged under."""

    slo_ttft_s: float
    slo_itl_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SLOVerdict:
    meets_slo: bool  # stable, and at least the SLO's attainment within both targets
    targets: TargetsUsed = part(TargetsUsed)  # its round's, under a paired SLO


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeSummary:
    """One capacity probe (engines.bench.probes.verdict): its run's figures and verdicts."""

    figures: RunSummary = part(RunSummary)
    # least-squares slopes against arrival time (s/s) of queue wait, TTFT, end-to-end latency
    wait_slope: float
    ttft_slope: float
    e2e_slope: float
    growth: float  # the largest of the three (nan unless all three are defined)
    stable: bool
    verdict: SLOVerdict | None = part(SLOVerdict, optional=True)  # None: probed without an SLO


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeRow:
    """probes.csv: a probe of a comparison's search."""

    probe: ProbeSummary = part(ProbeSummary)
    search: str  # capacity or goodput
    replica: int
    bracket: str  # the search's final bracket


@dataclass(frozen=True, slots=True, kw_only=True)
class ClosedRunRow:
    """A comparison's closed.csv: one recorded closed run."""

    figures: RunSummary = part(RunSummary)
    run: int  # its number among the engine's recorded runs


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayRow:
    """replay.csv (engines.bench.rates) before its columns are chosen (REPLAY_COLUMNS)."""

    process: str  # the arrival process
    probe: ProbeSummary = part(ProbeSummary)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClosedRow:
    """`batching-bench closed`'s table (its closed.csv): one engine's recorded runs."""

    engine: str
    output_tokens_per_s: float  # the median run's
    min: float
    max: float
    wall_s: float  # the median run's
    driver_overhead_pct: float
    compute_threads: int | None
    execution: str
    vs_hf_generate: float | None = optional()  # tok/s over HF generate's, when it ran
    # The ceiling of the engine's dtype (engines.bench.shares), when one was measured for it
    ceiling_dtype: str | None = optional()
    ceiling_tokens_per_s: float | None = optional()
    ceiling_share: float | None = optional()  # output_tokens_per_s over ceiling_tokens_per_s


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """summary.csv: one engine's row of a comparison (engines.bench.output.summary_row)."""

    engine: str
    capacity_rps: float
    capacity_high_rps: float
    output_tokens_per_s: float
    # The reference run's latencies (RunSummary's fields of the same names; nan without one)
    ttft_p50_s: float = reference()
    ttft_p95_s: float = reference()
    queue_wait_p50_s: float = reference()
    queue_wait_p95_s: float = reference()
    queue_wait_mean_s: float = reference()
    itl_p50_s: float = reference()
    itl_p95_s: float = reference()
    itl_max_s: float = reference()
    e2e_p50_s: float = reference()
    goodput_rps: float
    itl_spike_ratio: float
    spike_prompt_len: float
    baseline_itl_s: float
    wasted_slot_steps: int | None
    driver_overhead_pct: float
    reference_rps: float
    # goodput capacity's bracket and the SLO it was judged under; the spike's CI
    goodput_high_rps: float
    targets: TargetsUsed = part(TargetsUsed)
    slo_attainment: float
    itl_spike_ci_low: float
    itl_spike_ci_high: float
    itl_spike_samples: int
    # the factor within which capacity and goodput share a win (engines.bench.table); the
    # closed-batch rate re-timed before the reference run, which reference_rps is a share of,
    # and the host's drift between the two (engines.bench.reference)
    search_tie: float
    reference_basis_rps: float
    reference_drift: float
    # the steady clock's gauge step at the start and the range of the host's speed factor
    # over the run (engines.bench.host.steady); nan on the other clocks
    steady_baseline_s: float
    host_speed_min: float
    host_speed_max: float
    # the SLO yardstick's prefill over its decode step during the disturbance run: the host's
    # mix of the two speeds that itl_spike_ratio moves with; nan when the targets were given
    spike_host_prefill_x: float
    # the CPU threads each engine computes with and how it executes, as it declares them
    # (engines.bench.describe): a ratio between engines is at equal cores only if equal
    compute_threads: float  # nan: not declared
    execution: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Samples:
    """An engine's repeated measurements of each figure asv tracks (benchmarks/bench_serving):
    throughput, capacity and goodput as their reciprocals, since asv reads a rise as a
    regression."""

    seconds_per_output_token: list[float]  # one per recorded closed run
    seconds_per_request_at_capacity: list[float]  # one per replica of the search
    seconds_per_request_at_goodput: list[float]
    ttft_p95_s: list[float]  # one per reference run
    itl_spike_ratio: list[float]  # one per admission of the longest prompts
    driver_overhead_pct: list[float]  # one per closed and reference run


RECORDS = (SLOFigures, RunSummary, TargetsUsed, SLOVerdict, ProbeSummary, ProbeRow,
           ClosedRunRow, ReplayRow, ClosedRow, Summary, Samples)


class Columns:
    """Every record's column names as attributes: `COLUMN.ttft_p95_s == "ttft_p95_s"`; any
    other name raises AttributeError."""

    __slots__ = ("_names",)

    def __init__(self, *records: type) -> None:
        self._names = frozenset(name for record in records for name in columns(record))

    def __getattr__(self, name: str) -> str:
        if name in self._names:
            return name
        raise AttributeError(f"no bench record has a column {name!r} (engines.bench.record)")

    def __contains__(self, name: object) -> bool:
        return name in self._names


COLUMN = Columns(*RECORDS)

SUMMARY_COLUMNS = columns(Summary)
# The reference run's figures a summary row repeats (its `reference()` fields)
LATENCY_COLUMNS = tuple(f.name for f in dataclasses.fields(Summary) if f.metadata.get(REFERENCE))
# replay.csv, in its order: the columns of a ReplayRow it shows
REPLAY_COLUMNS = (COLUMN.engine, COLUMN.process, COLUMN.offered_rps, COLUMN.achieved_rps,
                  COLUMN.completed, COLUMN.n_requests, COLUMN.output_tokens_per_s,
                  COLUMN.ttft_p50_s, COLUMN.ttft_p95_s, COLUMN.itl_p50_s, COLUMN.itl_p95_s,
                  COLUMN.e2e_p50_s, COLUMN.queue_wait_p50_s, COLUMN.queue_wait_p95_s,
                  COLUMN.growth, COLUMN.stable)
