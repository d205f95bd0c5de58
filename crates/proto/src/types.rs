//! The JSON shapes of the hub protocol: stored entities, request bodies and replies.
//!
//! Names and optionality follow `docs/protocol.md` §3: absent fields are omitted
//! rather than sent as `null` where the original omits them (`re`, `kind`, `wake` on messages).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::status::{CardStatus, UnknownStatus};

/// The broadcast address: a message to `all` is delivered to every session but its sender.
pub const BROADCAST: &str = "all";

/// Card statuses the hub knows, as wire strings ([`CardStatus::KNOWN`] as types). Any other value
/// on create becomes `todo`.
pub const CARD_STATUSES: [&str; 7] = [
    "todo", "doing", "testing", "failed", "done", "blocked", "stale",
];

fn is_false(b: &bool) -> bool {
    !*b
}

/// For `Option<Option<T>>` fields: a present `null` becomes `Some(None)` (plain serde folds it
/// into `None`, losing the difference between "absent" and "clear it"). Use with `default`.
fn present_or_null<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// For string fields a hub may send as `null`: `null` reads as the default, like an absent field
/// (a deleted card rebuilt from an event that lacked the field, docs/protocol.md §7.5).
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Option::<T>::deserialize(d).map(Option::unwrap_or_default)
}

/// A message on the bus (docs/protocol.md §3.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Message {
    /// Hub-global, monotonic id; cursors are "greater than".
    pub id: i64,
    /// Hub time at receipt, ms.
    pub ts: i64,
    /// Sender session.
    pub from: String,
    /// Recipient session or `all`.
    pub to: String,
    /// Project the message belongs to.
    #[serde(default)]
    pub project: String,
    /// Body text.
    pub text: String,
    /// The id of the message this one answers (present only when > 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub re: Option<i64>,
    /// `status`, `alert`, `receipt`, `ask`, `contract`, … (present only when non-empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Present (and `false`) only when the sender said "context, not a contract".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<bool>,
}

impl Message {
    /// Whether this message is delivered to `session` (direct or broadcast, never to its sender).
    pub fn deliverable_to(&self, session: &str) -> bool {
        (self.to == session || self.to == BROADCAST) && self.from != session
    }

    /// Whether the sender marked the message as context only (`wake:false`).
    pub fn is_no_wake(&self) -> bool {
        self.wake == Some(false)
    }
}

/// `POST /send` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct SendRequest {
    /// Sender session (required).
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::SESSION), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub from: String,
    /// Recipient; defaults to `all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::SESSION))]
    pub to: Option<String>,
    /// Body text (required, non-blank).
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::MESSAGE_TEXT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub text: String,
    /// Project; defaults to the sender's peer project, else the suffix of `from`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::PROJECT))]
    pub project: Option<String>,
    /// The message this one answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub re: Option<i64>,
    /// Message kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::KIND))]
    pub kind: Option<String>,
    /// `false` to send context that must not wake the recipient.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<bool>,
}

/// `POST /send` reply.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SendReply {
    /// Always true on success.
    pub ok: bool,
    /// The new message's id.
    pub id: i64,
}

/// `GET /inbox` and `GET /poll` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct InboxReply {
    /// Deliverable messages with `id > since`, oldest first.
    pub messages: Vec<Message>,
    /// The id of the last message returned, or `since` when none.
    pub cursor: i64,
    /// Set when `since` was above the hub's tip and was clamped to it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub rewound: bool,
    /// Set when more messages than one page are waiting (read again from `cursor`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub more: bool,
}

/// `POST /register` and `POST /status` body: a presence touch.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegisterRequest {
    /// The session being touched (required).
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::SESSION), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub session: String,
    /// Project; kept when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::PROJECT))]
    pub project: Option<String>,
    /// Free-text status; kept when absent (on `/register`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::STATUS))]
    pub status: Option<String>,
    /// Client hook version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::HOOK_VERSION))]
    pub hook_version: Option<String>,
    /// Which LLM family runs the seat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::LLM))]
    pub llm: Option<String>,
    /// Model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::MODEL))]
    pub model: Option<String>,
    /// Peer kind (`agent`, `orch`, `tool`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::KIND))]
    pub kind: Option<String>,
    /// Runner phase (`working idle cut stalled parked`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::PHASE))]
    pub phase: Option<String>,
    /// When the phase began, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_since: Option<i64>,
    /// Who the seat is (the runner's PERSONA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::LLM))]
    pub persona: Option<String>,
    /// How the seat runs (the runner's AGENT, the CLI driver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::LLM))]
    pub agent: Option<String>,
}

/// A presence row as `/peers` lists it (docs/protocol.md §3.2, §4.4).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Peer {
    /// Bus address.
    pub session: String,
    /// Last touch, ms.
    pub last_seen: i64,
    /// Seen within the online window (a held poll counts as present).
    #[serde(default)]
    pub online: bool,
    /// Free-text status.
    #[serde(default)]
    pub status: String,
    /// `ok`, `errored` or `down`, derived from the status prefix.
    #[serde(default)]
    pub health: String,
    /// Canonical project.
    #[serde(default)]
    pub project: String,
    /// Runner phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// When the phase began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_since: Option<i64>,
    /// Peer kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// LLM family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<String>,
    /// Model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Client hook version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_version: Option<String>,
    /// Runner persona.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona: Option<String>,
    /// Runner agent (CLI driver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Highest message id delivered to this session (monotonic).
    #[serde(default)]
    pub delivered_up_to: i64,
    /// The signer's public key (unsigned hubs leave it out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pubkey: Option<String>,
    /// Always false here: the hub has no hook version of its own to compare with.
    #[serde(default)]
    pub stale_hooks: bool,
    /// Set once the session called `/register` or `/status`; peers that only polled, read or
    /// sent are anonymous and reaped sooner.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub registered: bool,
}

/// `GET /peers` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeersReply {
    /// The hub's version.
    #[serde(default)]
    pub hub_version: String,
    /// `off`, `warn` or `enforce`.
    #[serde(default)]
    pub auth_mode: String,
    /// Known peers within the peer TTL.
    pub peers: Vec<Peer>,
}

/// `GET /peer?session=` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeerReply {
    /// Bus address.
    pub session: String,
    /// Canonical project.
    #[serde(default)]
    pub project: String,
    /// Last touch, ms.
    pub last_seen: i64,
    /// Online now.
    pub online: bool,
    /// The shared delivery ledger.
    pub delivered_up_to: i64,
}

/// `POST /delivered` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveredRequest {
    /// Session whose ledger is raised.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::SESSION), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub session: String,
    /// New floor (never lowers the ledger; absent is 0, a no-op).
    #[serde(default)]
    pub up_to: i64,
}

/// One card history entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HistoryEntry {
    /// Previous status (absent on create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// New status.
    pub to: String,
    /// Who moved it.
    #[serde(default)]
    pub by: String,
    /// When, ms.
    pub ts: i64,
    /// The note given with the move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One card log (note) entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LogEntry {
    /// When, ms.
    pub ts: i64,
    /// Author.
    #[serde(default)]
    pub by: String,
    /// Note text.
    pub text: String,
}

/// One checklist item.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChecklistItem {
    /// Item text (at most [`crate::limits::CHECKLIST_TEXT`] characters as sent).
    #[schemars(length(max = crate::limits::CHECKLIST_TEXT))]
    pub text: String,
    /// Ticked.
    #[serde(default)]
    pub done: bool,
}

/// A checklist item as clients send it: a bare string or `{text, done}`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ChecklistInput {
    /// Plain text, not done (at most [`crate::limits::CHECKLIST_TEXT`] characters as sent).
    Text(#[schemars(length(max = crate::limits::CHECKLIST_TEXT))] String),
    /// A full item.
    Item(ChecklistItem),
}

impl From<ChecklistInput> for ChecklistItem {
    fn from(i: ChecklistInput) -> Self {
        match i {
            ChecklistInput::Text(text) => ChecklistItem { text, done: false },
            ChecklistInput::Item(item) => item,
        }
    }
}

/// A card on the board (docs/protocol.md §3.3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Card {
    /// Hub-global card id.
    pub id: i64,
    /// Project.
    #[serde(default)]
    pub project: String,
    /// Title.
    #[serde(default, deserialize_with = "null_as_default")]
    pub title: String,
    /// Status ([`CardStatus`]: one of [`CARD_STATUSES`], or any other string kept as sent).
    #[serde(default)]
    pub status: CardStatus,
    /// Assignee session (or bare agent name).
    #[serde(default, deserialize_with = "null_as_default")]
    pub assignee: String,
    /// Creator, treated as the assigner.
    #[serde(default)]
    pub by: String,
    /// Created, ms.
    #[serde(default)]
    pub ts: i64,
    /// Last change, ms.
    #[serde(default)]
    pub updated: i64,
    /// `easy`, `medium`, `hard` or empty.
    #[serde(default, deserialize_with = "null_as_default")]
    pub difficulty: String,
    /// Model hint.
    #[serde(default)]
    pub model: String,
    /// Phase label.
    #[serde(default)]
    pub phase: String,
    /// Where the card came from (`git`, `todo`, `bridge`, …).
    #[serde(default)]
    pub source: String,
    /// Effort hint.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub effort: String,
    /// One-line summary.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
    /// Card ids this one waits on.
    #[serde(default)]
    pub deps: Vec<i64>,
    /// Status changes.
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
    /// Notes.
    #[serde(default)]
    pub log: Vec<LogEntry>,
    /// Checklist.
    #[serde(default)]
    pub checklist: Vec<ChecklistItem>,
    /// The drill line: how to prove the card is done.
    #[serde(default)]
    pub drill: String,
    /// Who last moved it to doing or testing (the seat that did the work); the one who moved it
    /// to done only when no one had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worked_by: Option<String>,
    /// Who moved it to done, when that is not who worked it (a person closing a seat's card).
    /// Cleared when the card leaves done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_by: Option<String>,
    /// Cost bookkeeping and any other fields clients attach, kept as given.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `POST /task` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskCreateRequest {
    /// Project (defaults to the suffix of `by`).
    #[serde(default)]
    #[schemars(length(max = crate::limits::PROJECT))]
    pub project: Option<String>,
    /// Title (required).
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::TITLE), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub title: String,
    /// Initial status; `stale` or unknown becomes `todo`.
    #[serde(default)]
    pub status: Option<CardStatus>,
    /// Assignee.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub assignee: Option<String>,
    /// Creator.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
    /// Difficulty.
    #[serde(default)]
    #[schemars(regex(
        pattern = r"^\s*([Ee][Aa][Ss][Yy]|[Mm][Ee][Dd][Ii][Uu][Mm]|[Hh][Aa][Rr][Dd])?\s*$"
    ))]
    pub difficulty: Option<String>,
    /// Model hint.
    #[serde(default)]
    #[schemars(length(max = crate::limits::CARD_MODEL))]
    pub model: Option<String>,
    /// Dependencies.
    #[serde(default)]
    #[schemars(length(max = crate::limits::DEPS))]
    pub deps: Option<Vec<i64>>,
    /// Phase label.
    #[serde(default)]
    #[schemars(length(max = crate::limits::CARD_PHASE))]
    pub phase: Option<String>,
    /// Source.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SOURCE))]
    pub source: Option<String>,
    /// Effort.
    #[serde(default)]
    #[schemars(length(max = crate::limits::EFFORT))]
    pub effort: Option<String>,
    /// Summary.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SUMMARY))]
    pub summary: Option<String>,
    /// Checklist, strings or items.
    #[serde(default)]
    #[schemars(length(max = crate::limits::CHECKLIST_ITEMS))]
    pub checklist: Option<Vec<ChecklistInput>>,
    /// Drill line.
    #[serde(default)]
    #[schemars(length(max = crate::limits::DRILL))]
    pub drill: Option<String>,
    /// First log note.
    #[serde(default)]
    #[schemars(length(max = crate::limits::LOG_TEXT))]
    pub note: Option<String>,
    /// Historical creation time (at most a day in the future).
    #[serde(default)]
    pub ts: Option<i64>,
    /// Cost kind.
    #[serde(default)]
    #[schemars(length(max = 24))]
    pub cost_kind: Option<String>,
    /// Cost in USD.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// Cost note.
    #[serde(default)]
    #[schemars(length(max = 80))]
    pub cost_note: Option<String>,
}

/// `POST /task/update` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskUpdateRequest {
    /// Card id (required).
    #[serde(default)]
    #[schemars(extend("x-required" = true), range(min = 1))]
    pub id: i64,
    /// New status (an unknown one is ignored by the hub).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CardStatus>,
    /// Note appended to the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::LOG_TEXT))]
    pub note: Option<String>,
    /// Drill line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::DRILL))]
    pub drill: Option<String>,
    /// Who is acting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
    /// New assignee (frozen unless the mover is the assignee or `reassign` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::SESSION))]
    pub assignee: Option<String>,
    /// Explicit reassignment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reassign: Option<bool>,
    /// New title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::TITLE))]
    pub title: Option<String>,
    /// New summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::SUMMARY))]
    pub summary: Option<String>,
    /// New difficulty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^\s*([Ee][Aa][Ss][Yy]|[Mm][Ee][Dd][Ii][Uu][Mm]|[Hh][Aa][Rr][Dd])?\s*$"
    ))]
    pub difficulty: Option<String>,
    /// New model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::CARD_MODEL))]
    pub model: Option<String>,
    /// New dependency list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::DEPS))]
    pub deps: Option<Vec<i64>>,
    /// Replaces the checklist (`null` clears it: absent is `None`, `null` is `Some(None)`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_or_null"
    )]
    #[schemars(length(max = crate::limits::CHECKLIST_ITEMS))]
    pub checklist: Option<Option<Vec<ChecklistInput>>>,
    /// Delete the card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete: Option<bool>,
    /// Blast-radius record, kept on the event only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blast: Option<Value>,
}

/// `POST /task/checklist-toggle` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ChecklistToggleRequest {
    /// Card id.
    #[serde(default)]
    #[schemars(extend("x-required" = true), range(min = 1))]
    pub id: i64,
    /// 0-based item index.
    #[serde(default)]
    #[schemars(extend("x-required" = true), range(min = 0))]
    pub index: i64,
    /// New state.
    #[serde(default)]
    pub done: bool,
    /// Who toggled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
}

/// `{ok, task}` reply of the card writes.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskReply {
    /// True on success.
    pub ok: bool,
    /// The card after the change.
    pub task: Card,
}

/// `GET /tasks` reply. Clients read the cards as [`Card`]s (a slim one with an empty log,
/// history and checklist, its counts in [`Card::extra`]); the hub writes each card as the JSON
/// view it sends (`C` = [`Value`]: a slim card is a projection of a card).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "TasksReply", description = "`GET /tasks` reply.")]
pub struct TasksReply<C = Card> {
    /// Cards. A slim one (`fields=slim`) leaves out `log`, `history` and `checklist` and carries
    /// `logCount`, `checklistCount` and `checklistDone` instead.
    pub tasks: Vec<C>,
    /// Echoes `slim` when asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<String>,
}

/// An entry of the unified event log (docs/protocol.md §3.4): common fields plus type-specific ones flattened.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Event {
    /// Hub-global event id.
    pub id: i64,
    /// When, ms.
    pub ts: i64,
    /// `message`, `created`, `moved`, `updated`, `deleted`, `presence.online`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// Project.
    #[serde(default)]
    pub project: String,
    /// Actor.
    #[serde(default)]
    pub by: String,
    /// Type-specific fields (`taskId`, `from`, `to`, `msgId`, `text`, …).
    #[serde(flatten)]
    pub data: Map<String, Value>,
}

/// `GET /events` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct EventsReply {
    /// Matching events, oldest first.
    pub events: Vec<Event>,
    /// Last returned id, or `since`.
    pub cursor: i64,
    /// Newest event id in the log.
    pub latest: i64,
}

/// `GET /card` reply. Fields are in name order, as the hub has always written them. Clients read
/// the card as a [`Card`]; the hub writes it as the JSON view it sends (`C` = [`Value`]: a
/// deleted card is rebuilt from its last event with only some of a card's fields).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(
    rename = "CardReply",
    description = "`GET /card` reply. Fields are in name order, as the hub has always written them."
)]
pub struct CardReply<C = Card> {
    /// What the turns that worked on this card cost (docs/protocol.md §7.6).
    #[serde(default)]
    pub cost: crate::cost::CostSummary,
    /// Events of this card.
    pub events: Vec<Event>,
    /// Messages whose text cites `#id`.
    pub messages: Vec<Message>,
    /// The card (a deleted card is rebuilt from its last event with status `deleted`).
    pub task: Option<C>,
}

/// A lesson.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Lesson {
    /// Id (never reused).
    pub id: i64,
    /// `global` or a lower-case agent name.
    pub scope: String,
    /// Lesson text.
    pub text: String,
    /// Author.
    #[serde(default)]
    pub by: String,
    /// When, ms.
    pub ts: i64,
    /// Project it was learned in.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub project: String,
}

/// `POST /lesson` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct LessonRequest {
    /// Text (required).
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::LESSON_TEXT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub text: String,
    /// Scope, default `global`.
    #[serde(default)]
    #[schemars(length(max = crate::limits::LESSON_SCOPE))]
    pub scope: Option<String>,
    /// Author.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
    /// Project.
    #[serde(default)]
    #[schemars(length(max = crate::limits::PROJECT))]
    pub project: Option<String>,
}

/// `GET /lessons` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct LessonsReply {
    /// Lessons in scope.
    pub lessons: Vec<Lesson>,
}

/// A policy link between projects whose seats may wake each other.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyLink {
    /// Two to four linked projects.
    pub projects: Vec<String>,
    /// Why they are linked.
    #[serde(default)]
    pub reason: String,
    /// Who declared it.
    #[serde(default)]
    pub declared_by: String,
    /// When, ms.
    #[serde(default)]
    pub ts: i64,
}

/// `GET /policy` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct PolicyReply {
    /// Autonomy levels per project (`*` is the default).
    #[serde(default)]
    pub autonomy: Map<String, Value>,
    /// Project links.
    #[serde(default)]
    pub links: Vec<PolicyLink>,
    /// The integrate dials per project (`*` is the default): `{commit: bool, push: bool}`.
    /// Absent means commit on, push off.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub dials: Map<String, Value>,
}

/// A set of projects to link or unlink in `POST /policy`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct PolicyLinkRequest {
    /// Two to four projects.
    #[serde(default)]
    #[schemars(extend("x-required" = true, "uniqueItems" = true), length(min = 2, max = 4), inner(length(min = 1, max = crate::limits::PROJECT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]")))]
    pub projects: Vec<String>,
    /// Why (links only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `POST /policy` body: any combination of an autonomy change, a link and an unlink.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct PolicyRequest {
    /// Autonomy level (1–4) per project; `*` is the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "propertyNames" = {"maxLength": crate::limits::PROJECT},
        "additionalProperties" = {"type": "integer", "minimum": 1, "maximum": 4}
    ))]
    pub autonomy: Option<Map<String, Value>>,
    /// Link these projects (their seats may wake each other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<PolicyLinkRequest>,
    /// Remove the link between exactly these projects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unlink: Option<PolicyLinkRequest>,
    /// Integrate dials to change per project: `{project: {commit?: bool, push?: bool}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "propertyNames" = {"maxLength": crate::limits::PROJECT},
        "additionalProperties" = {
            "type": "object",
            "properties": {"commit": {"type": "boolean"}, "push": {"type": "boolean"}, "reroute": {"type": "boolean"}},
            "additionalProperties": false
        }
    ))]
    pub dials: Option<Map<String, Value>>,
    /// Who declares it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
}

/// One row of `/contracts`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Contract {
    /// Message id of the contract.
    pub id: i64,
    /// Assignee.
    pub to: String,
    /// Contract text.
    pub text: String,
    /// Sent, ms.
    pub ts: i64,
    /// Age, ms.
    pub age_ms: i64,
    /// Whether an answer exists.
    pub answered: bool,
    /// The answer `{id, ts, text}`.
    pub answer: Option<Value>,
    /// `answered`, `ack`, `abandoned`, `stalled`, `waiting` or `superseded`.
    pub disposition: String,
    /// Assignee online.
    pub assignee_online: bool,
    /// Assignee status text.
    pub assignee_status: String,
    /// Assignee last seen (null when never seen).
    pub assignee_last_seen_ms: Option<i64>,
    /// Reaper record `{ts, reason}`.
    pub reaped: Option<Value>,
    /// The contract's kind, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `false` when sent as context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<bool>,
}

/// `GET /contracts` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContractsReply {
    /// The dispatcher.
    pub session: String,
    /// Waiting, stalled and answered rows.
    pub contracts: Vec<Contract>,
    /// Abandoned rows.
    pub abandoned_contracts: Vec<Contract>,
    /// Superseded rows.
    pub superseded_contracts: Vec<Contract>,
    /// Ack rows (nothing owed).
    pub ack_contracts: Vec<Contract>,
    /// Unanswered rows in `contracts`.
    pub open: i64,
    /// Count of `waiting`.
    pub waiting: i64,
    /// Count of `stalled`.
    pub stalled: i64,
    /// Count of `abandoned`.
    pub abandoned: i64,
    /// Count of `superseded`.
    pub superseded: i64,
    /// Count of `ack`.
    pub ack: i64,
    /// Count of `answered`.
    pub answered: i64,
    /// Contracts in the window, all dispositions (the counts above add up to it; the lists
    /// hold one page of them).
    #[serde(default)]
    pub total: i64,
    /// When more rows follow this page: pass it as `cursor` for the next one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<i64>,
}

/// `GET /_op` reply: the recorded outcome of an idempotent write.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct OpReply {
    /// `committed`, `rejected` or `unknown`.
    pub status: String,
    /// HTTP status of the first run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
    /// Reply body of the first run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
}

/// `POST /project` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ProjectRequest {
    /// Project (required).
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::PROJECT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub project: String,
    /// Brief.
    #[serde(default)]
    #[schemars(length(max = crate::limits::BRIEF))]
    pub brief: Option<String>,
    /// Author.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
}

/// `POST /phase` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct PhaseRequest {
    /// Project.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::PROJECT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub project: String,
    /// Phase name.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::CARD_PHASE), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub phase: String,
    /// Goal.
    #[serde(default)]
    #[schemars(length(max = crate::limits::GOAL))]
    pub goal: Option<String>,
    /// Author.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
}

/// `{ok: true}`: the reply of writes with nothing else to say (`/status`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct OkReply {
    /// True on success.
    pub ok: bool,
}

/// `POST /register` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct RegisterReply {
    /// True on success.
    pub ok: bool,
    /// The registered session (absent when it was already known and nothing changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// `POST /delivered` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveredReply {
    /// True on success.
    pub ok: bool,
    /// The ledger after the raise.
    pub delivered_up_to: i64,
}

/// `GET /recent` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct RecentReply {
    /// Newest messages, oldest first.
    pub messages: Vec<Message>,
}

/// `POST /lesson` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct LessonReply {
    /// True on success.
    pub ok: bool,
    /// Set when the same lesson already existed (nothing stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup: Option<bool>,
    /// Lessons stored so far (new lessons only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    /// The new lesson's id (new lessons only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
}

/// `POST /policy` reply: the policy after the change.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct PolicyWriteReply {
    /// True on success.
    pub ok: bool,
    /// Autonomy levels per project.
    pub autonomy: Map<String, Value>,
    /// Project links.
    pub links: Vec<PolicyLink>,
    /// The integrate dials per project: `{commit: bool, push: bool}`.
    #[serde(default)]
    pub dials: Map<String, Value>,
}

/// `POST /project` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ProjectWriteReply {
    /// True on success.
    pub ok: bool,
    /// Project.
    pub project: String,
    /// The stored brief.
    pub brief: String,
}

/// `GET /project` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ProjectReply {
    /// Project.
    pub project: String,
    /// Brief (empty when none was set).
    pub brief: Value,
    /// Author of the brief (null when none).
    pub by: Option<Value>,
    /// When it was set, ms (null when none).
    pub ts: Option<Value>,
}

/// `POST /phase` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct PhaseReply {
    /// True on success.
    pub ok: bool,
    /// Project.
    pub project: String,
    /// Phase.
    pub phase: String,
    /// The stored goal.
    pub goal: String,
}

/// `GET /` reply for a JSON client (a browser asking for HTML gets the dashboard). Fields are
/// in name order, as the hub has always written them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct BannerReply {
    /// Where the OpenAPI document is (`/openapi.json`).
    pub docs: String,
    /// Where the health report is (`/health`).
    pub health: String,
    /// Where the Prometheus metrics are (`/metrics`).
    pub metrics: String,
    /// `trantor hub`.
    pub name: String,
    /// The store in use (`sqlite:<path>`, `postgres:…`).
    pub store: String,
    /// The hub's version.
    pub version: String,
}

/// `/health` reply: liveness, row counts, persistence, retention and the duty agent. Fields are
/// in name order, as the hub has always written them. The status is 503 when the store fails.
/// The original's hub writes only `ok`, `authMode`, `peers`, `messages`, `streams`, `persist`
/// and `duty`: the other fields are optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthReply {
    /// `off`, `warn` or `enforce`.
    pub auth_mode: String,
    /// Cards stored (absent from the original's hub).
    pub cards: Option<i64>,
    /// The duty agent's status (`configured`, thresholds, escalations, failures, …), or
    /// `{"error": …}` when it could not be read.
    pub duty: Value,
    /// Events stored (absent from the original's hub).
    pub events: Option<i64>,
    /// The periodic-work lease over a store shared by several hubs (PostgreSQL); `null` on the
    /// embedded store, where the hub always runs the periodic work.
    #[serde(default)]
    pub lease: Option<HealthLease>,
    /// Messages stored.
    pub messages: i64,
    /// The store answers reads and the newest write succeeded.
    pub ok: bool,
    /// Peers known.
    pub peers: i64,
    /// Persistence status.
    pub persist: HealthPersist,
    /// Long polls held open now (absent from the original's hub).
    pub polls_held: Option<u64>,
    /// Retention settings and what retention removed (absent from the original's hub; never
    /// `null`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "HealthRetention")]
    pub retention: Option<HealthRetention>,
    /// The store in use (absent from the original's hub).
    pub store: Option<String>,
    /// Event streams open now.
    pub streams: u64,
    /// The store's durability level as applied, `full` or `normal` (absent from the original's
    /// hub).
    pub sync: Option<String>,
    /// The hub's version (absent from the original's hub).
    pub version: Option<String>,
}

/// `/health`'s `lease` object (several hubs on one PostgreSQL database).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthLease {
    /// Whether this hub runs the periodic work (reaper, duty, retention) now.
    pub held: bool,
    /// The label of the hub that holds the lease (its address and pid), if any.
    pub holder: Option<String>,
}

/// `/health`'s `persist` object.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthPersist {
    /// The last store error (empty when none).
    pub last_error: String,
    /// When the newest write failed, ms (null when writes succeed).
    pub last_error_at: Option<i64>,
    /// Same as the reply's `ok`.
    pub ok: bool,
}

/// `/health`'s `retention` object.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthRetention {
    /// What retention removed since start and in its last pass (`messages`, `events`, `ops`,
    /// `lastRunTs`, `last`).
    pub pruned: Value,
    /// The read-history window in whole days.
    pub read_history_days: i64,
    /// The read-history window, ms (0 keeps everything).
    pub read_history_ms: i64,
}

/// `GET /phase` reply: a project's phase goals, ordered by phase name.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct PhasesReply {
    /// The goals (a cleared goal is left out).
    pub phases: Vec<PhaseGoal>,
    /// Project.
    pub project: String,
}

/// One phase goal in [`PhasesReply`]. Fields are in name order, as the hub has always written
/// them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct PhaseGoal {
    /// Who set it (`""` when unknown).
    pub by: Value,
    /// The goal.
    pub goal: String,
    /// The phase's name.
    pub phase: String,
    /// When it was set, ms (null when unknown).
    pub ts: Value,
}

/// A duty seat's report of a nudge it could not make, as `/duty/failure` records it (and
/// `/health`'s `duty.failures` lists it). Fields are in name order, as the hub has always written
/// them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DutyFailure {
    /// The duty session that reported it.
    pub by: String,
    /// `relay-403` or `skipped-nudge`.
    pub kind: String,
    /// The recipient's project.
    pub project: String,
    /// The recipient that could not be nudged.
    pub recipient: String,
    /// What happened (at most 500 characters).
    pub text: String,
    /// When it was recorded, ms.
    pub ts: i64,
}

/// `POST /duty/failure` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureRequest {
    /// The recipient that could not be nudged.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::SESSION), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub recipient: String,
    /// Its project (default: the recipient's suffix).
    #[serde(default)]
    #[schemars(length(max = crate::limits::PROJECT))]
    pub project: Option<String>,
    /// `relay-403` or `skipped-nudge`.
    #[serde(default)]
    #[schemars(extend("x-required" = true, "enum" = ["relay-403", "skipped-nudge"]))]
    pub kind: String,
    /// What happened (longer is cut to 500 characters).
    #[serde(default)]
    pub detail: String,
    /// The reporting session (must be the duty session).
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
    /// Alias of `by`.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub session: Option<String>,
}

/// `POST /overseer/duty` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct AppointRequest {
    /// The new duty session; empty or absent clears the appointment.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub session: Option<String>,
}

/// `POST /duty/failure` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct DutyFailureReply {
    /// The failure as recorded.
    pub failure: DutyFailure,
    /// True on success.
    pub ok: bool,
}

/// `POST /overseer/duty` reply. Fields are in name order, as the hub has always written them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppointReply {
    /// The appointed duty session (null: the appointment was cleared).
    pub appointed: Option<String>,
    /// The duty session in force (null: none).
    pub duty_session: Option<String>,
    /// True on success.
    pub ok: bool,
    /// `RELAY_DUTY_SESSION` when the hub's configuration overrides the appointment (else null).
    pub overridden_by: Option<String>,
}

/// `GET /catchup` reply: what happened since the session last looked. Fields are in name order,
/// as the hub has always written them. Every field reads as empty when a hub leaves it out (the
/// original hub has only the project digest); the document still lists the fields this hub
/// always writes as required (`x-required`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
#[serde(rename_all = "camelCase")]
pub struct CatchupReply {
    /// Cards of the project by status.
    #[schemars(extend("x-required" = true))]
    pub board: std::collections::BTreeMap<String, i64>,
    /// Card events (created, moved, updated, deleted) in the project since the last look.
    #[schemars(extend("x-required" = true))]
    pub card_events: Vec<Event>,
    /// The session's open contracts.
    #[schemars(extend("x-required" = true))]
    pub contracts: CatchupContracts,
    /// The rest of the project's crew.
    #[schemars(extend("x-required" = true))]
    pub crew: Vec<CatchupPeer>,
    /// Messages to the session since the last look (receipts apart).
    #[schemars(extend("x-required" = true))]
    pub messages: Vec<Message>,
    /// The session's project.
    #[schemars(extend("x-required" = true))]
    pub project: String,
    /// Receipts to the session since the last look.
    #[schemars(extend("x-required" = true))]
    pub receipts: Vec<Message>,
    /// The session.
    #[schemars(extend("x-required" = true))]
    pub session: String,
    /// Where this look started.
    #[schemars(extend("x-required" = true))]
    pub since: CatchupSince,
    /// The newest message id on the hub.
    #[schemars(extend("x-required" = true))]
    pub tip: i64,
    /// Direct messages the session has not read.
    #[schemars(extend("x-required" = true))]
    pub unread: Vec<Message>,
    /// Cards waiting on the session (assigned and open, or its own in review), at most 20.
    #[schemars(extend("x-required" = true))]
    pub waiting_on_me: Vec<CardBrief>,
}

/// Where a catch-up started.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct CatchupSince {
    /// The event id after which card events are listed (null: the newest ones).
    pub event: Option<i64>,
    /// The message id after which messages are listed.
    #[serde(default)]
    #[schemars(extend("x-required" = true))]
    pub msg: i64,
}

/// A crew member in a catch-up. Fields are in name order.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatchupPeer {
    /// `ok`, `stale`, … as `/peers` reports it.
    #[serde(default)]
    #[schemars(extend("x-required" = true))]
    pub health: String,
    /// Last seen, ms.
    #[serde(default)]
    #[schemars(extend("x-required" = true))]
    pub last_seen: i64,
    /// Online now.
    #[serde(default)]
    #[schemars(extend("x-required" = true))]
    pub online: bool,
    /// The runner's phase (null when none).
    pub phase: Option<String>,
    /// Bus address.
    #[serde(default)]
    #[schemars(extend("x-required" = true))]
    pub session: String,
    /// Status text.
    #[serde(default)]
    #[schemars(extend("x-required" = true))]
    pub status: String,
}

/// A card named in a catch-up. Fields are in name order.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct CardBrief {
    /// Assignee.
    #[schemars(extend("x-required" = true))]
    pub assignee: String,
    /// Card id.
    #[schemars(extend("x-required" = true))]
    pub id: i64,
    /// Status.
    #[schemars(extend("x-required" = true))]
    pub status: CardStatus,
    /// Title.
    #[schemars(extend("x-required" = true))]
    pub title: String,
}

/// A catch-up's contracts: the counts and the open ones.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct CatchupContracts {
    /// The open contracts (text cut to 200 characters).
    #[schemars(extend("x-required" = true))]
    pub items: Vec<OpenContract>,
    /// How many are open.
    #[schemars(extend("x-required" = true))]
    pub open: i64,
    /// How many of those are stalled.
    #[schemars(extend("x-required" = true))]
    pub stalled: i64,
}

/// An open contract in a catch-up. Fields are in name order.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
#[serde(rename_all = "camelCase")]
pub struct OpenContract {
    /// How long it has been open, ms.
    #[schemars(extend("x-required" = true))]
    pub age_ms: i64,
    /// Its disposition (as `/contracts` says).
    #[schemars(extend("x-required" = true))]
    pub disposition: String,
    /// The contract message's id.
    #[schemars(extend("x-required" = true))]
    pub id: i64,
    /// Its text (first 200 characters).
    #[schemars(extend("x-required" = true))]
    pub text: String,
    /// Who owes the answer.
    #[schemars(extend("x-required" = true))]
    pub to: String,
}

/// The error body of every non-2xx reply: `{"error": "..."}` plus route-specific fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// What went wrong, for a person.
    pub error: String,
    /// Extra fields (`kinds`, `id`, `assignee`, `limit`, …).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_omits_absent_optionals() {
        let m = Message {
            id: 1,
            ts: 2,
            from: "a:p".into(),
            to: "all".into(),
            project: "p".into(),
            text: "hi".into(),
            re: None,
            kind: None,
            wake: None,
        };
        let v = serde_json::to_value(&m).unwrap_or_default();
        assert!(v.get("re").is_none() && v.get("kind").is_none() && v.get("wake").is_none());
        assert!(m.deliverable_to("b:p") && !m.deliverable_to("a:p"));
    }

    #[test]
    fn checklist_accepts_strings_and_items() {
        let v: Vec<ChecklistInput> =
            serde_json::from_str(r#"["a", {"text":"b","done":true}]"#).unwrap_or_default();
        let items: Vec<ChecklistItem> = v.into_iter().map(Into::into).collect();
        assert_eq!(items.len(), 2);
        assert!(!items[0].done && items[1].done);
    }

    #[test]
    fn checklist_null_differs_from_absent() {
        let absent: TaskUpdateRequest = serde_json::from_str(r#"{"id":1}"#).unwrap_or_default();
        assert!(absent.checklist.is_none());
        let null: TaskUpdateRequest =
            serde_json::from_str(r#"{"id":1,"checklist":null}"#).unwrap_or_default();
        assert!(matches!(null.checklist, Some(None)));
        let set: TaskUpdateRequest =
            serde_json::from_str(r#"{"id":1,"checklist":["a"]}"#).unwrap_or_default();
        assert!(matches!(set.checklist, Some(Some(ref v)) if v.len() == 1));
    }

    #[test]
    fn catchup_reads_what_a_hub_leaves_out() {
        let empty: Option<CatchupReply> = serde_json::from_str("{}").ok();
        assert!(empty.is_some_and(|c| c.tip == 0 && c.crew.is_empty() && c.session.is_empty()));
        let c: Option<CatchupReply> = serde_json::from_str(
            r#"{"session":"a:p","crew":[{"session":"b:p"}],"waitingOnMe":[{"id":4}],
                "since":{"msg":3}}"#,
        )
        .ok();
        let c = c.unwrap_or_default();
        assert_eq!(c.crew.len(), 1);
        assert!(!c.crew[0].online && c.crew[0].phase.is_none());
        assert_eq!(c.waiting_on_me[0].status, CardStatus::Todo);
        assert_eq!((c.since.msg, c.since.event), (3, None));
    }

    #[test]
    fn card_keeps_unknown_fields() {
        let c: Card =
            serde_json::from_str(r#"{"id":3,"costUsd":1.5,"title":"t"}"#).unwrap_or_default();
        assert_eq!(c.extra.get("costUsd"), Some(&serde_json::json!(1.5)));
    }
}

/// A verification gate: a claim that must be verified before the related work ships; an open
/// gate tied to a card keeps that card from moving to done.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifyGate {
    /// Gate id (hub-global).
    pub id: i64,
    /// Project.
    pub project: String,
    /// What must be verified.
    pub claim: String,
    /// Why it matters.
    #[serde(default)]
    pub why: String,
    /// The concrete check that would verify it.
    #[serde(default)]
    pub how_to_verify: String,
    /// `open`, `verified`, `failed` or `waived`.
    pub status: String,
    /// Who added it.
    #[serde(default)]
    pub by: String,
    /// When, ms.
    pub ts: i64,
    /// The card it gates, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card: Option<i64>,
    /// Who resolved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_by: Option<String>,
    /// The resolution note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_note: Option<String>,
    /// When it was resolved, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_ts: Option<i64>,
}

/// `POST /verify-gate` body: add a gate (`claim`, …) or resolve one (`resolve: true`, `id`).
///
/// The project is `project`, or else the text after the last colon of `by`; one of the two is
/// required (the schema's first `allOf` arm), and an add needs a claim while a resolve needs an
/// id (the second).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("allOf" = [
    {"anyOf": [
        {"required": ["project"], "properties": {"project": {"type": "string", "pattern": "[^\\t\\n\\x0B\\x0C\\r \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]"}}},
        {"required": ["by"], "properties": {"by": {"type": "string", "pattern": ":[^:]{1,80}$"}}}
    ]},
    {"anyOf": [
        {"required": ["claim"], "properties": {
            "resolve": {"const": false}, "claim": {"type": "string", "pattern": "[^\\t\\n\\x0B\\x0C\\r \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]"}}},
        {"required": ["resolve", "id"], "properties": {
            "resolve": {"const": true}, "id": {"type": "integer"}}}
    ]}
]))]
pub struct VerifyGateRequest {
    /// What must be verified (add).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 300))]
    pub claim: Option<String>,
    /// Why it matters (add).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 300))]
    pub why: Option<String>,
    /// The check that would verify it (add).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 300))]
    pub how_to_verify: Option<String>,
    /// The card the gate holds (add).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card: Option<i64>,
    /// Project [default: the `by` session's project].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::PROJECT))]
    pub project: Option<String>,
    /// Who.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
    /// Resolve instead of add.
    #[serde(default)]
    pub resolve: bool,
    /// The gate to resolve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    /// `verified` (default), `failed` or `waived`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["verified", "failed", "waived", null]))]
    pub status: Option<String>,
    /// Resolution note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 300))]
    pub note: Option<String>,
}

/// `POST /verify-gate` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct VerifyGateReply {
    /// Always true on success.
    pub ok: bool,
    /// The gate as stored.
    pub gate: VerifyGate,
    /// An open gate with the same claim already existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dedup: bool,
}

/// `GET /verify-gates` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct VerifyGatesReply {
    /// The gates (open only unless `all=1`).
    pub gates: Vec<VerifyGate>,
}
