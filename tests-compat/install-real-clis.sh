#!/usr/bin/env bash
# install-real-clis.sh DIR
# Installs the real agent CLIs the driver table is verified against (Claude Code, Codex, OpenCode)
# from the npm registry into DIR (never into the repo) and prints DIR/node_modules/.bin.
# Idempotent: a package whose installed version already matches its pin is not fetched again.
# Each package ships its native binary inside an npm package (a platform optional dependency), so
# nothing is downloaded from outside the npm registry. All npm chatter goes to stderr.
set -euo pipefail
dir=${1:?usage: install-real-clis.sh DIR}
# Pins: keep in step with the driver table (crates/runner/src/drivers.rs, VERIFIED).
pins=(
  "@anthropic-ai/claude-code@2.1.332"
  "@openai/codex@0.171.0"
  "opencode-ai@1.18.33"
)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
[ -f "$dir/package.json" ] || echo '{"name":"trantor-real-clis","private":true}' > "$dir/package.json"
want=()
for p in "${pins[@]}"; do
  name=${p%@*}
  ver=${p##*@}
  have=$(node -e 'try{process.stdout.write(require(process.argv[1]).version||"")}catch(e){}' \
    "$dir/node_modules/$name/package.json" 2>/dev/null || true)
  [ "$have" = "$ver" ] || want+=("$p")
done
if [ ${#want[@]} -gt 0 ]; then
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error "${want[@]}" >&2)
fi
for b in claude codex opencode; do
  "$dir/node_modules/.bin/$b" --version >/dev/null 2>&1 || { echo "$b does not run from $dir" >&2; exit 1; }
done
echo "$dir/node_modules/.bin"
