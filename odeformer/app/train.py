"""``python -m odeformer.app.train``: ``odeformer-train`` by module path, as ``torchrun -m`` needs one.

The command is :mod:`odeformer.app.commands.train`; this module only starts it.
"""

from .commands.train import main

if __name__ == "__main__":
    main()
