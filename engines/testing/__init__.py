"""The conformance suite for any engine that speaks engines.protocol.

plugin       pytest11 entry point: --engine / ini `engine`, --parity, fixtures, test ids
conformance  the test module to run (--pyargs) or import (`from ... import *`)
suite        one factory under test: pools, oracle, seed workloads, then the Hypothesis search
strategies   public Hypothesis strategies: request mixes, arrival schedules, aborts, bad input
workload     a workload (requests, arrivals, aborts, bad requests) and its runnable repro
driver       replays a workload through the protocol, recording a Trace
properties   the properties of DESIGN.md, each judging a Trace
oracle       requests served alone, and first-divergence (exact or tie-aware) parity
stateful     a RuleBasedStateMachine third parties run on their own engine
pool         reuse of drained engines; shrink: greedy shrinking of seed workloads
loading      --engine spec -> factory, and "not an engine" diagnostics; profiles: dev/ci/thorough
"""
