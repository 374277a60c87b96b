"""Reporting: what finished runs are shown as. Tables (:mod:`~odeformer.app.reporting.tables`), plots
(:mod:`~odeformer.app.reporting.plots`: curves, accuracy against depth, learned coefficients), the per-layer
diagnostics figures (:mod:`~odeformer.app.reporting.diagnostics`), learned coefficients read from trained models
(:mod:`~odeformer.app.reporting.learned`), and the generated blocks of ``docs/RESULTS.md``
(:mod:`~odeformer.app.reporting.results`, whose :func:`~odeformer.app.reporting.results.write_results` the benchmarks
write with).

Every function here takes what it shows (summaries, rows, built models) and writes Markdown or figures; none trains,
builds or loads a run, and nothing here imports the run or the commands rooms, so the run room may draw with it.
"""
