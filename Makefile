# rdmatool build, test and lab targets. `make test` is what CI runs; it
# installs what it needs (apt packages, Go modules) on a fresh Debian machine.
SHELL   := /bin/bash
GO      ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
KERNELS ?= 6.1 6.12 7.x
KERNEL  ?= 6.12
LAB     := $(CURDIR)/.lab
BIN     := $(LAB)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
FUZZTIME ?= 5s
# Packages with tests that run in the lab guest (they call vmtest.Require).
LAB_PKGS = $(shell grep -rl --include='*_test.go' 'vmtest\.Require' --exclude-dir=.lab . | xargs -r -n1 dirname | sort -u)

.PHONY: all build deps test test-unit generate-check fuzz-smoke lab lab-bins test-lab demo lab-shell bench clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/rdmatool ./cmd/rdmatool

deps:
	@vmtest/install-deps.sh

test: deps test-unit generate-check fuzz-smoke test-lab

# The committed bpf2go output must be exactly what `go generate` makes from
# bpf/qp.c with Debian's clang-14.
generate-check:
	$(GO) generate ./bpf
	git diff --exit-code -- 'bpf/*_bpfel.*'

test-unit:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

# Every Fuzz target runs briefly; `make fuzz-smoke FUZZTIME=5m` for a longer run.
fuzz-smoke:
	@set -e; for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 200x $$pkg; \
		done; \
	done

# The lab images, one per kernel of the matrix (cached in .lab/kernels).
lab: deps
	@set -e; $(GO) build -o $(BIN)/vmlab ./vmtest/cmd/vmlab; \
	for k in $(KERNELS); do $(BIN)/vmlab build -kernel $$k; done

# What lab tests run inside the guest: static binaries, shared over 9p.
lab-bins:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/rdmatool ./cmd/rdmatool
	$(GO) build -o $(BIN)/vmlab ./vmtest/cmd/vmlab
	CGO_ENABLED=0 $(GO) build -o $(BIN)/labtime ./vmtest/cmd/labtime
	$(MAKE) -s -C vmtest/workloads OUT=$(BIN)

# Lab tests on every kernel, one guest at a time (-p 1; the timeout covers
# waiting for the lab lock too). VMTEST_EXPECT_GUEST
# makes vmtest.Require fail instead of skip if a test ever ran outside.
test-lab: lab lab-bins
	@failed=; for k in $(KERNELS); do \
		echo "== lab tests on kernel $$k"; \
		CGO_ENABLED=0 VMTEST_EXPECT_GUEST=1 $(GO) test -p 1 -count=1 -timeout 60m -v \
			-exec "$(BIN)/vmlab exec -kernel $$k" $(LAB_PKGS) || failed="$$failed $$k"; \
	done; \
	if [ -n "$$failed" ]; then echo "lab tests failed on kernel(s):$$failed"; exit 1; fi

demo: lab lab-bins
	$(BIN)/vmlab run -kernel $(KERNEL) -- sh vmtest/demo.sh

# One command in the guest: make lab-shell CMD='rdma res show qp' KERNEL=6.1
CMD ?= rdma dev; rdma link
lab-shell: lab lab-bins
	$(BIN)/vmlab run -kernel $(KERNEL) -- sh -c '$(CMD)'

# Benchmarks: Go benchmarks on the host, then rdmatool against iproute2 on
# BENCH_QPS QPs in one guest run per kernel.
BENCH_QPS ?= 10000
# The probe overhead is measured in instruction-counted guest time (QEMU
# -icount shift=N): plain TCG wall time varies too much on a shared host.
BENCH_ICOUNT ?= 2
bench: lab lab-bins
	$(GO) test -run '^$$' -bench . -benchmem ./...
	@for k in $(KERNELS); do \
		$(BIN)/vmlab run -kernel $$k -memory 4G -timeout 30m -- sh vmtest/bench/res-qp.sh $(BENCH_QPS) || exit 1; \
		VMTEST_ICOUNT=$(BENCH_ICOUNT) $(BIN)/vmlab run -kernel $$k -timeout 40m -- sh vmtest/bench/trace-overhead.sh || exit 1; \
	done

clean:
	rm -rf $(BIN) $(LAB)/runs
