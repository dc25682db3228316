# The two commands of the README: `make demo` and `make test`. Both make .venv and install into it.
# `make demo-secure`: the same cluster with TLS, client certificates and ZooKeeper ACLs (examples/secure_pipeline.py).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SEEDS ?= 200
FROM ?= 0
STEPS ?= 3000
MUTATION ?= none
JOBS ?=

.PHONY: demo demo-secure test lint browser pyc proto unit integration sim sim-mutants bench bench-quick clean \
	spark-venvs test-spark-versions

$(STAMP): pyproject.toml setup.py constraints.txt wire/_native.c wire/_add_request.c wire/_native.h
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,delta,s3test]' --config-settings editable_mode=compat
	$(BIN)/python -m bkledger.spark_connector.worker_path install   # Spark's Python processes: compiled pyspark
	$(MAKE) --no-print-directory browser
	touch $(STAMP)

# Bytecode of the repository's own modules, written once: the editable install imports them from here, and
# where PYTHONDONTWRITEBYTECODE is set (as on our CI machines) every bookie, daemon, command and Spark
# Python worker would otherwise compile them from source at each start (0.2-0.5 CPU-s a process; the
# suite starts hundreds). Python checks each file's bytecode against its source, so a stale one is ignored.
PYC_DIRS := bookie client wire proto spark_connector bkledger bench tests examples pyspark_bkledger.py
pyc: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 $(addprefix $(CURDIR)/,$(PYC_DIRS)) >/dev/null

demo: $(STAMP) pyc
	$(BIN)/python examples/pipeline.py
	$(BIN)/python examples/secure_pipeline.py

demo-secure: $(STAMP) pyc
	$(BIN)/python examples/secure_pipeline.py

# The whole suite on WORKERS pytest-xdist workers (most of its time is waiting on processes, JVMs and fault
# timeouts, not CPU). --dist loadgroup: a module's tests run in one worker (its module fixtures start once),
# except those marked xdist_group, which run together in their group's worker. WORKERS=0: serially.
WORKERS ?= 2
test: $(STAMP) pyc lint browser
	$(BIN)/python -m pytest -q -p no:cacheprovider $(if $(filter-out 0,$(WORKERS)),-n $(WORKERS) --dist loadgroup) tests

# Debian's chromium for the status page test (tests/integration/test_status_page.py), where this can install it:
# root and apt-get. Never fails make: without it that test skips and says why.
browser:
	-@if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's chromium (headless browser of the status page test)"; \
		apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 \
		|| { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; } \
		|| echo "chromium could not be installed: the status page test will skip"; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy -p bkledger -p bench -p examples -p tests -m pyspark_bkledger

unit: $(STAMP) pyc
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit

integration: $(STAMP) pyc browser
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/integration

# make sim [SEEDS=N FROM=F] [SEED=S] [MUTATION=M] [STEPS=K] [JOBS=J]: run a seed range (on one worker process
# per core unless JOBS says otherwise), or replay one seed's trace.
sim: $(STAMP)
	$(BIN)/python -m tests.sim.runner --seeds $(SEEDS) --first $(FROM) --steps $(STEPS) --mutation $(MUTATION) \
		$(if $(SEED),--seed $(SEED)) $(if $(JOBS),--jobs $(JOBS))

# make sim-mutants [SEEDS=N FROM=F] [JOBS=J]: each mutant's violation rate over the range; fails below 3%.
sim-mutants: $(STAMP)
	$(BIN)/python -m tests.sim.runner --mutants --seeds $(SEEDS) --first $(FROM) --steps $(STEPS) \
		$(if $(JOBS),--jobs $(JOBS))

proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Ibkledger/proto=proto --python_out=. --pyi_out=. --grpc_python_out=. \
		proto/bookie.proto proto/formats.proto
	rm -f bkledger/proto/formats_pb2_grpc.py

# make test-spark-versions [SPARK_VERSIONS="4.0.5 4.1.4"]: the connector on the older pyspark release lines.
# One venv per release in .spark-venvs/ (built once: pip, this repo editable, that pyspark; the other
# dependencies as constraints.txt pins them), then tests/spark/test_spark_versions.py runs a batch append,
# a read and a streaming query (Trigger.AvailableNow) against a local cluster from each. `make test` stays
# on the pyspark of constraints.txt.
SPARK_VERSIONS ?= 4.0.5 4.1.4
SPARK_VENVS := .spark-venvs

spark-venvs: $(STAMP)
	@for v in $(SPARK_VERSIONS); do \
		d=$(SPARK_VENVS)/pyspark-$$v; \
		if [ ! -f $$d/.installed ]; then \
			echo "building $$d (pyspark $$v)"; \
			$(PY) -m venv $$d && $$d/bin/pip install --quiet --upgrade pip \
			&& grep -v '^pyspark==' constraints.txt > $$d/constraints.txt \
			&& $$d/bin/pip install --quiet -c $$d/constraints.txt -e . "pyspark==$$v" \
				--config-settings editable_mode=compat \
			&& $$d/bin/python -m bkledger.spark_connector.worker_path install \
			&& touch $$d/.installed || exit 1; \
		fi; \
	done

test-spark-versions: spark-venvs
	BKLEDGER_SPARK_VENVS="$(foreach v,$(SPARK_VERSIONS),$(CURDIR)/$(SPARK_VENVS)/pyspark-$(v))" \
		$(BIN)/python -m pytest -q -p no:cacheprovider tests/spark/test_spark_versions.py

bench: $(STAMP) pyc
	$(BIN)/python -m bench.run

bench-quick: $(STAMP) pyc
	$(BIN)/python -m bench.run --quick

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
