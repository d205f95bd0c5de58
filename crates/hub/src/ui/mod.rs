//! The dashboard: one page (board, seats, flow, timeline) served by the hub at `/` and `/ui`.
//!
//! The assets are plain HTML, CSS and JavaScript compiled into the binary, so the page works
//! offline and needs no build step. The page is same-origin with the hub and talks only to the
//! hub's public routes (`/tasks`, `/card`, `/peers`, `/events`, `/recent`, `/contracts`,
//! `/stream?events=1`, and the writes `/task`, `/task/update`, `/send`), so it adds no API of its
//! own and no CORS: a strict Content-Security-Policy keeps it to its own origin.

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// The page shell.
const INDEX_HTML: &str = include_str!("index.html");
/// The page's script.
const APP_JS: &str = include_str!("app.js");
/// The page's style sheet.
const APP_CSS: &str = include_str!("app.css");
/// The icon.
const ICON_SVG: &str = include_str!("icon.svg");

/// The page may load only its own assets and talk only to its own origin; nothing may frame it.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The media type served at a dashboard path (`/ui` and its assets), for the OpenAPI document.
pub fn media_type(path: &str) -> Option<&'static str> {
    match path {
        "/ui" => Some("text/html"),
        "/ui/app.js" => Some("text/javascript"),
        "/ui/app.css" => Some("text/css"),
        "/ui/icon.svg" => Some("image/svg+xml"),
        _ => None,
    }
}

/// Whether a request's `Accept` header asks for a page rather than JSON.
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| {
            a.split(',')
                .any(|m| m.split(';').next().unwrap_or("").trim() == "text/html")
        })
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The assets change with the binary; revalidate rather than serve a stale page after an upgrade.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// `GET /ui`: the dashboard.
pub async fn page() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// `GET /ui/app.js`.
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

/// `GET /ui/app.css`.
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

/// `GET /ui/icon.svg`.
pub async fn icon() -> Response {
    asset("image/svg+xml", ICON_SVG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_only_when_asked_for() {
        let mut h = HeaderMap::new();
        assert!(!wants_html(&h));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        assert!(!wants_html(&h));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"),
        );
        assert!(wants_html(&h));
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        assert!(!wants_html(&h));
    }

    #[test]
    fn page_references_only_embedded_assets() {
        for path in ["/ui/app.js", "/ui/app.css", "/ui/icon.svg"] {
            assert!(INDEX_HTML.contains(path), "{path}");
            assert!(
                media_type(path).is_some(),
                "{path} has a documented media type"
            );
        }
        assert_eq!(media_type("/ui"), Some("text/html"));
        assert_eq!(media_type("/tasks"), None);
        assert!(!INDEX_HTML.contains("http://") && !INDEX_HTML.contains("https://"));
        assert!(!APP_JS.contains("http://") && !APP_JS.contains("https://"));
    }
}
