//! `trantor identity list|revoke|enroll|show`: the signed identities a hub knows, and this
//! session's own key (docs/protocol.md §2).

use super::invite::operator_client;
use super::table;
use super::{Common, HubResult, print_json, usage};
use std::process::ExitCode;
use trantor_proto::auth::RevokeRequest;
use trantor_proto::{enroll, identity, keys};

pub(crate) const IDENTITY_HELP: &str = concat!(
    "list and revoke need the owner role on `*`; they sign with --as NAME, else \
     RELAY_OWNER_IDENTITY, else `ownerIdentity` in <bus>/config.json, else this session's key.\n\n\
     Examples:\n  trantor identity list\n  trantor identity revoke claude:web\n  \
     trantor identity enroll --bootstrap-token \"$RELAY_BOOTSTRAP_TOKEN\"\n  \
     trantor identity show\n\n",
    exit_codes!()
);

/// `trantor identity` verbs.
#[derive(Debug, clap::Subcommand)]
pub enum IdentityCommand {
    /// Every identity the hub has enrolled, revoked ones included.
    List(OwnerArgs),
    /// Revoke an identity by name (every live key of it) or by public key (64 hex).
    Revoke(RevokeArgs),
    /// Enroll this session's key on the hub (trust on first use, an invite or the bootstrap
    /// token).
    Enroll(EnrollArgs),
    /// This session's public key and key file.
    Show(Common),
}

/// Options of the owner-signed verbs.
#[derive(Debug, clap::Args)]
pub struct OwnerArgs {
    /// The owner key to sign with (a name in <bus>/keys).
    #[arg(long = "as", value_name = "NAME", env = "RELAY_OWNER_IDENTITY")]
    pub owner: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

/// `trantor identity revoke` options.
#[derive(Debug, clap::Args)]
pub struct RevokeArgs {
    /// A session name, or a public key (64 hex characters).
    pub who: String,
    #[command(flatten)]
    pub owner: OwnerArgs,
}

/// `trantor identity enroll` options.
#[derive(Debug, clap::Args)]
pub struct EnrollArgs {
    #[command(flatten)]
    pub tokens: trantor_runner::EnrollTokens,
    /// The identity kind: human (default for a person at the CLI), agent or tool.
    #[arg(long, default_value = "human")]
    pub kind: String,
    #[command(flatten)]
    pub common: Common,
}

/// Run a `trantor identity` verb.
pub(crate) async fn identity(c: IdentityCommand) -> anyhow::Result<ExitCode> {
    match c {
        IdentityCommand::List(a) => list(a).await,
        IdentityCommand::Revoke(a) => revoke(a).await,
        IdentityCommand::Enroll(a) => enroll_self(a).await,
        IdentityCommand::Show(a) => show(a),
    }
}

async fn list(a: OwnerArgs) -> anyhow::Result<ExitCode> {
    let (_, hub) = operator_client(&a.common, a.owner.as_deref())?;
    let reply = hub.identities().await.hub(&hub)?;
    if a.common.json {
        print_json(&reply)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = Vec::new();
    for i in &reply.identities {
        let v = serde_json::to_value(i)?;
        let text = |k: &str| v[k].as_str().unwrap_or("").to_string();
        rows.push(vec![
            i.name.clone(),
            text("kind"),
            i.pubkey.chars().take(16).collect(),
            text("enrolledBy"),
            i.scopes
                .iter()
                .map(|s| format!("{}:{}", s.project, s.role))
                .collect::<Vec<_>>()
                .join(","),
            match i.revoked_at {
                Some(at) => format!("revoked {}", trantor_proto::date::fmt_utc_minutes(at)),
                None => "live".to_string(),
            },
        ]);
    }
    say!(
        "{}",
        table::render(&["NAME", "KIND", "KEY", "BY", "SCOPES", "STATE"], &rows).trim_end()
    );
    Ok(ExitCode::SUCCESS)
}

async fn revoke(a: RevokeArgs) -> anyhow::Result<ExitCode> {
    let who = a.who.trim();
    if who.is_empty() {
        return Err(usage(
            "name the identity to revoke (a session name or a public key)",
        ));
    }
    let is_key = who.len() == 64 && who.bytes().all(|b| b.is_ascii_hexdigit());
    let req = RevokeRequest {
        pubkey: is_key.then(|| who.to_ascii_lowercase()),
        name: (!is_key).then(|| who.to_string()),
    };
    let (_, hub) = operator_client(&a.owner.common, a.owner.owner.as_deref())?;
    let reply = hub.revoke_identity(&req).await.hub(&hub)?;
    if a.owner.common.json {
        print_json(&reply)?;
    } else if reply.revoked.is_empty() {
        say!("nothing to revoke: {who} has no live key on {}", hub.base());
    } else {
        for r in &reply.revoked {
            say!("revoked {} ({})", r.name, r.pubkey);
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn enroll_self(a: EnrollArgs) -> anyhow::Result<ExitCode> {
    let kind = a.kind.trim().to_lowercase();
    if !trantor_proto::auth::IDENTITY_KINDS.contains(&kind.as_str()) {
        return Err(usage(format!("--kind {kind}: use human, agent or tool")));
    }
    let id = a.common.identity();
    let bus = identity::bus_dir(&identity::ProcessEnv);
    let key = keys::load_or_create(&bus, &id.session, &kind)?;
    let opts = enroll::EnrollOptions {
        invite: a.tokens.invite.clone(),
        bootstrap: a.tokens.bootstrap_token.clone(),
        owner_identity: None,
        project: id.project.clone(),
        kind,
        trust_marker: false,
    };
    let how = enroll::ensure_enrolled(&id.hub_url, &bus, &key, &opts).await?;
    if a.common.json {
        print_json(&serde_json::json!({
            "ok": true, "name": id.session, "pubkey": key.pubkey(), "hub": id.hub_url,
            "enrolled": format!("{how:?}"),
        }))?;
    } else {
        match how {
            enroll::Enrolled::Now(by) => {
                say!(
                    "{} enrolled on {} by {by} ({})",
                    id.session,
                    id.hub_url,
                    key.pubkey()
                )
            }
            _ => say!(
                "{} is already known to {} ({})",
                id.session,
                id.hub_url,
                key.pubkey()
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn show(common: Common) -> anyhow::Result<ExitCode> {
    let id = common.identity();
    let bus = identity::bus_dir(&identity::ProcessEnv);
    let key = keys::load_or_create(&bus, &id.session, "agent")?;
    let path = keys::key_path(&bus, &id.session);
    if common.json {
        print_json(&serde_json::json!({
            "name": key.name, "kind": key.kind, "pubkey": key.pubkey(),
            "createdAt": key.created_at, "file": path,
        }))?;
    } else {
        say!("{} ({}) {}", key.name, key.kind, key.pubkey());
        say!("key file {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
