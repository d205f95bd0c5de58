//! `trantor new <name>`: a new project folder with git on `main`, the `.trantor/project.json`
//! marker that names the project (so a moved or renamed checkout stays the same project; the
//! identity resolver reads it first), the brief in `BRIEF.md` and on the hub, and a first card.
//! It never starts a session.

use super::{Common, HubResult, print_json, usage};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use trantor_proto::identity::new_op_id;
use trantor_proto::identity::{PROJECT_MARKER, is_project_id};
use trantor_proto::{TaskCreateRequest, TaskReply};

pub(crate) const NEW_HELP: &str = concat!(
    "\
Creates <dir>/<name> (the directory must not exist, or be empty) with:
  .git                    `git init`, branch main, one first commit
  .trantor/project.json   {\"id\": \"<name>\", …}: the project's name on the hub, read before the
                          folder's name, so moving or renaming the folder keeps the project
  BRIEF.md                the brief (--brief FILE), kept in the repository
then posts the brief to the hub (POST /project, the first 600 characters) and adds the first card
\"genesis: <name>\". A hub that does not answer is said plainly: the folder is made all the same,
and `trantor card add` adds the card later. No agent session is started.

A name is 1–80 letters, digits, `.`, `_` or `-`, starting with a letter or digit.

Examples:
  trantor new shop
  trantor new shop --brief ~/notes/shop.md --dir ~/code

",
    exit_codes!()
);

/// `trantor new` options.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The project's name (also the folder's).
    pub name: String,
    /// A file with the project's brief (markdown), stored as BRIEF.md and posted to the hub.
    #[arg(long, value_name = "FILE")]
    pub brief: Option<PathBuf>,
    /// The folder the project is created in [default: the current directory].
    #[arg(long, value_name = "DIR", env = "TRANTOR_PROJECTS_DIR")]
    pub dir: Option<PathBuf>,
    /// Hub URL [default: RELAY_URL, else ~/.agent-bus/config.json, else http://127.0.0.1:4477].
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Print JSON (for scripts) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Run git in `dir`; its error output when it fails.
fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = trantor_proto::git::git_command(dir)
        .args(args)
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run git (is it installed?): {e}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Today's date in UTC, `YYYY-MM-DD`.
fn today() -> String {
    let (y, m, d) = trantor_proto::date::civil_from_days(trantor_proto::now_ms() / 86_400_000);
    format!("{y:04}-{m:02}-{d:02}")
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", d.display()))?;
    }
    std::fs::write(path, text).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

pub(crate) async fn new(a: NewArgs) -> anyhow::Result<ExitCode> {
    let name = a.name.trim().to_string();
    if !is_project_id(&name) {
        return Err(usage(format!(
            "'{name}' cannot name a project: use 1–80 letters, digits, `.`, `_` or `-`, starting \
             with a letter or digit"
        )));
    }
    // The brief is read before anything is made: a bad path leaves nothing behind.
    let brief = match &a.brief {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| usage(format!("cannot read the brief {}: {e}", p.display())))?
                .trim_end()
                .to_string(),
        ),
        None => None,
    };
    let parent = match &a.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    let dir = parent.join(&name);
    make_repository(&dir, &name, brief.as_deref())?;

    // The hub: the brief and the first card, as this project.
    let common = Common {
        url: a.url.clone(),
        project: Some(name.clone()),
        ..Common::default()
    };
    let (id, hub) = common.connect()?;
    let posted = post_genesis(&hub, &id.session, &name, &dir, brief.as_deref()).await;
    let (card, hub_error) = match posted {
        Ok(c) => (Some(c), None),
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    if a.json {
        print_json(&serde_json::json!({
            "name": name, "dir": dir.display().to_string(), "branch": "main",
            "hub": hub.base(), "card": card, "hubError": hub_error,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    say!("✓ {} (git, branch main, first commit)", dir.display());
    say!("✓ {PROJECT_MARKER} names the project {name}: moving or renaming the folder keeps it");
    if brief.is_some() {
        say!("✓ BRIEF.md holds the brief");
    }
    match (card, &hub_error) {
        (Some(c), _) => say!(
            "✓ hub {}: brief posted, card #{c} \"genesis: {name}\"",
            hub.base()
        ),
        (None, Some(e)) => say!(
            "! the brief and the first card are NOT on the hub: {e}\n  The folder is ready; once \
             a hub runs (`trantor setup`), `cd {} && trantor card add \"genesis: {name}\"`.",
            dir.display()
        ),
        (None, None) => {}
    }
    say!(
        "Next: cd {} && claude — then say \"fire up the crew\". No session was started.",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Make the project's folder (refused when it exists and is not empty): a git repository on
/// `main` with the project marker, a README, the brief, and a first commit.
fn make_repository(dir: &Path, name: &str, brief: Option<&str>) -> anyhow::Result<()> {
    if dir.exists() {
        let empty = std::fs::read_dir(dir)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false);
        if !empty {
            return Err(usage(format!(
                "{} already exists and is not empty: pick another name or --dir",
                dir.display()
            )));
        }
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    git(dir, &["init", "-q"])?;
    git(dir, &["symbolic-ref", "HEAD", "refs/heads/main"])?;
    let marker = serde_json::json!({
        "id": name,
        "since": today(),
        "by": "trantor new",
    });
    write(
        &dir.join(PROJECT_MARKER),
        &(serde_json::to_string_pretty(&marker)? + "\n"),
    )?;
    let readme = match brief {
        Some(_) => format!("# {name}\n\nThe project's brief is in `BRIEF.md`.\n"),
        None => format!("# {name}\n"),
    };
    write(&dir.join("README.md"), &readme)?;
    if let Some(b) = brief {
        write(&dir.join("BRIEF.md"), &format!("{b}\n"))?;
    }
    git(dir, &["add", "-A"])?;
    // A machine without a git identity still gets its first commit.
    let has_identity = git(dir, &["config", "user.email"]).is_ok_and(|e| !e.is_empty());
    let mut commit: Vec<&str> = Vec::new();
    if !has_identity {
        commit.extend([
            "-c",
            "user.name=trantor",
            "-c",
            "user.email=trantor@localhost",
        ]);
    }
    let msg = format!("trantor new: {name}");
    commit.extend(["commit", "-q", "-m", &msg]);
    git(dir, &commit)?;
    Ok(())
}

/// Post the project's brief and its genesis card (assigned to `session`); returns the card.
async fn post_genesis(
    hub: &trantor_proto::HubClient,
    session: &str,
    name: &str,
    dir: &Path,
    brief: Option<&str>,
) -> anyhow::Result<i64> {
    let brief_for_hub: String = brief
        .map(str::to_string)
        .unwrap_or_else(|| format!("{name}: created by trantor new."))
        .chars()
        .take(trantor_proto::limits::BRIEF)
        .collect();
    let body = serde_json::json!({"project": name, "brief": brief_for_hub, "by": session});
    let _: serde_json::Value = hub
        .post_with_op("/project", &body, &new_op_id())
        .await
        .hub(hub)?;
    let req = TaskCreateRequest {
        project: Some(name.to_string()),
        title: format!("genesis: {name}"),
        status: Some("todo".into()),
        assignee: Some(session.to_string()),
        by: Some(session.to_string()),
        note: Some(format!(
            "project created by trantor new in {}{}",
            dir.display(),
            if brief.is_some() {
                "; the brief is in BRIEF.md"
            } else {
                ""
            }
        )),
        ..Default::default()
    };
    let reply: TaskReply = hub
        .post_with_op("/task", &req, &new_op_id())
        .await
        .hub(hub)?;
    Ok(reply.task.id)
}
