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

# One binary per directory services/<name>; the dashboard once it exists.
BINARIES := validator windower publisher receiptctl
ifneq ($(wildcard services/dashboard/*.go),)
BINARIES += dashboard
endif

.PHONY: all build test vet e2e bench demo handoff clean

all: build

## build: compile every binary into $(BIN)/
build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./services/,$(BINARIES))

## vet: go vet over every module
vet:
	$(GO) vet $(PKGS)

## test: go vet, then every test of every module (real servers, no cache)
test: vet
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(PKGS)

## e2e: the end-to-end suite only
e2e:
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) $(TESTFLAGS) ./e2e/...

## bench: benchmarks only (no tests)
bench:
	$(GO) test -run '^$$' -bench . $(BENCHFLAGS) ./pkg/...

## demo: build, then run the whole pipeline on the embedded default
demo: build
	$(BIN)/receiptctl demo

## handoff: build, then write the hand-off bundle into $(HANDOFF)/
handoff: build
	$(BIN)/receiptctl handoff --out $(HANDOFF)

## clean: remove build output
clean:
	rm -rf $(BIN)
