# The set-up commands of the README: `make demo`, `make test` and `make compat`.
# Each creates (or reuses) the virtual environment in .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO := demo-output

.PHONY: demo test compat clean

$(STAMP): setup.py pyproject.toml $(wildcard snm_core/*.c snm_core/*/*.c snm_core/*/*/*.c snm_core/*/*.h snm/*/*.cpp)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	# pyctcdecode (the CTC decoder tests) asks for numpy < 2 but runs on numpy 2: see setup.py.
	$(BIN)/python -m pip install --quiet --no-deps 'pyctcdecode>=0.5'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/snm features --config skip5gram "The quick brown fox jumps over the lazy dog"
	$(BIN)/snm synth --out $(DEMO)/corpus --train_sentences 20000 --heldout_sentences 1000
	$(BIN)/snm train --config skip5gram --train $(DEMO)/corpus/train.txt \
		--heldout $(DEMO)/corpus/dev.txt --test $(DEMO)/corpus/test.txt --out $(DEMO)/run

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2

# The package as users and cluster workers install it (tests/install): the sdist Beam's
# stager builds, in new environments on the oldest and newest Python and dependencies
# setup.py allows, one of them a Beam worker pool.  Installs from the package index.
compat: $(STAMP)
	SNM_TEST_INSTALL=1 $(BIN)/python -m pytest -q -n 2 tests/install

clean:
	rm -rf $(VENV) $(DEMO) *.egg-info
