//! `trantor demo`: a whole crew in under a minute, with no LLM and no set-up.
//!
//! A hub on a temporary embedded store, two seats (`builder`, `tester`) run by the real runner
//! through its `command` driver, whose "agent" is this binary in the hidden `demo-agent` mode.
//! The demo posts a card and a contract, narrates the hub's event log live while the seats move
//! the card through doing and testing to done, and cleans up (or, with `--keep`, leaves it all
//! running for a look at the board).

use super::board::board_table;
use super::seats;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};
use trantor_proto::identity::new_op_id;
use trantor_proto::{
    Card, CardStatus, ChecklistInput, ChecklistToggleRequest, EventsReply, HubClient, SendReply,
    SendRequest, TaskCreateRequest, TaskReply, TaskUpdateRequest, now_ms,
};

pub(crate) const DEMO_HELP: &str = concat!(
    "\
What it does, in a few seconds:
  1. starts a hub on a free port with a temporary embedded store;
  2. starts two seats, builder:demo and tester:demo — real `trantor runner` processes whose
     agent is a small built-in script instead of an LLM;
  3. you (you:demo) add a card and send builder a contract;
  4. builder picks the card up (doing), does the work, ticks the checklist, moves it to
     testing and hands it to tester; tester runs the drill and moves it to done.
The hub's event log is shown live. Everything is removed at the end unless --keep.

Examples:
  trantor demo
  trantor demo --keep        leave the hub and seats running; prints how to look and how to stop

",
    exit_codes!()
);

/// The demo's project name.
const PROJECT: &str = "demo";
/// Who the demo speaks as.
const ME: &str = "you:demo";

/// `trantor demo` options.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Leave the hub and the seats running when the card is done.
    #[arg(long)]
    pub keep: bool,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
}

/// `trantor demo-agent` options (run by the demo's seats, not by people).
#[derive(Debug, clap::Args)]
pub struct DemoAgentArgs {
    /// builder or tester.
    #[arg(long)]
    pub role: String,
}

/// Stops what the demo started unless told to keep it.
struct Crew {
    pids: Vec<u32>,
    keep: bool,
}

impl Drop for Crew {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        // Seats first (they flush to the hub on the way out), then the hub.
        for pid in self.pids.iter().rev() {
            seats::stop_process(*pid, Duration::from_secs(5));
        }
    }
}

fn spawn_seat(role: &str, url: &str, root: &Path, work: &Path) -> anyhow::Result<u32> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()?;
    let bus = root.join("bus");
    let log = bus.join("logs").join(format!("runner-{role}.log"));
    std::fs::create_dir_all(bus.join("logs"))?;
    let out = std::fs::File::create(&log)?;
    let err = out.try_clone()?;
    let mut cmd = std::process::Command::new(&exe);
    cmd.arg("runner").arg("command").arg(work).current_dir(work);
    // A clean environment of our choosing: nothing from the person's own crew set-up may leak
    // into the demo's seats, and nothing of the demo into their files.
    for (k, _) in std::env::vars() {
        if ["RELAY_", "CREW_", "TRANTOR_", "AGENT_BUS_", "RUNNER_"]
            .iter()
            .any(|p| k.starts_with(p))
        {
            cmd.env_remove(k);
        }
    }
    cmd.env("HOME", root.join("home"))
        .env("AGENT_BUS_DIR", &bus)
        .env("RELAY_URL", url)
        .env("RELAY_PROJECT", PROJECT)
        .env("CREW_PERSONA", role)
        .env(
            "CREW_COMMAND",
            format!(
                "{} demo-agent --role {role}",
                seats::shell_quote(&exe.to_string_lossy())
            ),
        )
        .env("TRANTOR_NO_WORKTREE", "1")
        .env("TRANTOR_NO_DESKTOP_NOTIFY", "1")
        .env("TRANTOR_LOG", "info")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    Ok(cmd.spawn()?.id())
}

fn event_line(e: &trantor_proto::Event, t0: i64) -> Option<String> {
    let at = format!("{:>5.1}s", (e.ts - t0).max(0) as f64 / 1000.0);
    let s = |k: &str| {
        e.data
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let id = e.data.get("taskId").and_then(Value::as_i64).unwrap_or(0);
    match e.kind.as_str() {
        "created" => Some(format!(
            "{at}  {:<14} added card #{id} \"{}\"",
            e.by,
            s("title")
        )),
        "moved" => Some(format!(
            "{at}  {:<14} moved #{id} {} → {}",
            e.by,
            if s("from").is_empty() {
                "new".to_string()
            } else {
                s("from")
            },
            s("to")
        )),
        "message" => {
            let text: String = s("text").chars().take(90).collect();
            Some(format!("{at}  {:<14} → {}: {text}", e.by, s("toSession")))
        }
        _ => None,
    }
}

pub(crate) async fn demo(a: DemoArgs) -> anyhow::Result<ExitCode> {
    let t_start = Instant::now();
    let tmp = tempfile::Builder::new().prefix("trantor-demo-").tempdir()?;
    let root: PathBuf = tmp.path().to_path_buf();
    let work = root.join(PROJECT);
    std::fs::create_dir_all(&work)?;
    std::fs::create_dir_all(root.join("home"))?;
    let url = format!(
        "http://127.0.0.1:{}",
        trantor_proto::net::free_loopback_port()?
    );
    let hub = HubClient::new(url.clone());

    say!("trantor demo — a hub, two seats and a card, no LLM needed\n");
    let hub_dir = root.join("hub");
    let hub_pid = seats::spawn_hub(&url, &root.join("hub.log"), &[("RELAY_DATA_DIR", &hub_dir)])
        .map_err(anyhow::Error::msg)?;
    let mut crew = Crew {
        pids: vec![hub_pid],
        keep: a.keep,
    };
    if !seats::wait_for_hub(&hub, Duration::from_secs(20)).await {
        anyhow::bail!(
            "the demo hub did not start; its log: {}",
            seats::tail(&root.join("hub.log"), 5).join(" ⏎ ")
        );
    }
    say!("  hub      {url} (store under {})", hub_dir.display());
    for role in ["builder", "tester"] {
        let pid = spawn_seat(role, &url, &root, &work)?;
        crew.pids.push(pid);
        say!("  seat     {role}:{PROJECT} (runner pid {pid}, agent: the built-in demo script)");
    }

    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    if !seats_idle(&hub, deadline).await {
        for role in ["builder", "tester"] {
            say!("  {role} log: {}", seat_log_tail(&root, role, 6));
        }
        anyhow::bail!("the demo seats did not come up within {}s", a.timeout);
    }
    say!(
        "  both seats are live and idle (an idle seat costs nothing: it waits in one long-poll)\n"
    );

    let cursor0 = hub
        .events(&[("limit", "1".to_string())])
        .await
        .map(|r| r.latest)
        .unwrap_or(0);
    let t0 = now_ms();
    let id = post_card_and_contract(&hub).await?;

    say!("live event log (the hub's /events, as it happens):");
    let status = narrate_until_done(&hub, id, cursor0, t0, deadline).await;
    if status != CardStatus::Done {
        say!(
            "\nthe card is still {status} after {}s; the seats' last words:",
            a.timeout
        );
        for role in ["builder", "tester"] {
            say!("  {role}: {}", seat_log_tail(&root, role, 8));
        }
        return Ok(ExitCode::from(1));
    }

    let cards = hub.tasks(Some(PROJECT)).await.unwrap_or_default();
    say!("\n{}\n", board_table(PROJECT, &cards, true, now_ms()));
    say!(
        "card #{id} went todo → doing → testing → done in {:.1}s ({:.1}s in all).",
        (now_ms() - t0) as f64 / 1000.0,
        t_start.elapsed().as_secs_f64()
    );
    if a.keep {
        let kept = tmp.keep();
        say_kept(&url, id, &crew.pids, &kept);
    } else {
        drop(crew);
        say!(
            "\nnext: `trantor hub &`, `trantor connect`, then `trantor up claude` in your project."
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The last `n` lines of a demo seat's runner log, indented.
fn seat_log_tail(root: &Path, role: &str, n: usize) -> String {
    let log = root.join("bus/logs").join(format!("runner-{role}.log"));
    seats::tail(&log, n).join("\n    ")
}

/// Wait until both seats are registered and past their kickoff turn (idle), so the contract
/// wakes an idle seat; false at the deadline.
async fn seats_idle(hub: &HubClient, deadline: Instant) -> bool {
    loop {
        let peers = hub.peers().await.map(|r| r.peers).unwrap_or_default();
        let ready = ["builder:demo", "tester:demo"].iter().all(|s| {
            peers
                .iter()
                .any(|p| p.session == *s && p.online && p.phase.as_deref() == Some("idle"))
        });
        if ready {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Post the demo's card for the builder and the contract that wakes it; returns the card's id.
async fn post_card_and_contract(hub: &HubClient) -> anyhow::Result<i64> {
    let card: TaskReply = hub
        .post_with_op(
            "/task",
            &TaskCreateRequest {
                project: Some(PROJECT.into()),
                title: "Write a greeting for newcomers".into(),
                assignee: Some("builder:demo".into()),
                by: Some(ME.into()),
                checklist: Some(vec![
                    ChecklistInput::Text("greeting.txt exists".into()),
                    ChecklistInput::Text("it names trantor".into()),
                ]),
                drill: Some("cat greeting.txt shows a greeting that names trantor".into()),
                difficulty: Some("easy".into()),
                note: Some("the first card of the demo".into()),
                ..Default::default()
            },
            &new_op_id(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("the demo hub refused the card: {e}"))?;
    let id = card.task.id;
    let _: SendReply = hub
        .post_with_op(
            "/send",
            &SendRequest {
                from: ME.into(),
                to: Some("builder:demo".into()),
                text: format!(
                    "contract: please build #{id}, then hand it to tester:demo for testing"
                ),
                kind: Some("contract".into()),
                ..Default::default()
            },
            &new_op_id(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("the demo hub refused the contract: {e}"))?;
    Ok(id)
}

/// Print the project's events as they happen until card `id` is done or the deadline passes;
/// returns the card's last status.
async fn narrate_until_done(
    hub: &HubClient,
    id: i64,
    cursor0: i64,
    t0: i64,
    deadline: Instant,
) -> CardStatus {
    let mut cursor = cursor0;
    let mut status = CardStatus::Todo;
    loop {
        let q = [
            ("project", PROJECT.to_string()),
            ("since", cursor.to_string()),
            ("limit", "500".to_string()),
        ];
        if let Ok(EventsReply {
            events, cursor: c, ..
        }) = hub.events(&q).await
        {
            for e in &events {
                if let Some(line) = event_line(e, t0) {
                    say!("{line}");
                }
            }
            cursor = cursor.max(c);
        }
        if let Ok(r) = hub.card(id).await
            && let Some(t) = r.task
        {
            status = t.status;
        }
        if status == CardStatus::Done || Instant::now() >= deadline {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// What `--keep` left running, and how to look at it and stop it.
fn say_kept(url: &str, id: i64, pids: &[u32], kept: &Path) {
    say!("\nstill running (--keep):");
    say!(
        "  RELAY_URL={url} trantor ui --project {PROJECT}     (the dashboard: {url}/ui?project={PROJECT})"
    );
    say!("  RELAY_URL={url} trantor board --project {PROJECT}");
    say!("  RELAY_URL={url} trantor board --project {PROJECT} --card {id}");
    say!("  RELAY_URL={url} trantor peers");
    say!(
        "  stop it: kill {}   (files: {})",
        pids.iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(" "),
        kept.display()
    );
}

// ----- the scripted agent -------------------------------------------------------------------

/// Pause so a person can watch the board move; the demo's pace, not a correctness wait.
async fn beat() {
    tokio::time::sleep(Duration::from_millis(600)).await;
}

/// One turn of the demo's scripted agent: act on the board as `role`, print what it did.
pub(crate) async fn demo_agent(a: DemoAgentArgs) -> anyhow::Result<ExitCode> {
    let url = std::env::var("RELAY_URL").unwrap_or_default();
    let me = std::env::var("RELAY_SESSION").unwrap_or_else(|_| format!("{}:{PROJECT}", a.role));
    let project = std::env::var("RELAY_PROJECT").unwrap_or_else(|_| PROJECT.into());
    let hub = HubClient::new(url);
    let cards = hub
        .tasks(Some(&project))
        .await
        .map_err(|e| anyhow::anyhow!("demo agent: cannot read the board: {e}"))?;
    let did = match a.role.as_str() {
        "builder" => builder_turn(&hub, &cards, &me, &project).await?,
        "tester" => tester_turn(&hub, &cards, &me).await?,
        other => anyhow::bail!("demo agent: unknown role {other} (builder or tester)"),
    };
    // The runner judges a turn by its output: say plainly what happened, as a real agent would.
    if did.is_empty() {
        say!(
            "{me}: I looked at the {project} board and found nothing for me to do right now, so I am standing by for the next contract on the bus."
        );
    } else {
        say!(
            "{me}: {}. Everything I did is on the board and in the card's log, so the next seat can pick it up from there.",
            did.join("; ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The demo agent `me` moves card `id` to `status` with `note`.
async fn demo_move(
    hub: &HubClient,
    me: &str,
    id: i64,
    status: CardStatus,
    note: String,
) -> anyhow::Result<()> {
    let req = TaskUpdateRequest {
        id,
        status: Some(status),
        note: Some(note),
        by: Some(me.to_string()),
        ..Default::default()
    };
    let _: TaskReply = hub.post_with_op("/task/update", &req, &new_op_id()).await?;
    Ok(())
}

/// The demo agent sends `req` (with an `_op`, so a retry is not a second message).
async fn demo_send(hub: &HubClient, req: SendRequest) -> anyhow::Result<()> {
    let _: SendReply = hub.post_with_op("/send", &req, &new_op_id()).await?;
    Ok(())
}

/// The builder's turn: build each of its open cards (write greeting.txt, tick the checklist)
/// and hand it to the tester. Returns what it did.
async fn builder_turn(
    hub: &HubClient,
    cards: &[Card],
    me: &str,
    project: &str,
) -> anyhow::Result<Vec<String>> {
    let mut did = Vec::new();
    for c in cards.iter().filter(|c| {
        use trantor_proto::CardStatus::{Doing, Failed, Todo};
        c.assignee == me && matches!(c.status, Todo | Doing | Failed)
    }) {
        demo_move(
            hub,
            me,
            c.id,
            CardStatus::Doing,
            "picked up: reading the contract".into(),
        )
        .await?;
        beat().await;
        std::fs::write(
            "greeting.txt",
            "Hello, newcomer! This crew runs on trantor: a hub, a board and seats that wake only when there is work.\n",
        )?;
        for index in 0..c.checklist.len() as i64 {
            let _: TaskReply = hub
                .post_with_op(
                    "/task/checklist-toggle",
                    &ChecklistToggleRequest {
                        id: c.id,
                        index,
                        done: true,
                        by: Some(me.to_string()),
                    },
                    &new_op_id(),
                )
                .await?;
        }
        beat().await;
        demo_move(
            hub,
            me,
            c.id,
            CardStatus::Testing,
            "wrote greeting.txt; self-check: `cat greeting.txt` shows the greeting".into(),
        )
        .await?;
        demo_send(
            hub,
            SendRequest {
                from: me.to_string(),
                to: Some(format!("tester:{project}")),
                text: format!("contract: please test #{} — drill: {}", c.id, c.drill),
                kind: Some("contract".into()),
                ..Default::default()
            },
        )
        .await?;
        did.push(format!(
            "built card #{} and handed it to tester:{project}",
            c.id
        ));
    }
    Ok(did)
}

/// The tester's turn: run the drill on each card in testing, move it to done or failed and
/// tell whoever posted it. Returns what it did.
async fn tester_turn(hub: &HubClient, cards: &[Card], me: &str) -> anyhow::Result<Vec<String>> {
    let mut did = Vec::new();
    for c in cards.iter().filter(|c| c.status == CardStatus::Testing) {
        beat().await;
        let greeting = std::fs::read_to_string("greeting.txt").unwrap_or_default();
        let (status, note) = if greeting.contains("trantor") {
            (
                CardStatus::Done,
                "verified: the drill passed — greeting.txt greets and names trantor".to_string(),
            )
        } else {
            (
                CardStatus::Failed,
                "the drill failed: greeting.txt is missing or does not name trantor".to_string(),
            )
        };
        demo_move(hub, me, c.id, status.clone(), note).await?;
        let to = if c.by.is_empty() {
            ME.to_string()
        } else {
            c.by.clone()
        };
        demo_send(
            hub,
            SendRequest {
                from: me.to_string(),
                to: Some(to.clone()),
                text: format!("#{} is {status} (tested by {me})", c.id),
                wake: Some(false),
                ..Default::default()
            },
        )
        .await?;
        did.push(format!(
            "tested card #{} and moved it to {status}, telling {to}",
            c.id
        ));
    }
    Ok(did)
}
