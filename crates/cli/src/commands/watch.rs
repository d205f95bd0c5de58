//! `trantor watch`: a live feed of the bus over the hub's server-sent events (`GET /stream`,
//! docs/protocol.md §6) — watch sessions talk as it happens, in a terminal beside the crew.
//! A dropped stream reconnects by itself, and the messages missed meanwhile are read back from
//! `/recent` so the feed has no silent gap.

use super::{Common, HubResult};
use std::process::ExitCode;
use std::time::Duration;
use trantor_proto::{Message, PeersReply};

pub(crate) const WATCH_HELP: &str = concat!(
    "\
Prints every message the hub delivers to SESSION (default `all`: the broadcasts; name a session
to see what it receives) until Ctrl-C. Starts with the live sessions. With --json each message
is one JSON line.

Examples:
  trantor watch                     broadcasts
  trantor watch codex:web           what the codex seat receives
  trantor watch --json | jq .text

",
    exit_codes!()
);

/// `trantor watch` options.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The session whose deliveries to watch (`all` for broadcasts).
    #[arg(default_value = "all")]
    pub target: String,
    #[command(flatten)]
    pub common: Common,
}

/// Splits an SSE byte stream into the `data:` payloads of complete frames.
#[derive(Debug, Default)]
pub(crate) struct SseFrames {
    buf: String,
}

impl SseFrames {
    /// Feed a chunk; the data of every frame it completes (comments and named events other than
    /// unnamed data frames are skipped).
    pub(crate) fn push(&mut self, chunk: &str) -> Vec<String> {
        self.buf.push_str(&chunk.replace("\r\n", "\n"));
        let mut out = Vec::new();
        while let Some(i) = self.buf.find("\n\n") {
            let frame: String = self.buf.drain(..i + 2).collect();
            let mut data = Vec::new();
            let mut named = false;
            for line in frame.lines() {
                if let Some(d) = line.strip_prefix("data:") {
                    data.push(d.strip_prefix(' ').unwrap_or(d));
                } else if line.starts_with("event:") {
                    named = true;
                }
            }
            if !data.is_empty() && !named {
                out.push(data.join("\n"));
            }
        }
        out
    }
}

/// `HH:MM:SS` (UTC) of a timestamp in ms.
fn clock(ms: i64) -> String {
    let s = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// One message as the feed prints it.
pub(crate) fn line(m: &Message) -> String {
    format!("  [{}] {} → {}: {}", clock(m.ts), m.from, m.to, m.text)
}

/// Run `trantor watch`.
pub(crate) async fn watch(a: WatchArgs) -> anyhow::Result<ExitCode> {
    let (_, hub) = a.common.connect()?;
    let peers: PeersReply = hub.peers().await.hub(&hub)?;
    if !a.common.json {
        say!(
            "trantor watch → {} (watching {:?}) — Ctrl-C to stop",
            hub.base(),
            a.target
        );
        let live: Vec<_> = peers.peers.iter().filter(|p| p.online).collect();
        say!("  live sessions ({}):", live.len());
        for p in live {
            if p.status.is_empty() {
                say!("   🟢 {}", p.session);
            } else {
                say!("   🟢 {}  — {}", p.session, p.status);
            }
        }
    }
    let query = vec![("session", a.target.clone())];
    let mut last_id: i64 = 0;
    let mut attempt: u32 = 0;
    loop {
        let resp = match hub.open_stream("/stream", &query).await {
            Ok(r) => r,
            // A refusal (bad session, 401) will not heal by retrying.
            Err(e) if e.status().is_some() => return Err(e).hub(&hub),
            Err(e) => {
                attempt += 1;
                let wait = Duration::from_millis(500u64 << attempt.min(4));
                eprintln!(
                    "  (hub unreachable: {e} — retrying in {:.1}s)",
                    wait.as_secs_f64()
                );
                tokio::time::sleep(wait).await;
                continue;
            }
        };
        attempt = 0;
        if last_id > 0 {
            // Read back what arrived while the stream was down.
            let missed: Result<trantor_proto::RecentReply, _> =
                hub.get("/recent", &[("limit", "200".to_string())]).await;
            if let Ok(r) = missed {
                let since = last_id;
                let missed = r
                    .messages
                    .iter()
                    .filter(|m| m.id > since && m.deliverable_to(&a.target));
                for m in missed {
                    last_id = last_id.max(m.id);
                    show(m, a.common.json)?;
                }
            }
        }
        let mut frames = SseFrames::default();
        let mut resp = resp;
        loop {
            match resp.chunk().await {
                Ok(Some(bytes)) => {
                    for data in frames.push(&String::from_utf8_lossy(&bytes)) {
                        if let Ok(m) = serde_json::from_str::<Message>(&data)
                            && m.id > last_id
                        {
                            last_id = m.id;
                            show(&m, a.common.json)?;
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    eprintln!("  (stream dropped: {e} — reconnecting)");
                    break;
                }
            }
        }
    }
}

fn show(m: &Message, json: bool) -> anyhow::Result<()> {
    if json {
        super::emit_raw(&serde_json::to_string(m)?);
    } else {
        say!("{}", line(m));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_across_chunks_and_skip_comments_and_named_events() {
        let mut f = SseFrames::default();
        assert!(f.push(": connected as all\n\n").is_empty());
        assert!(f.push("data: {\"a\"").is_empty());
        assert_eq!(f.push(":1}\n\ndata: x\r\n\r\n"), vec!["{\"a\":1}", "x"]);
        assert!(f.push("event: ev\ndata: {}\n\n").is_empty());
        assert!(f.push(": ka\n\n").is_empty());
        assert_eq!(f.push("data: a\ndata: b\n\n"), vec!["a\nb"]);
    }

    #[test]
    fn a_message_line_names_time_sender_and_recipient() {
        let m = Message {
            id: 1,
            ts: 3_723_000,
            from: "claude:web".into(),
            to: "codex:web".into(),
            project: "web".into(),
            text: "take #4".into(),
            re: None,
            kind: None,
            wake: None,
        };
        assert_eq!(line(&m), "  [01:02:03] claude:web → codex:web: take #4");
    }
}
