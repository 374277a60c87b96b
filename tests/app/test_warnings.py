"""A command's warnings are one line in its own format, with no line of the project's source under them; a library
user's warnings are Python's own."""

import subprocess
import sys

_WARN = "import sys; sys.argv[0] = {name!r}; import odeformer.app.commands, warnings; warnings.warn('careful\\n  now')"


def test_a_commands_warning_is_one_line_naming_the_command():
    done = subprocess.run(
        [sys.executable, "-c", _WARN.format(name="/x/bin/odeformer-train")], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stderr == "odeformer-train: warning: careful now\n"


def test_a_library_users_warning_keeps_pythons_format():
    done = subprocess.run([sys.executable, "-c", _WARN.format(name="my_script.py")], capture_output=True, text=True)
    assert "UserWarning: careful" in done.stderr
