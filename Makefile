# The documented commands. Every target runs scripts/setup first; it is
# idempotent and takes about a second when nothing is missing.
VENV    := .venv
PY      := $(VENV)/bin/python
MRC     := $(VENV)/bin/mrc-nic
TOPO    ?= netns/default.toml
DURATION ?= 10

.PHONY: setup up down test test-unit test-bpf test-lab lint fmt clean bench abi docs

setup:
	@scripts/setup

## Bring up the default lab and run traffic across every plane.
up: setup
	$(MRC) up -t $(TOPO) --reuse
	$(MRC) traffic h0 h1 --duration $(DURATION)
	$(MRC) status

## Take down the lab of $(TOPO) (only that one; `mrc-nic down --all` for every lab).
down: setup
	$(MRC) down -t $(TOPO)

## Every tier (tests/unit, tests/bpf, tests/lab); what this machine cannot run is skipped with the reason.
test: setup
	$(PY) -m pytest -q

## Tier 1, pure Python, no root.
test-unit: setup
	$(PY) -m pytest -q -m "not root" tests/unit

## Tier 2, the BPF programs through BPF_PROG_TEST_RUN (root, bcc).
test-bpf: setup
	$(PY) -m pytest -q tests/bpf

## Tier 3, real labs in namespaces (root; slow).
test-lab: setup
	$(PY) -m pytest -q tests/lab

## Every benchmark against its real peer (--quick, under 15 minutes), then the
## results table: out/bench/RESULTS.md and README.md's results section.
bench: setup
	$(PY) scripts/bench_all.py

## Regenerate mrc_nic/abi/*defs.py (layouts, constants, enums), one module per header of bpf/.
abi: setup
	$(PY) -m mrc_nic.abi.generate

## docs/daemon.md's lists of operations, from their declarations.
docs: setup
	$(PY) -m mrc_nic.contract.opsdoc

lint: setup
	$(VENV)/bin/ruff check mrc_nic tests scripts examples
	$(VENV)/bin/ruff format --check mrc_nic tests scripts examples

fmt: setup
	$(VENV)/bin/ruff format mrc_nic tests scripts examples
	$(VENV)/bin/ruff check --fix mrc_nic tests scripts examples

clean:
	rm -rf $(VENV) .pytest_cache
