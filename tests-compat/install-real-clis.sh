#!/usr/bin/env bash
# install-real-clis.sh DIR
# Installs the real agent CLIs the driver table is verified against (Claude Code, Codex, OpenCode)
# from the npm registry into DIR (never into the repo) and prints DIR/node_modules/.bin.
# Idempotent: a package whose installed version already matches its pin is not fetched again.
# Each package ships its native binary inside an npm package (a platform optional dependency), so
# nothing is downloaded from outside the npm registry. All npm chatter goes to stderr.
set -euo pipefail
# shellcheck source=npm-pins.sh
. "$(dirname "$0")/npm-pins.sh"
dir=${1:?usage: install-real-clis.sh DIR}
# Pins: keep in step with the driver table (crates/runner/src/drivers.rs, VERIFIED).
pins=(
  "@anthropic-ai/claude-code@2.1.332"
  "@openai/codex@0.171.0"
  "opencode-ai@1.18.33"
)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
npm_install_pins "$dir" trantor-real-clis "${pins[@]}"
for b in claude codex opencode; do
  "$dir/node_modules/.bin/$b" --version >/dev/null 2>&1 || { echo "$b does not run from $dir" >&2; exit 1; }
done
echo "$dir/node_modules/.bin"
