# xdp_drop — Telegraf execd input plugin that drops and counts traffic with XDP.

CLANG      ?= clang-19
ARCH_INC   ?= /usr/include/$(shell uname -m)-linux-gnu
BPF_CFLAGS ?= -O2 -g -Wall -Werror -I$(ARCH_INC)
GO         ?= go
BIN        ?= bin/telegraf-xdp-drop
PREFIX     ?= /usr/local
GOTESTFLAGS ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: generate
generate: ## Compile bpf/xdp_drop.c with $(CLANG) and regenerate the bpf2go Go bindings
	cd bpf && BPF_CLANG=$(CLANG) BPF_CFLAGS="$(BPF_CFLAGS)" $(GO) generate ./...

.PHONY: build
build: ## Build the plugin binary into bin/
	$(GO) build -trimpath -o $(BIN) ./cmd/telegraf-xdp-drop

.PHONY: test
test: ## Run all tests (privileged ones need root; XDP_DROP_REQUIRE_PRIVILEGED=1 fails instead of skipping)
	$(GO) test -count=1 $(GOTESTFLAGS) ./...

FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: ## Fuzz the classifier against the reference, single- and multi-buffer, FUZZTIME each (default 30s; root)
	$(GO) test -run '^$$' -fuzz '^FuzzClassify$$' -fuzztime $(FUZZTIME) ./bpf/
	$(GO) test -run '^$$' -fuzz '^FuzzClassifyMultiBuffer$$' -fuzztime $(FUZZTIME) ./bpf/

.PHONY: demo
demo: ## Run the demo: own namespace, veth and traffic; prints the plugin's line protocol (root)
	$(GO) run ./internal/demo

.PHONY: e2e
e2e: ## End to end with real Telegraf, InfluxDB, Prometheus and Alertmanager in a namespace (root)
	bash test/e2e/run.sh

.PHONY: bench
bench: ## Benchmark against a bare XDP_DROP program, a key-by-key map read and one interface; prints a markdown table (root, about a minute)
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./bench && $(GO) run ./bench

.PHONY: lint
lint: ## Run go vet and check formatting
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: install
install: build ## Install the binary to $(PREFIX)/bin with CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON (root)
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/telegraf-xdp-drop
	setcap cap_bpf,cap_net_admin,cap_perfmon+ep $(DESTDIR)$(PREFIX)/bin/telegraf-xdp-drop
