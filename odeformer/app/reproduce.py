"""``python -m odeformer.app.reproduce``: ``odeformer-reproduce`` by module path; the command is
:mod:`odeformer.app.commands.reproduce`, and this module only starts it."""

import sys

from .commands.reproduce import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
