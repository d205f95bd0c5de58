//! The proposal tools: `relay_propose`, `relay_proposals` and `relay_withdraw_proposal`
//! (`docs/protocol.md` §15.6). A proposal asks the operator for a standing permission; only the
//! operator decides, and an approved one is a grant the session may act within.

use super::{Relay, ToolResult, clean};
use crate::args::{int, opt_string};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use trantor_proto::ClientError;
use trantor_proto::identity::new_op_id;
use trantor_proto::proposals::{ProposalReply, ProposalsReply, ProposeRequest, WithdrawRequest};

/// `relay_propose` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ProposeArgs {
    /// WHAT standing permission you want, specific and checkable — e.g. 'push directly to main
    /// in this repo'.
    pub scope: String,
    /// WHEN it applies — e.g. 'only after the full test suite exits 0'.
    pub condition: String,
    /// What is still NOT covered — e.g. 'never force-push, never touch release tags'.
    pub exclusions: String,
    /// Optional machine-readable capability slug (e.g. 'patrol.reap-orphans'), so tools can
    /// check the grant exactly.
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub key: Option<String>,
    /// Project the permission concerns (default: this session's project).
    #[serde(default, deserialize_with = "opt_string")]
    #[schemars(with = "String")]
    pub project: Option<String>,
}

/// `relay_withdraw_proposal` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WithdrawArgs {
    /// Proposal id to withdraw (yours, pending only).
    #[serde(deserialize_with = "int")]
    #[schemars(with = "i64")]
    pub id: i64,
}

#[tool_router(router = proposal_tools, vis = "pub(super)")]
impl Relay {
    #[tool(
        description = "PROPOSE a standing permission or scope change to the human operator — the ONLY approver; nothing auto-approves. A proposal must state its BOUND: scope (what), condition (when it applies), exclusions (what is still NOT covered) — a permission without a bound is a blank cheque and is refused. It sits pending (at most 3 per session — withdraw one to file another) until the operator decides; you get a bus message with the decision. Denials are remembered: a near-duplicate of a denied proposal is refused, so never re-propose — refine the bound or move on. File it and continue your work; never nag."
    )]
    async fn relay_propose(&self, Parameters(a): Parameters<ProposeArgs>) -> ToolResult {
        let req = ProposeRequest {
            session: Some(self.id.session.clone()),
            project: Some(clean(a.project).unwrap_or_else(|| self.id.project.clone())),
            scope: a.scope.trim().to_string(),
            condition: a.condition.trim().to_string(),
            exclusions: a.exclusions.trim().to_string(),
            key: clean(a.key),
            ..Default::default()
        };
        let r: ProposalReply = self
            .hub
            .post_with_op("/propose", &req, &new_op_id())
            .await
            .map_err(|e| match e {
                ClientError::Http {
                    status: 400 | 403 | 409,
                    body,
                    ..
                } => {
                    let note = body
                        .extra
                        .get("note")
                        .and_then(|v| v.as_str())
                        .filter(|n| !n.is_empty())
                        .map(|n| format!(" The operator's note on the prior denial: \"{n}\"."))
                        .unwrap_or_default();
                    format!("REFUSED: {}.{note}", body.error)
                }
                e => self.hub_error(e),
            })?;
        Ok(if r.dedup {
            format!(
                "already pending as proposal #{} — the operator has it; do not re-file",
                r.proposal.id
            )
        } else {
            format!(
                "proposal #{} filed and PENDING operator review. Continue your work — you get a \
                 bus message when it is decided. Do NOT act as if it were approved.",
                r.proposal.id
            )
        })
    }

    #[tool(
        description = "List THIS session's permission proposals and their statuses (pending / approved / denied / revoked / withdrawn), with the operator's decision notes. An APPROVED proposal is a standing GRANT — act within its stated bound without re-asking. Check here before relying on a permission you proposed — pending is not approved."
    )]
    async fn relay_proposals(&self) -> ToolResult {
        let r: ProposalsReply = self
            .hub
            .get("/proposals", &[("session", self.id.session.clone())])
            .await
            .map_err(|e| self.hub_error(e))?;
        if r.proposals.is_empty() {
            return Ok("no proposals filed by this session".into());
        }
        Ok(r.proposals
            .iter()
            .map(|p| {
                let note = if p.note.is_empty() {
                    String::new()
                } else {
                    format!(" · operator: \"{}\"", p.note)
                };
                format!(
                    "{} — {} · when: {} · NOT covered: {}{note}",
                    p.headline(),
                    p.scope,
                    p.condition,
                    p.exclusions
                )
            })
            .collect::<Vec<_>>()
            .join("\n"))
    }

    #[tool(
        description = "Withdraw one of THIS session's PENDING permission proposals (frees a queue slot — the pending queue holds at most 3 per session)."
    )]
    async fn relay_withdraw_proposal(&self, Parameters(a): Parameters<WithdrawArgs>) -> ToolResult {
        let req = WithdrawRequest {
            id: a.id,
            session: Some(self.id.session.clone()),
            ..Default::default()
        };
        let _: ProposalReply = self
            .hub
            .post_with_op("/proposal/withdraw", &req, &new_op_id())
            .await
            .map_err(|e| match e {
                ClientError::Http { status, body, .. } if status < 500 && status != 401 => {
                    format!("could not withdraw: {}", body.error)
                }
                e => self.hub_error(e),
            })?;
        Ok(format!(
            "proposal #{} withdrawn — one queue slot free",
            a.id
        ))
    }
}
