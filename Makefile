## outbox-relay: run `make <target>`. Tests that need PostgreSQL connect to
## $OUTBOX_RELAY_TEST_PG, by default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
## (local server, trust auth); `make services` starts it when it is down.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO ?= go
# Services `make services` brings up (see scripts/services.sh --help).
SERVICES ?= postgres mariadb rabbitmq mosquitto nats redis

.PHONY: help services demo test test-short test-race chaos lint bench build docs

help: ## Show this help.
	@awk 'BEGIN { FS = ":.*## " } \
		/^## / { sub(/^## /, ""); print; next } \
		/^[a-zA-Z0-9_-]+:.*## / { if (!n++) print ""; printf "  %-11s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

services: ## Start the local services the tests need (PostgreSQL, MariaDB, RabbitMQ, Mosquitto, NATS, Redis) if they are down.
	@bash scripts/services.sh $(SERVICES)

demo: ## Run the relay demo against the local PostgreSQL (started if it is down).
	@bash scripts/services.sh postgres
	@echo "building outbox-relay (the first build downloads the modules and compiles: a minute or two)..."
	@$(GO) build -o bin/outbox-relay ./cmd/outbox-relay
	@echo "running bin/outbox-relay demo"
	@bin/outbox-relay demo

test: services ## Run all tests with the race detector (starts the services above).
	$(GO) test -race -count=1 -timeout 20m ./...

chaos: services ## Run the fault scenarios (TestChaos*) at full size; make test runs them in short form.
	OUTBOX_RELAY_CHAOS=full $(GO) test -race -count=1 -timeout 60m -run 'Chaos' -v ./internal/e2e/

test-short: ## Run the quick tests only (go test -short), no services needed.
	$(GO) test -short ./...

test-race: test ## Same as test.

lint: ## Check formatting (gofmt) and run go vet, plus golangci-lint if installed.
	@files="$$(gofmt -l .)"; \
	if [[ -n "$$files" ]]; then echo "gofmt needed on:"; echo "$$files"; exit 1; fi
	$(GO) vet ./...
	@if command -v golangci-lint >/dev/null; then golangci-lint run ./...; \
	else echo "golangci-lint not installed; skipped"; fi

docs: ## Regenerate docs/config.md from the configuration types (a test fails when it is stale).
	$(GO) run ./internal/config/refdoc > docs/config.md.tmp
	mv docs/config.md.tmp docs/config.md

bench: ## Run the benchmarks.
	$(GO) test -run '^$$' -bench . -benchmem ./...

# What `outbox-relay version` reports; a release sets VERSION.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
BIN ?= bin/outbox-relay
PKG_BUILDINFO := github.com/outbox-relay/outbox-relay/internal/buildinfo
LDFLAGS := -s -w -X $(PKG_BUILDINFO).version=$(VERSION) -X $(PKG_BUILDINFO).commit=$(COMMIT) -X $(PKG_BUILDINFO).date=$(BUILD_DATE)

build: ## Build a static bin/outbox-relay (no cgo) stamped with its version, commit and build date.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/outbox-relay
