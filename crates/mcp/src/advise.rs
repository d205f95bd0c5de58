//! The Advisor's view of this machine: the agent CLIs installed and checked against the runner's
//! driver table, the person's plan profile and the model-table overrides of the config
//! (docs/protocol.md §14.1). `relay_advise` and `trantor advise` send these to `POST /advise`.

use std::path::{Path, PathBuf};
use std::time::Duration;
use trantor_proto::advise::{CliInfo, ModelRow, PlanEntry, Profile, check_plan};
use trantor_runner::drivers::{DRIVERS, VersionCheck, check_version};

/// How long one `<cli> --version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(15);

/// The first executable `name` on PATH.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// What `<path> --version` printed, stdout then stderr. Its stdin is closed; past `within` it
/// is killed and the error is [`std::io::ErrorKind::TimedOut`].
pub async fn version_output(path: &Path, within: Duration) -> std::io::Result<String> {
    let out = tokio::time::timeout(
        within,
        tokio::process::Command::new(path)
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    Ok(format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

async fn probe(agent: &'static str, path: PathBuf) -> CliInfo {
    let text = match version_output(&path, VERSION_TIMEOUT).await {
        Ok(t) => t,
        Err(e) => {
            let detail = if e.kind() == std::io::ErrorKind::TimedOut {
                format!("`{} --version` gave no answer", path.display())
            } else {
                format!("{} cannot run: {e}", path.display())
            };
            return CliInfo {
                agent: agent.into(),
                version: None,
                usable: false,
                detail,
            };
        }
    };
    let Some(spec) = trantor_runner::drivers::spec(agent) else {
        return CliInfo {
            agent: agent.into(),
            version: None,
            usable: false,
            detail: "no driver".into(),
        };
    };
    let range = spec.verified.unwrap_or("none");
    let (version, usable, detail) = match check_version(spec, &text) {
        VersionCheck::Verified(v) => (Some(v.to_string()), true, format!("{v}: verified")),
        VersionCheck::Newer(v) => (
            Some(v.to_string()),
            true,
            format!("{v}: newer than the verified range {range}"),
        ),
        VersionCheck::Unverified(v) => (
            v.as_ref().map(|v| v.to_string()),
            true,
            "driver not verified against a real install".into(),
        ),
        VersionCheck::Older(v) => (
            Some(v.to_string()),
            false,
            format!("{v}: older than the verified range {range}"),
        ),
        VersionCheck::Unknown => (None, false, "`--version` printed no version".into()),
    };
    CliInfo {
        agent: agent.into(),
        version,
        usable,
        detail,
    }
}

/// Every agent CLI of the driver table found on PATH, with its version checked.
pub async fn installed_clis() -> Vec<CliInfo> {
    let mut set = tokio::task::JoinSet::new();
    for d in DRIVERS {
        if let Some(p) = find_on_path(d.program) {
            set.spawn(probe(d.name, p));
        }
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Ok(c) = r {
            out.push(c);
        }
    }
    out.sort_by(|a, b| a.agent.cmp(&b.agent));
    out
}

/// Where the plan profile lives.
pub fn profile_path(bus: &Path) -> PathBuf {
    bus.join("profile.json")
}

/// The profile on disk; an absent file is the empty profile, an unreadable one is an error.
pub fn load_profile(bus: &Path) -> anyhow::Result<Option<Profile>> {
    let p = profile_path(bus);
    let text = match std::fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow::anyhow!("cannot read {}: {e}", p.display())),
    };
    let prof: Profile = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{} is not a plan profile: {e}", p.display()))?;
    for (agent, entry) in &prof.providers {
        check_plan(agent, &entry.plan).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
    }
    Ok(Some(prof))
}

/// Apply `agent=plan` pairs to the profile on disk (all checked before anything is written).
pub fn set_plans(bus: &Path, pairs: &[String]) -> anyhow::Result<Profile> {
    let mut prof = load_profile(bus)?.unwrap_or_default();
    let mut parsed = Vec::new();
    for a in pairs {
        let Some((agent, plan)) = a.split_once('=') else {
            anyhow::bail!("'{a}' is not provider=plan, e.g. claude=max");
        };
        let (agent, plan) = (agent.trim().to_lowercase(), plan.trim().to_lowercase());
        check_plan(&agent, &plan)?;
        parsed.push((agent, plan));
    }
    if parsed.is_empty() {
        anyhow::bail!("nothing to set: give provider=plan pairs, e.g. claude=max codex=plus");
    }
    for (agent, plan) in parsed {
        prof.providers.insert(agent, PlanEntry { plan });
    }
    std::fs::create_dir_all(bus)?;
    let mut doc = serde_json::to_value(&prof)?;
    // The original's readers also take a tier and a date; keep both in the file.
    if let Some(provs) = doc.get_mut("providers").and_then(|p| p.as_object_mut()) {
        for v in provs.values_mut() {
            let plan = v.get("plan").and_then(|p| p.as_str()).unwrap_or("api");
            let tier = match trantor_proto::advise::plan_kind(plan) {
                Some(trantor_proto::advise::PlanKind::Api) => "api",
                Some(trantor_proto::advise::PlanKind::High) => "high-sub",
                Some(trantor_proto::advise::PlanKind::None) => "none",
                _ => "capped-sub",
            };
            if let Some(o) = v.as_object_mut() {
                o.insert("tier".into(), tier.into());
            }
        }
    }
    doc["updated"] = iso_day(trantor_proto::now_ms()).into();
    let text = format!("{}\n", serde_json::to_string_pretty(&doc)?);
    trantor_proto::fsx::write_atomic(&profile_path(bus), text.as_bytes())?;
    Ok(prof)
}

/// Model-table rows from the bus config (`config.json` → `advisor.models`), replacing or
/// extending the built-in table.
pub fn config_models(bus: &Path) -> anyhow::Result<Vec<ModelRow>> {
    let p = bus.join("config.json");
    let Ok(text) = std::fs::read_to_string(&p) else {
        return Ok(Vec::new());
    };
    let v: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(_) => return Ok(Vec::new()),
    };
    match v.get("advisor").and_then(|a| a.get("models")) {
        None => Ok(Vec::new()),
        Some(m) => serde_json::from_value(m.clone()).map_err(|e| {
            anyhow::anyhow!(
                "{}: advisor.models must be a list of {{agent, model, tier, usdIn, usdOut}}: {e}",
                p.display()
            )
        }),
    }
}

/// `YYYY-MM-DD` of a time in ms (UTC).
pub fn iso_day(ms: i64) -> String {
    let (y, m, d) = trantor_proto::date::civil_from_days(ms.div_euclid(86_400_000));
    format!("{y:04}-{m:02}-{d:02}")
}

/// The whole request as this machine sees it.
pub async fn request(
    task: String,
    packages: Vec<trantor_proto::advise::Package>,
    horizon: Option<String>,
    project: &str,
    bus: &Path,
) -> anyhow::Result<trantor_proto::advise::AdviseRequest> {
    let models = config_models(bus)?;
    Ok(trantor_proto::advise::AdviseRequest {
        task,
        packages,
        horizon,
        project: Some(project.to_string()),
        clis: Some(installed_clis().await),
        profile: load_profile(bus)?,
        models: (!models.is_empty()).then_some(models),
        seats: None,
        ledger: None,
    })
}

/// The advice as text for the person's session: the summary, the table, the seats to start,
/// what was left out, then the whole answer as JSON (routes, estimate, `card_args`).
pub fn render(a: &trantor_proto::advise::Advice) -> String {
    let mut s = format!("{}\n\n{}", a.summary, a.routing_table_md);
    if !a.seats.up.is_empty() {
        s.push_str(&format!(
            "\nStart the seats (after the person says go): trantor up {}\n",
            a.seats.up.join(" ")
        ));
    }
    if !a.unavailable.is_empty() {
        s.push_str(&format!("\nNot routed to: {}\n", a.unavailable.join("; ")));
    }
    s.push_str("\nFull advice (card_args are ready relay_task_add calls):\n");
    s.push_str(&serde_json::to_string_pretty(a).unwrap_or_default());
    s
}
