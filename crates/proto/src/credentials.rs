//! Named credentials (docs/protocol.md §7.7): the hub keeps only each credential's name, agent
//! and state; its secrets stay in a 0600 file in the bus directory on the machine that runs the
//! seats ([`CredentialFile`]), which the runner reads to put a credential's variables in its
//! CLI's environment.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The agents a credential may be for.
pub const AGENTS: &[&str] = &["claude", "codex", "opencode"];
/// Longest credential name.
pub const NAME_MAX: usize = 64;
/// Most credentials the hub keeps.
pub const MAX: usize = 200;
/// The file of secrets in the bus directory.
pub const FILE: &str = "credentials.json";

/// [`valid_name`]'s rule as a JSON Schema pattern (with `minLength` 1 and `maxLength`
/// [`NAME_MAX`]).
pub const NAME_PATTERN: &str = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$";

/// Whether `name` is a credential name: 1-64 of letters, digits, `.`, `_`, `-`, starting with
/// a letter or digit.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.len() <= NAME_MAX
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// `POST /credentials` body: name a credential on the hub. Secrets are never part of it: an
/// unknown field is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialRequest {
    /// The credential's name.
    #[schemars(length(min = 1, max = NAME_MAX), regex(pattern = NAME_PATTERN))]
    pub name: String,
    /// The agent it is for: `claude`, `codex` or `opencode`.
    #[schemars(regex(pattern = r"^(claude|codex|opencode)$"))]
    pub agent: String,
}

/// `POST /credentials/remove` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialRemove {
    /// The credential's name.
    #[schemars(length(min = 1, max = NAME_MAX), regex(pattern = NAME_PATTERN))]
    pub name: String,
}

/// A credential as the hub knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialInfo {
    /// Its name.
    pub name: String,
    /// The agent it is for.
    pub agent: String,
    /// `ok`, `exhausted` (a turn proved its quota spent) until `until`, or `auth` (its CLI
    /// refused it) until an operator names it again.
    pub state: String,
    /// Until when the state holds, ms (`null`: open-ended).
    pub until: Option<i64>,
    /// The seats running on it.
    pub seats: Vec<String>,
    /// What last proved its state (`null`: nothing yet).
    pub last_evidence: Option<String>,
    /// The seat whose turn last proved it exhausted (`null`: none yet).
    #[serde(default)]
    pub proved_by: Option<String>,
    /// When it was named, ms.
    pub since: i64,
}

/// The states a credential may be in: `auth` (its CLI refused it) holds until an operator
/// names it again (`POST /credentials`, `trantor credentials add`).
pub const STATES: &[&str] = &["ok", "exhausted", "auth"];
/// Most seats listed on one credential.
pub const SEATS_MAX: usize = 100;
/// Furthest reset a report may name (31 days): a later one is ignored.
pub const UNTIL_MAX_MS: i64 = 31 * 86_400_000;
/// Longest evidence text kept.
pub const EVIDENCE_MAX: usize = 500;

/// `POST /credentials/state` body: a seat says what its turn proved about its credential
/// (docs/protocol.md §7.7). `exhausted` needs `until`, the reset time the CLI printed;
/// `ok` only says the seat runs on it (it joins `seats`) and never ends an exhaustion early.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CredentialStateReport {
    /// The credential's name.
    #[schemars(length(min = 1, max = NAME_MAX), regex(pattern = NAME_PATTERN))]
    pub name: String,
    /// `exhausted`, `auth` or `ok`.
    #[schemars(regex(pattern = r"^(ok|exhausted|auth)$"))]
    pub state: String,
    /// The reset time, ms (required for `exhausted`; a time already past is ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
    /// The seat reporting.
    #[schemars(length(min = 1, max = crate::limits::SESSION), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub session: String,
    /// What proved it (the CLI's usage-limit line, redacted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 500))]
    pub evidence: Option<String>,
}

/// `POST /credentials/state` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialStateReply {
    /// Always true.
    pub ok: bool,
    /// This report marked the credential exhausted (false when it already was, or when
    /// the report was ignored).
    pub marked: bool,
    /// Why the report changed nothing (`null` when it was taken).
    pub ignored: Option<String>,
    /// The credential now.
    pub credential: Option<CredentialInfo>,
}

impl CredentialInfo {
    /// The state in force at `now`: an exhaustion whose reset has passed is `ok`, whether or
    /// not the hub has written that yet.
    pub fn effective(mut self, now: i64) -> CredentialInfo {
        if self.state == "exhausted" && self.until.is_none_or(|u| u <= now) {
            self.state = "ok".into();
            self.until = None;
        }
        self
    }

    /// Exhausted at `now`: until when.
    pub fn exhausted_until(&self, now: i64) -> Option<i64> {
        (self.state == "exhausted")
            .then_some(self.until)
            .flatten()
            .filter(|u| *u > now)
    }
}

/// `POST /credentials` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CredentialReply {
    /// Always true.
    pub ok: bool,
    /// The credential now (`null` after a remove).
    pub credential: Option<CredentialInfo>,
    /// A remove found it and removed it.
    pub removed: bool,
}

/// `GET /credentials` reply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CredentialsReply {
    /// Every named credential, by name.
    pub credentials: Vec<CredentialInfo>,
}

/// One credential's secrets, as kept in the bus directory's file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalCredential {
    /// The agent it is for.
    pub agent: String,
    /// The variables put in the CLI's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// The bus directory's `credentials.json` (mode 0600): every credential's secrets by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialFile {
    /// By name.
    #[serde(default)]
    pub credentials: BTreeMap<String, LocalCredential>,
}

/// Why the credentials file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CredentialFileError {
    /// Reading or writing it failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// It is not a credentials file.
    #[error("{path} is not a credentials file: {why}")]
    Corrupt {
        /// The file.
        path: String,
        /// The parse error.
        why: String,
    },
    /// Others than its owner may read it.
    #[error("{path} is readable by others (mode {mode:o}); chmod 600 it")]
    Open {
        /// The file.
        path: String,
        /// Its mode bits.
        mode: u32,
    },
}

impl CredentialFile {
    /// The file in `bus`.
    pub fn path(bus: &Path) -> PathBuf {
        bus.join(FILE)
    }

    /// Read it (a missing file is empty). A file others may read is refused: its secrets may
    /// already be out, and a runner should not spread them further.
    pub fn load(bus: &Path) -> Result<CredentialFile, CredentialFileError> {
        use std::os::unix::fs::PermissionsExt;
        let path = Self::path(bus);
        let shown = path.display().to_string();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(CredentialFile::default());
            }
            Err(source) => {
                return Err(CredentialFileError::Io {
                    path: shown,
                    source,
                });
            }
        };
        if let Ok(m) = std::fs::metadata(&path) {
            let mode = m.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(CredentialFileError::Open { path: shown, mode });
            }
        }
        serde_json::from_slice(&bytes).map_err(|e| CredentialFileError::Corrupt {
            path: shown,
            why: e.to_string(),
        })
    }

    /// Replace it atomically, mode 0600 from the start.
    pub fn save(&self, bus: &Path) -> Result<(), CredentialFileError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = Self::path(bus);
        let io = |source| CredentialFileError::Io {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(bus).map_err(io)?;
        let tmp = bus.join(format!(".{FILE}.{}.tmp", std::process::id()));
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| io(std::io::Error::other(e)))?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io)?;
        f.write_all(&bytes).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn names_are_short_plain_words() {
        for ok in ["work", "a", "team-2.alt_key", &"x".repeat(64)] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "-x", ".x", "a b", "a/b", "ключ", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_file_is_private_and_round_trips() {
        let d = tempfile::tempdir().expect("tmp");
        assert_eq!(
            CredentialFile::load(d.path()).expect("empty"),
            CredentialFile::default()
        );
        let mut f = CredentialFile::default();
        f.credentials.insert(
            "work".into(),
            LocalCredential {
                agent: "claude".into(),
                env: BTreeMap::from([("ANTHROPIC_API_KEY".into(), "sk-ant-x".into())]),
            },
        );
        f.save(d.path()).expect("save");
        let path = CredentialFile::path(d.path());
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(CredentialFile::load(d.path()).expect("load"), f);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = CredentialFile::load(d.path()).expect_err("refused");
        assert!(err.to_string().contains("chmod 600"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::fs::write(&path, "{not json").expect("write");
        assert!(matches!(
            CredentialFile::load(d.path()),
            Err(CredentialFileError::Corrupt { .. })
        ));
    }
}
