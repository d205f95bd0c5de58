//! The request front: body buffering with the size limit, the browser-origin refusal, request
//! metrics, and `_op` idempotency.
//!
//! `_op`: any POST body may carry `_op` (≤ 80 chars). The first run's `{code, body}` is stored in
//! the store once it finishes below 500; a later POST with the same `_op` gets the stored reply
//! without running again. Concurrent duplicates are serialised on a per-op lock, so the second
//! waits for the first and then replays it — the same op never runs twice.
//!
//! The outcome is recorded in its own write right after the route's write commits. A crash
//! between the two leaves the op "unknown", and the client's retry runs it again; that window is
//! one commit wide.

use crate::error::ApiError;
use crate::state::AppState;
use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use trantor_proto::{limits, now_ms};
use trantor_store::{OpRecord, Store};

/// Route paths known to the router, so metrics can label requests with `'static` strings.
static ROUTES: OnceLock<HashSet<&'static str>> = OnceLock::new();

/// Register the router's paths for metric labels (first call wins).
pub fn intern_routes(paths: impl IntoIterator<Item = &'static str>) {
    let _ = ROUTES.set(paths.into_iter().collect());
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

/// Outermost layer: refuse requests from foreign browser origins and count every reply.
pub async fn front<S: Store>(State(hub): State<AppState<S>>, req: Request, next: Next) -> Response {
    let method = method_label(req.method());
    let route = route_label(&req);
    let resp = match req.headers().get(header::ORIGIN) {
        Some(o) if !o.to_str().is_ok_and(is_loopback_origin) => ApiError::forbidden(
            "requests from web pages are refused: this hub only serves local programs \
             (the Origin header names a non-loopback page)",
        )
        .into_response(),
        _ => next.run(req).await,
    };
    hub.metrics.request(method, route, resp.status().as_u16());
    resp
}

/// How much of an over-limit body is read and discarded before the 413 goes out. A client that
/// is still uploading when the reply arrives sees a reset instead of the 413 (HTTP/1 has no
/// clean way to refuse mid-upload), so moderately large bodies are drained; beyond this the
/// connection is simply closed after the reply.
const DRAIN_CAP: usize = 16 * 1024 * 1024;

async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    let mut stream = body.into_data_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut seen: usize = 0;
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::bad_request(format!("cannot read request body: {e}")))?;
        seen = seen.saturating_add(chunk.len());
        if seen > limits::MAX_BODY_BYTES {
            buf = Vec::new();
            if seen > DRAIN_CAP {
                break;
            }
            continue;
        }
        buf.extend_from_slice(&chunk);
    }
    if seen > limits::MAX_BODY_BYTES {
        return Err(ApiError::too_large(limits::MAX_BODY_BYTES));
    }
    Ok(Bytes::from(buf))
}

#[derive(Deserialize)]
struct OpOnly {
    #[serde(rename = "_op", default)]
    op: Option<Value>,
}

/// The `_op` of a body, if it has one (a string or number, truncated to 80 chars).
fn op_of(bytes: &[u8]) -> Option<String> {
    // Cheap pre-check: most bodies (the runner's) carry no `_op` and need no second parse.
    if !bytes.windows(5).any(|w| w == b"\"_op\"") {
        return None;
    }
    let op = serde_json::from_slice::<OpOnly>(bytes).ok()?.op?;
    let s = match op {
        Value::String(s) => s,
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let s = crate::cards::truncate(s.trim(), limits::OP_ID);
    (!s.is_empty()).then_some(s)
}

fn replay(rec: &OpRecord) -> Response {
    let status = StatusCode::from_u16(rec.code).unwrap_or(StatusCode::OK);
    (status, axum::Json(rec.body.clone())).into_response()
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
        .is_some_and(|n| n > DRAIN_CAP as u64);
    if too_big {
        return ApiError::too_large(limits::MAX_BODY_BYTES).into_response();
    }
    let (parts, body) = req.into_parts();
    let bytes = match read_body(body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let Some(op) = op_of(&bytes) else {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    };

    let lock = {
        let mut map = hub.ops_in_flight.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(op.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(())))
            .clone()
    };
    let resp = {
        let _guard = lock.lock().await;
        run_once(
            &hub,
            &op,
            Request::from_parts(parts, Body::from(bytes)),
            next,
        )
        .await
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

async fn run_once<S: Store>(hub: &AppState<S>, op: &str, req: Request, next: Next) -> Response {
    let key = op.to_string();
    match hub.store.read(move |tx| tx.op(&key)).await {
        Ok(Some(rec)) => {
            hub.metrics.op_replays.fetch_add(1, Ordering::Relaxed);
            return replay(&rec);
        }
        Ok(None) => {}
        Err(e) => return ApiError::from(e).into_response(),
    }
    let resp = next.run(req).await;
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
    let rec = OpRecord {
        id: op.to_string(),
        ts: now_ms(),
        code: status.as_u16(),
        body,
    };
    if let Err(e) = hub.store.write(move |tx| tx.put_op(&rec)).await {
        // The route's change is committed; only replay protection is missing for this op.
        tracing::warn!(op, error = %e, "could not record _op outcome");
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
        assert_eq!(op_of(br#"{"a":1}"#), None);
        assert_eq!(op_of(br#"{"_op":"x-1","a":1}"#).as_deref(), Some("x-1"));
        assert_eq!(op_of(br#"{"_op":42}"#).as_deref(), Some("42"));
        let long = format!(r#"{{"_op":"{}"}}"#, "a".repeat(200));
        assert_eq!(op_of(long.as_bytes()).map(|s| s.len()), Some(80));
        assert_eq!(op_of(br#"{"_op": "#), None);
    }
}
