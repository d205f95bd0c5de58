//! Wire types of the project-level routes the original's hooks, CLI and dashboard read:
//! the project digest of `GET /catchup?project=`, `GET /history`, `POST /sweep`,
//! `GET /overseer/status`, and the project views and lane maintenance `GET /projects`,
//! `GET /phases`, `POST /project/delete`, `POST /project/merge` (`docs/protocol.md` §15).

use crate::Event;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A card as the project digest lists it. Fields are in name order.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct DigestCard {
    /// Assignee (empty when none).
    pub assignee: String,
    /// Card id.
    pub id: i64,
    /// Where the card came from.
    pub source: String,
    /// Title.
    pub title: String,
    /// Last change, ms.
    pub updated: i64,
}

/// `GET /catchup?project=P` reply: the original's project digest (its SessionStart hook and
/// `trantor catchup` read it).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectDigest {
    /// The project (canonical name).
    pub project: String,
    /// The project's brief ("" when none).
    pub brief: String,
    /// Cards by status; all seven statuses are present.
    pub counts: BTreeMap<String, i64>,
    /// Cards in the project.
    pub total: i64,
    /// Newest eight doing cards.
    pub doing: Vec<DigestCard>,
    /// Newest eight testing cards.
    pub testing: Vec<DigestCard>,
    /// Newest eight failed cards.
    pub failed: Vec<DigestCard>,
    /// Newest eight blocked cards.
    pub blocked: Vec<DigestCard>,
    /// Newest ten todo cards.
    pub todo: Vec<DigestCard>,
    /// Newest eight done cards.
    pub recent_done: Vec<DigestCard>,
    /// Last change on the board or the brief, ms.
    pub last_activity: i64,
}

/// `GET /catchup` reply: the session digest (`?session=`) or the project digest (`?project=`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum CatchupAny {
    /// `?session=S`.
    Session(Box<crate::CatchupReply>),
    /// `?project=P` without a session.
    Project(Box<ProjectDigest>),
}

/// `GET /history` reply: card events only, oldest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct HistoryReply {
    /// Card events (`created`, `moved`, `updated`, `deleted`).
    pub events: Vec<Event>,
}

/// `POST /sweep` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SweepRequest {
    /// Only this project (default: every project).
    #[serde(default)]
    #[schemars(length(max = crate::limits::PROJECT))]
    pub project: Option<String>,
    /// Cards untouched for longer than this are candidates (default `RELAY_REAP_GRACE_MS`).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub older_ms: Option<i64>,
    /// Only count the candidates; change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Who sweeps (recorded on the moves; default `sweep`).
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
}

/// A sweep candidate. Fields are in name order.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SweepCandidate {
    /// Untouched for, ms.
    pub age_ms: i64,
    /// Assignee.
    pub assignee: String,
    /// Card id.
    pub id: i64,
    /// Project.
    pub project: String,
    /// Source.
    pub source: String,
    /// Status (doing or testing).
    pub status: crate::CardStatus,
    /// Title.
    pub title: String,
}

/// `POST /sweep` reply: `dryRun` + `count`, or `swept`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SweepReply {
    /// Always true.
    pub ok: bool,
    /// Set on a dry run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// Candidates found (dry run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    /// Cards moved to stale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swept: Option<i64>,
    /// The candidates.
    pub candidates: Vec<SweepCandidate>,
    /// Online seats that hold a candidate and are working (a sweep that is not a dry run is
    /// refused while any is).
    pub working: Vec<String>,
}

/// What the overseer watches right now.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct OverseerWatching {
    /// Live sessions.
    pub sessions: i64,
    /// Projects with a live session.
    pub projects: i64,
    /// Live file claims.
    pub claims: i64,
    /// Project links in the policy.
    pub links: i64,
}

/// A standing overseer condition.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct OverseerWarning {
    /// `same-project-sessions` or `file-conflict`.
    pub kind: String,
    /// Project.
    pub project: String,
    /// Sessions involved.
    pub sessions: Vec<String>,
    /// Files involved.
    pub files: Vec<String>,
    /// One line.
    pub detail: String,
    /// When the episode started, ms.
    pub since: i64,
}

/// `GET /overseer/status` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverseerStatus {
    /// Whether collision detection runs (always true here).
    pub engine: bool,
    /// The last overseer pass, ms (0: none yet).
    pub last_tick_ts: i64,
    /// The pass period, ms.
    pub tick_ms: i64,
    /// How long a condition must be gone before its episode ends, ms.
    pub clear_ms: i64,
    /// The duty session in force ("" when none).
    pub duty_session: String,
    /// Recent duty failures, newest first.
    pub duty_failures: Vec<Value>,
    /// The duty block of `/health` (null without a duty session).
    pub duty: Value,
    /// What is watched.
    pub watching: OverseerWatching,
    /// Autonomy levels by project (`*` is the default).
    pub autonomy: BTreeMap<String, Value>,
    /// Project links.
    pub links: Vec<Value>,
    /// Conditions seen in the last pass.
    pub warnings: Vec<OverseerWarning>,
    /// Episodes standing.
    pub standing: i64,
}

/// A project link as `GET /overseer/context` lists it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ContextLink {
    /// The linked projects.
    pub projects: Vec<String>,
    /// Why they are linked.
    pub reason: String,
}

/// A live session on the project (or a linked one), as `GET /overseer/context` lists it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ContextPeer {
    /// Bus address.
    pub session: String,
    /// Its project.
    pub project: String,
    /// Agent CLI family ("" when not reported).
    pub llm: String,
    /// Model ("" when not reported).
    pub model: String,
    /// Its one-line status.
    pub status: String,
}

/// A file in flight: a live claim on the project.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ContextFile {
    /// File (repo-relative).
    pub file: String,
    /// Claiming session.
    pub session: String,
    /// Claimed how long ago, seconds.
    #[serde(rename = "agoSec")]
    pub ago_sec: i64,
}

/// `GET /overseer/context?project=P` reply: what a session arriving on P needs to know.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct OverseerContext {
    /// The project's autonomy level (1 observe … 4; the `*` level, else 1, when unset).
    pub level: i64,
    /// Links naming the project.
    pub links: Vec<ContextLink>,
    /// Live sessions on the project and its linked projects.
    pub peers: Vec<ContextPeer>,
    /// Live file claims on the project.
    pub inflight: Vec<ContextFile>,
    /// Conditions standing now on the project and its linked projects; a standing episode's
    /// detail ends with how long it has stood.
    pub warnings: Vec<OverseerWarning>,
}

/// `POST /overseer/narrate` body: a narration of one `overseer.warn` event.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NarrateRequest {
    /// The `overseer.warn` event's id.
    #[serde(default)]
    #[schemars(extend("x-required" = true), range(min = 1))]
    pub event_id: i64,
    /// The narration (at most 300 characters, not blank).
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = 300), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub text: String,
}

/// `POST /overseer/narrate` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct NarrateReply {
    /// Always true.
    pub ok: bool,
}

/// A message carried by `POST /import` (its id is the receiving hub's to give).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ImportMessage {
    /// Sender.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::SESSION), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub from: String,
    /// Recipient (`all` for a broadcast).
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::SESSION), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub to: String,
    /// Text.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::MESSAGE_TEXT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub text: String,
    /// When it was sent on the other hub, ms (default: now).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub ts: Option<i64>,
    /// The message it answers (an id on the other hub).
    #[serde(default)]
    pub re: Option<i64>,
    /// `receipt`, `alert`, … as sent.
    #[serde(default)]
    #[schemars(length(max = 40))]
    pub kind: Option<String>,
}

/// An event carried by `POST /import` (its id is the receiving hub's; its project is the
/// imported one).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImportEvent {
    /// Event type.
    #[serde(default, rename = "type")]
    #[schemars(extend("x-required" = true), length(min = 1, max = 80), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub kind: String,
    /// When, ms (default: now).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub ts: Option<i64>,
    /// Actor.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
    /// The card it is about (an id on the other hub; re-pointed when the card got a new id).
    #[serde(default)]
    pub task_id: Option<i64>,
    /// Type-specific fields (not described in the schema).
    #[serde(flatten)]
    #[schemars(skip)]
    pub data: serde_json::Map<String, Value>,
}

/// A card carried by `POST /import`. The schema names its scalar fields; its log, history,
/// checklist and whatever else the other hub kept on it come along too (kept when this hub's
/// cards can hold them).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ImportCard {
    /// Its id on the other hub (events naming it are re-pointed to the new id).
    #[serde(default)]
    pub id: Option<i64>,
    /// Title.
    #[serde(default)]
    pub title: Option<String>,
    /// Status.
    #[serde(default)]
    pub status: Option<String>,
    /// Assignee.
    #[serde(default)]
    pub assignee: Option<String>,
    /// Creator (the assigner).
    #[serde(default)]
    pub by: Option<String>,
    /// Created, ms.
    #[serde(default)]
    pub ts: Option<i64>,
    /// Last change, ms.
    #[serde(default)]
    pub updated: Option<i64>,
    /// Its drill line.
    #[serde(default)]
    pub drill: Option<String>,
    /// Everything else (log, history, checklist, …; not described in the schema).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: serde_json::Map<String, Value>,
}

impl ImportCard {
    /// The card this hub stores for it, in `project` (id 0: the store gives the id). A field
    /// of `extra` that this hub's cards cannot hold as given is dropped.
    pub fn to_card(&self, project: &str) -> crate::Card {
        let mut base = crate::Card {
            project: project.to_string(),
            title: self.title.clone().unwrap_or_default(),
            status: self
                .status
                .clone()
                .map(crate::CardStatus::from)
                .unwrap_or_default(),
            assignee: self.assignee.clone().unwrap_or_default(),
            by: self.by.clone().unwrap_or_default(),
            ts: self.ts.unwrap_or(0),
            updated: self.updated.or(self.ts).unwrap_or(0),
            drill: self.drill.clone().unwrap_or_default(),
            ..crate::Card::default()
        };
        let mut v = serde_json::to_value(&base).unwrap_or(Value::Null);
        for (k, x) in &self.extra {
            if matches!(k.as_str(), "id" | "project") {
                continue;
            }
            let mut trial = v.clone();
            trial[k.as_str()] = x.clone();
            if let Ok(c) = serde_json::from_value::<crate::Card>(trial.clone()) {
                base = c;
                v = trial;
            }
        }
        base.id = 0;
        base.project = project.to_string();
        base
    }
}

/// `POST /import` body: one project's rows brought from another hub (owner).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ImportRequest {
    /// The project they land in.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::PROJECT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub project: String,
    /// Import even when the project already has cards here.
    #[serde(default)]
    pub force: bool,
    /// Who imports (recorded on the `project.adopted` event).
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
    /// Cards (each gets this hub's next id).
    #[serde(default)]
    #[schemars(length(max = 200))]
    pub tasks: Vec<ImportCard>,
    /// Events, oldest first.
    #[serde(default)]
    #[schemars(length(max = 200))]
    pub events: Vec<ImportEvent>,
    /// Messages, oldest first.
    #[serde(default)]
    #[schemars(length(max = 200))]
    pub messages: Vec<ImportMessage>,
}

/// `POST /import` reply: what was added.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ImportReply {
    /// Always true.
    pub ok: bool,
    /// Cards added.
    pub tasks: i64,
    /// Events added.
    pub events: i64,
    /// Messages added.
    pub messages: i64,
    /// Cards that got a fresh id.
    pub remapped: i64,
}

/// A session on a project row of `/projects`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectAgent {
    /// Session.
    pub session: String,
    /// Online now.
    pub online: bool,
    /// Status line.
    pub status: String,
    /// `ok`, `down` or `errored`.
    pub health: String,
    /// LLM brand.
    pub llm: String,
    /// Model.
    pub model: String,
    /// Hook version.
    pub hook_version: String,
    /// Whether its hooks are older than the hub.
    pub stale_hooks: bool,
}

/// One project of `/projects`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectRow {
    /// Project (`(unassigned)` for cards and peers without one).
    pub project: String,
    /// Brief.
    pub brief: String,
    /// Sessions on it.
    pub agents: Vec<ProjectAgent>,
    /// Cards by status.
    pub tasks: BTreeMap<String, i64>,
    /// Titles of its doing cards.
    pub doing_titles: Vec<String>,
    /// Newest activity (presence, card, brief), ms.
    pub last_activity: i64,
    /// No session online.
    pub idle: bool,
    /// One line: where the project is.
    pub phase: String,
}

/// `GET /projects` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ProjectsReply {
    /// Projects.
    pub projects: Vec<ProjectRow>,
}

/// A card in a phase of `/phases`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PhaseNode {
    /// Card id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// Assignee.
    pub assignee: String,
    /// The assignee's brand (before its colon).
    pub agent: String,
    /// Model.
    pub model: String,
    /// Status.
    pub status: crate::CardStatus,
    /// Difficulty.
    pub difficulty: String,
    /// Created, ms.
    pub ts: i64,
    /// Last change, ms.
    pub updated: i64,
    /// Dependencies.
    pub deps: Vec<i64>,
    /// Source.
    pub source: String,
}

/// A derived phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DerivedPhase {
    /// Phase key (`P3`, `CB`, an explicit card phase, or `Setup N`).
    pub key: String,
    /// Label (= key).
    pub label: String,
    /// What the phase is about, from its card titles.
    pub theme: String,
    /// The goal set with `POST /phase` ("" when none).
    pub goal: String,
    /// Earliest card creation, ms.
    pub start: i64,
    /// Latest card change, ms.
    pub end: i64,
    /// Cards by status.
    pub counts: BTreeMap<String, i64>,
    /// Cards.
    pub total: i64,
    /// `failed`, `active`, `done`, `blocked` or `planned`.
    pub status: String,
    /// Crew brands on it.
    pub agents: Vec<String>,
    /// Crew cards.
    pub crew: Vec<PhaseNode>,
    /// Orchestrator cards.
    pub orchestrators: Vec<PhaseNode>,
}

/// `GET /phases` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PhasesDerivedReply {
    /// Project.
    pub project: String,
    /// Brief.
    pub brief: String,
    /// Phases, oldest first.
    pub phases: Vec<DerivedPhase>,
    /// Cards.
    pub total: i64,
    /// More than half the cards fell into time-clustered `Setup` phases.
    pub sparse: bool,
    /// How the phases were derived.
    pub derived_by: String,
}

/// `POST /project/delete` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct DeleteRequest {
    /// The project.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::PROJECT))]
    pub project: String,
    /// Delete even with open cards (contracts still refuse).
    #[serde(default)]
    pub force: bool,
}

/// `POST /project/delete` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct DeleteReply {
    /// Always true.
    pub ok: bool,
    /// The project.
    pub project: String,
    /// What was removed: `{tasks, peers, messages, events}`.
    pub removed: BTreeMap<String, i64>,
}

/// `POST /project/merge` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct MergeRequest {
    /// The lane folded away.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::PROJECT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub from: String,
    /// The lane it joins.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::PROJECT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub to: String,
}

/// `POST /project/merge` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct MergeReply {
    /// Always true.
    pub ok: bool,
    /// The lane folded away.
    pub from: String,
    /// The lane it joined.
    pub to: String,
    /// What moved: `{cards, events, peers, messages}`.
    pub moved: BTreeMap<String, i64>,
}
