#!/usr/bin/env bash
# start-original-hub.sh PKG PORT DATA_DIR [LOGFILE]
# Starts the ORIGINAL hub (PKG/hub.mjs) on 127.0.0.1:PORT with its JSON store in DATA_DIR/bus.json,
# waits until GET /health answers 200 (normally ~0.3 s; gives up after 15 s), prints its PID.
# Extra hub env passes through (RELAY_AUTH=enforce, RELAY_ONLINE_MS, RELAY_REAP_INTERVAL_MS ...).
# HOME is pointed at DATA_DIR/home unless already set to something else by the caller via HUB_HOME,
# because the hub's insights routes read ~/.agent-bus and ~/.token-scrooge.
# Stop it with: kill <pid>   (no graceful shutdown; the JSON store is flushed every 1 s, so wait
# >1 s after the last write before killing if the next run should see it).
set -euo pipefail
pkg=${1:?usage: start-original-hub.sh PKG PORT DATA_DIR [LOGFILE]}
port=${2:?port}
data=${3:?data dir}
log=${4:-$data/hub.log}
mkdir -p "$data" "${HUB_HOME:-$data/home}"
HOME="${HUB_HOME:-$data/home}" RELAY_PORT="$port" RELAY_HOST=127.0.0.1 RELAY_DATA_DIR="$data" \
  nohup node "$pkg/hub.mjs" >"$log" 2>&1 </dev/null &
pid=$!
for _ in $(seq 300); do
  if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then echo "$pid"; exit 0; fi
  kill -0 "$pid" 2>/dev/null || { echo "hub exited early:" >&2; cat "$log" >&2; exit 1; }
  sleep 0.05
done
echo "hub not healthy after 15 s" >&2; kill "$pid" 2>/dev/null || true; exit 1
