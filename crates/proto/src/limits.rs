//! Field-length and size limits enforced by the hub and respected by clients.
//!
//! The original hub had few limits; ours refuses over-long input with a 400 naming the limit,
//! instead of storing unbounded data.

/// Largest accepted request body, in bytes (larger bodies get 413).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Message text, in characters.
pub const MESSAGE_TEXT: usize = 64 * 1024;
/// Session names (`from`, `to`, `session`, `assignee`, `by`).
pub const SESSION: usize = 200;
/// Project names.
pub const PROJECT: usize = 80;
/// Message and peer `kind`.
pub const KIND: usize = 40;
/// Peer status text.
pub const STATUS: usize = 280;
/// Peer `hookVersion`.
pub const HOOK_VERSION: usize = 20;
/// Peer `model`.
pub const MODEL: usize = 80;
/// Peer `llm` / `agent` / `persona`.
pub const LLM: usize = 40;
/// Peer `phase`.
pub const PHASE: usize = 20;
/// Card title.
pub const TITLE: usize = 200;
/// Card summary.
pub const SUMMARY: usize = 220;
/// Card model.
pub const CARD_MODEL: usize = 60;
/// Card phase.
pub const CARD_PHASE: usize = 40;
/// Card source.
pub const SOURCE: usize = 20;
/// Card effort.
pub const EFFORT: usize = 12;
/// Card drill line.
pub const DRILL: usize = 300;
/// One card log entry's text.
pub const LOG_TEXT: usize = 2000;
/// Card log entries kept (older entries are summarised, never silently lost: see the hub).
pub const LOG_ENTRIES: usize = 200;
/// Checklist items per card.
pub const CHECKLIST_ITEMS: usize = 20;
/// One checklist item's text.
pub const CHECKLIST_TEXT: usize = 200;
/// Dependencies per card.
pub const DEPS: usize = 20;
/// Card history entries kept.
pub const HISTORY_ENTRIES: usize = 200;
/// Lesson text.
pub const LESSON_TEXT: usize = 400;
/// Lesson scope.
pub const LESSON_SCOPE: usize = 40;
/// Project brief.
pub const BRIEF: usize = 600;
/// Phase goal.
pub const GOAL: usize = 400;
/// `_op` idempotency keys: longer ones are refused with a 400.
pub const OP_ID: usize = 80;
/// A free-form JSON field (`blast`), serialised, in bytes.
pub const FREE_JSON_BYTES: usize = 8 * 1024;
/// Deepest nesting of arrays and objects accepted in any request body.
pub const JSON_DEPTH: usize = 16;
/// Longest `/poll` hold, in seconds.
pub const POLL_WAIT_MAX_S: u64 = 290;
/// Default `/poll` hold, in seconds.
pub const POLL_WAIT_DEFAULT_S: u64 = 25;
/// Largest page of messages returned by `/inbox` and `/poll` (the rest follow on the next call).
pub const INBOX_PAGE: usize = 1000;
/// `/contracts` rows per page by default (the counts always cover every page).
pub const CONTRACTS_PAGE: usize = 500;
/// `/contracts` largest page.
pub const CONTRACTS_PAGE_MAX: usize = 5000;
/// `/recent` page cap.
pub const RECENT_MAX: usize = 200;
/// `/events` page cap.
pub const EVENTS_MAX: usize = 2000;
/// `/events` default page.
pub const EVENTS_DEFAULT: usize = 300;
/// Messages citing a card returned by `/card`.
pub const CARD_MESSAGES: usize = 200;

/// The JSON Schema pattern of a non-blank text: at least one character that is not Unicode
/// `White_Space` (what `str::trim` removes), spelled as an explicit class because `\S` means
/// different sets in ECMAScript, Python and Rust. The wire types' schemas spell the same class.
pub const NON_BLANK_PATTERN: &str =
    r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]";

/// The JSON Schema rule of a body that names one thing either of two ways (`session` or `by`):
/// an `anyOf` of two branches, each requiring its field as a non-blank string
/// ([`NON_BLANK_PATTERN`]). The value of a type's `#[schemars(extend("anyOf" = …))]`.
pub fn one_of_non_blank(a: &str, b: &str) -> serde_json::Value {
    let branch = |k: &str| {
        serde_json::json!({
            "required": [k],
            "properties": {k: {"type": "string", "pattern": NON_BLANK_PATTERN}},
        })
    };
    serde_json::json!([branch(a), branch(b)])
}

/// The JSON Schema pattern of a file path inside a project, exactly as the hub's claim routes
/// accept one after trimming [`NON_BLANK_PATTERN`]'s white space: not blank, no leading `/`, `\`
/// or `~`, no drive letter (`c:`), no NUL and no `..` component. Lookaheads, because each rule
/// refuses; the same explicit white-space class, because `\s` differs between engines.
pub const PROJECT_PATH_PATTERN: &str = concat!(
    r"^(?![\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]*[/\\~])",
    r"(?![\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]*[\x00-\x08\x0E-\x1F!-\x7F]:)",
    r"(?![\s\S]*\x00)",
    r"(?![\s\S]*(?:^[\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]*|[/\\])\.\.",
    r"(?:[/\\]|[\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]*$))",
    r"[\s\S]*[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
);
