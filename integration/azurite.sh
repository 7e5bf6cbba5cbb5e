#!/usr/bin/env bash
# azurite.sh: the Azure Storage emulator for the integration tests.
#
#   ./azurite.sh install   install Azurite (pinned) into integration/.azurite
#   ./azurite.sh version   print the installed version, exit 1 when absent
#   ./azurite.sh path      print the blob service entry point the tests run
#
# The tests start the emulator themselves (see azurite_test.go); this script
# only installs it. Idempotent: an install of the pinned version is kept.
#
# The pin: 3.35.0 is the newest release whose package declares a Node range
# that includes Node 20 (engines.node ">=10.0.0"); 3.36.0 asks for Node >= 21
# and 3.37.0 for Node >= 22.
set -euo pipefail

AZURITE_VERSION="${AZURITE_VERSION:-3.35.0}"
here="$(cd "$(dirname "$0")" && pwd)"
prefix="$here/.azurite"
entry="$prefix/node_modules/azurite/dist/src/blob/main.js"

installed_version() {
  local pkg="$prefix/node_modules/azurite/package.json"
  [ -f "$pkg" ] || return 1
  node -p "require(process.argv[1]).version" "$pkg"
}

case "${1:-}" in
install)
  command -v node >/dev/null || { echo "azurite.sh: node is not installed" >&2; exit 1; }
  command -v npm >/dev/null || { echo "azurite.sh: npm is not installed" >&2; exit 1; }
  if [ "$(installed_version 2>/dev/null || true)" = "$AZURITE_VERSION" ] && [ -f "$entry" ]; then
    echo "azurite.sh: azurite@$AZURITE_VERSION already installed in $prefix"
    exit 0
  fi
  echo "azurite.sh: installing azurite@$AZURITE_VERSION into $prefix (node $(node --version), npm $(npm --version))"
  mkdir -p "$prefix"
  # --prefix keeps the emulator out of the repository's own package tree;
  # --save-exact pins it in .azurite/package.json.
  npm install --prefix "$prefix" --no-audit --no-fund --save-exact "azurite@$AZURITE_VERSION"
  got="$(installed_version)"
  if [ "$got" != "$AZURITE_VERSION" ]; then
    echo "azurite.sh: installed $got, want $AZURITE_VERSION" >&2
    exit 1
  fi
  [ -f "$entry" ] || { echo "azurite.sh: $entry missing after install" >&2; exit 1; }
  echo "azurite.sh: installed azurite@$got"
  ;;
version)
  installed_version
  ;;
path)
  echo "$entry"
  ;;
*)
  echo "usage: $0 install|version|path" >&2
  exit 2
  ;;
esac
