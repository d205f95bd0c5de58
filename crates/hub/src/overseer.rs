//! The overseer: collision watching. Every pass (the duty tick) looks for two conditions —
//! `same-project-sessions` (two or more live sessions on one project, at least one of them
//! not a declared crew seat: peer kind `agent` or `orch`) and `file-conflict` (two or more
//! sessions holding live claims on one file), in projects the policy gives an autonomy level
//! (`POST /policy {autonomy}`, for the project or `*`; the original watches every project).
//! Each condition is an *episode*: it fires once when
//! it starts — an `overseer.warn` event, a `⚠️ OVERSEER` message to the duty session and a
//! `🤝 OVERSEER` introduction to every party naming the others — stays quiet while it holds
//! (a newcomer alone is introduced), and ends once it has been gone for
//! `RELAY_OVERSEER_CLEAR_MS`. The episodes and the last pass's warnings live in the store's kv,
//! so a restart neither repeats nor forgets them (`docs/protocol.md` §15.3).

use crate::domain::duty::post_alert;
use crate::state::{AppState, KvDoc, Outbox, event};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use trantor_proto::lanes::OverseerWarning;
use trantor_proto::now_ms;
use trantor_store::{Store, StoreError, WriteTx};

/// kv key of the overseer's state.
pub const STATE_KEY: &str = "overseer.state";

/// A standing episode.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Episode {
    /// When it started, ms.
    pub since: i64,
    /// The last pass that saw it, ms.
    pub last_tick: i64,
    /// Sessions already introduced.
    pub sessions: BTreeSet<String>,
}

/// The persisted overseer state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverseerState {
    /// The last pass, ms.
    #[serde(default)]
    pub last_tick: i64,
    /// Episode key (`<project> <kind> [<files>]`) → episode.
    #[serde(default)]
    pub episodes: BTreeMap<String, Episode>,
    /// What the last pass saw.
    #[serde(default)]
    pub warnings: Vec<OverseerWarning>,
}

impl KvDoc for OverseerState {
    const KEY: &'static str = STATE_KEY;
    const WHAT: &'static str = "overseer";
}

/// Start the overseer pass; it stops when the hub shuts down.
pub fn spawn<S: Store>(hub: AppState<S>) {
    let every = hub.cfg.duty_tick;
    crate::cluster::spawn_leased(hub, every, "overseer", |hub| async move {
        pass(&hub, now_ms()).await
    });
}

/// The conditions standing at `now`.
pub(crate) fn detect(
    live: &[trantor_proto::Peer],
    claims: &[trantor_proto::claims::Claim],
) -> Vec<OverseerWarning> {
    let mut out = Vec::new();
    let mut by_project: BTreeMap<&str, Vec<&trantor_proto::Peer>> = BTreeMap::new();
    for p in live {
        if !p.project.is_empty() && !p.session.starts_with("hub:") {
            by_project.entry(p.project.as_str()).or_default().push(p);
        }
    }
    for (project, peers) in by_project {
        if peers.len() < 2 {
            continue;
        }
        let crew_only = peers
            .iter()
            .all(|p| matches!(p.kind.as_deref(), Some("agent" | "orch")));
        if crew_only {
            // A declared crew is the normal state of a project, not a collision.
            continue;
        }
        let mut sessions: Vec<String> = peers.iter().map(|p| p.session.clone()).collect();
        sessions.sort();
        out.push(OverseerWarning {
            kind: "same-project-sessions".into(),
            project: project.to_string(),
            detail: format!("{} are live on project {project}.", sessions.join(", ")),
            sessions,
            files: Vec::new(),
            since: 0,
        });
    }
    let mut by_file: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
    for c in claims {
        by_file
            .entry((c.project.as_str(), c.file.as_str()))
            .or_default()
            .insert(c.session.as_str());
    }
    for ((project, file), sessions) in by_file {
        if sessions.len() < 2 {
            continue;
        }
        let sessions: Vec<String> = sessions.into_iter().map(str::to_string).collect();
        out.push(OverseerWarning {
            kind: "file-conflict".into(),
            project: project.to_string(),
            detail: format!("{} are editing {file}.", sessions.join(", ")),
            sessions,
            files: vec![file.to_string()],
            since: 0,
        });
    }
    out
}

/// The episode key of a condition: `<project> <kind> [<files>]`.
pub(crate) fn key_of(w: &OverseerWarning) -> String {
    if w.files.is_empty() {
        format!("{} {}", w.project, w.kind)
    } else {
        format!("{} {} {}", w.project, w.kind, w.files.join(","))
    }
}

/// An overseer alert (cut to 2000 characters) to `to`.
fn send(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    to: &str,
    text: String,
    project: &str,
    now: i64,
) -> Result<(), StoreError> {
    let text: String = text.chars().take(2000).collect();
    post_alert(tx, out, to, project, text, false, now)?;
    Ok(())
}

fn intro(w: &OverseerWarning, me: &str, parties: &[String]) -> Option<String> {
    let rest: Vec<&str> = parties
        .iter()
        .map(String::as_str)
        .filter(|p| *p != me)
        .collect();
    let first = rest.first()?;
    let files = if w.files.is_empty() {
        String::new()
    } else {
        format!(
            " ({})",
            w.files
                .iter()
                .take(3)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Some(format!(
        "🤝 OVERSEER {}: you and {} are working on overlapping ground{files}. {} Coordinate \
         directly — relay_send to {first} — and split the work between you. No human needs to \
         relay this.",
        w.kind,
        rest.join(", "),
        w.detail
    ))
}

/// One overseer pass at `now`; returns the warnings that opened an episode.
pub async fn pass<S: Store>(
    hub: &AppState<S>,
    now: i64,
) -> Result<Vec<OverseerWarning>, StoreError> {
    let (duty, seen) = observe(hub, now).await?;
    let clear = hub.cfg.overseer_clear_ms;
    let (opened, out) = hub
        .write(move |tx| {
            let mut out = Outbox::default();
            let opened = record(tx, &mut out, seen, duty.as_deref(), now, clear)?;
            Ok((opened, out))
        })
        .await?;
    hub.publish(out);
    Ok(opened)
}

/// What a pass sees at `now`: the duty session in force and the conditions standing in the
/// watched projects.
async fn observe<S: Store>(
    hub: &AppState<S>,
    now: i64,
) -> Result<(Option<String>, Vec<OverseerWarning>), StoreError> {
    let cfg_duty = hub.cfg.duty_session.clone();
    let ttl = hub.cfg.claim_ttl_ms;
    let (duty, peers, claims, autonomy) = hub
        .store
        .read(move |tx| {
            // Only an explicitly stored autonomy level switches watching on for a project.
            let autonomy = tx
                .kv(crate::domain::policy::POLICY_KEY)?
                .and_then(|p| p.get("autonomy").and_then(|a| a.as_object().cloned()))
                .unwrap_or_default();
            Ok((
                crate::domain::duty::duty_session(cfg_duty.as_deref(), tx)?,
                tx.peers()?,
                crate::domain::claims::live_claims_with_ttl(tx, now, ttl)?,
                autonomy,
            ))
        })
        .await?;
    let live = hub.online_peers(peers, now);
    let watched = |project: &str| autonomy.contains_key(project) || autonomy.contains_key("*");
    let seen = detect(&live, &claims)
        .into_iter()
        .filter(|w| watched(&w.project))
        .collect();
    Ok((duty, seen))
}

/// Records the conditions `seen` at `now` in the overseer state: an episode opens (and is
/// announced) for a new one, a standing one introduces its newcomers, and an episode gone for
/// longer than `clear` ms ends. Returns the warnings that opened an episode.
fn record(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    seen: Vec<OverseerWarning>,
    duty: Option<&str>,
    now: i64,
    clear: i64,
) -> Result<Vec<OverseerWarning>, StoreError> {
    let mut state = OverseerState::load(tx)?;
    let mut opened = Vec::new();
    let mut current = Vec::new();
    let mut keys = BTreeSet::new();
    for mut w in seen {
        let key = key_of(&w);
        keys.insert(key.clone());
        let parties = parties_of(&w, duty);
        match state.episodes.get_mut(&key) {
            Some(ep) => {
                ep.last_tick = now;
                w.since = ep.since;
                introduce_newcomers(tx, out, ep, &w, &parties, now)?;
            }
            None => {
                w.since = now;
                state.episodes.insert(
                    key,
                    Episode {
                        since: now,
                        last_tick: now,
                        sessions: parties.iter().cloned().collect(),
                    },
                );
                announce(tx, out, &w, duty, &parties, now)?;
                opened.push(w.clone());
            }
        }
        current.push(w);
    }
    state
        .episodes
        .retain(|k, ep| keys.contains(k) || now - ep.last_tick <= clear);
    state.last_tick = now;
    state.warnings = current;
    state.save(tx)?;
    Ok(opened)
}

/// The parties of a condition: its sessions but the duty session.
fn parties_of(w: &OverseerWarning, duty: Option<&str>) -> Vec<String> {
    w.sessions
        .iter()
        .filter(|s| Some(s.as_str()) != duty)
        .cloned()
        .collect()
}

/// A standing episode introduces each party it has not introduced yet.
fn introduce_newcomers(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    ep: &mut Episode,
    w: &OverseerWarning,
    parties: &[String],
    now: i64,
) -> Result<(), StoreError> {
    let newcomers: Vec<String> = parties
        .iter()
        .filter(|p| !ep.sessions.contains(*p))
        .cloned()
        .collect();
    for me in &newcomers {
        if let Some(text) = intro(w, me, parties) {
            send(tx, out, me, text, &w.project, now)?;
        }
        ep.sessions.insert(me.clone());
    }
    Ok(())
}

/// A new episode: the `overseer.warn` event, the warning to the duty session, and (when there
/// are two parties or more) the introduction to every party.
fn announce(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    w: &OverseerWarning,
    duty: Option<&str>,
    parties: &[String],
    now: i64,
) -> Result<(), StoreError> {
    out.event(
        tx,
        event(
            now,
            "overseer.warn",
            &w.project,
            "overseer",
            json!({
                "kind": w.kind,
                "sessions": w.sessions,
                "files": w.files,
                "detail": w.detail,
                "narrated": false,
            }),
        ),
    )?;
    if let Some(d) = duty {
        let text = format!(
            "⚠️ OVERSEER {} [{}]: {} — if the parties are not already coordinating, message \
             them.",
            w.kind, w.project, w.detail
        );
        send(tx, out, d, text, &w.project, now)?;
    }
    if parties.len() > 1 {
        for me in parties {
            if let Some(text) = intro(w, me, parties) {
                send(tx, out, me, text, &w.project, now)?;
            }
        }
    }
    Ok(())
}
