//! What an MCP client reads beside the tools, shared by `trantor mcp` (stdio) and the hub's
//! `/mcp` (docs/protocol.md §10.7): resources (the board, each card, a project's brief, the
//! lessons), resource templates, subscriptions that notify when a card or board changes (from
//! the hub's own event feed), prompts (the crew playbook, a handoff, a card's contract) and
//! completion of their arguments (card ids, sessions, projects), and the logging level.

use super::{Relay, is_open};
use crate::render;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, CompletionInfo, ContentBlock, GetPromptResult,
    ListResourcesResult, Prompt, PromptArgument, PromptMessage, ReadResourceResult, Reference,
    Resource, ResourceContents, ResourceTemplate, ResourceUpdatedNotificationParam, Role,
};
use rmcp::service::{Peer, RoleServer};
use rmcp::{ErrorData, model::ServerCapabilities};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use trantor_proto::lanes::ProjectRow;
use trantor_proto::{ClientError, HubClient, now_ms};

/// The scheme of every resource this server serves.
pub const SCHEME: &str = "trantor://";

/// The capabilities both transports declare.
pub fn capabilities() -> ServerCapabilities {
    #[allow(deprecated)]
    ServerCapabilities::builder()
        .enable_tools()
        .enable_resources()
        .enable_resources_subscribe()
        .enable_prompts()
        .enable_completions()
        .enable_logging()
        .build()
}

/// A resource of ours, parsed from its URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uri {
    /// `trantor://board/<project>`: a project's cards by status.
    Board(String),
    /// `trantor://card/<id>`: one card with its log, checklist, drill, history and the delivery
    /// state of the messages citing it.
    Card(i64),
    /// `trantor://brief/<project>`: a project's one-paragraph brief.
    Brief(String),
    /// `trantor://lessons` (global) or `trantor://lessons/<agent>` (global plus one CLI's).
    Lessons(Option<String>),
}

impl Uri {
    /// Parse `uri`; `None` for anything that is not one of ours.
    pub fn parse(uri: &str) -> Option<Uri> {
        let rest = uri.strip_prefix(SCHEME)?;
        let (kind, arg) = match rest.split_once('/') {
            Some((k, a)) => (k, Some(decode(a)?).filter(|a| !a.is_empty())),
            None => (rest, None),
        };
        match (kind, arg) {
            ("board", Some(p)) => Some(Uri::Board(p)),
            ("brief", Some(p)) => Some(Uri::Brief(p)),
            ("card", Some(id)) => id.parse().ok().filter(|i| *i > 0).map(Uri::Card),
            ("lessons", agent) => Some(Uri::Lessons(agent)),
            _ => None,
        }
    }

    /// The URI's text.
    pub fn render(&self) -> String {
        match self {
            Uri::Board(p) => format!("{SCHEME}board/{}", encode(p)),
            Uri::Card(id) => format!("{SCHEME}card/{id}"),
            Uri::Brief(p) => format!("{SCHEME}brief/{}", encode(p)),
            Uri::Lessons(None) => format!("{SCHEME}lessons"),
            Uri::Lessons(Some(a)) => format!("{SCHEME}lessons/{}", encode(a)),
        }
    }
}

/// Percent-encode what a URI path segment cannot hold.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' | b'@' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Undo [`encode`]; `None` for a malformed escape, invalid UTF-8 or a `/` inside a segment.
fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'/' => return None,
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// A `prompts/get` request's arguments as strings (a client may send a number for a card id).
pub fn prompt_args(args: Option<&serde_json::Map<String, Value>>) -> HashMap<String, String> {
    args.into_iter()
        .flatten()
        .map(|(k, v)| {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (k.clone(), s)
        })
        .collect()
}

/// A logging level's name as the specification spells it.
#[allow(deprecated)]
pub fn level_name(level: &rmcp::model::LoggingLevel) -> String {
    serde_json::to_value(level)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "info".into())
}

/// The resource templates (RFC 6570).
pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(format!("{SCHEME}board/{{project}}"), "board")
            .with_title("A project's board")
            .with_description("The project's cards grouped by status, newest first.")
            .with_mime_type("text/plain"),
        ResourceTemplate::new(format!("{SCHEME}card/{{id}}"), "card")
            .with_title("A card")
            .with_description(
                "One card: status, assignee, drill, checklist, notes (the log), history, the \
                 messages citing it with their delivery state; as text and as JSON.",
            )
            .with_mime_type("text/plain"),
        ResourceTemplate::new(format!("{SCHEME}brief/{{project}}"), "brief")
            .with_title("A project's brief")
            .with_description("What the project is, why it matters and its goal.")
            .with_mime_type("text/plain"),
        ResourceTemplate::new(format!("{SCHEME}lessons/{{agent}}"), "lessons")
            .with_title("Lessons for one agent CLI")
            .with_description("The global lessons plus those recorded for one agent brand.")
            .with_mime_type("text/plain"),
    ]
}

/// The prompts, with their arguments.
pub fn prompts() -> Vec<Prompt> {
    let arg = |name: &str, desc: &str, required: bool| {
        PromptArgument::new(name)
            .with_description(desc)
            .with_required(required)
    };
    vec![
        Prompt::new(
            "crew_playbook",
            Some(
                "How to work as a session of a trantor crew: the rules a seat runs under, the \
                 first moves, and the lessons recorded for this agent.",
            ),
            Some(vec![
                arg("session", "the bus session (default: this one)", false),
                arg("project", "the project (default: this one's)", false),
            ]),
        ),
        Prompt::new(
            "handoff",
            Some("Hand your work (optionally one card) to another session, with evidence."),
            Some(vec![
                arg("to", "the session taking over (e.g. codex:web)", true),
                arg("card", "the card id being handed over", false),
            ]),
        ),
        Prompt::new(
            "card_contract",
            Some(
                "A card's contract: what to build, the drill that proves it, the checklist, and \
                 how to move the card — with the card itself embedded.",
            ),
            Some(vec![
                arg("card", "the card id", true),
                arg(
                    "base",
                    "the integration head to start from (a sha or ref)",
                    false,
                ),
            ]),
        ),
    ]
}

fn not_found(uri: &str) -> ErrorData {
    ErrorData::resource_not_found(
        format!("no such resource: {uri}"),
        Some(json!({"uri": uri})),
    )
}

fn text(uri: &str, mime: &str, body: String) -> ResourceContents {
    ResourceContents::TextResourceContents {
        uri: uri.to_string(),
        mime_type: Some(mime.to_string()),
        text: body,
        meta: None,
    }
}

/// A prompt argument, trimmed; none when absent or blank.
fn prompt_arg(args: &HashMap<String, String>, k: &str) -> Option<String> {
    args.get(k)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn card_id_arg(args: &HashMap<String, String>, name: &str) -> Result<i64, ErrorData> {
    let raw = args.get(name).map(|s| s.trim().trim_start_matches('#'));
    match raw {
        Some(s) if !s.is_empty() => s.parse::<i64>().ok().filter(|i| *i > 0).ok_or_else(|| {
            ErrorData::invalid_params(format!("`{name}` must be a card id, not {s:?}"), None)
        }),
        _ => Err(ErrorData::invalid_params(
            format!("`{name}` is required"),
            None,
        )),
    }
}

impl Relay {
    /// A hub failure as a JSON-RPC error a client shows (the tool error text inside).
    fn rpc_error(&self, e: ClientError) -> ErrorData {
        ErrorData::internal_error(self.hub_error(e), None)
    }

    async fn projects(&self) -> Result<Vec<ProjectRow>, ErrorData> {
        let reply = self.hub.projects().await.map_err(|e| self.rpc_error(e))?;
        Ok(reply.projects)
    }

    /// `resources/list`: every project's board and brief, this session's open cards and the
    /// global lessons (every other card is reached through the `card` template).
    pub async fn resource_list(&self) -> Result<ListResourcesResult, ErrorData> {
        let mut out = Vec::new();
        for p in self.projects().await? {
            let name = p.project.as_str();
            if name.starts_with('(') {
                continue;
            }
            out.push(
                Resource::new(Uri::Board(name.into()).render(), format!("board {name}"))
                    .with_title(format!("The {name} board"))
                    .with_mime_type("text/plain"),
            );
            if !p.brief.is_empty() {
                out.push(
                    Resource::new(Uri::Brief(name.into()).render(), format!("brief {name}"))
                        .with_title(format!("The {name} brief"))
                        .with_mime_type("text/plain"),
                );
            }
        }
        if !self.id.project.is_empty()
            && let Ok(cards) = self.board_cards(&self.id.project, true).await
        {
            for c in cards
                .iter()
                .filter(|c| is_open(&c.status) && self.is_mine(c))
                .take(50)
            {
                out.push(
                    Resource::new(Uri::Card(c.id).render(), format!("card #{}", c.id))
                        .with_title(format!("#{} [{}] {}", c.id, c.status, c.title))
                        .with_mime_type("text/plain"),
                );
            }
        }
        out.push(
            Resource::new(Uri::Lessons(None).render(), "lessons")
                .with_title("Lessons (global)")
                .with_mime_type("text/plain"),
        );
        Ok(ListResourcesResult::with_all_items(out))
    }

    /// `resources/read`.
    pub async fn resource_read(&self, uri: &str) -> Result<ReadResourceResult, ErrorData> {
        let parsed = Uri::parse(uri).ok_or_else(|| not_found(uri))?;
        let contents = match parsed {
            Uri::Board(project) => {
                let cards = self
                    .board_cards(&project, true)
                    .await
                    .map_err(|e| ErrorData::internal_error(e, None))?;
                vec![text(uri, "text/plain", render::board(&project, &cards))]
            }
            Uri::Brief(project) => {
                let all = self.projects().await?;
                let row = all
                    .iter()
                    .find(|p| p.project == project)
                    .ok_or_else(|| not_found(uri))?;
                let brief = row.brief.trim();
                let body = if brief.is_empty() {
                    format!("{project} has no brief yet (set one with relay_project_brief)")
                } else {
                    format!("{project}: {brief}")
                };
                vec![text(uri, "text/plain", body)]
            }
            Uri::Lessons(agent) => {
                let reply = self
                    .hub
                    .lessons(agent.as_deref().unwrap_or(""))
                    .await
                    .map_err(|e| self.rpc_error(e))?;
                let body = if reply.lessons.is_empty() {
                    "no lessons recorded yet (relay_lesson records one)".to_string()
                } else {
                    reply
                        .lessons
                        .iter()
                        .map(|l| format!("- [{}] {}", l.scope, l.text))
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                vec![text(uri, "text/plain", body)]
            }
            Uri::Card(id) => self.card_contents(uri, id).await?,
        };
        Ok(ReadResourceResult::new(contents))
    }

    /// A card as text (what `relay_board card=` shows, plus delivery states) and as JSON.
    async fn card_contents(&self, uri: &str, id: i64) -> Result<Vec<ResourceContents>, ErrorData> {
        let (card, reply) = match self.card(id).await {
            Ok(c) => c,
            Err(e) if e.starts_with("there is no card") => return Err(not_found(uri)),
            Err(e) => return Err(ErrorData::internal_error(e, None)),
        };
        let now = now_ms();
        let mut body = render::card_detail(&card, now);
        // The delivery state of the newest direct messages citing the card (its contracts).
        let mut deliveries = Vec::new();
        let direct = reply
            .messages
            .iter()
            .rev()
            .filter(|m| m.to != trantor_proto::BROADCAST)
            .take(5);
        for m in direct {
            let state = match self.hub.delivery(m.id).await {
                Ok(r) => r
                    .current()
                    .map(|s| s.state.to_string())
                    .unwrap_or_else(|| "unknown".into()),
                Err(_) => "unknown".into(),
            };
            deliveries.push(json!({"message": m.id, "from": m.from, "to": m.to, "state": state}));
        }
        if !deliveries.is_empty() {
            body.push_str("\ndelivery of the messages citing it (newest first):");
            for d in &deliveries {
                body.push_str(&format!(
                    "\n  #{} {} -> {}: {}",
                    d["message"],
                    d["from"].as_str().unwrap_or(""),
                    d["to"].as_str().unwrap_or(""),
                    d["state"].as_str().unwrap_or("")
                ));
            }
        }
        let doc = json!({
            "task": reply.task,
            "events": reply.events,
            "cost": reply.cost,
            "deliveries": deliveries,
        });
        Ok(vec![
            text(uri, "text/plain", body),
            text(uri, "application/json", doc.to_string()),
        ])
    }

    /// `prompts/get`.
    pub async fn prompt_get(
        &self,
        name: &str,
        args: &HashMap<String, String>,
    ) -> Result<GetPromptResult, ErrorData> {
        match name {
            "crew_playbook" => self.playbook_prompt(args).await,
            "handoff" => self.handoff_prompt(args).await,
            "card_contract" => self.contract_prompt(args).await,
            other => Err(ErrorData::invalid_params(
                format!("no such prompt: {other} (prompts/list names them)"),
                None,
            )),
        }
    }

    /// The `crew_playbook` prompt: the seat rules and kickoff for a session, with the brand's
    /// lessons.
    async fn playbook_prompt(
        &self,
        args: &HashMap<String, String>,
    ) -> Result<GetPromptResult, ErrorData> {
        let session = prompt_arg(args, "session").unwrap_or_else(|| self.id.session.clone());
        let project = prompt_arg(args, "project").unwrap_or_else(|| self.id.project.clone());
        if session.is_empty() || project.is_empty() {
            return Err(ErrorData::invalid_params(
                "name the `session` and `project` (this connection names none)",
                None,
            ));
        }
        let brand = session.split(':').next().unwrap_or("").to_string();
        let mut text = format!(
            "{}\n\n{}",
            trantor_runner::playbook::default_rules(&session, &project, "(your worktree)"),
            trantor_runner::playbook::default_kickoff(&session, &project)
        );
        if let Ok(l) = self.hub.lessons(&brand).await
            && !l.lessons.is_empty()
        {
            text.push_str("\n\nLessons learned (avoid repeating these failures):");
            for lesson in l.lessons.iter().rev().take(15) {
                text.push_str(&format!("\n- [{}] {}", lesson.scope, lesson.text));
            }
        }
        Ok(
            GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
                .with_description(format!("The crew playbook for {session} in {project}")),
        )
    }

    /// The `handoff` prompt: how to hand the work (and a card) over to `to`.
    async fn handoff_prompt(
        &self,
        args: &HashMap<String, String>,
    ) -> Result<GetPromptResult, ErrorData> {
        let to = prompt_arg(args, "to").ok_or_else(|| {
            ErrorData::invalid_params("`to` (the session taking over) is required", None)
        })?;
        let card = match prompt_arg(args, "card") {
            Some(_) => Some(card_id_arg(args, "card")?),
            None => None,
        };
        let me = if self.id.session.is_empty() {
            "this session".to_string()
        } else {
            self.id.session.clone()
        };
        let about = card.map(|c| format!(" card #{c}")).unwrap_or_default();
        let mut text = format!(
            "Hand your work{about} over to {to}, so it can continue without asking you.\n\
             1. Commit what is done; name the sha as `verified at <sha>` for anything you checked.\n\
             2. Write the handoff with relay_handoff: what is done, what is left, the files, the \
                commands that prove it (the drill) and anything that surprised you.\n\
             3. relay_send to {to} a message under 280 characters citing{about} and the handoff.\n"
        );
        if let Some(c) = card {
            text.push_str(&format!(
                "4. Reassign #{c} to {to} with relay_task_move (a note saying it was handed over by {me}).\n"
            ));
        }
        text.push_str("Then end your turn.");
        let mut messages = vec![PromptMessage::new_text(Role::User, text)];
        if let Some(c) = card {
            messages.push(self.card_message(c).await?);
        }
        Ok(GetPromptResult::new(messages).with_description(format!("Hand over to {to}")))
    }

    /// The `card_contract` prompt: a card's contract and how to work it.
    async fn contract_prompt(
        &self,
        args: &HashMap<String, String>,
    ) -> Result<GetPromptResult, ErrorData> {
        let id = card_id_arg(args, "card")?;
        let (card, _) = self.card(id).await.map_err(|e| {
            if e.starts_with("there is no card") {
                ErrorData::invalid_params(e, None)
            } else {
                ErrorData::internal_error(e, None)
            }
        })?;
        let mut text = format!("#{} {}\nproject: {}", card.id, card.title, card.project);
        if let Some(base) = prompt_arg(args, "base") {
            text.push_str(&format!("\nbase: {base}"));
        }
        if !card.summary.is_empty() {
            text.push_str(&format!("\nwhat: {}", card.summary));
        }
        if card.drill.trim().is_empty() {
            text.push_str(
                "\ndrill: (none yet — propose the command that proves the work before moving to testing)",
            );
        } else {
            text.push_str(&format!("\ndrill: {}", card.drill));
        }
        for (i, item) in card.checklist.iter().enumerate() {
            let mark = if item.done { "x" } else { " " };
            text.push_str(&format!("\n  {i}. [{mark}] {}", item.text));
        }
        if !card.deps.is_empty() {
            let deps: Vec<String> = card.deps.iter().map(|d| format!("#{d}")).collect();
            text.push_str(&format!("\ndepends on: {}", deps.join(", ")));
        }
        text.push_str(&format!(
            "\n\nMove #{id} to doing with relay_task_move when you start, tick the \
             checklist with relay_task_check as items land, run the drill, then move it \
             to testing with a note naming what you ran and `verified at <sha>` — and \
             stop: the orchestrator closes it. If the contract omits a fact you cannot \
             proceed without, relay_ask on #{id}; never invent the value."
        ));
        let messages = vec![
            PromptMessage::new_text(Role::User, text),
            self.card_message(id).await?,
        ];
        Ok(GetPromptResult::new(messages).with_description(format!("The contract of card #{id}")))
    }

    /// The card as an embedded resource of a prompt.
    async fn card_message(&self, id: i64) -> Result<PromptMessage, ErrorData> {
        let uri = Uri::Card(id).render();
        let mut contents = self.card_contents(&uri, id).await?;
        let first = contents.swap_remove(0);
        Ok(PromptMessage::new(
            Role::User,
            ContentBlock::resource(first),
        ))
    }

    /// `completion/complete`: card ids, sessions and projects for the prompts' and templates'
    /// arguments; an argument of ours that cannot be completed, or a reference that is not
    /// ours, gets no values.
    pub async fn complete_arg(
        &self,
        req: &CompleteRequestParams,
    ) -> Result<CompleteResult, ErrorData> {
        let what = match (&req.r#ref, req.argument.name.as_str()) {
            (Reference::Prompt(_), "card") => Some("card"),
            (Reference::Prompt(_), "to" | "session") => Some("session"),
            (Reference::Prompt(_), "project") => Some("project"),
            (Reference::Resource(r), "id") if r.uri.starts_with(&format!("{SCHEME}card/")) => {
                Some("card")
            }
            (Reference::Resource(r), "project") if r.uri.starts_with(SCHEME) => Some("project"),
            (Reference::Resource(r), "agent") if r.uri.starts_with(SCHEME) => Some("agent"),
            _ => None,
        };
        let prefix = req.argument.value.trim().trim_start_matches('#');
        let mut values: BTreeSet<String> = BTreeSet::new();
        match what {
            Some("card") => {
                let project = req
                    .context
                    .as_ref()
                    .and_then(|c| c.get_argument("project").cloned())
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| self.id.project.clone());
                let cards = if project.is_empty() {
                    self.hub.tasks(None).await.map_err(|e| self.rpc_error(e))?
                } else {
                    self.board_cards(&project, true)
                        .await
                        .map_err(|e| ErrorData::internal_error(e, None))?
                };
                let mut open: Vec<_> = cards.iter().filter(|c| is_open(&c.status)).collect();
                open.sort_by_key(|c| std::cmp::Reverse(c.id));
                values.extend(
                    open.iter()
                        .map(|c| c.id.to_string())
                        .filter(|id| id.starts_with(prefix)),
                );
            }
            Some("session") | Some("agent") => {
                let peers = self.hub.peers().await.map_err(|e| self.rpc_error(e))?;
                for p in &peers.peers {
                    let v = if what == Some("agent") {
                        p.session.split(':').next().unwrap_or("").to_string()
                    } else {
                        p.session.clone()
                    };
                    if !v.is_empty() && v.starts_with(prefix) {
                        values.insert(v);
                    }
                }
            }
            Some("project") => {
                for p in self.projects().await? {
                    if !p.project.starts_with('(') && p.project.starts_with(prefix) {
                        values.insert(p.project);
                    }
                }
            }
            _ => {}
        }
        let total = values.len();
        let shown: Vec<String> = values
            .into_iter()
            .take(CompletionInfo::MAX_VALUES)
            .collect();
        let info = CompletionInfo::with_pagination(
            shown,
            u32::try_from(total).ok(),
            total > CompletionInfo::MAX_VALUES,
        )
        .map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(CompleteResult::new(info))
    }
}

/// The URIs an event of the hub's feed changes.
fn touched(ev: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let project = ev["project"].as_str().unwrap_or("");
    if let Some(id) = ev["taskId"].as_i64() {
        out.push(Uri::Card(id).render());
        if !project.is_empty() {
            out.push(Uri::Board(project.to_string()).render());
        }
    }
    let kind = ev["type"].as_str().unwrap_or("");
    if kind.starts_with("lesson") {
        // A global lesson is in every agent's list; a scoped one in its agent's.
        out.push(Uri::Lessons(None).render());
        match ev["scope"]
            .as_str()
            .filter(|s| !s.is_empty() && *s != "global")
        {
            Some(agent) => out.push(Uri::Lessons(Some(agent.to_string())).render()),
            None => out.push(format!("{SCHEME}lessons/*")),
        }
    }
    out
}

/// The `event: ev` frames complete in `buf` (taken out of it), as JSON; a frame that never ends
/// is dropped once the buffer passes 1 MiB (the hub's frames are small).
fn take_events(buf: &mut String) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(end) = buf.find("\n\n") {
        let frame: String = buf.drain(..end + 2).collect();
        let mut event = "";
        let mut data = String::new();
        for line in frame.lines() {
            if let Some(e) = line.strip_prefix("event:") {
                event = e.trim();
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push_str(d.trim_start());
            }
        }
        if event == "ev"
            && let Ok(v) = serde_json::from_str::<Value>(&data)
        {
            out.push(v);
        }
    }
    if buf.len() > 1 << 20 {
        buf.clear();
    }
    out
}

/// Logging levels by rank (RFC 5424 order, `debug` lowest).
const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

fn rank(level: &str) -> usize {
    LEVELS.iter().position(|l| *l == level).unwrap_or(0)
}

/// One MCP session's resource subscriptions and logging level, and the task following the
/// hub's event feed for them (ended when the last handle goes, or when the client does).
#[derive(Clone, Default)]
pub struct Subscriptions {
    inner: Arc<SubsInner>,
}

#[derive(Default)]
struct SubsInner {
    uris: Arc<Mutex<BTreeSet<String>>>,
    /// The lowest level of `notifications/message` the client wants (`None`: none asked).
    level: Arc<Mutex<Option<String>>>,
    follower: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for SubsInner {
    fn drop(&mut self) {
        let slot = self
            .follower
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(h) = slot.take() {
            h.abort();
        }
    }
}

/// Most URIs one MCP session may subscribe to.
pub const MAX_SUBSCRIPTIONS: usize = 256;

/// Where a subscription follower reads the hub's events from.
#[derive(Clone)]
pub enum Feed {
    /// The hub's `/stream?events=1`, through this client (the stdio server).
    Stream(HubClient),
    /// The hub's in-process event feed (the hub's own `/mcp`: no call back into itself, and
    /// no read on `*` needed, since each subscription's read was checked when it was made).
    Local(tokio::sync::broadcast::Sender<Arc<trantor_proto::Event>>),
}

impl Subscriptions {
    /// `logging/setLevel`.
    pub fn set_level(&self, level: &str) {
        *self
            .inner
            .level
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(level.to_string());
    }

    /// `resources/subscribe`: refused for a URI that is not ours; the first one starts the
    /// follower of the hub's event feed, which notifies `peer`.
    pub fn subscribe(
        &self,
        uri: &str,
        feed: Feed,
        peer: Peer<RoleServer>,
    ) -> Result<(), ErrorData> {
        let parsed = Uri::parse(uri).ok_or_else(|| not_found(uri))?;
        if matches!(parsed, Uri::Brief(_)) {
            return Err(ErrorData::invalid_params(
                "a brief cannot be subscribed to: the hub records no event when a brief is \
                 set, so nothing would ever notify it (read it again instead)",
                None,
            ));
        }
        let canonical = parsed.render();
        {
            let mut uris = self
                .inner
                .uris
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if uris.len() >= MAX_SUBSCRIPTIONS && !uris.contains(&canonical) {
                return Err(ErrorData::invalid_params(
                    format!("at most {MAX_SUBSCRIPTIONS} subscriptions per session"),
                    None,
                ));
            }
            uris.insert(canonical);
        }
        let mut follower = self
            .inner
            .follower
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if follower.as_ref().is_none_or(|h| h.is_finished()) {
            let uris = self.inner.uris.clone();
            *follower = Some(match feed {
                Feed::Stream(hub) => {
                    tokio::spawn(follow(hub, peer, uris, self.inner.level.clone()))
                }
                Feed::Local(tx) => tokio::spawn(follow_local(tx.subscribe(), peer, uris)),
            });
        }
        Ok(())
    }

    /// `resources/unsubscribe` (an URI never subscribed is no error).
    pub fn unsubscribe(&self, uri: &str) {
        let key = Uri::parse(uri).map_or_else(|| uri.to_string(), |u| u.render());
        self.inner
            .uris
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&key);
    }
}

#[allow(deprecated)]
async fn log(peer: &Peer<RoleServer>, want: &Mutex<Option<String>>, level: &str, text: String) {
    let wanted = want
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    if let Some(min) = wanted
        && rank(level) >= rank(&min)
    {
        #[allow(deprecated)]
        let lvl: rmcp::model::LoggingLevel = match serde_json::from_value(json!(level)) {
            Ok(l) => l,
            Err(_) => return,
        };
        #[allow(deprecated)]
        let mut p = rmcp::model::LoggingMessageNotificationParam::new(lvl, json!(text));
        p.logger = Some("trantor".into());
        let _ = peer.notify_logging_message(p).await;
    }
}

/// Tell `peer` of every subscribed URI `ev` changes; false once the client is gone.
async fn notify_hits(peer: &Peer<RoleServer>, uris: &Mutex<BTreeSet<String>>, ev: &Value) -> bool {
    let hits: Vec<String> = {
        let subs = uris
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let touched = touched(ev);
        // `lessons/*` stands for every agent's list (a global lesson is in each of them).
        let every_agent = touched.iter().any(|u| u.ends_with("lessons/*"));
        subs.iter()
            .filter(|u| {
                touched.contains(u) || (every_agent && u.starts_with(&format!("{SCHEME}lessons/")))
            })
            .cloned()
            .collect()
    };
    for uri in hits {
        let sent = peer
            .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
            .await;
        if sent.is_err() {
            return false;
        }
    }
    true
}

/// Follow the hub's in-process feed until the client or the hub goes away. A follower that
/// fell behind notifies every subscribed URI once (something it missed may have changed them).
async fn follow_local(
    mut rx: tokio::sync::broadcast::Receiver<Arc<trantor_proto::Event>>,
    peer: Peer<RoleServer>,
    uris: Arc<Mutex<BTreeSet<String>>>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match rx.recv().await {
            Ok(ev) => {
                let v = serde_json::to_value(&*ev).unwrap_or_default();
                if !notify_hits(&peer, &uris, &v).await {
                    return;
                }
            }
            Err(RecvError::Lagged(_)) => {
                let all: Vec<String> = uris
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .iter()
                    .cloned()
                    .collect();
                for uri in all {
                    if peer
                        .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
            Err(RecvError::Closed) => return,
        }
        if peer.is_transport_closed() {
            return;
        }
    }
}

/// Follow the hub's `/stream?events=1` and tell `peer` of every subscribed URI an event
/// changes, until the client goes away. A lost stream is reopened with back-off (said once as
/// a `warning` log message).
async fn follow(
    hub: HubClient,
    peer: Peer<RoleServer>,
    uris: Arc<Mutex<BTreeSet<String>>>,
    level: Arc<Mutex<Option<String>>>,
) {
    let mut attempt: u32 = 0;
    loop {
        let resp = hub
            .open_stream("/stream", &[("events", "1".to_string())])
            .await;
        let mut resp = match resp {
            Ok(r) => {
                if attempt > 0 {
                    log(
                        &peer,
                        &level,
                        "info",
                        "hub event feed back; subscriptions resumed".into(),
                    )
                    .await;
                }
                attempt = 0;
                r
            }
            Err(e) => {
                if attempt == 0 {
                    log(
                        &peer,
                        &level,
                        "warning",
                        format!("cannot follow the hub's event feed ({e}); retrying"),
                    )
                    .await;
                }
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(250u64 << attempt.min(5))).await;
                continue;
            }
        };
        let mut buf = String::new();
        while let Ok(Some(bytes)) = resp.chunk().await {
            buf.push_str(&String::from_utf8_lossy(&bytes));
            for ev in take_events(&mut buf) {
                if !notify_hits(&peer, &uris, &ev).await {
                    return;
                }
            }
        }
        if peer.is_transport_closed() {
            return;
        }
        attempt += 1;
        tokio::time::sleep(Duration::from_millis(250u64 << attempt.min(5))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip_and_foreign_ones_are_refused() {
        for u in [
            Uri::Board("web".into()),
            Uri::Board("my proj".into()),
            Uri::Card(42),
            Uri::Brief("web".into()),
            Uri::Lessons(None),
            Uri::Lessons(Some("claude".into())),
        ] {
            assert_eq!(Uri::parse(&u.render()), Some(u.clone()), "{}", u.render());
        }
        for bad in [
            "test://static-text",
            "trantor://card/abc",
            "trantor://card/-1",
            "trantor://board/",
            "trantor://board/a/b",
            "trantor://board/%zz",
            "trantor://nothing/x",
        ] {
            assert_eq!(Uri::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_card_event_touches_its_card_and_board() {
        let ev = json!({"type": "lesson", "project": "web", "scope": "codex"});
        assert_eq!(
            touched(&ev),
            vec!["trantor://lessons", "trantor://lessons/codex"]
        );
        let ev = json!({"type": "moved", "project": "web", "taskId": 7});
        assert_eq!(
            touched(&ev),
            vec!["trantor://card/7", "trantor://board/web"]
        );
        assert!(rank("error") > rank("info"));
        let mut buf = String::from(
            ": connected\n\nevent: ev\ndata: {\"type\":\"moved\",\"taskId\":7}\n\ndata: {}\n\nevent: ev\ndata: {",
        );
        let evs = take_events(&mut buf);
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0]["taskId"], 7);
        assert_eq!(buf, "event: ev\ndata: {");
    }
}
