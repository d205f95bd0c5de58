//! A write that times out is resolved through `GET /_op` (the MCP's idempotent writes).
//!
//! A scripted HTTP server holds the write without answering and answers the `/_op` lookup, so
//! the three outcomes (committed, rejected, unknown) are each seen by the client.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use trantor_proto::{ClientError, HubClient, SendReply, SendRequest};

/// One whole request: the headers, then as many body bytes as `content-length` says.
async fn read_request(sock: &mut tokio::net::TcpStream) -> String {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&data).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())
                        .flatten()
                })
                .unwrap_or(0);
            if data.len() >= end + 4 + len {
                return text;
            }
        }
        match sock.read(&mut buf).await {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&data).to_string(),
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    }
}

/// Serve: any POST is held (never answered); `GET /_op?id=<op>` answers `op_reply` after
/// checking that the id is the one the write carried.
async fn scripted_hub(op_reply: &'static str) -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        let mut seen_op = String::new();
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let req = read_request(&mut sock).await;
            if req.starts_with("POST") {
                if let Some(i) = req.find("\"_op\":\"") {
                    seen_op = req[i + 7..].split('"').next().unwrap_or("").to_string();
                }
                held.push(sock);
                continue;
            }
            let body = if req.contains(&format!("id={seen_op}")) && !seen_op.is_empty() {
                op_reply.to_string()
            } else {
                r#"{"status":"unknown"}"#.to_string()
            };
            let resp = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(resp.as_bytes()).await;
        }
    });
    (url, task)
}

fn req() -> SendRequest {
    SendRequest {
        from: "a:p".into(),
        to: Some("b:p".into()),
        text: "hello".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn committed_outcome_is_the_reply() {
    let (url, task) =
        scripted_hub(r#"{"status":"committed","code":200,"body":{"ok":true,"id":7}}"#).await;
    let hub = HubClient::new(url).with_timeout(Duration::from_millis(400));
    let op = trantor_proto::identity::new_op_id();
    let r: SendReply = hub
        .post_with_op("/send", &req(), &op)
        .await
        .expect("resolved through /_op");
    assert_eq!(r.id, 7);
    task.abort();
}

#[tokio::test]
async fn rejected_outcome_is_the_refusal() {
    let (url, task) = scripted_hub(
        r#"{"status":"rejected","code":409,"body":{"error":"no drill line on card #1"}}"#,
    )
    .await;
    let hub = HubClient::new(url).with_timeout(Duration::from_millis(400));
    let r: Result<SendReply, _> = hub
        .post_with_op("/send", &req(), &trantor_proto::identity::new_op_id())
        .await;
    match r {
        Err(ClientError::Http { status, body, .. }) => {
            assert_eq!(status, 409);
            assert_eq!(body.error, "no drill line on card #1");
        }
        other => panic!("expected the stored refusal, got {other:?}"),
    }
    task.abort();
}

#[tokio::test]
async fn unknown_outcome_stays_a_timeout() {
    let (url, task) = scripted_hub(r#"{"status":"unknown"}"#).await;
    let hub = HubClient::new(url).with_timeout(Duration::from_millis(400));
    let r: Result<SendReply, _> = hub
        .post_with_op("/send", &req(), &trantor_proto::identity::new_op_id())
        .await;
    assert!(
        matches!(r, Err(ClientError::Timeout { .. })),
        "an unknown outcome is ambiguous: {r:?}"
    );
    task.abort();
}
