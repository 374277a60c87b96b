"""The commands: thin fronts that parse and check a command line, then call into the run and reporting rooms.

``odeformer-train`` (:mod:`~odeformer.app.commands.train`, the only module importing Hydra), ``odeformer-diagnose``
(:mod:`~odeformer.app.commands.diagnose`), ``odeformer-reproduce`` (:mod:`~odeformer.app.commands.reproduce`),
``odeformer-sample`` (:mod:`~odeformer.app.commands.sample`) and ``odeformer-data``
(:mod:`~odeformer.app.commands.data`, which also holds the downloader only it uses). Bad input is one line on stderr
and exit code 2, before anything is written.
"""
