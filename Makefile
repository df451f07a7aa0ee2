# receiptflow — build, test and run targets. Run from the repository root;
# go.work ties the modules together, so package patterns below cross modules.

GO           ?= go
BIN          ?= bin
TEST_TIMEOUT ?= 30m
E2E_TIMEOUT  ?= 30m
TESTFLAGS    ?=
BENCHFLAGS   ?= -benchmem
HANDOFF      ?= handoff

# Every module of the workspace.
PKGS := ./schemas/... ./pkg/... ./services/... ./e2e/...
# The module directories; lint runs in each with GOWORK=off.
MODULES := schemas pkg services e2e
# Build tags some files need, so that staticcheck sees every file
# (staticcheck -matrix: a finding counts only if it holds in every row).
LINT_MATRIX := default:\ndemo: -tags=demo\nrace: -tags=race\nchaos: -tags=chaos\n
STATICCHECK ?= staticcheck
# promtool of Prometheus, for the alerting rules (docs/alerts.md): the one
# on PATH, else the one in the tool cache that .ci/run also uses, which
# make alerts installs there when it is missing (once, a few minutes).
TOOLBIN          ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/receiptflow/bin
PROMTOOL_VERSION ?= v0.316.0
PROMTOOL         ?= $(or $(shell command -v promtool 2>/dev/null),$(TOOLBIN)/promtool)
# The unit packages that -race runs over (no process-level fault tests):
# pkg and services, but the pure single-goroutine logic (the contract, the
# batch pass, the generator, windows and wire formats), which rest runs
# without -race to keep CI within its time: under -race the batch pass
# alone took 40 s. Three cluster tests of pkg/ingest took 105s of the 5m48s
# that -race over everything took on the 2-core CI machine; they run in rest
# too, the rest of pkg/ingest under -race.
PURE_PKGS = ./schemas/... ./pkg/config ./pkg/contract ./pkg/reconcile ./pkg/traffic ./pkg/window ./pkg/wire
RACE_PKGS = $(shell $(GO) list ./pkg/... ./services/... | grep -v -E '/pkg/(ingest|config|contract|reconcile|traffic|window|wire)$$')
INGEST_SLOW = ^(TestOrderThroughLeaderLoss|TestTwoNodesLostNamesFirstUnconfirmed|TestOrderAcrossRestarts)$$
# Everything but the process-level fault tests, which have their own target.
UNIT_PKGS = ./schemas/... ./pkg/... ./services/... $(shell $(GO) list ./e2e/... | grep -v '/e2e/faults$$')
# The e2e packages but the fault tests.
E2E_UNIT = $(shell $(GO) list ./e2e/... | grep -v '/e2e/faults$$')

# One binary per directory services/<name>.
BINARIES := ingest validator windower publisher dashboard receiptctl

.PHONY: all build test lint alerts vet race rest unit faults chaos e2e bench profile demo handoff clean

all: build

## build: compile every binary into $(BIN)/
# Go stamps no VCS revision in a workspace (go.work) build: --version
# (pkg/buildinfo) then prints the one git names here.
REVISION ?= $(shell git describe --always --dirty --abbrev=12 2>/dev/null)
build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -ldflags "-X github.com/receiptflow/receiptflow/pkg/buildinfo.revision=$(REVISION)" -o $(BIN)/ $(addprefix ./services/,$(BINARIES))

# Installs promtool into the tool cache when make alerts finds none
# (without the service-discovery plugins, as .ci/run does: half the build).
$(TOOLBIN)/promtool:
	@mkdir -p $(TOOLBIN)
	GOBIN=$(TOOLBIN) GOWORK=off $(GO) install -tags remove_all_sd,enable_dns_sd github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)

## vet: go vet over every module
vet:
	$(GO) vet $(PKGS)

## test: lint (go vet included), the alerting rules (alerts), then every
## test of every module (real servers, no cache): schemas, pkg and services
## under -race (pkg/ingest without), the e2e packages, and the
## process-level fault tests. The fault tests mostly wait (kills, stalls,
## elections), so they start first and run beside lint and alerts, which
## only compute; their output follows lint's as it comes. Then race and
## rest run side by side (neither fills both cores alone: 311 s together
## against 262 + 238 s one after the other), each one's output printed
## whole when it ends.
test:
	@log=$$(mktemp); \
	echo "make test: the fault tests start in the background at $$(date -u +%T); their output follows lint's"; \
	( $(MAKE) --no-print-directory faults >$$log 2>&1; echo $$? >$$log.rc ) & pid=$$!; \
	$(MAKE) --no-print-directory lint alerts; checks=$$?; \
	echo "make test: lint and alerts done at $$(date -u +%T)"; \
	tail -n +1 -f --pid=$$pid $$log; wait; faults=$$(cat $$log.rc); rm -f $$log $$log.rc; \
	echo "make test: the fault tests done at $$(date -u +%T)"; \
	if [ $$checks -ne 0 ]; then echo "make test: lint or alerts failed"; exit 1; fi; \
	if [ $$faults -ne 0 ]; then echo "make test: the fault tests failed"; exit 1; fi; \
	$(MAKE) --no-print-directory -j2 --output-sync=target race rest; status=$$?; \
	echo "make test: race and rest done at $$(date -u +%T)"; \
	exit $$status

## alerts: the Prometheus alerting rules (docs/alerts.md) with promtool
## (installed into $(TOOLBIN) when missing): check the rules, check
## prometheus.yml (which loads them; offline), and run their unit tests
## deploy/prometheus/alerts_test.yml
alerts: $(PROMTOOL)
	$(PROMTOOL) check rules deploy/prometheus/alerts.yml
	$(PROMTOOL) check config deploy/prometheus/prometheus.yml
	$(PROMTOOL) test rules deploy/prometheus/alerts_test.yml

## lint: in each module alone (GOWORK=off): gofmt -l lists nothing, go vet,
## staticcheck (over every build tag in LINT_MATRIX), go mod tidy -diff
## shows nothing, go build ./... succeeds
lint:
	@set -e; for m in $(MODULES); do \
		echo "lint: $$m"; \
		unformatted=$$(cd $$m && gofmt -l .); \
		if [ -n "$$unformatted" ]; then echo "gofmt -l in $$m:"; echo "$$unformatted"; exit 1; fi; \
		(cd $$m && GOWORK=off $(GO) vet ./...); \
		(cd $$m && printf '$(LINT_MATRIX)' | GOWORK=off $(STATICCHECK) -matrix ./...); \
		(cd $$m && GOWORK=off $(GO) mod tidy -diff); \
		(cd $$m && GOWORK=off $(GO) build ./...); \
	done

## race: the unit packages of pkg and services under -race (but the pure
## logic packages and three slow cluster tests of pkg/ingest, which rest runs)
race:
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(RACE_PKGS)
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) -skip '$(INGEST_SLOW)' ./pkg/ingest

## rest: the unit tests race leaves out, without -race
rest:
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) -run '$(INGEST_SLOW)' ./pkg/ingest
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(PURE_PKGS) $(E2E_UNIT)

## unit: every test but the process-level fault tests, without -race
unit:
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(UNIT_PKGS)

## faults: the process-level fault tests (services from services/ as separate
## processes, real redis-server; in-process nats-server with 100k events, and
## the broker chaos tests with a real nats-server process SIGKILLed during
## delivery and ingest, 24k events; the 3-node cluster's node kills, stalls
## and network partitions, the last with nftables as root; validators and
## windowers in group mode joining, leaving on SIGTERM, SIGKILLed and
## stalled past their lease during ingest, single-server and cluster, each
## printing a line "elastic <shape>: … max unowned wait X s …").
## RECEIPTFLOW_FAULTS_SEED=N replays a broker test's kill schedule (each
## logs its seed); RECEIPTFLOW_FAULTS_KEEP_LOGS=DIR keeps the services' and
## ingest's logs of each test under DIR (each test logs its folder).
faults:
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) -v $(TESTFLAGS) ./e2e/faults

## chaos: the chaos soaks, not part of test or CI: random SIGKILLs of every
## process (services, nats-server, redis-server, ingest), then the same in
## the 3-node cluster shape with SIGSTOP stalls and network partitions
## (nftables, as root) too; rounds until at least
## CHAOS_KILLS faults each, every round compared with the clean run; the
## lines "chaos: ..." and "chaos cluster: ..." have the figures
## (docs/recovery.md records runs). CHAOS_RUN=TestChaosCluster runs one.
## TestChaosRedisFailover fails a Sentinel-watched Redis over CHAOS_FAILOVERS
## times (replication cut first, so each failover loses acknowledged writes);
## its line is "chaos redis failover: ...". TestChaosElastic changes the
## membership of group-mode validators and windowers at random (joins,
## SIGTERM leaves, SIGKILLs, stalls); its line is "chaos elastic: ...".
## TestClusterPartitionIngestNode runs CHAOS_INGEST_EPISODES episodes (3 in
## make test) of the node receiptctl ingest publishes through cut off for
## longer than its --retry-for; its line is "ingest node cut off: ...".
CHAOS_KILLS   ?= 100
CHAOS_TIMEOUT ?= 60m
CHAOS_FAILOVERS ?= 10
CHAOS_INGEST_EPISODES ?= 12
CHAOS_RUN     ?= TestChaos|TestChaosCluster|TestChaosRedisFailover|TestChaosElastic|TestClusterPartitionIngestNode
chaos:
	RECEIPTFLOW_CHAOS_KILLS=$(CHAOS_KILLS) RECEIPTFLOW_CHAOS_FAILOVERS=$(CHAOS_FAILOVERS) RECEIPTFLOW_INGEST_NODE_EPISODES=$(CHAOS_INGEST_EPISODES) $(GO) test -tags chaos -count=1 -timeout $(CHAOS_TIMEOUT) -v -run '^($(CHAOS_RUN))$$' $(TESTFLAGS) ./e2e/faults

## e2e: the end-to-end suite only
e2e:
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) $(TESTFLAGS) ./e2e/...

## bench: build, then the performance bench (docs/performance.md): one run on this
## machine prints B0 / E2E / latency / memory / batch / dedup / skew / scaling
## and writes bench-results.json. BENCH_ARGS="--events 200000" or "--quick" to shrink it.
bench: build
	$(GO) run ./e2e/bench/cmd/receiptbench --bin $(BIN) --json bench-results.json $(BENCH_ARGS)

## profile: build, then B0 and one E2E run of the bench (PROFILE_EVENTS
## records) with CPU and allocation profiles of every process into
## $(PROFILE_DIR)/: the bench process (embedded nats-server + ingest) as
## bench.*.pprof, each service process as e2e/<service>.*.pprof, and
## beside each one the text of go tool pprof -top (docs/performance.md)
PROFILE_DIR    ?= profiles
PROFILE_EVENTS ?= 200000
profile: build
	$(GO) run ./e2e/bench/cmd/receiptbench --bin $(BIN) --only b0,e2e --events $(PROFILE_EVENTS) \
		--profile-dir $(PROFILE_DIR) --json $(PROFILE_DIR)/bench-results.json $(BENCH_ARGS)
	@for f in $(PROFILE_DIR)/*.pprof $(PROFILE_DIR)/*/*.pprof; do \
		$(GO) tool pprof -top -nodecount 40 $$f > $$f.top.txt 2>&1 || exit 1; \
		echo "$$f.top.txt"; \
	done

## demo: build, then run the whole pipeline on the embedded default
demo: build
	$(BIN)/receiptctl demo

## handoff: build, then write the hand-off bundle into $(HANDOFF)/
handoff: build
	$(BIN)/receiptctl handoff --out $(HANDOFF)

## clean: remove build output
clean:
	rm -rf $(BIN)
