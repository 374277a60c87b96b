"""The application around the library, in three rooms.

- :mod:`~odeformer.app.commands`: the command lines, thin fronts that parse, check and call into the other two
  (``odeformer-train`` is the only module importing Hydra).
- :mod:`~odeformer.app.run`: a run from its resolved config to its finished directory: building, the training
  loop, checkpoints, locks, history, resuming, and the sweep engine.
- :mod:`~odeformer.app.reporting`: tables, plots, diagnostics figures and the generated blocks of
  ``docs/RESULTS.md``.

Imports go one way: commands use run and reporting, run uses reporting (a run draws its curves), reporting uses
neither. ``odeformer.app.train`` and ``odeformer.app.reproduce`` start their commands by module path
(``python -m``, ``torchrun -m``). The library (``odeformer`` outside this package) imports nothing from here, and
no module here imports another round a circle; ``tests/house/test_hygiene.py`` checks both.
"""
