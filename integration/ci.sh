#!/usr/bin/env bash
# ci.sh: what CI runs for the Azure SDK integration.
#
#   1. installs the Azurite emulator (pinned, idempotent) into integration/.azurite
#   2. runs the integration tests with the emulator required
#      (RR_REQUIRE_AZURITE=1: a missing emulator fails instead of skipping),
#      and redis-server too when it is on PATH (RR_REQUIRE_REDIS=1: the
#      fleet's rr-redis runs start one of their own; .ci/run installs it)
#   3. runs the azure/ adapter's unit tests
#
# Needs Go (1.26), node (20) and npm; Go dependencies come from the module
# proxy, Azurite from the npm registry. Run from anywhere.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"

step() { printf '\n== %s\n' "$*"; }
run() {
  local env=""
  [ -n "${RR_REQUIRE_AZURITE:-}" ] && env="RR_REQUIRE_AZURITE=$RR_REQUIRE_AZURITE "
  [ -n "${RR_REQUIRE_REDIS:-}" ] && env="${env}RR_REQUIRE_REDIS=$RR_REQUIRE_REDIS "
  printf '+ (cd %s && %s%s)\n' "${PWD#"$root"/}" "$env" "$*"
  "$@"
}

step "toolchain"
go version
printf 'node %s, npm %s\n' "$(node --version)" "$(npm --version)"

step "install Azurite (integration/azurite.sh install)"
"$here/azurite.sh" install

step "integration/: Azure SDK against Azurite through the fakeserver proxy; traces over OTLP"
cd "$here"
start=$SECONDS
export RR_REQUIRE_AZURITE=1
if command -v redis-server >/dev/null; then
  export RR_REQUIRE_REDIS=1
fi
run go test -count=1 ./...
echo "integration/: $((SECONDS - start)) s"

step "azure/: the rrazure adapter"
unset RR_REQUIRE_AZURITE
cd "$root/azure"
start=$SECONDS
run go test -count=1 ./...
echo "azure/: $((SECONDS - start)) s"
