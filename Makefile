# The two commands of the README: `make demo` and `make test`. Both set up everything they need
# on a fresh machine: Redis from Debian, a Python virtualenv, Kafka's jars from Maven Central.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml sdk/pyproject.toml | sha1sum | cut -c1-12)

.PHONY: setup system-deps demo test test-unit soak bench bench-smoke down clean

setup: $(STAMP) system-deps
	@$(BIN)/python -c "from conveyor.jars import resolve_jars; resolve_jars()"
	@$(BIN)/python -c "from conveyor.pipeline.spark import pipeline_jars; pipeline_jars()"

$(STAMP): pyproject.toml sdk/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ./sdk -e '.[all,dev]'
	@touch $@

# Debian packages the platform and the tests start, installed only where missing: redis-server
# (the real-time views), postgresql (the Iceberg JDBC catalog), chromium (the dashboard test drives
# it headless), prometheus, prometheus-alertmanager and prometheus-node-exporter (the demo's
# monitoring; promtool checks the alert rules), wrk (the load of the gateway and security benches
# in make test, make bench and make bench-smoke), systemd (systemd-analyze checks the units of `conveyor
# deploy systemd`). Each is "<probe>:<package>".
DEBIAN := redis-server:redis-server chromium:chromium /usr/lib/postgresql/*/bin/initdb:postgresql promtool:prometheus prometheus-alertmanager:prometheus-alertmanager prometheus-node-exporter:prometheus-node-exporter wrk:wrk systemd-analyze:systemd
system-deps:
	@missing=""; for pair in $(DEBIAN); do probe=$${pair%%:*}; \
	  command -v $$probe >/dev/null 2>&1 || ls $$probe >/dev/null 2>&1 || missing="$$missing $${pair##*:}"; done; \
	  if [ -n "$$missing" ]; then echo "installing from Debian:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi
	@command -v java >/dev/null 2>&1 || { echo "java (17+) is required"; exit 1; }
	@command -v mvn >/dev/null 2>&1 || { echo "mvn is required to resolve Kafka's jars"; exit 1; }

# The demo platform end to end: clusters up, topics everywhere, a round trip through each cluster,
# a gateway per data centre, a topic asked for through the bus and granted by the registrar (on
# every cluster and in both routes, copied at least once beside the exact topics), and realistic ad traffic through both
# gateways. Every component serves its metrics where platform.yaml's ops.components says, so the
# dashboard's panels fill. It leaves running what platform.yaml's ops.running names: the lake on
# its schedule (`lake start`) and the views (`views start`) stay up as services with the gateways.
demo: setup
	$(BIN)/conveyor up
	$(BIN)/conveyor topics apply
	$(BIN)/conveyor ops dashboard
	$(BIN)/conveyor smoke
	$(BIN)/conveyor gateway start --dc dc1
	$(BIN)/conveyor gateway start --dc dc2
	$(BIN)/conveyor replicate start --metrics-port 18181
	$(BIN)/conveyor topics registrar-start --metrics-port 18182
	$(BIN)/conveyor topics request searches --contract examples/searches.schema.json --rate 500 --consumer lake --delivery at_least_once --gateway https://127.0.0.1:18080 --token demo-adserver-token
	$(BIN)/conveyor topics plan
	$(BIN)/conveyor replicate status
	$(BIN)/conveyor gateway generate --rate 2000 --duration 20 --token demo-adserver-token
	$(BIN)/conveyor gateway generate --rate 1000 --duration 25 --field country=NL --token demo-adserver-token >/dev/null & sleep 8; $(BIN)/conveyor topics contract ad-events --schema examples/ad-events.v2.schema.json --gateway https://127.0.0.1:18080 --token demo-adserver-token && wait
	$(BIN)/conveyor topics contract ad-events --gateway https://127.0.0.1:18081 --token demo-adserver-token
	@echo "A version that changes site_id from string to integer is refused (409), and nothing changes:"
	! $(BIN)/conveyor topics contract ad-events --schema examples/ad-events.breaking.schema.json --gateway https://127.0.0.1:18080 --token demo-adserver-token
	$(BIN)/conveyor dispatch demo --messages 20000 --workers 20
	$(BIN)/conveyor lake run --once --metrics-file .conveyor/metrics/lake.prom
	$(BIN)/conveyor lake audit
	@# Traffic starts once the views job serves its metrics, which it does once Spark has started:
	@# "latest" is where its first batch begins, and Spark's start on a loaded machine can outlast a
	@# generator started beside it.
	$(BIN)/conveyor views run --from latest --for 200s --metrics-port 18191 --metrics-file .conveyor/metrics/realtime.prom & views=$$!; \
	  until $(BIN)/python -c "import urllib.request as r; r.urlopen('http://127.0.0.1:18191/healthz', timeout=2)" 2>/dev/null \
	    || ! kill -0 $$views 2>/dev/null; do sleep 2; done; \
	  $(BIN)/conveyor gateway generate --rate 2000 --duration 150 --token demo-adserver-token >/dev/null; wait $$views
	$(BIN)/conveyor lake start --metrics-file .conveyor/metrics/lake.prom
	$(BIN)/conveyor views start --metrics-port 18191 --metrics-file .conveyor/metrics/realtime.prom
	$(BIN)/conveyor status
	$(BIN)/conveyor ops dashboard
	$(BIN)/conveyor ops alerts || true   # exits 1 while a critical alert is active
	@echo "The platform keeps running; stop it with: $(BIN)/conveyor down"

# Two workers, a file to each at a time (module fixtures stay in one process); each worker starts
# its own clusters on ports 2,000 apart (tests/conftest.py). Most of the suite's time is spent
# waiting on brokers and Spark, so two workers on two cores nearly halve it (three took longer: 33
# minutes against 24, the load average past 30, and timed bench windows missed their events). The
# benches' smoke tests (tests/integration/bench: every bench at its smallest size, its peer
# included, a platform each) go out first, before either worker has started its session platform,
# which would idle beside them (tests/conftest.py); then the files in the order given, longest
# first (the system test, then the chaos and integration tests), and the unit tests fill the gaps
# at the end: xdist would otherwise send the files with the most tests first, and the one-test
# system file last. The system test runs the whole platform under faults for CONVEYOR_SOAK_MINUTES
# (1 here, 30 for make soak), then one checker of every sink; the seed is printed, replay it with
# CONVEYOR_CHAOS_SEED. The host-loss test (tests/chaos/deploy: every service from its manifest,
# whole hosts lost) runs on the system test's worker, after it (tests/conftest.py, WHOLE_PLATFORM):
# side by side they starve the two cores.
test: setup
	$(BIN)/python -m pytest tests/system tests/chaos tests/integration tests/unit -q -n 2 --dist loadfile --no-loadscope-reorder

CONVEYOR_SOAK_MINUTES ?= 30
CONVEYOR_HOST_LOSSES ?= 21
soak: setup
	CONVEYOR_SOAK_MINUTES=$(CONVEYOR_SOAK_MINUTES) CONVEYOR_HOST_LOSSES=$(CONVEYOR_HOST_LOSSES) $(BIN)/python -m pytest tests/system tests/chaos/deploy -q -s

test-unit: setup
	$(BIN)/python -m pytest tests/unit -q

# Every benchmark; each writes bench/results/<name>.json.
BENCHES := runtime_startup broker_recovery gateway_throughput replicate_vs_mm2 replicate_failover lag_eval ops_sampling dispatch_throughput balance_plan balance_vs_kafka lake_ingest realtime_views spark_cluster security_cost

# Every bench at its smallest size, its peer included (tests/integration/bench), alone; make test runs them too.
bench-smoke: setup
	$(BIN)/python -m pytest tests/integration/bench -q -n 2 --dist loadfile

bench: setup
	@for b in $(BENCHES); do echo "== bench.$$b"; $(BIN)/python -m bench.$$b || exit 1; done

down:
	$(BIN)/conveyor down

clean: down
	rm -rf .conveyor
