# The two front-door commands: `make run` and `make test`.
GO ?= go

.PHONY: run test build fuzz bench vet chaos docs

run:
	$(GO) run ./cmd/actloop dev

# Tests keep what they make for people (the status page's screenshot) under
# test-artifacts/.
test:
	@mkdir -p test-artifacts
	$(GO) test -race -count=1 -timeout 15m -artifacts -outputdir $(CURDIR)/test-artifacts ./...
	cd deploy && $(GO) test -race -count=1 -timeout 10m ./...

build:
	$(GO) build ./...

vet:
	$(GO) vet ./...
	cd deploy && $(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)

# docs/configuration.md's settings tables, from the settings structs' tags
# and doc comments, docs/calibration.md, the server model against its
# profiles, and the env-worker's seccomp profiles (deploy/seccomp, the Helm
# chart's files) (tests fail while a committed file differs).
docs:
	$(GO) run ./internal/launch/docgen
	$(GO) run ./cmd/actloop bench-calibration > docs/calibration.md
	cd deploy && $(GO) run ./seccompgen

# The weight-sync benchmark (first: swe-rl-steady takes its pause from it),
# the scheduling benchmark on every scenario (virtual engine, 3 seeds), the
# cross-check of a small scenario on both engines, and
# the pipeline's own cost with 1, 2 and 4 workers of each kind (one JSON
# object or array a line); figures in bench/ (see docs/benchmarks.md). They
# report; they do not fail on a number.
BENCH_MODES = default,trajectory,trajectory-tuned,trajectory-first-batch,async,async-capped-tuned,action-fcfs,action-lpt-history,action-lpt-learned,action-lpt-oracle,action-sjf-history,action-sjf-learned,action-lpt-history-sync,action-fcfs-no-kv-admission,action-fcfs-no-kv-dispatch,action-fcfs-preemption,action-fcfs-no-hold,action-lpt-history-by-tokens,reference

# The second machine (CodeLlama-34B at tensor parallel 2 on H100s): the
# RL-scale scenarios, actloop as shipped against the tuned baselines.
BENCH_MODES_H100 = default,trajectory-tuned,async-capped-tuned,async

bench:
	@mkdir -p bench
	$(GO) build -o bench/actloop ./cmd/actloop
	bench/actloop bench-sync --json > bench/sync.json
	bench/actloop bench --scenarios all --seeds 3 --modes $(BENCH_MODES) --json --charts bench > bench/results.json
	bench/actloop bench --machine h100-codellama34b-tp2 --scenarios swe-rl-64k,swe-rl-128k --seeds 3 --modes $(BENCH_MODES_H100) --json > bench/results-h100.json
	bench/actloop bench-crosscheck --scenarios tool-fast --modes trajectory,async,action-fcfs --time-scale 0.2 --json > bench/crosscheck.json
	for n in 1 2 4; do bench/actloop bench-pipeline --gen-workers $$n --env-workers $$n --json || exit 1; done > bench/pipeline.json
	@rm -f bench/actloop
	@cat bench/results.json bench/results-h100.json bench/crosscheck.json bench/sync.json bench/pipeline.json

# The long chaos run (test/chaos): 500 trajectories under 60 faults; the
# report lands in test-artifacts/ and on the terminal. CHAOS_SEED picks the
# schedule, CHAOS_APPENDFSYNC Redis's fsync policy (everysec or always).
CHAOS_SEED ?= 1
CHAOS_APPENDFSYNC ?= everysec
chaos:
	@mkdir -p test-artifacts
	ACTLOOP_CHAOS=full ACTLOOP_CHAOS_SEED=$(CHAOS_SEED) ACTLOOP_CHAOS_APPENDFSYNC=$(CHAOS_APPENDFSYNC) \
	  $(GO) test -count=1 -timeout 60m -v -run '^TestChaos$$' -artifacts -outputdir $(CURDIR)/test-artifacts ./test/chaos/

# Run each fuzz target for FUZZTIME (default 30s), then keep what it found
# interesting as seed corpus under the package's testdata/fuzz/ (the
# FUZZKEEP smallest inputs of each target), which `make test` runs every
# time.
FUZZTIME ?= 30s
FUZZKEEP ?= 32
fuzz:
	@cache=$$($(GO) env GOCACHE)/fuzz; \
	for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	    if [ -d "$$cache/$$pkg/$$f" ]; then \
	      mkdir -p "$$dir/testdata/fuzz/$$f" && cp -n "$$cache/$$pkg/$$f"/* "$$dir/testdata/fuzz/$$f/" && \
	      (cd "$$dir/testdata/fuzz/$$f" && ls -S | head -n -$(FUZZKEEP) | xargs -r rm --); \
	    fi; \
	  done; \
	done
