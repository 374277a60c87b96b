"""``python -m odeformer.app.reproduce``: ``odeformer-reproduce`` by module path.

The command is :mod:`odeformer.app.commands.reproduce`; this module only starts it, and offers
:func:`~odeformer.app.reporting.results.write_results` to ``benchmarks/gpu.py``, which imports it from here.
"""

import sys

from .commands.reproduce import main
from .reporting.results import write_results

__all__ = ["main", "write_results"]

if __name__ == "__main__":
    sys.exit(main())
