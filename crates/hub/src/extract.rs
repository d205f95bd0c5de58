//! The request body, read once, and the extractors that turn bad input into clear 400s instead
//! of axum's plain-text rejections.
//!
//! A POST body is read by the first layer that needs it (the auth layer when signatures are
//! checked, else the `_op` layer) into a [`ReadBody`] kept in the request's extensions: the
//! signature is verified over its bytes, the `_op` fingerprint is taken of them, and its JSON is
//! parsed at most once, on first use, for every reader after that — authorization's view of the
//! body, the secret scan, the `_op` lookup, the alias rewrite and the route's typed request
//! ([`JsonBody`], which names the JSON problem: line/column, or the field with the wrong type).
//! [`Params`] parses query parameters with per-parameter messages.

use crate::error::{ApiError, ApiResult};
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use trantor_proto::limits;

/// How much of an over-limit body is read and discarded before the 413 goes out. A client that
/// is still uploading when the reply arrives sees a reset instead of the 413 (HTTP/1 has no
/// clean way to refuse mid-upload), so moderately large bodies are drained; beyond this the
/// connection is simply closed after the reply.
pub const DRAIN_CAP: usize = 16 * 1024 * 1024;

/// Read a whole request body: a 413 past [`limits::MAX_BODY_BYTES`] (an over-limit body is
/// drained up to [`DRAIN_CAP`] first), a 400 when the client went away mid-body.
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

/// A request body read once, with its JSON parsed at most once (see the module doc). Clones
/// share the bytes and the parse.
#[derive(Debug, Clone)]
pub struct ReadBody(Arc<Read>);

#[derive(Debug, Clone)]
struct Read {
    bytes: Bytes,
    json: OnceLock<Result<Value, Arc<serde_json::Error>>>,
}

/// Parse a body as JSON; an empty or blank body is `{}` (the original's clients sometimes post
/// nothing).
fn parse(bytes: &[u8]) -> Result<Value, Arc<serde_json::Error>> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(bytes).map_err(Arc::new)
}

impl ReadBody {
    /// A body already in memory.
    pub fn new(bytes: Bytes) -> ReadBody {
        ReadBody(Arc::new(Read {
            bytes,
            json: OnceLock::new(),
        }))
    }

    /// The body as sent (what a signature covers).
    pub fn bytes(&self) -> &Bytes {
        &self.0.bytes
    }

    /// The body's JSON, parsed on the first call; `None` when it is not JSON.
    pub fn json(&self) -> Option<&Value> {
        self.0
            .json
            .get_or_init(|| parse(&self.0.bytes))
            .as_ref()
            .ok()
    }

    /// The body's JSON to change in place (the alias rewrite), `None` when it is not JSON. A
    /// rewrite is seen by every reader after it; the bytes stay as sent.
    pub fn json_mut(&mut self) -> Option<&mut Value> {
        let read = Arc::make_mut(&mut self.0);
        read.json.get_or_init(|| parse(&read.bytes));
        read.json.get_mut().and_then(|j| j.as_mut().ok())
    }

    /// The body decoded as `T`, from the one parse (taken, not copied, when this is the last
    /// holder).
    pub fn decode<T: DeserializeOwned>(self) -> ApiResult<T> {
        let parsed = match Arc::try_unwrap(self.0) {
            Ok(read) => match read.json.into_inner() {
                Some(parsed) => parsed,
                None => parse(&read.bytes),
            },
            Err(shared) => shared.json.get_or_init(|| parse(&shared.bytes)).clone(),
        };
        match parsed {
            Ok(tree) => decode_tree(tree),
            Err(e) => Err(json_error(".", &e)),
        }
    }
}

/// The request's [`ReadBody`]: the one an outer layer read, else the body read now (and kept
/// in the extensions for the layers and the extractor after this one). The request goes on
/// with the same bytes as its body.
pub async fn read_once(req: Request) -> Result<(Request, ReadBody), ApiError> {
    if let Some(body) = req.extensions().get::<ReadBody>() {
        let body = body.clone();
        return Ok((req, body));
    }
    let (mut parts, body) = req.into_parts();
    let body = ReadBody::new(read_body(body).await?);
    parts.extensions.insert(body.clone());
    Ok((
        Request::from_parts(parts, Body::from(body.bytes().clone())),
        body,
    ))
}

/// A JSON request body decoded as `T`, from the request's [`ReadBody`] when a layer read it.
/// An empty body counts as `{}` (the original's clients sometimes post nothing); unknown fields
/// are ignored by the wire types.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

/// Decode `bytes` as `T`, naming the problem on failure.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> ApiResult<T> {
    match parse(bytes) {
        Ok(tree) => decode_tree(tree),
        Err(e) => Err(json_error(".", &e)),
    }
}

/// Decode a parsed body as `T`: it must be a JSON object (serde would read a struct from an
/// array too), and integral floats are integers.
fn decode_tree<T: DeserializeOwned>(mut tree: Value) -> ApiResult<T> {
    if !tree.is_object() {
        return Err(ApiError::bad_request(
            "invalid body: a JSON object is required",
        ));
    }
    integral_floats(&mut tree);
    serde_path_to_error::deserialize(tree).map_err(|e| {
        let path = e.path().to_string();
        json_error(&path, &e.into_inner())
    })
}

/// JSON has one number type: `3.0` and `1e3` are the integers 3 and 1000 (as JSON Schema,
/// JavaScript and Python read them), so integral floats become integers before typed decoding
/// into integer fields. The float is the nearest double to the text (serde_json's
/// `float_roundtrip`), so the value is the one a schema validator sees.
fn integral_floats(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Number(n) if n.is_f64() => {
            if let Some(i) = n.as_f64().and_then(integral) {
                *v = i;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats),
        Value::Object(map) => map.values_mut().for_each(integral_floats),
        _ => {}
    }
}

/// An integral double as a JSON integer: exactly, within `i64` or (above it) `u64`; `None` for
/// a fraction, an infinity, a value past `u64`, and -2^63: serde_json reads an integer text
/// below `i64::MIN` (`-9223372036854775809`) as a double, and the nearest one is -2^63, so that
/// double cannot tell a float at the bound from an integer past it. The one rule for integers
/// sent as floats, in bodies and queries alike.
pub fn integral(f: f64) -> Option<serde_json::Value> {
    // 2^63 and 2^64 are exact doubles; `as` saturates, so the range is checked first.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if !f.is_finite() || f.fract() != 0.0 {
        None
    } else if f > -TWO_63 && f < TWO_63 {
        Some(serde_json::Value::from(f as i64))
    } else if (0.0..2.0 * TWO_63).contains(&f) {
        Some(serde_json::Value::from(f as u64))
    } else {
        None
    }
}

fn json_error(path: &str, e: &serde_json::Error) -> ApiError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => {
            ApiError::bad_request(format!("invalid JSON: {e}"))
        }
        Category::Data => {
            if path.is_empty() || path == "." {
                ApiError::bad_request(format!("invalid request body: {e}"))
            } else {
                ApiError::with(
                    axum::http::StatusCode::BAD_REQUEST,
                    format!("invalid field `{path}`: {e}"),
                    serde_json::json!({ "field": path }),
                )
            }
        }
    }
}

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(mut req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // POST bodies were read (and size-checked) by the auth or `_op` layer.
        if let Some(body) = req.extensions_mut().remove::<ReadBody>() {
            return body.decode().map(JsonBody);
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::too_large(trantor_proto::limits::MAX_BODY_BYTES)
            } else {
                ApiError::bad_request(format!("cannot read request body: {e}"))
            }
        })?;
        decode_json(&bytes).map(JsonBody)
    }
}

impl<S: Send + Sync> FromRequest<S> for ReadBody {
    type Rejection = ApiError;

    async fn from_request(mut req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        match req.extensions_mut().remove::<ReadBody>() {
            Some(body) => Ok(body),
            None => Ok(ReadBody::new(read_body(req.into_body()).await?)),
        }
    }
}

/// Query parameters, parsed leniently (any string) and converted per parameter with a clear
/// message.
#[derive(Debug, Default, Clone)]
pub struct Params(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parse_query(parts.uri.query().unwrap_or("")).map(Params)
    }
}

/// Decode a query string strictly: a parameter whose percent-decoded bytes are not UTF-8 is a
/// 400 (lossy decoding would map different byte strings onto one session name).
pub fn parse_query(raw: &str) -> ApiResult<HashMap<String, String>> {
    let mut map = HashMap::new();
    for pair in raw.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = percent_decode(k)?;
        let v = percent_decode(v).map_err(|_| {
            ApiError::bad_request(format!(
                "query parameter `{k}` is not valid percent-encoded UTF-8"
            ))
        })?;
        // First occurrence wins, as the original's URLSearchParams.get does.
        map.entry(k).or_insert(v);
    }
    Ok(map)
}

fn percent_decode(s: &str) -> ApiResult<String> {
    let bad = || ApiError::bad_request("query string is not valid percent-encoded UTF-8");
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = b.get(i + 1..i + 3).ok_or_else(bad)?;
                let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| bad())
}

impl Params {
    /// A parameter as given, `None` when absent.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// A non-empty trimmed parameter.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.get(name).map(str::trim).filter(|s| !s.is_empty())
    }

    /// A required non-empty parameter.
    pub fn required(&self, name: &str) -> ApiResult<&str> {
        self.text(name)
            .ok_or_else(|| ApiError::bad_request(format!("{name} required")))
    }

    /// An integer parameter; absent or empty gives `None`, anything else non-integer (blanks
    /// included) a 400.
    pub fn int(&self, name: &str) -> ApiResult<Option<i64>> {
        match self.get(name).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => parse_int(v)
                .map(Some)
                .ok_or_else(|| ApiError::bad_request(format!("{name} must be an integer"))),
        }
    }

    /// A non-negative integer parameter.
    pub fn count(&self, name: &str) -> ApiResult<Option<i64>> {
        match self.int(name)? {
            Some(v) if v < 0 => Err(ApiError::bad_request(format!(
                "{name} must not be negative"
            ))),
            v => Ok(v),
        }
    }

    /// A boolean flag: `1`, `true`, `yes`, `on` are true; absent, `0`, `false`, `no`, `off`
    /// are false; anything else (empty included) is a 400 (a typo must not silently mean
    /// "false").
    pub fn flag(&self, name: &str) -> ApiResult<bool> {
        match self.get(name).map(str::to_ascii_lowercase).as_deref() {
            None | Some("0" | "false" | "no" | "off") => Ok(false),
            Some("1" | "true" | "yes" | "on") => Ok(true),
            Some(_) => Err(ApiError::bad_request(format!(
                "{name} must be a boolean: 1 or 0 (true/false)"
            ))),
        }
    }
}

/// Parse an integer the way clients write them: `12`, `-3`, and also `12.0` or `1e3` (an
/// integral number, by the same rule as a body's: [`integral`]).
pub fn parse_int(v: &str) -> Option<i64> {
    if let Ok(n) = v.parse::<i64>() {
        return Some(n);
    }
    v.parse::<f64>().ok().and_then(integral)?.as_i64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use trantor_proto::SendRequest;

    #[test]
    fn bodies_are_objects_and_integral_floats_are_integers() {
        let e = decode_json::<SendRequest>(b"[null, null]").err();
        let msg = e.map(|e| e.body["error"].to_string()).unwrap_or_default();
        assert!(msg.contains("JSON object"), "{msg}");
        let r: Option<trantor_proto::RegisterRequest> =
            decode_json(br#"{"session":"a:p","phaseSince":-4001.0}"#).ok();
        assert_eq!(r.and_then(|r| r.phase_since), Some(-4001));
        assert!(decode_json::<trantor_proto::RegisterRequest>(br#"{"phaseSince":1.5}"#).is_err());
        // Read exactly, however large: the nearest double, and integral ones up to u64.
        let big = br#"{"a":-4309417533227374.0,"b":1e16,"c":9223372036854775808.0,"d":[2.5e1]}"#;
        let v: serde_json::Value = decode_json(big).expect("big");
        assert_eq!(v["a"].as_i64(), Some(-4_309_417_533_227_374), "{v}");
        assert_eq!(v["b"].as_i64(), Some(10_000_000_000_000_000), "{v}");
        assert_eq!(v["c"].as_u64(), Some(1 << 63), "{v}");
        assert_eq!(v["d"][0].as_i64(), Some(25), "{v}");
        let v: serde_json::Value =
            decode_json(br#"{"a":-4309417533227374.5,"b":1.8446744073709552e19}"#).expect("f");
        assert!(v["a"].is_f64() && v["b"].is_f64(), "{v}");
        // An integer text past i64::MIN is read as the double -2^63: it stays a float (refused
        // by an integer field) rather than becoming i64::MIN (schemathesis, random seed:
        // `re: -9223372036854775809` was accepted on POST /send).
        let v: serde_json::Value = decode_json(br#"{"a":-9223372036854775809}"#).expect("min");
        assert!(v["a"].is_f64(), "{v}");
    }

    #[tokio::test]
    async fn a_body_is_read_once_and_a_rewrite_of_its_one_parse_reaches_the_route() {
        let req = Request::builder()
            .method("POST")
            .body(Body::from(r#"{"from":"a","text":"b","project":"old"}"#))
            .expect("request");
        let (req, first) = read_once(req).await.expect("read");
        let (mut req, second) = read_once(req).await.expect("read again");
        assert!(
            Arc::ptr_eq(&first.0, &second.0),
            "the second reader got the first read"
        );
        assert_eq!(first.json().map(|v| v["from"].clone()), Some("a".into()));
        assert!(second.0.json.get().is_some(), "the parse is shared");
        drop((first, second));
        if let Some(v) = req
            .extensions_mut()
            .get_mut::<ReadBody>()
            .and_then(ReadBody::json_mut)
        {
            v["project"] = "new".into();
        }
        let JsonBody(v) = JsonBody::<serde_json::Value>::from_request(req, &())
            .await
            .expect("decoded");
        assert_eq!(v["project"], "new");
    }

    #[test]
    fn invalid_json_names_position() {
        let e = decode_json::<SendRequest>(b"{\"from\": ").err();
        let msg = e.map(|e| e.body["error"].to_string()).unwrap_or_default();
        assert!(msg.contains("invalid JSON"), "{msg}");
        assert!(msg.contains("line 1"), "{msg}");
    }

    #[test]
    fn wrong_type_names_field() {
        let e = decode_json::<SendRequest>(br#"{"from":"a","text":"b","re":"x"}"#).err();
        let body = e.map(|e| e.body).unwrap_or_default();
        assert_eq!(body["field"], "re");
        assert!(body["error"].as_str().unwrap_or("").contains("re"));
    }

    #[test]
    fn empty_body_is_empty_object_and_unknown_fields_ignored() {
        let r: SendRequest = decode_json(b"").expect("empty");
        assert!(r.from.is_empty());
        let r: SendRequest =
            decode_json(br#"{"from":"a","text":"b","_op":"x","zzz":[1]}"#).expect("unknown");
        assert_eq!(r.from, "a");
        assert!(decode_json::<SendRequest>(b"{} trailing").is_err());
    }

    #[test]
    fn query_decoding_is_strict() {
        let m = parse_query("session=a%3Ab&x=1+2&session=dup&flag").expect("query");
        assert_eq!(m["session"], "a:b");
        assert_eq!(m["x"], "1 2");
        assert_eq!(m["flag"], "");
        assert_eq!(parse_query("session=%C3%A9").expect("utf8")["session"], "é");
        for bad in [
            "session=%FF",
            "session=%C3",
            "session=%zz",
            "session=%4",
            "%FF=1",
        ] {
            let e = parse_query(bad).err().map(|e| e.status.as_u16());
            assert_eq!(e, Some(400), "{bad}");
        }
    }

    #[test]
    fn ints_parse_tolerantly() {
        assert_eq!(parse_int("12"), Some(12));
        assert_eq!(parse_int("12.0"), Some(12));
        assert_eq!(parse_int("1e3"), Some(1000));
        assert_eq!(parse_int("x"), None);
        assert_eq!(parse_int("1.5"), None);
        assert_eq!(parse_int("1e16"), Some(10_000_000_000_000_000));
        assert_eq!(parse_int("-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_int("-9223372036854775808.0"), None);
        assert_eq!(
            parse_int("-9223372036854775809"),
            None,
            "past i64, as an integer"
        );
        assert_eq!(parse_int("9223372036854775808.0"), None);
        assert_eq!(parse_int("inf"), None);
    }
}
