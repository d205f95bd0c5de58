//! `trantor send`, `trantor inbox`, `trantor peers`.

use super::{Common, HubResult, print_json, table, usage};
use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;
use trantor_mcp::render;
use trantor_proto::identity::new_op_id;
use trantor_proto::{InboxReply, Message, SendReply, SendRequest, now_ms};

pub(crate) const SEND_HELP: &str = concat!(
    "\
Examples:
  trantor send claude:web \"please take #3\"          a contract: wakes the seat
  trantor send claude:web \"FYI: CI is red\" --no-wake  context for its next turn
  trantor send all \"standup in 5\" --kind status      broadcast, never wakes anyone
  echo \"long text\" | trantor send codex:web -        text from stdin
  trantor send claude:web \"yes, port 8080\" --re 41   answer message #41

Prints the new message id (`--json`: {\"ok\":true,\"id\":N}).
",
    exit_codes!()
);

pub(crate) const INBOX_HELP: &str = concat!(
    "\
Examples:
  trantor inbox                 the last 20 messages to this session (marks nothing read)
  trantor inbox --unread        the oldest 20 past this session's delivery ledger; marks those read
  trantor inbox --since 40      the oldest 20 after message #40 (page on with --since <last id>)
  trantor inbox --wait 60       wait up to 60 s for new messages (the oldest 20 of them)
  trantor inbox --limit 5       the last 5 (with --since/--unread/--wait: the first 5)
  trantor inbox --session claude:web --json

When --limit leaves messages out, a line on stderr says how many and where to page on
(`--json`: \"more\": N and \"next\": the --since value that reads on).

",
    exit_codes!()
);

pub(crate) const PEERS_HELP: &str = concat!(
    "\
Lists every session the hub knows: online ones first, this project's first, with status, runner
phase, model and last-seen time. `--json` prints the hub's /peers reply.

Examples:
  trantor peers
  trantor peers --project web      only sessions of project web
  trantor peers --online --json

",
    exit_codes!()
);

/// `trantor send` options.
#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// Recipient session (`claude:web`), or `all` to broadcast. A session the hub does not
    /// know yet gets the message all the same (it waits until that session reads), with a note
    /// on stderr in case the name is mistyped.
    pub to: String,
    /// Message text (several words are joined; `-` reads stdin).
    #[arg(required = true, num_args = 1..)]
    pub text: Vec<String>,
    /// Message kind: contract, status, ask, alert, receipt.
    #[arg(long)]
    pub kind: Option<String>,
    /// The id of the message this one answers.
    #[arg(long, value_name = "ID")]
    pub re: Option<i64>,
    /// Context only: do not wake the recipient for a turn.
    #[arg(long)]
    pub no_wake: bool,
    /// Stamp `base: <sha>` on the message, so a fresh seat branch starts there. Without a
    /// value: the integration head (the main checkout's branch) of this repository.
    #[arg(long, value_name = "REV", num_args = 0..=1, default_missing_value = "")]
    pub base: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

/// `trantor inbox` options.
#[derive(Debug, clap::Args)]
pub struct InboxArgs {
    /// Only messages after the session's delivery ledger, and mark them read.
    #[arg(long, conflicts_with_all = ["since", "wait"])]
    pub unread: bool,
    /// Only messages with an id above this one.
    #[arg(long, value_name = "ID")]
    pub since: Option<i64>,
    /// Wait up to this many seconds for the next new message (long-poll).
    #[arg(long, value_name = "SECS")]
    pub wait: Option<u64>,
    /// At most this many messages: the newest ones on a plain look; the oldest ones after the
    /// cursor with --since, --unread or --wait (so paging with --since loses nothing).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: u64,
    #[command(flatten)]
    pub common: Common,
}

/// `trantor peers` options.
#[derive(Debug, clap::Args)]
pub struct PeersArgs {
    /// Only sessions that are online now.
    #[arg(long)]
    pub online: bool,
    #[command(flatten)]
    pub common: Common,
}

pub(crate) async fn send(a: SendArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let text = if a.text.len() == 1 && a.text[0] == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        a.text.join(" ")
    };
    if text.trim().is_empty() {
        return Err(usage("the message text is empty"));
    }
    if a.to.trim().is_empty() {
        return Err(usage(
            "the recipient is empty (a session like claude:web, or all)",
        ));
    }
    let text = match &a.base {
        Some(rev) => format!(
            "{}\nbase: {}",
            text.trim_end(),
            super::crew::contract_base(rev)?
        ),
        None => text,
    };
    let req = SendRequest {
        from: id.session.clone(),
        to: Some(a.to.trim().to_string()),
        text,
        project: Some(id.project.clone()),
        re: a.re.filter(|r| *r > 0),
        kind: a.kind.filter(|k| !k.trim().is_empty()),
        wake: if a.no_wake { Some(false) } else { None },
    };
    let reply: SendReply = hub
        .post_with_op("/send", &req, &new_op_id())
        .await
        .hub(&hub)?;
    if a.common.json {
        print_json(&reply)?;
    } else {
        say!("sent #{} from {} to {}", reply.id, id.session, a.to.trim());
        if let Some(note) = unknown_recipient(&hub, a.to.trim()).await {
            eprintln!("{note}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A note when `to` is not among the sessions the hub knows: the message waits for it all the
/// same (a seat not started yet is normal), but a mistyped name would wait forever unnoticed.
/// Nothing when the hub's list cannot be read.
async fn unknown_recipient(hub: &trantor_proto::HubClient, to: &str) -> Option<String> {
    if to == trantor_proto::BROADCAST {
        return None;
    }
    let peers = hub.peers().await.ok()?.peers;
    (!peers.iter().any(|p| p.session == to)).then(|| {
        trantor_proto::text::sanitize(&format!(
            "note: {to} is not a session this hub knows yet (`trantor peers` lists them); \
             the message waits until {to} reads its mail"
        ))
        .to_string()
    })
}

/// All deliverable messages after `since` (peeking), following the hub's pages; with the
/// cursor the last page reached.
async fn read_all(
    hub: &trantor_proto::HubClient,
    session: &str,
    mut since: i64,
) -> anyhow::Result<(Vec<Message>, i64)> {
    let mut out = Vec::new();
    loop {
        let r = hub.inbox(session, since, true).await.hub(hub)?;
        let advanced = r.cursor > since;
        out.extend(r.messages);
        since = since.max(r.cursor);
        if !r.more || !advanced {
            return Ok((out, since));
        }
    }
}

/// Keep at most `limit` messages (ordered by id): the newest when `newest`, else the oldest.
/// Returns the kept ones and how many were left out.
fn page(mut msgs: Vec<Message>, limit: u64, newest: bool) -> (Vec<Message>, usize) {
    msgs.sort_by_key(|m| m.id);
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let left_out = msgs.len().saturating_sub(limit);
    if newest {
        msgs.drain(..left_out);
    } else {
        msgs.truncate(limit);
    }
    (msgs, left_out)
}

pub(crate) async fn inbox(a: InboxArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let now = now_ms();
    // (messages shown, how many were left out by --limit, the --since that reads on)
    let (messages, left_out, next): (Vec<Message>, usize, Option<i64>) = if let Some(secs) = a.wait
    {
        // Wait for what arrives after the newest message now in the inbox.
        let since = match a.since {
            Some(s) => s,
            None => read_all(&hub, &id.session, 0)
                .await?
                .0
                .iter()
                .map(|m| m.id)
                .max()
                .unwrap_or(0),
        };
        let r: InboxReply = hub
            .poll(&id.session, since, Duration::from_secs(secs.clamp(1, 290)))
            .await
            .hub(&hub)?;
        let (shown, left_out) = page(r.messages, a.limit, false);
        let next = shown.last().map(|m| m.id);
        (shown, left_out, next)
    } else if a.unread {
        let floor = match hub.peer(&id.session).await {
            Ok(p) => p.delivered_up_to,
            Err(trantor_proto::ClientError::Http { status: 404, .. }) => 0,
            Err(e) => return Err(super::hub_failure(hub.base(), e)),
        };
        let (all, cursor) = read_all(&hub, &id.session, floor).await?;
        let (shown, left_out) = page(all, a.limit, false);
        // Mark read exactly what is shown: up to the read cursor when nothing was left out,
        // else up to the last message shown (the rest stays unread for the next call).
        let up_to = if left_out == 0 {
            cursor
        } else {
            shown.last().map_or(floor, |m| m.id)
        };
        if up_to > floor {
            let _: serde_json::Value = hub
                .post(
                    "/delivered",
                    &serde_json::json!({ "session": id.session, "upTo": up_to }),
                )
                .await
                .hub(&hub)?;
        }
        let next = shown.last().map(|m| m.id);
        (shown, left_out, next)
    } else if let Some(since) = a.since {
        let (all, _) = read_all(&hub, &id.session, since).await?;
        let (shown, left_out) = page(all, a.limit, false);
        let next = shown.last().map(|m| m.id);
        (shown, left_out, next)
    } else {
        let (all, _) = read_all(&hub, &id.session, 0).await?;
        let (shown, left_out) = page(all, a.limit, true);
        (shown, left_out, None)
    };
    if a.common.json {
        let mut v = serde_json::json!({"session": id.session, "messages": messages});
        if left_out > 0 {
            v["more"] = serde_json::json!(left_out);
            if let Some(n) = next {
                v["next"] = serde_json::json!(n);
            }
        }
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    if left_out > 0 {
        match next {
            Some(n) if !a.unread => {
                eprintln!("{left_out} more after #{n}: trantor inbox --since {n}")
            }
            Some(_) => eprintln!("{left_out} more unread: trantor inbox --unread"),
            None => eprintln!(
                "{left_out} older message(s) not shown: raise --limit or page with --since"
            ),
        }
    }
    if messages.is_empty() {
        say!("no messages for {}", id.session);
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = messages
        .iter()
        .map(|m| {
            let mut tags = Vec::new();
            if let Some(k) = &m.kind {
                tags.push(k.clone());
            }
            if let Some(re) = m.re {
                tags.push(format!("re #{re}"));
            }
            if m.is_no_wake() {
                tags.push("no-wake".into());
            }
            vec![
                format!("#{}", m.id),
                render::age(m.ts, now),
                m.from.clone(),
                m.to.clone(),
                tags.join(","),
                m.text.clone(),
            ]
        })
        .collect();
    say!(
        "{}",
        table::render(&["ID", "AGE", "FROM", "TO", "KIND", "TEXT"], &rows)
    );
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn peers(a: PeersArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let mut reply = hub.peers().await.hub(&hub)?;
    reply.peers.retain(|p| {
        (!a.online || p.online)
            && a.common
                .project
                .as_deref()
                .is_none_or(|proj| p.project == proj)
    });
    reply.peers.sort_by(|x, y| {
        (!x.online, x.project != id.project, &x.session).cmp(&(
            !y.online,
            y.project != id.project,
            &y.session,
        ))
    });
    if a.common.json {
        print_json(&reply)?;
        return Ok(ExitCode::SUCCESS);
    }
    if reply.peers.is_empty() {
        say!("no sessions on the hub at {}", hub.base());
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = reply
        .peers
        .iter()
        .map(|p| {
            let state = if !p.online {
                "offline".to_string()
            } else if p.health != "ok" && !p.health.is_empty() {
                p.health.clone()
            } else {
                "online".to_string()
            };
            let phase = match (p.phase.as_deref(), p.phase_since) {
                (Some(ph), Some(t)) if !ph.is_empty() && t > 0 => {
                    format!("{ph} {}", render::age(t, now))
                }
                (Some(ph), _) => ph.to_string(),
                _ => String::new(),
            };
            let model: Vec<&str> = [p.llm.as_deref(), p.model.as_deref()]
                .into_iter()
                .flatten()
                .filter(|s| !s.is_empty())
                .collect();
            let mut session = p.session.clone();
            if p.session == id.session {
                session.push_str(" (you)");
            }
            vec![
                session,
                state,
                render::age(p.last_seen, now),
                phase,
                model.join("/"),
                p.status.clone(),
            ]
        })
        .collect();
    say!(
        "{}",
        table::render(
            &["SESSION", "STATE", "SEEN", "PHASE", "MODEL", "STATUS"],
            &rows
        )
    );
    Ok(ExitCode::SUCCESS)
}
