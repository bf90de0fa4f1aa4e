# trainplan: `make run` prints the seed plan, `make test` runs the whole suite, `make lint`
# runs ruff and mypy on the packages, tests/ and benchmarks/ (rules and why: pyproject.toml)
# and must report zero findings.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
LINT_STAMP := $(VENV)/.installed-lint
LINTED := topology solver service tests benchmarks

.PHONY: install run test lint lint-fix serve bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP) $@

# mypy reads tests/ too, so the lint environment has the test extras (pytest, hypothesis, httpx,
# schemathesis): without them every test module's imports are unresolved findings.
$(LINT_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[lint,test]'
	touch $(STAMP) $(TEST_STAMP) $@

install: $(STAMP)

run: $(STAMP)
	$(BIN)/trainplan plan --model seed-70b --cluster seed-512 --training seed-300b --format md

test: $(TEST_STAMP)
	$(BIN)/python -m pytest tests

lint: $(LINT_STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/mypy $(LINTED)

# ruff's safe fixes (typing imports, f-strings, ...); what it cannot fix is left to you.
lint-fix: $(LINT_STAMP)
	$(BIN)/ruff check --fix $(LINTED)

serve: $(STAMP)
	$(BIN)/trainplan serve

bench: $(TEST_STAMP)
	$(BIN)/python -m benchmarks.search
	$(BIN)/python -m benchmarks.accuracy
	$(BIN)/python -m benchmarks.layouts_http
	$(BIN)/python -m benchmarks.topology

clean:
	rm -rf $(VENV) build *.egg-info
