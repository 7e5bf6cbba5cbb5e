#!/usr/bin/env bash
# bench/ci.sh: what CI runs for the bench module: go vet, the module's
# tests (short: TestSoakChecks proves the soak's checks on ledgers made by
# hand), then the soak itself (TestSoak, enabled by SOAK=1) under the race
# detector: 40 s of new sequences and at most ~10 s for the last ones to
# end, about a minute in all. The benchmarks are not run here: bench/run is
# for a quiet machine.
#
# GETs that net/http's Transport replays by itself after a connection
# reset (beneath readrecovery, unseen by the Budget) are a named category
# of the soak's findings, counted and printed, not violations.
set -euo pipefail
cd "$(dirname "$0")"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

echo "== go vet (bench)"
go vet ./...

echo "== go test (bench, default: short)"
go test -count=1 ./...

echo "== soak (bench, -race)"
SOAK=1 SOAK_DURATION="${SOAK_DURATION:-40s}" go test -race -count=1 -timeout 5m -run '^TestSoak$' -v .
