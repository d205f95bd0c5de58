//! One HTTP/1.1 exchange with the hub, no client library: a drill depends on nothing but the
//! hub, and a test controls every header it sends (signatures, odd lengths, bad encodings).

use std::io::{Read, Write};
use std::time::Duration;
use trantor_proto::text::url_encode;

/// What the hub answered: the status, the head's header lines (names lower-cased) and the body
/// (de-chunked).
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status code (0 when the reply had no status line).
    pub status: u16,
    /// `(name, value)` per header line, the name lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked when the reply was chunked.
    pub body: Vec<u8>,
}

impl Reply {
    /// The first value of header `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One HTTP/1.1 request to 127.0.0.1:`port` on a fresh connection (`Connection: close`), with
/// `headers` added after `Host` and `Content-Length`.
pub fn request(
    port: u16,
    method: &str,
    path_and_query: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Reply> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut head = format!(
        "{method} {path_and_query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
    );
    head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut raw_req = head.into_bytes();
    raw_req.extend_from_slice(body);
    s.write_all(&raw_req)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    Ok(parse_reply(&raw))
}

/// Split a raw reply into status, headers and (de-chunked) body.
fn parse_reply(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..split]);
    let rest = raw.get(split + 4..).unwrap_or_default();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Reply {
        status,
        headers,
        body,
    }
}

/// The body of a chunked reply (what follows its head), joined.
pub fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&rest[..eol]);
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        let tail = &rest[eol + 2..];
        if n == 0 || tail.len() < n {
            break;
        }
        out.extend_from_slice(&tail[..n]);
        rest = tail[n..].strip_prefix(b"\r\n").unwrap_or(&tail[n..]);
    }
    out
}

/// A JSON request to the hub on 127.0.0.1:`port`; returns the status and the JSON body (`Null`
/// when it is not JSON).
pub fn hub_request(
    port: u16,
    method: &str,
    path_and_query: &str,
    body: Option<&serde_json::Value>,
) -> std::io::Result<(u16, serde_json::Value)> {
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let reply = request(
        port,
        method,
        path_and_query,
        &[("Content-Type", "application/json")],
        payload.as_bytes(),
    )?;
    Ok((reply.status, reply.json()))
}

/// `POST /send` from `from` to `to`; returns the new message id (0 if the hub gave none).
pub fn hub_send(port: u16, from: &str, to: &str, project: &str, text: &str) -> i64 {
    let body = serde_json::json!({"from": from, "to": to, "project": project, "text": text});
    let (status, reply) = hub_request(port, "POST", "/send", Some(&body)).expect("send");
    assert!(status < 300, "send failed: {status} {reply}");
    reply["id"].as_i64().unwrap_or(0)
}

/// The states of message `id`'s delivery record on the hub (`GET /delivery?id=`), in order;
/// empty when the hub does not answer.
pub fn delivery_states(port: u16, id: i64) -> Vec<String> {
    let (_, v) = hub_request(port, "GET", &format!("/delivery?id={id}"), None)
        .unwrap_or((0, serde_json::Value::Null));
    v["states"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["state"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Every message delivered to `session` so far (peeking: the session's cursor is not moved).
pub fn hub_messages(port: u16, session: &str) -> Vec<serde_json::Value> {
    let q = format!("/inbox?session={}&since=0&peek=1", url_encode(session));
    match hub_request(port, "GET", &q, None) {
        Ok((_, v)) => v["messages"].as_array().cloned().unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_reply_is_joined_and_headers_are_read() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\n3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n";
        let r = parse_reply(raw);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-a"), Some("b"));
        assert_eq!(r.json(), serde_json::json!({"a": 1}));
    }

    #[test]
    fn a_reply_without_a_head_has_status_zero() {
        let r = parse_reply(b"garbage");
        assert_eq!(r.status, 0);
        assert!(r.body.is_empty());
    }
}
