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

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signer as _, SigningKey};
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The endorsement scheme label, first field of the string a durable key signs for an instance.
pub const INST_SCHEME: &str = "trantor-inst-v1";

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
    /// The operating system's random source failed.
    #[error("no randomness for a new key: {0}")]
    Random(String),
}

/// The kinds of identity the hub knows.
pub const KINDS: &[&str] = &["human", "agent", "tool"];

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
    pub fn generate(name: &str, kind: &str) -> Result<Keypair, KeyError> {
        Ok(Keypair {
            name: name.to_string(),
            kind: kind.to_string(),
            created_at: crate::now_ms(),
            key: SigningKey::from_bytes(&random_seed()?),
        })
    }

    /// The public key as 64 lowercase hex characters: the identity on the wire.
    pub fn pubkey(&self) -> String {
        hex(self.key.verifying_key().as_bytes())
    }

    /// An Ed25519 signature over `msg`, standard base64.
    pub fn sign_b64(&self, msg: &[u8]) -> String {
        B64.encode(self.key.sign(msg).to_bytes())
    }

    /// Make an instance key for `instance_id`, endorsed by this key, without storing it.
    pub fn endorse_new_instance(&self, instance_id: &str) -> Result<InstanceKey, KeyError> {
        let key = SigningKey::from_bytes(&random_seed()?);
        let created_at = crate::now_ms();
        let pubkey = hex(key.verifying_key().as_bytes());
        let endorsement = self.sign_b64(
            endorsement_string(&self.pubkey(), &pubkey, instance_id, created_at).as_bytes(),
        );
        Ok(InstanceKey {
            name: self.name.clone(),
            instance_id: instance_id.to_string(),
            created_at,
            endorsement,
            durable_pubkey: self.pubkey(),
            key,
        })
    }

    fn to_file(&self) -> DurableFile {
        DurableFile {
            name: self.name.clone(),
            kind: self.kind.clone(),
            pubkey: self.pubkey(),
            privkey: hex(self.key.as_bytes()),
            created_at: self.created_at,
        }
    }
}

/// A per-process key endorsed by a durable key (the MCP server's and the hooks' signing key).
#[derive(Clone)]
pub struct InstanceKey {
    /// The durable identity's session name.
    pub name: String,
    /// The instance id (free text; the MCP server uses `mcp-<base36 time>-<random>`).
    pub instance_id: String,
    /// When the instance key was made, epoch ms (part of the endorsed string).
    pub created_at: i64,
    /// The durable key's signature over the endorsement string, standard base64.
    pub endorsement: String,
    /// The durable identity's public key, hex.
    pub durable_pubkey: String,
    key: SigningKey,
}

impl std::fmt::Debug for InstanceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstanceKey")
            .field("name", &self.name)
            .field("instance_id", &self.instance_id)
            .field("pubkey", &self.pubkey())
            .field("durable_pubkey", &self.durable_pubkey)
            .finish()
    }
}

impl InstanceKey {
    /// The instance public key, 64 lowercase hex characters.
    pub fn pubkey(&self) -> String {
        hex(self.key.verifying_key().as_bytes())
    }

    /// An Ed25519 signature over `msg` by the instance key, standard base64.
    pub fn sign_b64(&self, msg: &[u8]) -> String {
        B64.encode(self.key.sign(msg).to_bytes())
    }

    fn to_file(&self) -> InstanceFile {
        InstanceFile {
            name: self.name.clone(),
            instance_id: self.instance_id.clone(),
            pubkey: self.pubkey(),
            privkey: hex(self.key.as_bytes()),
            created_at: self.created_at,
            endorsement: self.endorsement.clone(),
            durable_pubkey: self.durable_pubkey.clone(),
        }
    }
}

/// The string a durable key signs to endorse an instance key: five newline-joined fields.
pub fn endorsement_string(
    durable_pubkey: &str,
    instance_pubkey: &str,
    instance_id: &str,
    created_at: i64,
) -> String {
    [
        INST_SCHEME,
        durable_pubkey,
        instance_pubkey,
        instance_id,
        &created_at.to_string(),
    ]
    .join("\n")
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
    collapsed
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
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

/// The marker recording that `name` enrolled on a hub (`keys/<name>.enrolled`).
pub fn enrolled_marker(bus: &Path, name: &str) -> PathBuf {
    keys_dir(bus).join(format!("{}.enrolled", sanitise(name)))
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
    let pair = Keypair::generate(name, kind)?;
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
    let inst = durable.endorse_new_instance(instance_id)?;
    let json = serde_json::to_string(&inst.to_file()).map_err(|e| corrupt(&path, e))?;
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
        name: f.name,
        instance_id: f.instance_id,
        created_at: f.created_at,
        endorsement: f.endorsement,
        durable_pubkey: f.durable_pubkey,
        key,
    };
    if !inst.pubkey().eq_ignore_ascii_case(&f.pubkey) {
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
        hex(&random_seed()?[..4])
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
    let bytes = unhex(privkey_hex).ok_or_else(|| corrupt(path, "privkey is not hex"))?;
    let seed: [u8; 32] = bytes
        .try_into()
        .map_err(|_| corrupt(path, "privkey is not 32 bytes"))?;
    Ok(SigningKey::from_bytes(&seed))
}

fn random_seed() -> Result<[u8; 32], KeyError> {
    let mut seed = [0u8; 32];
    fill_random(&mut seed)?;
    Ok(seed)
}

fn fill_random(buf: &mut [u8]) -> Result<(), KeyError> {
    use rand::RngCore as _;
    rand::rngs::OsRng
        .try_fill_bytes(buf)
        .map_err(|e| KeyError::Random(e.to_string()))
}

/// `n` random bytes as lowercase hex (nonces, instance ids).
pub fn random_hex(n: usize) -> Result<String, KeyError> {
    let mut buf = vec![0u8; n];
    fill_random(&mut buf)?;
    Ok(hex(&buf))
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

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Bytes from hex (either case), `None` when it is not hex.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    hex::decode(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signature, Verifier as _, VerifyingKey};

    fn fixture() -> serde_json::Value {
        serde_json::from_str(include_str!("../testdata/original-keys.json")).expect("fixture")
    }

    fn verify(pubkey_hex: &str, msg: &str, sig_b64: &str) -> bool {
        let pk: [u8; 32] = unhex(pubkey_hex).expect("hex").try_into().expect("32");
        let sig: [u8; 64] = B64.decode(sig_b64).expect("b64").try_into().expect("64");
        VerifyingKey::from_bytes(&pk)
            .expect("pk")
            .verify(msg.as_bytes(), &Signature::from_bytes(&sig))
            .is_ok()
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
        let canonical = [
            "trantor-v1",
            "POST",
            r["path"].as_str().expect("path"),
            r["bodyHash"].as_str().expect("hash"),
            &r["ts"].as_i64().expect("ts").to_string(),
            r["nonce"].as_str().expect("nonce"),
        ]
        .join("\n");
        assert_eq!(
            k.sign_b64(canonical.as_bytes()),
            r["sig"].as_str().expect("sig")
        );
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
        assert_eq!(i.pubkey(), fx["instance"]["pubkey"].as_str().expect("pk"));
        assert_eq!(
            i.endorsement,
            fx["instance"]["endorsement"].as_str().expect("e")
        );
        let s = endorsement_string(&d.pubkey(), &i.pubkey(), &i.instance_id, i.created_at);
        assert!(verify(&d.pubkey(), &s, &i.endorsement));
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
        assert_ne!(i.pubkey(), d.pubkey());
        assert_eq!(i.durable_pubkey, d.pubkey());
        let s = endorsement_string(&d.pubkey(), &i.pubkey(), "hook-abc", i.created_at);
        assert!(verify(&d.pubkey(), &s, &i.endorsement));
        let again = load_or_create_instance(tmp.path(), &d, "hook-abc").expect("again");
        assert_eq!(again.pubkey(), i.pubkey());
        let p = instance_key_path(tmp.path(), "claude:web", "hook-abc");
        let mode = std::fs::metadata(&p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(hex(&[0, 15, 255]), "000fff");
        assert_eq!(unhex("000FfF"), Some(vec![0, 15, 255]));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
    }
}
