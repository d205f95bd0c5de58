//! `trantor credentials`: named credentials (docs/protocol.md §7.7). Secrets go to the bus
//! directory's 0600 `credentials.json`; the hub learns only the name and the agent.

use super::{Common, HubResult, print_json, table, usage};
use std::collections::BTreeMap;
use std::process::ExitCode;
use trantor_proto::credentials::{
    self as cred, CredentialFile, CredentialRemove, CredentialReply, CredentialRequest,
    CredentialsReply, LocalCredential,
};

pub(crate) const CREDENTIALS_HELP: &str = concat!(
    "\
A credential is an account or API key seats run on. Its variables stay in
<bus>/credentials.json (mode 0600) on this machine; the hub keeps only its name and agent. A seat
runs on one with CREW_CREDENTIAL=<name> (the runner puts its variables in the CLI's
environment), and every turn's cost is attributed to it (trantor cost --by credential).

Examples:
  trantor credentials add work --agent claude --env ANTHROPIC_API_KEY=sk-ant-…
  trantor credentials add team --agent codex --config-dir ~/.codex-team
  trantor credentials list
  trantor credentials remove work

",
    exit_codes!()
);

/// `trantor credentials` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum CredentialsCommand {
    /// Add (or replace) a credential.
    Add(AddArgs),
    /// List the credentials: this machine's (variable names only) and the hub's state.
    List(ListArgs),
    /// Remove a credential here and on the hub.
    Remove(RemoveArgs),
}

/// `trantor credentials add` options.
#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// Its name (letters, digits, `.`, `_`, `-`).
    pub name: String,
    /// The agent it is for: claude, codex or opencode.
    #[arg(long, value_parser = ["claude", "codex", "opencode"])]
    pub agent: String,
    /// A variable for the CLI's environment, KEY=VALUE (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// The CLI's own configuration directory holding its login (claude: CLAUDE_CONFIG_DIR,
    /// codex: CODEX_HOME).
    #[arg(long, value_name = "DIR")]
    pub config_dir: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

/// `trantor credentials list` options.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: Common,
}

/// `trantor credentials remove` options.
#[derive(Debug, clap::Args)]
pub struct RemoveArgs {
    /// The credential's name.
    pub name: String,
    #[command(flatten)]
    pub common: Common,
}

fn bus() -> std::path::PathBuf {
    trantor_proto::identity::bus_dir(&trantor_proto::identity::ProcessEnv)
}

/// The variables of `add`: the `--env` pairs, then the config directory's variable.
pub(crate) fn env_of(
    agent: &str,
    pairs: &[String],
    config_dir: Option<&std::path::Path>,
) -> Result<BTreeMap<String, String>, String> {
    let mut env = BTreeMap::new();
    for p in pairs {
        let Some((k, v)) = p.split_once('=') else {
            return Err(format!("--env wants KEY=VALUE, not {p:?}"));
        };
        let k = k.trim();
        if k.is_empty()
            || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || k.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(format!("{k:?} is not a variable name"));
        }
        env.insert(k.to_string(), v.to_string());
    }
    if let Some(d) = config_dir {
        let var = match agent {
            "claude" => "CLAUDE_CONFIG_DIR",
            "codex" => "CODEX_HOME",
            other => return Err(format!("--config-dir is not known for {other}; use --env")),
        };
        env.insert(var.to_string(), d.to_string_lossy().into_owned());
    }
    if env.is_empty() {
        return Err("give the credential's variables: --env KEY=VALUE or --config-dir DIR".into());
    }
    Ok(env)
}

pub(crate) async fn credentials(cmd: CredentialsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        CredentialsCommand::Add(a) => add(a).await,
        CredentialsCommand::List(a) => list(a).await,
        CredentialsCommand::Remove(a) => remove(a).await,
    }
}

async fn add(a: AddArgs) -> anyhow::Result<ExitCode> {
    if !cred::valid_name(&a.name) {
        return Err(usage(format!(
            "{:?}: a name is 1-64 letters, digits, '.', '_' or '-'",
            a.name
        )));
    }
    let env = env_of(&a.agent, &a.env, a.config_dir.as_deref()).map_err(usage)?;
    let bus = bus();
    let mut file = CredentialFile::load(&bus)?;
    file.credentials.insert(
        a.name.clone(),
        LocalCredential {
            agent: a.agent.clone(),
            env,
        },
    );
    file.save(&bus)?;
    let (_, hub) = a.common.connect()?;
    let reply: CredentialReply = hub
        .post(
            "/credentials",
            &CredentialRequest {
                name: a.name.clone(),
                agent: a.agent.clone(),
            },
        )
        .await
        .hub(&hub)?;
    if a.common.json {
        print_json(&reply)?;
    } else {
        say!(
            "credential {} ({}) saved in {} (0600); the hub knows its name",
            a.name,
            a.agent,
            CredentialFile::path(&bus).display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(a: ListArgs) -> anyhow::Result<ExitCode> {
    let file = CredentialFile::load(&bus())?;
    let (_, hub) = a.common.connect()?;
    let reply: CredentialsReply = hub.get("/credentials", &[]).await.hub(&hub)?;
    if a.common.json {
        print_json(&reply)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut names: Vec<&String> = file.credentials.keys().collect();
    for c in &reply.credentials {
        if !file.credentials.contains_key(&c.name) {
            names.push(&c.name);
        }
    }
    if names.is_empty() {
        say!(
            "no credentials (add one: trantor credentials add <name> --agent claude --env KEY=VALUE)"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = names
        .iter()
        .map(|n| {
            let local = file.credentials.get(*n);
            let on_hub = reply.credentials.iter().find(|c| &c.name == *n);
            vec![
                n.to_string(),
                local
                    .map(|l| l.agent.clone())
                    .or_else(|| on_hub.map(|c| c.agent.clone()))
                    .unwrap_or_default(),
                on_hub
                    .map(|c| match c.until {
                        Some(u) => format!(
                            "{} until {}",
                            c.state,
                            trantor_proto::date::fmt_utc_minutes(u)
                        ),
                        None => c.state.clone(),
                    })
                    .unwrap_or_else(|| "not on the hub".into()),
                on_hub
                    .map(|c| c.seats.len().to_string())
                    .unwrap_or_default(),
                // Variable names only: the values are secrets.
                local
                    .map(|l| l.env.keys().cloned().collect::<Vec<_>>().join(" "))
                    .unwrap_or_else(|| "(not on this machine)".into()),
            ]
        })
        .collect();
    say!(
        "{}",
        table::render(&["NAME", "AGENT", "STATE", "SEATS", "VARIABLES"], &rows)
    );
    Ok(ExitCode::SUCCESS)
}

async fn remove(a: RemoveArgs) -> anyhow::Result<ExitCode> {
    let bus = bus();
    let mut file = CredentialFile::load(&bus)?;
    let here = file.credentials.remove(&a.name).is_some();
    if here {
        file.save(&bus)?;
    }
    let (_, hub) = a.common.connect()?;
    let reply: CredentialReply = hub
        .post(
            "/credentials/remove",
            &CredentialRemove {
                name: a.name.clone(),
            },
        )
        .await
        .hub(&hub)?;
    if a.common.json {
        print_json(&reply)?;
    } else if !here && !reply.removed {
        say!("no credential {} here or on the hub", a.name);
    } else {
        say!("credential {} removed", a.name);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_come_from_env_pairs_and_the_config_dir() {
        let env = env_of(
            "claude",
            &["ANTHROPIC_API_KEY=sk=with=equals".into()],
            Some(std::path::Path::new("/c")),
        )
        .expect("env");
        assert_eq!(env["ANTHROPIC_API_KEY"], "sk=with=equals");
        assert_eq!(env["CLAUDE_CONFIG_DIR"], "/c");
        assert_eq!(
            env_of("codex", &[], Some(std::path::Path::new("/x"))).expect("env")["CODEX_HOME"],
            "/x"
        );
        for (agent, pairs, dir) in [
            ("claude", vec!["NOEQUALS".to_string()], None),
            ("claude", vec!["1X=v".to_string()], None),
            ("claude", vec!["A-B=v".to_string()], None),
            ("opencode", vec![], Some(std::path::Path::new("/x"))),
            ("claude", vec![], None),
        ] {
            assert!(env_of(agent, &pairs, dir).is_err(), "{agent} {pairs:?}");
        }
    }
}
