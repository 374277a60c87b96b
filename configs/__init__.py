"""The training app's configs, shipped inside the package as ``odeformer.configs`` (``train.yaml``, experiments and
their training settings). The solver, model, data and train groups are generated from the registries in
``odeformer/app/run/config.py``; YAML here or on Hydra's search path may extend any generated option."""
