"""The noisy-host kit, opt-in (`--host on`; `--quick` on a CPU turns it on and says so).

Machinery grown to measure on one noisy shared VM, kept beside the wall-clock core behind one
hook between the engines' steps (engines.bench.run_context): the kit's one gauge, the preset's
forward timed between steps (gauge.py), whose timings give per-round SLO targets, the host's
drift over the reference run and its prefill-over-decode mix over the spike steps (lines.py);
the CPU-time and steady clocks (engines.bench.clocks, steady.py); the stepping thread under
SCHED_FIFO (priority.py); the closed rate re-timed before the reference run
(engines.bench.reference). Off, the core runs on the wall clock with targets given or timed
once before the run (engines.bench.calibration): what a GPU run wants, where none of this
changes a figure and the gauge would only cost time.
"""
