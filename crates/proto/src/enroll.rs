//! Joining a hub that wants signed requests: the one enrollment path the runner, the MCP server
//! and the hooks share (docs/protocol.md §2).
//!
//! A client probes the hub with a signed `GET /peer?session=<self>`. Any answer but 401 means the
//! key is already known (or the hub does not check), so nothing more happens. On 401 the durable
//! key enrolls itself with `POST /enroll`, in this order of preference:
//!
//! 1. an invite token (`RELAY_INVITE` / `--invite`) or the hub's bootstrap token
//!    (`RELAY_BOOTSTRAP_TOKEN`);
//! 2. an invite minted on the spot with the operator's owner key (`RELAY_OWNER_IDENTITY`, else
//!    `ownerIdentity` in `<bus>/config.json`), for the session's project with role `write` and a
//!    five-minute life, as the original runner does;
//! 3. trust on first use (the hub allows it only on a loopback bind).
//!
//! Success is recorded in `keys/<name>.enrolled` as `<pubkey>\t<hub url>`, the marker the
//! original's hooks write, so a short-lived process (a hook) can skip the probe next time.

use crate::auth::{EnrollRequest, InviteRequest, Role, Scope};
use crate::client::{ClientError, HubClient, Signer};
use crate::identity::Env;
use crate::keys::{self, KeyError, Keypair};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The environment variables enrollment reads.
pub const ENROLL_ENV_VARS: &[&str] = &[
    "RELAY_INVITE",
    "RELAY_BOOTSTRAP_TOKEN",
    "RELAY_OWNER_IDENTITY",
];

/// How a key may enroll when the hub does not know it.
#[derive(Debug, Clone, Default)]
pub struct EnrollOptions {
    /// An invite token to spend.
    pub invite: Option<String>,
    /// The hub's bootstrap token (grants owner of `*` to the first identity).
    pub bootstrap: Option<String>,
    /// The name of the operator's owner key in `<bus>/keys`, used to mint an invite.
    pub owner_identity: Option<String>,
    /// The project the minted invite is for.
    pub project: String,
    /// The identity kind to enroll as (`agent` for seats and MCP servers).
    pub kind: String,
    /// Skip the probe when the marker says this key already enrolled on this hub.
    pub trust_marker: bool,
}

impl EnrollOptions {
    /// Options from the environment (`RELAY_INVITE`, `RELAY_BOOTSTRAP_TOKEN`,
    /// `RELAY_OWNER_IDENTITY`, else `ownerIdentity` in `<bus>/config.json`).
    pub fn from_env(env: &dyn Env, bus: &Path, project: &str) -> EnrollOptions {
        EnrollOptions {
            invite: env.get("RELAY_INVITE"),
            bootstrap: env.get("RELAY_BOOTSTRAP_TOKEN"),
            owner_identity: env
                .get("RELAY_OWNER_IDENTITY")
                .or_else(|| owner_from_config(bus)),
            project: project.to_string(),
            kind: "agent".to_string(),
            trust_marker: false,
        }
    }
}

fn owner_from_config(bus: &Path) -> Option<String> {
    let text = std::fs::read_to_string(bus.join("config.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("ownerIdentity")
        .and_then(|o| o.as_str())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// What enrollment did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enrolled {
    /// The hub already accepts the key (or does not check signatures).
    Already,
    /// The marker says the key enrolled on this hub before; no request was made.
    Marked,
    /// The key enrolled now, by the given means (`invite`, `bootstrap`, `owner-invite`, `tofu`).
    Now(&'static str),
}

/// Why enrollment failed.
#[derive(Debug, thiserror::Error)]
pub enum EnrollError {
    /// The hub could not be reached.
    #[error("cannot reach the hub to enroll: {0}")]
    Unreachable(#[source] ClientError),
    /// The hub refused the enrollment (or the owner's invite).
    #[error("the hub at {hub} refused to enroll {name} by {how}: {status} {reason}. {hint}")]
    Refused {
        /// The hub URL.
        hub: String,
        /// The session name.
        name: String,
        /// What was tried.
        how: &'static str,
        /// HTTP status.
        status: u16,
        /// The hub's reason.
        reason: String,
        /// What to do about it.
        hint: String,
    },
    /// The owner key named could not be used.
    #[error("owner key {name:?} (RELAY_OWNER_IDENTITY or ownerIdentity) is not in {dir}")]
    NoOwnerKey {
        /// The name given.
        name: String,
        /// The keys directory searched.
        dir: PathBuf,
    },
    /// A key file could not be read or written.
    #[error(transparent)]
    Key(#[from] KeyError),
}

const HINT: &str = "Ask the hub's operator for an invite (`trantor invite --project <project> \
--role write`) and start again with RELAY_INVITE=<token>, or set RELAY_OWNER_IDENTITY to an \
owner key's name";

/// Make sure the hub at `hub_url` knows `durable`, enrolling it if it answers 401.
pub async fn ensure_enrolled(
    hub_url: &str,
    bus: &Path,
    durable: &Keypair,
    opts: &EnrollOptions,
) -> Result<Enrolled, EnrollError> {
    let hub_url = hub_url.trim_end_matches('/');
    let marker = keys::enrolled_marker(bus, &durable.name);
    let mark = format!("{}\t{hub_url}", durable.pubkey());
    if opts.trust_marker
        && std::fs::read_to_string(&marker).is_ok_and(|m| m.trim_end_matches('\n') == mark)
    {
        return Ok(Enrolled::Marked);
    }
    let client = HubClient::new(hub_url)
        .with_timeout(Duration::from_secs(8))
        .with_signer(Signer::Durable(Arc::new(durable.clone())));
    match client.peer(&durable.name).await {
        Err(e) if e.status() == Some(401) => {}
        Err(e) if e.is_unreachable() || matches!(e, ClientError::Request { .. }) => {
            return Err(EnrollError::Unreachable(e));
        }
        _ => {
            record(&marker, &mark);
            return Ok(Enrolled::Already);
        }
    }
    let refused = |how: &'static str, e: ClientError| match e {
        ClientError::Http { status, body, .. } => EnrollError::Refused {
            hub: hub_url.to_string(),
            name: durable.name.clone(),
            how,
            status,
            reason: body.error,
            hint: HINT.to_string(),
        },
        other => EnrollError::Unreachable(other),
    };
    let mut req = EnrollRequest {
        name: Some(durable.name.clone()),
        kind: Some(opts.kind.clone()),
        ..Default::default()
    };
    let how = if let Some(t) = opts.invite.as_ref() {
        req.token = Some(t.clone());
        "invite"
    } else if let Some(t) = opts.bootstrap.as_ref() {
        req.token = Some(t.clone());
        "bootstrap"
    } else if let Some(owner_name) = opts.owner_identity.as_ref() {
        let owner = keys::load(bus, owner_name)?.ok_or_else(|| EnrollError::NoOwnerKey {
            name: owner_name.clone(),
            dir: keys::keys_dir(bus),
        })?;
        let owner_client = HubClient::new(hub_url)
            .with_timeout(Duration::from_secs(8))
            .with_signer(Signer::Durable(Arc::new(owner)));
        let invite = owner_client
            .invite(&InviteRequest {
                scopes: vec![Scope {
                    project: opts.project.clone(),
                    role: Role::Write,
                }],
                ttl_sec: Some(300.0),
                kind: Some(opts.kind.clone()),
            })
            .await
            .map_err(|e| refused("an owner-minted invite", e))?;
        req.token = Some(invite.token);
        "owner-invite"
    } else {
        // Sent by the original's hooks too; the hub takes the key from the signature.
        req.pubkey = Some(durable.pubkey());
        "tofu"
    };
    let what = match how {
        "invite" => "invite token",
        "bootstrap" => "bootstrap token",
        "owner-invite" => "owner-minted invite",
        _ => "trust on first use",
    };
    client.enroll(&req).await.map_err(|e| refused(what, e))?;
    record(&marker, &mark);
    Ok(Enrolled::Now(how))
}

/// Writes the marker. It only saves a later probe, so a key directory that cannot take it
/// costs nothing more than that probe.
fn record(marker: &Path, mark: &str) {
    if let Some(dir) = marker.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = write_marker(marker, mark);
}

fn write_marker(path: &Path, mark: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(mark.as_bytes())
}

/// A fresh instance id for a process without one from its harness: `<prefix>-<base36 ms>-<8 hex>`.
pub fn new_instance_id(prefix: &str) -> String {
    let mut ms = crate::now_ms().max(0) as u64;
    let mut b36 = Vec::new();
    loop {
        let d = (ms % 36) as u8;
        b36.push(if d < 10 { b'0' + d } else { b'a' + d - 10 });
        ms /= 36;
        if ms == 0 {
            break;
        }
    }
    b36.reverse();
    let nonce = crate::auth::new_nonce();
    format!("{prefix}-{}-{}", String::from_utf8_lossy(&b36), &nonce[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_ids_look_like_the_originals() {
        let id = new_instance_id("mcp");
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(parts.len(), 3, "{id}");
        assert_eq!(parts[0], "mcp");
        assert!(parts[1].bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_eq!(parts[2].len(), 8);
        assert_ne!(new_instance_id("mcp"), id);
    }

    #[test]
    fn owner_identity_falls_back_to_config() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::write(
            tmp.path().join("config.json"),
            r#"{"ownerIdentity":"admin"}"#,
        )
        .expect("write");
        let none = |_: &str| None::<String>;
        let o = EnrollOptions::from_env(&none, tmp.path(), "p");
        assert_eq!(o.owner_identity.as_deref(), Some("admin"));
        let env = |k: &str| (k == "RELAY_OWNER_IDENTITY").then(|| "boss".to_string());
        let o = EnrollOptions::from_env(&env, tmp.path(), "p");
        assert_eq!(o.owner_identity.as_deref(), Some("boss"));
        assert_eq!(o.invite, None);
    }
}
