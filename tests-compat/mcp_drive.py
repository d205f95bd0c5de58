#!/usr/bin/env python3
"""Drive a stdio MCP server with newline-delimited JSON-RPC 2.0 (stdlib only).

Usage:
  mcp_drive.py [--calls CALLS] [--timeout SECS] [--list-tools] [--stderr FILE] -- CMD [ARGS...]

CALLS is a JSON list (inline text, or @path to a file, or - for stdin) of
  {"name": "relay_send", "arguments": {...}}          -> tools/call
  {"method": "some/method", "params": {...}}          -> any other request
  {"sleep": 0.5}                                      -> pause (seconds)
The server's environment is inherited (set RELAY_URL, RELAY_SESSION, RELAY_PROJECT, HOME,
AGENT_BUS_DIR ... before calling this script).

Sequence: initialize -> notifications/initialized -> [tools/list if --list-tools] -> calls in order
-> close stdin, wait up to 5 s, then SIGTERM/SIGKILL.

Prints ONE JSON object on stdout:
  {"initialize": <result>, "tools": [<tool>...] (only with --list-tools),
   "results": [{"call": <call>, "result": <result>|null, "error": <rpc error>|null,
                "text": <concatenated text content>|null, "isError": bool}],
   "notifications": [<server notifications>], "stderr": <server stderr unless --stderr FILE>}
Exit code 0 when every call got a JSON-RPC response (a tool result with isError is still 0),
2 on a timeout or protocol failure, 1 on bad usage.
"""
import argparse, json, os, queue, signal, subprocess, sys, threading, time

PROTOCOL = "2025-06-18"

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", default="[]")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per request")
    ap.add_argument("--list-tools", action="store_true")
    ap.add_argument("--stderr", default=None, help="write server stderr to this file instead of the JSON")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        ap.error("missing server command after --")
    raw = a.calls
    if raw == "-": raw = sys.stdin.read()
    elif raw.startswith("@"): raw = open(raw[1:]).read()
    calls = json.loads(raw)

    errf = open(a.stderr, "wb") if a.stderr else subprocess.PIPE
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf,
                         start_new_session=True)
    out_q = queue.Queue()
    err_buf = bytearray()
    def rd_out():
        for line in p.stdout:
            line = line.strip()
            if not line: continue
            try: out_q.put(json.loads(line))
            except Exception: out_q.put({"_unparsed": line.decode("utf8", "replace")})
        out_q.put(None)
    def rd_err():
        for chunk in iter(lambda: p.stderr.read1(4096), b""):
            err_buf.extend(chunk)
    threading.Thread(target=rd_out, daemon=True).start()
    if not a.stderr: threading.Thread(target=rd_err, daemon=True).start()

    notes, report, ok = [], {}, True
    nid = [0]
    def send(obj):
        p.stdin.write((json.dumps(obj) + "\n").encode()); p.stdin.flush()
    def request(method, params):
        nid[0] += 1; my = nid[0]
        send({"jsonrpc": "2.0", "id": my, "method": method, "params": params})
        deadline = time.time() + a.timeout
        while True:
            left = deadline - time.time()
            if left <= 0: raise TimeoutError(f"no response to {method} within {a.timeout}s")
            try: msg = out_q.get(timeout=left)
            except queue.Empty: continue
            if msg is None: raise EOFError(f"server closed stdout while waiting for {method}")
            if msg.get("id") == my and ("result" in msg or "error" in msg):
                return msg
            if "method" in msg and "id" in msg:      # server->client request (e.g. ping, roots/list)
                send({"jsonrpc": "2.0", "id": msg["id"], "result": {}})
            else:
                notes.append(msg)
    try:
        init = request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                      "clientInfo": {"name": "mcp_drive", "version": "1"}})
        report["initialize"] = init.get("result", init.get("error"))
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if a.list_tools:
            tl = request("tools/list", {})
            report["tools"] = (tl.get("result") or {}).get("tools")
        results = []
        for c in calls:
            if "sleep" in c:
                time.sleep(float(c["sleep"])); continue
            if "name" in c:
                m = request("tools/call", {"name": c["name"], "arguments": c.get("arguments", {})})
            else:
                m = request(c["method"], c.get("params", {}))
            res = m.get("result")
            text = None
            if isinstance(res, dict) and isinstance(res.get("content"), list):
                text = "".join(x.get("text", "") for x in res["content"] if x.get("type") == "text")
            results.append({"call": c, "result": res, "error": m.get("error"), "text": text,
                            "isError": bool(isinstance(res, dict) and res.get("isError")) or "error" in m})
        report["results"] = results
    except Exception as e:
        ok = False
        report["failure"] = f"{type(e).__name__}: {e}"
    finally:
        try: p.stdin.close()
        except Exception: pass
        try: p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            try: os.killpg(p.pid, signal.SIGTERM); p.wait(timeout=3)
            except Exception:
                try: os.killpg(p.pid, signal.SIGKILL)
                except Exception: pass
        report["notifications"] = notes
        if not a.stderr:
            time.sleep(0.05)
            report["stderr"] = err_buf.decode("utf8", "replace")
        report["exitCode"] = p.returncode
    print(json.dumps(report, indent=2, ensure_ascii=False))
    sys.exit(0 if ok else 2)

if __name__ == "__main__":
    main()
