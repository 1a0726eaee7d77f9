# pqwatch — see README.md.
GO      ?= go
BIN     ?= bin/pqwatch
PKGS    ?= ./...
export CGO_ENABLED ?= 0

.PHONY: all build run test test-short soak bench fuzz vet lint clean nginx-openssl35 openssl35 migration-study

all: build

build:
	$(GO) build -trimpath -o $(BIN) ./cmd/pqwatch

# The main job on an embedded default: no setup, no external service.
run: build
	./$(BIN) demo

# Everything: unit, fuzz-seed, conformance and (as root, with nginx/caddy/
# tshark/prometheus installed) live tests. Tests that lack root or a tool
# skip and say why.
test:
	$(GO) vet $(PKGS)
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 20m $(PKGS)

# nginx on OpenSSL 3.5 for the OpenSSL 3.0 -> 3.5 swap tests (agent's
# TestOpenSSL35*): Debian 12's nginx source on Debian 13's OpenSSL 3.5
# source, from Debian's packages only, linked statically. Built once per
# machine (as root; 6 minutes on 2 idle cores, 20 on a loaded CI host) and cached outside the
# repository in /var/cache/pqwatch/nginx-openssl35 (nginx, stamp); later
# runs reuse it. Without it those tests skip and say this command.
nginx-openssl35:
	scripts/build-nginx-openssl35.sh

# The openssl command of OpenSSL 3.5 (Debian 13's openssl and libssl3t64
# packages unpacked, run through Debian 13's own loader: nothing compiled,
# nothing installed into the system), for the byte table of
# docs/migration-study.md: Debian 12's openssl (3.0) cannot offer
# X25519MLKEM768. Once per machine (as root, about a minute), cached in
# /var/cache/pqwatch/openssl35.
openssl35:
	scripts/build-openssl35.sh

# The tables of docs/migration-study.md on this machine (as root, loopback):
# server CPU per full handshake (OpenSSL 3.0 / 3.5 classical / 3.5 hybrid),
# the A -> B swap and the naive rollback watched by pqwatch run, the
# ClientHello/ServerHello bytes against Caddy. Output in $(STUDY_OUT).
STUDY_OUT ?= /tmp/pqwatch-study
migration-study: build nginx-openssl35 openssl35
	OUT=$(STUDY_OUT) scripts/migration-study.sh all

test-short:
	$(GO) test -short -count=1 $(PKGS)

# The hostile-edge floods of issue 14 at full size (root, loopback): 95,400
# forged TCP segments and 19,400 forged QUIC Initials (make test sends fewer).
# loadgen's heavy cases at full size (issue 18): the rate ladder (three rates
# up to 400/s, five 10 s trials per arm and rate), the max-rate search (5 s
# steps, four bisections) and 2,000 idle TLS sessions
# held against nginx and Caddy: about 10 minutes on the 2-core test machine
# (plus the agent's 30-minute memory soak at 300 handshakes a second),
# (ladder 6 min, idle sessions 30 s, search 3 min), more when a busy host
# leaves an arm and rate without a valid trial and the ladder is repeated.
soak:
	PQWATCH_SOAK=1 $(GO) test -count=1 -timeout 30m -run 'Flood' -v ./e2e ./sniffer/...
	PQWATCH_SOAK=1 $(GO) test -count=1 -timeout 60m -run 'Soak|Ladder|IdleSessions|MaxRateSearch' -v ./loadgen
	PQWATCH_SOAK=1 $(GO) test -count=1 -timeout 45m -run 'MemorySoak' -v ./e2e

# Go benchmarks (the plan's: BenchmarkPlanRecords and BenchmarkPlanPeakMemory
# report records and GiB per CPU second and peak RSS on 1 M and 10 M
# generated records, each with its ratio to the reference decoder measured
# in the same run, x-ref-*); the packets per handshake that reach pqwatch under the
# classic and the eBPF kernel filter (exact: generated captures and real
# handshakes on lo; root); offline throughput; the live CPU figures
# (internal/benchlive: nginx at 600/s and at the highest rate this machine
# sustains, pqwatch's threads plus its BPF run time, whole-host CPU).
bench: build
	$(GO) test -run '^$$' -bench . -benchmem -count=1 $(PKGS)
	$(GO) test -count=1 -run 'PacketsPerHandshake' -v ./capture
	$(GO) run ./internal/benchcmp -pqwatch ./$(BIN)
	$(GO) run ./internal/benchlive -pqwatch ./$(BIN)

# Every fuzz target of every package, FUZZTIME each (default 20s).
FUZZTIME ?= 20s
fuzz:
	@for p in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list 'Fuzz.*' $$p 2>/dev/null | grep ^Fuzz); do \
	    echo "== $$p $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$p || exit 1; \
	  done; \
	done

# staticcheck, pinned, over everything (test helpers kept in production
# files count as used).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) run $(STATICCHECK) $(PKGS)

vet:
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)

clean:
	rm -rf bin
