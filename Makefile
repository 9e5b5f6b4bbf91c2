# Narwhal — the two commands a newcomer needs are `make run` and `make test`.
GO        ?= go
BIN       ?= bin/narwhal
# An execution count, not a duration: with a duration, Go 1.26's fuzz coordinator can report a
# spurious "context deadline exceeded" failure when the time runs out on a loaded machine
# (golang/go#75804, fixed in Go 1.27); a count has no deadline to race. About 5 s each here.
FUZZTIME  ?= 30000x
# The build's identity, stamped into the binary by `make build` (package buildinfo; `narwhal
# version`, the narwhal_build_info metric and the start-up log line show it) and carried by the
# image's labels: the version (a tag, else the commit, "-dirty" with local changes), the full
# commit, whether the tree had local changes, and when it was built. Each may be given on the
# command line (make build VERSION=v1.2.3); outside a git checkout they say so.
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION   ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DIRTY      ?= $(shell if ! git rev-parse --git-dir >/dev/null 2>&1; then echo unknown; elif [ -n "$$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then echo true; else echo false; fi)
BUILD_TIME ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
BUILDINFO  := github.com/narwhal-router/narwhal/buildinfo
LDFLAGS    ?= -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).revision=$(REVISION) -X $(BUILDINFO).dirty=$(DIRTY) -X $(BUILDINFO).buildTime=$(BUILD_TIME)
# The container image `make image` builds, tagged $(IMAGE) and $(IMAGE_REPO):latest; the
# Kubernetes manifests name $(IMAGE_REPO):latest. Set IMAGE_REPO to a registry's repository to
# push it there (deploy/README.md).
IMAGE_REPO ?= localhost/narwhal
IMAGE      ?= $(IMAGE_REPO):$(VERSION)
# podman, else buildah (Debian packages both); the image needs nothing else.
CONTAINER_BUILD ?= $(firstword $(shell command -v podman buildah 2>/dev/null))
IMAGE_CONTEXT   ?= bin/image
CA_BUNDLE       ?= /etc/ssl/certs/ca-certificates.crt

.PHONY: run build test fuzz vet lint fmt-check bench bench-cluster clean image image-package kube-apiserver

run: build ## run the router in front of an embedded simulated fleet
	./$(BIN) demo

build: ## the binary, stamped with VERSION, REVISION, DIRTY and BUILD_TIME
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) .

# Every step runs even when an earlier one failed, so one run reports everything it found; the
# summary names the failed steps and the exit status is non-zero if any failed. It also lists
# every skipped test with its reason, and fails on a test skipped because a component it needs is
# not installed (its reason says "is not installed"): .ci/run installs them all, so such a skip
# means the run did not check what it claims to. ALLOW_MISSING=1 lists them without failing, for
# a machine that cannot have them. The OpenAI SDK the end-to-end test uses is installed here.
REPORT := bin/test-report
# The packages of the race-detector run (all of them; narrow it to iterate on a few).
TEST_PACKAGES ?= ./...
test: ## everything CI runs: format, vet, the tests' kube-apiserver (built once per machine), race tests, allocation budgets (without -race: it defeats sync.Pool), fuzz smoke, the Python client; skips counted
	@failed=""; mkdir -p $(REPORT); rm -f $(REPORT)/*.skips $(REPORT)/go-test.rc; \
	$(MAKE) --no-print-directory fmt-check || failed="$$failed fmt-check"; \
	$(MAKE) --no-print-directory vet || failed="$$failed vet"; \
	sh tests/testports.sh || failed="$$failed testports"; \
	$(MAKE) --no-print-directory kube-apiserver || failed="$$failed kube-apiserver"; \
	if command -v npm >/dev/null; then $(MAKE) --no-print-directory sdk-deps || failed="$$failed sdk-deps"; \
	else echo "npm is not installed: the OpenAI SDK test will skip, and the summary fail naming it (Debian: apt-get install npm)"; fi; \
	if $(GO) build -o $(REPORT)/testreport ./tests/testreport; then \
		{ $(GO) test -race -count=1 -timeout 12m -tags clusterfaults -json $(TEST_PACKAGES); echo $$? > $(REPORT)/go-test.rc; } | \
			$(REPORT)/testreport go -skips $(REPORT)/go.skips || failed="$$failed go-test"; \
		[ "$$(cat $(REPORT)/go-test.rc)" = 0 ] || case "$$failed" in *go-test*) ;; *) failed="$$failed go-test";; esac; \
	else $(GO) test -race -count=1 -timeout 12m -tags clusterfaults $(TEST_PACKAGES) || failed="$$failed go-test"; failed="$$failed testreport"; fi; \
	$(GO) test -count=1 -run 'Allocat' ./transport/ingress/ ./transport/wire/ ./transport/kv/ ./actors/ || failed="$$failed alloc-budgets"; \
	$(MAKE) --no-print-directory fuzz || failed="$$failed fuzz"; \
	if command -v python3 >/dev/null; then $(MAKE) --no-print-directory python-test PYTHON_SKIPS=$(REPORT)/python.skips || failed="$$failed python-test"; \
	else echo "python3 is not installed: the Python client's tests did not run"; [ -n "$(ALLOW_MISSING)" ] || failed="$$failed python-test"; fi; \
	[ ! -x $(REPORT)/testreport ] || $(REPORT)/testreport summary $(if $(ALLOW_MISSING),-allow-missing) $(REPORT)/go.skips $(REPORT)/python.skips || \
		failed="$$failed missing-components"; \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed"; exit 1; fi; \
	echo "make test: all passed (fmt-check vet testports kube-apiserver sdk-deps go-test alloc-budgets fuzz python-test; skips listed above)"

# The official OpenAI JavaScript SDK tests/sdk_test.go drives Narwhal with, installed by npm from
# its lock file (again whenever the lock file changes).
SDK_STAMP := tests/sdk/node_modules/.package-lock.json
.PHONY: sdk-deps
sdk-deps: $(SDK_STAMP) ## the OpenAI JavaScript SDK for the end-to-end SDK test (npm ci in tests/sdk)
$(SDK_STAMP): tests/sdk/package.json tests/sdk/package-lock.json
	cd tests/sdk && npm ci --no-audit --no-fund
	@touch $@

# The image is FROM scratch around the static binary (deploy/Containerfile.prebuilt): no
# registry to pull from, no command run inside a container. CGO_ENABLED=0 reaches the build
# prerequisite too (a target's variables apply to what it depends on).
image: export CGO_ENABLED = 0
image: build ## the container image $(IMAGE) (podman or buildah, no registry needed; see deploy/README.md)
	@$(MAKE) --no-print-directory image-package

image-package: ## package an already built static $(BIN) as $(IMAGE) (what make image does after make build)
	@test -n "$(CONTAINER_BUILD)" || { echo "make image: needs podman or buildah (Debian: apt-get install podman)" >&2; exit 1; }
	@$(GO) version -m $(BIN) | grep -q 'CGO_ENABLED=0' || \
		{ echo "make image: $(BIN) is not a static build (CGO_ENABLED=0), and the image has no libc: run make image" >&2; exit 1; }
	@test -r $(CA_BUNDLE) || { echo "make image: no CA bundle at $(CA_BUNDLE) (Debian: apt-get install ca-certificates, or set CA_BUNDLE)" >&2; exit 1; }
	mkdir -p $(IMAGE_CONTEXT)
	cp $(BIN) $(IMAGE_CONTEXT)/narwhal
	cp $(CA_BUNDLE) $(IMAGE_CONTEXT)/ca-certificates.crt
	cp deploy/image/passwd deploy/image/group $(IMAGE_CONTEXT)/
	$(CONTAINER_BUILD) build --file deploy/Containerfile.prebuilt \
		--build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
		--tag $(IMAGE) --tag $(IMAGE_REPO):latest $(IMAGE_CONTEXT)
	@echo "make image: built $(IMAGE) (and $(IMAGE_REPO):latest) with $(notdir $(CONTAINER_BUILD))"

# The KV event decoder reads what any publisher sends: its fuzz target runs with the virtual memory
# capped, so a claimed size that slips past the bounds fails the run rather than passing on a big
# machine (4 GiB: what the Go runtime and the fuzz coordinator reserve, and far below a claim).
FUZZ_VMEM_KB ?= 4194304
fuzz: ## a few seconds of each fuzz target (each runs even if another failed)
	@rc=0; \
	$(GO) test -run '^$$' -fuzz '^FuzzRewriteObject$$' -fuzztime $(FUZZTIME) ./transport/wire/ || rc=1; \
	$(GO) test -run '^$$' -fuzz '^FuzzValidateDescriptor$$' -fuzztime $(FUZZTIME) ./transport/kv/ || rc=1; \
	$(GO) test -run '^$$' -fuzz '^FuzzEventReader$$' -fuzztime $(FUZZTIME) ./transport/wire/ || rc=1; \
	$(GO) test -run '^$$' -fuzz '^FuzzParseClientBody$$' -fuzztime $(FUZZTIME) ./transport/wire/ || rc=1; \
	$(GO) test -run '^$$' -fuzz '^FuzzAssembler$$' -fuzztime $(FUZZTIME) ./transport/wire/ || rc=1; \
	$(GO) test -run '^$$' -fuzz '^FuzzClassifyMatchesDecoder$$' -fuzztime $(FUZZTIME) ./transport/wire/ || rc=1; \
	$(GO) test -run '^$$' -fuzz '^FuzzScanObjectMatchesValid$$' -fuzztime $(FUZZTIME) ./transport/wire/ || rc=1; \
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./config/ || rc=1; \
	( ulimit -v $(FUZZ_VMEM_KB) && $(GO) test -run '^$$' -fuzz '^FuzzDecodeBatch$$' -fuzztime $(FUZZTIME) ./transport/kvevents/ ) || rc=1; \
	$(GO) test -run '^$$' -fuzz '^FuzzParseDirectives$$' -fuzztime $(FUZZTIME) ./bench/sim/ || rc=1; \
	exit $$rc

.PHONY: python-test
python-test: build ## the Python client (python/) against the shared vectors and real simulator processes
	NARWHAL_BIN=$(CURDIR)/$(BIN) python3 python/tests/run.py $(if $(PYTHON_SKIPS),--skips $(PYTHON_SKIPS))

vet:
	$(GO) vet ./...

lint: ## staticcheck (fetched from the module proxy on first use)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

bench: build ## router overhead against the direct arm; BENCH_BASELINE=<binary> adds an older build as an A/B arm (see bench/README.md)
	$(GO) run ./bench/cmd/bench $(if $(BENCH_SCENARIOS),-scenarios $(BENCH_SCENARIOS)) $(if $(BENCH_BASELINE),-baseline $(BENCH_BASELINE))

bench-cluster: build ## idle cost and verdict convergence of a 3-node cluster (see bench/README.md)
	$(GO) run ./bench/cmd/clusterbench -narwhal $(BIN)

# The Kubernetes API server the Kubernetes discovery tests run against (with Debian's etcd), built
# once per machine from the module proxy into a cache outside the repository (about 3 minutes on
# 2 cores), from tools/kube-apiserver, a module of its own: the router's go.mod never requires
# k8s.io/kubernetes. The tests find it at $(KUBE_APISERVER) (or $$NARWHAL_KUBE_APISERVER).
KUBE_VERSION   := v1.35.4
KUBE_APISERVER ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/narwhal/kube-apiserver-$(KUBE_VERSION)
kube-apiserver: ## build the tests' Kubernetes API server once per machine (cached outside the repo)
	@if [ -x "$(KUBE_APISERVER)" ]; then echo "$(KUBE_APISERVER) is built"; else \
	mkdir -p "$(dir $(KUBE_APISERVER))" && cd tools/kube-apiserver && \
	$(GO) build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION)" \
		-o "$(KUBE_APISERVER).tmp" k8s.io/kubernetes/cmd/kube-apiserver && \
	mv "$(KUBE_APISERVER).tmp" "$(KUBE_APISERVER)" && echo "built $(KUBE_APISERVER)"; fi

clean:
	rm -rf bin
