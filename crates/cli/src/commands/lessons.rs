//! `trantor lessons`: the guardrails the runner adds to every seat's prompt.

use super::{Common, HubResult, print_json, table, usage};
use std::process::ExitCode;
use trantor_mcp::render;
use trantor_proto::identity::new_op_id;
use trantor_proto::{LessonRequest, LessonsReply, now_ms};

pub(crate) const LESSONS_HELP: &str = concat!(
    "\
Lessons are one-line guardrails learned from failures. The runner puts the global ones and the
ones scoped to a seat's agent into that seat's prompt.

Examples:
  trantor lessons                          global lessons and this session's agent's
  trantor lessons --agent codex            what a codex seat is told
  trantor lessons --add \"never skip the tests before done\"
  trantor lessons --add \"pass -m explicitly\" --scope kimi

",
    exit_codes!()
);

/// `trantor lessons` options.
#[derive(Debug, clap::Args)]
pub struct LessonsArgs {
    /// Show the lessons a seat of this agent gets [default: this session's agent].
    #[arg(long)]
    pub agent: Option<String>,
    /// Record a new lesson instead of listing.
    #[arg(long, value_name = "TEXT")]
    pub add: Option<String>,
    /// Scope of a new lesson: global or an agent name.
    #[arg(long, default_value = "global", requires = "add")]
    pub scope: String,
    #[command(flatten)]
    pub common: Common,
}

pub(crate) async fn lessons(a: LessonsArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    if let Some(text) = a.add {
        let text = text.trim().to_string();
        if text.is_empty() {
            return Err(usage("the lesson text is empty"));
        }
        let scope = a.scope.trim().to_lowercase();
        let req = LessonRequest {
            text,
            scope: Some(scope.clone()),
            by: Some(id.session.clone()),
            project: Some(id.project.clone()),
        };
        let reply: serde_json::Value = hub
            .post_with_op("/lesson", &req, &new_op_id())
            .await
            .hub(&hub)?;
        if a.common.json {
            print_json(&reply)?;
        } else if reply.get("dedup").and_then(|d| d.as_bool()) == Some(true) {
            say!("that lesson is already recorded ({scope})");
        } else {
            say!("lesson recorded ({scope})");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let agent = a.agent.unwrap_or_else(|| id.who().to_string());
    let reply: LessonsReply = hub.lessons(&agent).await.hub(&hub)?;
    if a.common.json {
        print_json(&reply)?;
        return Ok(ExitCode::SUCCESS);
    }
    if reply.lessons.is_empty() {
        say!("no lessons for {agent} yet (add one: trantor lessons --add \"…\")");
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = reply
        .lessons
        .iter()
        .map(|l| {
            vec![
                l.id.to_string(),
                l.scope.clone(),
                render::age(l.ts, now),
                l.by.clone(),
                l.text.clone(),
            ]
        })
        .collect();
    say!(
        "{}",
        table::render(&["ID", "SCOPE", "AGE", "BY", "LESSON"], &rows)
    );
    Ok(ExitCode::SUCCESS)
}
