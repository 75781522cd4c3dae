# The few targets people type. Each creates .venv and installs what it needs on first use.
# The interpreter .venv is made from: the machine's own /usr/bin/python3 when it is 3.11 or newer,
# else python3. Distributions build their python3 with PGO and LTO and link it statically; on the
# benchmark machine that runs the gateway ~15% faster than pyenv's default build of the same
# version (docs/benchmarks.md, "Interpreter"). PYTHON=... chooses another.
PYTHON ?= $(shell /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
            && echo /usr/bin/python3 || echo python3)
VENV   := .venv
BIN    := $(VENV)/bin
DEPS   := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
STAMP  := $(VENV)/.installed-$(DEPS)
# pyspark (the `spark` extra, ~470 MB) is installed only where the Spark tests run: make test.
SPARK_STAMP := $(VENV)/.installed-spark-$(DEPS)
# The conformance extra: the client version whose system tests run, and their imports.
CONFORMANCE_STAMP := $(VENV)/.installed-conformance-$(DEPS)

.PHONY: run test lint unit inprocess e2e conformance spark coverage protos bench bench-quick bench-go soak test-faults test-kafka-versions test-cluster test-spark-cluster bench-spark-cluster docker-check test-containers test-bench clean

COMPOSE_PLUGIN := .cache/docker/cli-plugins/docker-compose
IPTABLES := /usr/sbin/iptables

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "Python 3.11 or newer is required (set PYTHON=...)"; exit 1; }
	@command -v java >/dev/null || { echo "Java 17+ is required for the embedded Kafka"; exit 1; }
	@# Debian's python3 has no ensurepip without its python3-venv package: then pip comes from
	@# python3's own pip (22.3 or newer installs into another interpreter with --python).
	$(PYTHON) -m venv $(VENV) >/dev/null 2>&1 || { rm -rf $(VENV) && $(PYTHON) -m venv --without-pip $(VENV) \
		&& python3 -m pip --python $(BIN)/python install -q pip; } \
		|| { echo "$(PYTHON) cannot make a venv: install its venv package (python3-venv) or set PYTHON=..."; exit 1; }
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@rm -f $(VENV)/.installed-* && touch $@

$(SPARK_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[test,spark]'
	@rm -f $(VENV)/.installed-spark-* && touch $@

$(CONFORMANCE_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[test,conformance]'
	@rm -f $(VENV)/.installed-conformance-* && touch $@

## run: the gateway on an embedded local Kafka (data kept in .cache/kafka-data), gRPC on :8085
KAFKA_DATA ?= .cache/kafka-data
run: $(STAMP)
	$(BIN)/pubsub-gateway serve --kafka-data-dir $(KAFKA_DATA)

## test: the whole suite, fastest feedback first: lint, unit, in-process, end-to-end, conformance, Spark.
## Each tier is one pytest run, in this order also under -j; the first that fails stops the rest.
## pyspark is installed first, so mypy checks spark/ against its types (CONTRIBUTING.md).
test: $(SPARK_STAMP)
	@for tier in lint unit inprocess e2e conformance spark; do \
		$(MAKE) --no-print-directory $$tier || exit 1; done

## lint: ruff format and check, mypy --strict, and the import contracts (no cycles; wire -> core -> Kafka)
lint: $(STAMP)
	$(BIN)/ruff format --check gateway tests benchmarks spark conformance
	$(BIN)/ruff check gateway tests benchmarks spark conformance
	$(BIN)/mypy
	$(BIN)/lint-imports

## unit: pure code, no broker (~30 s)
unit: $(STAMP) $(COMPOSE_PLUGIN)
	DOCKER_CONFIG=$(CURDIR)/.cache/docker $(BIN)/python -m pytest tests/unit

## inprocess: a whole gateway inside the test process on a real broker (~1 min)
inprocess: $(STAMP)
	$(BIN)/python -m pytest tests/inprocess

## e2e: gateway processes, the official clients, real HTTP, brokers killed and restarted.
## Two pytest workers, each with a broker of its own: the tests mostly wait (group joins,
## deadlines, backoffs), so two at once take ~15 minutes where one at a time took ~23.
## E2E_WORKERS=0 runs them one at a time. The 25 slowest tests are listed at the end.
## The fault suite's quick cases run here too (tests/faults: network cuts, restarts under load).
E2E_WORKERS ?= 2
e2e: $(STAMP) $(IPTABLES)
	@for tool in go mvn npm; do command -v $$tool >/dev/null \
		|| { echo "$$tool is required: the e2e tier drives the gateway with the official Go, Java and Node clients"; exit 1; }; done
	$(BIN)/python -m pytest -n $(E2E_WORKERS) --dist loadfile --durations=25 tests/e2e tests/integration tests/faults

## test-faults: the fault suite whole (tests/faults, docs/faults.md): network cuts of a gateway from
## the broker, from the other gateways and from its client, held FAULT_CUT_SECONDS (40 here, 15 in
## `make test`); SIGTERM rolled through three gateways; kill -9 mid-Seek, mid-create and mid-delete;
## the broker's disk full. Each checked over the official clients' history (~15 min). Needs root.
## Each case's verdict goes to FAULT_RESULTS, which docs/faults.md quotes.
FAULT_CUT_SECONDS ?= 40
FAULT_RESULTS ?= benchmarks/results/faults
test-faults: $(STAMP) $(IPTABLES)
	FAULT_CUT_SECONDS=$(FAULT_CUT_SECONDS) FAULT_RESULTS=$(FAULT_RESULTS) $(BIN)/python -m pytest -s \
		-m 'not cluster and not spark_cluster' --durations=0 tests/faults

# The fault suite cuts processes apart with iptables (tests/faults/netcut.py): Debian's package.
$(IPTABLES):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables

## conformance: google-cloud-pubsub's own system tests, downloaded from PyPI and checked against a
## pinned sha256, on a gateway and a broker; conformance/expected.toml lists what may not pass
conformance: $(CONFORMANCE_STAMP)
	$(BIN)/python -m conformance

spark: $(SPARK_STAMP)
	$(BIN)/python -m pytest tests/spark

## coverage: line and branch coverage of gateway/ by the unit and in-process tiers
coverage: $(STAMP)
	$(BIN)/python -m pytest -q --cov=gateway --cov-branch --cov-report=term:skip-covered \
		--cov-report=json:.cache/coverage.json tests/unit tests/inprocess

## test-cluster: a three-broker cluster loses a broker under load, or has one cut off from the
## others (tests/faults/test_broker_partition.py, needs root) (3 JVMs; a few minutes)
test-cluster: $(STAMP) $(IPTABLES)
	$(BIN)/python -m pytest -m cluster tests/integration tests/faults

## test-spark-cluster: the Spark side on a standalone cluster (a master and two workers on loopback,
## from the pyspark package; 5 JVMs with the broker and the driver): read_backlog, ack, read_stream,
## the export job. Prints its figures (FIGURE lines)
test-spark-cluster: $(SPARK_STAMP)
	$(BIN)/python -m pytest -s -m spark_cluster tests/spark_cluster

## bench-spark-cluster: the Spark side at 10^7 messages on a standalone cluster (two executors of one
## core and 1 GiB, a 2 GiB driver): a plain Spark Kafka read of the topic against read_backlog, and
## the export job's rows/s (docs/spark.md, "Benchmark on the cluster"; ~15 min).
## A quick run (~2 min): make bench-spark-cluster MESSAGES=100000 OUT=/tmp/spark-cluster.json
MESSAGES ?= 10000000
OUT ?= benchmarks/results/spark-cluster.json
bench-spark-cluster: $(SPARK_STAMP)
	$(BIN)/python -m benchmarks.spark_cluster_bench --messages $(MESSAGES) --out $(OUT)

## docker-check: what can be checked of docker/ without a Docker engine (the unit tier runs it
## too): hadolint, the Dockerfile's structure, compose.yaml's settings, and `docker compose config`
COMPOSE_VERSION ?= v2.40.3
docker-check: $(STAMP) $(COMPOSE_PLUGIN)
	DOCKER_CONFIG=$(CURDIR)/.cache/docker $(BIN)/python -m pytest -q -rs tests/unit/test_docker.py

# `docker compose config` needs the CLI's compose plugin, which this machine's Docker CLI lacks:
# built from the Go module proxy into .cache/docker once (`go install` refuses the module for its
# exclude directives, so it is built in its downloaded source; ~1 min with the download).
$(COMPOSE_PLUGIN):
	@dir=$$(go mod download -json github.com/docker/compose/v2@$(COMPOSE_VERSION) \
		| $(BIN)/python -c 'import json, sys; print(json.load(sys.stdin)["Dir"])') && \
	mkdir -p $(dir $@) && (cd "$$dir" && go build -o $(CURDIR)/$@ ./cmd)

# BuildKit's CLI plugin, which `docker build` of the Dockerfile (RUN --mount) and compose need;
# Debian's docker.io has no buildx. Built from the Go module proxy (~2 min), with its version set
# (compose refuses a buildx that reports none).
BUILDX_VERSION ?= v0.19.3
BUILDX_PLUGIN := .cache/docker/cli-plugins/docker-buildx
$(BUILDX_PLUGIN):
	GOBIN=$(CURDIR)/.cache/docker/gobin go install \
		-ldflags "-X github.com/docker/buildx/version.Version=$(BUILDX_VERSION)" \
		github.com/docker/buildx/cmd/buildx@$(BUILDX_VERSION)
	mkdir -p $(dir $@) && mv .cache/docker/gobin/buildx $@

## test-containers: the images built from docker/Dockerfile, the compose stack up with its spark
## profile, and PubSubKafkaContainer from a user's suite (docker/README.md). Where no image
## registry answers, on a Docker engine of this checkout's own and local Debian bases
## (docker/local/engine.sh, which the tier runs first: installs docker.io and debootstrap, as root).
## ~10 min; figures in
## .cache/containers/results.json (CONTAINER_RESULTS=benchmarks/results/containers.json to keep them)
CONTAINER_RESULTS ?= .cache/containers/results.json
test-containers: $(SPARK_STAMP) $(COMPOSE_PLUGIN) $(BUILDX_PLUGIN)
	PUBSUB_GATEWAY_CONTAINER_RESULTS=$(CONTAINER_RESULTS) $(BIN)/python -m pytest tests/containers

## test-kafka-versions: the core end-to-end tests on the oldest supported Kafka and the newest
KAFKA_VERSIONS ?= $(shell $(BIN)/python -c 'from gateway.kafka.brokerjars import KAFKA_VERSION as n, OLDEST_SUPPORTED as o; print(o, n)' 2>/dev/null)
CORE_E2E := tests/e2e/test_first_slice.py tests/e2e/test_admin.py tests/e2e/test_delivery_semantics.py \
            tests/e2e/test_exactly_once.py tests/e2e/test_streaming_pull.py tests/e2e/test_seek.py \
            tests/e2e/test_ordering.py tests/e2e/test_broker_restart.py
test-kafka-versions: $(STAMP)
	@for v in $(KAFKA_VERSIONS); do echo "== Kafka $$v"; \
		PUBSUB_GATEWAY_TEST_KAFKA_VERSION=$$v $(BIN)/python -m pytest -q $(CORE_E2E) || exit 1; done

## protos: regenerate gateway/_pb from protos/
protos: $(STAMP)
	$(BIN)/python -m gateway.protogen

## bench: every scenario (goclient builds the Go generator in benchmarks/gen/go: needs go)
bench: $(STAMP)
	$(BIN)/python -m benchmarks --out benchmarks/results/latest.json

## bench-go: the official Go client alone, beside raw Kafka and raw streams (~5 minutes)
bench-go: $(STAMP)
	$(BIN)/python -m benchmarks --scenarios goclient --out benchmarks/results/goclient.json

## soak: an hour of steady publishing and StreamingPull with acks, nacks, extensions and subscription
## churn; fails if the gateway's RSS, fds, threads, lease log or p99 grows (SOAK_MINUTES=2 to try it)
SOAK_MINUTES ?= 60
SOAK_OUT ?= benchmarks/results/soak.json
soak: $(STAMP)
	$(BIN)/python -m benchmarks.soak --minutes $(SOAK_MINUTES) --out $(SOAK_OUT)

## test-bench: the benchmark harness in quick mode, every scenario and push_bench's, on a broker of
## its own; checks that each produces its figures, not how fast (~4 min; not in `make test`)
test-bench: $(STAMP)
	$(BIN)/python -m pytest tests/bench

bench-quick: $(STAMP)
	$(BIN)/python -m benchmarks --quick --out benchmarks/results/quick.json

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache
