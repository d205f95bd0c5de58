#!/usr/bin/env bash
# fake-agent.sh — a stand-in for an agent CLI (claude, codex, kimi, gemini, opencode, dsh ...)
# for runner drills. Install it on PATH under the agent's name, e.g.
#   mkdir -p "$T/bin" && ln -sf "$PWD/tests-compat/fake-agent.sh" "$T/bin/claude"
#   PATH="$T/bin:$PATH" node crew-runner.mjs claude "$DIR"      (or our: trantor runner claude ...)
#
# Every invocation appends ONE JSON line to "$FAKE_AGENT_LOG" (default: /tmp/fake-agent-calls.jsonl):
#   {"n","ts","name","argv":[...],"cwd","stdin","env":{RELAY_*,TRANTOR_*,CREW_*}, "prompt"}
# "prompt" is the value that followed -p (claude/gemini/kimi style) or the last argv item; when that
# names an existing file (the `command` driver's {P}), the file's text.
# It also keeps the last prompt in "$FAKE_AGENT_LOG.last-prompt".
#
# Behaviour knobs (all optional, read from the environment the runner passes through):
#   FAKE_AGENT_EXIT=<n>      exit status (default 0)
#   FAKE_AGENT_SLEEP=<s>     sleep this many seconds before answering (to drill time boxes)
#   FAKE_AGENT_OUTPUT=<txt>  text to print on stdout instead of the default answer
#   FAKE_AGENT_STDERR=<txt>  text to print on stderr (e.g. "rate limit exceeded", "401 Unauthorized")
#   FAKE_AGENT_SEND=<to>     before answering, POST /send {from:$RELAY_SESSION,to,text} to $RELAY_URL
#                            (simulates the agent calling relay_send through its MCP server; unsigned)
#   FAKE_AGENT_COMMIT=1      create and commit a file in the cwd (simulates real work in a worktree)
#   FAKE_AGENT_CONTROL=<file> if this file exists it is sourced (bash) at the start of EVERY call, so a
#                            test can change the knobs above between turns without restarting the
#                            runner, e.g.  echo 'FAKE_AGENT_EXIT=1' > "$FAKE_AGENT_CONTROL"
#   FAKE_AGENT_SCENARIO=<file> sourced (bash) right after the call is logged, with FAKE_AGENT_PROMPT
#                            (the prompt text) and FAKE_AGENT_TURN (this call's number in the log) set:
#                            a drill's own behaviour on its markers (hang, commit, wait for a go file…);
#                            it may exit, otherwise the knobs below apply as usual.
# The default answer is >120 characters of plain prose so the original runner's "substantive
# output" rule (lib/classify-failure.mjs SUBSTANTIVE_MIN=120) classifies the turn as a success and
# not an empty turn. It never echoes the prompt.
set -u
if [ -n "${FAKE_AGENT_CONTROL:-}" ] && [ -f "$FAKE_AGENT_CONTROL" ]; then
  set -a; . "$FAKE_AGENT_CONTROL"; set +a
fi
name=$(basename "$0")
log=${FAKE_AGENT_LOG:-/tmp/fake-agent-calls.jsonl}
stdin_data=""
if [ ! -t 0 ]; then stdin_data=$(timeout 2 cat 2>/dev/null || true); fi
prompt_arg=""
prev=""
found=""
for a in "$@"; do
  if [ "$prev" = "-p" ] || [ "$prev" = "--prompt" ]; then prompt_arg=$a; found=1; fi
  prev=$a
done
if [ -z "$found" ] && [ $# -gt 0 ]; then prompt_arg=${!#}; fi
if [ -n "$prompt_arg" ] && [ -f "$prompt_arg" ]; then
  FAKE_AGENT_PROMPT=$(cat "$prompt_arg")
else
  FAKE_AGENT_PROMPT=$prompt_arg
fi
python3 - "$log" "$name" "$stdin_data" "$FAKE_AGENT_PROMPT" "$@" <<'PY'
import json, os, sys, time
log, name, stdin_data, prompt, argv = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
if not argv:
    prompt = None
n = 1
try:
    with open(log) as f: n = sum(1 for _ in f) + 1
except FileNotFoundError: pass
env = {k: v for k, v in os.environ.items()
       if k.startswith(("RELAY_", "TRANTOR_", "CREW_", "AGENT_BUS", "FAKE_AGENT")) or k in ("HOME", "PATH")}
rec = {"n": n, "ts": int(time.time() * 1000), "name": name, "argv": argv, "cwd": os.getcwd(),
       "stdin": stdin_data, "env": env, "prompt": prompt}
os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
with open(log, "a") as f: f.write(json.dumps(rec, ensure_ascii=False) + "\n")
with open(log + ".last-prompt", "w") as f: f.write(prompt or "")
PY
if [ -n "${FAKE_AGENT_SCENARIO:-}" ] && [ -f "$FAKE_AGENT_SCENARIO" ]; then
  FAKE_AGENT_TURN=$(grep -c '' "$log" 2>/dev/null || echo 0)
  export FAKE_AGENT_PROMPT FAKE_AGENT_TURN
  . "$FAKE_AGENT_SCENARIO"
fi
if [ -n "${FAKE_AGENT_SLEEP:-}" ]; then sleep "$FAKE_AGENT_SLEEP"; fi
if [ -n "${FAKE_AGENT_SEND:-}" ] && [ -n "${RELAY_URL:-}" ]; then
  python3 - <<'PY'
import json, os, urllib.request
body = json.dumps({"from": os.environ.get("RELAY_SESSION", "fake:agent"), "to": os.environ["FAKE_AGENT_SEND"],
                   "text": os.environ.get("FAKE_AGENT_SEND_TEXT", "fake agent reporting: work done"),
                   "project": os.environ.get("RELAY_PROJECT", "")}).encode()
req = urllib.request.Request(os.environ["RELAY_URL"].rstrip("/") + "/send", data=body,
                             headers={"content-type": "application/json"}, method="POST")
try: urllib.request.urlopen(req, timeout=5).read()
except Exception as e: print("fake-agent: send failed:", e)
PY
fi
if [ "${FAKE_AGENT_COMMIT:-}" = "1" ]; then
  f="fake-agent-$(date +%s%N).txt"; echo "work" > "$f"
  git add "$f" >/dev/null 2>&1 && git -c user.name=fake -c user.email=fake@example.invalid commit -qm "fake agent work" >/dev/null 2>&1 || true
fi
if [ -n "${FAKE_AGENT_STDERR:-}" ]; then printf '%s\n' "$FAKE_AGENT_STDERR" >&2; fi
if [ -n "${FAKE_AGENT_OUTPUT:-}" ]; then
  printf '%s\n' "$FAKE_AGENT_OUTPUT"
else
  printf '%s\n' "I read the message that woke me and handled it. Summary: checked the request, made the requested change in my working tree, and reported back on the bus. Nothing else is pending on my side, so I am ending this turn now."
fi
exit "${FAKE_AGENT_EXIT:-0}"
