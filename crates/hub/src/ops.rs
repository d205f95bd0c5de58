//! The request front: body buffering with the size limit, the browser-origin refusal, request
//! metrics, and `_op` idempotency.
//!
//! `_op`: any POST body may carry `_op` (a string or number of at most 80 characters; longer is
//! a 400). Ops are keyed by route and by type, so `/task` and `/send` never share a key and `42`
//! is not `"42"`. The first run's `{code, body}` is stored once it finishes below 500; a later
//! POST with the same `_op` on the same route gets the stored reply without running again.
//! Concurrent duplicates are serialised on a per-op lock, so the second waits for the first and
//! then replays it — the same op never runs twice. A retry is the same request again: a POST
//! that reuses a recorded `_op` with a different body is refused with 409 instead of being
//! answered with another request's reply (the request's SHA-256 is kept beside the reply).
//!
//! Crash safety: every route write made through [`crate::state::Hub::write`] while an op is
//! running also records the op as committed (code 0, reply pending) in the SAME transaction.
//! The full reply replaces that marker right after. A crash between the two leaves the marker,
//! so a retry is answered "committed" instead of being run a second time.

use crate::error::ApiError;
use crate::extract::{ReadBody, read_once};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use trantor_proto::{limits, now_ms};
use trantor_store::{OpRecord, Store};

/// Route paths known to the router, so metrics can label requests with `'static` strings.
static ROUTES: OnceLock<HashSet<&'static str>> = OnceLock::new();

/// Paths that accept POST (where `_op` keys live).
static POST_ROUTES: OnceLock<Vec<&'static str>> = OnceLock::new();

/// Register the router's paths for metric labels (first call wins).
pub fn intern_routes(paths: impl IntoIterator<Item = &'static str>) {
    let _ = ROUTES.set(paths.into_iter().collect());
}

/// Register the paths that accept POST (first call wins).
pub fn intern_post_routes(paths: impl IntoIterator<Item = &'static str>) {
    let _ = POST_ROUTES.set(paths.into_iter().collect());
}

/// The paths that accept POST.
pub fn post_routes() -> Vec<String> {
    POST_ROUTES
        .get()
        .map(|v| v.iter().map(|s| s.to_string()).collect())
        .unwrap_or_default()
}

fn route_label(req: &Request) -> &'static str {
    req.extensions()
        .get::<MatchedPath>()
        .and_then(|m| ROUTES.get().and_then(|r| r.get(m.as_str()).copied()))
        .unwrap_or("(unmatched)")
}

fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::HEAD => "HEAD",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "OTHER",
    }
}

/// Whether an `Origin` header names a page served from this machine's loopback.
pub fn is_loopback_origin(origin: &str) -> bool {
    let rest = match origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    {
        Some(r) => r,
        None => return false,
    };
    let host = if let Some(v6) = rest.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, _)) => return h == "::1",
            None => return false,
        }
    } else {
        rest.split([':', '/']).next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback())
}

/// Longest request target (path and query) served; longer gets a JSON 414.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Most request-header bytes served; more gets a JSON 431.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// Why a request is refused before any route sees it, if it is.
fn refusal(cfg: &crate::config::Config, req: &Request) -> Option<ApiError> {
    let headers = req.headers();
    // DNS rebinding: a page whose name now resolves to 127.0.0.1 still sends its own name.
    if let Some(host) = headers.get(header::HOST)
        && !host.to_str().is_ok_and(|h| cfg.host_allowed(h))
    {
        return Some(ApiError::forbidden(format!(
            "Host {:?} is not this hub's name: only localhost, 127.0.0.1, [::1], the bind \
             address and names given with --allowed-host are served",
            String::from_utf8_lossy(host.as_bytes())
        )));
    }
    if let Some(o) = headers.get(header::ORIGIN)
        && !o.to_str().is_ok_and(is_loopback_origin)
    {
        return Some(ApiError::forbidden(
            "requests from web pages are refused: this hub only serves local programs \
             (the Origin header names a non-loopback page)",
        ));
    }
    // An `<img>` or link on any web page: browsers mark it, programs never send this header.
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"))
    {
        return Some(ApiError::forbidden(
            "cross-site requests from web pages are refused (Sec-Fetch-Site: cross-site)",
        ));
    }
    let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if uri_len > MAX_URI_BYTES {
        return Some(ApiError::with(
            StatusCode::URI_TOO_LONG,
            format!("request target too long (limit {MAX_URI_BYTES} bytes)"),
            serde_json::json!({ "limit": MAX_URI_BYTES }),
        ));
    }
    let header_bytes: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    if header_bytes > MAX_HEADER_BYTES {
        return Some(ApiError::with(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!("request headers too large (limit {MAX_HEADER_BYTES} bytes)"),
            serde_json::json!({ "limit": MAX_HEADER_BYTES }),
        ));
    }
    None
}

/// Outermost layer: refuse foreign hosts, browser origins, cross-site fetches and oversized
/// request heads, and count every reply.
pub async fn front<S: Store>(State(hub): State<AppState<S>>, req: Request, next: Next) -> Response {
    hub.metrics.arrive();
    let method = method_label(req.method());
    let route = route_label(&req);
    let resp = match refusal(&hub.cfg, &req) {
        Some(e) => e.into_response(),
        None => next.run(req).await,
    };
    // A parked `/poll` is counted with the status it finally answers (routes/bus.rs).
    if !crate::front::is_parked(&resp) {
        hub.metrics.request(method, route, resp.status().as_u16());
    }
    resp
}

#[derive(Deserialize)]
struct OpOnly {
    #[serde(rename = "_op", default)]
    op: Option<Value>,
}

/// An `_op` as the client sent it, typed: a string and a number never share a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpId {
    /// `"_op": "abc"`.
    Str(String),
    /// `"_op": 42`.
    Num(String),
}

impl OpId {
    /// The store key of this op on `route` (e.g. `POST /send s:abc`).
    pub fn key(&self, route: &str) -> String {
        match self {
            OpId::Str(s) => format!("POST {route} s:{s}"),
            OpId::Num(n) => format!("POST {route} n:{n}"),
        }
    }
}

/// The `_op` of a body: `None` when it has none, a 400 when it is over-long or not a string or
/// number (silently cutting it would let two keys with a common prefix collide).
fn op_of(body: &ReadBody) -> Result<Option<OpId>, ApiError> {
    // Cheap pre-check: most bodies (the runner's) carry no `_op`.
    if !body.bytes().windows(5).any(|w| w == b"\"_op\"") {
        return Ok(None);
    }
    // A body that is not a JSON object is the route's 400 to give.
    let Some(Ok(OpOnly { op })) = body.json().map(OpOnly::deserialize) else {
        return Ok(None);
    };
    let id = match op {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => {
            let s = s.trim();
            if s.is_empty() {
                return Ok(None);
            }
            crate::error::check_len("_op", s, limits::OP_ID)?;
            OpId::Str(s.to_string())
        }
        Some(Value::Number(n)) => OpId::Num(n.to_string()),
        Some(_) => return Err(ApiError::bad_request("_op must be a string or a number")),
    };
    Ok(Some(id))
}

/// The stored reply of a finished op. A marker (code 0) means the route's write committed but
/// its reply was lost to a crash: say so rather than run the write again.
fn replay(rec: &OpRecord) -> Response {
    if rec.code == 0 {
        return (StatusCode::OK, axum::Json(pending_body())).into_response();
    }
    let status = StatusCode::from_u16(rec.code).unwrap_or(StatusCode::OK);
    (status, axum::Json(rec.body.clone())).into_response()
}

/// The body replayed for an op whose write committed before a crash lost its reply.
pub fn pending_body() -> Value {
    serde_json::json!({
        "ok": true,
        "replayed": true,
        "note": "this _op committed before the hub restarted; its original reply was not kept",
    })
}

/// Deepest JSON nesting accepted in a request body (arrays and objects).
pub const MAX_JSON_DEPTH: usize = limits::JSON_DEPTH;

/// Whether a JSON text nests deeper than `max` (strings are skipped, escapes honoured). A
/// byte scan, so a hostile body is refused before any parser recurses into it.
pub fn too_deep(bytes: &[u8], max: usize) -> bool {
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    for &b in bytes {
        if in_str {
            if esc {
                esc = false;
            } else if b == b'\\' {
                esc = true;
            } else if b == b'"' {
                in_str = false;
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Checks every POST body gets at the door: bounded nesting, and no secret in any string.
fn check_body(body: &ReadBody) -> Result<(), ApiError> {
    if too_deep(body.bytes(), MAX_JSON_DEPTH) {
        return Err(ApiError::with(
            StatusCode::BAD_REQUEST,
            format!("JSON nested too deep (limit {MAX_JSON_DEPTH} levels)"),
            serde_json::json!({ "limit": MAX_JSON_DEPTH }),
        ));
    }
    // Bodies that are not JSON get their 400 from the route's extractor.
    if let Some(v) = body.json() {
        let kinds = trantor_proto::secrets::detect_json(v);
        if !kinds.is_empty() {
            return Err(ApiError::secret(kinds));
        }
    }
    Ok(())
}

/// POST layer: buffer the body (413 over the limit), then run the route once per `_op`.
pub async fn idempotent<S: Store>(
    State(hub): State<AppState<S>>,
    req: Request,
    next: Next,
) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let too_big = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > crate::extract::DRAIN_CAP as u64);
    if too_big {
        return ApiError::too_large(limits::MAX_BODY_BYTES).into_response();
    }
    let (req, body) = match read_once(req).await {
        Ok(read) => read,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = check_body(&body) {
        return e.into_response();
    }
    let op = match op_of(&body) {
        Ok(Some(op)) => op.key(req.uri().path()),
        Ok(None) => {
            drop(body);
            return next.run(req).await;
        }
        Err(e) => return e.into_response(),
    };
    let fingerprint = request_fingerprint(body.bytes());
    // The route takes the parsed body from the request, uncopied, when no one else holds it.
    drop(body);

    let lock = {
        let mut map = hub.ops_in_flight.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(op.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(())))
            .clone()
    };
    let resp = {
        let _guard = lock.lock().await;
        run_once(&hub, &op, fingerprint, req, next).await
    };
    {
        let mut map = hub.ops_in_flight.lock().unwrap_or_else(|e| e.into_inner());
        // Ours and the map's: nobody else is waiting on this op.
        if Arc::strong_count(&lock) == 2 {
            map.remove(&op);
        }
    }
    resp
}

/// The SHA-256 of a request body, hex: what a retry must repeat exactly.
fn request_fingerprint(body: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The store key of an op's request fingerprint (kept as a second op record, so every backend
/// carries it without a schema change; `GET /_op` never looks it up).
fn fingerprint_key(op: &str) -> String {
    format!("{op} #request")
}

async fn run_once<S: Store>(
    hub: &AppState<S>,
    op: &str,
    fingerprint: String,
    req: Request,
    next: Next,
) -> Response {
    let key = op.to_string();
    let seen = hub
        .store
        .read(move |tx| Ok((tx.op(&key)?, tx.op(&fingerprint_key(&key))?)))
        .await;
    match seen {
        Ok((Some(rec), print)) => {
            if let Some(print) = print
                && print.body.as_str() != Some(fingerprint.as_str())
            {
                return ApiError::with(
                    StatusCode::CONFLICT,
                    "this _op was already used for a different request: a retry must repeat \
                     the request exactly; use a new _op for a new request",
                    Value::Null,
                )
                .into_response();
            }
            hub.metrics.op_replays.fetch_add(1, Ordering::Relaxed);
            return replay(&rec);
        }
        Ok((None, _)) => {}
        Err(e) => return ApiError::from(e).into_response(),
    }
    let resp = crate::state::under_op(op.to_string(), next.run(req)).await;
    let status = resp.status();
    if status.is_server_error() {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError::with(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reply lost: {e}"),
                Value::Null,
            )
            .into_response();
        }
    };
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let ts = now_ms();
    let print = OpRecord {
        id: fingerprint_key(op),
        ts,
        code: status.as_u16(),
        body: Value::String(fingerprint),
    };
    let rec = OpRecord {
        id: op.to_string(),
        ts,
        code: status.as_u16(),
        body,
    };
    let written = hub
        .store
        .write(move |tx| {
            tx.put_op(&print)?;
            tx.put_op(&rec)
        })
        .await;
    if let Err(e) = written {
        // The route's change and its marker are committed: a retry is answered "committed",
        // only the original reply body is missing.
        tracing::warn!(op, error = %e, "could not record _op reply");
    }
    Response::from_parts(parts, Body::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origins() {
        for o in [
            "http://127.0.0.1:4477",
            "http://localhost",
            "https://localhost:3000",
            "http://[::1]:8080",
        ] {
            assert!(is_loopback_origin(o), "{o}");
        }
        for o in [
            "null",
            "http://evil.com",
            "http://127.0.0.1.evil.com",
            "http://localhost.evil.com",
            "file://",
            "http://[::2]",
        ] {
            assert!(!is_loopback_origin(o), "{o}");
        }
    }

    #[test]
    fn op_extraction() {
        let op_bytes = |b: &[u8]| op_of(&ReadBody::new(axum::body::Bytes::copy_from_slice(b)));
        let key = |b: &[u8]| op_bytes(b).ok().flatten().map(|o| o.key("/send"));
        assert_eq!(key(br#"{"a":1}"#), None);
        assert_eq!(
            key(br#"{"_op":"x-1","a":1}"#).as_deref(),
            Some("POST /send s:x-1")
        );
        assert_eq!(key(br#"{"_op":42}"#).as_deref(), Some("POST /send n:42"));
        assert_ne!(key(br#"{"_op":42}"#), key(br#"{"_op":"42"}"#));
        let at = |b: &[u8]| op_bytes(b).ok().flatten().map(|o| o.key("/task"));
        assert_ne!(key(br#"{"_op":"k"}"#), at(br#"{"_op":"k"}"#));
        let long = format!(r#"{{"_op":"{}"}}"#, "a".repeat(81));
        let e = op_bytes(long.as_bytes()).err().map(|e| e.body);
        assert_eq!(e.as_ref().map(|b| b["limit"].clone()), Some(80.into()));
        assert!(op_bytes(format!(r#"{{"_op":"{}"}}"#, "é".repeat(80)).as_bytes()).is_ok());
        assert!(op_bytes(br#"{"_op":[1]}"#).is_err());
        assert_eq!(key(br#"{"_op": "#), None);
    }

    #[test]
    fn depth_scan() {
        let deep = format!("{}{}", "[".repeat(17), "]".repeat(17));
        assert!(too_deep(deep.as_bytes(), 16));
        let ok = format!("{}{}", "[".repeat(16), "]".repeat(16));
        assert!(!too_deep(ok.as_bytes(), 16));
        // Brackets inside strings (and escaped quotes) do not count.
        let s = format!(r#"{{"a":"{}\"{}"}}"#, "[".repeat(40), "{".repeat(40));
        assert!(!too_deep(s.as_bytes(), 16));
    }
}
