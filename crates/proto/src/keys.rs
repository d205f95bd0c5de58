//! Ed25519 identities on disk: one durable key per session name and endorsed instance subkeys
//! (docs/protocol.md §2).
//!
//! A durable key lives in `<bus dir>/keys/<sanitised name>.json` as
//! `{name, kind, pubkey, privkey, createdAt}` (hex public key and hex 32-byte seed), the same file
//! the original JavaScript clients write, so both implementations share one identity per session
//! on a machine. The file is created on first use with mode 0600 by writing a temporary file and
//! linking it into place, so two processes racing at start-up end with one key. A key file that
//! its group or other users can read is refused: somebody else may hold a copy of it.
//!
//! An instance key (`keys/instances/<name>@<instance id>.json`) is a second keypair whose public
//! key the durable key signs (the endorsement); the MCP server and hooks sign with it, and the hub
//! attributes their requests to the durable identity.

use crate::auth::{self, InstanceKey, SignedHeaders};
use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// Why a key could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Reading, writing or creating a key file or directory failed.
    #[error("key file {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The key file is readable or writable by its group or other users.
    #[error(
        "key file {path} has mode {mode:04o}: other users can read it, so it is not used; \
         run: chmod 600 {path}"
    )]
    LoosePermissions {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file is not a key file this program understands.
    #[error("key file {path} is not a valid key: {message}")]
    Corrupt {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

/// The on-disk shape of a durable key (the original's format).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DurableFile {
    name: String,
    #[serde(default = "default_kind")]
    kind: String,
    pubkey: String,
    privkey: String,
    #[serde(default)]
    created_at: i64,
}

fn default_kind() -> String {
    "agent".to_string()
}

/// The on-disk shape of an instance key (the original's format).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InstanceFile {
    name: String,
    instance_id: String,
    pubkey: String,
    privkey: String,
    created_at: i64,
    endorsement: String,
    durable_pubkey: String,
}

/// A durable Ed25519 identity: the key a session name is known by on the hub.
#[derive(Clone)]
pub struct Keypair {
    /// The session name the key belongs to.
    pub name: String,
    /// `human`, `agent` or `tool`.
    pub kind: String,
    /// When the key was made, epoch ms.
    pub created_at: i64,
    key: SigningKey,
}

impl std::fmt::Debug for Keypair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the private half.
        f.debug_struct("Keypair")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("pubkey", &self.pubkey())
            .finish()
    }
}

impl Keypair {
    /// A fresh key for `name` of `kind`, not yet stored.
    pub fn generate(name: &str, kind: &str) -> Keypair {
        Keypair {
            name: name.to_string(),
            kind: kind.to_string(),
            created_at: crate::now_ms(),
            key: auth::generate_key(),
        }
    }

    /// The public key as 64 lowercase hex characters: the identity on the wire.
    pub fn pubkey(&self) -> String {
        auth::pubkey_hex(&self.key)
    }

    /// The signing key.
    pub fn signing_key(&self) -> &SigningKey {
        &self.key
    }

    /// Signs one request now (`trantor-v1`): `path_and_query` exactly as sent, `body` the exact
    /// bytes (empty for GET).
    pub fn sign_request(&self, method: &str, path_and_query: &str, body: &[u8]) -> SignedHeaders {
        auth::sign_request(&self.key, method, path_and_query, body)
    }

    /// Mints an instance key for `instance_id`, endorsed by this key now, without storing it.
    pub fn mint_instance(&self, instance_id: &str) -> InstanceKey {
        InstanceKey::mint(&self.key, instance_id, crate::now_ms())
    }

    fn to_file(&self) -> DurableFile {
        DurableFile {
            name: self.name.clone(),
            kind: self.kind.clone(),
            pubkey: self.pubkey(),
            privkey: auth::seed_hex(&self.key),
            created_at: self.created_at,
        }
    }
}

fn instance_file(name: &str, inst: &InstanceKey) -> InstanceFile {
    InstanceFile {
        name: name.to_string(),
        instance_id: inst.instance_id.clone(),
        pubkey: auth::pubkey_hex(&inst.key),
        privkey: auth::seed_hex(&inst.key),
        created_at: inst.created_at,
        endorsement: inst.endorsement.clone(),
        durable_pubkey: inst.durable_pubkey.clone(),
    }
}

/// A session name made safe as a file name, exactly as the original does it: runs of two or
/// more dots become `_` first (so no `..` survives), then anything outside `[A-Za-z0-9_.-]`.
pub fn sanitise(name: &str) -> String {
    let mut collapsed = String::with_capacity(name.len());
    let mut dots = 0usize;
    let flush = |out: &mut String, dots: usize| match dots {
        0 => {}
        1 => out.push('.'),
        _ => out.push('_'),
    };
    for c in name.chars() {
        if c == '.' {
            dots += 1;
            continue;
        }
        flush(&mut collapsed, dots);
        dots = 0;
        collapsed.push(c);
    }
    flush(&mut collapsed, dots);
    crate::fsx::safe_file_name(&collapsed)
}

/// `<bus>/keys`.
pub fn keys_dir(bus: &Path) -> PathBuf {
    bus.join("keys")
}

/// The durable key file of `name`.
pub fn key_path(bus: &Path, name: &str) -> PathBuf {
    keys_dir(bus).join(format!("{}.json", sanitise(name)))
}

/// The instance key file of `name` and `instance_id`.
pub fn instance_key_path(bus: &Path, name: &str, instance_id: &str) -> PathBuf {
    keys_dir(bus).join("instances").join(format!(
        "{}@{}.json",
        sanitise(name),
        sanitise(instance_id)
    ))
}

/// The marker recording that `name` enrolled on a hub (`keys/<name>.enrolled`, holding
/// `<pubkey>\t<hub url>`). Named as the original's hooks name it: only characters outside
/// `[A-Za-z0-9_.-]` are replaced (no dot-run folding), so both find the same file.
pub fn enrolled_marker(bus: &Path, name: &str) -> PathBuf {
    let safe = crate::fsx::safe_file_name(name);
    keys_dir(bus).join(format!("{safe}.enrolled"))
}

/// Load the durable key of `name`, `None` when there is no key file.
///
/// Refuses a file other users can read ([`KeyError::LoosePermissions`]).
pub fn load(bus: &Path, name: &str) -> Result<Option<Keypair>, KeyError> {
    let path = key_path(bus, name);
    let Some(text) = read_private(&path)? else {
        return Ok(None);
    };
    let f: DurableFile = serde_json::from_str(&text).map_err(|e| corrupt(&path, e))?;
    let key = signing_key(&path, &f.privkey)?;
    let pair = Keypair {
        name: f.name,
        kind: f.kind,
        created_at: f.created_at,
        key,
    };
    if !pair.pubkey().eq_ignore_ascii_case(&f.pubkey) {
        return Err(corrupt(&path, "pubkey does not match privkey"));
    }
    Ok(Some(pair))
}

/// Load the durable key of `name`, creating it (mode 0600) on first use.
///
/// Two processes racing here end with the same key: the new file is written aside and linked
/// into place, which fails if another process got there first, and then the winner's key is read.
pub fn load_or_create(bus: &Path, name: &str, kind: &str) -> Result<Keypair, KeyError> {
    if let Some(k) = load(bus, name)? {
        return Ok(k);
    }
    let pair = Keypair::generate(name, kind);
    let path = key_path(bus, name);
    let json = serde_json::to_string(&pair.to_file()).map_err(|e| corrupt(&path, e))?;
    if write_new_private(&path, json.as_bytes())? {
        return Ok(pair);
    }
    load(bus, name)?.ok_or_else(|| corrupt(&path, "vanished after a concurrent create"))
}

/// Load or create the instance key `instance_id` of `durable`, stored beside the durable key.
///
/// Hooks of one harness session share an instance id and so converge on one key file.
pub fn load_or_create_instance(
    bus: &Path,
    durable: &Keypair,
    instance_id: &str,
) -> Result<InstanceKey, KeyError> {
    let path = instance_key_path(bus, &durable.name, instance_id);
    if let Some(k) = load_instance_file(&path)?
        && k.durable_pubkey.eq_ignore_ascii_case(&durable.pubkey())
    {
        return Ok(k);
    }
    let inst = durable.mint_instance(instance_id);
    let json = serde_json::to_string(&instance_file(&durable.name, &inst))
        .map_err(|e| corrupt(&path, e))?;
    if !path.exists() && write_new_private(&path, json.as_bytes())? {
        return Ok(inst);
    }
    match load_instance_file(&path)? {
        Some(k) if k.durable_pubkey.eq_ignore_ascii_case(&durable.pubkey()) => Ok(k),
        // A stale file endorsed by an older durable key: use the fresh key without storing it.
        _ => Ok(inst),
    }
}

fn load_instance_file(path: &Path) -> Result<Option<InstanceKey>, KeyError> {
    let Some(text) = read_private(path)? else {
        return Ok(None);
    };
    let f: InstanceFile = serde_json::from_str(&text).map_err(|e| corrupt(path, e))?;
    let key = signing_key(path, &f.privkey)?;
    let inst = InstanceKey {
        key,
        durable_pubkey: f.durable_pubkey,
        instance_id: f.instance_id,
        created_at: f.created_at,
        endorsement: f.endorsement,
    };
    if !auth::pubkey_hex(&inst.key).eq_ignore_ascii_case(&f.pubkey) {
        return Err(corrupt(path, "pubkey does not match privkey"));
    }
    Ok(Some(inst))
}

/// The text of a private file, `None` if it does not exist; refuses group/other access.
fn read_private(path: &Path) -> Result<Option<String>, KeyError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path, e)),
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::LoosePermissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    std::fs::read_to_string(path)
        .map(Some)
        .map_err(|e| io(path, e))
}

/// Create `path` with `bytes` and mode 0600 unless it exists. True when this call created it.
fn write_new_private(path: &Path, bytes: &[u8]) -> Result<bool, KeyError> {
    let dir = path
        .parent()
        .ok_or_else(|| corrupt(path, "key path has no directory"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| io(dir, e))?;
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default(),
        std::process::id(),
        &auth::new_nonce()[..8]
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(&tmp, e));
    }
    // A hard link never replaces an existing file, unlike a rename: the first writer wins.
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io(path, e)),
    }
}

fn signing_key(path: &Path, privkey_hex: &str) -> Result<SigningKey, KeyError> {
    auth::signing_key_from_hex(privkey_hex).map_err(|e| corrupt(path, e))
}

fn io(path: &Path, source: std::io::Error) -> KeyError {
    KeyError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn corrupt(path: &Path, message: impl std::fmt::Display) -> KeyError {
    KeyError::Corrupt {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{pubkey_hex, verify_endorsement};

    fn fixture() -> serde_json::Value {
        serde_json::from_str(include_str!("../testdata/original-keys.json")).expect("fixture")
    }

    fn install(bus: &Path, rel: &str, v: &serde_json::Value) -> PathBuf {
        let p = bus.join(rel);
        std::fs::create_dir_all(p.parent().expect("dir")).expect("mkdir");
        std::fs::write(&p, serde_json::to_string(v).expect("json")).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        p
    }

    #[test]
    fn sanitise_matches_the_original() {
        assert_eq!(sanitise("claude:web"), "claude_web");
        // Checked against the original under node.
        assert_eq!(sanitise("../../etc/passwd"), "____etc_passwd");
        assert_eq!(sanitise("a.b...c"), "a.b_c");
        assert_eq!(sanitise("box.example.com:p-1"), "box.example.com_p-1");
        assert_eq!(sanitise("x/y z"), "x_y_z");
    }

    /// A key file the original wrote loads, yields the same public key, and signs the same
    /// request to the byte-identical signature (Ed25519 is deterministic).
    #[test]
    fn reads_and_signs_like_the_original() {
        let fx = fixture();
        let tmp = tempfile::tempdir().expect("tmp");
        install(tmp.path(), "keys/claude_web.json", &fx["durable"]);
        let k = load(tmp.path(), "claude:web")
            .expect("load")
            .expect("present");
        assert_eq!(k.pubkey(), fx["durable"]["pubkey"].as_str().expect("pk"));
        assert_eq!(k.kind, "agent");
        let r = &fx["request"];
        let h = crate::auth::sign_request_at(
            k.signing_key(),
            "POST",
            r["path"].as_str().expect("path"),
            r["body"].as_str().expect("body").as_bytes(),
            r["ts"].as_i64().expect("ts"),
            r["nonce"].as_str().expect("nonce"),
        );
        assert_eq!(h.get("x-trantor-sig"), r["sig"].as_str());
        // load_or_create must not replace an existing key.
        let again = load_or_create(tmp.path(), "claude:web", "agent").expect("again");
        assert_eq!(again.pubkey(), k.pubkey());
    }

    #[test]
    fn reads_an_original_instance_key_and_its_endorsement_verifies() {
        let fx = fixture();
        let tmp = tempfile::tempdir().expect("tmp");
        install(tmp.path(), "keys/claude_web.json", &fx["durable"]);
        install(
            tmp.path(),
            "keys/instances/claude_web@mcp-fixture-1.json",
            &fx["instance"],
        );
        let d = load(tmp.path(), "claude:web")
            .expect("load")
            .expect("present");
        let i = load_or_create_instance(tmp.path(), &d, "mcp-fixture-1").expect("inst");
        assert_eq!(
            pubkey_hex(&i.key),
            fx["instance"]["pubkey"].as_str().expect("pk")
        );
        assert_eq!(
            i.endorsement,
            fx["instance"]["endorsement"].as_str().expect("e")
        );
        assert!(verify_endorsement(
            &d.pubkey(),
            &pubkey_hex(&i.key),
            &i.instance_id,
            i.created_at,
            &i.endorsement
        ));
    }

    #[test]
    fn creates_once_with_mode_0600_in_the_original_format() {
        let tmp = tempfile::tempdir().expect("tmp");
        let a = load_or_create(tmp.path(), "codex:api", "agent").expect("create");
        let path = key_path(tmp.path(), "codex:api");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = std::fs::metadata(keys_dir(tmp.path()))
            .expect("meta")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dmode, 0o700);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        assert_eq!(v["name"], "codex:api");
        assert_eq!(v["kind"], "agent");
        assert_eq!(v["pubkey"], a.pubkey().as_str());
        assert_eq!(v["privkey"].as_str().map(str::len), Some(64));
        assert!(v["createdAt"].as_i64().is_some_and(|t| t > 0));
        let b = load_or_create(tmp.path(), "codex:api", "agent").expect("load");
        assert_eq!(a.pubkey(), b.pubkey());
        // No temporary files are left behind.
        let names: Vec<_> = std::fs::read_dir(keys_dir(tmp.path()))
            .expect("ls")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        assert_eq!(names, vec!["codex_api.json".to_string()]);
    }

    #[test]
    fn racing_creators_agree_on_one_key() {
        let tmp = tempfile::tempdir().expect("tmp");
        let bus = tmp.path().to_path_buf();
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let bus = bus.clone();
                std::thread::spawn(move || {
                    load_or_create(&bus, "claude:race", "agent")
                        .expect("create")
                        .pubkey()
                })
            })
            .collect();
        let keys: std::collections::BTreeSet<String> = handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect();
        assert_eq!(keys.len(), 1);
    }

    #[test]
    fn loose_permissions_are_refused_with_the_fix() {
        let tmp = tempfile::tempdir().expect("tmp");
        load_or_create(tmp.path(), "claude:web", "agent").expect("create");
        let path = key_path(tmp.path(), "claude:web");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = load_or_create(tmp.path(), "claude:web", "agent").expect_err("refused");
        let msg = err.to_string();
        assert!(matches!(
            err,
            KeyError::LoosePermissions { mode: 0o644, .. }
        ));
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains("chmod 600"), "{msg}");
        // The refused file is left alone, not replaced by a new key.
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
    }

    #[test]
    fn corrupt_and_mismatched_files_are_errors() {
        let tmp = tempfile::tempdir().expect("tmp");
        let p = install(
            tmp.path(),
            "keys/x.json",
            &serde_json::json!({"name":"x","pubkey":"00","privkey":"zz"}),
        );
        assert!(matches!(
            load(tmp.path(), "x"),
            Err(KeyError::Corrupt { .. })
        ));
        let fx = fixture();
        let mut wrong = fx["durable"].clone();
        wrong["pubkey"] = fx["instance"]["pubkey"].clone();
        std::fs::write(&p, serde_json::to_string(&wrong).expect("json")).expect("write");
        assert!(matches!(
            load(tmp.path(), "x"),
            Err(KeyError::Corrupt { .. })
        ));
    }

    #[test]
    fn new_instance_keys_are_endorsed_and_reused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = load_or_create(tmp.path(), "claude:web", "agent").expect("durable");
        let i = load_or_create_instance(tmp.path(), &d, "hook-abc").expect("inst");
        assert_ne!(pubkey_hex(&i.key), d.pubkey());
        assert_eq!(i.durable_pubkey, d.pubkey());
        assert!(verify_endorsement(
            &d.pubkey(),
            &pubkey_hex(&i.key),
            "hook-abc",
            i.created_at,
            &i.endorsement
        ));
        let again = load_or_create_instance(tmp.path(), &d, "hook-abc").expect("again");
        assert_eq!(pubkey_hex(&again.key), pubkey_hex(&i.key));
        let p = instance_key_path(tmp.path(), "claude:web", "hook-abc");
        let mode = std::fs::metadata(&p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
