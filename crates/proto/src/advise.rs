//! The Advisor: given work packages, decide how to run them — alone in the person's session, on a
//! crew of seats, or both — before a token is spent (docs/protocol.md §14.1).
//!
//! [`advise`] is pure and deterministic: the same packages, installed CLIs, seats, plan profile
//! and model table always give the same answer, and every rule is a table test below. The
//! callers gather the world: `trantor advise` and `relay_advise` verify the CLIs on this machine
//! against the runner's driver table and read the plan profile; `POST /advise` adds the seats the
//! hub knows for the project.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The day the built-in model table's prices were read from the vendors' price pages.
pub const MODELS_DATED: &str = "2025-11-20";

/// Difficulties, easiest first.
pub const DIFFICULTIES: [&str; 3] = ["easy", "medium", "hard"];

/// Plans a profile may name, and what kind of pool each is.
pub const PLANS: &[(&str, PlanKind)] = &[
    ("api", PlanKind::Api),
    ("none", PlanKind::None),
    ("free", PlanKind::Capped),
    ("pro", PlanKind::Capped),
    ("plus", PlanKind::Capped),
    ("team", PlanKind::Capped),
    ("tier", PlanKind::Capped),
    ("coding-plan", PlanKind::Capped),
    ("max", PlanKind::High),
    ("max-5x", PlanKind::High),
    ("max-20x", PlanKind::High),
    ("ultra", PlanKind::High),
];

/// What a plan bills per month, where the vendor publishes one price: `(agent, plan, USD)`.
pub const PLAN_PRICES: &[(&str, &str, f64)] = &[
    ("claude", "free", 0.0),
    ("claude", "pro", 20.0),
    ("claude", "max", 100.0),
    ("claude", "max-5x", 100.0),
    ("claude", "max-20x", 200.0),
    ("claude", "team", 30.0),
    ("codex", "free", 0.0),
    ("codex", "plus", 20.0),
    ("codex", "pro", 200.0),
    ("codex", "team", 30.0),
    ("gemini", "free", 0.0),
    ("gemini", "pro", 20.0),
    ("gemini", "ultra", 250.0),
];

/// Tokens one package is expected to take through its executor, by difficulty (input and output
/// together). A forecast, shown as one, never a measurement.
pub const FORECAST_TOKENS: [(&str, u64); 3] = [
    ("easy", 300_000),
    ("medium", 1_500_000),
    ("hard", 6_000_000),
];

/// Share of a package's tokens that are input (the rest is output).
const INPUT_SHARE: f64 = 0.85;

/// How a plan is billed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PlanKind {
    /// Pay per token: every token is money.
    Api,
    /// A capped subscription: no marginal cost, a scarce quota.
    Capped,
    /// A high-tier subscription: no marginal cost, a large quota.
    High,
    /// The provider is not available.
    None,
}

/// The kind of a plan name, `None` when the name is not a known plan.
pub fn plan_kind(plan: &str) -> Option<PlanKind> {
    PLANS.iter().find(|(n, _)| *n == plan).map(|(_, k)| *k)
}

/// One model the Advisor may route to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelRow {
    /// The agent CLI that runs it (`claude`, `codex`, `opencode`, …).
    pub agent: String,
    /// The model id the CLI takes.
    pub model: String,
    /// Capability tier: 1 handles easy work, 2 medium, 3 hard.
    pub tier: u8,
    /// USD per million input tokens.
    pub usd_in: f64,
    /// USD per million output tokens.
    pub usd_out: f64,
}

fn row(agent: &str, model: &str, tier: u8, usd_in: f64, usd_out: f64) -> ModelRow {
    ModelRow {
        agent: agent.into(),
        model: model.into(),
        tier,
        usd_in,
        usd_out,
    }
}

/// The model table shipped in the binary, priced as of [`MODELS_DATED`]. A config may replace
/// rows (same agent and model) or add some ([`merge_models`]).
pub fn builtin_models() -> Vec<ModelRow> {
    vec![
        row("claude", "claude-opus-4-5", 3, 5.0, 25.0),
        row("claude", "claude-sonnet-4-5", 2, 3.0, 15.0),
        row("claude", "claude-haiku-4-5", 1, 1.0, 5.0),
        row("codex", "gpt-5.1-codex", 3, 1.25, 10.0),
        row("codex", "gpt-5.1-codex-mini", 1, 0.25, 2.0),
        row("gemini", "gemini-2.5-pro", 3, 1.25, 10.0),
        row("gemini", "gemini-2.5-flash", 1, 0.30, 2.50),
        row("kimi", "kimi-k2", 2, 0.60, 2.50),
        row("opencode", "deepseek/deepseek-chat", 2, 0.28, 0.42),
        row("opencode", "zai/glm-4.6", 2, 0.60, 2.20),
    ]
}

/// The built-in table with `overrides` applied: a row with the same agent and model replaces
/// the built-in one, any other row is added.
pub fn merge_models(overrides: &[ModelRow]) -> Vec<ModelRow> {
    let mut out = builtin_models();
    for o in overrides {
        match out
            .iter_mut()
            .find(|r| r.agent == o.agent && r.model == o.model)
        {
            Some(r) => *r = o.clone(),
            None => out.push(o.clone()),
        }
    }
    out
}

/// One work package, as the person's session cut it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    /// Short title; becomes the card title.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::TITLE), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub title: String,
    /// `easy`, `medium` or `hard` (required: the route follows it).
    #[serde(default)]
    #[schemars(extend("x-required" = true), with = "DifficultyName")]
    pub difficulty: Option<String>,
    /// Files the package touches (shown on the card).
    #[serde(default)]
    pub files: Vec<String>,
    /// `self` keeps the package in the person's session; a session id assigns it to that seat.
    #[serde(default)]
    pub owner: Option<String>,
    /// How a person proves the package done (the card's drill).
    #[serde(default)]
    pub drill: Option<String>,
}

/// An agent CLI found on this machine, checked against the runner's driver table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CliInfo {
    /// The driver name (`claude`, `codex`, …).
    pub agent: String,
    /// The version it printed, if any.
    #[serde(default)]
    pub version: Option<String>,
    /// Whether the runner can drive it: inside or newer than the verified range, or a driver
    /// never verified. `false` for an older-than-verified CLI or one that printed no version.
    pub usable: bool,
    /// What the check found, in words.
    #[serde(default)]
    pub detail: String,
}

/// A seat the hub knows for the project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeatInfo {
    /// Its bus session (`codex:shop`).
    pub session: String,
    /// Its agent CLI.
    pub agent: String,
    /// Online now.
    pub online: bool,
    /// Parked by its runner (not routed to).
    pub parked: bool,
    /// Why it cannot take work although not parked (yet): its credential is exhausted or
    /// refused, as the hub's circuit breaker says (not routed to either).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

/// What this project's cards actually cost so far, from the hub's cost ledger (docs/protocol.md
/// §7.6): the measured figure beside the forecast.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerActuals {
    /// Cards with at least one recorded turn.
    pub cards: u64,
    /// Their turns.
    pub turns: u64,
    /// Their tokens, input and output.
    pub tokens: u64,
    /// Their known dollars.
    pub usd: f64,
    /// Some of the dollars are the runner's estimate.
    pub estimated: bool,
}

/// The forecast from measurement: this project's mean card so far, times the packages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Measured {
    /// Cards measured.
    pub cards: u64,
    /// Mean tokens per card.
    pub tokens_per_card: u64,
    /// Mean dollars per card.
    pub usd_per_card: f64,
    /// The mean card times the packages.
    pub usd: f64,
}

/// One provider's plan in the person's profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PlanEntry {
    /// The plan name (one of [`PLANS`]).
    #[schemars(with = "PlanName")]
    pub plan: String,
}

// Schema-only stand-ins: the fields stay strings, checked by [`advise`] with a better message.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum DifficultyName {
    Easy,
    Medium,
    Hard,
}

#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum HorizonName {
    Short,
    Medium,
    Long,
}

#[derive(JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[allow(dead_code)]
enum PlanName {
    Api,
    None,
    Free,
    Pro,
    Plus,
    Team,
    Tier,
    CodingPlan,
    Max,
    #[serde(rename = "max-5x")]
    Max5x,
    #[serde(rename = "max-20x")]
    Max20x,
    Ultra,
}

/// Most packages one request may carry.
pub const MAX_PACKAGES: usize = 100;
/// Longest `task` line.
pub const MAX_TASK: usize = 800;

/// The person's plans, per agent (`~/.agent-bus/profile.json`, `trantor profile set`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Profile {
    /// Agent → plan.
    #[serde(default)]
    pub providers: BTreeMap<String, PlanEntry>,
}

impl Profile {
    /// The plan for an agent; `api` when the profile does not say.
    pub fn plan(&self, agent: &str) -> String {
        self.providers
            .get(agent)
            .map(|p| p.plan.clone())
            .unwrap_or_else(|| "api".into())
    }
}

/// `POST /advise` body and the Advisor's whole input.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdviseRequest {
    /// One line on the whole job.
    #[serde(default)]
    #[schemars(length(max = MAX_TASK))]
    pub task: String,
    /// The packages (at least one).
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = MAX_PACKAGES))]
    pub packages: Vec<Package>,
    /// `short`, `medium` or `long` (default: from the package count).
    #[serde(default)]
    #[schemars(with = "Option<HorizonName>")]
    pub horizon: Option<String>,
    /// The board the cards go to.
    #[serde(default)]
    #[schemars(extend("x-required" = true), with = "String", length(min = 1, max = crate::limits::PROJECT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub project: Option<String>,
    /// The CLIs verified on the caller's machine; absent, the hub looks on its own PATH.
    #[serde(default)]
    pub clis: Option<Vec<CliInfo>>,
    /// The person's plans; absent, every provider is taken as `api`.
    #[serde(default)]
    pub profile: Option<Profile>,
    /// Rows replacing or extending the built-in model table.
    #[serde(default)]
    pub models: Option<Vec<ModelRow>>,
    /// The seats on the hub (filled in by the hub; a client's value is replaced).
    #[serde(default)]
    pub seats: Option<Vec<SeatInfo>>,
    /// What the project's cards cost so far (filled in by the hub; a client's value is
    /// replaced).
    #[serde(default)]
    pub ledger: Option<LedgerActuals>,
}

/// One package's route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Route {
    /// The package title.
    pub package: String,
    /// Its difficulty.
    pub difficulty: String,
    /// `agent:model`, or `self` for the person's own session.
    pub route: String,
    /// The session the card is assigned to (empty for `self`: the caller assigns it to itself).
    pub assignee: String,
    /// Whether that seat is live on the hub now (no `trantor up` needed).
    pub live: bool,
    /// The pool it draws on, `agent:plan`.
    pub pool: String,
    /// Forecast tokens.
    pub tokens: u64,
    /// What the tokens cost at API prices.
    pub api_usd: f64,
    /// What the plans actually charge for them (0 on a subscription).
    pub charged_usd: f64,
    /// Why this route.
    pub reason: String,
}

/// How many seats and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Seats {
    /// Seats the plan uses.
    pub count: usize,
    /// Their sessions.
    pub members: Vec<String>,
    /// The ones to start with `trantor up` (not live now), as its arguments.
    pub up: Vec<String>,
    /// Why that many.
    pub why: String,
}

/// One quota pool the work draws on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    /// `agent:plan`.
    pub pool: String,
    /// How it bills.
    pub kind: PlanKind,
    /// The plan's monthly price where published.
    pub monthly_usd: Option<f64>,
    /// Packages drawing on it.
    pub packages: usize,
    /// Forecast tokens.
    pub tokens: u64,
    /// What this pool charges for the work.
    pub charged_usd: f64,
}

/// The money and tokens, forecast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    /// Forecast tokens, all packages.
    pub tokens: u64,
    /// API-equivalent cost of all of it.
    pub api_equivalent_usd: f64,
    /// What the plans actually charge (the API-billed pools only).
    pub charged_usd: f64,
    /// The pools drawn on.
    pub pools: Vec<Pool>,
    /// The date of the prices used.
    pub prices_dated: String,
    /// The forecast from this project's measured cards, when any has a recorded cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measured>,
}

/// A ready `relay_task_add` call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CardArgs {
    /// Always `relay_task_add`.
    pub tool: String,
    /// Its arguments.
    pub args: serde_json::Map<String, serde_json::Value>,
}

/// The Advisor's answer (`POST /advise` reply).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Advice {
    /// `solo`, `crew` or `hybrid`.
    pub mode: String,
    /// Why that mode, one sentence each.
    pub why: Vec<String>,
    /// The horizon used.
    pub horizon: String,
    /// One route per package, in package order.
    pub routes: Vec<Route>,
    /// The seats.
    pub seats: Seats,
    /// The forecast.
    pub estimate: Estimate,
    /// The CLIs left out, and why.
    pub unavailable: Vec<String>,
    /// The routes as a markdown table, to paste to the person.
    #[serde(rename = "routing_table_md")]
    pub routing_table_md: String,
    /// One `relay_task_add` call per package, in order.
    #[serde(rename = "card_args")]
    pub card_args: Vec<CardArgs>,
    /// The whole answer in two sentences.
    pub summary: String,
}

/// Input the Advisor refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdviseError {
    /// No packages.
    #[error(
        "no packages: cut the work into packages (title and difficulty easy|medium|hard) first"
    )]
    NoPackages,
    /// Packages without a usable difficulty.
    #[error(
        "package(s) without a difficulty of easy, medium or hard: {0} — the route follows the difficulty, so give each package one"
    )]
    Difficulty(String),
    /// A package without a title.
    #[error("package {0} has no title")]
    Title(usize),
    /// An unknown horizon.
    #[error("unknown horizon '{0}': use short, medium or long")]
    Horizon(String),
    /// A profile naming a plan the Advisor does not know.
    #[error("{0}")]
    Plan(String),
}

/// Check one `agent=plan` pair of `trantor profile set`.
pub fn check_plan(agent: &str, plan: &str) -> Result<(), AdviseError> {
    if agent.trim().is_empty() || agent.starts_with('-') {
        return Err(AdviseError::Plan(format!(
            "'{agent}={plan}' names no provider: use provider=plan, e.g. claude=max"
        )));
    }
    if plan_kind(plan).is_none() {
        return Err(unknown_plan(agent, plan));
    }
    Ok(())
}

fn unknown_plan(agent: &str, plan: &str) -> AdviseError {
    let names: Vec<&str> = PLANS.iter().map(|(n, _)| *n).collect();
    AdviseError::Plan(format!(
        "unknown plan '{plan}' for {agent}: the plans are {}",
        names.join(", ")
    ))
}

fn forecast(difficulty: &str) -> u64 {
    FORECAST_TOKENS
        .iter()
        .find(|(d, _)| *d == difficulty)
        .map(|(_, t)| *t)
        .unwrap_or(0)
}

fn need_tier(difficulty: &str) -> u8 {
    match difficulty {
        "hard" => 3,
        "medium" => 2,
        _ => 1,
    }
}

fn usd(tokens: u64, m: &ModelRow) -> f64 {
    let t = tokens as f64 / 1e6;
    round2(t * INPUT_SHARE * m.usd_in + t * (1.0 - INPUT_SHARE) * m.usd_out)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The cheapest model of an agent that clears `tier`, else its strongest (`false`: under tier).
fn pick_model<'a>(models: &'a [ModelRow], agent: &str, tier: u8) -> Option<(&'a ModelRow, bool)> {
    let mine: Vec<&ModelRow> = models.iter().filter(|m| m.agent == agent).collect();
    let price = |m: &ModelRow| m.usd_in * INPUT_SHARE + m.usd_out * (1.0 - INPUT_SHARE);
    let clear = mine
        .iter()
        .filter(|m| m.tier >= tier)
        .min_by(|a, b| {
            price(a)
                .total_cmp(&price(b))
                .then_with(|| a.model.cmp(&b.model))
        })
        .copied();
    if let Some(m) = clear {
        return Some((m, true));
    }
    mine.iter()
        .max_by(|a, b| {
            a.tier
                .cmp(&b.tier)
                .then_with(|| price(b).total_cmp(&price(a)))
        })
        .map(|m| (*m, false))
}

fn pool_rank(kind: PlanKind) -> u8 {
    match kind {
        PlanKind::High => 0,
        PlanKind::Capped => 1,
        PlanKind::Api => 2,
        PlanKind::None => 3,
    }
}

/// Decide. `project` names the board the cards go to.
pub fn advise(req: &AdviseRequest, project: &str) -> Result<Advice, AdviseError> {
    let Checked {
        pkgs,
        profile,
        horizon,
    } = checked_request(req)?;
    let n = pkgs.len();
    let hard = pkgs.iter().filter(|(_, d)| d == "hard").count();
    let models = merge_models(req.models.as_deref().unwrap_or(&[]));
    let (agents, seats_now, unavailable) = usable_agents(req, &profile, &models);
    let solo_reason = solo_reason(&agents, n, hard, &horizon);
    let ctx = RouteCtx {
        profile: &profile,
        models: &models,
        agents: &agents,
        seats: &seats_now,
        project,
    };
    let routes = route_packages(&ctx, &pkgs, solo_reason.is_some());
    let crew_routes = routes.iter().filter(|r| r.route != "self").count();
    let mode = mode_of(crew_routes, n);
    let why = why_of(solo_reason.as_deref(), mode, n, hard, &horizon, crew_routes);
    let seats = seats_of(&routes, &agents, crew_routes);
    let estimate = estimate_of(&routes, req.ledger.as_ref(), n);
    let md = routing_table_md(&routes, &seats.why, &estimate, n);
    let card_args = card_args(&routes, &pkgs, project);
    let summary = summary_of(mode, &why, &seats.up, &estimate, n);
    Ok(Advice {
        mode: mode.into(),
        why,
        horizon,
        routes,
        seats,
        estimate,
        unavailable,
        routing_table_md: md,
        card_args,
        summary,
    })
}

/// The request's packages (titles trimmed, with their difficulty), its profile and its horizon
/// (inferred from the package count when not given), or the first thing wrong with it.
fn checked_request(req: &AdviseRequest) -> Result<Checked, AdviseError> {
    if req.packages.is_empty() {
        return Err(AdviseError::NoPackages);
    }
    let mut bad = Vec::new();
    let mut pkgs: Vec<(Package, String)> = Vec::new();
    for (i, p) in req.packages.iter().enumerate() {
        let title = p.title.trim().to_string();
        if title.is_empty() {
            return Err(AdviseError::Title(i + 1));
        }
        let d = p.difficulty.clone().unwrap_or_default();
        if !DIFFICULTIES.contains(&d.as_str()) {
            bad.push(format!("\"{title}\""));
            continue;
        }
        let mut p = p.clone();
        p.title = title;
        pkgs.push((p, d));
    }
    if !bad.is_empty() {
        return Err(AdviseError::Difficulty(bad.join(", ")));
    }
    let profile = req.profile.clone().unwrap_or_default();
    for (agent, entry) in &profile.providers {
        if plan_kind(&entry.plan).is_none() {
            return Err(unknown_plan(agent, &entry.plan));
        }
    }
    let n = pkgs.len();
    let horizon = match req.horizon.clone() {
        Some(h) if ["short", "medium", "long"].contains(&h.as_str()) => h,
        Some(h) => return Err(AdviseError::Horizon(h)),
        _ if n >= 4 => "long".into(),
        _ if n >= 2 => "medium".into(),
        _ => "short".into(),
    };
    Ok(Checked {
        pkgs,
        profile,
        horizon,
    })
}

/// A request that passed [`checked_request`].
struct Checked {
    /// The packages, titles trimmed, each with its difficulty.
    pkgs: Vec<(Package, String)>,
    profile: Profile,
    horizon: String,
}

/// A candidate agent for a package, in sort order: under the tier, API-billed, load, pool
/// rank, API-equivalent price, agent, and the model it would run.
type Candidate<'a> = (bool, bool, usize, u8, f64, String, &'a ModelRow);

/// The agents a package may go to (installed, usable, on a plan, in the model table; sorted),
/// the seats with a credential hold counted as parked, and a line for each agent or seat that is
/// not routed to.
fn usable_agents(
    req: &AdviseRequest,
    profile: &Profile,
    models: &[ModelRow],
) -> (Vec<String>, Vec<SeatInfo>, Vec<String>) {
    let seats_now = req.seats.clone().unwrap_or_default();
    let mut unavailable = Vec::new();
    let mut agents: Vec<String> = Vec::new();
    for c in req.clis.as_deref().unwrap_or(&[]) {
        let plan = profile.plan(&c.agent);
        if !c.usable {
            unavailable.push(format!("{}: {}", c.agent, c.detail));
        } else if plan_kind(&plan) == Some(PlanKind::None) {
            unavailable.push(format!("{}: the profile says plan none", c.agent));
        } else if !models.iter().any(|m| m.agent == c.agent) {
            unavailable.push(format!(
                "{}: no model of it in the model table (add one in the config)",
                c.agent
            ));
        } else if !agents.contains(&c.agent) {
            agents.push(c.agent.clone());
        }
    }
    agents.sort();
    for s in seats_now.iter().filter(|s| s.parked || s.held.is_some()) {
        match &s.held {
            Some(why) if !s.parked => {
                unavailable.push(format!("{}: {why} (not routed to)", s.session))
            }
            _ => unavailable.push(format!("{}: parked (not routed to)", s.session)),
        }
    }
    // A seat held by its credential counts as parked for every choice below.
    let seats_now: Vec<SeatInfo> = seats_now
        .into_iter()
        .map(|mut s| {
            s.parked |= s.held.is_some();
            s
        })
        .collect();
    (agents, seats_now, unavailable)
}

/// Why the whole request stays in this session, when it does.
fn solo_reason(agents: &[String], n: usize, hard: usize, horizon: &str) -> Option<String> {
    if agents.is_empty() {
        Some(
            "no agent CLI is installed and usable here (trantor doctor lists them), so there is \
             no crew to route to: the work stays in this session"
                .to_string(),
        )
    } else if n == 1 && hard == 0 && horizon == "short" {
        Some(
            "one package, not hard, short horizon: doing it here costs less than starting a seat"
                .to_string(),
        )
    } else {
        None
    }
}

/// What routing one package looks at.
struct RouteCtx<'a> {
    profile: &'a Profile,
    models: &'a [ModelRow],
    agents: &'a [String],
    seats: &'a [SeatInfo],
    project: &'a str,
}

impl RouteCtx<'_> {
    /// An agent's pool (`agent:plan`) and the kind of its plan.
    fn pool_of(&self, agent: &str) -> (String, PlanKind) {
        let plan = self.profile.plan(agent);
        let kind = plan_kind(&plan).unwrap_or(PlanKind::Api);
        (format!("{agent}:{plan}"), kind)
    }

    /// A package kept in this session. The person's own session runs Claude Code: `self` work
    /// is priced on claude's models.
    fn self_route(&self, p: &Package, d: &str, reason: String) -> Route {
        let tokens = forecast(d);
        let (pool, kind) = self.pool_of("claude");
        let api = pick_model(self.models, "claude", need_tier(d))
            .map(|(m, _)| usd(tokens, m))
            .unwrap_or(0.0);
        let charged = if kind == PlanKind::Api { api } else { 0.0 };
        Route {
            package: p.title.clone(),
            difficulty: d.to_string(),
            route: "self".into(),
            assignee: String::new(),
            live: false,
            pool,
            tokens,
            api_usd: api,
            charged_usd: charged,
            reason,
        }
    }
}

/// One route per package, in order; `solo` keeps every package in this session.
fn route_packages(ctx: &RouteCtx, pkgs: &[(Package, String)], solo: bool) -> Vec<Route> {
    let mut load: BTreeMap<String, usize> = BTreeMap::new();
    let mut routes = Vec::new();
    for (p, d) in pkgs {
        let owner = p.owner.as_deref().map(str::trim).unwrap_or("");
        if solo || owner == "self" {
            let reason = if owner == "self" {
                "owned by the person's session (owner: self)".to_string()
            } else {
                "solo: done in this session".to_string()
            };
            routes.push(ctx.self_route(p, d, reason));
            continue;
        }
        routes.push(crew_route(ctx, p, d, owner, &mut load));
    }
    routes
}

/// The candidates for one package, best first. Order: clears the tier, then not API-billed,
/// then least loaded, then the larger subscription, then the cheaper, then the name (so the
/// answer never depends on order).
fn candidates<'a>(
    ctx: &RouteCtx<'a>,
    d: &str,
    pinned: Option<&SeatInfo>,
    load: &BTreeMap<String, usize>,
) -> Vec<Candidate<'a>> {
    let tier = need_tier(d);
    let mut cands = Vec::new();
    for a in ctx.agents {
        if let Some(s) = pinned
            && &s.agent != a
        {
            continue;
        }
        if let Some((m, clears)) = pick_model(ctx.models, a, tier) {
            let (_, kind) = ctx.pool_of(a);
            let used = load.get(a).copied().unwrap_or(0);
            cands.push((
                !clears,
                kind == PlanKind::Api,
                used,
                pool_rank(kind),
                usd(forecast(d), m),
                a.clone(),
                m,
            ));
        }
    }
    cands.sort_by(|x, y| {
        x.0.cmp(&y.0)
            .then(x.1.cmp(&y.1))
            .then(x.2.cmp(&y.2))
            .then(x.3.cmp(&y.3))
            .then(x.4.total_cmp(&y.4))
            .then(x.5.cmp(&y.5))
    });
    cands
}

/// The route of a package the crew may take: the best candidate agent, on the pinned seat, a
/// live seat of the project, or a new seat; `load` counts the packages given to each agent.
fn crew_route(
    ctx: &RouteCtx,
    p: &Package,
    d: &str,
    owner: &str,
    load: &mut BTreeMap<String, usize>,
) -> Route {
    // An owner naming a seat pins the package to it when that seat can take work.
    let pinned = ctx
        .seats
        .iter()
        .find(|s| !owner.is_empty() && s.session == owner && !s.parked);
    let Some((under, _, _, _, api, agent, m)) = candidates(ctx, d, pinned, load).first().cloned()
    else {
        // Pinned to a seat whose agent is not usable here: keep it in the session.
        let reason = format!("owner {owner} runs no agent usable here: kept in this session");
        return ctx.self_route(p, d, reason);
    };
    *load.entry(agent.clone()).or_insert(0) += 1;
    let (pool, kind) = ctx.pool_of(&agent);
    let charged = if kind == PlanKind::Api { api } else { 0.0 };
    let project = ctx.project;
    let live_seat = pinned.cloned().or_else(|| {
        ctx.seats
            .iter()
            .find(|s| {
                s.agent == agent
                    && s.online
                    && !s.parked
                    && s.session.ends_with(&format!(":{project}"))
            })
            .cloned()
    });
    let (assignee, live) = match &live_seat {
        Some(s) => (s.session.clone(), s.online),
        None => (new_seat_name(&agent, project, ctx.seats), false),
    };
    let billing = match kind {
        PlanKind::Api => format!("API-billed (${api:.2})"),
        _ => "on a subscription ($0 marginal)".into(),
    };
    let mut reason = match d {
        "hard" => format!("hard → a tier-3 model; {agent} is {billing}"),
        "medium" => format!("medium → a tier-2 model or better; {agent} is {billing}"),
        _ => format!("easy → the cheapest capable model; {agent} is {billing}"),
    };
    if under {
        reason = format!(
            "{d} wants tier {} but no installed agent has one: {} (tier {}) is the strongest here",
            need_tier(d),
            m.model,
            m.tier
        );
    }
    if pinned.is_some() {
        reason = format!("pinned to {owner} (owner); {reason}");
    } else if live {
        reason.push_str(&format!("; {assignee} is live now"));
    }
    Route {
        package: p.title.clone(),
        difficulty: d.to_string(),
        route: format!("{agent}:{}", m.model),
        assignee,
        live,
        pool,
        tokens: forecast(d),
        api_usd: api,
        charged_usd: charged,
        reason,
    }
}

/// `solo` when no package goes to the crew, `crew` when all do, else `hybrid`.
fn mode_of(crew_routes: usize, n: usize) -> &'static str {
    if crew_routes == 0 {
        "solo"
    } else if crew_routes == n {
        "crew"
    } else {
        "hybrid"
    }
}

/// The reasons for the mode.
fn why_of(
    solo_reason: Option<&str>,
    mode: &str,
    n: usize,
    hard: usize,
    horizon: &str,
    crew_routes: usize,
) -> Vec<String> {
    let mut why = Vec::new();
    match (solo_reason, mode) {
        (Some(r), _) => why.push(r.to_string()),
        (None, "solo") => why.push("every package is owned by this session".into()),
        (None, m) => {
            why.push(format!(
                "{n} package(s){}, {horizon} horizon: seats work in their own contexts, so this \
                 session spends tokens coordinating, not building",
                if hard > 0 {
                    format!(", {hard} hard")
                } else {
                    String::new()
                }
            ));
            if m == "hybrid" {
                why.push(format!(
                    "{} package(s) stay in this session (owner self)",
                    n - crew_routes
                ));
            }
        }
    }
    why
}

/// The seats the routes need (seats follow the work): their members, the routes to start, why.
fn seats_of(routes: &[Route], agents: &[String], crew_routes: usize) -> Seats {
    let mut members: Vec<String> = Vec::new();
    let mut up: Vec<String> = Vec::new();
    for r in routes.iter().filter(|r| r.route != "self") {
        if !members.contains(&r.assignee) {
            members.push(r.assignee.clone());
            if !r.live {
                up.push(r.route.clone());
            }
        }
    }
    let idle = agents
        .iter()
        .filter(|a| !routes.iter().any(|r| r.route.starts_with(&format!("{a}:"))))
        .count();
    let why = if members.is_empty() {
        "no seats: the work stays in this session".to_string()
    } else {
        format!(
            "{crew_routes} crew package(s) → {} seat(s), one per agent the routes chose{}",
            members.len(),
            if idle > 0 {
                format!(
                    "; {idle} usable CLI(s) left idle — seats follow the work, not the install list"
                )
            } else {
                String::new()
            }
        )
    };
    Seats {
        count: members.len(),
        members,
        up,
        why,
    }
}

/// The estimate of the routes and its pools.
fn estimate_of(routes: &[Route], ledger: Option<&LedgerActuals>, n: usize) -> Estimate {
    let mut pools: Vec<Pool> = Vec::new();
    for r in routes {
        let agent = r.pool.split_once(':').map(|(a, _)| a).unwrap_or("");
        let plan = r.pool.split_once(':').map(|(_, p)| p).unwrap_or("");
        let kind = plan_kind(plan).unwrap_or(PlanKind::Api);
        match pools.iter_mut().find(|p| p.pool == r.pool) {
            Some(p) => {
                p.packages += 1;
                p.tokens += r.tokens;
                p.charged_usd = round2(p.charged_usd + r.charged_usd);
            }
            None => pools.push(Pool {
                pool: r.pool.clone(),
                kind,
                monthly_usd: PLAN_PRICES
                    .iter()
                    .find(|(a, p, _)| *a == agent && *p == plan)
                    .map(|(_, _, u)| *u),
                packages: 1,
                tokens: r.tokens,
                charged_usd: r.charged_usd,
            }),
        }
    }
    Estimate {
        tokens: routes.iter().map(|r| r.tokens).sum(),
        api_equivalent_usd: round2(routes.iter().map(|r| r.api_usd).sum()),
        charged_usd: round2(routes.iter().map(|r| r.charged_usd).sum()),
        pools,
        prices_dated: MODELS_DATED.into(),
        measured: ledger.and_then(|l| measured(l, n)),
    }
}

/// The routing table in Markdown, with the seats and the estimate under it.
fn routing_table_md(routes: &[Route], seats_why: &str, estimate: &Estimate, n: usize) -> String {
    let mut md = String::from(
        "| # | package | difficulty | route | seat | pool | API-equiv $ | charged $ | reason |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for (i, r) in routes.iter().enumerate() {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {} |\n",
            i + 1,
            cell(&r.package),
            r.difficulty,
            r.route,
            if r.assignee.is_empty() {
                "you".to_string()
            } else if r.live {
                format!("{} (live)", r.assignee)
            } else {
                r.assignee.clone()
            },
            r.pool,
            r.api_usd,
            r.charged_usd,
            cell(&r.reason)
        ));
    }
    md.push_str(&format!(
        "\nSeats: {}. Estimate: {:.1}M tokens, ${:.2} at API prices, ${:.2} charged by the plans (prices dated {}).\n",
        seats_why,
        estimate.tokens as f64 / 1e6,
        estimate.api_equivalent_usd,
        estimate.charged_usd,
        MODELS_DATED
    ));
    if let Some(m) = &estimate.measured {
        md.push_str(&measured_line(m, n));
        md.push('\n');
    }
    md
}

/// The `relay_task_add` arguments that put each package on the board as routed.
fn card_args(routes: &[Route], pkgs: &[(Package, String)], project: &str) -> Vec<CardArgs> {
    routes
        .iter()
        .zip(pkgs.iter())
        .map(|(r, (p, _))| {
            let mut a = serde_json::Map::new();
            a.insert("title".into(), p.title.clone().into());
            a.insert("project".into(), project.into());
            a.insert("difficulty".into(), r.difficulty.clone().into());
            if !r.assignee.is_empty() {
                a.insert("assignee".into(), r.assignee.clone().into());
            }
            if let Some((_, model)) = r.route.split_once(':') {
                a.insert("model".into(), model.into());
            }
            if let Some(d) = p.drill.as_deref().map(str::trim).filter(|d| !d.is_empty()) {
                a.insert("drill".into(), d.into());
            }
            if !p.files.is_empty() {
                a.insert(
                    "note".into(),
                    format!("files: {}", p.files.join(", ")).into(),
                );
            }
            CardArgs {
                tool: "relay_task_add".into(),
                args: a,
            }
        })
        .collect()
}

/// The one-paragraph recommendation.
fn summary_of(mode: &str, why: &[String], up: &[String], estimate: &Estimate, n: usize) -> String {
    let summary = format!(
        "Recommendation: {}. {} Seats: {}. Estimate ≈ ${:.2} charged (${:.2} API-equivalent) over {} pool(s).",
        mode.to_uppercase(),
        why.join("; "),
        if up.is_empty() {
            "none to start".to_string()
        } else {
            format!("trantor up {}", up.join(" "))
        },
        estimate.charged_usd,
        estimate.api_equivalent_usd,
        estimate.pools.len()
    );
    match &estimate.measured {
        Some(m) => format!("{summary} {}", measured_line(m, n)),
        None => summary,
    }
}

/// The forecast from the project's measured cards: their mean times `packages` (none when no
/// card has a recorded cost).
pub fn measured(l: &LedgerActuals, packages: usize) -> Option<Measured> {
    if l.cards == 0 {
        return None;
    }
    let usd_per_card = l.usd / l.cards as f64;
    Some(Measured {
        cards: l.cards,
        tokens_per_card: l.tokens / l.cards,
        usd_per_card: round2(usd_per_card),
        usd: round2(usd_per_card * packages as f64),
    })
}

fn measured_line(m: &Measured, packages: usize) -> String {
    format!(
        "Measured: this project's {} card(s) so far cost ${:.2} and {:.1}M tokens each on average (the cost ledger), so these {packages} package(s) ≈ ${:.2}.",
        m.cards,
        m.usd_per_card,
        m.tokens_per_card as f64 / 1e6,
        m.usd
    )
}

/// A markdown table cell: no pipes or newlines.
fn cell(s: &str) -> String {
    s.replace('|', "/").replace('\n', " ")
}

/// The session a new seat of `agent` gets: `<agent>:<project>`, or `<agent>-N:<project>` when
/// that name is held by a parked or live seat that this route does not use.
fn new_seat_name(agent: &str, project: &str, seats: &[SeatInfo]) -> String {
    let taken = |s: &str| {
        seats
            .iter()
            .any(|x| x.session == s && (x.parked || x.online))
    };
    let first = format!("{agent}:{project}");
    if !taken(&first) {
        return first;
    }
    (2..)
        .map(|i| format!("{agent}-{i}:{project}"))
        .find(|s| !taken(s))
        .unwrap_or(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkg(title: &str, d: &str) -> Package {
        Package {
            title: title.into(),
            difficulty: Some(d.into()),
            ..Default::default()
        }
    }

    fn cli(agent: &str) -> CliInfo {
        CliInfo {
            agent: agent.into(),
            version: Some("1.0.0".into()),
            usable: true,
            detail: "verified".into(),
        }
    }

    fn profile(pairs: &[(&str, &str)]) -> Profile {
        Profile {
            providers: pairs
                .iter()
                .map(|(a, p)| {
                    (
                        a.to_string(),
                        PlanEntry {
                            plan: p.to_string(),
                        },
                    )
                })
                .collect(),
        }
    }

    fn req(pkgs: Vec<Package>, clis: &[&str], prof: &[(&str, &str)]) -> AdviseRequest {
        AdviseRequest {
            task: "build it".into(),
            packages: pkgs,
            clis: Some(clis.iter().map(|c| cli(c)).collect()),
            profile: Some(profile(prof)),
            ..Default::default()
        }
    }

    fn three() -> Vec<Package> {
        vec![
            pkg("engine", "hard"),
            pkg("ui", "medium"),
            pkg("readme", "easy"),
        ]
    }

    /// Mode rules: (packages, clis, horizon, owner-self count) → mode.
    #[test]
    fn mode_table() {
        type Case<'a> = (
            &'a str,
            Vec<Package>,
            &'a [&'a str],
            Option<&'a str>,
            &'a str,
        );
        let cases: &[Case] = &[
            ("no CLI at all", three(), &[], None, "solo"),
            (
                "one easy, short",
                vec![pkg("typo", "easy")],
                &["codex"],
                None,
                "solo",
            ),
            (
                "one hard goes to the crew",
                vec![pkg("engine", "hard")],
                &["codex"],
                None,
                "crew",
            ),
            (
                "one easy but a long horizon",
                vec![pkg("typo", "easy")],
                &["codex"],
                Some("long"),
                "crew",
            ),
            (
                "three packages",
                three(),
                &["codex", "claude"],
                None,
                "crew",
            ),
            (
                "one owned by self",
                vec![
                    pkg("engine", "hard"),
                    Package {
                        owner: Some("self".into()),
                        ..pkg("glue", "medium")
                    },
                ],
                &["codex"],
                None,
                "hybrid",
            ),
            (
                "all owned by self",
                vec![
                    Package {
                        owner: Some("self".into()),
                        ..pkg("a", "hard")
                    },
                    Package {
                        owner: Some("self".into()),
                        ..pkg("b", "hard")
                    },
                ],
                &["codex"],
                None,
                "solo",
            ),
        ];
        for (name, pkgs, clis, horizon, want) in cases {
            let mut r = req(pkgs.clone(), clis, &[]);
            r.horizon = horizon.map(String::from);
            let a = advise(&r, "shop").unwrap();
            assert_eq!(a.mode, *want, "{name}: {:?}", a.why);
            assert!(!a.why.is_empty(), "{name}");
        }
    }

    #[test]
    fn no_cli_says_so() {
        let a = advise(&req(three(), &[], &[]), "shop").unwrap();
        assert_eq!(a.mode, "solo");
        assert!(a.why[0].contains("no agent CLI"), "{:?}", a.why);
        assert!(a.routes.iter().all(|r| r.route == "self"));
        assert_eq!(a.seats.count, 0);
    }

    /// Route rules: (difficulty, clis, profile) → route.
    #[test]
    fn route_table() {
        type Case<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
        let cases: &[Case] = &[
            // hard needs tier 3: codex's cheapest tier-3 model beats claude's on API price.
            ("hard", &["claude", "codex"], &[], "codex:gpt-5.1-codex"),
            // a subscription pool is preferred over an API-billed one.
            (
                "hard",
                &["claude", "codex"],
                &[("claude", "max")],
                "claude:claude-opus-4-5",
            ),
            // medium: the cheapest tier-2+ model.
            (
                "medium",
                &["opencode", "codex"],
                &[],
                "opencode:deepseek/deepseek-chat",
            ),
            // easy: the cheapest model at all.
            (
                "easy",
                &["claude", "codex"],
                &[],
                "codex:gpt-5.1-codex-mini",
            ),
            ("easy", &["claude"], &[], "claude:claude-haiku-4-5"),
            // no tier-3 model installed: the strongest there is, said so.
            (
                "hard",
                &["opencode"],
                &[],
                "opencode:deepseek/deepseek-chat",
            ),
            // plan none takes an agent out.
            (
                "hard",
                &["claude", "codex"],
                &[("codex", "none")],
                "claude:claude-opus-4-5",
            ),
        ];
        for (d, clis, prof, want) in cases {
            let a = advise(
                &req(vec![pkg("x", d), pkg("y", "easy")], clis, prof),
                "shop",
            )
            .unwrap();
            assert_eq!(
                a.routes[0].route, *want,
                "{d} over {clis:?} with {prof:?}: {}",
                a.routes[0].reason
            );
        }
        let a = advise(
            &req(vec![pkg("x", "hard"), pkg("y", "easy")], &["opencode"], &[]),
            "p",
        )
        .unwrap();
        assert!(
            a.routes[0].reason.contains("no installed agent"),
            "{}",
            a.routes[0].reason
        );
    }

    #[test]
    fn load_spreads_over_equal_agents_and_seats_follow_the_work() {
        let pkgs = vec![pkg("a", "hard"), pkg("b", "hard"), pkg("c", "hard")];
        let a = advise(
            &req(
                pkgs,
                &["claude", "codex", "gemini", "kimi"],
                &[("claude", "max"), ("codex", "pro")],
            ),
            "shop",
        )
        .unwrap();
        let agents: Vec<&str> = a
            .routes
            .iter()
            .map(|r| r.route.split(':').next().unwrap_or(""))
            .collect();
        assert_eq!(agents, ["claude", "codex", "claude"]);
        assert_eq!(a.seats.count, 2);
        assert_eq!(a.seats.members, ["claude:shop", "codex:shop"]);
        assert!(
            a.seats.why.contains("seats follow the work"),
            "{}",
            a.seats.why
        );
        assert_eq!(a.estimate.charged_usd, 0.0);
        assert!(a.estimate.api_equivalent_usd > 0.0);
    }

    #[test]
    fn live_seats_are_reused_and_parked_ones_skipped() {
        let mut r = req(
            vec![pkg("a", "hard"), pkg("b", "medium")],
            &["codex", "claude"],
            &[],
        );
        r.seats = Some(vec![
            SeatInfo {
                session: "codex:shop".into(),
                agent: "codex".into(),
                online: true,
                parked: true,
                held: None,
            },
            SeatInfo {
                session: "claude:shop".into(),
                agent: "claude".into(),
                online: true,
                parked: false,
                held: None,
            },
        ]);
        let a = advise(&r, "shop").unwrap();
        let hard = &a.routes[0];
        assert_eq!(hard.route, "codex:gpt-5.1-codex");
        assert_eq!(
            hard.assignee, "codex-2:shop",
            "the parked seat is not routed to"
        );
        assert!(!hard.live);
        assert!(
            a.unavailable
                .iter()
                .any(|u| u.contains("codex:shop: parked"))
        );
        let medium = &a.routes[1];
        assert_eq!(medium.assignee, "claude:shop");
        assert!(medium.live);
        assert_eq!(a.seats.up, ["codex:gpt-5.1-codex"]);
    }

    #[test]
    fn a_seat_on_a_spent_credential_is_skipped_and_the_ledger_measures() {
        let mut r = req(vec![pkg("a", "medium"), pkg("b", "easy")], &["claude"], &[]);
        r.seats = Some(vec![SeatInfo {
            session: "claude:shop".into(),
            agent: "claude".into(),
            online: true,
            parked: false,
            held: Some("credential work exhausted until 15:00 UTC".into()),
        }]);
        r.ledger = Some(LedgerActuals {
            cards: 4,
            turns: 9,
            tokens: 2_000_000,
            usd: 1.0,
            estimated: false,
        });
        let a = advise(&r, "shop").unwrap();
        assert!(
            a.routes.iter().all(|x| x.assignee != "claude:shop"),
            "the held seat is not routed to: {:?}",
            a.routes
        );
        assert!(
            a.unavailable
                .iter()
                .any(|u| u
                    == "claude:shop: credential work exhausted until 15:00 UTC (not routed to)"),
            "{:?}",
            a.unavailable
        );
        let m = a.estimate.measured.clone().expect("measured");
        assert_eq!(
            (m.cards, m.tokens_per_card, m.usd_per_card, m.usd),
            (4, 500_000, 0.25, 0.5)
        );
        assert!(
            a.summary
                .contains("Measured: this project's 4 card(s) so far cost $0.25"),
            "{}",
            a.summary
        );
        assert!(a.routing_table_md.contains("these 2 package(s) ≈ $0.50"));
        r.ledger = Some(LedgerActuals::default());
        assert_eq!(
            advise(&r, "shop").unwrap().estimate.measured,
            None,
            "nothing measured yet"
        );
    }

    #[test]
    fn estimate_and_pools() {
        let a = advise(
            &req(three(), &["codex", "claude"], &[("codex", "plus")]),
            "shop",
        )
        .unwrap();
        // engine (hard) → codex on plus (subscription): charged 0; ui (medium) → codex again?
        // no: load spreads, claude sonnet is API-billed.
        let total: u64 = FORECAST_TOKENS.iter().map(|(_, t)| t).sum();
        assert_eq!(a.estimate.tokens, total);
        let charged: f64 = a.routes.iter().map(|r| r.charged_usd).sum();
        assert!((a.estimate.charged_usd - round2(charged)).abs() < 1e-9);
        let plus = a
            .estimate
            .pools
            .iter()
            .find(|p| p.pool == "codex:plus")
            .unwrap();
        assert_eq!(plus.kind, PlanKind::Capped);
        assert_eq!(plus.monthly_usd, Some(20.0));
        assert_eq!(plus.charged_usd, 0.0);
        assert!(
            a.routes
                .iter()
                .filter(|r| r.pool == "codex:plus")
                .all(|r| r.charged_usd == 0.0)
        );
        assert!(
            a.routes
                .iter()
                .filter(|r| r.pool.ends_with(":api"))
                .all(|r| r.charged_usd == r.api_usd)
        );
        assert_eq!(a.estimate.prices_dated, MODELS_DATED);
        // hard on gpt-5.1-codex: 6M × (0.85 × 1.25 + 0.15 × 10) / 1M = 15.38
        assert_eq!(a.routes[0].api_usd, 15.38);
    }

    #[test]
    fn table_and_card_args() {
        let mut pkgs = three();
        pkgs[0].drill = Some("cargo test -p engine passes".into());
        pkgs[0].files = vec!["src/engine.rs".into()];
        let a = advise(&req(pkgs, &["codex", "claude"], &[]), "shop").unwrap();
        assert_eq!(
            a.routing_table_md
                .lines()
                .filter(|l| l.starts_with("| "))
                .count(),
            4
        );
        assert!(
            a.routing_table_md
                .contains("| 1 | engine | hard | codex:gpt-5.1-codex |")
        );
        assert_eq!(a.card_args.len(), 3);
        let c = &a.card_args[0];
        assert_eq!(c.tool, "relay_task_add");
        assert_eq!(c.args["title"], "engine");
        assert_eq!(c.args["assignee"], "codex:shop");
        assert_eq!(c.args["model"], "gpt-5.1-codex");
        assert_eq!(c.args["drill"], "cargo test -p engine passes");
        assert_eq!(c.args["note"], "files: src/engine.rs");
        assert!(a.summary.starts_with("Recommendation: CREW."));
    }

    #[test]
    fn refusals() {
        assert_eq!(
            advise(&req(vec![], &["codex"], &[]), "p"),
            Err(AdviseError::NoPackages)
        );
        let mut p = pkg("x", "");
        p.difficulty = None;
        let e = advise(
            &req(
                vec![p, pkg("y", "trivial"), pkg("z", "hard")],
                &["codex"],
                &[],
            ),
            "p",
        )
        .unwrap_err();
        assert_eq!(e, AdviseError::Difficulty("\"x\", \"y\"".into()));
        assert!(e.to_string().contains("easy, medium or hard"));
        let e = advise(&req(three(), &["codex"], &[("claude", "gold")]), "p").unwrap_err();
        assert!(
            e.to_string().contains("unknown plan 'gold' for claude"),
            "{e}"
        );
        let mut r = req(three(), &["codex"], &[]);
        r.horizon = Some("forever".into());
        assert_eq!(advise(&r, "p"), Err(AdviseError::Horizon("forever".into())));
        assert!(check_plan("--help", "api").is_err());
        assert!(check_plan("claude", "max-20x").is_ok());
    }

    #[test]
    fn unusable_clis_are_named() {
        let mut r = req(three(), &["codex"], &[]);
        if let Some(c) = r.clis.as_mut() {
            c.push(CliInfo {
                agent: "claude".into(),
                version: Some("1.0.0".into()),
                usable: false,
                detail: "1.0.0: older than the verified range".into(),
            });
            c.push(cli("dsh"));
        }
        let a = advise(&r, "p").unwrap();
        assert!(a.routes.iter().all(|r| !r.route.starts_with("claude:")));
        assert!(a.unavailable.iter().any(|u| u.starts_with("claude: 1.0.0")));
        assert!(a.unavailable.iter().any(|u| u.starts_with("dsh: no model")));
    }

    #[test]
    fn models_override() {
        let m = merge_models(&[
            row("codex", "gpt-5.1-codex", 3, 100.0, 100.0),
            row("dsh", "local", 3, 0.0, 0.0),
        ]);
        assert_eq!(m.len(), builtin_models().len() + 1);
        let mut r = req(
            vec![pkg("a", "hard"), pkg("b", "hard")],
            &["codex", "dsh"],
            &[],
        );
        r.models = Some(vec![row("dsh", "local", 3, 0.0, 0.0)]);
        let a = advise(&r, "p").unwrap();
        assert_eq!(a.routes[0].route, "dsh:local");
    }

    #[test]
    fn deterministic() {
        let r = req(
            three(),
            &["codex", "claude", "opencode"],
            &[("claude", "pro")],
        );
        assert_eq!(advise(&r, "p"), advise(&r, "p"));
    }
}
