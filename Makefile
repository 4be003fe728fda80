# phasepay: see README.md. `make run` and `make test` are the two commands.
SHELL := bash
GO    ?= go
export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/phasepay?sslmode=disable
export API_ADDR     ?= 127.0.0.1:8080
export MOCKPSP_ADDR ?= 127.0.0.1:8090

BINARIES := bin/api bin/reaper bin/mockpsp

.PHONY: all build run test fuzz vet pg chaos bench clean

all: build

build: $(BINARIES)

bin/%: FORCE
	$(GO) build -trimpath -o $@ ./cmd/$*

FORCE:

## pg: make sure PostgreSQL answers on 127.0.0.1:5432 (starts the local cluster if it is down)
pg:
	@scripts/ensure-postgres

## run: migrate, create a dev API key, run api (with the embedded mock PSP) and reaper
run: build pg
	@scripts/run-dev

## test: every test against a real PostgreSQL, with -race, plus a short fuzz of the parsers
test: pg vet
	$(GO) test -race -count=1 -timeout 9m ./...
	$(MAKE) --no-print-directory fuzz

FUZZTIME ?= 5s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseKey$$' -fuzztime $(FUZZTIME) ./internal/idempotency
	$(GO) test -run '^$$' -fuzz '^FuzzFingerprint$$' -fuzztime $(FUZZTIME) ./internal/idempotency

## chaos: the long chaos run (issue 4): 2,000 intents, workers killed and frozen under PSP faults
CHAOS_SEED ?= 1
chaos: pg
	$(GO) run ./cmd/chaos -seed $(CHAOS_SEED) -intents 2000 -json bench/results/chaos.json

## bench: phasepay against pgbench baselines on this machine (issue 6); prints a table, writes bench/results/
bench: build pg
	$(GO) run ./cmd/bench

## compose-up: the whole stack in containers (postgres, migrate, 2 api behind nginx on :8080, 2 reapers, mockpsp, otel-collector, prometheus :9090, grafana :3000); see deploy/README.md
.PHONY: compose-up
compose-up:
	docker compose -f deploy/docker-compose.yml up --build

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

clean:
	rm -rf bin
