# phasepay: see README.md. `make run` and `make test` are the two commands.
SHELL := bash
GO    ?= go
export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/phasepay?sslmode=disable
export API_ADDR     ?= 127.0.0.1:8080
export MOCKPSP_ADDR ?= 127.0.0.1:8090

BINARIES := bin/api bin/reaper bin/mockpsp
# TOOLS are the client side's commands: chargectl (cmd/chargectl, package
# client's command-line face), built by make build and make run beside the
# server's binaries, not shipped in its image.
TOOLS := bin/chargectl

# MODULES are the repository's three Go modules, which go.work joins: the
# service (.), its Go client (client/go.mod, for an older Go than the
# server needs) and the tools (tools/go.mod: chaos, bench, soak, profile,
# failover and the console's tests in a browser, with the browser driver
# and plotting the service does without). ./... stops at a module's edge,
# so every target names the other two.
MODULES := ./... ./client/... ./tools/...

.PHONY: all build run test test-host fuzz vet lint pg pg-test pgbouncer pg-auto-failover chromium stripe-mock screenshots chaos failover bench profile soak clean

all: build

build: $(BINARIES) $(TOOLS)

bin/%: FORCE
	$(GO) build -trimpath -o $@ ./cmd/$*

FORCE:

## pg: make sure the PostgreSQL server of DATABASE_URL answers (starts the local cluster if it is that one and down)
pg:
	@scripts/ensure-postgres "$(DATABASE_URL)"

# pg-test: the same for the server the tests use (TEST_DATABASE_URL, else
# DATABASE_URL), first, so that a missing server is one line, not a failure
# per test.
pg-test:
	@scripts/ensure-postgres "$${TEST_DATABASE_URL:-$$DATABASE_URL}"

# pgbouncer: the tests, chaos and bench steps that put a transaction pooler
# in front of PostgreSQL start throw-away pgbouncers of their own
# (internal/testutil/pgbouncer); this installs Debian's package when it is
# missing, on CI's clean machine too.
pgbouncer:
	@scripts/install-pgbouncer

## run: check its ports are free, migrate, create a dev API key, run bin/mockpsp (its books kept in .run/), api, reaper and the console
run: build pg
	@scripts/run-dev

# test-host: on a host without apt-get (not Debian), stop at once with one
# line naming what make test would need and make compose-up, rather than
# halfway through.
test-host:
	@scripts/check-test-host

# pg-auto-failover: pg_autoctl and the monitor's extension, for the formation
# test (tools/formation) and make failover.
pg-auto-failover:
	@scripts/install-pg-auto-failover

# chromium: headless Chromium (Debian's package) for the console's browser
# tests, installed with apt-get when missing.
chromium:
	@scripts/install-chromium

# stripe-mock: Stripe's official mock of its API (pinned), built with go
# install, for the Stripe connector's tests and the end-to-end test of a
# stack on a Stripe PSP (internal/testutil/stripemock starts throw-away
# ones).
stripe-mock:
	@scripts/install-stripe-mock

## test: every test against a real PostgreSQL, with -race, plus vet, lint and a short fuzz of the parsers and of every route's parameters
test: test-host pg-test pgbouncer pg-auto-failover chromium stripe-mock vet lint
	$(GO) test -race -count=1 -timeout 9m $(MODULES)
	$(MAKE) --no-print-directory fuzz

# FUZZTIME is a number of executions, not a duration: with a duration, Go
# 1.26's fuzz coordinator can report "context deadline exceeded" as a
# failure when its deadline passes while a worker is still busy (Go issue
# 75804, fixed in Go 1.27), which a loaded machine hits often (.ci/run did).
# A count has no deadline to race; a real finding still fails and writes its
# input to testdata/fuzz. Minimising a new input is bounded the same way
# (the default, 60 s of it, stalled a 5 s run).
FUZZTIME ?= 20000x
FUZZ := $(GO) test -run '^$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 1000x
fuzz:
	$(FUZZ) -fuzz '^FuzzParseKey$$' ./internal/idempotency
	$(FUZZ) -fuzz '^FuzzFingerprint$$' ./internal/idempotency
	$(FUZZ) -fuzz '^FuzzDecode$$' ./internal/jsonbody
	$(FUZZ) -fuzz '^FuzzEqualFingerprintsParseToEqualParams$$' ./internal/charges
	$(FUZZ) -fuzz '^FuzzRouteParams$$' ./internal/httpapi

## screenshots: every page of the operator console, rendered in headless Chromium on a showcase database, into docs/console/ (for the README)
screenshots: pg-test chromium
	$(GO) test -count=1 -run '^TestEveryPageRendersInABrowser$$' ./tools/consolebrowser -args -screenshots=$(CURDIR)/docs/console

## chaos: the long chaos run: 2,000 intents living whole payment lives (capture, refunds, void) and a webhook sink with its own faults, workers killed and frozen under PSP faults (final failures, lost answers after a 2s key TTL, failed lookups, outages), PostgreSQL restarted 3 times (a throw-away cluster of its own, never the server on 5432); then 1,000 intents routed between three mock PSPs, each in turn down, refusing or dropping answers; then 600 intents against Stripe's dialect (a stand-in keeping Stripe's saved answers, a 10s key window and a lagging search, through the Stripe connector), with outages longer than the window; each writes its JSON summary and, beside it, an HTML report of the faults and what the requests did on one time axis; every client request is recorded and checked key by key with Porcupine (written beside the summary as -history.jsonl.gz; a rejected key is a violation, drawn in -history.html)
CHAOS_SEED ?= 1
CHAOS_DB_RESTARTS ?= 3
chaos: pg
	$(GO) run ./tools/cmd/chaos -seed $(CHAOS_SEED) -intents 2000 -db-restarts $(CHAOS_DB_RESTARTS) -json tools/results/chaos.json
	$(GO) run ./tools/cmd/chaos -seed $(CHAOS_SEED) -intents 1000 -psps 3 -db-restarts 1 -json tools/results/chaos-routing.json
	$(GO) run ./tools/cmd/chaos -seed $(CHAOS_SEED) -intents 600 -psp-dialect stripe -db-restarts 1 -give-up-after 30s -psp-outages 3 -psp-outage 11s -psp-long-outage 0 -json tools/results/chaos-stripe.json

## failover: the chaos workload, routed between three mock PSPs, on a throw-away pg_auto_failover formation (a monitor and two data nodes on free ports, never the server on 5432) whose primary fails 4 times under load (kill -9 and switchover in turn; the route's first PSP down from each kill until 5 s after its promotion, so every breaker for it opens), once with synchronous replication (nothing may be lost; Porcupine must accept the client history) and once without (reports what it loses, its lost answers as rejected keys; fails on a double charge); both report whether at most one PSP holds an authorization per charge; writes tools/results/failover-sync.json and failover-async.json, an HTML report and the client history beside each
FAILOVER_INTENTS ?= 1000
failover: pg-auto-failover
	$(GO) run ./tools/cmd/failover -seed $(CHAOS_SEED) -intents $(FAILOVER_INTENTS) -json tools/results/failover-sync.json
	$(GO) run ./tools/cmd/failover -seed $(CHAOS_SEED) -intents $(FAILOVER_INTENTS) -async -json tools/results/failover-async.json

## bench: phasepay against pgbench baselines on this machine, and every background pass against backlogs of 10^3 to 10^6 rows (the growth step; alone: go run ./tools/cmd/bench -steps growth, which writes tools/results/growth.json and docs/benchmarks/passes.svg); prints a table, writes tools/results/ and draws the plots of docs/benchmarks.md (docs/benchmarks/*.svg)
bench: build pg pgbouncer
	$(GO) run ./tools/cmd/bench

## profile: what one new charge costs the database, per statement, table and index (pg_stat_statements, table counters, pg_waldump), its WAL and full-page images, the database's and the api's CPU and the api's CPU profile, on a throw-away cluster (never the server on 5432); PROFILE_AB=VERSION profiles the schema up to that migration against the latest instead (A B A B); PROFILE_CALLGRIND=1 counts the database's instructions per new charge and replay under valgrind instead (with PROFILE_AB, or PROFILE_BIN_B=DIR for another api binary; PROFILE_BATCH=1: new charges from 16 clients with batching off against on); writes tools/results/profile.json (profile-ab-VERSION.json, profile-callgrind.json)
PROFILE_CHARGES ?= 3000
PROFILE_CLIENTS ?= 8
PROFILE_AB ?=
PROFILE_CALLGRIND ?=
PROFILE_BIN_B ?=
PROFILE_BATCH ?=
profile:
ifeq ($(PROFILE_CALLGRIND),)
	$(GO) run ./tools/cmd/profile -charges $(PROFILE_CHARGES) -clients $(PROFILE_CLIENTS) \
		$(if $(PROFILE_AB),-ab $(PROFILE_AB) -json tools/results/profile-ab-$(PROFILE_AB).json,-json tools/results/profile.json)
else
	$(GO) run ./tools/cmd/profile -callgrind $(if $(PROFILE_BATCH),-batch-ab -counted-clients 16,-replays) $(if $(PROFILE_AB),-ab $(PROFILE_AB)) $(if $(PROFILE_BIN_B),-bin-b $(PROFILE_BIN_B)) \
		-json tools/results/profile-callgrind$(if $(PROFILE_AB),-ab-$(PROFILE_AB))$(if $(PROFILE_BATCH),-batch).json
endif

## soak: an hour of steady load (SOAK=10m for a short run) on a throw-away cluster with autovacuum on: new charges, replays, captures, refunds, webhook deliveries, a worker killed every 3 minutes; every process's memory, goroutines, files and connections, each operation's p50/p99, dead tuples and index size per table, partitions and WAL per charge sampled every minute; fails when a series climbs over the last 75%; writes tools/results/soak.json (soak-$(SOAK).json for a short run) and a plot per series
SOAK ?= 60m
soak: build
	$(GO) run ./tools/cmd/soak -duration $(SOAK) -bin bin

## compose-up: the whole stack in containers (postgres, migrate, 2 api behind nginx on :8080, 2 reapers, mockpsp, otel-collector, prometheus :9090, grafana :3000); see deploy/README.md
.PHONY: compose-up
compose-up:
	docker compose -f deploy/docker-compose.yml up --build

# vet: go vet of every module, and of the chaos build (its hooks compile
# only with the tag); then each module on its own, without the workspace:
# its go.mod tidy, so that the service's requires nothing only the tools
# use, and the service builds without the tools' module (as its image does).
vet:
	$(GO) vet $(MODULES)
	$(GO) vet -tags chaos ./cmd/api ./cmd/reaper ./internal/testutil/faults
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	GOWORK=off $(GO) mod tidy -diff
	cd tools && GOWORK=off $(GO) mod tidy -diff
	GOWORK=off $(GO) build ./...

## lint: staticcheck and testifylint (pinned by the tool directives in go.mod) over every module; the client module on its own, at the Go its go.mod declares
# testifylint runs its default checkers, go-require among them (no require
# or t.FailNow off the test's goroutine: it would not stop the test), less
# encoded-compare: the tests that compare JSON as strings mean byte for byte
# (a stored answer, a canonical body), which JSONEq would not check.
# go-require sees `go` statements and HTTP handlers, not wg.Go(func…);
# TestNoFailNowOffTheTestGoroutine (checks/) covers those.
lint:
	$(GO) tool staticcheck $(MODULES)
	$(GO) tool testifylint -disable encoded-compare $(MODULES)
	cd client && GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly $(GO) vet ./... && GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly $(GO) build ./...

clean:
	rm -rf bin
