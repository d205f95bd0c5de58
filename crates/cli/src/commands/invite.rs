//! `trantor invite`: mint a one-use invite token with the operator's owner key, for a seat or a
//! person on another machine to enroll with (docs/protocol.md §2).

use super::{Common, HubResult, print_json, usage};
use std::process::ExitCode;
use std::sync::Arc;
use trantor_proto::auth::{InviteRequest, Role, Scope};
use trantor_proto::{HubClient, Signer, identity, keys};

pub(crate) const INVITE_HELP: &str = concat!(
    "The invite is signed with the operator's owner key: --as NAME, else RELAY_OWNER_IDENTITY, \
     else `ownerIdentity` in <bus>/config.json, else this session's own key (which must hold \
     the owner role on `*`, e.g. enrolled with the hub's bootstrap token: `trantor identity \
     enroll --bootstrap-token T`).\n\n\
     Examples:\n  trantor invite --project web --role write\n  \
     trantor invite --project web --role read --ttl 10m --kind human\n\
     On the other machine: RELAY_URL=https://hub:4477 RELAY_INVITE=<token> trantor runner claude\n\n",
    exit_codes!()
);

/// `trantor invite` options.
#[derive(Debug, clap::Args)]
pub struct InviteArgs {
    /// The project the invite grants (or `*` for every project); also picks the hub.
    #[arg(long = "project", value_name = "PROJECT")]
    pub for_project: String,
    /// The role it grants: read, write or owner.
    #[arg(long, default_value = "write")]
    pub role: String,
    /// How long the token stays valid: seconds, or a number with s, m, h or d.
    #[arg(long, default_value = "24h")]
    pub ttl: String,
    /// The kind of identity the invite is for: agent, human or tool.
    #[arg(long, default_value = "agent")]
    pub kind: String,
    /// The owner key to sign with (a name in <bus>/keys) [default: RELAY_OWNER_IDENTITY, else
    /// `ownerIdentity` in <bus>/config.json, else this session's key].
    #[arg(long = "as", value_name = "NAME", env = "RELAY_OWNER_IDENTITY")]
    pub owner: Option<String>,
    /// Print JSON (for scripts) instead of the token alone.
    #[arg(long)]
    pub json: bool,
    /// Hub URL [default: RELAY_URL, else ~/.agent-bus/config.json, else http://127.0.0.1:4477].
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Act as this session [default: RELAY_SESSION, else <RELAY_AGENT or host>:<project>].
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
}

/// Seconds in a duration written as `300`, `300s`, `5m`, `2h` or `1d`.
pub(crate) fn parse_ttl(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, unit) = match s.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&s[..i], c),
        _ => (s, 's'),
    };
    let n: f64 = num.trim().parse().ok().filter(|n: &f64| *n > 0.0)?;
    let mult = match unit {
        's' => 1.0,
        'm' => 60.0,
        'h' => 3600.0,
        'd' => 86400.0,
        _ => return None,
    };
    Some(n * mult)
}

/// A client for the hub of `common` signing with the operator's owner key: `owner` (a name in
/// `<bus>/keys`, which must exist), else `ownerIdentity` in `<bus>/config.json`, else the
/// session's own key.
pub(crate) fn operator_client(
    common: &Common,
    owner: Option<&str>,
) -> anyhow::Result<(identity::Identity, HubClient)> {
    let (id, hub) = common.connect()?;
    let bus = identity::bus_dir(&identity::ProcessEnv);
    let named = owner
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| {
            trantor_proto::enroll::EnrollOptions::from_env(&|_: &str| None, &bus, &id.project)
                .owner_identity
        });
    let Some(name) = named else {
        return Ok((id, hub));
    };
    let key = keys::load(&bus, &name)?.ok_or_else(|| {
        anyhow::anyhow!(
            "no owner key named {name:?} in {} (from --as, RELAY_OWNER_IDENTITY or ownerIdentity)",
            keys::keys_dir(&bus).display()
        )
    })?;
    let hub = HubClient::new(id.hub_url.clone()).with_signer(Signer::Durable(Arc::new(key)));
    Ok((id, hub))
}

/// Run `trantor invite`.
pub(crate) async fn invite(a: InviteArgs) -> anyhow::Result<ExitCode> {
    let role = Role::parse(a.role.trim())
        .ok_or_else(|| usage(format!("--role {}: use read, write or owner", a.role)))?;
    let ttl = parse_ttl(&a.ttl).ok_or_else(|| {
        usage(format!(
            "--ttl {}: use seconds or a number with s, m, h or d",
            a.ttl
        ))
    })?;
    let kind = a.kind.trim().to_lowercase();
    if !trantor_proto::auth::IDENTITY_KINDS.contains(&kind.as_str()) {
        return Err(usage(format!("--kind {kind}: use agent, human or tool")));
    }
    let project = a.for_project.trim().to_string();
    if project.is_empty() {
        return Err(usage("--project names the project the invite grants"));
    }
    let common = Common {
        json: a.json,
        url: a.url.clone(),
        session: a.session.clone(),
        project: (project != "*").then(|| project.clone()),
    };
    let (_, hub) = operator_client(&common, a.owner.as_deref())?;
    let reply = hub
        .invite(&InviteRequest {
            scopes: vec![Scope { project, role }],
            ttl_sec: Some(ttl),
            kind: Some(kind),
        })
        .await
        .hub(&hub)?;
    if a.json {
        print_json(&reply)?;
    } else {
        say!("{}", reply.token);
        eprintln!(
            "one-use invite for {} until {}; on the joining machine set RELAY_URL={} and \
             RELAY_INVITE=<token>",
            reply
                .scopes
                .iter()
                .map(|s| format!("{}:{}", s.project, s.role))
                .collect::<Vec<_>>()
                .join(", "),
            trantor_proto::date::fmt_utc_minutes(reply.expires_at),
            hub.base()
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;

    #[test]
    fn ttl_units() {
        assert_eq!(parse_ttl("300"), Some(300.0));
        assert_eq!(parse_ttl("300s"), Some(300.0));
        assert_eq!(parse_ttl("5m"), Some(300.0));
        assert_eq!(parse_ttl("2h"), Some(7200.0));
        assert_eq!(parse_ttl("1d"), Some(86400.0));
        assert_eq!(parse_ttl("0"), None);
        assert_eq!(parse_ttl("5x"), None);
        assert_eq!(parse_ttl(""), None);
    }
}
