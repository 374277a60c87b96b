"""odeformer: transformers whose depth is time. The integrators live in the sibling package ``solvers``."""

__version__ = "0.1.0"
