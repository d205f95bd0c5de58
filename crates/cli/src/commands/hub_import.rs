//! `trantor hub import | export | migrate`: move a hub's state between the original's JSON store
//! (`bus.json`), the embedded SQLite store and PostgreSQL.
//!
//! The dump format is the original's `bus.json` shape (`messages`, `peers`, `tasks`, `lessons`,
//! `projectMeta`, `phaseMeta`, `orgPolicy`, `contractReap`, `dutySession`, `seq`, `taskSeq`), so
//! one importer reads both a file the original hub wrote and one `trantor hub export` wrote;
//! a trantor dump also carries `turns` (the cost ledger, each with its hub `ts`) and
//! `credentials` (names and agents). The event log (`events`, or an old file's `cardEvents`)
//! and the verification gates (`verifyGates`, `verifyGateSeq`) come along too. A card written
//! by an old hub with `ts: 0` gets the original's fill on load: its first history entry's time,
//! else `updated`, else the file's modification time (so importing the same file twice gives the
//! same card); card-log entries without a time get the card's.
//! An import is validated completely before anything is written, then written in ONE store
//! transaction: a malformed or truncated file is refused with the place named, and nothing is
//! half-imported. Messages and cards keep their ids (a runner's `since` cursor stays valid);
//! importing the same file again adds nothing.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use serde_json::{Map, Value, json};
use trantor_proto::{Card, Lesson, Message, Peer, now_ms};
use trantor_store::{CardFilter, Store};
use trantor_store_postgres::{PgOptions, PgStore};
use trantor_store_sqlite::SqliteStore;

/// `trantor hub`: run the hub, or one of its maintenance verbs.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct HubCommand {
    /// A maintenance verb instead of running the hub.
    #[command(subcommand)]
    pub action: Option<HubAction>,
    /// The hub's own options (when no verb is given).
    #[command(flatten)]
    pub args: trantor_hub::HubArgs,
}

/// Maintenance verbs of `trantor hub`.
#[derive(Debug, clap::Subcommand)]
pub enum HubAction {
    /// Import the original hub's JSON store (bus.json) or a `trantor hub export` dump into the
    /// store; idempotent (a second import adds nothing); prints what was added.
    Import(ImportArgs),
    /// Write the store as a portable JSON dump (the original's bus.json shape).
    Export(ExportArgs),
    /// Copy the embedded SQLite store into PostgreSQL. Stop the hub first.
    Migrate(MigrateArgs),
    /// List the per-project hub pins (<bus>/config.json `hubs`) and this project's hub.
    List,
    /// Pin a project to a hub: `trantor hub set web http://10.0.0.5:4477`.
    Set(super::hub_pins::SetArgs),
    /// Remove a project's pin (it falls back to the global default).
    Unset(super::hub_pins::UnsetArgs),
}

/// Which store a verb works on.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// PostgreSQL URL of the store (also `DATABASE_URL`); unset: the SQLite file under
    /// --data-dir.
    #[arg(long = "store", env = "RELAY_DATABASE_URL")]
    pub store: Option<String>,
    /// Data directory of the embedded SQLite store; default `~/.agent-bus`.
    #[arg(long, env = "RELAY_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

/// Options of `trantor hub import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The file to import: the original's bus.json, or a `trantor hub export` dump.
    pub file: PathBuf,
    #[command(flatten)]
    pub target: Target,
}

/// Options of `trantor hub export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Write here instead of stdout.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub target: Target,
}

/// Options of `trantor hub migrate`.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The PostgreSQL URL to copy the store into.
    #[arg(long)]
    pub to: String,
    /// Data directory of the SQLite store to copy; default `~/.agent-bus`.
    #[arg(long, env = "RELAY_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

/// An opened store of either kind.
enum AnyStore {
    Sqlite(SqliteStore),
    Pg(PgStore),
}

fn default_data_dir(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(d) = given {
        return Ok(d.to_path_buf());
    }
    let home = std::env::var_os("HOME")
        .ok_or_else(|| anyhow!("no data directory: set RELAY_DATA_DIR or HOME"))?;
    Ok(PathBuf::from(home).join(".agent-bus"))
}

async fn open_pg(url: &str) -> anyhow::Result<PgStore> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        bail!(
            "{}: not a PostgreSQL URL (postgres://user@host:port/database)",
            trantor_proto::text::mask_url(url)
        );
    }
    let url = url.to_string();
    let opts = PgOptions {
        readers: 1,
        background: false,
        node: format!("trantor hub tool pid {}", std::process::id()),
        ..Default::default()
    };
    Ok(
        tokio::task::spawn_blocking(move || PgStore::open_with(&url, opts))
            .await
            .context("store open task failed")??,
    )
}

async fn open(target: &Target) -> anyhow::Result<AnyStore> {
    let url = target
        .store
        .clone()
        .or_else(|| std::env::var("DATABASE_URL").ok())
        .filter(|u| !u.trim().is_empty());
    if let Some(url) = url {
        return Ok(AnyStore::Pg(open_pg(url.trim()).await?));
    }
    let db = default_data_dir(target.data_dir.as_deref())?.join("hub.db");
    Ok(AnyStore::Sqlite(
        tokio::task::spawn_blocking(move || SqliteStore::open(&db))
            .await
            .context("store open task failed")??,
    ))
}

/// Run a verb.
pub async fn run(action: HubAction) -> anyhow::Result<()> {
    match action {
        HubAction::List => super::hub_pins::list(),
        HubAction::Set(a) => super::hub_pins::set(a),
        HubAction::Unset(a) => super::hub_pins::unset(a),
        HubAction::Import(a) => {
            let text = std::fs::read_to_string(&a.file)
                .with_context(|| format!("cannot read {}", a.file.display()))?;
            // A card with no time at all gets the file's modification time, so the same file
            // imports to the same cards every time.
            let fallback = std::fs::metadata(&a.file)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .and_then(|d| i64::try_from(d.as_millis()).ok())
                .unwrap_or_else(now_ms);
            let plan = parse_at(&text, &a.file.display().to_string(), fallback)?;
            let store = open(&a.target).await?;
            let (report, describe) = match &store {
                AnyStore::Sqlite(s) => (import(s, plan).await?, s.describe()),
                AnyStore::Pg(s) => (import(s, plan).await?, s.describe()),
            };
            println!("imported {} into {describe}: {report}", a.file.display());
            close(store).await;
            Ok(())
        }
        HubAction::Export(a) => {
            let store = open(&a.target).await?;
            let doc = match &store {
                AnyStore::Sqlite(s) => export(s).await?,
                AnyStore::Pg(s) => export(s).await?,
            };
            close(store).await;
            let text = serde_json::to_string_pretty(&doc)?;
            match a.out {
                Some(path) => std::fs::write(&path, text)
                    .with_context(|| format!("cannot write {}", path.display()))?,
                None => println!("{text}"),
            }
            Ok(())
        }
        HubAction::Migrate(a) => {
            let dir = default_data_dir(a.data_dir.as_deref())?;
            let db = dir.join("hub.db");
            if !db.is_file() {
                bail!("no embedded store at {}: nothing to migrate", db.display());
            }
            let src = tokio::task::spawn_blocking(move || SqliteStore::open(&db))
                .await
                .context("store open task failed")??;
            let doc = export(&src).await?;
            drop(src);
            let plan = parse(&doc.to_string(), "the exported store")?;
            let dst = open_pg(&a.to).await?;
            let report = import(&dst, plan).await?;
            println!(
                "migrated {} into {}: {report}",
                dir.join("hub.db").display(),
                dst.describe()
            );
            close(AnyStore::Pg(dst)).await;
            Ok(())
        }
    }
}

/// Close a store off the async workers (its threads are joined).
async fn close(store: AnyStore) {
    let _ = tokio::task::spawn_blocking(move || drop(store)).await;
}

/// Everything a file holds, validated, ready to be written in one transaction.
#[derive(Debug, Default)]
pub struct Plan {
    messages: Vec<Message>,
    peers: Vec<Peer>,
    cards: Vec<Card>,
    lessons: Vec<Lesson>,
    docs: Vec<(String, Value)>,
    /// The cost ledger's turns with their hub time (a `trantor hub export` carries them).
    turns: Vec<(i64, trantor_proto::TurnReport)>,
    /// The event log, oldest first (ids are the store's own on import).
    events: Vec<trantor_store::NewEvent>,
    /// The verification gates and the file's gate id high-water mark.
    gates: Vec<trantor_proto::VerifyGate>,
    gate_seq: i64,
}

/// What an import added.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ImportReport {
    /// New messages.
    pub messages: usize,
    /// Peers written (new or updated).
    pub peers: usize,
    /// New cards.
    pub cards: usize,
    /// Existing cards replaced by a different version.
    pub cards_updated: usize,
    /// New lessons.
    pub lessons: usize,
    /// Documents (policy, project briefs, phases, contracts, duty) set or changed.
    pub docs: usize,
    /// New turns of the cost ledger.
    pub turns: usize,
    /// New events.
    pub events: usize,
    /// Verification gates added or changed.
    pub gates: usize,
}

impl std::fmt::Display for ImportReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} messages, {} peers, {} cards ({} updated), {} lessons, {} documents, {} turns, \
             {} events, {} gates added",
            self.messages,
            self.peers,
            self.cards,
            self.cards_updated,
            self.lessons,
            self.docs,
            self.turns,
            self.events,
            self.gates
        )
    }
}

fn items<'a>(obj: &'a Map<String, Value>, key: &str, name: &str) -> anyhow::Result<&'a [Value]> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => bail!("{name}: `{key}` is not a list (found {})", kind(other)),
    }
}

fn map<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    name: &str,
) -> anyhow::Result<Option<&'a Map<String, Value>>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(other) => bail!("{name}: `{key}` is not an object (found {})", kind(other)),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Parse and validate a bus.json (or export) completely; the error names the place. A card
/// without a time gets `now` as the last resort (see [`parse_at`]).
pub fn parse(text: &str, name: &str) -> anyhow::Result<Plan> {
    parse_at(text, name, now_ms())
}

/// A positive integer field of `v`.
fn pos(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64).filter(|t| *t > 0)
}

/// The original's fill for a card an old hub wrote with `ts: 0` (or none): the first history
/// entry's time, else `updated`, else `fallback`; card-log entries without a time get the
/// card's.
fn fill_card_times(card: &mut Value, fallback: i64) {
    let first_history = card
        .get("history")
        .and_then(Value::as_array)
        .and_then(|h| h.first())
        .and_then(|h| pos(h, "ts"));
    let ts = pos(card, "ts")
        .or(first_history)
        .or_else(|| pos(card, "updated"))
        .unwrap_or(fallback);
    let Value::Object(m) = card else {
        return;
    };
    m.insert("ts".into(), json!(ts));
    if let Some(Value::Array(log)) = m.get_mut("log") {
        for e in log.iter_mut() {
            if pos(e, "ts").is_none()
                && let Value::Object(e) = e
            {
                e.insert("ts".into(), json!(ts));
            }
        }
    }
}

/// An event of the file as the store takes it (its id is the store's to give).
fn new_event(v: &Value, at: &str) -> anyhow::Result<trantor_store::NewEvent> {
    let Value::Object(m) = v else {
        bail!("{at} is {}, not an object", kind(v));
    };
    let mut data = m.clone();
    let text = |data: &mut Map<String, Value>, k: &str| -> anyhow::Result<String> {
        match data.remove(k) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s),
            Some(other) => bail!("{at}: `{k}` is {}, not a string", kind(&other)),
        }
    };
    data.remove("id");
    let kind_ = text(&mut data, "type")?;
    if kind_.is_empty() {
        bail!("{at} has no `type`");
    }
    let ts = data
        .remove("ts")
        .and_then(|t| t.as_i64())
        .ok_or_else(|| anyhow!("{at} has no `ts`"))?;
    let project = text(&mut data, "project")?;
    let by = text(&mut data, "by")?;
    let task_id = data.get("taskId").and_then(Value::as_i64);
    let refs = data
        .get("refs")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default();
    Ok(trantor_store::NewEvent {
        ts,
        kind: kind_,
        project,
        by,
        task_id,
        refs,
        data,
    })
}

/// Parse and validate a bus.json (or export) completely, filling a card's missing time with
/// `fallback` as the last resort; the error names the place.
pub fn parse_at(text: &str, name: &str, fallback: i64) -> anyhow::Result<Plan> {
    let doc: Value = serde_json::from_str(text).map_err(|e| {
        anyhow!(
            "{name}: line {} column {}: {e} (truncated or not JSON); nothing was imported",
            e.line(),
            e.column()
        )
    })?;
    let Value::Object(obj) = doc else {
        bail!("{name}: the top level is {}, not an object", kind(&doc));
    };
    let mut plan = Plan::default();
    // The sections in this order, so the first error reported is the first in the file's
    // usual layout.
    parse_messages(&obj, name, &mut plan)?;
    parse_peers(&obj, name, &mut plan)?;
    parse_cards(&obj, name, fallback, &mut plan)?;
    parse_lessons(&obj, name, &mut plan)?;
    parse_named_docs(&obj, name, &mut plan)?;
    parse_turns(&obj, name, &mut plan)?;
    parse_events(&obj, name, &mut plan)?;
    parse_gates(&obj, name, &mut plan)?;
    parse_credentials(&obj, name, &mut plan)?;
    Ok(plan)
}

fn parse_messages(obj: &Map<String, Value>, name: &str, plan: &mut Plan) -> anyhow::Result<()> {
    for (i, v) in items(obj, "messages", name)?.iter().enumerate() {
        let m: Message =
            serde_json::from_value(v.clone()).map_err(|e| anyhow!("{name}: messages[{i}]: {e}"))?;
        if m.id <= 0 {
            bail!("{name}: messages[{i}]: id {} is not positive", m.id);
        }
        plan.messages.push(m);
    }
    Ok(())
}

fn parse_peers(obj: &Map<String, Value>, name: &str, plan: &mut Plan) -> anyhow::Result<()> {
    let Some(peers) = map(obj, "peers", name)? else {
        return Ok(());
    };
    for (session, v) in peers {
        let mut p = match v {
            Value::Object(p) => p.clone(),
            other => bail!(
                "{name}: peers[{session:?}] is {}, not an object",
                kind(other)
            ),
        };
        p.insert("session".into(), Value::String(session.clone()));
        // The original keeps an `_on` flag and other runtime fields; Peer ignores them.
        let peer: Peer = serde_json::from_value(Value::Object(p))
            .map_err(|e| anyhow!("{name}: peers[{session:?}]: {e}"))?;
        plan.peers.push(peer);
    }
    Ok(())
}

fn parse_cards(
    obj: &Map<String, Value>,
    name: &str,
    fallback: i64,
    plan: &mut Plan,
) -> anyhow::Result<()> {
    for (i, v) in items(obj, "tasks", name)?.iter().enumerate() {
        let mut v = v.clone();
        fill_card_times(&mut v, fallback);
        let c: Card = serde_json::from_value(v).map_err(|e| anyhow!("{name}: tasks[{i}]: {e}"))?;
        if c.id <= 0 {
            bail!("{name}: tasks[{i}]: id {} is not positive", c.id);
        }
        plan.cards.push(c);
    }
    Ok(())
}

fn parse_lessons(obj: &Map<String, Value>, name: &str, plan: &mut Plan) -> anyhow::Result<()> {
    for (i, v) in items(obj, "lessons", name)?.iter().enumerate() {
        let mut l = match v {
            Value::Object(l) => l.clone(),
            other => bail!("{name}: lessons[{i}] is {}, not an object", kind(other)),
        };
        l.entry("id").or_insert(json!(0));
        l.entry("ts").or_insert(json!(0));
        l.entry("scope").or_insert(json!("global"));
        let lesson: Lesson = serde_json::from_value(Value::Object(l))
            .map_err(|e| anyhow!("{name}: lessons[{i}]: {e}"))?;
        plan.lessons.push(lesson);
    }
    Ok(())
}

/// A project's or a phase's document from the original's entry `m`: its `text_key` (the brief
/// or the goal, else empty), `by` (else empty) and `ts` (`updated`, else `ts`, else 0).
fn meta_doc(m: &Map<String, Value>, text_key: &str) -> Value {
    let ts = m.get("updated").or_else(|| m.get("ts")).cloned();
    let mut doc = Map::new();
    doc.insert(
        text_key.to_string(),
        m.get(text_key).cloned().unwrap_or(json!("")),
    );
    doc.insert("by".into(), m.get("by").cloned().unwrap_or(json!("")));
    doc.insert("ts".into(), ts.unwrap_or(json!(0)));
    Value::Object(doc)
}

/// Named documents: the original's keys mapped onto this hub's.
fn parse_named_docs(obj: &Map<String, Value>, name: &str, plan: &mut Plan) -> anyhow::Result<()> {
    if let Some(projects) = map(obj, "projectMeta", name)? {
        for (project, v) in projects {
            let Value::Object(m) = v else {
                bail!(
                    "{name}: projectMeta[{project:?}] is {}, not an object",
                    kind(v)
                );
            };
            plan.docs
                .push((format!("project:{project}"), meta_doc(m, "brief")));
        }
    }
    if let Some(phases) = map(obj, "phaseMeta", name)? {
        for (key, v) in phases {
            let Value::Object(m) = v else {
                bail!("{name}: phaseMeta[{key:?}] is {}, not an object", kind(v));
            };
            if !key.contains("::") {
                bail!("{name}: phaseMeta[{key:?}]: expected a `project::phase` key");
            }
            plan.docs
                .push((format!("phase:{key}"), meta_doc(m, "goal")));
        }
    }
    if let Some(policy) = map(obj, "orgPolicy", name)? {
        let empty = policy
            .get("links")
            .and_then(Value::as_array)
            .is_none_or(|l| l.is_empty())
            && policy
                .get("autonomy")
                .and_then(Value::as_object)
                .is_none_or(|a| a.is_empty());
        if !empty {
            plan.docs
                .push(("policy".into(), Value::Object(policy.clone())));
        }
    }
    if let Some(reap) = map(obj, "contractReap", name)?
        && !reap.is_empty()
    {
        plan.docs
            .push(("contractReap".into(), Value::Object(reap.clone())));
    }
    match obj.get("dutySession") {
        Some(Value::String(s)) if !s.is_empty() => {
            plan.docs
                .push(("dutySession".into(), Value::String(s.clone())));
        }
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(other) => bail!("{name}: `dutySession` is {}, not a string", kind(other)),
    }
    Ok(())
}

/// The cost ledger (a trantor export; the original has none).
fn parse_turns(obj: &Map<String, Value>, name: &str, plan: &mut Plan) -> anyhow::Result<()> {
    for (i, t) in items(obj, "turns", name)?.iter().enumerate() {
        let ts = t
            .get("ts")
            .and_then(Value::as_i64)
            .ok_or_else(|| anyhow!("{name}: turns[{i}] has no `ts`"))?;
        let report: trantor_proto::TurnReport =
            serde_json::from_value(t.clone()).map_err(|e| anyhow!("{name}: turns[{i}]: {e}"))?;
        plan.turns.push((ts, report));
    }
    Ok(())
}

/// The event log (an old file keeps only the card events, under `cardEvents`), in id order.
fn parse_events(obj: &Map<String, Value>, name: &str, plan: &mut Plan) -> anyhow::Result<()> {
    let key = if obj.get("events").is_some_and(|e| !e.is_null()) {
        "events"
    } else {
        "cardEvents"
    };
    let events = items(obj, key, name)?;
    let mut events: Vec<(i64, trantor_store::NewEvent)> = events
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let id = v.get("id").and_then(Value::as_i64).unwrap_or(0);
            new_event(v, &format!("{name}: {key}[{i}]")).map(|e| (id, e))
        })
        .collect::<anyhow::Result<_>>()?;
    events.sort_by_key(|(id, e)| (*id, e.ts));
    plan.events = events.into_iter().map(|(_, e)| e).collect();
    Ok(())
}

/// The verify gates and their id sequence.
fn parse_gates(obj: &Map<String, Value>, name: &str, plan: &mut Plan) -> anyhow::Result<()> {
    for (i, v) in items(obj, "verifyGates", name)?.iter().enumerate() {
        let g: trantor_proto::VerifyGate = serde_json::from_value(v.clone())
            .map_err(|e| anyhow!("{name}: verifyGates[{i}]: {e}"))?;
        if g.id <= 0 {
            bail!("{name}: verifyGates[{i}]: id {} is not positive", g.id);
        }
        plan.gates.push(g);
    }
    plan.gate_seq = match obj.get("verifyGateSeq") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_i64()
            .ok_or_else(|| anyhow!("{name}: `verifyGateSeq` is {}, not an integer", kind(v)))?,
    };
    Ok(())
}

/// The named credentials (a trantor export; the original has none), kept as one document.
fn parse_credentials(obj: &Map<String, Value>, name: &str, plan: &mut Plan) -> anyhow::Result<()> {
    match obj.get("credentials") {
        Some(Value::Array(a)) if !a.is_empty() => {
            for (i, c) in a.iter().enumerate() {
                serde_json::from_value::<trantor_proto::credentials::CredentialInfo>(c.clone())
                    .map_err(|e| anyhow!("{name}: credentials[{i}]: {e}"))?;
            }
            plan.docs
                .push(("credentials".into(), Value::Array(a.clone())));
        }
        None | Some(Value::Null) | Some(Value::Array(_)) => {}
        Some(other) => bail!("{name}: `credentials` is {}, not a list", kind(other)),
    }
    Ok(())
}

/// Write a validated plan into `store` in one transaction.
pub async fn import<S: Store>(store: &S, plan: Plan) -> anyhow::Result<ImportReport> {
    let report = store
        .write(move |tx| {
            let mut r = ImportReport::default();
            for m in &plan.messages {
                let refs = trantor_hub::domain::cards::card_refs(&m.text);
                r.messages += usize::from(tx.put_message(m, &refs)?);
            }
            for p in &plan.peers {
                if tx.peer(&p.session)?.as_ref() != Some(p) {
                    tx.put_peer(p)?;
                    r.peers += 1;
                }
            }
            for c in &plan.cards {
                match tx.card(c.id)? {
                    None => {
                        tx.put_card(c)?;
                        r.cards += 1;
                    }
                    Some(old) if &old != c => {
                        tx.put_card(c)?;
                        r.cards_updated += 1;
                    }
                    Some(_) => {}
                }
            }
            for l in &plan.lessons {
                let same = tx
                    .lessons(std::slice::from_ref(&l.scope))?
                    .iter()
                    .any(|x| x.text == l.text);
                if !same {
                    tx.insert_lesson(l.clone())?;
                    r.lessons += 1;
                }
            }
            for (k, v) in &plan.docs {
                if tx.kv(k)?.as_ref() != Some(v) {
                    tx.set_kv(k, v)?;
                    r.docs += 1;
                }
            }
            for (ts, t) in &plan.turns {
                r.turns += usize::from(tx.record_turn(*ts, t)?);
            }
            if !plan.events.is_empty() {
                // An event already in the store (same time, type, project, actor and fields)
                // is not added again.
                let have: std::collections::HashSet<String> = tx
                    .events(&trantor_store::EventFilter {
                        limit: usize::try_from(i64::MAX).unwrap_or(usize::MAX),
                        ..Default::default()
                    })?
                    .into_iter()
                    .map(|e| event_key(e.ts, &e.kind, &e.project, &e.by, &e.data))
                    .collect();
                for e in &plan.events {
                    if !have.contains(&event_key(e.ts, &e.kind, &e.project, &e.by, &e.data)) {
                        tx.insert_event(e.clone())?;
                        r.events += 1;
                    }
                }
            }
            if !plan.gates.is_empty() || plan.gate_seq > 0 {
                let key = trantor_hub::domain::gates::GATES_KEY;
                let mut doc = trantor_hub::domain::gates::load(tx.kv(key)?);
                let before = serde_json::to_value(&doc).unwrap_or(Value::Null);
                for g in &plan.gates {
                    match doc.gates.iter_mut().find(|x| x.id == g.id) {
                        Some(x) if x != g => {
                            *x = g.clone();
                            r.gates += 1;
                        }
                        Some(_) => {}
                        None => {
                            doc.gates.push(g.clone());
                            r.gates += 1;
                        }
                    }
                }
                doc.gates.sort_by_key(|g| g.id);
                let top = doc.gates.iter().map(|g| g.id).max().unwrap_or(0);
                doc.seq = doc.seq.max(plan.gate_seq).max(top);
                let after = serde_json::to_value(&doc).unwrap_or(Value::Null);
                if after != before {
                    tx.set_kv(key, &after)?;
                }
            }
            Ok(r)
        })
        .await
        .map_err(|e| anyhow!("import failed, nothing was written: {}", e.report()))?;
    Ok(report)
}

/// What makes two events the same for an import.
fn event_key(ts: i64, kind: &str, project: &str, by: &str, data: &Map<String, Value>) -> String {
    let mut data = data.clone();
    data.remove("id");
    format!(
        "{ts}\u{1}{kind}\u{1}{project}\u{1}{by}\u{1}{}",
        Value::Object(data)
    )
}

/// The whole store as a bus.json-shaped document.
pub async fn export<S: Store>(store: &S) -> anyhow::Result<Value> {
    // The reaper's records are read off the ledger: it first holds every stored message.
    store.ledger_current().await?;
    let doc = store
        .read(|tx| {
            let messages = tx.recent_messages(0)?;
            let mut peers = Map::new();
            for p in tx.peers()? {
                let mut v = serde_json::to_value(&p).unwrap_or(Value::Null);
                if let Value::Object(m) = &mut v {
                    m.remove("session");
                }
                peers.insert(p.session.clone(), v);
            }
            let cards = tx.cards(&CardFilter::default())?;
            let lessons = tx.all_lessons()?;
            let mut project_meta = Map::new();
            for (k, v) in tx.kv_prefix("project:")? {
                let mut v = v;
                if let Value::Object(m) = &mut v
                    && let Some(ts) = m.remove("ts")
                {
                    m.insert("updated".into(), ts);
                }
                project_meta.insert(k["project:".len()..].to_string(), v);
            }
            let mut phase_meta = Map::new();
            for (k, v) in tx.kv_prefix("phase:")? {
                let mut v = v;
                if let Value::Object(m) = &mut v
                    && let Some(ts) = m.remove("ts")
                {
                    m.insert("updated".into(), ts);
                }
                phase_meta.insert(k["phase:".len()..].to_string(), v);
            }
            let policy = tx
                .kv("policy")?
                .unwrap_or(json!({"autonomy": {}, "links": []}));
            // The reaper's records live on the ledger's rows; a document `hub import` wrote
            // that the reaper has not adopted yet is merged in.
            let mut reap = match tx.kv("contractReap")? {
                Some(Value::Object(m)) => m,
                _ => Map::new(),
            };
            for r in tx.ledger_reaped()? {
                reap.insert(
                    r.id.to_string(),
                    json!({"ts": r.reaped_ts, "from": r.sender, "to": r.assignee,
                           "reason": r.reason, "dispatchedTs": r.ts}),
                );
            }
            let reap = Value::Object(reap);
            let duty = tx.kv("dutySession")?.unwrap_or(json!(""));
            let credentials = tx
                .kv(trantor_hub::domain::credentials::KEY)?
                .unwrap_or(json!([]));
            let turns: Vec<Value> = tx
                .all_turns()?
                .into_iter()
                .map(|(ts, t)| {
                    let mut v = serde_json::to_value(&t).unwrap_or(Value::Null);
                    if let Value::Object(m) = &mut v {
                        m.insert("ts".into(), json!(ts));
                    }
                    v
                })
                .collect();
            let events = tx.events(&trantor_store::EventFilter {
                limit: usize::try_from(i64::MAX).unwrap_or(usize::MAX),
                ..Default::default()
            })?;
            let gates =
                trantor_hub::domain::gates::load(tx.kv(trantor_hub::domain::gates::GATES_KEY)?);
            let seq = tx.tip()?;
            let task_seq = cards.iter().map(|c| c.id).max().unwrap_or(0);
            Ok(json!({
                "exportedBy": format!("trantor {}", trantor_proto::VERSION),
                "exportedAt": now_ms(),
                "messages": messages,
                "peers": peers,
                "seq": seq,
                "tasks": cards,
                "taskSeq": task_seq,
                "lessons": lessons,
                "projectMeta": project_meta,
                "phaseMeta": phase_meta,
                "orgPolicy": policy,
                "contractReap": reap,
                "dutySession": if duty.is_null() { json!("") } else { duty },
                "credentials": credentials,
                "turns": turns,
                "events": events,
                "verifyGates": gates.gates,
                "verifyGateSeq": gates.seq,
            }))
        })
        .await
        .map_err(|e| anyhow!("export failed: {}", e.report()))?;
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn malformed_files_name_the_place() {
        let err = parse("{\"messages\": [{\"id\": 1, \"ts\": 1,", "bus.json")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("bus.json: line 1"), "{err}");
        let err = parse(
            r#"{"messages": [{"id": 1, "ts": 1, "from": "a"}]}"#,
            "bus.json",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(err.contains("messages[0]"), "{err}");
        let err = parse(r#"{"peers": []}"#, "bus.json")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("`peers` is not an object"), "{err}");
        assert!(parse("{}", "bus.json").is_ok());
    }
}
