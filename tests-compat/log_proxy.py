#!/usr/bin/env python3
"""Tiny logging HTTP reverse proxy for wire-compat work (stdlib only).

Usage: log_proxy.py --listen 127.0.0.1:PORT --upstream http://127.0.0.1:HUBPORT --log calls.jsonl
                    [--static /ui=FILE ...]

Forwards every request unchanged (method, path+query, headers, body) to the upstream hub and
streams the response back (works for long-polls and SSE). Appends one JSON line per request:
  {"ts", "method", "path", "query", "signed", "instance", "body", "status", "resp", "ms"}
`signed` is true when x-trantor-sig is present, `instance` when x-trantor-inst is present.
Request signatures cover only path+query+body (not host), so signed clients verify through it.
`--static PATH=FILE` answers GET PATH (query ignored) with FILE as text/html instead of forwarding
it (logged with "static": true) — so a page such as the original's ui.html, which fetches
relative paths, is served from this origin and its calls reach the upstream hub.
Prints "READY <port>" on stdout once listening. Stop it with SIGTERM.
"""
import argparse, http.client, json, signal, sys, threading, time, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}
lock = threading.Lock()

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--max-resp", type=int, default=4000, help="max chars of response body kept")
    ap.add_argument("--static", action="append", default=[], help="PATH=FILE served as text/html")
    a = ap.parse_args()
    static = dict(x.split("=", 1) for x in a.static)
    up = urllib.parse.urlparse(a.upstream)
    host, port = a.listen.rsplit(":", 1)
    logf = open(a.log, "a", buffering=1)

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def log_message(self, *args):
            pass
        def _do(self):
            t0 = time.time()
            n = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(n) if n else b""
            hdrs = {k: v for k, v in self.headers.items() if k.lower() not in HOP and k.lower() != "host"}
            hdrs["Host"] = f"{up.hostname}:{up.port}"
            hdrs["Connection"] = "close"
            u = urllib.parse.urlsplit(self.path)
            rec = {"ts": int(t0 * 1000), "method": self.command, "path": u.path,
                   "query": dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True)),
                   "signed": "x-trantor-sig" in {k.lower() for k in self.headers.keys()},
                   "instance": "x-trantor-inst" in {k.lower() for k in self.headers.keys()}}
            if body:
                try: rec["body"] = json.loads(body)
                except Exception: rec["body_raw"] = body.decode("utf8", "replace")[:2000]
            if self.command == "GET" and u.path in static:
                page = open(static[u.path], "rb").read()
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
                rec.update({"status": 200, "static": True, "ms": int((time.time() - t0) * 1000)})
                with lock:
                    logf.write(json.dumps(rec, ensure_ascii=False) + "\n")
                return
            try:
                c = http.client.HTTPConnection(up.hostname, up.port, timeout=600)
                c.request(self.command, self.path, body=body or None, headers=hdrs)
                r = c.getresponse()
                self.send_response_only(r.status, r.reason)
                for k, v in r.getheaders():
                    if k.lower() not in HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                kept = bytearray()
                while True:
                    chunk = r.read1(65536)
                    if not chunk: break
                    if len(kept) < a.max_resp: kept += chunk[: a.max_resp - len(kept)]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk)); self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n"); self.wfile.flush()
                rec["status"] = r.status
                txt = kept.decode("utf8", "replace")
                try: rec["resp"] = json.loads(txt)
                except Exception: rec["resp_raw"] = txt
            except (BrokenPipeError, ConnectionResetError) as e:
                rec["status"] = rec.get("status", 0); rec["error"] = "client went away: " + str(e)
            except Exception as e:
                rec["status"] = 502; rec["error"] = str(e)
                try:
                    self.send_response(502); self.send_header("content-length", "0"); self.end_headers()
                except Exception: pass
            rec["ms"] = int((time.time() - t0) * 1000)
            with lock:
                logf.write(json.dumps(rec, ensure_ascii=False) + "\n")
            self.close_connection = True
        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_OPTIONS = do_PATCH = _do

    srv = ThreadingHTTPServer((host, int(port)), H)
    srv.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: (srv.server_close(), sys.exit(0)))
    print(f"READY {srv.server_address[1]}", flush=True)
    srv.serve_forever()

if __name__ == "__main__":
    main()
