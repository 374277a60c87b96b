# `make test` and `make train` set everything up on a fresh machine: a .venv at the repo root, the project installed
# editable with its test extra. CONSTRAINTS pins torch to this workplace's CPU build; elsewhere pass CONSTRAINTS=.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CONSTRAINTS ?= constraints.txt
PIP_CONSTRAINTS := $(if $(CONSTRAINTS),-c $(CONSTRAINTS),)
STAMP := $(VENV)/.installed
# Test processes run side by side (pytest-xdist), one torch thread each, an idle one taking tests from a busy one
# (worksteal: the long kit runs do not end up queued behind each other); JOBS=0 runs the tests in one process.
JOBS ?= 2
# Test processes write Python's bytecode caches (__pycache__, ignored by git) even where the environment sets
# PYTHONDONTWRITEBYTECODE: without them each xdist worker rewrites every test module's asserts and each of the suite's
# command-line runs compiles the project anew (about 10 s a worker and 1 s a command on 2 cores).
test test-slow test-thorough test-rehearsals: export PYTHONDONTWRITEBYTECODE :=

.PHONY: test test-slow test-thorough test-rehearsals train bench setup clean data

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(PIP_CONSTRAINTS) -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -n $(JOBS) --dist worksteal

test-slow: $(STAMP)
	$(PY) -m pytest -m slow -n $(JOBS) --dist worksteal

# The kit's thorough run and drawn runs of eighth-order compositions (minutes): before a release or a change to the kit.
test-thorough: $(STAMP)
	$(PY) -m pytest -m thorough -n $(JOBS) --dist worksteal

# The benchmark and GPU scripts rehearsed whole on the CPU (minutes each): run before `make bench` or a GPU session.
test-rehearsals: $(STAMP)
	$(PY) -m pytest -m rehearsal -n $(JOBS)

bench: $(STAMP)
	$(PY) -m benchmarks.run --results docs/RESULTS.md

# Fetch Cora, Tiny Shakespeare and SST-2 into $ODEFORMER_DATA, verified; `make data ARGS="--list"` says what is there.
data: $(STAMP)
	$(VENV)/bin/odeformer-data $(ARGS)

train: $(STAMP)
	$(VENV)/bin/odeformer-train experiment=digits_vit

clean:
	rm -rf $(VENV) outputs .pytest_cache .hypothesis
