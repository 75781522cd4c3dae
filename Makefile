# The few targets people type. Each creates .venv and installs what it needs on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test lint unit protos bench bench-quick clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "Python 3.11 or newer is required (set PYTHON=...)"; exit 1; }
	@command -v java >/dev/null || { echo "Java 17+ is required for the embedded Kafka"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@rm -f $(VENV)/.installed-* && touch $@

## run: the gateway on an embedded local Kafka (data kept in .cache/kafka-data), gRPC on :8085
run: $(STAMP)
	$(BIN)/pubsub-gateway serve --kafka-data-dir .cache/kafka-data

## test: lint, type-check, then the whole suite against a real broker
test: lint
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check gateway tests benchmarks spark
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

## protos: regenerate gateway/_pb from protos/
protos: $(STAMP)
	$(BIN)/python -m gateway.protogen

bench: $(STAMP)
	$(BIN)/python -m benchmarks --out benchmarks/results/latest.json

bench-quick: $(STAMP)
	$(BIN)/python -m benchmarks --quick --out benchmarks/results/quick.json

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache
