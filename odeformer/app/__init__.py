"""The application around the library: the commands and what only they use.

Training (:mod:`~odeformer.app.train`, the one module importing Hydra, and its loop :mod:`~odeformer.app.trainer`),
its config (:mod:`~odeformer.app.config`), building a run's model (:mod:`~odeformer.app.builder`), checkpoints
(:mod:`~odeformer.app.checkpoints`), objectives and their samplers (:mod:`~odeformer.app.objectives`,
:mod:`~odeformer.app.batches`), the start-up stability bound (:mod:`~odeformer.app.stability`), and the commands
``odeformer-diagnose`` (:mod:`~odeformer.app.diagnose`), ``odeformer-reproduce`` (:mod:`~odeformer.app.reproduce`),
``odeformer-data`` (:mod:`~odeformer.app.fetch`) and ``odeformer-sample`` (:mod:`~odeformer.app.sample`).

The library (``odeformer`` outside this package) imports nothing from here; ``tests/test_hygiene.py`` checks it.
"""
