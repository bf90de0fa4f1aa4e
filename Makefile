# trainplan: `make run` prints the seed plan, `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: install run test serve bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP) $@

install: $(STAMP)

run: $(STAMP)
	$(BIN)/trainplan plan --model seed-70b --cluster seed-512 --training seed-300b --format md

test: $(TEST_STAMP)
	$(BIN)/python -m pytest tests

serve: $(STAMP)
	$(BIN)/trainplan serve

bench: $(TEST_STAMP)
	$(BIN)/python -m benchmarks.search
	$(BIN)/python -m benchmarks.accuracy
	$(BIN)/python -m benchmarks.layouts_http

clean:
	rm -rf $(VENV) build *.egg-info
