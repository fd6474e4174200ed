"""The bench's typed rows (engines.bench.record): every CSV a comparison writes has its
record's fields as its header, in order, and the records' values as its rows; the winner
table's rows are read from the summary records; no module that writes or reads those rows
spells a column name of its own."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from engines.bench import output, record, table
from engines.bench.comparison import Comparison
from engines.bench.config import Config
from engines.bench.doubles.fake import FakeEngine, FakeTimer, Machine, VirtualClock
from engines.bench.metrics import write_csv
from engines.bench.record import (
    COLUMN,
    REPLAY_COLUMNS,
    SUMMARY_COLUMNS,
    ClosedRow,
    ClosedRunRow,
    ProbeRow,
    ReplayRow,
    RunSummary,
    Samples,
    SLOFigures,
    Summary,
    columns,
    row,
    rows,
)
from engines.protocol import Engine

ROOT = Path(__file__).resolve().parents[2]


def _comparison() -> Comparison:
    """A fixed synthetic comparison: two fakes (static and continuous batching) on one
    virtual clock, SLO targets given, so that every figure is the same on any host."""
    from engines.bench import comparison

    machine, virtual = Machine(), VirtualClock()
    engines: dict[str, Engine] = {
        name: FakeEngine(max_batch_size=4, base_s=0.005, static=static, machine=machine,
                         clock=virtual)
        for name, static in (("static", True), ("continuous", False))}
    config = Config(capacity_requests=12, closed_requests=8, reference_requests=12, warmup=0,
                    runs=2, iterations=2, goodput_iterations=2, goodput_halvings=1,
                    slo_ttft_s=0.05, slo_itl_s=0.02, admissions_per_class=2, clock="wall",
                    host=False, seed=3)
    return comparison.run(engines, config, timer=FakeTimer(step_s=0.001, machine=machine),
                          time_source=virtual.now)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Comparison, Path]:
    found = _comparison()
    out = tmp_path_factory.mktemp("bench")
    output.write(found, out, plots=False)
    return found, out


def _csv_of(records: Sequence[object], path: Path) -> str:
    """The bench's CSV of a table made from `records` alone."""
    return write_csv(pd.DataFrame(rows(records)), path).read_text()


def _header(path: Path) -> list[str]:
    return path.read_text().splitlines()[0].split(",")


def test_summary_csv_is_its_records_fields_and_values(
        written: tuple[Comparison, Path], tmp_path: Path) -> None:
    found, out = written
    summaries = [output.summary_row(r, found) for r in found.results.values()]
    assert all(isinstance(s, Summary) for s in summaries)
    assert _header(out / "summary.csv") == list(SUMMARY_COLUMNS) == list(columns(Summary))
    # Written through the report (report.json's plain values), byte for byte the records'.
    assert (out / "summary.csv").read_text() == _csv_of(summaries, tmp_path / "s.csv")


def test_probes_and_closed_csvs_are_their_records(
        written: tuple[Comparison, Path], tmp_path: Path) -> None:
    found, out = written
    probes = [ProbeRow(probe=p.summary, search=search, replica=i, bracket=s.bracket())
              for r in found.results.values()
              for i, (cap, good) in enumerate(zip(r.capacities, r.goodputs, strict=True))
              for search, s in (("capacity", cap), ("goodput", good)) for p in s.probes]
    # Every probe was judged under the SLO (the capacity search's verdicts narrow goodput's),
    # so every column is there, in the record's order.
    assert all(p.probe.verdict is not None for p in probes)
    assert _header(out / "probes.csv") == list(columns(ProbeRow))
    assert (out / "probes.csv").read_text() == _csv_of(probes, tmp_path / "p.csv")
    closed = [ClosedRunRow(figures=s, run=i) for r in found.results.values()
              for i, s in enumerate(r.closed_summaries)]
    # Closed runs are summarized without an SLO: its part leaves no columns.
    assert _header(out / "closed.csv") == [c for c in columns(ClosedRunRow)
                                           if c not in columns(SLOFigures)]
    assert (out / "closed.csv").read_text() == _csv_of(closed, tmp_path / "c.csv")


def test_asv_samples_are_the_samples_record(written: tuple[Comparison, Path]) -> None:
    found, _ = written
    report = output.report(found)
    for name, result in found.results.items():
        assert report.samples[name] == row(output.samples(result))
        assert list(report.samples[name]) == list(columns(Samples))


def test_the_winner_table_reads_the_summary_records(written: tuple[Comparison, Path]) -> None:
    found, _ = written
    summaries = {r.name: output.summary_row(r, found) for r in found.results.values()}
    assert set(table.ROWS) <= set(SUMMARY_COLUMNS)
    shown = table.winners(output.summary(found)).set_index("figure")
    assert list(shown.index) == [label for label, _ in table.ROWS.values()]
    for column, (label, _) in table.ROWS.items():
        for engine, summary in summaries.items():
            assert shown.loc[label, engine] == table.fmt(getattr(summary, column))


def test_parts_and_optional_fields_are_columns_in_place_or_none() -> None:
    figures: dict[str, Any] = {f.name: 1.0 for f in dataclasses.fields(RunSummary)}
    figures.update(engine="e", slo=None, gave_up=False)
    plain = RunSummary(**figures)
    assert list(row(plain)) == [c for c in columns(RunSummary) if c not in columns(SLOFigures)]
    judged = dataclasses.replace(plain, slo=SLOFigures(slo_attained=0.5, slo_met_rps=2.0,
                                                       ttft_p90_s=0.1, itl_mean_p90_s=0.2))
    assert list(row(judged)) == list(columns(RunSummary))
    assert row(judged)[COLUMN.slo_attained] == 0.5
    closed = ClosedRow(engine="e", output_tokens_per_s=2.0, min=1.0, max=3.0, wall_s=1.0,
                       driver_overhead_pct=0.5, compute_threads=None, execution="")
    assert COLUMN.vs_hf_generate not in row(closed)
    assert row(closed)[COLUMN.compute_threads] is None  # a None value of a plain field stays
    assert list(row(dataclasses.replace(closed, vs_hf_generate=1.5, ceiling_dtype="float32",
                                        ceiling_tokens_per_s=4.0, ceiling_share=0.5))
                ) == list(columns(ClosedRow))
    with pytest.raises(dataclasses.FrozenInstanceError):
        closed.min = 0.0  # type: ignore[misc]


def test_column_names_are_checked_where_they_are_read() -> None:
    assert COLUMN.goodput_rps == "goodput_rps" and COLUMN.slo_itl_s in COLUMN
    with pytest.raises(AttributeError, match="no bench record has a column 'goodput_rsp'"):
        _ = COLUMN.goodput_rsp
    assert set(REPLAY_COLUMNS) <= set(columns(ReplayRow))
    assert set(record.LATENCY_COLUMNS) <= set(columns(RunSummary))


# The modules that build or read the bench's rows, and the literals in them that are a column
# name of some record but name something else there.
ROW_MODULES = ["engines/bench/output.py", "engines/bench/table.py", "engines/bench/rates.py",
               "engines/bench/plots.py", "engines/bench/run_report.py",
               "engines/bench/probes.py", "engines/bench/comparison.py", "engines/bench/cli.py",
               "benchmarks/bench_serving.py"]
NOT_A_COLUMN = {("engines/bench/cli.py", "engine"),  # a progress bar's unit
                ("engines/bench/comparison.py", "engine"),  # the same
                ("benchmarks/bench_serving.py", "engine"),  # asv's parameter name
                ("engines/bench/output.py", "steps")}  # disturbance.headline's key


def _literals(tree: ast.AST) -> list[tuple[int, str]]:
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_no_row_module_spells_a_column_name() -> None:
    names = {c for r in record.RECORDS for c in columns(r)}
    spelled = []
    for path in ROW_MODULES:
        tree = ast.parse((ROOT / path).read_text())
        spelled += [f"{path}:{line}: {value!r}" for line, value in _literals(tree)
                    if value in names and (path, value) not in NOT_A_COLUMN]
    # metrics.summarize builds a RunSummary (the requests frame's own columns are another
    # table's: itl_max_s there is a request's largest gap).
    metrics = ast.parse((ROOT / "engines/bench/metrics.py").read_text())
    (summarize,) = [n for n in ast.walk(metrics)
                    if isinstance(n, ast.FunctionDef) and n.name == "summarize"]
    spelled += [f"metrics.summarize:{line}: {value!r}" for line, value in _literals(summarize)
                if value in names]
    assert not spelled, "column names spelled outside engines/bench/record.py:\n" + "\n".join(
        spelled)
