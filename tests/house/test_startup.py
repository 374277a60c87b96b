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
    "sample": (["--help"], ["run", "--tokens", "x"]),
    "diagnose": (["--help"], ["--depth", "x"]),
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


# -- odeformer-train: its config groups are generated from the registries (torch), and read from the package's table --

TRAIN = {
    "help": ["--help"],
    "unknown-key": ["model.nonesuch=1"],
    "bad-value": ["model.depth=-1"],
    "bad-type": ["model.depth=abc"],
    "unknown-solver": ["solver=nonesuch"],
    "bad-loop-value": ["train.lr=-1"],
    "zero-step": ["model.dt=0"],
    "float32-zero-rate": ["train.lr=1e-320"],
    "hydra-callback": ["+hydra.callbacks.x._target_=os.getcwd"],
}
"""``odeformer-train``'s ``--help`` and usage errors whose start-up is checked."""

_TRAIN_PROBE = """
import json, sys
if {generate!r}:
    import solvers  # the registries loaded first: the groups are generated from them, not read from the table
sys.argv = ["odeformer-train", *{argv!r}]
from odeformer.app.commands.train import main
code = None
try:
    main()
except SystemExit as stop:
    code = stop.code
print(json.dumps({{"code": code, "loaded": sorted(m for m in ("torch", "transformers") if m in sys.modules)}}))
"""


def _train(argv: list[str], generate: bool = False) -> tuple[dict, str]:
    """``odeformer-train <argv>`` in a fresh interpreter (with the registries loaded first when ``generate``): what
    it imported and its exit code, and what it printed besides."""
    probe = _TRAIN_PROBE.format(argv=argv, generate=generate)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, done.stderr[-2000:]
    return json.loads(lines[-1]), "\n".join(lines[:-1]) + done.stderr


@pytest.mark.parametrize("case", sorted(TRAIN))
def test_odeformer_train_answers_help_and_usage_errors_without_loading_torch(case):
    result, _ = _train(TRAIN[case])
    assert result["code"] == (0 if case == "help" else 2)
    assert result["loaded"] == [], f"odeformer-train {' '.join(TRAIN[case])} imported {result['loaded']}"


@pytest.mark.parametrize("case", ["help", "unknown-key"])
def test_the_table_answers_as_the_generated_groups(case):
    """The same command answered from the package's table and from the registries says the same: ``--help`` lists
    every group's options and every solver's ``solver.options``."""
    read, said = _train(TRAIN[case])
    generated, said_then = _train(TRAIN[case], generate=True)
    assert "torch" in generated["loaded"] and read["loaded"] == []
    assert said == said_then and said.strip()
