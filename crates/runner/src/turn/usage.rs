//! What a turn cost, from the agent CLI's own usage report (docs/runner.md §15.3).
//!
//! - Claude Code: the `result` event of `--output-format json|stream-json` when the CLI was run
//!   that way (`usage`, `total_cost_usd`); else the session transcript it writes anyway: the
//!   `cost-state` record it appends when a run ends carries the session's running totals and
//!   dollars, so the turn's share is the last one written during the turn minus the one before
//!   it. A turn cut before Claude Code wrote it falls back to the `usage` of the assistant
//!   messages written during the turn, priced from [`PRICES`] and marked estimated.
//! - Codex: the `turn.completed` events of `codex exec --json` (`usage` input, cached input,
//!   output); else (plain `codex exec`) the session rollout it writes, whose `token_count`
//!   events carry the session's running totals. Priced from [`PRICES`] (Codex reports no
//!   dollars) and marked estimated.
//! - Nothing readable: `None` — the turn still counts, its cost is unknown.
//!
//! The parsers are pure functions of text; [`TranscriptMark`] is the one piece of I/O (the
//! transcript files' sizes before the turn, and what was appended to them after).

use serde_json::Value;
use std::path::{Path, PathBuf};
use trantor_proto::TokenUsage;

/// Largest transcript read whole, bytes (a bigger one is skipped: cost unknown).
const TRANSCRIPT_CAP: u64 = 64 * 1024 * 1024;

/// What one turn cost, as read.
#[derive(Debug, Clone, PartialEq)]
pub struct Reported {
    /// Tokens.
    pub usage: TokenUsage,
    /// Dollars (`None`: unknown — tokens without a price).
    pub usd: Option<f64>,
    /// The dollars are this runner's estimate from [`PRICES`].
    pub estimated: bool,
    /// The model the report names (empty: none).
    pub model: String,
    /// Where it came from: `claude-result`, `claude-transcript`, `claude-messages`, `codex-json`,
    /// `codex-rollout`, `opencode-db`.
    pub source: &'static str,
}

/// Dollars per million tokens of one model family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// A model id containing this (lower case) is priced here; the first match wins.
    pub needle: &'static str,
    /// Uncached input.
    pub input: f64,
    /// Output.
    pub output: f64,
    /// Cache reads.
    pub cache_read: f64,
    /// Cache writes.
    pub cache_write: f64,
}

const fn p(
    needle: &'static str,
    input: f64,
    output: f64,
    cache_read: f64,
    cache_write: f64,
) -> Price {
    Price {
        needle,
        input,
        output,
        cache_read,
        cache_write,
    }
}

/// The small price table estimates come from (list prices, dollars per million tokens). More
/// specific ids first.
pub const PRICES: &[Price] = &[
    p("opus-4-5", 5.0, 25.0, 0.5, 6.25),
    p("opus-5", 5.0, 25.0, 0.5, 6.25),
    p("opus", 15.0, 75.0, 1.5, 18.75),
    p("sonnet", 3.0, 15.0, 0.3, 3.75),
    p("haiku-3", 0.8, 4.0, 0.08, 1.0),
    p("haiku", 1.0, 5.0, 0.1, 1.25),
    p("gpt-5-mini", 0.25, 2.0, 0.025, 0.0),
    p("gpt-5-nano", 0.05, 0.4, 0.005, 0.0),
    p("gpt-5", 1.25, 10.0, 0.125, 0.0),
    p("codex", 1.25, 10.0, 0.125, 0.0),
    p("gpt-4.1-mini", 0.4, 1.6, 0.1, 0.0),
    p("gpt-4.1", 2.0, 8.0, 0.5, 0.0),
    p("o4-mini", 1.1, 4.4, 0.275, 0.0),
    p("o3", 2.0, 8.0, 0.5, 0.0),
    p("deepseek", 0.28, 0.42, 0.028, 0.0),
];

/// The price of `model`, if the table knows its family.
pub fn price(model: &str) -> Option<&'static Price> {
    let m = model.to_ascii_lowercase();
    if m.is_empty() {
        return None;
    }
    PRICES.iter().find(|p| m.contains(p.needle))
}

/// The dollars `usage` costs on `model` by the table (`None`: the model is not in it).
pub fn estimate(model: &str, usage: &TokenUsage) -> Option<f64> {
    let p = price(model)?;
    let m = |n: u64, per: f64| n as f64 * per / 1_000_000.0;
    Some(
        m(usage.input, p.input)
            + m(usage.output, p.output)
            + m(usage.cache_read, p.cache_read)
            + m(usage.cache_write, p.cache_write),
    )
}

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

/// Anthropic-style usage (`input_tokens`, `output_tokens`, `cache_read_input_tokens`,
/// `cache_creation_input_tokens`); `None` unless it names input or output tokens.
fn anthropic_usage(v: &Value) -> Option<TokenUsage> {
    if v.get("input_tokens").is_none() && v.get("output_tokens").is_none() {
        return None;
    }
    Some(TokenUsage {
        input: u(v, "input_tokens"),
        output: u(v, "output_tokens"),
        cache_read: u(v, "cache_read_input_tokens"),
        cache_write: u(v, "cache_creation_input_tokens"),
    })
}

/// The JSON objects of a text, one per line (other lines skipped).
fn json_lines(text: &str) -> impl Iterator<Item = Value> + '_ {
    text.lines().filter_map(|l| {
        let l = l.trim();
        if !l.starts_with('{') {
            return None;
        }
        serde_json::from_str::<Value>(l).ok()
    })
}

/// The model a `modelUsage` object spent most on (its first key when none has a cost).
fn main_model(model_usage: Option<&Value>) -> String {
    let Some(m) = model_usage.and_then(Value::as_object) else {
        return String::new();
    };
    m.iter()
        .max_by(|a, b| {
            let c = |v: &Value| v.get("costUSD").and_then(Value::as_f64).unwrap_or(0.0);
            c(a.1).total_cmp(&c(b.1))
        })
        .map(|(k, _)| k.clone())
        .unwrap_or_default()
}

/// Claude Code's own report in its stdout: the last `result` event of `--output-format json`
/// or `stream-json` (`usage`, `total_cost_usd`).
pub fn claude_result(stdout: &str) -> Option<Reported> {
    let ev = json_lines(stdout)
        .filter(|v| v.get("type").and_then(Value::as_str) == Some("result"))
        .last()?;
    let usage = anthropic_usage(ev.get("usage")?)?;
    let model = main_model(ev.get("modelUsage"));
    Some(priced(
        usage,
        ev.get("total_cost_usd").and_then(Value::as_f64),
        model,
        "claude-result",
    ))
}

/// A report with the CLI's dollars, or (without them) the table's estimate.
fn priced(usage: TokenUsage, usd: Option<f64>, model: String, source: &'static str) -> Reported {
    match usd.filter(|d| d.is_finite() && *d >= 0.0) {
        Some(d) => Reported {
            usage,
            usd: Some(d),
            estimated: false,
            model,
            source,
        },
        None => {
            let usd = estimate(&model, &usage);
            Reported {
                estimated: usd.is_some(),
                usd,
                usage,
                model,
                source,
            }
        }
    }
}

/// One `cost-state` record of a Claude Code transcript: the session's running totals.
#[derive(Debug, Clone, PartialEq)]
struct CostState {
    session: String,
    usage: TokenUsage,
    usd: Option<f64>,
    model: String,
    unknown_price: bool,
}

fn cost_state(v: &Value) -> Option<CostState> {
    if v.get("type").and_then(Value::as_str) != Some("cost-state") {
        return None;
    }
    let mu = v.get("modelUsage").and_then(Value::as_object)?;
    let mut usage = TokenUsage::default();
    for m in mu.values() {
        usage = usage.add(&TokenUsage {
            input: u(m, "inputTokens"),
            output: u(m, "outputTokens"),
            cache_read: u(m, "cacheReadInputTokens"),
            cache_write: u(m, "cacheCreationInputTokens"),
        });
    }
    Some(CostState {
        session: v
            .get("sessionId")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        usage,
        usd: v.get("totalCostUSD").and_then(Value::as_f64),
        model: main_model(v.get("modelUsage")),
        unknown_price: v
            .get("hasUnknownModelCost")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// This turn's cost from a Claude Code transcript: `before` is what the file held when the turn
/// started, `during` what the turn appended. The last `cost-state` appended, minus the last one
/// before it of the same session; without one (the turn was cut first), the assistant messages'
/// `usage` appended during the turn, estimated.
pub fn claude_transcript(before: &str, during: &str) -> Option<Reported> {
    let last = json_lines(during).filter_map(|v| cost_state(&v)).last();
    if let Some(now) = last {
        let base = json_lines(before)
            .filter_map(|v| cost_state(&v))
            .filter(|c| c.session == now.session)
            .last();
        let (usage, usd) = match base {
            // A smaller total than before is a new count, not a negative turn.
            Some(b) if b.usage.tokens_in() <= now.usage.tokens_in() => (
                now.usage.minus(&b.usage),
                match (now.usd, b.usd) {
                    (Some(n), Some(o)) => Some((n - o).max(0.0)),
                    (n, _) => n,
                },
            ),
            _ => (now.usage, now.usd),
        };
        let usd = if now.unknown_price { None } else { usd };
        return Some(priced(usage, usd, now.model, "claude-transcript"));
    }
    // Streamed answers are written one entry per content block, each with the message's usage:
    // count each message (id + request) once, its last entry winning.
    let mut seen: Vec<(String, TokenUsage)> = Vec::new();
    let mut model = String::new();
    for v in json_lines(during) {
        if v.get("type").and_then(Value::as_str) != Some("assistant") {
            continue;
        }
        let Some(msg) = v.get("message") else {
            continue;
        };
        let Some(usage) = msg.get("usage").and_then(anthropic_usage) else {
            continue;
        };
        let key = format!(
            "{}/{}",
            msg.get("id").and_then(Value::as_str).unwrap_or(""),
            v.get("requestId")
                .and_then(Value::as_str)
                .or_else(|| v.get("uuid").and_then(Value::as_str))
                .unwrap_or("")
        );
        if let Some(m) = msg.get("model").and_then(Value::as_str) {
            model = m.to_string();
        }
        match seen.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = usage,
            None => seen.push((key, usage)),
        }
    }
    if seen.is_empty() {
        return None;
    }
    let usage = seen
        .iter()
        .fold(TokenUsage::default(), |acc, (_, u)| acc.add(u));
    Some(priced(usage, None, model, "claude-messages"))
}

/// Codex's report in `codex exec --json` output: the `turn.completed` events' `usage`
/// (`input_tokens` counts the cached input too, so it is split off), priced for `model` from
/// the table (Codex reports no dollars).
pub fn codex_events(stdout: &str, model: &str) -> Option<Reported> {
    let mut total: Option<TokenUsage> = None;
    for v in json_lines(stdout) {
        if v.get("type").and_then(Value::as_str) != Some("turn.completed") {
            continue;
        }
        let Some(us) = v.get("usage") else {
            continue;
        };
        let cached = u(us, "cached_input_tokens");
        let t = TokenUsage {
            input: u(us, "input_tokens").saturating_sub(cached),
            output: u(us, "output_tokens"),
            cache_read: cached,
            cache_write: 0,
        };
        total = Some(total.unwrap_or_default().add(&t));
    }
    Some(priced(total?, None, model.to_string(), "codex-json"))
}

/// The session totals of a Codex rollout's `token_count` event.
fn codex_total(v: &Value) -> Option<TokenUsage> {
    if v.get("type").and_then(Value::as_str) != Some("event_msg") {
        return None;
    }
    let p = v.get("payload")?;
    if p.get("type").and_then(Value::as_str) != Some("token_count") {
        return None;
    }
    let t = p.get("info")?.get("total_token_usage")?;
    t.get("input_tokens")?;
    let cached = u(t, "cached_input_tokens");
    let written = u(t, "cache_write_input_tokens");
    Some(TokenUsage {
        input: u(t, "input_tokens")
            .saturating_sub(cached)
            .saturating_sub(written),
        output: u(t, "output_tokens"),
        cache_read: cached,
        cache_write: written,
    })
}

/// This turn's cost from a Codex session rollout (`~/.codex/sessions/…/rollout-*.jsonl`), which
/// plain `codex exec` writes: the last `token_count` total appended during the turn minus the
/// last one before it, on the model of the last `turn_context` (else `model`), priced from the
/// table (Codex reports no dollars).
pub fn codex_rollout(before: &str, during: &str, model: &str) -> Option<Reported> {
    let now = json_lines(during).filter_map(|v| codex_total(&v)).last()?;
    let base = json_lines(before).filter_map(|v| codex_total(&v)).last();
    let usage = match base {
        Some(b) if b.tokens_in() <= now.tokens_in() => now.minus(&b),
        _ => now,
    };
    let named = json_lines(before)
        .chain(json_lines(during))
        .filter(|v| v.get("type").and_then(Value::as_str) == Some("turn_context"))
        .filter_map(|v| v.get("payload")?.get("model")?.as_str().map(str::to_string))
        .last();
    let model = named
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| model.to_string());
    Some(priced(usage, None, model, "codex-rollout"))
}

/// The sizes of a CLI's transcript files when a turn starts, so what the turn appended can be
/// told from what was there.
#[derive(Debug, Clone, Default)]
pub struct TranscriptMark {
    dir: PathBuf,
    depth: u32,
    sizes: Vec<(PathBuf, u64)>,
    /// OpenCode keeps its messages in a database, not a transcript: the turn's directory, the
    /// XDG data home and the time the turn started (its messages are the ones created since).
    opencode: Option<(PathBuf, PathBuf, i64)>,
}

/// The `.jsonl` files in `dir` and, `depth` levels down, in its subdirectories.
fn jsonl_files(dir: &Path, depth: u32) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.filter_map(Result::ok) {
        let Ok(m) = e.metadata() else { continue };
        let p = e.path();
        if m.is_dir() {
            if depth > 0 {
                out.extend(jsonl_files(&p, depth - 1));
            }
        } else if p.extension().is_some_and(|x| x == "jsonl")
            && let Ok(t) = m.modified()
        {
            out.push((p, m.len(), t));
        }
    }
    out
}

impl TranscriptMark {
    /// Note the `.jsonl` files of `dir` and their sizes now.
    pub fn take(dir: &Path) -> TranscriptMark {
        TranscriptMark::take_tree(dir, 0)
    }

    /// Note the `.jsonl` files of `dir` and of its subdirectories `depth` levels down (Codex
    /// files its sessions by date: `sessions/YYYY/MM/DD`).
    pub fn take_tree(dir: &Path, depth: u32) -> TranscriptMark {
        TranscriptMark {
            dir: dir.to_path_buf(),
            depth,
            sizes: jsonl_files(dir, depth)
                .into_iter()
                .map(|(p, len, _)| (p, len))
                .collect(),
            opencode: None,
        }
    }

    /// Note when an OpenCode turn in `turn_dir` starts (its database is under `data_home`).
    pub fn opencode(turn_dir: &Path, data_home: &Path) -> TranscriptMark {
        TranscriptMark {
            opencode: Some((
                turn_dir.to_path_buf(),
                data_home.to_path_buf(),
                trantor_proto::now_ms(),
            )),
            ..TranscriptMark::default()
        }
    }

    /// The file the turn wrote most recently: `(before, during)` — its text up to the size it
    /// had at [`TranscriptMark::take`] and what was appended since (`None`: no file grew).
    pub fn appended(&self) -> Option<(String, String)> {
        let grown = jsonl_files(&self.dir, self.depth)
            .into_iter()
            .filter_map(|(p, len, mtime)| {
                let was = self
                    .sizes
                    .iter()
                    .find(|(q, _)| *q == p)
                    .map(|(_, n)| *n)
                    .unwrap_or(0);
                (len > was && len <= TRANSCRIPT_CAP).then_some((p, was, mtime))
            })
            .max_by_key(|(_, _, mtime)| *mtime)?;
        let bytes = std::fs::read(&grown.0).ok()?;
        let cut = usize::try_from(grown.1)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        Some((
            String::from_utf8_lossy(&bytes[..cut]).into_owned(),
            String::from_utf8_lossy(&bytes[cut..]).into_owned(),
        ))
    }
}

/// What OpenCode recorded for the turn's assistant messages (`rows`: one message's `data` JSON
/// per line, from its database): `tokens {input, output, reasoning, cache {read, write}}` and
/// `cost`, summed. OpenCode's `input` is the uncached input; reasoning counts as output. Its
/// dollars are taken when positive (a model without a price in OpenCode's table reads 0: then
/// the runner's table prices it, marked estimated).
pub fn opencode_messages(rows: &str, model: &str) -> Option<Reported> {
    let mut usage = TokenUsage::default();
    let mut usd = 0.0;
    let mut seen = false;
    let mut last_model = String::new();
    for v in json_lines(rows).filter(|v| v["role"] == "assistant") {
        let t = &v["tokens"];
        if !t.is_object() {
            continue;
        }
        seen = true;
        usage = usage.add(&TokenUsage {
            input: u(t, "input"),
            output: u(t, "output").saturating_add(u(t, "reasoning")),
            cache_read: u(&t["cache"], "read"),
            cache_write: u(&t["cache"], "write"),
        });
        if let Some(c) = v["cost"].as_f64().filter(|c| c.is_finite() && *c > 0.0) {
            usd += c;
        }
        if let Some(m) = v["modelID"].as_str().filter(|m| !m.is_empty()) {
            last_model = m.to_string();
        }
    }
    if !seen {
        return None;
    }
    let model = if model.is_empty() {
        last_model
    } else {
        model.to_string()
    };
    Some(priced(
        usage,
        (usd > 0.0).then_some(usd),
        model,
        "opencode-db",
    ))
}

/// This turn's cost for `driver`: the CLI's own report in its stdout, else (Claude Code) what
/// the turn appended to its transcript (Codex: its rollout; OpenCode: its database); `None`
/// when nothing readable was reported.
pub fn read_turn(
    driver: &crate::turn::drivers::Driver,
    stdout: &str,
    mark: Option<&TranscriptMark>,
    model: &str,
) -> Option<Reported> {
    use crate::turn::drivers::Driver;
    match driver {
        Driver::Claude => claude_result(stdout).or_else(|| {
            let (before, during) = mark?.appended()?;
            claude_transcript(&before, &during)
        }),
        Driver::Codex => codex_events(stdout, model).or_else(|| {
            let (before, during) = mark?.appended()?;
            codex_rollout(&before, &during, model)
        }),
        Driver::Opencode { .. } => {
            let (dir, data_home, since) = mark?.opencode.as_ref()?;
            let rows = crate::turn::drivers::opencode_turn_messages(dir, data_home, *since)?;
            opencode_messages(&rows, model)
        }
        // A `command` seat may run either CLI in its JSON mode.
        Driver::Command { .. } => claude_result(stdout).or_else(|| codex_events(stdout, model)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tokens, dollars, estimated.
    type Want = Option<(TokenUsage, Option<f64>, bool)>;
    /// Tokens, dollars, estimated, source.
    type WantFrom = Option<(TokenUsage, Option<f64>, bool, &'static str)>;
    /// Tokens, dollars.
    type WantPriced = Option<(TokenUsage, Option<f64>)>;

    fn tu(input: u64, output: u64, cache_read: u64, cache_write: u64) -> TokenUsage {
        TokenUsage {
            input,
            output,
            cache_read,
            cache_write,
        }
    }

    const RESULT: &str = r#"{"type":"result","subtype":"success","is_error":false,"result":"hello","total_cost_usd":0.0061,"usage":{"input_tokens":1234,"cache_creation_input_tokens":7,"cache_read_input_tokens":50,"output_tokens":56},"modelUsage":{"claude-opus-5-5":{"inputTokens":1234,"outputTokens":56,"costUSD":0.0061}}}"#;

    #[test]
    fn claude_result_events_are_read_from_stdout() {
        let cases: &[(&str, Want)] = &[
            (RESULT, Some((tu(1234, 56, 50, 7), Some(0.0061), false))),
            // stream-json: other events first, the result last.
            (
                &format!(
                    "{{\"type\":\"system\",\"subtype\":\"init\"}}\n{{\"type\":\"assistant\"}}\n{RESULT}\n"
                ),
                Some((tu(1234, 56, 50, 7), Some(0.0061), false)),
            ),
            // Usage without dollars: estimated from the table (opus-5 prices).
            (
                r#"{"type":"result","usage":{"input_tokens":1000000,"output_tokens":0},"modelUsage":{"claude-opus-5-5":{}}}"#,
                Some((tu(1_000_000, 0, 0, 0), Some(5.0), true)),
            ),
            // Usage without dollars on a model the table does not know: tokens, no dollars.
            (
                r#"{"type":"result","usage":{"input_tokens":10,"output_tokens":2}}"#,
                Some((tu(10, 2, 0, 0), None, false)),
            ),
            // Plain text, a result without usage, broken JSON: nothing readable.
            ("hello there\n", None),
            (r#"{"type":"result","result":"x"}"#, None),
            (r#"{"type":"result","usage":{"input_tokens":"#, None),
            (
                r#"{"type":"result","usage":{"cache_read_input_tokens":5}}"#,
                None,
            ),
        ];
        for (text, want) in cases {
            let got = claude_result(text).map(|r| (r.usage, r.usd, r.estimated));
            assert_eq!(&got, want, "{text}");
        }
        assert_eq!(
            claude_result(RESULT).map(|r| (r.model, r.source)),
            Some(("claude-opus-5-5".into(), "claude-result"))
        );
    }

    fn state(session: &str, input: u64, output: u64, usd: f64) -> String {
        format!(
            r#"{{"type":"cost-state","sessionId":"{session}","totalCostUSD":{usd},"modelUsage":{{"claude-sonnet-4-5":{{"inputTokens":{input},"outputTokens":{output},"cacheReadInputTokens":0,"cacheCreationInputTokens":0,"costUSD":{usd}}}}},"hasUnknownModelCost":false}}"#
        )
    }

    #[test]
    fn a_claude_transcript_gives_the_turns_share_of_the_sessions_totals() {
        let first = state("s1", 100, 10, 0.5);
        let second = state("s1", 250, 30, 1.25);
        let other = state("s2", 1000, 1000, 9.0);
        let msg = |id: &str, req: &str, input: u64, output: u64| {
            format!(
                r#"{{"type":"assistant","requestId":"{req}","message":{{"id":"{id}","model":"claude-sonnet-4-5","usage":{{"input_tokens":{input},"output_tokens":{output}}}}}}}"#
            )
        };
        let cases: Vec<(&str, String, String, WantFrom)> = vec![
            (
                "a fresh session: the one record is the turn",
                String::new(),
                format!("{{\"type\":\"user\"}}\n{first}\n"),
                Some((tu(100, 10, 0, 0), Some(0.5), false, "claude-transcript")),
            ),
            (
                "a resumed session: the difference from the turn before",
                format!("{first}\n"),
                format!("{}\n{second}\n", msg("m2", "r2", 150, 20)),
                Some((tu(150, 20, 0, 0), Some(0.75), false, "claude-transcript")),
            ),
            (
                "another session's record is no baseline",
                format!("{other}\n"),
                format!("{first}\n"),
                Some((tu(100, 10, 0, 0), Some(0.5), false, "claude-transcript")),
            ),
            (
                "cut before the record: the messages, each once, estimated (sonnet prices)",
                format!("{first}\n"),
                format!(
                    "{}\n{}\n{}\n",
                    msg("m3", "r3", 1_000_000, 0),
                    msg("m3", "r3", 1_000_000, 100_000),
                    msg("m4", "r4", 0, 0)
                ),
                Some((
                    tu(1_000_000, 100_000, 0, 0),
                    Some(4.5),
                    true,
                    "claude-messages",
                )),
            ),
            (
                "nothing appended",
                format!("{first}\n"),
                String::new(),
                None,
            ),
            (
                "garbage appended",
                String::new(),
                "not json\n{\"type\":\"cost-state\"\n".into(),
                None,
            ),
        ];
        for (why, before, during, want) in cases {
            let got = claude_transcript(&before, &during)
                .map(|r| (r.usage, r.usd, r.estimated, r.source));
            let got = got.map(|(u, d, e, s)| (u, d.map(|d| (d * 1e6).round() / 1e6), e, s));
            assert_eq!(got, want, "{why}");
        }
    }

    #[test]
    fn codex_json_events_are_summed_and_priced() {
        let done = r#"{"type":"turn.completed","usage":{"input_tokens":1000,"cached_input_tokens":400,"output_tokens":100}}"#;
        let cases: &[(&str, &str, WantPriced)] = &[
            (done, "gpt-5", Some((tu(600, 100, 400, 0), Some(0.00180)))),
            (
                &format!("{{\"type\":\"thread.started\"}}\n{done}\n{done}\n"),
                "gpt-5",
                Some((tu(1200, 200, 800, 0), Some(0.00360))),
            ),
            (done, "mystery-model", Some((tu(600, 100, 400, 0), None))),
            ("tokens used\n1,234\n", "gpt-5", None),
            (r#"{"type":"turn.completed"}"#, "gpt-5", None),
        ];
        for (text, model, want) in cases {
            let got = codex_events(text, model)
                .map(|r| (r.usage, r.usd.map(|d| (d * 1e5).round() / 1e5)));
            assert_eq!(&got, want, "{text}");
            if let Some(r) = codex_events(text, model) {
                assert_eq!(r.estimated, r.usd.is_some(), "Codex reports no dollars");
            }
        }
    }

    #[test]
    fn a_codex_rollout_gives_the_turns_share_of_the_sessions_totals() {
        let ctx = |m: &str| format!(r#"{{"type":"turn_context","payload":{{"model":"{m}"}}}}"#);
        let count = |input: u64, cached: u64, output: u64| {
            format!(
                r#"{{"type":"event_msg","payload":{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":{input},"cached_input_tokens":{cached},"cache_write_input_tokens":0,"output_tokens":{output},"reasoning_output_tokens":0,"total_tokens":0}}}}}}}}"#
            )
        };
        let first = format!("{}\n{}\n", ctx("gpt-5"), count(1000, 200, 100));
        let cases: Vec<(&str, String, String, WantPriced)> = vec![
            (
                "a fresh session",
                String::new(),
                first.clone(),
                Some((tu(800, 100, 200, 0), Some(0.002025))),
            ),
            (
                "a resumed one: the difference",
                first.clone(),
                format!("{}\n", count(3000, 1200, 300)),
                Some((tu(1000, 200, 1000, 0), Some(0.003375))),
            ),
            (
                "a model the table does not know: tokens, no dollars",
                String::new(),
                format!("{}\n{}\n", ctx("drill-model"), count(100, 0, 10)),
                Some((tu(100, 10, 0, 0), None)),
            ),
            (
                "no count appended (cut before the answer)",
                first.clone(),
                ctx("gpt-5"),
                None,
            ),
            (
                "a count without info",
                String::new(),
                r#"{"type":"event_msg","payload":{"type":"token_count","info":null}}"#.into(),
                None,
            ),
        ];
        for (why, before, during, want) in cases {
            let got = codex_rollout(&before, &during, "fallback")
                .map(|r| (r.usage, r.usd.map(|d| (d * 1e6).round() / 1e6)));
            assert_eq!(got, want, "{why}");
        }
        assert_eq!(
            codex_rollout("", &count(1, 0, 1), "gpt-5-mini").map(|r| (r.model, r.source)),
            Some(("gpt-5-mini".to_string(), "codex-rollout")),
            "without a turn_context, the seat's model"
        );
    }

    #[test]
    fn opencode_messages_are_summed_with_reasoning_as_output() {
        // Rows as OpenCode 1.18 writes them (a user message, then the turn's assistant ones).
        let rows = concat!(
            r#"{"role":"user","time":{"created":1},"agent":"build","model":{"providerID":"drill","modelID":"drill-model"}}"#,
            "\n",
            r#"{"role":"assistant","cost":0,"tokens":{"total":1542,"input":1200,"output":42,"reasoning":0,"cache":{"write":0,"read":300}},"modelID":"gpt-5","finish":"stop"}"#,
            "\n",
            r#"{"role":"assistant","cost":0,"tokens":{"input":100,"output":8,"reasoning":2,"cache":{"write":5,"read":0}},"modelID":"gpt-5"}"#,
            "\n",
        );
        let r = opencode_messages(rows, "").expect("read");
        assert_eq!(r.usage, tu(1300, 52, 300, 5));
        assert_eq!(r.model, "gpt-5");
        assert!(
            r.estimated && r.usd.is_some(),
            "priced from the table: {r:?}"
        );
        assert_eq!(r.source, "opencode-db");
        // OpenCode's own dollars, when it knows the model's price.
        let paid = r#"{"role":"assistant","cost":0.012,"tokens":{"input":10,"output":1,"cache":{}},"modelID":"x"}"#;
        let r = opencode_messages(paid, "").expect("read");
        assert_eq!((r.usd, r.estimated), (Some(0.012), false));
        // An unknown model without dollars keeps its tokens, dollars unknown.
        let r = opencode_messages(&paid.replace("0.012", "0"), "").expect("read");
        assert_eq!((r.usd, r.estimated), (None, false));
        // Nothing the turn's assistant wrote: nothing read.
        assert_eq!(
            opencode_messages("{\"role\":\"user\"}\nnot json\n", ""),
            None
        );
    }

    #[test]
    fn the_price_table_matches_model_families() {
        assert_eq!(
            price("claude-sonnet-4-5-20250929").map(|p| p.needle),
            Some("sonnet")
        );
        assert_eq!(price("claude-opus-4-1").map(|p| p.needle), Some("opus"));
        assert_eq!(price("claude-opus-4-5").map(|p| p.needle), Some("opus-4-5"));
        assert_eq!(price("GPT-5-mini").map(|p| p.needle), Some("gpt-5-mini"));
        assert_eq!(price("gpt-5.1-codex").map(|p| p.needle), Some("gpt-5"));
        assert_eq!(price(""), None);
        assert_eq!(price("drill-model"), None);
        assert_eq!(estimate("drill-model", &tu(1, 1, 1, 1)), None);
    }

    #[test]
    fn a_transcript_mark_reads_only_what_the_turn_appended() {
        let d = tempfile::tempdir().expect("tmp");
        let old = d.path().join("a.jsonl");
        std::fs::write(&old, "before\n").expect("write");
        std::fs::write(d.path().join("notes.txt"), "x").expect("write");
        let mark = TranscriptMark::take(d.path());
        assert_eq!(mark.appended(), None, "nothing grew");
        std::fs::write(&old, "before\nduring\n").expect("append");
        assert_eq!(
            mark.appended(),
            Some(("before\n".to_string(), "during\n".to_string()))
        );
        let fresh = d.path().join("b.jsonl");
        std::fs::write(&fresh, "new session\n").expect("write");
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        let f = std::fs::File::options()
            .append(true)
            .open(&fresh)
            .expect("open");
        f.set_modified(later).expect("mtime");
        assert_eq!(
            mark.appended(),
            Some((String::new(), "new session\n".to_string())),
            "the newest file that grew"
        );
        let gone = TranscriptMark::take(&d.path().join("missing"));
        assert_eq!(gone.appended(), None);
    }
}
