"""The conformance suite for any engine that speaks engines.protocol.

plugin       pytest11 entry point: options, ini keys, fixtures, test ids (invisible until used)
profiles     Hypothesis profiles batching-dev / batching-ci / batching-thorough
conformance  the test module to run (--pyargs) or import (`from ... import *`)
context      SuiteContext: one factory's pools, oracle, judge, limits, checks; built once
checks       which checks apply to an engine (run, skip with a reason, strict xfail)
search       one check: seed workloads, then a Hypothesis search over workloads
verdict      one workload, one check: serve, judge, confirm on a fresh engine, spot leaks
report       failure reports: the sentence, then a runnable script (leaks: with history)
stateful     a RuleBasedStateMachine third parties can run on their own engine
strategies   public Hypothesis strategies: request mixes, arrival schedules, aborts, bad input
workload     a workload (requests, arrivals, aborts, bad requests); a request as source
rerun        what a report's script calls: replay, judge by the failed check, exit 1 on failure
rerun_script the script: the workload as literals, then one call to rerun.main
trim         a report keeps only the requests that matter
recorder     drives a workload through the protocol only, recording a Trace
crash        an exception from the engine as a finding: call, step, in flight, its frames
properties   the properties, each judging a Trace
oracle       requests served alone, and first-divergence (exact or tie-aware) parity
pool         reuse of drained engines; shrink and leaks: greedy shrinking by hand
"""
