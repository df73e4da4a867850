# Set-up and entry points. `make demo` and `make test` work from a fresh clone.
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
export TI_SKIP_VERSION_CHECK := ON
export WANDB_MODE ?= offline
# mkdocs-material prints a banner about its successor on every build
export NO_MKDOCS_2_WARNING := 1

.PHONY: setup demo test test-integration test-slow bench validate docs clean

$(BIN)/activate: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	touch $(BIN)/activate

setup: $(BIN)/activate

demo: setup          ## the main job: benchmark table, plot and video under out/demo
	$(BIN)/python -m taigym.apps.demo --out out/demo

# One pytest worker per core, a test file per worker at a time (module fixtures built once):
# most of a test's time is one core compiling or stepping a Taichi solver.
test: setup          ## the fast tier: unit tests, the import-linter contract (CI, first)
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m "not slow and not integration"

test-integration: setup   ## training, Ray, the apps in subprocesses, whole episodes of the costly envs (CI)
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m integration

test-slow: setup     ## long physics validation checks
	$(BIN)/python -m pytest -q -m slow -n auto --dist loadfile

bench: setup         ## speed figures (prints one JSON line at the end)
	$(BIN)/python scripts/bench_sim.py

validate: setup      ## every fidelity check: docs/validation/*.png and summary.json (resumes from out/validation/cache)
	$(BIN)/python scripts/validate.py --out docs/validation

$(BIN)/mkdocs: $(BIN)/activate
	$(BIN)/pip install -q -e ".[docs]"
	touch $@

docs: $(BIN)/mkdocs  ## the docs site into site/ (strict: a broken link or anchor fails)
	$(BIN)/mkdocs build --strict

clean:
	rm -rf out site .pytest_cache
