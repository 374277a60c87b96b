import os

from hypothesis import settings

# `ci`: derandomized, no deadline (CI machines are shared and noisy). `dev`: random, still no deadline.
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=20, print_blob=True)
settings.register_profile("dev", deadline=None, max_examples=20)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# Real datasets: CI sets ODEFORMER_DATA; a checkout beside ../shared/data finds them there too.
_shared = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "data"
if _shared.is_dir():
    os.environ.setdefault("ODEFORMER_DATA", str(_shared))
