//! `trantor autonomy`: the dials `trantor integrate` obeys, stored on the hub in `/policy`.
//!
//! Three dials per project: `commit` (integrate may commit a seat's uncommitted work and move
//! the integration branch; on by default), `push` (integrate may push after a passed verify; off
//! by default) and `reroute` (a contract held by a seat whose credential is spent may move to a
//! live seat of another agent, docs/protocol.md §5.9; off by default). `*` sets the default for every project. The original's autonomy levels (1–4)
//! stay in `/policy` unchanged and are shown beside the dials.

use super::{Common, HubResult, print_json, usage};
use serde_json::{Map, Value, json};
use std::process::ExitCode;
use trantor_proto::{PolicyReply, PolicyRequest};

pub(crate) const AUTONOMY_HELP: &str = concat!(
    "Examples:\n  trantor autonomy                    # show this project's dials\n  \
     trantor autonomy set push on        # let integrate push after a passed verify\n  \
     trantor autonomy set commit off --project web\n  \
     trantor autonomy set reroute on     # move contracts off seats whose quota is spent\n\n",
    "commit: integrate may commit seats' uncommitted work and move the integration branch \
     (default on).\npush: integrate may push the integration branch after verify passes \
     (default off).\nreroute: a contract held by a seat whose credential is exhausted or refused \
     moves to a live seat of another agent, noted on the card (default off).\n\n",
    exit_codes!()
);

/// `trantor autonomy` options.
#[derive(Debug, clap::Args)]
pub struct AutonomyArgs {
    /// `show` (default) or `set <commit|push|reroute> <on|off>`.
    #[arg(num_args = 0..=3, value_name = "show|set DIAL on|off")]
    pub words: Vec<String>,
    #[command(flatten)]
    pub common: Common,
}

/// The dials of one project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Dials {
    /// Integrate may commit and move the integration branch.
    pub commit: bool,
    /// Integrate may push.
    pub push: bool,
    /// Contracts on a spent credential may move to another agent's seat.
    pub reroute: bool,
}

impl Default for Dials {
    fn default() -> Self {
        Dials {
            commit: true,
            push: false,
            reroute: false,
        }
    }
}

/// The dials in force for `project`: its own setting, else `*`, else the defaults.
pub(crate) fn dials_for(policy: &PolicyReply, project: &str) -> Dials {
    let mut d = Dials::default();
    for key in ["*", project] {
        if let Some(o) = policy.dials.get(key).and_then(|v| v.as_object()) {
            if let Some(b) = o.get("commit").and_then(|v| v.as_bool()) {
                d.commit = b;
            }
            if let Some(b) = o.get("push").and_then(|v| v.as_bool()) {
                d.push = b;
            }
            if let Some(b) = o.get("reroute").and_then(|v| v.as_bool()) {
                d.reroute = b;
            }
        }
    }
    d
}

fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// Run `trantor autonomy`.
pub(crate) async fn autonomy(a: AutonomyArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let words: Vec<&str> = a.words.iter().map(|s| s.as_str()).collect();
    match words.as_slice() {
        [] | ["show"] => {}
        ["set", dial, value] => {
            let dial = dial.to_lowercase();
            if !["commit", "push", "reroute"].contains(&dial.as_str()) {
                return Err(usage(format!(
                    "unknown dial '{dial}': the dials are commit, push and reroute"
                )));
            }
            let on = match value.to_lowercase().as_str() {
                "on" | "true" | "yes" => true,
                "off" | "false" | "no" => false,
                v => return Err(usage(format!("'{v}' is not on or off"))),
            };
            let mut change = Map::new();
            change.insert(dial.clone(), json!(on));
            let mut dials = Map::new();
            dials.insert(id.project.clone(), Value::Object(change));
            let req = PolicyRequest {
                dials: Some(dials),
                by: Some(id.session.clone()),
                ..Default::default()
            };
            let _: Value = hub.post("/policy", &req).await.hub(&hub)?;
        }
        _ => {
            return Err(usage(
                "use `trantor autonomy show` or `trantor autonomy set <commit|push|reroute> <on|off>`",
            ));
        }
    }
    let policy = hub.policy().await.hub(&hub)?;
    let d = dials_for(&policy, &id.project);
    let level = policy
        .autonomy
        .get(&id.project)
        .or_else(|| policy.autonomy.get("*"))
        .cloned()
        .unwrap_or(json!(1));
    if a.common.json {
        print_json(&json!({"project": id.project, "dials": d, "autonomy": level}))?;
    } else {
        say!(
            "{}: commit {} · push {} · reroute {} (autonomy level {level})",
            id.project,
            on_off(d.commit),
            on_off(d.push),
            on_off(d.reroute)
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_dials_override_the_star_default() {
        let mut p = PolicyReply::default();
        assert_eq!(dials_for(&p, "web"), Dials::default());
        p.dials.insert("*".into(), json!({"push": true}));
        p.dials.insert("web".into(), json!({"commit": false}));
        assert_eq!(
            dials_for(&p, "web"),
            Dials {
                commit: false,
                push: true,
                reroute: false
            }
        );
        assert_eq!(
            dials_for(&p, "api"),
            Dials {
                commit: true,
                push: true,
                reroute: false
            }
        );
    }
}
