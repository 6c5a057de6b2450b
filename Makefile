# lowbit: build, test, kernels, bench.
GO        ?= go
BIN       ?= bin/lowbit
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GOFLAGS_BUILD = -trimpath -ldflags "-s -w -X main.version=$(VERSION)"
export CGO_ENABLED = 0

.PHONY: build test test-short vet fuzz bench kernels devbin clean

build:
	$(GO) build $(GOFLAGS_BUILD) -o $(BIN) ./cmd/lowbit

# The test command CI runs (see README and .ci/run).
test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...

test-short:
	$(GO) test -short ./...

# A short pass of every fuzz target (set FUZZTIME to go longer). A new
# input is minimized for at most FUZZMINTIME, during which the count of
# executions stands still (Go's default is a minute).
FUZZTIME ?= 10s
FUZZMINTIME ?= 10s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep ^Fuzz); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) $$pkg || exit 1; \
	  done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Compile the CUDA kernels to PTX. Needs nvcc (the GPU machine); the PTX is committed.
NVCC ?= nvcc
kernels:
	$(MAKE) -C gpu/kernels NVCC=$(NVCC)

# Static binaries for the GPU machine, packed in .devbin/bin.tgz (git ignores
# .devbin; carry it; gpu/devrun.sh unpacks it there). They are built with
# the lowbitexp tag, which reads the kernel experiments' LOWBIT_* switches
# (gpu/experiments.go); the shipped binary reads none.
devbin:
	mkdir -p .devbin
	$(GO) build -tags lowbitexp $(GOFLAGS_BUILD) -o .devbin/lowbit ./cmd/lowbit
	$(GO) test -c -tags lowbitexp -ldflags "-s -w" -o .devbin/gpu.test ./gpu
	$(GO) test -c -ldflags "-s -w" -o .devbin/cuda.test ./gpu/cuda
	tar czf .devbin/bin.tgz -C .devbin lowbit gpu.test cuda.test && rm -f .devbin/lowbit .devbin/gpu.test .devbin/cuda.test

clean:
	rm -rf bin .devbin
