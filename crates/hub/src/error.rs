//! `ApiError`: every refusal the hub gives, as `{"error": "...", ...}` JSON with the right status,
//! and the checks (and trims) of the text fields a request or the configuration carries.
//!
//! Client mistakes are 4xx with a text naming the problem; only a failing store gives a 5xx
//! (503 when the store is shutting down, 500 otherwise), carrying the store's message.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use trantor_store::StoreError;

/// An error reply: a status and a JSON body that always has an `error` text.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// The JSON body (`{"error": ..., extra fields}`).
    pub body: Value,
}

impl ApiError {
    /// An error with extra fields beside `error`.
    pub fn with(status: StatusCode, error: impl Into<String>, extra: Value) -> ApiError {
        let mut body = Map::new();
        body.insert("error".into(), Value::String(error.into()));
        if let Value::Object(m) = extra {
            body.extend(m);
        }
        ApiError {
            status,
            body: Value::Object(body),
        }
    }

    /// 400 with a message.
    pub fn bad_request(error: impl Into<String>) -> ApiError {
        ApiError::with(StatusCode::BAD_REQUEST, error, Value::Null)
    }

    /// 400 `{"error":"<field> too long","limit":N}`.
    pub fn too_long(field: &str, limit: usize) -> ApiError {
        ApiError::with(
            StatusCode::BAD_REQUEST,
            format!("{field} too long"),
            json!({ "field": field, "limit": limit }),
        )
    }

    /// 400 `{"error":"secret detected","kinds":[...]}`.
    pub fn secret(kinds: Vec<&'static str>) -> ApiError {
        ApiError::with(
            StatusCode::BAD_REQUEST,
            "secret detected",
            json!({ "kinds": kinds }),
        )
    }

    /// 404 with a message.
    pub fn not_found(error: impl Into<String>) -> ApiError {
        ApiError::with(StatusCode::NOT_FOUND, error, Value::Null)
    }

    /// 403 with a message.
    pub fn forbidden(error: impl Into<String>) -> ApiError {
        ApiError::with(StatusCode::FORBIDDEN, error, Value::Null)
    }

    /// 413 for a body over the limit.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::with(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body too large (limit {limit} bytes)"),
            json!({ "limit": limit }),
        )
    }

    /// A reply with an arbitrary status and body (used for `_op` replays and the `/card` 404).
    pub fn raw(status: StatusCode, body: Value) -> ApiError {
        ApiError { status, body }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let status = match e {
            StoreError::Closed | StoreError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let report = e.report();
        tracing::error!(error = %report, "store failure");
        ApiError::with(status, format!("store failure: {report}"), Value::Null)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body)).into_response()
    }
}

/// The result type of handlers.
pub type ApiResult<T> = Result<T, ApiError>;

/// Check a text field's length in characters against its limit.
pub fn check_len(field: &str, value: &str, limit: usize) -> ApiResult<()> {
    // Byte length bounds the char count from above, so most values skip the char walk.
    if value.len() > limit && value.chars().count() > limit {
        return Err(ApiError::too_long(field, limit));
    }
    Ok(())
}

/// A required text field, trimmed: 400 `<field> required` when it is blank, `<field> too long`
/// past `limit` characters.
pub fn check_required(field: &str, value: &str, limit: usize) -> ApiResult<String> {
    let v = value.trim();
    if v.is_empty() {
        return Err(ApiError::bad_request(format!("{field} required")));
    }
    check_len(field, v, limit)?;
    Ok(v.to_string())
}

/// Required text fields `(name, value, limit)`, trimmed: 400 `message` when any is blank, then
/// each checked against its limit, in order.
pub fn check_all_required<const N: usize>(
    fields: [(&str, &str, usize); N],
    message: &str,
) -> ApiResult<[String; N]> {
    let values = fields.map(|(_, v, _)| v.trim().to_string());
    if values.iter().any(String::is_empty) {
        return Err(ApiError::bad_request(message));
    }
    for ((name, _, limit), v) in fields.iter().zip(&values) {
        check_len(name, v, *limit)?;
    }
    Ok(values)
}

/// An optional text field trimmed; absent when blank.
pub fn non_blank(value: Option<&str>) -> Option<String> {
    value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// The first of two optional names that is not blank, trimmed.
pub fn first_named(a: &Option<String>, b: &Option<String>) -> Option<String> {
    non_blank(a.as_deref()).or_else(|| non_blank(b.as_deref()))
}

/// Check an optional text field.
pub fn check_opt(field: &str, value: &Option<String>, limit: usize) -> ApiResult<()> {
    match value {
        Some(v) => check_len(field, v, limit),
        None => Ok(()),
    }
}

/// Refuse text carrying secrets.
pub fn check_secrets<'a>(texts: impl IntoIterator<Item = &'a str>) -> ApiResult<()> {
    let mut kinds: Vec<&'static str> = Vec::new();
    for t in texts {
        for k in trantor_proto::secrets::detect(t) {
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        }
    }
    if kinds.is_empty() {
        Ok(())
    } else {
        Err(ApiError::secret(kinds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_long_names_field_and_limit() {
        let e = check_len("title", &"x".repeat(201), 200).err();
        let e = e.map(|e| e.body).unwrap_or_default();
        assert_eq!(e["error"], "title too long");
        assert_eq!(e["limit"], 200);
        // Multi-byte characters count as one each.
        assert!(check_len("title", &"é".repeat(200), 200).is_ok());
    }

    #[test]
    fn store_errors_are_5xx() {
        assert_eq!(
            ApiError::from(StoreError::Closed).status,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            ApiError::from(StoreError::db("boom")).status,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
