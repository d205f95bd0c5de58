//! The crew tools: `relay_advise` (the Advisor) and `relay_handoff`.

use super::{Relay, ToolResult, clean};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use trantor_proto::advise::{Advice, Package};

/// `relay_advise` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AdviseArgs {
    /// One line on the whole job.
    pub task: String,
    /// The work packages you would cut as cards: title, difficulty (easy|medium|hard), and
    /// optionally files, owner ("self" keeps it in this session) and drill.
    pub packages: Vec<Package>,
    /// How long the build runs: short, medium or long (default: from the package count).
    #[serde(default)]
    pub horizon: Option<String>,
}

#[tool_router(router = crew_tools, vis = "pub(super)")]
impl Relay {
    #[tool(
        description = "THE ADVISOR: before spending tokens, ask how to run a body of work. Give the packages with a difficulty each; it weighs the CLIs installed here, the seats live on the hub, the person's plans and the model prices, and returns the mode (solo|crew|hybrid), one route per package (agent:model or self) with a reason, how many seats and why, an estimate (tokens, API-equivalent $, what the plans charge, quota pools), a markdown routing table and ready relay_task_add calls. Show the table to the person and ask go / adjust / hold before starting anything."
    )]
    async fn relay_advise(&self, Parameters(a): Parameters<AdviseArgs>) -> ToolResult {
        let bus = trantor_proto::identity::bus_dir(&trantor_proto::identity::ProcessEnv);
        let req = crate::advise::request(
            a.task.trim().to_string(),
            a.packages,
            clean(a.horizon),
            &self.id.project,
            &bus,
        )
        .await
        .map_err(|e| e.to_string())?;
        // A question, not a write: no `_op`.
        let advice: Advice = self
            .hub
            .post("/advise", &req)
            .await
            .map_err(|e| self.hub_error(e))?;
        Ok(crate::advise::render(&advice))
    }
}

/// `relay_handoff` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct HandoffArgs {
    /// The complete markdown handoff: TASK, STATE, KEY DECISIONS, NEXT STEPS, KEY FILES.
    pub summary: String,
}

#[tool_router(router = handoff_tools, vis = "pub(super)")]
impl Relay {
    #[tool(
        description = "Write a handoff for THIS session so a fresh session can take over with a full context window instead of compacting. Give a complete markdown summary (TASK / STATE / KEY DECISIONS / NEXT STEPS / KEY FILES); your open contracts, the project's cards in flight and the recent bus traffic are added. The next session started in this project gets it once."
    )]
    async fn relay_handoff(&self, Parameters(a): Parameters<HandoffArgs>) -> ToolResult {
        if a.summary.trim().is_empty() {
            return Err("`summary` is empty: write the handoff (task, state, next steps)".into());
        }
        let bus = trantor_proto::identity::bus_dir(&trantor_proto::identity::ProcessEnv);
        let (h, path) = crate::handoff::write(
            &self.hub,
            &bus,
            &self.id.session,
            &self.id.project,
            "",
            "relay_handoff",
            &a.summary,
        )
        .await
        .map_err(|e| format!("cannot write the handoff under {}: {e}", bus.display()))?;
        Ok(format!(
            "handoff {} saved at {}{}. A fresh session started in {} gets it once: tell the \
             person to open one there.",
            h.id,
            path.display(),
            if h.sent {
                " and announced to the hub"
            } else {
                " (the hub did not answer: it is sent with the next hook or handoff)"
            },
            h.project
        ))
    }
}
