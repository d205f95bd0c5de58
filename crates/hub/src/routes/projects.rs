//! The project-grouped views and lane maintenance: `GET /projects`, `GET /phases`,
//! `POST /project/delete`, `POST /project/merge` (`docs/protocol.md` §15.5).

use crate::domain::cards::{cards_of, lane_cards};
use crate::domain::policy::project_key;
use crate::domain::policy::{ALIASES_KEY, canon};
use crate::error::{ApiError, ApiResult, check_all_required, check_len, check_required};
use crate::extract::{JsonBody, Params};
use crate::openapi::{RouteDoc, Ty, Verb, f, shape};
use crate::state::{AppState, Outbox, event};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{MethodRouter, get, post};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use trantor_proto::lanes::{
    DeleteReply, DeleteRequest, DerivedPhase, MergeReply, MergeRequest, PhaseNode,
    PhasesDerivedReply, ProjectAgent, ProjectRow, ProjectsReply,
};
use trantor_proto::{CARD_STATUSES, Card, CardStatus, limits, now_ms};
use trantor_store::{CardFilter, Store, StoreError, WriteTx};

/// Time gap that starts a new "Setup N" phase among untagged cards.
const PHASE_GAP_MS: i64 = 8 * 3_600_000;

/// This module's routes, for the route table.
pub fn table<S: Store>() -> Vec<(RouteDoc, MethodRouter<AppState<S>>)> {
    vec![
        (
            RouteDoc {
                verb: Verb::Get,
                path: "/projects",
                summary: "Projects with their sessions, card counts, a derived phase line and idleness",
                query: &[],
                body: None,
                reply: Some(shape::<ProjectsReply>),
            },
            get(projects::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Get,
                path: "/phases",
                summary: "A project's cards grouped into derived phases (title prefix, explicit \
                          phase, time cluster)",
                query: fields![f("project", Ty::Str, true, "project").max(limits::PROJECT)],
                body: None,
                reply: Some(shape::<PhasesDerivedReply>),
            },
            get(phases::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/project/delete",
                summary: "Forget a project's cards, brief and phase goals (owner); refused with \
                          open contracts or, unless force, open cards",
                query: &[],
                body: Some(shape::<DeleteRequest>),
                reply: Some(shape::<DeleteReply>),
            },
            post(delete::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/project/merge",
                summary: "Fold one project lane into another; the old name becomes an alias",
                query: &[],
                body: Some(shape::<MergeRequest>),
                reply: Some(shape::<MergeReply>),
            },
            post(merge::<S>),
        ),
    ]
}

fn fmt_age(ms: i64) -> String {
    let m = ms.max(0) / 60_000;
    if m > 48 * 60 {
        format!("{}d ago", m / 1440)
    } else if m > 90 {
        format!("{}h ago", m / 60)
    } else {
        format!("{m}m ago")
    }
}

fn zero_counts() -> BTreeMap<String, i64> {
    CARD_STATUSES.iter().map(|s| (s.to_string(), 0)).collect()
}

fn brief_of(doc: &Option<Value>) -> String {
    doc.as_ref()
        .and_then(|d| d.get("brief"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// `GET /projects`: the project-grouped home of the dashboard.
pub async fn projects<S: Store>(State(hub): State<AppState<S>>) -> ApiResult<Json<ProjectsReply>> {
    let now = now_ms();
    let (peers, cards, briefs, aliases) = hub
        .store
        .read(|tx| {
            Ok((
                tx.peers()?,
                tx.cards(&CardFilter::default())?,
                tx.kv_prefix("project:")?,
                tx.kv(ALIASES_KEY)?.unwrap_or(Value::Null),
            ))
        })
        .await?;
    let briefs: BTreeMap<String, Value> = briefs
        .into_iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("project:")?.to_string(), v)))
        .collect();
    let mut rows: BTreeMap<String, ProjectRow> = BTreeMap::new();
    for p in peers {
        let p = hub.live_peer(p, now);
        let e = row_for(&mut rows, &briefs, row_name(&aliases, &p.project));
        e.last_activity = e.last_activity.max(p.last_seen);
        e.agents.push(ProjectAgent {
            online: p.online,
            status: p.status.clone(),
            health: p.health.clone(),
            llm: p.llm.clone().unwrap_or_default(),
            model: p.model.clone().unwrap_or_default(),
            hook_version: p.hook_version.clone().unwrap_or_default(),
            stale_hooks: p.stale_hooks,
            session: p.session,
        });
    }
    for c in &cards {
        let e = row_for(&mut rows, &briefs, row_name(&aliases, &c.project));
        *e.tasks.entry(c.status.to_string()).or_default() += 1;
        if c.status == CardStatus::Doing {
            e.doing_titles.push(c.title.clone());
        }
        e.last_activity = e.last_activity.max(c.updated);
    }
    let mut out: Vec<ProjectRow> = rows.into_values().collect();
    for e in &mut out {
        e.idle = !e.agents.iter().any(|a| a.online);
        e.phase = if e.idle {
            idle_line(e.last_activity, now)
        } else {
            phase_line(&e.tasks, &e.doing_titles)
        };
    }
    Ok(Json(ProjectsReply { projects: out }))
}

/// The row a project is shown under: its name through the alias table (up to 8 hops), or
/// `(unassigned)` for none.
fn row_name(aliases: &Value, project: &str) -> String {
    let mut name = project.trim().to_string();
    for _ in 0..8 {
        match aliases.get(&name).and_then(Value::as_str) {
            Some(n) if n != name => name = n.to_string(),
            _ => break,
        }
    }
    if name.is_empty() {
        "(unassigned)".into()
    } else {
        name
    }
}

/// The row of project `k`, made (with its brief) on first use.
fn row_for<'a>(
    rows: &'a mut BTreeMap<String, ProjectRow>,
    briefs: &BTreeMap<String, Value>,
    k: String,
) -> &'a mut ProjectRow {
    let brief = brief_of(&briefs.get(&k).cloned());
    let brief_ts = briefs
        .get(&k)
        .and_then(|b| b.get("ts"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    rows.entry(k.clone()).or_insert_with(|| ProjectRow {
        project: k,
        brief,
        tasks: zero_counts(),
        last_activity: brief_ts,
        ..ProjectRow::default()
    })
}

/// The phase line of a project no session is online on.
fn idle_line(last_activity: i64, now: i64) -> String {
    format!(
        "idle · last activity {}",
        if last_activity > 0 {
            fmt_age(now - last_activity)
        } else {
            "unknown".into()
        }
    )
}

/// Where a project is, in one line, from its cards by status (the first that holds: failed,
/// blocked, testing, doing, all done, todo).
fn phase_line(tasks: &BTreeMap<String, i64>, doing_titles: &[String]) -> String {
    let n = |s: &str| tasks.get(s).copied().unwrap_or(0);
    let (todo, doing, testing, failed, done, blocked) = (
        n("todo"),
        n("doing"),
        n("testing"),
        n("failed"),
        n("done"),
        n("blocked"),
    );
    let total = todo + doing + testing + failed + done + blocked;
    let plural = |k: i64| if k > 1 { "s" } else { "" };
    if total == 0 {
        "no cards yet".into()
    } else if failed > 0 {
        format!("{failed} FAILED — fixing")
    } else if blocked > 0 {
        format!("blocked on {blocked} card{}", plural(blocked))
    } else if testing > 0 {
        format!("verifying: {testing} in test")
    } else if doing > 0 {
        let more = if doing_titles.len() > 2 { "…" } else { "" };
        format!(
            "building: {}{more}",
            doing_titles
                .iter()
                .take(2)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else if done == total {
        "shipped — all cards done".into()
    } else if todo > 0 {
        format!("planned: {todo} card{} queued", plural(todo))
    } else {
        "in progress".into()
    }
}

/// The phase family of a card title: `P5a …` → `P5`, `CB…` → `CB`, `FA…` → `FA`,
/// `RunCost…` → `RunCost`.
fn phase_family(title: &str) -> Option<String> {
    let s = title.trim();
    let b = s.as_bytes();
    if b.first().is_some_and(|c| c.eq_ignore_ascii_case(&b'p')) {
        let digits: String = s[1..].chars().take_while(char::is_ascii_digit).collect();
        if !digits.is_empty() {
            let mut rest = s[1 + digits.len()..].chars();
            let mut next = rest.clone().next();
            if next.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_uppercase()) {
                rest.next();
                next = rest.next();
            }
            if next.is_none_or(|c| c.is_whitespace() || "-:.".contains(c)) {
                return Some(format!("P{digits}"));
            }
        }
    }
    let lower = s.to_ascii_lowercase();
    let sep_or_digit = |i: usize| s[i..].chars().next();
    if lower.starts_with("cbfix")
        || (lower.starts_with("cb")
            && sep_or_digit(2).is_some_and(|c| {
                c.is_ascii_digit()
                    || c.is_whitespace()
                    || "-:.".contains(c)
                    || (c == 'v' || c == 'V')
                        && s[3..].chars().next().is_some_and(|d| d.is_ascii_digit())
            }))
    {
        return Some("CB".into());
    }
    if lower.starts_with("fa")
        && sep_or_digit(2)
            .is_some_and(|c| c.is_ascii_digit() || c.is_whitespace() || "-:.".contains(c))
    {
        return Some("FA".into());
    }
    if lower.starts_with("runcost") {
        return Some("RunCost".into());
    }
    None
}

fn phase_theme(cards: &[&Card]) -> String {
    let mut subs: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for c in cards {
        let t = c.title.trim();
        let t = if phase_family(t).is_some() {
            t.split_once(|ch: char| ch.is_whitespace() || ch == ':')
                .map(|(_, r)| r)
                .unwrap_or("")
        } else {
            t
        };
        let t = t.trim_start_matches(|ch: char| ch.is_whitespace() || ":-–—#".contains(ch));
        let subject = t
            .split(['—', '–'])
            .next()
            .unwrap_or("")
            .split(" - ")
            .next()
            .unwrap_or("")
            .trim();
        if subject.is_empty() {
            continue;
        }
        let key: String = subject.to_lowercase().chars().take(22).collect();
        if !seen.insert(key) {
            continue;
        }
        subs.push(subject.chars().take(48).collect());
        if subs.len() >= 3 {
            break;
        }
    }
    subs.join(" · ").chars().take(120).collect()
}

fn brand(a: &str) -> String {
    match a.find(':') {
        Some(i) if i > 0 => a[..i].to_string(),
        _ => a.to_string(),
    }
}

fn is_orch(a: &str) -> bool {
    const CREW: [&str; 10] = [
        "codex", "gemini", "kimi", "deepseek", "claude", "qwen", "grok", "glm", "mistral", "llama",
    ];
    let b = brand(a);
    !b.is_empty() && !CREW.iter().any(|c| c.eq_ignore_ascii_case(&b))
}

/// `GET /phases?project=P`: the project's cards grouped into ordered phases.
pub async fn phases<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<PhasesDerivedReply>> {
    let asked = p.required("project")?.to_string();
    check_len("project", &asked, limits::PROJECT)?;
    let (project, mut cards, brief, goals) = hub
        .store
        .read(move |tx| {
            let (project, cards) = lane_cards(tx, &asked)?;
            let brief = tx.kv(&project_key(&project))?;
            let goals = tx.kv_prefix(&format!("phase:{project}::"))?;
            Ok((project, cards, brief, goals))
        })
        .await?;
    cards.sort_by_key(|c| (c.ts, c.id));
    let keyed = phase_keys(&cards);
    let prefix = format!("phase:{project}::");
    let goal_of = |key: &str| -> String {
        goals
            .iter()
            .find(|(k, _)| k.strip_prefix(&prefix) == Some(key))
            .and_then(|(_, v)| v.get("goal").and_then(Value::as_str))
            .unwrap_or("")
            .to_string()
    };
    let mut phases: Vec<DerivedPhase> = group_in_order(&keyed)
        .into_iter()
        .map(|(key, cs)| derive_phase(key, &cs, goal_of(key)))
        .collect();
    phases.sort_by_key(|p| p.start);
    let misc = keyed
        .iter()
        .filter(|(k, _)| k.starts_with("Setup "))
        .count();
    Ok(Json(PhasesDerivedReply {
        project,
        brief: brief_of(&brief),
        total: cards.len() as i64,
        sparse: !cards.is_empty() && misc * 2 > cards.len(),
        derived_by: "title-prefix + time-cluster".into(),
        phases,
    }))
}

/// The phase key of each card (sorted by creation): its explicit phase, else its title's
/// family, else `Setup N`, a new round of which starts after a gap of [`PHASE_GAP_MS`].
fn phase_keys(cards: &[Card]) -> Vec<(String, &Card)> {
    let mut misc_round = 0;
    let mut last_misc = 0i64;
    let mut keyed = Vec::new();
    for c in cards {
        let explicit = c.phase.trim();
        let key = if !explicit.is_empty() {
            explicit.to_string()
        } else if let Some(f) = phase_family(&c.title) {
            f
        } else {
            if last_misc == 0 || c.ts - last_misc > PHASE_GAP_MS {
                misc_round += 1;
            }
            if c.ts != 0 {
                last_misc = c.ts;
            }
            format!("Setup {misc_round}")
        };
        keyed.push((key, c));
    }
    keyed
}

/// The cards of each key, the keys in the order they first appear.
fn group_in_order<'a>(keyed: &'a [(String, &'a Card)]) -> Vec<(&'a str, Vec<&'a Card>)> {
    let mut order: Vec<&str> = Vec::new();
    let mut groups: BTreeMap<&str, Vec<&Card>> = BTreeMap::new();
    for (k, c) in keyed {
        if !groups.contains_key(k.as_str()) {
            order.push(k);
        }
        groups.entry(k).or_default().push(c);
    }
    order
        .into_iter()
        .map(|k| (k, groups.remove(k).unwrap_or_default()))
        .collect()
}

/// A phase's status from its cards by status: `failed`, `active`, `done`, `blocked` or
/// `planned`, the first that holds.
fn phase_status(counts: &BTreeMap<String, i64>, total: i64) -> &'static str {
    let n = |s: &str| counts.get(s).copied().unwrap_or(0);
    if n("failed") > 0 {
        "failed"
    } else if n("doing") > 0 || n("testing") > 0 {
        "active"
    } else if total > 0 && n("done") == total {
        "done"
    } else if n("blocked") > 0 {
        "blocked"
    } else if n("todo") == total {
        "planned"
    } else {
        "active"
    }
}

/// A card as a phase shows it.
fn phase_node(c: &Card) -> PhaseNode {
    PhaseNode {
        id: c.id,
        title: c.title.clone(),
        assignee: c.assignee.clone(),
        agent: brand(&c.assignee),
        model: c.model.clone(),
        status: c.status.clone(),
        difficulty: c.difficulty.clone(),
        ts: c.ts,
        updated: if c.updated > 0 { c.updated } else { c.ts },
        deps: c.deps.clone(),
        source: c.source.clone(),
    }
}

/// The phase `key` of cards `cs`, with its `goal`.
fn derive_phase(key: &str, cs: &[&Card], goal: String) -> DerivedPhase {
    let mut counts = zero_counts();
    for c in cs {
        *counts.entry(c.status.to_string()).or_default() += 1;
    }
    let total = cs.len() as i64;
    let status = phase_status(&counts, total);
    let (orch, crew): (Vec<&&Card>, Vec<&&Card>) = cs.iter().partition(|c| is_orch(&c.assignee));
    let crew: Vec<PhaseNode> = crew.into_iter().map(|c| phase_node(c)).collect();
    let orchestrators: Vec<PhaseNode> = orch.into_iter().map(|c| phase_node(c)).collect();
    let mut agents: Vec<String> = Vec::new();
    for c in &crew {
        if !c.agent.is_empty() && !agents.contains(&c.agent) {
            agents.push(c.agent.clone());
        }
    }
    DerivedPhase {
        key: key.to_string(),
        label: key.to_string(),
        theme: phase_theme(cs),
        goal,
        start: cs.iter().map(|c| c.ts).min().unwrap_or(0),
        end: cs
            .iter()
            .map(|c| if c.updated > 0 { c.updated } else { c.ts })
            .max()
            .unwrap_or(0),
        counts,
        total,
        status: status.into(),
        agents,
        crew,
        orchestrators,
    }
}

/// `POST /project/delete {project, force?}` (owner): forget the project's cards, brief and
/// phase goals. Refused (409, nothing changed) while a session on the project has open
/// contracts, and — unless `force` — while it has open cards.
pub async fn delete<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<DeleteRequest>,
) -> ApiResult<Json<DeleteReply>> {
    let asked = check_required("project", &req.project, limits::PROJECT)?;
    let now = now_ms();
    let a = asked.clone();
    let (project, cards, peers) = hub
        .store
        .read(move |tx| {
            let (project, cards) = lane_cards(tx, &a)?;
            let peers: Vec<String> = tx
                .peers()?
                .into_iter()
                .filter(|p| p.project == project)
                .map(|p| p.session)
                .collect();
            Ok((project, cards, peers))
        })
        .await?;
    if cards.is_empty() && peers.is_empty() {
        let has_brief = {
            let k = project_key(&project);
            hub.store.read(move |tx| tx.kv(&k)).await?.is_some()
        };
        if !has_brief {
            return Err(ApiError::not_found(format!("no such project: {project}")));
        }
    }
    let open = open_contracts(&hub, &peers, &project, now).await?;
    if !open.is_empty() {
        return Err(ApiError::with(
            StatusCode::CONFLICT,
            format!(
                "project {project} has {} open contract(s): answer or let them lapse before \
                 deleting (nothing was deleted)",
                open.len()
            ),
            json!({ "openContracts": open }),
        ));
    }
    let live = cards
        .iter()
        .filter(|c| !matches!(c.status, CardStatus::Done | CardStatus::Stale))
        .count();
    if live > 0 && !req.force {
        return Err(ApiError::with(
            StatusCode::CONFLICT,
            format!(
                "project {project} has {live} open card(s); pass force:true to delete them too \
                 (nothing was deleted)"
            ),
            json!({ "openCards": live }),
        ));
    }
    let p = project.clone();
    let (n, out) = hub
        .write(move |tx| forget_project(tx, &p, &cards, now))
        .await?;
    hub.publish(out);
    let mut removed = BTreeMap::new();
    removed.insert("tasks".to_string(), n);
    removed.insert("peers".to_string(), 0);
    removed.insert("messages".to_string(), 0);
    removed.insert("events".to_string(), 0);
    Ok(Json(DeleteReply {
        ok: true,
        project,
        removed,
    }))
}

/// The open contracts of a project's sessions: unanswered dispatches within the contract
/// window, as `{id, from, to}`.
async fn open_contracts<S: Store>(
    hub: &AppState<S>,
    sessions: &[String],
    project: &str,
    now: i64,
) -> ApiResult<Vec<Value>> {
    let mut open: Vec<Value> = Vec::new();
    hub.store.ledger_current().await?;
    for s in sessions {
        let ledger = crate::domain::ledger::compute_ledger(
            hub,
            s,
            Some(project),
            now,
            hub.cfg.contract_window_ms,
            None,
            crate::domain::ledger::LedgerPage {
                after: 0,
                limit: 1000,
                rows: crate::domain::ledger::PageRows::Open,
            },
        )
        .await?;
        let unanswered = ledger
            .contracts
            .iter()
            .chain(ledger.abandoned_contracts.iter())
            .filter(|c| !c.answered);
        for c in unanswered {
            open.push(json!({ "id": c.id, "from": s, "to": c.to }));
        }
    }
    Ok(open)
}

/// Deletes a project's `cards` (each with its `deleted` event), its brief and its phase goals,
/// then records `project.deleted` (in the caller's transaction); returns the cards deleted.
fn forget_project(
    tx: &mut dyn WriteTx,
    project: &str,
    cards: &[Card],
    now: i64,
) -> Result<(i64, Outbox), StoreError> {
    let mut out = Outbox::default();
    for c in cards {
        tx.delete_card(c.id)?;
        out.event(
            tx,
            crate::domain::cards::card_event(
                c,
                "deleted",
                "hub",
                now,
                Some(c.status.as_str()),
                "deleted",
            ),
        )?;
    }
    tx.set_kv(&project_key(project), &Value::Null)?;
    for (k, _) in tx.kv_prefix(&format!("phase:{project}::"))? {
        tx.set_kv(&k, &Value::Null)?;
    }
    out.event(
        tx,
        event(
            now,
            "project.deleted",
            project,
            "hub",
            json!({ "cards": cards.len() }),
        ),
    )?;
    Ok((cards.len() as i64, out))
}

/// `POST /project/merge {from, to}`: fold lane `from` into `to`. Cards, peers and the brief move;
/// `from` becomes an alias of `to` (chains re-pointed), so every route taking a project resolves
/// the old name to `to`. Refused, nothing changed: a blank name (400), `from` = `to` (also
/// after aliases, or a `to` that is itself an alias of `from`: 409), a `to` that does not exist
/// (404).
pub async fn merge<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<MergeRequest>,
) -> ApiResult<Json<MergeReply>> {
    let [from, to] = check_all_required(
        [
            ("from", &req.from, limits::PROJECT),
            ("to", &req.to, limits::PROJECT),
        ],
        "distinct from+to required",
    )?;
    let now = now_ms();
    let result = hub
        .write(move |tx| {
            let to_c = canon(tx, &to)?;
            let from_c = canon(tx, &from)?;
            if from == to || from_c == to_c {
                return Ok(Err(ApiError::with(
                    StatusCode::CONFLICT,
                    format!("distinct from+to required: {from} already is {to_c}"),
                    json!({ "from": from, "to": to_c }),
                )));
            }
            let to_cards = cards_of(tx, &to_c)?;
            let peers = tx.peers()?;
            let to_exists = !to_cards.is_empty()
                || peers.iter().any(|p| p.project == to_c)
                || tx.kv(&project_key(&to_c))?.is_some_and(|v| !v.is_null());
            if !to_exists {
                return Ok(Err(ApiError::not_found(format!(
                    "no such project to merge into: {to_c} (it has no cards, sessions or brief)"
                ))));
            }
            let mut out = Outbox::default();
            let mut cards = 0i64;
            for mut c in cards_of(tx, &from_c)? {
                c.project = to_c.clone();
                tx.put_card(&c)?;
                cards += 1;
            }
            let mut moved_peers = 0i64;
            for mut p in peers.into_iter().filter(|p| p.project == from_c) {
                p.project = to_c.clone();
                tx.put_peer(&p)?;
                moved_peers += 1;
            }
            let fk = project_key(&from_c);
            if let Some(fb) = tx.kv(&fk)?.filter(|v| !v.is_null()) {
                let tk = project_key(&to_c);
                let tb = tx.kv(&tk)?.filter(|v| !v.is_null());
                let keep_to = tb
                    .as_ref()
                    .and_then(|b| b.get("brief"))
                    .and_then(Value::as_str)
                    .is_some_and(|b| !b.is_empty());
                if !keep_to {
                    tx.set_kv(&tk, &fb)?;
                }
                tx.set_kv(&fk, &Value::Null)?;
            }
            let mut aliases: Map<String, Value> = tx
                .kv(ALIASES_KEY)?
                .and_then(|v| v.as_object().cloned())
                .unwrap_or_default();
            aliases.insert(from_c.clone(), json!(to_c));
            for v in aliases.values_mut() {
                if v.as_str() == Some(from_c.as_str()) {
                    *v = json!(to_c);
                }
            }
            aliases.remove(&to_c);
            tx.set_kv(ALIASES_KEY, &Value::Object(aliases))?;
            out.event(
                tx,
                event(
                    now,
                    "project.merged",
                    &to_c,
                    "hub",
                    json!({ "from": from_c, "to": to_c, "cards": cards, "peers": moved_peers }),
                ),
            )?;
            Ok(Ok((from_c, to_c, cards, moved_peers, out)))
        })
        .await?;
    let (from, to, cards, peers, out) = result?;
    for p in hub.store.read(|tx| tx.peers()).await? {
        if p.project == to {
            hub.presence.set_project(&p.session, &to, true);
        }
    }
    hub.publish(out);
    let mut moved = BTreeMap::new();
    moved.insert("cards".to_string(), cards);
    moved.insert("peers".to_string(), peers);
    moved.insert("events".to_string(), 0);
    moved.insert("messages".to_string(), 0);
    Ok(Json(MergeReply {
        ok: true,
        from,
        to,
        moved,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        let mut c = zero_counts();
        for (s, n) in pairs {
            c.insert(s.to_string(), *n);
        }
        c
    }

    /// Card counts by status, as a table row writes them.
    type Counts = &'static [(&'static str, i64)];

    #[test]
    fn a_projects_phase_line() {
        let titles = ["a".to_string(), "b".to_string(), "c".to_string()];
        let cases: &[(Counts, usize, &str)] = &[
            (&[], 0, "no cards yet"),
            (&[("failed", 2), ("blocked", 1)], 0, "2 FAILED — fixing"),
            (&[("blocked", 1), ("testing", 1)], 0, "blocked on 1 card"),
            (&[("blocked", 2)], 0, "blocked on 2 cards"),
            (&[("testing", 1), ("doing", 1)], 0, "verifying: 1 in test"),
            (&[("doing", 2)], 2, "building: a, b"),
            (&[("doing", 3)], 3, "building: a, b…"),
            (&[("done", 4)], 0, "shipped — all cards done"),
            (&[("done", 1), ("todo", 1)], 0, "planned: 1 card queued"),
            (&[("todo", 3)], 0, "planned: 3 cards queued"),
            (
                &[("done", 1), ("stale", 1), ("todo", 0)],
                0,
                "shipped — all cards done",
            ),
        ];
        for (pairs, doing, want) in cases {
            assert_eq!(
                phase_line(&counts(pairs), &titles[..*doing]),
                *want,
                "{pairs:?}"
            );
        }
        assert_eq!(idle_line(0, 5), "idle · last activity unknown");
        assert_eq!(idle_line(1, 1 + 5 * 60_000), "idle · last activity 5m ago");
    }

    #[test]
    fn a_phases_status() {
        let cases: &[(Counts, i64, &str)] = &[
            (&[("failed", 1), ("doing", 1)], 2, "failed"),
            (&[("testing", 1), ("blocked", 1)], 2, "active"),
            (&[("done", 2)], 2, "done"),
            (&[("done", 1), ("blocked", 1)], 2, "blocked"),
            (&[("todo", 2)], 2, "planned"),
            (&[], 0, "planned"),
            (&[("todo", 1), ("done", 1)], 2, "active"),
        ];
        for (pairs, total, want) in cases {
            assert_eq!(phase_status(&counts(pairs), *total), *want, "{pairs:?}");
        }
    }

    #[test]
    fn phase_keys_and_their_order() {
        let card = |id: i64, ts: i64, title: &str, phase: &str| Card {
            id,
            ts,
            title: title.into(),
            phase: phase.into(),
            ..Card::default()
        };
        let gap = PHASE_GAP_MS;
        let cards = [
            card(1, 10, "set up ci", ""),
            card(2, 20, "P3 parser", ""),
            card(3, 30, "lint", ""),
            card(4, 30 + gap + 1, "docs", ""),
            card(5, 40 + gap, "anything", "Beta"),
            card(6, 50 + gap, "P3b lexer", ""),
        ];
        let keyed = phase_keys(&cards);
        let keys: Vec<&str> = keyed.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["Setup 1", "P3", "Setup 1", "Setup 2", "Beta", "P3"]);
        let groups: Vec<(&str, Vec<i64>)> = group_in_order(&keyed)
            .into_iter()
            .map(|(k, cs)| (k, cs.iter().map(|c| c.id).collect()))
            .collect();
        assert_eq!(
            groups,
            [
                ("Setup 1", vec![1, 3]),
                ("P3", vec![2, 6]),
                ("Setup 2", vec![4]),
                ("Beta", vec![5]),
            ]
        );
    }

    #[test]
    fn row_names_follow_aliases() {
        let aliases = json!({"a": "b", "b": "c", "x": "x", "loop1": "loop2", "loop2": "loop1"});
        assert_eq!(row_name(&aliases, " a "), "c");
        assert_eq!(row_name(&aliases, "x"), "x");
        assert_eq!(row_name(&aliases, "q"), "q");
        assert_eq!(row_name(&aliases, ""), "(unassigned)");
        assert_eq!(row_name(&Value::Null, "a"), "a");
        assert_eq!(
            row_name(&aliases, "loop1"),
            "loop1",
            "eight hops, then stop"
        );
    }
}
