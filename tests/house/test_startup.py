"""A command answers ``--help`` and a usage error before it loads torch (or Hydra): the arguments are parsed and
checked first, and what a command needs is imported when it needs it. Measured by what is imported, not by time."""

import json
import subprocess
import sys

import pytest

LAZY = {
    "compare": (["--help"], ["rk4", "--out", "x", "--seeds", "0"]),
    "analyze": (["--help"], ["--refine", "0"]),
    "reproduce": (["--help"], ["--sections", "nonesuch"]),
    "data": (["--help"], ["nonesuch"]),
}
"""Each command whose start-up is checked: its ``--help`` and one usage error."""

_PROBE = """
import json, sys
from odeformer.app.commands.{name} import main
code = None
try:
    code = main({argv!r})
except SystemExit as stop:
    code = stop.code
print(json.dumps({{"code": code, "loaded": sorted(m for m in ("torch", "hydra", "omegaconf", "transformers")
                                                   if m in sys.modules)}}))
"""


@pytest.mark.parametrize("name", sorted(LAZY))
@pytest.mark.parametrize("which", [0, 1], ids=["help", "usage-error"])
def test_a_command_answers_help_and_usage_errors_without_loading_torch(name, which):
    argv = LAZY[name][which]
    done = subprocess.run([sys.executable, "-c", _PROBE.format(name=name, argv=argv)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == (0 if which == 0 else 2), done.stderr
    assert result["loaded"] == [], f"odeformer-{name} {' '.join(argv)} imported {result['loaded']}"
