# Narwhal — the two commands a newcomer needs are `make run` and `make test`.
GO        ?= go
BIN       ?= bin/narwhal
FUZZTIME  ?= 5s

.PHONY: run build test fuzz vet lint fmt-check bench bench-cluster clean

run: build ## run the router in front of an embedded simulated fleet
	./$(BIN) demo

build:
	$(GO) build -o $(BIN) .

test: fmt-check vet ## everything CI runs: format, vet, race tests, fuzz smoke
	$(GO) test -race -count=1 -timeout 12m ./...
	$(MAKE) fuzz

fuzz: ## a few seconds of each fuzz target
	$(GO) test -run '^$$' -fuzz '^FuzzRewriteObject$$' -fuzztime $(FUZZTIME) ./transport/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzValidateDescriptor$$' -fuzztime $(FUZZTIME) ./transport/kv/

vet:
	$(GO) vet ./...

lint: ## staticcheck (fetched from the module proxy on first use)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

bench: build ## router overhead against the direct baseline (see bench/README.md)
	$(GO) run ./bench/cmd/bench $(if $(BENCH_SCENARIOS),-scenarios $(BENCH_SCENARIOS))

bench-cluster: build ## idle cost and verdict convergence of a 3-node cluster (see bench/README.md)
	$(GO) run ./bench/cmd/clusterbench -narwhal $(BIN)

clean:
	rm -rf bin
