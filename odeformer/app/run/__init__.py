"""The run: everything between a resolved config and a finished run directory, without Hydra.

- Building: :mod:`~odeformer.app.run.builder` (a config to its dataset, model and run record, through the package's
  registered builders only; a finished run rebuilt from its checkpoint), :mod:`~odeformer.app.run.identity` (the
  names a run has without being built), :mod:`~odeformer.app.run.bounds` (sizes and cost, checked without torch),
  :mod:`~odeformer.app.run.schemes` (a scheme of the user's named ``module.Class``, checked before it is imported).
- Training: :mod:`~odeformer.app.run.launch` (one run, start to summary), :mod:`~odeformer.app.run.trainer` (the
  loop), :mod:`~odeformer.app.run.optimizer` (parameter groups), :mod:`~odeformer.app.run.objectives` and
  :mod:`~odeformer.app.run.batches` (losses, metrics, samplers), :mod:`~odeformer.app.run.stability` (the start-up
  stability warning), :mod:`~odeformer.app.run.sampling` (text from a language-model run).
- The run directory: :mod:`~odeformer.app.run.checkpoints` (atomic writes, weights-only reads),
  :mod:`~odeformer.app.run.locks` (one writer), :mod:`~odeformer.app.run.history` (divergences and what a resume
  changed), :mod:`~odeformer.app.run.resume` (what a start or a resume may do, and the command to resume with).
- Sweeps: :mod:`~odeformer.app.run.sweep` (the engine: jobs in, summaries out) and
  :mod:`~odeformer.app.run.sections` (the tables of jobs ``odeformer-reproduce`` runs).

The config dataclasses and the generated config groups live here too (:mod:`~odeformer.app.run.config`, and
:mod:`~odeformer.app.run.groups`, whose table of the groups spares a command's start-up torch), not beside
the command that hands them to Hydra: the loop's config is the ``train`` group's dataclass, and the sweep engine
and the builder read the same layout, so the run room owns the config's shape and the training command only stores
it in Hydra's ConfigStore.
"""
