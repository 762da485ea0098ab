# rdmatool build, test and lab targets. `make test` is what CI runs; it
# installs what it needs (apt packages, Go modules) on a fresh Debian machine.
SHELL   := /bin/bash
GO      ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
KERNELS ?= 6.1 6.12 7.x
KERNEL  ?= 6.12
LAB     := $(CURDIR)/.lab
BIN     := $(LAB)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Once, when make starts: the bench's report names the commit it built, not
# one made while it ran.
VERSION := $(VERSION)
LDFLAGS := -X main.version=$(VERSION)
# Fuzz budget per target, in executions: a duration races the Go 1.26 fuzz
# coordinator's deadline (golang/go#75804: a bare "context deadline
# exceeded" failure with no input found, seen here under load).
FUZZTIME ?= 10000x
# Packages with tests that run in the lab guest (they call vmtest.Require).
LAB_PKGS = $(shell grep -rl --include='*_test.go' 'vmtest\.Require' --exclude-dir=.lab . | xargs -r -n1 dirname | sort -u)

.PHONY: all build deps test test-unit lint generate-check fuzz-smoke lab lab-bins test-lab demo lab-shell bench soak clean \
	deb test-deb test-monitoring image test-image deb-next test-system

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/rdmatool ./cmd/rdmatool

deps:
	@vmtest/install-deps.sh

test: deps test-unit lint generate-check fuzz-smoke test-monitoring test-deb test-image test-lab test-system

# The committed bpf2go output must be exactly what `go generate` makes from
# bpf/qp.c with Debian's clang-14.
generate-check:
	$(GO) generate ./bpf
	git diff --exit-code -- 'bpf/*_bpfel.*'

# golangci-lint v2, pinned by tools/go.mod (a module of its own, so that
# its dependencies stay out of rdmatool's); .golangci.yaml says what it
# checks and why.
LINT := $(BIN)/golangci-lint
$(LINT): tools/go.mod tools/go.sum
	$(GO) build -C tools -o $(LINT) github.com/golangci/golangci-lint/v2/cmd/golangci-lint

lint: $(LINT)
	$(LINT) run --timeout 15m ./...

test-unit:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

# Every Fuzz target runs briefly; `make fuzz-smoke FUZZTIME=5m` (or 1000000x)
# for a longer run.
fuzz-smoke:
	@set -e; for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 200x $$pkg; \
		done; \
	done

# The Debian package (packaging/deb/build.sh: dpkg-deb, version from git
# describe, reproducible) in $(DEB_DIR), checked by lintian: errors and
# warnings fail.
DEB_DIR := $(LAB)/deb
deb:
	@rm -f $(DEB_DIR)/rdmatool_*.deb
	GO=$(GO) packaging/deb/build.sh $(DEB_DIR) $(VERSION)
	lintian --pedantic --fail-on error,warning $(DEB_DIR)/rdmatool_*.deb

# Installs the package into a Debian bookworm root and checks where its
# files land, the unit with systemd-analyze verify, removal and purge
# (packaging/deb/install-test.sh). The root (debootstrap, minutes) is cached
# beside the lab images, so fresh clones on one machine make it once.
# Then builds the package again, under another umask and time zone (the Go
# build comes from the cache), and wants the same bytes.
DEBROOT ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/rdmatool-lab/debroot
test-deb: deb
	packaging/deb/install-test.sh $(DEBROOT) $(DEB_DIR)/rdmatool_*.deb
	@rm -rf $(LAB)/deb-again
	umask 002; TZ=Pacific/Kiritimati GO=$(GO) packaging/deb/build.sh $(LAB)/deb-again $(VERSION) >/dev/null
	cmp $(DEB_DIR)/rdmatool_*.deb $(LAB)/deb-again/rdmatool_*.deb
	@echo "test-deb: two builds of $(VERSION) are identical"

# The OCI image, rdmatool:$(VERSION), built by packaging/cmd/image without a
# container daemon or a registry: the static binary as the .deb has it, its
# copyright file and licenses, labels, every time the commit's. In
# $(IMAGE_DIR): rdmatool_$(VERSION).tar (podman load -i), oci/ (an OCI
# layout) and kustomization.yaml (kubectl apply -k: packaging/kubernetes
# with this image).
IMAGE_DIR := $(LAB)/image
image:
	@set -e; out=$${IMAGE_OUT:-$(IMAGE_DIR)}; rm -rf $$out; mkdir -p $$out/build; \
	export SOURCE_DATE_EPOCH=$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct)}; \
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags '-s -w $(LDFLAGS)' -o $$out/build/rdmatool ./cmd/rdmatool; \
	cr="$(GO) run ./packaging/cmd/copyright -modcache $$($(GO) env GOMODCACHE) -goroot $$($(GO) env GOROOT)"; \
	$$cr $$out/build/rdmatool >$$out/build/copyright; \
	$(GO) run ./packaging/cmd/image -binary $$out/build/rdmatool -copyright $$out/build/copyright -license LICENSE \
		-version $(VERSION) -revision $$(git rev-parse HEAD) -licenses "$$($$cr -spdx $$out/build/rdmatool)" \
		-arch $$($(GO) env GOARCH) -kubernetes packaging/kubernetes -out $$out; \
	rm -r $$out/build; ls $$out

# Two image builds of one commit (the second from the Go build cache, under
# another umask) give the same bytes.
test-image: image
	@rm -rf $(LAB)/image-again
	umask 002; $(MAKE) -s image IMAGE_OUT=$(LAB)/image-again VERSION=$(VERSION) >/dev/null
	diff -r $(IMAGE_DIR) $(LAB)/image-again
	@echo "test-image: two builds of rdmatool:$(VERSION) are identical"

# The alert rules: promtool's syntax check and its unit tests; the
# packaging package's tests with promtool required (dashboard queries).
test-monitoring:
	RDMATOOL_REQUIRE_PROMTOOL=1 $(GO) test -count=1 ./packaging
	promtool check rules packaging/prometheus/rdmatool-alerts.yaml
	promtool test rules packaging/prometheus/rdmatool-alerts.test.yaml packaging/prometheus/rdmatool-alerts.lab.test.yaml

# The lab images, one per kernel of the matrix, and the system guest's
# Debian root (cached in ~/.cache/rdmatool-lab).
lab: deps
	@set -e; $(GO) build -o $(BIN)/vmlab ./vmtest/cmd/vmlab; \
	for k in $(KERNELS); do $(BIN)/vmlab build -system -kernel $$k; done

# What lab tests run inside the guest: static binaries, shared over 9p.
lab-bins:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/rdmatool ./cmd/rdmatool
	CGO_ENABLED=0 $(GO) build -o $(BIN)/rdmatool-udev-rename ./cmd/rdmatool-udev-rename
	$(GO) build -o $(BIN)/vmlab ./vmtest/cmd/vmlab
	CGO_ENABLED=0 $(GO) build -o $(BIN)/labtime ./vmtest/cmd/labtime
	$(MAKE) -s -C vmtest/workloads OUT=$(BIN)

# Lab tests on every kernel: the lab packages' test binaries are built
# once, then guests run them (vmtest/labtests.sh; a boot takes seconds):
# for each kernel one guest for each package of LAB_OWN and one for the
# rest, listed longest first in .lab/tests/jobs. vmlab jobs runs them side
# by side, as many at once as the lab's budget of host CPUs holds (vmlab
# -host-cpus, default all): most of a lab run is waiting, not computing.
# Each guest runs on one host thread (lab/1: vmlab -one-thread), but for
# the tests of LAB_HEAVY, which drive thousands of probe events a second
# (on one thread the probes drop them: 38,274 lost on 6.12 in the
# busy-neighbour test), or race the agent's interval with a workload's
# pace (TestLabMRLeak): a guest a kernel, first, runs them (VMTEST_ONLY)
# with a host thread a vCPU, and the others skip them (VMTEST_SKIP).
# VMTEST_EXPECT_GUEST makes vmtest.Require fail instead of skip if a test
# ever ran outside. LAB_RUN=regexp runs only the tests it matches. Each
# guest's output is kept in .lab/tests/KERNEL-GROUP.log, and its packages'
# ok/FAIL lines are printed as they end; when one failed,
# vmtest/labfailures.sh ends the run with its failed tests and their last
# logged lines. Before that, the lab's time table (vmlab times: each
# guest's wall, boot and CPU time, each package's per kernel, the slowest
# tests) is printed and kept in .lab/tests/table.txt.
LAB_TESTS := $(LAB)/tests
LAB_OWN ?= ./agent ./bpf
LAB_HEAVY ?= TestLabErrorStormBusyNeighbour TestLabChurn TestLabMRLeak
test-lab: lab lab-bins
	@set -e; rm -rf $(LAB_TESTS); mkdir -p $(LAB_TESTS); \
	for p in $(LAB_PKGS); do \
		name=$$(echo $${p#./} | tr / _); bin=$(LAB_TESTS)/$$name.test; \
		CGO_ENABLED=0 $(GO) test -c -o $$bin $$p; \
		group=rest; for o in $(LAB_OWN); do [ "$$p" != "$$o" ] || group=$$name; done; \
		echo "$$p $$bin" >>$(LAB_TESTS)/$$group.list; \
		echo "$$p $$bin" >>$(LAB_TESTS)/all.list; \
	done; \
	heavy="^($$(echo $(LAB_HEAVY) | tr ' ' '|'))\$$"; \
	for k in $(KERNELS); do \
		echo "$(LAB_TESTS)/$$k-heavy.log $$k lab VMTEST_EXPECT_GUEST=1 VMTEST_ONLY=$$heavy sh vmtest/labtests.sh $(LAB_TESTS)/all.list"; \
	done >$(LAB_TESTS)/jobs; \
	for group in $$(for o in $(LAB_OWN); do echo $${o#./} | tr / _; done) rest; do \
		[ -s $(LAB_TESTS)/$$group.list ] || continue; \
		for k in $(KERNELS); do \
			echo "$(LAB_TESTS)/$$k-$$group.log $$k lab/1 VMTEST_EXPECT_GUEST=1 VMTEST_SKIP=$$heavy sh vmtest/labtests.sh $(LAB_TESTS)/$$group.list" >>$(LAB_TESTS)/jobs; \
		done; \
	done
	@echo "== lab tests on kernels $(KERNELS): $$(wc -l <$(LAB_TESTS)/jobs) guests (logs: $(LAB_TESTS)/KERNEL-GROUP.log)"; \
	status=0; VMTEST_RUN='$(LAB_RUN)' $(BIN)/vmlab jobs -times $(LAB_TESTS)/times -timeout 90m $(LAB_TESTS)/jobs || status=$$?; \
	$(BIN)/vmlab times $(LAB_TESTS) | tee $(LAB_TESTS)/table.txt; \
	if [ $$status != 0 ]; then sh vmtest/labfailures.sh $$(sh vmtest/labfailed.sh $(LAB_TESTS)); \
		echo "lab tests failed: $$(sh vmtest/labfailed.sh $(LAB_TESTS) | awk '{ printf " %s", $$1 }')"; exit 1; fi

# The .deb of the next commit, for the upgrade test (TestSystemUpgrade):
# this tree, uncommitted changes and new files included, committed on top
# of HEAD in a temporary clone and built there, so its version is the one
# the next commit gets and sorts after $(DEB_DIR)'s.
DEB_NEXT_DIR := $(LAB)/deb-next
deb-next:
	@set -e; rm -rf $(DEB_NEXT_DIR); tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	git clone -q --shared . "$$tmp/src"; \
	git ls-files -z -co --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$$tmp/src" -xf -; \
	git -C "$$tmp/src" add -A; \
	git -C "$$tmp/src" -c user.name=rdmatool-lab -c user.email=lab@rdmatool.invalid \
		commit -q --allow-empty -m "the next commit (make deb-next)"; \
	GO=$(GO) "$$tmp/src/packaging/deb/build.sh" $(DEB_NEXT_DIR)

# Lab tests in the system guest (TestSystem*, vmtest.RequireSystem): a
# Debian host with systemd, udev and rdma-core, one per kernel of
# SYSTEM_KERNELS, which installs what make deb, deb-next and image built
# (vmtest/systemtests.sh runs the tests one at a time, across the reboots
# they ask for). The kernels' guests run side by side, each on one host
# thread, their time table kept in .lab/system-tests/table.txt.
# LAB_RUN=regexp selects tests; SYSTEM_ARGS go to the test binaries
# (-update on 6.12 rewrites the lab scrape in
# packaging/prometheus/testdata; then go test ./packaging -update).
SYSTEM_KERNELS ?= 6.1 6.12
SYSTEM_PKGS = $(shell grep -rl --include='*_test.go' 'vmtest\.RequireSystem' --exclude-dir=.lab . | xargs -r -n1 dirname | sort -u)
SYSTEM_TESTS := $(LAB)/system-tests
SYSTEM_ARGS ?=
test-system: lab lab-bins deb deb-next image
	@set -e; rm -rf $(SYSTEM_TESTS); mkdir -p $(SYSTEM_TESTS); : >$(SYSTEM_TESTS)/list; \
	for p in $(SYSTEM_PKGS); do \
		bin=$(SYSTEM_TESTS)/$$(echo $${p#./} | tr / _).test; \
		CGO_ENABLED=0 $(GO) test -c -o $$bin $$p; \
		echo "$$p $$bin" >>$(SYSTEM_TESTS)/list; \
	done
	@for k in $(SYSTEM_KERNELS); do \
		echo "$(SYSTEM_TESTS)/$$k.log $$k system/1 VMTEST_EXPECT_SYSTEM=1 sh vmtest/systemtests.sh $(SYSTEM_TESTS)/list $(SYSTEM_ARGS)"; \
	done >$(SYSTEM_TESTS)/jobs; \
	echo "== system guest tests on kernels $(SYSTEM_KERNELS), side by side (logs: $(SYSTEM_TESTS)/KERNEL.log)"; \
	status=0; VMTEST_RUN='$(LAB_RUN)' $(BIN)/vmlab jobs -times $(SYSTEM_TESTS)/times -timeout 40m $(SYSTEM_TESTS)/jobs || status=$$?; \
	$(BIN)/vmlab times $(SYSTEM_TESTS) | tee $(SYSTEM_TESTS)/table.txt; \
	if [ $$status != 0 ]; then sh vmtest/labfailures.sh $$(sh vmtest/labfailed.sh $(SYSTEM_TESTS)); \
		echo "system guest tests failed: $$(sh vmtest/labfailed.sh $(SYSTEM_TESTS) | awk '{ printf " %s", $$1 }')"; exit 1; fi

# Only the kernel the demo boots is built.
demo: deps lab-bins
	$(BIN)/vmlab build -kernel $(KERNEL)
	$(BIN)/vmlab run -kernel $(KERNEL) -- sh vmtest/demo.sh

# One command in the guest: make lab-shell CMD='rdma res show qp' KERNEL=6.1
CMD ?= rdma dev; rdma link
lab-shell: lab lab-bins
	$(BIN)/vmlab run -kernel $(KERNEL) -- sh -c '$(CMD)'

# Benchmarks: Go benchmarks on the host, then in one guest run per kernel
# the QP dump of rdmatool, iproute2 and the floor (vmtest/bench/nlfloor) and
# qp-leaks at each of BENCH_SIZES QPs, then, beside the most QPs, the MR
# dump of each at BENCH_MR_SIZES MRs and the agent at idle with them all
# (BENCH_MR_SIZES= skips the MRs), then the probe overhead
# (BENCH_TRACE=no skips it). vmtest/bench/report prints the tables of each
# kernel (the probe overhead's summary with them), writes
# $(BENCH_DIR)/bench-DATE.json and .md, and draws BENCH_PLOT.
BENCH_SIZES ?= 1000 10000 30000 60000
BENCH_MR_SIZES ?= 10000 100000
BENCH_TRACE ?= yes
BENCH_DIR   := $(LAB)/bench
BENCH_DATE  := $(shell date -u +%Y-%m-%d)
BENCH_PLOT  ?= vmtest/bench/qp-dump.png
# The probe overhead is measured in instruction-counted guest time (QEMU
# -icount shift=N): plain TCG wall time varies too much on a shared host.
BENCH_ICOUNT ?= 2
bench: lab lab-bins
	@command -v gnuplot >/dev/null || apt-get install -y -q gnuplot-nox
	CGO_ENABLED=0 $(GO) build -o $(BIN)/nlfloor ./vmtest/bench/nlfloor
	@mkdir -p $(BENCH_DIR)
	set -o pipefail; $(GO) test -run '^$$' -bench . -benchmem ./... | tee $(BENCH_DIR)/gobench.txt
	@set -o pipefail; for k in $(KERNELS); do \
		VMTEST_BENCH_MR_SIZES="$(BENCH_MR_SIZES)" \
		$(BIN)/vmlab run -kernel $$k -memory 10G -timeout 140m -- sh vmtest/bench/qp-dump.sh $(BENCH_SIZES) \
			| tee $(BENCH_DIR)/qp-dump-$$k.log || exit 1; \
	done
	@set -o pipefail; rm -f $(BENCH_DIR)/trace-overhead-*.log; if [ "$(BENCH_TRACE)" = yes ]; then for k in $(KERNELS); do \
		VMTEST_ICOUNT=$(BENCH_ICOUNT) $(BIN)/vmlab run -kernel $$k -timeout 40m -- sh vmtest/bench/trace-overhead.sh \
			| tee $(BENCH_DIR)/trace-overhead-$$k.log || exit 1; \
	done; fi
	$(GO) run ./vmtest/bench/report -date $(BENCH_DATE) -commit $(VERSION) \
		-json $(BENCH_DIR)/bench-$(BENCH_DATE).json -plot $(BENCH_PLOT) -gobench $(BENCH_DIR)/gobench.txt \
		$(foreach k,$(KERNELS),$(BENCH_DIR)/qp-dump-$(k).log) $$(ls $(BENCH_DIR)/trace-overhead-*.log 2>/dev/null) \
		| tee $(BENCH_DIR)/bench-$(BENCH_DATE).md

# The agent for SOAK_SECONDS (an hour) on a busy, hostile host
# (vmtest/bench/soak.sh says what runs), every scrape checked whole and its
# memory, goroutines, stack map and lists sampled every 10 s (one kernel:
# make soak KERNEL=6.1). It fails when a scrape was not whole.
SOAK_SECONDS ?= 3600
soak: deps lab-bins
	$(BIN)/vmlab build -kernel $(KERNEL)
	$(BIN)/vmlab run -kernel $(KERNEL) -timeout $$(( $(SOAK_SECONDS) / 60 + 30 ))m -- sh vmtest/bench/soak.sh $(SOAK_SECONDS)

clean:
	rm -rf $(BIN) $(LAB)/runs
