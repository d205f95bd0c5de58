//! `trantor token mint|list|revoke`: bearer tokens for agents that reach the hub over its `/mcp`
//! (or its routes) with a header instead of a signing key (docs/protocol.md §2.6). Owner-only,
//! signed like `trantor identity list|revoke`.

use super::invite::{operator_client, parse_ttl};
use super::table;
use super::{Common, HubResult, print_json, usage};
use std::process::ExitCode;
use trantor_proto::auth::{
    Role, TokenMintReply, TokenMintRequest, TokenRevokeReply, TokenRevokeRequest, TokensReply,
};

pub(crate) const TOKEN_HELP: &str = concat!(
    "A token speaks as one session, on one project, with one role (read or write); the hub keeps \
     only its SHA-256 and shows the token once, at mint. Every request made with it is \
     authorized exactly as that session's signed requests would be. The verbs sign with the \
     owner key: --as NAME, else RELAY_OWNER_IDENTITY, else `ownerIdentity` in \
     <bus>/config.json, else this session's key.\n\n\
     Examples:\n  trantor token mint --session claude:web --ttl 30d\n  \
     claude mcp add --transport http trantor http://HUB:4477/mcp --header \"Authorization: Bearer <token>\"\n  \
     trantor token list\n  trantor token revoke 3f2a9c0d1e4b5a67\n\n",
    exit_codes!()
);

/// `trantor token` verbs.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Mint a bearer token bound to one session (printed once).
    Mint(MintArgs),
    /// Every token's id, session, project, role and state (never a token).
    List(HubArgs),
    /// Revoke a token by its id (from `token list`) or by the token itself.
    Revoke(RevokeArgs),
}

/// Where the owner verbs go and how they sign.
#[derive(Debug, clap::Args)]
pub struct HubArgs {
    /// The owner key to sign with (a name in <bus>/keys).
    #[arg(long = "as", value_name = "NAME", env = "RELAY_OWNER_IDENTITY")]
    pub owner: Option<String>,
    /// Hub URL [default: RELAY_URL, else ~/.agent-bus/config.json, else http://127.0.0.1:4477].
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Print JSON (for scripts).
    #[arg(long)]
    pub json: bool,
}

/// `trantor token mint` options.
#[derive(Debug, clap::Args)]
pub struct MintArgs {
    /// The session the token speaks as (`<who>:<project>`).
    #[arg(long, value_name = "SESSION")]
    pub session: String,
    /// The project it may act on [default: the session's part after its last `:`].
    #[arg(long, value_name = "PROJECT")]
    pub project: Option<String>,
    /// read or write.
    #[arg(long, default_value = "write")]
    pub role: String,
    /// How long it stays valid: seconds, or a number with s, m, h or d.
    #[arg(long, default_value = "30d")]
    pub ttl: String,
    #[command(flatten)]
    pub hub: HubArgs,
}

/// `trantor token revoke` options.
#[derive(Debug, clap::Args)]
pub struct RevokeArgs {
    /// The token's id (16 hex, from `token list`) or the token itself.
    pub id: String,
    #[command(flatten)]
    pub hub: HubArgs,
}

fn common(h: &HubArgs, project: Option<String>) -> Common {
    Common {
        json: h.json,
        url: h.url.clone(),
        session: None,
        project,
    }
}

/// Run a `trantor token` verb.
pub(crate) async fn run(cmd: TokenCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        TokenCommand::Mint(a) => mint(a).await,
        TokenCommand::List(a) => list(a).await,
        TokenCommand::Revoke(a) => revoke(a).await,
    }
}

async fn mint(a: MintArgs) -> anyhow::Result<ExitCode> {
    let session = a.session.trim().to_string();
    if session.is_empty() {
        return Err(usage("--session names the session the token speaks as"));
    }
    let role = match Role::parse(a.role.trim()) {
        Some(r @ (Role::Read | Role::Write)) => r,
        _ => return Err(usage(format!("--role {}: use read or write", a.role))),
    };
    let ttl = parse_ttl(&a.ttl).ok_or_else(|| {
        usage(format!(
            "--ttl {}: use seconds or a number with s, m, h or d",
            a.ttl
        ))
    })?;
    let project = a
        .project
        .clone()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty());
    let (_, hub) = operator_client(&common(&a.hub, project.clone()), a.hub.owner.as_deref())?;
    let req = TokenMintRequest {
        session,
        project,
        role: Some(role.as_str().to_string()),
        ttl_sec: Some(ttl),
    };
    let reply: TokenMintReply = hub.post("/token/mint", &req).await.hub(&hub)?;
    if a.hub.json {
        print_json(&reply)?;
    } else {
        say!("{}", reply.token);
        eprintln!(
            "token {} speaks as {} on {} ({}) until {}; send it as `Authorization: Bearer <token>` \
             to {}/mcp (trantor connect --http writes it for Claude Code, Codex and OpenCode)",
            reply.record.id,
            reply.record.session,
            reply.record.project,
            reply.record.role,
            trantor_proto::date::fmt_utc_minutes(reply.record.expires_at),
            hub.base()
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(a: HubArgs) -> anyhow::Result<ExitCode> {
    let (_, hub) = operator_client(&common(&a, None), a.owner.as_deref())?;
    let reply: TokensReply = hub.get("/tokens", &[]).await.hub(&hub)?;
    if a.json {
        print_json(&reply)?;
        return Ok(ExitCode::SUCCESS);
    }
    let now = trantor_proto::now_ms();
    let rows: Vec<Vec<String>> = reply
        .tokens
        .iter()
        .map(|t| {
            vec![
                t.id.clone(),
                t.session.clone(),
                t.project.clone(),
                t.role.to_string(),
                trantor_proto::date::fmt_utc_minutes(t.expires_at),
                match t.revoked_at {
                    Some(at) => format!("revoked {}", trantor_proto::date::fmt_utc_minutes(at)),
                    None if t.expires_at <= now => "expired".into(),
                    None => "live".into(),
                },
            ]
        })
        .collect();
    say!(
        "{}",
        table::render(
            &["ID", "SESSION", "PROJECT", "ROLE", "EXPIRES", "STATE"],
            &rows
        )
        .trim_end()
    );
    Ok(ExitCode::SUCCESS)
}

async fn revoke(a: RevokeArgs) -> anyhow::Result<ExitCode> {
    let id = a.id.trim().to_string();
    if id.is_empty() {
        return Err(usage("name the token to revoke (its id from `token list`)"));
    }
    let (_, hub) = operator_client(&common(&a.hub, None), a.hub.owner.as_deref())?;
    let reply: TokenRevokeReply = hub
        .post("/token/revoke", &TokenRevokeRequest { id })
        .await
        .hub(&hub)?;
    if a.hub.json {
        print_json(&reply)?;
    } else if reply.revoked {
        say!(
            "revoked token {} ({} on {})",
            reply.record.id,
            reply.record.session,
            reply.record.project
        );
    } else {
        say!("token {} was already revoked", reply.record.id);
    }
    Ok(ExitCode::SUCCESS)
}
