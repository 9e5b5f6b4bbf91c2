# Narwhal — the two commands a newcomer needs are `make run` and `make test`.
GO        ?= go
BIN       ?= bin/narwhal
# An execution count, not a duration: with a duration, Go 1.26's fuzz coordinator can report a
# spurious "context deadline exceeded" failure when the time runs out on a loaded machine
# (golang/go#75804, fixed in Go 1.27); a count has no deadline to race. About 5 s each here.
FUZZTIME  ?= 30000x

.PHONY: run build test fuzz vet lint fmt-check bench bench-cluster clean kube-apiserver

run: build ## run the router in front of an embedded simulated fleet
	./$(BIN) demo

build:
	$(GO) build -o $(BIN) .

# Every step runs even when an earlier one failed, so one run reports everything it found; the
# summary names the failed steps and the exit status is non-zero if any failed.
test: ## everything CI runs: format, vet, the tests' kube-apiserver (built once per machine), race tests, allocation budgets (without -race: it defeats sync.Pool), fuzz smoke
	@failed=""; \
	$(MAKE) --no-print-directory fmt-check || failed="$$failed fmt-check"; \
	$(MAKE) --no-print-directory vet || failed="$$failed vet"; \
	$(MAKE) --no-print-directory kube-apiserver || failed="$$failed kube-apiserver"; \
	$(GO) test -race -count=1 -timeout 12m ./... || failed="$$failed go-test"; \
	$(GO) test -count=1 -run 'Allocat' ./transport/ingress/ ./transport/wire/ ./transport/kv/ ./actors/ || failed="$$failed alloc-budgets"; \
	$(MAKE) --no-print-directory fuzz || failed="$$failed fuzz"; \
	if command -v python3 >/dev/null; then $(MAKE) --no-print-directory python-test || failed="$$failed python-test"; \
	else echo "python3 not found: skipping the Python client's tests"; fi; \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed"; exit 1; fi; \
	echo "make test: all passed (fmt-check vet kube-apiserver go-test alloc-budgets fuzz python-test)"

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
	$(GO) test -run '^$$' -fuzz '^FuzzParseDirectives$$' -fuzztime $(FUZZTIME) ./bench/sim/ || rc=1; \
	exit $$rc

.PHONY: python-test
python-test: build ## the Python client (python/) against the shared vectors and real simulator processes
	NARWHAL_BIN=$(CURDIR)/$(BIN) python3 -m unittest discover -s python/tests -t python/tests

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
