//! The cost ledger (docs/protocol.md §7.6): each turn's tokens and dollars as the runner read
//! them from the agent CLI's own report (`POST /turns`), and what the hub adds up from them per
//! card, seat and day (`GET /cost`, and `cost` on `GET /card`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Largest token count accepted for one field of one turn (a bound, so sums stay exact).
pub const TOKENS_MAX: u64 = 1_000_000_000_000;
/// Largest dollar amount accepted for one turn.
pub const USD_MAX: f64 = 1_000_000.0;
/// Longest `agent`, `model`, `credential` or `source` text accepted.
pub const NAME_MAX: usize = 80;
/// Longest `outcome` text accepted.
pub const OUTCOME_MAX: usize = 200;
/// Most groups `GET /cost` returns.
pub const GROUPS_MAX: usize = 1000;

/// The tokens one turn used, as the CLI reported them. `input` is the input that was neither
/// read from nor written to the prompt cache; the cache counts are apart (so `input +
/// cacheRead + cacheWrite` is everything the model read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Uncached input tokens.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1_000_000_000_000_u64))]
    pub input: u64,
    /// Output tokens (reasoning included).
    #[serde(default)]
    #[schemars(range(min = 0, max = 1_000_000_000_000_u64))]
    pub output: u64,
    /// Input tokens read from the prompt cache.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1_000_000_000_000_u64))]
    pub cache_read: u64,
    /// Input tokens written to the prompt cache.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1_000_000_000_000_u64))]
    pub cache_write: u64,
}

impl TokenUsage {
    /// Everything the model read: uncached input plus both cache counts.
    pub fn tokens_in(&self) -> u64 {
        self.input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }

    /// Whether every count is zero.
    pub fn is_zero(&self) -> bool {
        self.input == 0 && self.output == 0 && self.cache_read == 0 && self.cache_write == 0
    }

    /// Field-wise saturating sum.
    pub fn add(&self, o: &TokenUsage) -> TokenUsage {
        TokenUsage {
            input: self.input.saturating_add(o.input),
            output: self.output.saturating_add(o.output),
            cache_read: self.cache_read.saturating_add(o.cache_read),
            cache_write: self.cache_write.saturating_add(o.cache_write),
        }
    }

    /// Field-wise saturating difference (`self - o`).
    pub fn minus(&self, o: &TokenUsage) -> TokenUsage {
        TokenUsage {
            input: self.input.saturating_sub(o.input),
            output: self.output.saturating_sub(o.output),
            cache_read: self.cache_read.saturating_sub(o.cache_read),
            cache_write: self.cache_write.saturating_sub(o.cache_write),
        }
    }
}

/// `POST /turns` body: one finished turn of a seat and what it cost. The hub keeps one record
/// per `(session, instance, turn)`; a repeat is acknowledged and not counted twice.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnReport {
    /// The seat's session.
    #[schemars(length(min = 1, max = crate::limits::SESSION), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub session: String,
    /// The runner instance that ran the turn.
    #[schemars(length(min = 1, max = crate::delivery::INSTANCE_MAX), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub instance: String,
    /// The runner's turn number.
    #[schemars(range(min = 0, max = 9_223_372_036_854_775_807_u64))]
    pub turn: u64,
    /// The seat's project.
    #[serde(default)]
    #[schemars(length(max = crate::limits::PROJECT))]
    pub project: String,
    /// The card the turn worked on (0 = none).
    #[serde(default)]
    #[schemars(range(min = 0, max = 9_223_372_036_854_775_807_i64))]
    pub card: i64,
    /// The agent (driver) name.
    #[serde(default)]
    #[schemars(length(max = NAME_MAX))]
    pub agent: String,
    /// The model the turn ran on (empty: the CLI's default, unknown).
    #[serde(default)]
    #[schemars(length(max = NAME_MAX))]
    pub model: String,
    /// The credential the turn ran on, by name (never a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = NAME_MAX))]
    pub credential: Option<String>,
    /// The turn's outcome (`completed`, `cut`, `api-error`, …).
    #[serde(default)]
    #[schemars(length(max = OUTCOME_MAX))]
    pub outcome: String,
    /// Tokens used; `null`: the CLI reported none the runner could read (cost unknown).
    #[serde(default)]
    pub usage: Option<TokenUsage>,
    /// Dollars; `null`: unknown.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1_000_000.0))]
    pub usd: Option<f64>,
    /// The dollars are the runner's estimate from its model price table, not the CLI's own.
    #[serde(default)]
    pub estimated: bool,
    /// Where the numbers came from (`claude-result`, `claude-transcript`, `codex-json`, …).
    #[serde(default)]
    #[schemars(length(max = NAME_MAX))]
    pub source: String,
}

/// `POST /turns` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TurnReportReply {
    /// Always true.
    pub ok: bool,
    /// False when this turn was already recorded (a retry).
    pub appended: bool,
}

/// What a set of turns cost, added up.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostSummary {
    /// Input tokens, cache reads and writes included.
    pub tokens_in: u64,
    /// Output tokens.
    pub tokens_out: u64,
    /// Of `tokensIn`, read from the prompt cache.
    pub cache_read: u64,
    /// Of `tokensIn`, written to the prompt cache.
    pub cache_write: u64,
    /// Dollars of the turns whose dollars are known.
    pub usd: f64,
    /// Turns recorded (with or without usage).
    pub turns: u64,
    /// Turns whose dollars are unknown (counted in `turns`, not in `usd`): the CLI reported no
    /// usage, or tokens on a model no price is known for (those tokens are in the sums).
    pub unknown: u64,
    /// Some of `usd` is the runner's estimate from its price table.
    pub estimated: bool,
}

/// One group of `GET /cost`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CostGroup {
    /// The card id, seat session, UTC day (`YYYY-MM-DD`) or credential the group is of.
    pub key: String,
    /// Its cost.
    pub cost: CostSummary,
}

/// `GET /cost` reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CostReply {
    /// Every matching turn, added up.
    pub total: CostSummary,
    /// How `groups` is grouped: `card`, `seat`, `day` or `credential`.
    pub by: String,
    /// The groups, largest `usd` first (at most 1000).
    pub groups: Vec<CostGroup>,
}
