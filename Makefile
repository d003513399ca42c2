# MegaFlow build. `make test` is what CI runs (see .ci/run).
GO        ?= go
BIN       := bin
CMDS      := megaflow-head megaflow-worker megaflow megaflow-agent megaflow-model megaflow-sh megaflow-init
# What --version prints (internal/version): the nearest v* tag (git
# describe; v0.0.0-dev without one), the commit, the build date (UTC;
# SOURCE_DATE_EPOCH for a reproducible build). Override on the command line.
VERSION   ?= $(shell git describe --tags --match 'v*' --dirty 2>/dev/null || echo v0.0.0-dev)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null)
DATE      ?= $(shell date -u -d @$${SOURCE_DATE_EPOCH:-$$(date +%s)} +%Y-%m-%dT%H:%M:%SZ)
# Evaluated once: `make release` stamps the binaries, tarballs and debs
# with one version and one date.
VERSION   := $(VERSION)
DATE      := $(DATE)
VERSION_PKG := github.com/megaflow/megaflow/internal/version
LDFLAGS   := -s -w -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT) -X $(VERSION_PKG).date=$(DATE)
# go-nvml's header marks old NVML calls deprecated; we call none of them.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2

.PHONY: all build release run demo demo-bare demo-images image images compose-check test test-short test-python fuzz proto proto-python bench bench-build bench-harness chaos chaos-long vet fmt clean

all: build

# megaflow-worker links NVML through cgo (go-nvml) to find GPUs; the other
# binaries are static. The arm64 release builds the worker without cgo: it
# offers no GPUs (the reference deployment's Graviton nodes run heads).
# Without a working C compiler (the one `go env CC` names, CC=... picks
# another, must build a C program with libc's headers) the worker is built
# without cgo too, with a note: it runs every CPU task but finds no GPUs
# (it logs "no GPUs offered" with the reason at start). `make release`
# refuses that instead, before building anything, unless ALLOW_NO_CGO=1.
ALLOW_NO_CGO ?=
build:
	@wcgo=1; cc=$$($(GO) env CC); \
	if ! printf '#include <stdlib.h>\nint main(void) { return 0; }\n' | $$cc -x c -o /dev/null - >/dev/null 2>&1; then \
		if [ "$(RELEASE_BUILD)" = 1 ] && [ "$(ALLOW_NO_CGO)" != 1 ]; then \
			echo "make release: no working C compiler ($${cc:-none}): the release's amd64 megaflow-worker would be built without cgo, so without NVML GPU discovery." >&2; \
			echo "Install gcc and libc6-dev (apt-get install gcc libc6-dev; CC=... names another compiler), or pass ALLOW_NO_CGO=1 for a release whose workers find no GPUs." >&2; \
			exit 1; \
		fi; \
		wcgo=0; echo "note: no working C compiler ($${cc:-none}): building megaflow-worker without cgo, so without NVML GPU discovery (install gcc and libc6-dev for GPU workers)"; \
	fi; \
	mkdir -p $(BIN); \
	for c in $(CMDS); do \
		[ -d cmd/$$c ] || continue; \
		cgo=0; [ $$c = megaflow-worker ] && cgo=$$wcgo; \
		CGO_ENABLED=$$cgo GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$$c ./cmd/$$c || exit 1; \
	done

# The release in $(DIST): per architecture (amd64 from `make build`, arm64
# built here) a tarball megaflow-$(VERSION)-linux-<arch>.tar.gz (bin/ with
# every binary, systemd/ units, config/ example configs, README.md and
# LICENSE if present) and the megaflow, megaflow-head and megaflow-worker
# .debs (cmd/megaflow-release, nFPM); then SHA256SUMS. File times are
# $(DATE) (SOURCE_DATE_EPOCH), owners root. Without a C compiler it stops
# before building anything (install gcc and libc6-dev), and it refuses an
# amd64 megaflow-worker built without cgo by an earlier goal (`make build
# release`): ALLOW_NO_CGO=1 releases such a worker, which finds no GPUs
# (docs/operations.md). cmd/megaflow-release's tests run it with stand-in
# builds.
DIST := dist
release: RELEASE_BUILD := 1
release: build
	@if [ "$(ALLOW_NO_CGO)" != 1 ] && $(GO) version -m $(BIN)/megaflow-worker 2>/dev/null | grep -q 'CGO_ENABLED=0'; then \
		echo "make release: $(BIN)/megaflow-worker was built without cgo, so without NVML GPU discovery (no C compiler when it was built)." >&2; \
		echo "Install gcc and libc6-dev and run make release again, or pass ALLOW_NO_CGO=1 for a release whose workers find no GPUs." >&2; \
		exit 1; \
	fi
	@mkdir -p $(BIN)/linux-arm64
	@for c in $(CMDS); do \
		[ -d cmd/$$c ] || continue; \
		CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/linux-arm64/$$c ./cmd/$$c || exit 1; \
	done
	CGO_ENABLED=0 $(GO) build -o $(BIN)/megaflow-release ./cmd/megaflow-release
	rm -rf $(DIST)
	@set -e; epoch=$$(date -u -d '$(DATE)' +%s); \
	for a in amd64 arm64; do \
		bindir=$(BIN); [ $$a = amd64 ] || bindir=$(BIN)/linux-$$a; \
		name=megaflow-$(VERSION)-linux-$$a; stage=$(DIST)/.stage/$$name; \
		mkdir -p $$stage/bin $$stage/systemd $$stage/config; \
		for c in $(CMDS); do [ -d cmd/$$c ] && cp $$bindir/$$c $$stage/bin/; done; \
		cp deploy/systemd/*.service $$stage/systemd/; \
		cp deploy/config/*.yaml $$stage/config/; \
		for f in README.md LICENSE; do if [ -f $$f ]; then cp $$f $$stage/; fi; done; \
		tar -C $(DIST)/.stage --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$$epoch -cf - $$name \
			| gzip -9n > $(DIST)/$$name.tar.gz; \
		SOURCE_DATE_EPOCH=$$epoch $(BIN)/megaflow-release --release-version $(VERSION) --arch $$a --bin-dir $$bindir --out-dir $(DIST); \
	done; \
	rm -rf $(DIST)/.stage; \
	cd $(DIST) && sha256sum *.tar.gz *.deb > SHA256SUMS
	@echo "release $(VERSION) in $(DIST)/"

# The main job: one SWE-Gym rollout step (64 instances by default; pass
# DEMO_ARGS="--instances 8" to change it) on an embedded cluster, with the
# demo images built locally. Docker optional: without an engine the worker
# runs the same programs as plain processes.
demo: build demo-images
	$(BIN)/megaflow demo $(DEMO_ARGS)

# The demo's environment images (FROM scratch), one per SWE-Gym repository;
# skipped, with a note, when no Docker Engine answers.
demo-images: build
	@if docker version >/dev/null 2>&1; then ./scripts/build-demo-images.sh $(BIN); \
	else echo "no Docker Engine answers: the demo will use the process runtime"; fi

# `make demo` on a host with only Go and a Docker Engine: busybox and the C
# compiler hidden (a private mount namespace when run as root), a build
# into $(BIN)/bare that must make the worker without cgo, a short demo step
# that must run in containers, and an image check (megaflow-sh, no busybox).
demo-bare:
	./scripts/check-demo-bare.sh $(BIN)

# A tour: a 3-head cluster on loopback, a rollout graph, a leader kill.
run: build
	./scripts/run-local.sh

# The image the examples use with --runtime docker (FROM scratch + busybox-static).
# Skipped, with a note, when no Docker Engine answers (the process runtime
# needs no image).
image:
	@if docker version >/dev/null 2>&1; then ./scripts/build-busybox-image.sh; \
	else echo "no Docker Engine answers: no image to build (tasks will run as processes)"; fi

# The daemon images megaflow-head:$(VERSION) and megaflow-worker:$(VERSION)
# (also :dev), FROM scratch with static binaries in $(BIN)/static (the
# worker without cgo: no NVML, no GPUs; megaflow-init and megaflow-sh in
# its image for the process runtime). deploy/compose runs them.
IMAGE_CMDS := megaflow-head megaflow-worker megaflow-init megaflow-sh megaflow
images:
	@mkdir -p $(BIN)/static
	@for c in $(IMAGE_CMDS); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/static/$$c ./cmd/$$c || exit 1; \
	done
	./scripts/build-daemon-images.sh $(BIN)/static $(VERSION)

# deploy/compose/docker-compose.yml end to end (docs/operations.md): 3 heads
# and 3 workers (--scale; COMPOSE_CHECK_WORKERS) on a Docker network, two
# graphs with a task on every worker, the leader killed and a worker
# restarted between them, everything removed after. Not part of make test
# (CI time).
compose-check: images
	MEGAFLOW_CLI=$(BIN)/static/megaflow ./scripts/compose-check.sh

# The whole suite with the race detector. Integration tests start real Raft
# clusters on loopback and need no network beyond it.
# Packages with property tests of pure, single-goroutine code (the FSM's
# determinism, the scheduler against its reference, the spec's bounds): the
# race detector finds nothing in those tests and makes them 5 to 10 times
# slower, so they skip under -race (internal/race.SkipPure) and run here a
# second time, without it, where they run in full.
PURE_PKGS := ./head/fsm ./head/scheduler ./internal/spec
# The tests that run the daemons as processes take make build's binaries
# from MEGAFLOW_BIN_DIR (internal/testbin; the Python tests too), so they
# test what users run and no test package compiles them again.
test: build
	MEGAFLOW_BIN_DIR=$(CURDIR)/$(BIN) $(GO) test -race -count=1 -timeout 20m ./...
	$(GO) test -count=1 -timeout 10m $(PURE_PKGS)
	MEGAFLOW_BIN_DIR=$(CURDIR)/$(BIN) $(MAKE) test-python

# The Python SDK (client/python): its unit tests against fake heads (the
# blocking client and megaflow.aio), an end-to-end test against `megaflow up
# --runtime process`, a sandbox session on `megaflow up --runtime docker`
# (skipped without an engine or a local megaflow-test/busybox:1 or
# megaflow/busybox:test image: `make image`), and a leader head SIGKILLed
# under a 3-head cluster of megaflow-head and megaflow-worker daemons. The
# binaries are built with one `go build` into a temp dir, or taken from
# MEGAFLOW_BIN_DIR (e.g. MEGAFLOW_BIN_DIR=bin after `make build`: about 50 s
# in all on 2 cores). Debian's python3 with python3-grpcio, python3-protobuf
# and python3-pytest (.ci/run installs them).
PYTHON ?= /usr/bin/python3
test-python:
	cd client/python && $(PYTHON) -m pytest -q tests

# Each fuzz target for a count of new inputs (about 2.5 minutes in all on
# 2 cores: each -fuzz run compiles its coverage-instrumented test binary),
# from its committed seed corpus (testdata/fuzz/<target>): graph spec
# validation, the wire bounds, the graph file parser and the FSM's entry
# decoder. A failure writes the input to testdata/fuzz; commit it with the
# fix. `make test` (go test) runs the corpora as plain tests; fuzzing is
# this separate step, which CI runs after `make test` (.ci/run). Counts,
# not durations: Go 1.26's fuzzing coordinator can fail a duration-bounded
# run with "context deadline exceeded" and no input at the deadline
# (go.dev/issue/75804, fixed in Go 1.27; seen here on FuzzDecodeEntry under
# load). FUZZ_EXECS is about 4 s of each fast target on this machine (5,000
# to 13,000 execs/s); the graph file parser runs 10 to 100 a second.
FUZZ_EXECS ?= 20000
FUZZ_EXECS_YAML ?= 40
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $(FUZZ_EXECS)x ./internal/spec
	$(GO) test -run '^$$' -fuzz '^FuzzCheckRequest$$' -fuzztime $(FUZZ_EXECS)x ./internal/spec
	$(GO) test -run '^$$' -fuzz '^FuzzParseGraphYAML$$' -fuzztime $(FUZZ_EXECS_YAML)x ./client
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEntry$$' -fuzztime $(FUZZ_EXECS)x ./head/fsm

test-short:
	$(GO) test -short -count=1 ./...

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w $$(git ls-files '*.go' | grep -v '\.pb\.go$$')

# Regenerates internal/wire from proto/ with pinned plugin versions.
# Needs Debian's protoc: apt-get install protobuf-compiler libprotobuf-dev.
proto:
	GOBIN=$(CURDIR)/.tools $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(CURDIR)/.tools $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH=$(CURDIR)/.tools:$$PATH protoc -I proto \
		--go_out=. --go_opt=module=github.com/megaflow/megaflow \
		--go-grpc_out=. --go-grpc_opt=module=github.com/megaflow/megaflow \
		proto/megaflow/v1/*.proto
	$(MAKE) proto-python

# Regenerates the Python SDK's stubs (client/python/src/megaflow/_proto) with
# Debian's protoc and grpc_python_plugin: apt-get install protobuf-compiler-grpc.
proto-python:
	./scripts/gen-proto-python.sh

# The head against bare Raft (bench/README.md), then the container runtimes
# against `docker run --rm` and a bare fork/exec (about 3 minutes on 2
# cores), then megaflow-bench's short runs (scale, throughput against Dask,
# failover, replay; 10.5 minutes on this 2-core machine when quiet) into $(BENCH_OUT). BENCH_FLAGS=--full
# runs the full ones (bench/README.md gives their durations).
BENCH_OUT   ?= bench/results
BENCH_FLAGS ?=
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./bench/...
	$(GO) test -run '^$$' -bench TaskOverhead -benchtime 10x ./runtime/docker
	$(GO) test -run '^$$' -bench StartOverhead -benchtime 200x ./runtime/process
	$(GO) test -run '^$$' -bench ArtifactWrite -benchtime 1x ./internal/blob/s3blob
	$(MAKE) bench-harness

# megaflow-bench, stamped like the daemons (`make test` checks the version
# of every binary in $(BIN)).
bench-build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/megaflow-bench ./cmd/megaflow-bench

bench-harness: build bench-build
	$(BIN)/megaflow-bench scale --out $(BENCH_OUT) $(BENCH_FLAGS)
	$(BIN)/megaflow-bench throughput --out $(BENCH_OUT) $(BENCH_FLAGS)
	$(BIN)/megaflow-bench failover --out $(BENCH_OUT) $(BENCH_FLAGS)
	$(BIN)/megaflow-bench replay --out $(BENCH_OUT) $(BENCH_FLAGS)
	$(BIN)/megaflow-bench procrt --out $(BENCH_OUT) $(BENCH_FLAGS)

# Fault drills on real head and worker processes in their own network
# namespaces (docs/reliability.md); root, iproute2 and iptables needed.
# chaos: the short profile (about 3 minutes, also run by make test as
# TestChaosShortProfile); chaos-long: the 30-minute release check.
# CHAOS_FLAGS="--seed 42" replays a schedule.
CHAOS_FLAGS ?=
chaos: build
	$(GO) build -o $(BIN)/megaflow-bench ./cmd/megaflow-bench
	$(BIN)/megaflow-bench chaos --out $(BENCH_OUT) $(CHAOS_FLAGS)

chaos-long: build
	$(GO) build -o $(BIN)/megaflow-bench ./cmd/megaflow-bench
	$(BIN)/megaflow-bench chaos --profile long --out $(BENCH_OUT) $(CHAOS_FLAGS)

clean:
	rm -rf $(BIN) .tools $(DIST)
