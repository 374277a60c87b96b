"""Benchmarks: ratios measured side by side in one run (`python -m benchmarks.run`); never timed unit tests."""
