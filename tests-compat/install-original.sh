#!/usr/bin/env bash
# install-original.sh DIR [VERSION]
# Installs the ORIGINAL JavaScript trantor (default 0.18.72) from the npm registry into DIR
# (never into the repo) and prints the package path, e.g. DIR/node_modules/trantor.
# Idempotent: if DIR/node_modules/trantor/package.json already has VERSION, nothing is fetched.
# Needs: node >= 18 (tested on 20.20) and npm. No native modules are built (deps are pure JS:
# @modelcontextprotocol/sdk, pg, zod). ~10 s and ~33 MB (113 packages) on a warm network.
# All npm chatter goes to stderr; stdout is ONLY the package path.
set -euo pipefail
dir=${1:?usage: install-original.sh DIR [VERSION]}
ver=${2:-0.18.72}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
pkg="$dir/node_modules/trantor"
have=""
if [ -f "$pkg/package.json" ]; then
  have=$(node -e 'process.stdout.write(require(process.argv[1]).version||"")' "$pkg/package.json" 2>/dev/null || true)
fi
if [ "$have" != "$ver" ] || [ ! -d "$dir/node_modules/@modelcontextprotocol/sdk" ]; then
  [ -f "$dir/package.json" ] || echo '{"name":"trantor-orig-fixture","private":true}' > "$dir/package.json"
  # --ignore-scripts: the package has no install scripts; this keeps it that way if one appears.
  (cd "$dir" && npm install --no-audit --no-fund --ignore-scripts --loglevel=error "trantor@$ver" >&2)
fi
node -e 'const v=require(process.argv[1]).version; if(v!==process.argv[2]){console.error(`installed ${v}, wanted ${process.argv[2]}`);process.exit(1)}' "$pkg/package.json" "$ver"
for f in hub.mjs mcp.mjs bin/crew-runner.mjs; do
  [ -f "$pkg/$f" ] || { echo "missing $pkg/$f" >&2; exit 1; }
done
echo "$pkg"
