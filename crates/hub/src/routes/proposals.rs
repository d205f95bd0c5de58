//! Agent-proposed permissions: `POST /propose`, `GET /proposals`, `POST /proposal/decide`,
//! `POST /proposal/withdraw`, `GET /grants` (`docs/protocol.md` §15.6).
//!
//! A proposal must state its bound — scope (what), condition (when) and exclusions (what is still
//! not covered). A session may hold `RELAY_PROPOSAL_CAP` pending proposals; a near-duplicate of a
//! denied proposal is refused; deciding is the owner's. Proposals live in one kv document.

use crate::auth::AuthContext;
use crate::domain::duty::post_alert;
use crate::domain::policy::{canon, project_of_session};
use crate::error::{ApiError, ApiResult, check_len, check_opt, first_named, non_blank};
use crate::extract::{JsonBody, Params};
use crate::openapi::{RouteDoc, Ty, Verb, f, shape};
use crate::state::{AppState, KvDoc, Outbox, event};
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::routing::{MethodRouter, get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use trantor_proto::proposals::{
    DecideRequest, Grant, GrantsReply, KEY_MAX, Proposal, ProposalReply, ProposalsReply,
    ProposeRequest, TEXT, WithdrawRequest,
};
use trantor_proto::{limits, now_ms};
use trantor_store::{Store, StoreError, WriteTx};

/// kv key of the proposals document.
pub const KEY: &str = "proposals";
/// Proposals kept; past it the oldest 100 are dropped.
const CAP: usize = 500;
/// Most rows a list returns.
const PAGE: usize = 200;

#[derive(Debug, Default, Serialize, Deserialize)]
struct Doc {
    #[serde(default)]
    seq: i64,
    #[serde(default)]
    proposals: Vec<Proposal>,
}

impl KvDoc for Doc {
    const KEY: &'static str = KEY;
    const WHAT: &'static str = "proposals";
}

/// This module's routes, for the route table.
pub fn table<S: Store>() -> Vec<(RouteDoc, MethodRouter<AppState<S>>)> {
    use Ty::*;
    vec![
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/propose",
                summary: "File a bounded permission proposal (scope, condition, exclusions)",
                query: &[],
                body: Some(shape::<ProposeRequest>),
                reply: Some(shape::<ProposalReply>),
            },
            post(propose::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Get,
                path: "/proposals",
                summary: "Proposals, filtered by project, status, session",
                query: fields![
                    f("project", Str, false, "only this project").max(limits::PROJECT),
                    f(
                        "status",
                        Str,
                        false,
                        "pending, approved, denied, revoked or withdrawn"
                    )
                    .max(20),
                    f("session", Str, false, "only this proposer").max(limits::SESSION),
                ],
                body: None,
                reply: Some(shape::<ProposalsReply>),
            },
            get(proposals::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/proposal/decide",
                summary: "Approve, deny or revoke a proposal (owner); the proposer is told",
                query: &[],
                body: Some(shape::<DecideRequest>),
                reply: Some(shape::<ProposalReply>),
            },
            post(decide::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/proposal/withdraw",
                summary: "Withdraw one's own pending proposal",
                query: &[],
                body: Some(shape::<WithdrawRequest>),
                reply: Some(shape::<ProposalReply>),
            },
            post(withdraw::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Get,
                path: "/grants",
                summary: "Active grants: the approved proposals",
                query: fields![
                    f("project", Str, false, "only this project").max(limits::PROJECT),
                    f("key", Str, false, "only this capability key").max(KEY_MAX),
                    f("session", Str, false, "only this session").max(limits::SESSION),
                ],
                body: None,
                reply: Some(shape::<GrantsReply>),
            },
            get(grants::<S>),
        ),
    ]
}

/// The denial fingerprint: scope and condition, lower-cased, punctuation dropped, whitespace
/// collapsed.
fn fingerprint(scope: &str, condition: &str) -> String {
    let norm = |s: &str| {
        s.to_lowercase()
            .chars()
            .map(|c| if c.is_alphanumeric() { c } else { ' ' })
            .collect::<String>()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!("{}|{}", norm(scope), norm(condition))
}

fn signer(ctx: &Option<Extension<AuthContext>>) -> Option<String> {
    ctx.as_ref()
        .and_then(|Extension(c)| c.identity.as_ref())
        .map(|i| i.name.clone())
}

/// `POST /propose`.
pub async fn propose<S: Store>(
    State(hub): State<AppState<S>>,
    ctx: Option<Extension<AuthContext>>,
    JsonBody(req): JsonBody<ProposeRequest>,
) -> ApiResult<Json<ProposalReply>> {
    let session = first_named(&req.session, &req.by).unwrap_or_default();
    if session.is_empty() {
        return Err(ApiError::bad_request("session required"));
    }
    check_len("session", &session, limits::SESSION)?;
    if let Some(me) = signer(&ctx)
        && me != session
    {
        return Err(ApiError::forbidden("session must match signer"));
    }
    let scope = req.scope.trim().to_string();
    let condition = req.condition.trim().to_string();
    let exclusions = req.exclusions.trim().to_string();
    check_bound(&scope, &condition, &exclusions)?;
    let key = req.capability_key().map_err(ApiError::bad_request)?;
    let asked = non_blank(req.project.as_deref());
    check_opt("project", &asked, limits::PROJECT)?;
    let cap = hub.cfg.proposal_cap;
    let now = now_ms();
    let result = hub
        .write(move |tx| {
            let project = match asked {
                Some(p) => p,
                None => project_of_session(tx, &session)?,
            };
            let project = canon(tx, &project)?;
            let mut doc = Doc::load(tx)?;
            match intake(&doc, &session, &project, &scope, &condition, cap) {
                Err(refusal) => return Ok(Err(refusal)),
                Ok(Some(dup)) => return Ok(Ok((dup, true, Outbox::default()))),
                Ok(None) => {}
            }
            let pr = Proposal {
                session: session.clone(),
                project,
                scope,
                condition,
                exclusions,
                key,
                status: "pending".into(),
                ts: now,
                ..Proposal::default()
            };
            let (pr, out) = file(tx, &mut doc, pr, now)?;
            Ok(Ok((pr, false, out)))
        })
        .await?;
    let (proposal, dedup, out) = result?;
    Ok(reply(&hub, proposal, dedup, out))
}

/// 400 unless a proposal states its whole bound (scope, condition, exclusions), each within
/// [`TEXT`] and free of secrets.
fn check_bound(scope: &str, condition: &str, exclusions: &str) -> ApiResult<()> {
    if scope.is_empty() || condition.is_empty() || exclusions.is_empty() {
        return Err(ApiError::bad_request(
            "a proposal must state its bound: scope (what), condition (when), exclusions (what \
             is still NOT covered) — a permission without a bound is a blank cheque",
        ));
    }
    for (name, v) in [
        ("scope", scope),
        ("condition", condition),
        ("exclusions", exclusions),
    ] {
        check_len(name, v, TEXT)?;
    }
    crate::error::check_secrets([scope, condition, exclusions])
}

/// Whether `session` may file this proposal on `project`, in the order checked: 409 for a
/// near-duplicate of a denied proposal of the project, its own pending near-duplicate
/// (`Some`: returned as a dedup), 409 when it already holds `cap` pending; `None`: file it.
fn intake(
    doc: &Doc,
    session: &str,
    project: &str,
    scope: &str,
    condition: &str,
    cap: usize,
) -> ApiResult<Option<Proposal>> {
    let fp = fingerprint(scope, condition);
    if let Some(d) = doc.proposals.iter().find(|p| {
        p.status == "denied" && p.project == project && fingerprint(&p.scope, &p.condition) == fp
    }) {
        return Err(ApiError::with(
            StatusCode::CONFLICT,
            "near-duplicate of a DENIED proposal — do not re-propose; refine the bound or move \
             on",
            json!({ "deniedId": d.id, "note": d.note, "decidedTs": d.decided_ts }),
        ));
    }
    let pending: Vec<&Proposal> = doc
        .proposals
        .iter()
        .filter(|p| p.status == "pending" && p.session == session)
        .collect();
    if let Some(dup) = pending
        .iter()
        .find(|p| p.project == project && fingerprint(&p.scope, &p.condition) == fp)
    {
        return Ok(Some((*dup).clone()));
    }
    if pending.len() >= cap {
        let list: Vec<Value> = pending
            .iter()
            .map(|p| json!({ "id": p.id, "scope": p.scope }))
            .collect();
        return Err(ApiError::with(
            StatusCode::CONFLICT,
            format!(
                "queue full: {}/{cap} pending for this session — withdraw one of yours to file \
                 another",
                pending.len()
            ),
            json!({ "pending": list }),
        ));
    }
    Ok(None)
}

/// Files `pr` with the next id (dropping the oldest 100 past [`CAP`]), saves the document and
/// records `proposal.filed`, in the caller's transaction; returns the proposal as filed.
fn file(
    tx: &mut dyn WriteTx,
    doc: &mut Doc,
    mut pr: Proposal,
    now: i64,
) -> Result<(Proposal, Outbox), StoreError> {
    doc.seq += 1;
    pr.id = doc.seq;
    doc.proposals.push(pr.clone());
    if doc.proposals.len() > CAP {
        doc.proposals.drain(..100);
    }
    doc.save(tx)?;
    let mut out = Outbox::default();
    let mut data = json!({
        "proposalId": pr.id,
        "scope": pr.scope,
        "condition": pr.condition,
        "exclusions": pr.exclusions,
    });
    if !pr.key.is_empty() {
        data["key"] = json!(pr.key);
    }
    out.event(
        tx,
        event(now, "proposal.filed", &pr.project, &pr.session, data),
    )?;
    Ok((pr, out))
}

/// `GET /proposals[?project=][&status=][&session=]`.
pub async fn proposals<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<ProposalsReply>> {
    let project = p.text("project").map(str::to_string);
    let status = p.text("status").map(str::to_string);
    let session = p.text("session").map(str::to_string);
    let (rows, pending) = hub
        .store
        .read(move |tx| {
            let project = project.as_deref().map(|p| canon(tx, p)).transpose()?;
            let doc = Doc::load(tx)?;
            let pending = doc
                .proposals
                .iter()
                .filter(|p| p.status == "pending")
                .count();
            let mut rows: Vec<Proposal> = doc
                .proposals
                .into_iter()
                .filter(|p| project.as_ref().is_none_or(|x| &p.project == x))
                .filter(|p| status.as_ref().is_none_or(|x| &p.status == x))
                .filter(|p| session.as_ref().is_none_or(|x| &p.session == x))
                .collect();
            let excess = rows.len().saturating_sub(PAGE);
            rows.drain(..excess);
            Ok((rows, pending as i64))
        })
        .await?;
    Ok(Json(ProposalsReply {
        proposals: rows,
        pending_count: pending,
    }))
}

fn tell(tx: &mut dyn WriteTx, out: &mut Outbox, pr: &Proposal, now: i64) -> Result<(), StoreError> {
    let verdict = match pr.status.as_str() {
        "approved" => "You may rely on it within its stated bound.",
        "revoked" => {
            "This grant no longer applies — stop relying on it. You may propose a refined bound."
        }
        _ => "Do not re-propose this; refine the bound or move on.",
    };
    let note = if pr.note.is_empty() {
        String::new()
    } else {
        format!(": {}", pr.note)
    };
    let text = format!(
        "📜 proposal #{} {}{note} — scope was \"{}\". {verdict}",
        pr.id,
        pr.status.to_uppercase(),
        pr.scope
    );
    post_alert(tx, out, &pr.session, &pr.project, text, false, now)?;
    Ok(())
}

/// `POST /proposal/decide {id, status, note?, by?}` (owner).
pub async fn decide<S: Store>(
    State(hub): State<AppState<S>>,
    ctx: Option<Extension<AuthContext>>,
    JsonBody(req): JsonBody<DecideRequest>,
) -> ApiResult<Json<ProposalReply>> {
    let decision = req.status.clone().unwrap_or_default();
    if !matches!(decision.as_str(), "approved" | "denied" | "revoked") {
        return Err(ApiError::bad_request(
            "status must be 'approved', 'denied' or 'revoked'",
        ));
    }
    let note = req.note.clone().unwrap_or_default();
    check_len("note", &note, TEXT)?;
    let by = signer(&ctx)
        .or(req.by.clone())
        .unwrap_or_default()
        .trim()
        .to_string();
    check_len("by", &by, limits::SESSION)?;
    let now = now_ms();
    let rule = move |pr: &Proposal| {
        if decision == "revoked" {
            if pr.status != "approved" {
                return Err(ApiError::with(
                    StatusCode::CONFLICT,
                    format!(
                        "only an approved proposal can be revoked (is {})",
                        pr.status
                    ),
                    json!({ "proposal": pr }),
                ));
            }
        } else if pr.status != "pending" {
            return Err(already(pr));
        }
        Ok(Settle {
            status: decision,
            by,
            note: Some(note),
        })
    };
    let record = move |tx: &mut dyn WriteTx, out: &mut Outbox, pr: &Proposal| {
        out.event(
            tx,
            event(
                now,
                "proposal.decided",
                &pr.project,
                &pr.decided_by,
                json!({ "proposalId": pr.id, "scope": pr.scope, "status": pr.status, "note": pr.note }),
            ),
        )?;
        tell(tx, out, pr, now)
    };
    settle(&hub, req.id, now, rule, record).await
}

/// `POST /proposal/withdraw {id, session}`: only the proposer, only while pending.
pub async fn withdraw<S: Store>(
    State(hub): State<AppState<S>>,
    ctx: Option<Extension<AuthContext>>,
    JsonBody(req): JsonBody<WithdrawRequest>,
) -> ApiResult<Json<ProposalReply>> {
    let claimant = signer(&ctx)
        .or_else(|| first_named(&req.session, &req.by))
        .unwrap_or_default();
    let now = now_ms();
    let rule = move |pr: &Proposal| {
        if pr.status != "pending" {
            return Err(already(pr));
        }
        if claimant != pr.session {
            return Err(ApiError::forbidden(
                "only the proposing session may withdraw",
            ));
        }
        Ok(Settle {
            status: "withdrawn".into(),
            by: pr.session.clone(),
            note: None,
        })
    };
    let record = move |tx: &mut dyn WriteTx, out: &mut Outbox, pr: &Proposal| {
        let data = json!({ "proposalId": pr.id, "scope": pr.scope });
        out.event(
            tx,
            event(now, "proposal.withdrawn", &pr.project, &pr.session, data),
        )
    };
    settle(&hub, req.id, now, rule, record).await
}

/// 409: the proposal is no longer pending.
fn already(pr: &Proposal) -> ApiError {
    ApiError::with(
        StatusCode::CONFLICT,
        format!("already {}", pr.status),
        json!({ "proposal": pr }),
    )
}

/// How a decision or a withdrawal settles a proposal.
struct Settle {
    /// The new status.
    status: String,
    /// Who settled it.
    by: String,
    /// The decision's note (a withdrawal keeps the proposal's).
    note: Option<String>,
}

/// Settles proposal `id` at `now` in one write (404 when there is none): `rule` refuses or
/// says how, the proposal is stamped and saved, `record` adds its events and notices. The reply
/// carries the proposal as settled.
async fn settle<S, R, W>(
    hub: &AppState<S>,
    id: i64,
    now: i64,
    rule: R,
    record: W,
) -> ApiResult<Json<ProposalReply>>
where
    S: Store,
    R: FnOnce(&Proposal) -> ApiResult<Settle> + Send + 'static,
    W: FnOnce(&mut dyn WriteTx, &mut Outbox, &Proposal) -> Result<(), StoreError> + Send + 'static,
{
    let result = hub
        .write(move |tx| {
            let mut doc = Doc::load(tx)?;
            let Some(pr) = doc.proposals.iter_mut().find(|p| p.id == id) else {
                return Ok(Err(ApiError::not_found("no such proposal")));
            };
            let how = match rule(pr) {
                Ok(how) => how,
                Err(refusal) => return Ok(Err(refusal)),
            };
            pr.status = how.status;
            pr.decided_ts = now;
            pr.decided_by = how.by;
            if let Some(note) = how.note {
                pr.note = note;
            }
            let pr = pr.clone();
            doc.save(tx)?;
            let mut out = Outbox::default();
            record(tx, &mut out, &pr)?;
            Ok(Ok((pr, out)))
        })
        .await?;
    let (proposal, out) = result?;
    Ok(reply(hub, proposal, false, out))
}

/// Publishes what a write produced and answers with `proposal`.
fn reply<S: Store>(
    hub: &AppState<S>,
    proposal: Proposal,
    dedup: bool,
    out: Outbox,
) -> Json<ProposalReply> {
    hub.publish(out);
    Json(ProposalReply {
        ok: true,
        proposal,
        dedup,
    })
}

/// `GET /grants[?project=][&key=][&session=]`: the approved proposals.
pub async fn grants<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<GrantsReply>> {
    let project = p.text("project").map(str::to_string);
    let key = p.text("key").map(str::to_lowercase);
    let session = p.text("session").map(str::to_string);
    let mut rows = hub
        .store
        .read(move |tx| {
            let project = project.as_deref().map(|p| canon(tx, p)).transpose()?;
            Ok(Doc::load(tx)?
                .proposals
                .into_iter()
                .filter(|p| p.status == "approved")
                .filter(|p| project.as_ref().is_none_or(|x| &p.project == x))
                .filter(|p| key.as_ref().is_none_or(|x| &p.key == x))
                .filter(|p| session.as_ref().is_none_or(|x| &p.session == x))
                .map(|p| Grant {
                    id: p.id,
                    session: p.session,
                    project: p.project,
                    scope: p.scope,
                    condition: p.condition,
                    exclusions: p.exclusions,
                    key: p.key,
                    decided_by: p.decided_by,
                    decided_ts: p.decided_ts,
                    note: p.note,
                })
                .collect::<Vec<_>>())
        })
        .await?;
    let excess = rows.len().saturating_sub(PAGE);
    rows.drain(..excess);
    Ok(Json(GrantsReply { grants: rows }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proposal(id: i64, session: &str, project: &str, scope: &str, status: &str) -> Proposal {
        Proposal {
            id,
            session: session.into(),
            project: project.into(),
            scope: scope.into(),
            condition: "when asked".into(),
            status: status.into(),
            ..Proposal::default()
        }
    }

    #[test]
    fn intake_refuses_denied_dedups_pending_and_caps_the_queue() {
        let doc = Doc {
            seq: 4,
            proposals: vec![
                proposal(1, "a:p", "p", "push to main", "denied"),
                proposal(2, "a:p", "p", "run the bench", "pending"),
                proposal(3, "a:p", "q", "open ports", "pending"),
                proposal(4, "b:p", "p", "read logs", "pending"),
            ],
        };
        let verdict = |session: &str, project: &str, scope: &str, cap: usize| match intake(
            &doc,
            session,
            project,
            scope,
            "When, asked!",
            cap,
        ) {
            Err(e) => format!("{} {}", e.status.as_u16(), e.body["error"]),
            Ok(Some(dup)) => format!("dedup #{}", dup.id),
            Ok(None) => "file".to_string(),
        };
        let denied = "409 \"near-duplicate of a DENIED proposal";
        assert!(verdict("b:p", "p", "Push to  main.", 9).starts_with(denied));
        assert_eq!(verdict("b:p", "q", "push to main", 9), "file");
        assert_eq!(verdict("a:p", "p", "run the bench", 9), "dedup #2");
        assert_eq!(verdict("a:p", "p", "run the bench", 1), "dedup #2");
        assert!(verdict("a:p", "p", "other", 2).starts_with("409 \"queue full: 2/2"));
        assert_eq!(verdict("a:p", "p", "other", 3), "file");
        let full = verdict("c:p", "p", "read logs", 0);
        assert!(full.starts_with("409 \"queue full: 0/0"), "{full}");
    }
}
