# mlite-lab: two commands for users (`make lab`, `make test`), the rest are their parts.
#   GPU users: make setup TORCH_SPEC="torch==2.11.0" TORCH_INDEX=https://download.pytorch.org/whl/cu130
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
EXTRAS ?= all
PORT ?= 8888
PYTEST_ARGS ?=
STAMP := $(VENV)/.mlite-setup

.PHONY: setup browser kernel lab lint test test-fast strip clean

setup: $(STAMP) browser

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	@touch $(STAMP)

# Debian's Chromium drives the real-browser tests (Playwright's own browser download does not work offline).
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium missing: run 'sudo apt-get install chromium' for the browser tests"; fi; }

kernel: $(STAMP)
	@$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (mlite-lab)" >/dev/null

# a token is generated and printed; containers run as root, which JupyterLab refuses without --allow-root
lab: setup kernel
	$(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.port=$(PORT) --no-browser \
	  --ServerApp.root_dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

# ruff (lint + format check) and mypy over the whole tree, as .pre-commit-config.yaml runs them before a commit
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: setup kernel lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# everything but the real-browser and multi-process tests, for quick edit loops
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not browser and not slow" $(PYTEST_ARGS)

strip:
	$(BIN)/nbstripout notebooks/*.ipynb

clean:
	rm -rf $(VENV) .pytest_cache artifacts
