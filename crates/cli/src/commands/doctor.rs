//! `trantor doctor`: is everything a crew needs in place, and what to run where it is not.

use super::connect::{Wiring, inspect, targets};
use super::{Common, find_on_path, print_json};
use serde_json::{Value, json};
use std::process::ExitCode;
use trantor_mcp::Identity;
use trantor_proto::{HealthReply, HubClient};

pub(crate) const DOCTOR_HELP: &str = concat!(
    "\
Checks, in order: the hub (reachable, version, store and its health), this terminal's identity
(session, project, how the hub was chosen), tmux (used by `trantor up`), and each agent CLI
(on PATH? does it load `trantor mcp`?). Every problem comes with the command that fixes it.
Exits 1 when there is a problem, 3 when the hub is unreachable.

Examples:
  trantor doctor
  trantor doctor --json
  trantor doctor --url http://127.0.0.1:4478

",
    exit_codes!()
);

/// `trantor doctor` options.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub common: Common,
}

/// Agent CLIs the runner has drivers for, beyond the four `connect` wires.
const OTHER_AGENTS: [&str; 2] = ["gemini", "dsh"];

struct Check {
    name: String,
    ok: bool,
    detail: String,
    fix: Option<String>,
}

impl Check {
    fn json(&self) -> Value {
        json!({"check": self.name, "ok": self.ok, "detail": self.detail, "fix": self.fix})
    }
}

/// `<cli> --version` compared with the driver table's verified range. Older than verified is a
/// problem (the runner's command line may not be understood); newer is reported, not failed.
async fn version_check(
    label: &str,
    path: &std::path::Path,
    spec: &trantor_runner::drivers::DriverSpec,
) -> Check {
    use trantor_runner::drivers::{VersionCheck, check_version};
    let within = std::time::Duration::from_secs(20);
    let text = match trantor_mcp::advise::version_output(path, within).await {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => "no answer within 20 s".to_string(),
        Err(e) => format!("cannot run: {e}"),
    };
    let range = spec.verified.unwrap_or("none");
    let install = spec
        .verified_with
        .map(|v| format!("install the verified version ({} {v})", spec.program));
    let (ok, detail, fix) = match check_version(spec, &text) {
        VersionCheck::Verified(v) => (
            true,
            format!("{v}: inside the verified range {range}"),
            None,
        ),
        VersionCheck::Newer(v) => (
            true,
            format!("{v}: newer than the verified range {range} (expected to work, not verified)"),
            None,
        ),
        VersionCheck::Older(v) => (
            false,
            format!(
                "{v}: older than the verified range {range}; the runner's command line may not be understood"
            ),
            install,
        ),
        VersionCheck::Unverified(v) => (
            true,
            format!(
                "{}: this driver has not been verified against a real install",
                v.map(|v| v.to_string())
                    .unwrap_or_else(|| "version unknown".into())
            ),
            None,
        ),
        VersionCheck::Unknown => (
            false,
            format!(
                "`{} --version` printed no version: {}",
                path.display(),
                text.trim().chars().take(120).collect::<String>()
            ),
            install,
        ),
    };
    Check {
        name: format!("{label} version"),
        ok,
        detail,
        fix,
    }
}

pub(crate) async fn doctor(a: DoctorArgs) -> anyhow::Result<ExitCode> {
    let id = a.common.identity();
    let hub = HubClient::new(id.hub_url.clone())
        .with_timeout(std::time::Duration::from_secs(3))
        .with_optional_signer(super::session_signer(&id)?);
    let mut checks = Vec::new();
    let mut hub_down = false;

    match hub.health().await {
        Ok(h) => checks.extend(health_checks(&h, &id)),
        Err(e) => {
            hub_down = e.is_unreachable();
            checks.push(hub_down_check(&e, &id));
        }
    }

    if !hub_down && let Ok(p) = hub.policy().await {
        checks.push(policy_check(&p, &id.project));
    }

    checks.push(Check {
        name: "identity".into(),
        ok: true,
        detail: format!(
            "this terminal is {} in project {} (session from {})",
            id.session, id.project, id.session_via
        ),
        fix: None,
    });

    let tmux = find_on_path("tmux");
    checks.push(Check {
        name: "tmux".into(),
        ok: true,
        detail: match &tmux {
            Some(p) => format!("{} (trantor up opens one window per seat)", p.display()),
            None => "not installed: trantor up runs seats as background processes with logs".into(),
        },
        fix: None,
    });

    let home = trantor_proto::identity::home(&trantor_proto::identity::ProcessEnv);
    let any_agent = agent_checks(&home, &mut checks).await;
    if !any_agent {
        checks.push(Check {
            name: "agents".into(),
            ok: true,
            detail: "no agent CLI on PATH: `trantor demo` still works, and any CLI runs through the command driver (CREW_COMMAND)".into(),
            fix: None,
        });
    }

    let problems = checks.iter().filter(|c| !c.ok).count();
    if a.common.json {
        print_json(&json!({
            "ok": problems == 0,
            "session": id.session,
            "project": id.project,
            "hub": id.hub_url,
            "checks": checks.iter().map(Check::json).collect::<Vec<_>>(),
        }))?;
    } else {
        print_checks(&checks, problems);
    }
    Ok(ExitCode::from(if hub_down {
        3
    } else if problems > 0 {
        1
    } else {
        0
    }))
}

/// The checks read from the hub's `/health` answer: the hub, its store, its duty service.
fn health_checks(h: &HealthReply, id: &Identity) -> Vec<Check> {
    let version = h.version.as_deref().unwrap_or("unknown");
    let hub = Check {
        name: "hub".into(),
        ok: true,
        detail: format!(
            "{} answers (version {version}; via {})",
            id.hub_url, id.hub_via
        ),
        fix: None,
    };
    let store = h.store.as_deref().unwrap_or("unknown");
    let persist_ok = h.persist.ok;
    let last_error = &h.persist.last_error;
    let counts = [
        ("messages", Some(h.messages)),
        ("cards", h.cards),
        ("peers", Some(h.peers)),
    ]
    .iter()
    .filter_map(|(k, n)| n.map(|n| format!("{n} {k}")))
    .collect::<Vec<_>>()
    .join(", ");
    let store = Check {
        name: "store".into(),
        ok: persist_ok,
        detail: if persist_ok {
            format!("{store} healthy ({counts})")
        } else {
            format!("{store} is failing to persist: {last_error}")
        },
        fix: (!persist_ok).then(|| {
            "check the disk under the hub's data dir (RELAY_DATA_DIR), then restart `trantor hub`"
                .to_string()
        }),
    };
    vec![hub, store, duty_check(&h.duty)]
}

/// The hub check when `/health` failed, with how to start or choose one.
fn hub_down_check(e: &trantor_proto::ClientError, id: &Identity) -> Check {
    Check {
        name: "hub".into(),
        ok: false,
        detail: format!("{} (via {}): {e}", id.hub_url, id.hub_via),
        fix: Some(if id.hub_via == "default" {
            "start one: `trantor hub &` (or `trantor up <agent>` starts one for you)".into()
        } else {
            format!(
                "start a hub at {} or fix {} (it chose this URL)",
                id.hub_url, id.hub_via
            )
        }),
    }
}

/// The project's integrate dials and links, from the hub's policy.
fn policy_check(p: &trantor_proto::PolicyReply, project: &str) -> Check {
    let d = super::autonomy::dials_for(p, project);
    let on = |b: bool| if b { "on" } else { "off" };
    let mine: Vec<String> = p
        .links
        .iter()
        .filter(|l| l.projects.iter().any(|x| x.eq_ignore_ascii_case(project)))
        .map(|l| format!("{} ({})", l.projects.join("↔"), l.reason))
        .collect();
    Check {
        name: "policy".into(),
        ok: true,
        detail: format!(
            "{}: integrate dials commit {} · push {}; links: {}",
            project,
            on(d.commit),
            on(d.push),
            if mine.is_empty() {
                "none (its seats stay in the project)".to_string()
            } else {
                mine.join(", ")
            }
        ),
        fix: None,
    }
}

/// One check per agent CLI `connect` wires (and its version), the hooks, and the other agents
/// on PATH; returns whether any agent CLI is on PATH.
async fn agent_checks(home: &std::path::Path, checks: &mut Vec<Check>) -> bool {
    let mut any_agent = false;
    for t in targets(home) {
        let on_path = find_on_path(t.binary);
        any_agent |= on_path.is_some();
        let wiring = inspect(&t);
        let plugin = t.name == "claude" && super::plugin::enabled(home);
        let (ok, detail, fix) = wiring_verdict(&t, on_path.as_deref(), wiring, plugin);
        checks.push(Check {
            name: t.label.into(),
            ok,
            detail,
            fix,
        });
        if let (Some(p), Some(spec)) = (&on_path, trantor_runner::drivers::spec(t.name)) {
            checks.push(version_check(t.label, p, spec).await);
        }
    }
    checks.push(hooks_check(home, find_on_path("claude").is_some()));
    for name in OTHER_AGENTS {
        if let Some(p) = find_on_path(name) {
            any_agent = true;
            if let Some(spec) = trantor_runner::drivers::spec(name) {
                checks.push(version_check(name, &p, spec).await);
            }
            checks.push(Check {
                name: name.into(),
                ok: true,
                detail: format!(
                    "{} (runner driver; its MCP is configured by the runner)",
                    p.display()
                ),
                fix: None,
            });
        }
    }
    any_agent
}

/// Whether an agent CLI loads `trantor mcp`, from where it is on PATH, its MCP entry and
/// (claude) the plugin: (ok, detail, fix).
fn wiring_verdict(
    t: &super::connect::Target,
    on_path: Option<&std::path::Path>,
    wiring: Wiring,
    plugin: bool,
) -> (bool, String, Option<String>) {
    let found = || {
        on_path
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "not on PATH".into())
    };
    match (on_path, wiring) {
        (_, Wiring::Missing) if plugin => (
            true,
            format!(
                "loads `trantor mcp` through the trantor plugin ({}, `trantor plugin install`)",
                super::plugin::PLUGIN_ID
            ),
            None,
        ),
        (None, Wiring::Missing) => (true, "not installed".to_string(), None),
        (_, Wiring::Ours(cmd)) => {
            let exists = std::path::Path::new(&cmd).is_absolute()
                && std::path::Path::new(&cmd).exists()
                || find_on_path(&cmd).is_some();
            if exists {
                (
                    true,
                    format!("{}; loads `{cmd} mcp` ({})", found(), t.path.display()),
                    None,
                )
            } else {
                (
                    false,
                    format!(
                        "{}; its trantor entry runs {cmd}, which no longer exists",
                        found()
                    ),
                    Some(format!("trantor connect --only {}", t.name)),
                )
            }
        }
        (_, Wiring::Http(url)) => (
            true,
            format!(
                "{}; reaches the hub's MCP at {url} over HTTP, no local binary ({})",
                found(),
                t.path.display()
            ),
            None,
        ),
        (_, Wiring::Foreign(cmd)) => (
            false,
            format!("its `trantor` MCP entry runs `{cmd}`, not `trantor mcp`"),
            Some(format!("trantor connect --only {} --force", t.name)),
        ),
        (_, Wiring::Broken(e)) => (false, e, Some(format!("repair {}", t.path.display()))),
        (Some(p), Wiring::Missing) => (
            false,
            format!("{} is installed but does not load trantor mcp", p.display()),
            Some(format!("trantor connect --only {}", t.name)),
        ),
    }
}

/// The checks for a person, one line each with its fix under it.
fn print_checks(checks: &[Check], problems: usize) {
    for c in checks {
        say!(
            "{} {:<12} {}",
            if c.ok { "✓" } else { "✗" },
            c.name,
            c.detail
        );
        if let Some(f) = &c.fix {
            say!("  {:<12} fix: {f}", "");
        }
    }
    if problems == 0 {
        say!("all good");
    } else {
        say!("{problems} problem(s)");
    }
}

/// The hub's duty service: configured, dark, recent failed nudges.
fn duty_check(d: &Value) -> Check {
    if d["configured"].as_bool() != Some(true) {
        return Check {
            name: "duty".into(),
            ok: true,
            detail: "no duty session: unread mail is not escalated".into(),
            fix: None,
        };
    }
    let session = d["session"].as_str().unwrap_or("?");
    let dark = d["dark"].as_bool() == Some(true);
    let failures = d["failures"].as_array().cloned().unwrap_or_default();
    let mut detail = format!(
        "{session} {}; {} escalation(s) queued",
        if dark {
            "is DARK (escalations go back to the senders)"
        } else {
            "is on duty"
        },
        d["queuedEscalations"]
    );
    if let Some(f) = failures.last() {
        detail.push_str(&format!(
            "; {} failed nudge(s), last: {} {} ({})",
            failures.len(),
            f["recipient"].as_str().unwrap_or("?"),
            f["kind"].as_str().unwrap_or("?"),
            f["text"].as_str().unwrap_or("")
        ));
    }
    Check {
        name: "duty".into(),
        ok: !dark && failures.is_empty(),
        detail,
        fix: dark
            .then(|| "start the duty seat: `trantor duty up` (or `trantor duty status`)".into()),
    }
}

/// Whether the Claude Code hooks are installed; the other CLIs have none to wire. Without
/// Claude Code on PATH there is no session to hook, so none installed is no fix to make.
fn hooks_check(home: &std::path::Path, claude_on_path: bool) -> Check {
    let path = super::hook_install::settings_path(home);
    if super::plugin::enabled(home) {
        return Check {
            name: "hooks".into(),
            ok: true,
            detail: format!(
                "Claude Code runs the trantor hooks through the plugin {} (Codex, OpenCode and \
                 Kimi get no session hooks: their seats receive messages through the runner)",
                super::plugin::PLUGIN_ID
            ),
            fix: None,
        };
    }
    let (ok, detail, fix) = match super::hook_install::installed_hooks(home) {
        Ok(n) if n == super::hook::Event::ALL.len() => (
            true,
            format!(
                "Claude Code hands crew messages to an interactive session ({}); Codex, OpenCode \
                 and Kimi get no session hooks: their seats receive messages through the runner",
                path.display()
            ),
            None,
        ),
        Ok(0) if !claude_on_path => (
            true,
            "none: Claude Code is not installed here, so there is no session of yours to hook \
             (Codex, OpenCode and Kimi have no session hooks; their seats get messages through \
             the runner)"
                .to_string(),
            None,
        ),
        Ok(0) => (
            true,
            "not installed: your own Claude Code session does not see crew replies until you run \
             `trantor inbox` (Codex, OpenCode and Kimi have no session hooks; their seats get \
             messages through the runner)"
                .to_string(),
            Some("trantor connect --only claude".to_string()),
        ),
        Ok(n) => (
            false,
            format!(
                "{n} of the {} Claude Code hooks are in {}",
                super::hook::Event::ALL.len(),
                path.display()
            ),
            Some("trantor connect --only claude".to_string()),
        ),
        Err(e) => (false, e, Some(format!("repair {}", path.display()))),
    };
    Check {
        name: "hooks".into(),
        ok,
        detail,
        fix,
    }
}
