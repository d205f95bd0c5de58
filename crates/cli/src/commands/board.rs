//! `trantor board` and `trantor card add|move|note|check`.

use super::{Common, HubResult, print_json, table, usage};
use std::process::ExitCode;
use trantor_mcp::args::{DIFFICULTIES, movable_status};
use trantor_mcp::render;
use trantor_proto::identity::new_op_id;
use trantor_proto::{
    Card, CardStatus, ChecklistInput, ChecklistToggleRequest, ClientError, HubClient,
    TaskCreateRequest, TaskReply, TaskUpdateRequest, now_ms,
};

pub(crate) const BOARD_HELP: &str = concat!(
    "\
The table lists live work first (doing, testing, failed, blocked), then todo, then the most
recent done cards. NOTES is the card's log size, CHECK its checklist progress, DRILL whether it
has the drill line the hub requires before done.

Examples:
  trantor board                    this project's board
  trantor board --project web      another project's board
  trantor board --all              include every done and stale card
  trantor board --card 12          card #12 in full: checklist, drill, notes, history
  trantor board --json             the cards as JSON

",
    exit_codes!()
);

const CARD_ADD_HELP: &str = concat!(
    "\
Examples:
  trantor card add \"Fix the flaky login test\" --assignee claude:web --drill \"cargo test login passes 20x\"
  trantor card add \"Ship v2\" --check \"changelog\" --check \"tag pushed\" --deps 3,4 --difficulty hard

Prints the new card id (`--json`: the card).
",
    exit_codes!()
);

const CARD_MOVE_HELP: &str = concat!(
    "\
Moves go todo -> doing -> testing -> done (or failed / blocked). A move to testing or done should
carry --note with the evidence. The hub refuses some moves (no drill line before done, a card
assigned to someone else); its reason is printed and the exit status is 1.

Examples:
  trantor card move 12 doing
  trantor card move 12 testing --note \"cargo test: 48 passed\"
  trantor card move 12 done --drill \"open /login, sign in, see the dashboard\"

",
    exit_codes!()
);

const CARD_NOTE_HELP: &str = concat!(
    "\
Example:
  trantor card note 12 \"blocked on the staging DB password; asked in #ops\"

",
    exit_codes!()
);

const CARD_CHECK_HELP: &str = concat!(
    "\
Items are numbered from 0 in the order they were given (see `trantor board --card N`).

Examples:
  trantor card check 12 0           tick item 0
  trantor card check 12 0 --undo    untick it

",
    exit_codes!()
);

/// `trantor board` options.
#[derive(Debug, clap::Args)]
pub struct BoardArgs {
    /// Show one card in full instead of the board.
    #[arg(long, value_name = "ID")]
    pub card: Option<i64>,
    /// Include every done and stale card (by default only the latest few).
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub common: Common,
}

/// `trantor card …`.
#[derive(Debug, clap::Subcommand)]
pub enum CardCommand {
    /// Add a card (assigned to you unless --assignee).
    #[command(after_long_help = CARD_ADD_HELP)]
    Add(CardAddArgs),
    /// Move a card to a new status.
    #[command(after_long_help = CARD_MOVE_HELP)]
    Move(CardMoveArgs),
    /// Append a note to a card's log.
    #[command(after_long_help = CARD_NOTE_HELP)]
    Note(CardNoteArgs),
    /// Tick (or untick) one checklist item.
    #[command(after_long_help = CARD_CHECK_HELP)]
    Check(CardCheckArgs),
}

/// `trantor card add` options.
#[derive(Debug, clap::Args)]
pub struct CardAddArgs {
    /// Card title.
    #[arg(required = true, num_args = 1..)]
    pub title: Vec<String>,
    /// Assignee session [default: you].
    #[arg(long, short = 'a')]
    pub assignee: Option<String>,
    /// Initial status.
    #[arg(long, default_value = "todo")]
    pub status: String,
    /// easy, medium or hard.
    #[arg(long)]
    pub difficulty: Option<String>,
    /// The drill line: what a person does on the result and must see.
    #[arg(long)]
    pub drill: Option<String>,
    /// First note on the card's log.
    #[arg(long)]
    pub note: Option<String>,
    /// An acceptance item (repeat for several).
    #[arg(long = "check", value_name = "ITEM")]
    pub checklist: Vec<String>,
    /// Card ids this one depends on, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub deps: Vec<i64>,
    /// Phase or milestone label.
    #[arg(long)]
    pub phase: Option<String>,
    /// Model hint shown on the card.
    #[arg(long)]
    pub model: Option<String>,
    /// Also send the assignee the contract for the card (a direct message that wakes its seat).
    #[arg(long)]
    pub contract: bool,
    /// With --contract: stamp `base: <sha>` on it (default: the integration head here).
    #[arg(long, value_name = "REV", num_args = 0..=1, default_missing_value = "", requires = "contract")]
    pub base: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

/// `trantor card move` options.
#[derive(Debug, clap::Args)]
pub struct CardMoveArgs {
    /// Card id.
    pub id: i64,
    /// New status: todo, doing, testing, failed, done or blocked.
    pub status: String,
    /// Note for the card's log (the evidence, on testing and done).
    #[arg(long, short = 'n')]
    pub note: Option<String>,
    /// Set the drill line in the same call.
    #[arg(long)]
    pub drill: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

/// `trantor card note` options.
#[derive(Debug, clap::Args)]
pub struct CardNoteArgs {
    /// Card id.
    pub id: i64,
    /// Note text (several words are joined).
    #[arg(required = true, num_args = 1..)]
    pub text: Vec<String>,
    #[command(flatten)]
    pub common: Common,
}

/// `trantor card check` options.
#[derive(Debug, clap::Args)]
pub struct CardCheckArgs {
    /// Card id.
    pub id: i64,
    /// Checklist item index, from 0.
    pub index: i64,
    /// Untick instead of tick.
    #[arg(long)]
    pub undo: bool,
    #[command(flatten)]
    pub common: Common,
}

fn card_not_found(hub: &HubClient, id: i64, e: ClientError) -> anyhow::Error {
    match e {
        ClientError::Http { status: 404, .. } => super::VerbError::Hub {
            message: format!("there is no card #{id}"),
            unreachable: false,
        }
        .into(),
        e => super::hub_failure(hub.base(), e),
    }
}

/// A write to card `id` at `path` (with an `_op`, so a retry is not a second write); a 404 says
/// there is no such card.
async fn card_write<B: serde::Serialize>(
    hub: &HubClient,
    path: &str,
    id: i64,
    req: &B,
) -> anyhow::Result<TaskReply> {
    hub.post_with_op(path, req, &new_op_id())
        .await
        .map_err(|e| card_not_found(hub, id, e))
}

pub(crate) async fn board(a: BoardArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let now = now_ms();
    if let Some(card_id) = a.card {
        let reply = hub
            .card(card_id)
            .await
            .map_err(|e| card_not_found(&hub, card_id, e))?;
        if a.common.json {
            print_json(&reply)?;
            return Ok(ExitCode::SUCCESS);
        }
        let Some(card) = reply.task.as_ref() else {
            return Err(card_not_found(
                &hub,
                card_id,
                ClientError::Http {
                    path: "/card".into(),
                    status: 404,
                    body: Default::default(),
                },
            ));
        };
        say!("{}", render::card_detail(card, now));
        if reply.cost.turns > 0 {
            let c = &reply.cost;
            say!(
                "cost: {} over {} turn(s) · {} in ({} cache read) · {} out{}",
                super::cost::dollars(c),
                c.turns,
                super::cost::tokens(c.tokens_in),
                super::cost::tokens(c.cache_read),
                super::cost::tokens(c.tokens_out),
                if c.unknown > 0 {
                    format!(" · {} turn(s) unknown", c.unknown)
                } else {
                    String::new()
                }
            );
        }
        if !reply.messages.is_empty() {
            say!("messages citing #{card_id}:");
            for m in reply.messages.iter().rev().take(10).rev() {
                say!("  {}", render::message_line(m, now));
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let cards = hub.tasks(Some(&id.project)).await.hub(&hub)?;
    // A hub without `GET /phase` (the original) has no goals to show.
    let phases: serde_json::Value =
        match hub.get("/phase", &[("project", id.project.clone())]).await {
            Ok(v) => v,
            Err(ClientError::Http { status: 404, .. }) => serde_json::json!({ "phases": [] }),
            Err(e) => return Err(super::hub_failure(hub.base(), e)),
        };
    let goals: Vec<(String, String)> = phases["phases"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| Some((p["phase"].as_str()?.into(), p["goal"].as_str()?.into())))
                .collect()
        })
        .unwrap_or_default();
    if a.common.json {
        print_json(&serde_json::json!({
            "project": id.project,
            "tasks": cards,
            "phases": phases["phases"],
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    // What each card cost, from the ledger (a hub without it — the original — has none).
    let costs: std::collections::HashMap<i64, trantor_proto::CostSummary> = match hub
        .cost(&[("project", id.project.clone()), ("by", "card".into())])
        .await
    {
        Ok(r) => r
            .groups
            .into_iter()
            .filter_map(|g| Some((g.key.parse().ok()?, g.cost)))
            .collect(),
        Err(_) => Default::default(),
    };
    say!(
        "{}",
        board_table_with_cost(&id.project, &cards, a.all, now, &costs)
    );
    if !goals.is_empty() {
        say!("{}", phase_goals(&goals, &cards));
    }
    Ok(ExitCode::SUCCESS)
}

/// The project's phase goals, each with how many of its cards are done.
fn phase_goals(goals: &[(String, String)], cards: &[Card]) -> String {
    let mut out = String::from("phase goals:");
    for (phase, goal) in goals {
        let of: Vec<&Card> = cards.iter().filter(|c| c.phase == *phase).collect();
        let done = of.iter().filter(|c| c.status == CardStatus::Done).count();
        out.push_str(&format!(
            "\n  {phase}: {goal} ({done}/{} cards done)",
            of.len()
        ));
    }
    out
}

/// The board as a table, in reading order (live work, queue, finished).
pub(crate) fn board_table(project: &str, cards: &[Card], all: bool, now: i64) -> String {
    board_table_with_cost(project, cards, all, now, &Default::default())
}

/// [`board_table`] with a COST column when any shown card has recorded turns.
pub(crate) fn board_table_with_cost(
    project: &str,
    cards: &[Card],
    all: bool,
    now: i64,
    costs: &std::collections::HashMap<i64, trantor_proto::CostSummary>,
) -> String {
    if cards.is_empty() {
        return format!(
            "{project}: the board is empty (add a card: trantor card add \"title\" --assignee <session>)"
        );
    }
    let mut rows = Vec::new();
    let mut hidden = 0;
    for status in render::BOARD_ORDER {
        let mut group: Vec<&Card> = cards.iter().filter(|c| c.status == status).collect();
        group.sort_by_key(|c| std::cmp::Reverse((c.updated.max(c.ts), c.id)));
        let cap = if !all && matches!(status, CardStatus::Done | CardStatus::Stale) {
            render::DONE_SHOWN
        } else {
            usize::MAX
        };
        hidden += group.len().saturating_sub(cap);
        for c in group.into_iter().take(cap) {
            rows.push(card_row(c, now));
        }
    }
    for c in cards
        .iter()
        .filter(|c| !render::BOARD_ORDER.contains(&c.status))
    {
        rows.push(card_row(c, now));
    }
    let counts: Vec<String> = render::BOARD_ORDER
        .iter()
        .filter_map(|s| {
            let n = cards.iter().filter(|c| c.status == *s).count();
            (n > 0).then(|| format!("{n} {s}"))
        })
        .collect();
    let mut out = format!("{project} board: {}\n", counts.join(", "));
    let mut headers = vec![
        "ID", "STATUS", "ASSIGNEE", "AGE", "NOTES", "CHECK", "DRILL", "TITLE",
    ];
    let shown_cost = rows.iter().any(|r| {
        r[0].trim_start_matches('#')
            .parse::<i64>()
            .is_ok_and(|id| costs.get(&id).is_some_and(|c| c.turns > 0))
    });
    if shown_cost {
        headers.insert(7, "COST");
        for r in rows.iter_mut() {
            let c = r[0]
                .trim_start_matches('#')
                .parse::<i64>()
                .ok()
                .and_then(|id| costs.get(&id))
                .filter(|c| c.turns > 0)
                .map(super::cost::dollars)
                .unwrap_or_default();
            r.insert(7, c);
        }
    }
    out.push_str(&table::render(&headers, &rows));
    if hidden > 0 {
        out.push_str(&format!(
            "\n({hidden} older done/stale cards hidden; --all shows them)"
        ));
    }
    out
}

fn card_row(c: &Card, now: i64) -> Vec<String> {
    let check = if c.checklist.is_empty() {
        String::new()
    } else {
        format!(
            "{}/{}",
            c.checklist.iter().filter(|i| i.done).count(),
            c.checklist.len()
        )
    };
    let notes = render::log_count(c);
    vec![
        format!("#{}", c.id),
        c.status.to_string(),
        c.assignee.clone(),
        render::age(c.updated.max(c.ts), now),
        if notes > 0 {
            notes.to_string()
        } else {
            String::new()
        },
        check,
        if render::has_drill(c) { "yes" } else { "" }.to_string(),
        c.title.clone(),
    ]
}

pub(crate) async fn card(cmd: CardCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        CardCommand::Add(a) => card_add(a).await,
        CardCommand::Move(a) => card_move(a).await,
        CardCommand::Note(a) => card_note(a).await,
        CardCommand::Check(a) => card_check(a).await,
    }
}

fn print_card_result(json: bool, reply: &TaskReply, line: String) -> anyhow::Result<ExitCode> {
    if json {
        print_json(reply)?;
    } else {
        say!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

async fn card_add(a: CardAddArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let title = a.title.join(" ").trim().to_string();
    if title.is_empty() {
        return Err(usage("the card title is empty"));
    }
    let status = movable_status(&a.status).map_err(usage)?;
    let difficulty = a.difficulty.map(|d| d.trim().to_lowercase());
    if let Some(d) = &difficulty
        && !DIFFICULTIES.contains(&d.as_str())
    {
        return Err(usage(format!(
            "unknown difficulty '{d}': use one of {}",
            DIFFICULTIES.join(", ")
        )));
    }
    let base = match &a.base {
        Some(rev) => Some(super::crew::contract_base(rev)?),
        None => None,
    };
    let req = TaskCreateRequest {
        project: Some(id.project.clone()),
        title,
        status: Some(status),
        assignee: Some(a.assignee.unwrap_or_else(|| id.session.clone())),
        by: Some(id.session.clone()),
        difficulty,
        model: a.model,
        deps: (!a.deps.is_empty()).then_some(a.deps),
        phase: a.phase,
        checklist: (!a.checklist.is_empty())
            .then(|| a.checklist.into_iter().map(ChecklistInput::Text).collect()),
        drill: a.drill,
        note: a.note,
        ..Default::default()
    };
    let reply: TaskReply = hub
        .post_with_op("/task", &req, &new_op_id())
        .await
        .hub(&hub)?;
    let c = &reply.task;
    let mut line = format!(
        "card #{} added to {}: \"{}\" [{}] assigned to {}",
        c.id, c.project, c.title, c.status, c.assignee
    );
    if !render::has_drill(c) {
        line.push_str(" (no drill yet: the hub refuses done without one)");
    }
    if a.contract {
        let mut text = format!("your card #{}: {}", c.id, c.title);
        if let Some(b) = &base {
            text.push_str(&format!("\nbase: {b}"));
        }
        let send = trantor_proto::SendRequest {
            from: id.session.clone(),
            to: Some(c.assignee.clone()),
            text,
            project: Some(c.project.clone()),
            kind: Some("contract".into()),
            ..Default::default()
        };
        let sent: trantor_proto::SendReply = hub
            .post_with_op("/send", &send, &new_op_id())
            .await
            .hub(&hub)?;
        line.push_str(&format!("; contract #{} sent to {}", sent.id, c.assignee));
        if let Some(b) = &base {
            line.push_str(&format!(" with base: {}", super::crew::short(b)));
        }
    }
    print_card_result(a.common.json, &reply, line)
}

async fn card_move(a: CardMoveArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let status = movable_status(&a.status).map_err(usage)?;
    let req = TaskUpdateRequest {
        id: a.id,
        status: Some(status),
        note: a.note,
        drill: a.drill,
        by: Some(id.session.clone()),
        ..Default::default()
    };
    let reply = card_write(&hub, "/task/update", a.id, &req)
        .await
        .map_err(|e| drill_hint(e, a.id))?;
    let line = format!("card #{} -> {}", reply.task.id, reply.task.status);
    print_card_result(a.common.json, &reply, line)
}

/// The drill gate's refusal names the wire field (`drill:"…"`); from the command line the same
/// thing is the `--drill` option, so say so beneath the hub's reason.
fn drill_hint(e: anyhow::Error, id: i64) -> anyhow::Error {
    if !e.to_string().contains("no drill line") {
        return e;
    }
    anyhow::anyhow!(
        "{e}\n  here: trantor card move {id} done --drill \"<the command or check>\" \
         (or --note \"Drill: …\")"
    )
}

async fn card_note(a: CardNoteArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let text = a.text.join(" ").trim().to_string();
    if text.is_empty() {
        return Err(usage("the note is empty"));
    }
    let req = TaskUpdateRequest {
        id: a.id,
        note: Some(text),
        by: Some(id.session.clone()),
        ..Default::default()
    };
    let reply = card_write(&hub, "/task/update", a.id, &req).await?;
    let line = format!(
        "note added to card #{} ({} notes)",
        reply.task.id,
        render::log_count(&reply.task)
    );
    print_card_result(a.common.json, &reply, line)
}

async fn card_check(a: CardCheckArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    if a.index < 0 {
        return Err(usage("the item index counts from 0"));
    }
    let req = ChecklistToggleRequest {
        id: a.id,
        index: a.index,
        done: !a.undo,
        by: Some(id.session.clone()),
    };
    let reply = card_write(&hub, "/task/checklist-toggle", a.id, &req).await?;
    let c = &reply.task;
    let done = c.checklist.iter().filter(|i| i.done).count();
    let item = c
        .checklist
        .get(a.index as usize)
        .map(|i| i.text.as_str())
        .unwrap_or("");
    let line = format!(
        "card #{}: [{}] {item} — {done}/{} done",
        c.id,
        if a.undo { " " } else { "x" },
        c.checklist.len()
    );
    print_card_result(a.common.json, &reply, line)
}
