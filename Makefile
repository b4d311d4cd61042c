# xdp_drop — Telegraf execd input plugin that drops and counts traffic with XDP.

CLANG      ?= clang-19
ARCH_INC   ?= /usr/include/$(shell uname -m)-linux-gnu
BPF_CFLAGS ?= -O2 -g -Wall -Werror -I$(ARCH_INC)
GO         ?= go
BIN        ?= bin/telegraf-xdp-drop
PREFIX     ?= /usr/local
# The group whose members may run the installed binary (Telegraf's service user's group).
GROUP      ?= telegraf
# What the binary's file capabilities grant; see docs/privileges.md for why each is needed.
CAPS       ?= cap_bpf,cap_net_admin,cap_perfmon+ep
# A release tag v1.2.3 gives 1.2.3; an untagged tree 0.0.0~git<commit date>.<commit>.
VERSION    ?= $(shell v=$$(git describe --tags --match 'v[0-9]*' --exact-match 2>/dev/null) && echo $${v\#v} || \
                git log -1 --format='0.0.0~git%cd.%h' --date=format:%Y%m%d 2>/dev/null || echo 0.0.0)
COMMIT     ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
PKGDIR     ?= dist
PKGARCH    ?= $(shell $(GO) env GOARCH 2>/dev/null)
GOTESTFLAGS ?=

LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.DEFAULT_GOAL := help

# help prints every target with its ## comment, $(VARIABLES) expanded to their values here.
.PHONY: help
help: ## Show this help
	@CLANG='$(CLANG)' PREFIX='$(PREFIX)' GROUP='$(GROUP)' CAPS='$(CAPS)' BIN='$(BIN)' VERSION='$(VERSION)' \
	PKGDIR='$(PKGDIR)' PKGARCH='$(PKGARCH)' FUZZTIME='$(FUZZTIME)' DESTDIR='$(DESTDIR)' \
	awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / { \
		text = $$2; \
		while (match(text, /\$$\([A-Z_]+\)/)) { \
			name = substr(text, RSTART + 2, RLENGTH - 3); \
			text = substr(text, 1, RSTART - 1) ENVIRON[name] substr(text, RSTART + RLENGTH); \
		} \
		printf "  %-12s %s\n", $$1, text }' $(MAKEFILE_LIST)
	@echo
	@echo "Variables (make VAR=value): CLANG=$(CLANG) PREFIX=$(PREFIX) GROUP=$(GROUP) CAPS=$(CAPS)"
	@echo "  BIN=$(BIN) VERSION=$(VERSION) PKGDIR=$(PKGDIR) PKGARCH=$(PKGARCH) FUZZTIME=$(FUZZTIME)"

.PHONY: generate
generate: ## Compile bpf/xdp_drop.c and the benchmark's bench/limitbench.c with $(CLANG) and regenerate the bpf2go Go bindings
	cd bpf && BPF_CLANG=$(CLANG) BPF_CFLAGS="$(BPF_CFLAGS)" $(GO) generate ./...
	cd bench && BPF_CLANG=$(CLANG) BPF_CFLAGS="$(BPF_CFLAGS)" $(GO) generate .

.PHONY: build
build: ## Build the plugin binary into $(BIN) (version $(VERSION))
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/telegraf-xdp-drop

.PHONY: test
test: ## Run all tests (privileged ones need root; XDP_DROP_REQUIRE_PRIVILEGED=1 fails instead of skipping)
	$(GO) test -count=1 $(GOTESTFLAGS) ./...

FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: ## Fuzz the classifier, single- and multi-buffer, and random rule sets against the reference, $(FUZZTIME) each (FUZZTIME=...; root)
	$(GO) test -run '^$$' -fuzz '^FuzzClassify$$' -fuzztime $(FUZZTIME) ./bpf/
	$(GO) test -run '^$$' -fuzz '^FuzzClassifyMultiBuffer$$' -fuzztime $(FUZZTIME) ./bpf/
	$(GO) test -run '^$$' -fuzz '^FuzzRules$$' -fuzztime $(FUZZTIME) ./bpf/

.PHONY: demo
demo: ## Run the demo: own namespace, veth and traffic; prints the plugin's line protocol (root)
	$(GO) run ./cmd/xdp-drop-demo

.PHONY: e2e
e2e: ## End to end with real Telegraf, InfluxDB, Prometheus and Alertmanager in a namespace (root)
	bash test/e2e/run.sh

.PHONY: bench
bench: ## Benchmark against a bare XDP_DROP program, the program before rules and before sampling, a key-by-key map read and one interface, detection's time to ban, and FlowSpec rules against the same rules in nftables (needs nft); prints a markdown table (root, about eight minutes; one section: go run ./bench -only flowspec, see BENCHMARKS.md)
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./bench && $(GO) run ./bench

.PHONY: lint
lint: ## Run go vet (package tests included) and check formatting
	$(GO) vet ./...
	$(GO) vet -tags package ./test/package/
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# install does not build: under sudo, PATH usually has no go. Build as yourself first.
.PHONY: install
install: ## Install $(BIN) (from make build; no rebuild) as $(DESTDIR)$(PREFIX)/bin/telegraf-xdp-drop, root:$(GROUP) 0750, with $(CAPS) (root)
	@test -x $(BIN) || { echo "$(BIN) is missing: run 'make build' first (as yourself; sudo's PATH has no go)" >&2; exit 1; }
	@getent group $(GROUP) >/dev/null || { echo "group $(GROUP) does not exist: install Telegraf's package first (from InfluxData's repository or release packages; it creates the group), or for a Telegraf built from source create it (groupadd --system $(GROUP)), or run make install GROUP=<the group of Telegraf's service user>" >&2; exit 1; }
	install -D -o root -g $(GROUP) -m 0750 $(BIN) $(DESTDIR)$(PREFIX)/bin/telegraf-xdp-drop
	setcap $(CAPS) $(DESTDIR)$(PREFIX)/bin/telegraf-xdp-drop

# The packaged binary is PIE and stripped, linked against the build host's glibc
# (build on the oldest distribution you ship to). The packaged execd snippet points at /usr/bin.
PKGSTAGE := $(PKGDIR)/stage
.PHONY: package
package: ## Build the .deb and .rpm into $(PKGDIR)/ with nfpm (binary root:$(GROUP) 0750, $(CAPS) set on install)
	$(GO) build -trimpath -buildmode=pie -ldflags "-s -w $(LDFLAGS)" -o $(PKGSTAGE)/telegraf-xdp-drop ./cmd/telegraf-xdp-drop
	{ echo '# The package installs this as /etc/telegraf-xdp-drop/execd.conf, linked from'; \
	  echo '# /etc/telegraf/telegraf.d/xdp_drop.conf: the link goes with the binary when the'; \
	  echo '# package is removed, so Telegraf never runs a binary that is gone. What follows'; \
	  echo '# is examples/telegraf.d/xdp_drop.conf with the packaged binary'"'"'s path.'; \
	  sed -e 's|/usr/local/bin/telegraf-xdp-drop|/usr/bin/telegraf-xdp-drop|' examples/telegraf.d/xdp_drop.conf; } >$(PKGSTAGE)/execd.conf
	for f in postinstall postremove bpffs-access; do \
		sed -e 's|@GROUP@|$(GROUP)|g' -e 's|@CAPS@|$(CAPS)|g' -e 's|@VERSION@|$(VERSION)|g' packaging/$$f.sh >$(PKGSTAGE)/$$f.sh; done
	mv $(PKGSTAGE)/bpffs-access.sh $(PKGSTAGE)/bpffs-access
	rm -rf $(PKGSTAGE)/examples && cp -R examples $(PKGSTAGE)/examples && chmod -R u=rwX,go=rX $(PKGSTAGE)/examples
	rm -rf $(PKGSTAGE)/docs && mkdir -p $(PKGSTAGE)/docs && cp docs/*.md $(PKGSTAGE)/docs/ && chmod -R u=rwX,go=rX $(PKGSTAGE)/docs
	sed -e 's|@GROUP@|$(GROUP)|g' packaging/tmpfiles.conf >$(PKGSTAGE)/tmpfiles.conf
	glibc=$$(objdump -T $(PKGSTAGE)/telegraf-xdp-drop | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1) && \
	test -n "$$glibc" && \
	sed -e 's|@STAGE@|$(PKGSTAGE)|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@ARCH@|$(PKGARCH)|g' -e "s|@GLIBC@|$$glibc|g" \
		packaging/nfpm.yaml >$(PKGSTAGE)/nfpm.yaml
	rm -f $(PKGDIR)/telegraf-xdp-drop*.deb $(PKGDIR)/telegraf-xdp-drop*.rpm
	for p in deb rpm; do $(GO) tool nfpm package -f $(PKGSTAGE)/nfpm.yaml -p $$p -t $(PKGDIR)/ || exit 1; done
	@ls -l $(PKGDIR)/*.deb $(PKGDIR)/*.rpm

.PHONY: package-test
package-test: package ## Inspect the packages, install the .deb, run it as a group member, as nobody and under Telegraf, upgrade, remove and purge it (root, Debian)
	$(MAKE) --no-print-directory package PKGDIR=$(PKGDIR)/next VERSION=$(VERSION)+next
	PKGDIR=$(abspath $(PKGDIR)) PKGDIR_NEXT=$(abspath $(PKGDIR)/next) VERSION=$(VERSION) GROUP=$(GROUP) \
		$(GO) test -tags package -count=1 $(GOTESTFLAGS) ./test/package/

.PHONY: clean
clean: ## Remove bin/ and $(PKGDIR)/
	rm -rf bin $(PKGDIR)
