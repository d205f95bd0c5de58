//! Tool arguments: JSON schemas an LLM can fill in without guessing, read leniently.
//!
//! Names and types follow the original server's tools (`tests-compat/mcp-tools-0.18.72.json`) so
//! agents that learned them keep working. Models often quote numbers (`"id": "12"`), prefix card
//! ids with `#`, or send `"true"`; those are accepted rather than failing the call over a type
//! quibble. The schema still advertises the proper type.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use trantor_proto::CardStatus;
pub use trantor_proto::advise::DIFFICULTIES;

/// The status a tool argument names, read as the hub reads it (trimmed, any case), when a tool
/// may set it ([`CardStatus::is_settable`]); else the tool's error, naming the allowed ones.
pub fn movable_status(s: &str) -> Result<CardStatus, String> {
    match s.parse::<CardStatus>() {
        Ok(st) if st.is_settable() => Ok(st),
        _ => Err(format!(
            "unknown status '{}': use one of {}",
            s.trim().to_lowercase(),
            settable_names().join(", ")
        )),
    }
}

/// The wire names of the statuses a tool may set, in board order.
fn settable_names() -> Vec<String> {
    CardStatus::settable().map(|s| s.to_string()).collect()
}

// The schemas list the allowed values as a plain `enum` (the lists are proto's); the fields
// themselves stay strings and are checked by the tool, which gives a better error than serde.

/// A status argument's schema: a string, one of the statuses a tool may set.
fn status_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "enum": settable_names()})
}

/// A difficulty argument's schema: a string, one of [`DIFFICULTIES`].
fn difficulty_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "enum": DIFFICULTIES})
}

fn int_from_value(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
        Value::String(s) => s.trim().trim_start_matches('#').trim().parse().ok(),
        _ => None,
    }
}

/// An integer given as a number, `"12"` or `"#12"`.
pub fn int<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let v = Value::deserialize(d)?;
    int_from_value(&v)
        .ok_or_else(|| serde::de::Error::custom(format!("expected an integer, got {v}")))
}

/// An optional integer; `null` and `""` mean absent.
pub fn opt_int<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let v = Value::deserialize(d)?;
    match &v {
        Value::Null => Ok(None),
        Value::String(s) if s.trim().is_empty() => Ok(None),
        _ => int_from_value(&v)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("expected an integer, got {v}"))),
    }
}

/// An optional boolean given as `true`, `"true"`, `"yes"`, `1`, …
pub fn opt_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    let v = Value::deserialize(d)?;
    match &v {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(*b)),
        Value::Number(n) => Ok(Some(n.as_f64().unwrap_or(0.0) != 0.0)),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "" => Ok(None),
            "true" | "yes" | "1" | "on" => Ok(Some(true)),
            "false" | "no" | "0" | "off" => Ok(Some(false)),
            _ => Err(serde::de::Error::custom(format!(
                "expected true or false, got {v}"
            ))),
        },
        _ => Err(serde::de::Error::custom(format!(
            "expected true or false, got {v}"
        ))),
    }
}

/// Card ids as a list, a single id, or a string like `"3, #4"`.
pub fn opt_ids<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<i64>>, D::Error> {
    let v = Value::deserialize(d)?;
    let bad = |v: &Value| serde::de::Error::custom(format!("expected a list of card ids, got {v}"));
    match &v {
        Value::Null => Ok(None),
        Value::Array(items) => items
            .iter()
            .map(|i| int_from_value(i).ok_or_else(|| bad(i)))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Value::String(s) => s
            .split([',', ' '])
            .filter(|p| !p.trim().is_empty())
            .map(|p| int_from_value(&Value::String(p.to_string())).ok_or_else(|| bad(&v)))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Value::Number(_) => int_from_value(&v)
            .map(|i| Some(vec![i]))
            .ok_or_else(|| bad(&v)),
        _ => Err(bad(&v)),
    }
}

/// Checklist items as a list of strings (or `{text}` objects), or one string with one item per
/// line.
pub fn opt_items<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let v = Value::deserialize(d)?;
    let item = |i: &Value| match i {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("text").and_then(Value::as_str).map(str::to_string),
        _ => None,
    };
    match &v {
        Value::Null => Ok(None),
        Value::Array(items) => items
            .iter()
            .map(|i| {
                item(i).ok_or_else(|| {
                    serde::de::Error::custom(format!("checklist items are strings, got {i}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Value::String(s) => Ok(Some(
            s.lines()
                .map(|l| l.trim().trim_start_matches(['-', '*']).trim().to_string())
                .filter(|l| !l.is_empty())
                .collect(),
        )),
        _ => Err(serde::de::Error::custom(format!(
            "expected a list of strings, got {v}"
        ))),
    }
}

/// A string that may arrive as a number (`"to": 5` is not a session, but `"scope": 1` is
/// harmless); `null` means absent.
pub fn opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let v = Value::deserialize(d)?;
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        Value::Number(n) => Ok(Some(n.to_string())),
        Value::Bool(b) => Ok(Some(b.to_string())),
        other => Err(serde::de::Error::custom(format!(
            "expected a string, got {other}"
        ))),
    }
}

/// `relay_send` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SendArgs {
    /// Target session id (e.g. `claude:web`, from relay_peers), or `all` to broadcast to every
    /// session.
    #[serde(alias = "recipient", alias = "session")]
    pub to: String,
    /// The message body.
    #[serde(alias = "message", alias = "body")]
    pub text: String,
    /// Optional message kind: `contract` (work you expect an answer to), `status` (FYI, never
    /// wakes anyone), `ask`, `alert` or `receipt`. Leave unset for an ordinary message.
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub kind: Option<String>,
    /// The id of the message you are ANSWERING. Set it whenever you reply to a specific message,
    /// so the sender's contract ledger closes the right contract.
    #[serde(default, deserialize_with = "opt_int")]
    #[schemars(with = "i64")]
    pub re: Option<i64>,
    /// false = context, not a contract: the message is batched into the target's next turn
    /// instead of waking it now. Set false on every ack, FYI and queue note. Unset or true: a
    /// direct message wakes the target.
    #[serde(default, deserialize_with = "opt_bool")]
    #[schemars(with = "bool")]
    pub wake: Option<bool>,
    /// Stamp `base: <sha>` on a contract so the seat starts its fresh branch there: `main` (the
    /// integration head of the repository this server runs in), another ref, or a sha.
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub base: Option<String>,
}

/// `relay_wait` arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct WaitArgs {
    /// Seconds to wait for the next message, default 25, at most 110 (longer calls get
    /// backgrounded or dropped by MCP clients). Use 50 and call repeatedly to park while idle.
    #[serde(
        default,
        alias = "seconds",
        alias = "wait",
        deserialize_with = "opt_int"
    )]
    #[schemars(with = "u32")]
    pub timeout: Option<i64>,
}

/// `relay_status` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct StatusArgs {
    /// A short status line, e.g. `building auth on card #12` or `idle`.
    #[serde(alias = "text")]
    pub status: String,
}

/// `relay_board` arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct BoardArgs {
    /// Board to show (default: this session's project).
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub project: Option<String>,
    /// Read ONE card instead of the board: the card with its checklist, drill, notes, status
    /// history, the messages that cite it and related done cards. Call this when you start a
    /// card.
    #[serde(default, alias = "id", deserialize_with = "opt_int")]
    #[schemars(with = "i64")]
    pub card: Option<i64>,
    /// true = only your open cards (todo, doing, testing, failed, blocked assigned to you),
    /// newest first, each in full. The first call of a turn whose wake names no card id.
    #[serde(default, deserialize_with = "opt_bool")]
    #[schemars(with = "bool")]
    pub mine: Option<bool>,
}

/// `relay_task_add` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TaskAddArgs {
    /// Short card title.
    pub title: String,
    /// Initial status, default `todo`.
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(schema_with = "status_schema")]
    pub status: Option<String>,
    /// Session id to assign (default: you).
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub assignee: Option<String>,
    /// Difficulty tag: routes the card to a model and shows on the board.
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(schema_with = "difficulty_schema")]
    pub difficulty: Option<String>,
    /// The model this card is routed to, shown on the card.
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub model: Option<String>,
    /// Card ids this card depends on (it waits for them).
    #[serde(default, deserialize_with = "opt_ids")]
    #[schemars(with = "Vec<i64>")]
    pub deps: Option<Vec<i64>>,
    /// Phase or milestone label (e.g. `P5`, `Auth`), grouping cards in the flow view.
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub phase: Option<String>,
    /// First note on the card's permanent log (at most 2000 characters): context, the plan or a
    /// link.
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String", length(max = 2000))]
    pub note: Option<String>,
    /// Board to add to (default: this session's project).
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub project: Option<String>,
    /// Acceptance items (at most 20, each at most 200 characters): the honest denominator of the
    /// card's progress. Tick them with relay_task_check as each is truly met.
    #[serde(default, deserialize_with = "opt_items")]
    #[schemars(with = "Vec<String>", length(max = 20))]
    pub checklist: Option<Vec<String>>,
    /// The card's DRILL (at most 300 characters): what a person does on the built artifact and
    /// what they must see. The hub refuses to move a card to done without a drill line.
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String", length(max = 300))]
    pub drill: Option<String>,
}

/// `relay_task_move` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TaskMoveArgs {
    /// Card id.
    #[serde(alias = "card", deserialize_with = "int")]
    #[schemars(with = "i64")]
    pub id: i64,
    /// New status.
    #[schemars(schema_with = "status_schema")]
    pub status: String,
    /// Card-log entry (at most 2000 characters). REQUIRED on moves to testing or done: what
    /// changed and the evidence (the command you ran and its pass counts).
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String", length(max = 2000))]
    pub note: Option<String>,
    /// Set or fix the card's drill line (at most 300 characters) in the same call. A move to
    /// done is refused when the card has no drill line.
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String", length(max = 300))]
    pub drill: Option<String>,
}

/// `relay_task_check` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TaskCheckArgs {
    /// Card id.
    #[serde(alias = "card", deserialize_with = "int")]
    #[schemars(with = "i64")]
    pub id: i64,
    /// 0-based checklist item index, in the order the items were listed.
    #[serde(alias = "item", deserialize_with = "int")]
    #[schemars(with = "u32")]
    pub index: i64,
    /// Default true; false unticks the item.
    #[serde(default, deserialize_with = "opt_bool")]
    #[schemars(with = "bool")]
    pub done: Option<bool>,
}

/// `relay_ask` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AskArgs {
    /// The card your current contract is working.
    #[serde(alias = "id", deserialize_with = "int")]
    #[schemars(with = "i64")]
    pub card: i64,
    /// The ONE missing fact you cannot proceed without, stated precisely.
    #[serde(alias = "text")]
    pub question: String,
}

/// `relay_lesson` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct LessonArgs {
    /// One-line imperative guardrail, e.g. `never move a card to done without the tests
    /// passing`.
    #[serde(alias = "lesson")]
    pub text: String,
    /// `global` (default, every agent) or an agent brand (`claude`, `codex`, `kimi`, …) for one
    /// CLI's quirk.
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub scope: Option<String>,
}

/// `relay_project_brief` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BriefArgs {
    /// One to three sentences: what the project is, why it matters and the goal.
    #[serde(alias = "text")]
    pub brief: String,
    /// Project to brief (default: this session's project).
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub project: Option<String>,
}

/// `relay_phase_goal` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PhaseGoalArgs {
    /// The phase key (e.g. `P5`, `Auth`), as in relay_task_add's `phase`.
    pub phase: String,
    /// One or two sentences: what this phase delivers and when it is done.
    pub goal: String,
    /// Board (default: this session's project).
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub project: Option<String>,
}

/// `relay_verify_gate` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifyGateArgs {
    /// `add` a gate · `resolve` one · `list` open gates.
    pub action: String,
    /// What must be verified (required for add): a specific, checkable claim.
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub claim: Option<String>,
    /// Why it matters: the risk if it ships unverified.
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub why: Option<String>,
    /// The concrete check that would verify it (source to cross-check, command to run).
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub how_to_verify: Option<String>,
    /// Gate id to resolve.
    #[serde(default, deserialize_with = "opt_int")]
    #[schemars(with = "i64")]
    pub id: Option<i64>,
    /// Resolve status: `verified` (default), `failed` or `waived`.
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub status: Option<String>,
    /// Resolution note (what you checked, or why it was waived).
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub note: Option<String>,
    /// The card this gate holds back from done until it is resolved (add).
    #[serde(default, deserialize_with = "opt_int")]
    #[schemars(with = "i64")]
    pub card: Option<i64>,
    /// Target project (default: this session's project).
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub project: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_arrive_in_many_shapes() {
        let a: TaskMoveArgs =
            serde_json::from_value(json!({"id": "#12", "status": "doing"})).expect("parse");
        assert_eq!(a.id, 12);
        let a: TaskMoveArgs =
            serde_json::from_value(json!({"card": 3.0, "status": "done"})).expect("parse");
        assert_eq!(a.id, 3);
        let a: TaskAddArgs =
            serde_json::from_value(json!({"title": "t", "deps": "1, #2"})).expect("parse");
        assert_eq!(a.deps, Some(vec![1, 2]));
        let a: SendArgs =
            serde_json::from_value(json!({"to": "x:p", "text": "hi", "wake": "false", "re": null}))
                .expect("parse");
        assert_eq!(a.wake, Some(false));
        assert_eq!(a.re, None);
        assert!(
            serde_json::from_value::<TaskMoveArgs>(json!({"id": "twelve", "status": "x"})).is_err()
        );
    }

    #[test]
    fn checklist_accepts_lines() {
        let a: TaskAddArgs =
            serde_json::from_value(json!({"title": "t", "checklist": "- one\n- two\n"}))
                .expect("parse");
        assert_eq!(
            a.checklist,
            Some(vec!["one".to_string(), "two".to_string()])
        );
    }

    #[test]
    fn schema_lists_statuses_and_descriptions() {
        let s = serde_json::to_value(schemars::schema_for!(TaskMoveArgs)).expect("schema");
        let text = s.to_string();
        assert!(text.contains("\"testing\""), "{text}");
        assert!(text.contains("REQUIRED on moves to testing"), "{text}");
        let req = s
            .get("required")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        assert!(req.contains(&json!("id")) && req.contains(&json!("status")));
        assert!(!req.contains(&json!("note")));
    }
}
