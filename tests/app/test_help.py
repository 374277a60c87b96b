"""``odeformer-train --help`` lists every solver's ``solver.options`` with their defaults, not only the chosen one's."""

import odeformer
from helpers import cli
from odeformer.app.run.groups import solver_options_text


def test_help_lists_every_solvers_options():
    done = cli("--help")
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line and not line.startswith(" "))
    for name in odeformer.solver_names():
        assert name in lines, f"--help lists no options line for {name}"
    assert lines["damped"] == "gamma=1" and lines["light_wave"] == "theta0=-2"
    assert "theta0=-8" in lines["mix"] and "lambda0=0.193183" in lines["symmetric_splitting"]
    assert lines["tableau"].startswith("A=null, b=null") and "drifts=null" in lines["tableau"]
    assert lines["diffusion"] == "(none)"
    assert "solver.rtol=0.001" in lines["dopri5"]  # a continuous solver's settings are the solver node's own keys


def test_the_options_text_is_what_the_generated_configs_hold():
    from odeformer.app.run.config import stepper_options

    text = solver_options_text()
    for name in odeformer.solver_names("discrete"):
        options = stepper_options(name)
        line = next(line for line in text.splitlines() if line.startswith(f"{name}: "))
        assert all(f"{key}=" in line for key in options), (name, line)
        assert (line == f"{name}: (none)") == (not options)
