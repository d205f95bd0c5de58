//! Signed identity, the crypto core both sides share (docs/protocol.md §2): the `trantor-v1`
//! request signature, instance-key endorsements, roles and scopes, and the wire shapes of
//! `/enroll`, `/invite`, `/identities` and `/identity/revoke`.
//!
//! An identity is an Ed25519 key; its 32-byte public key in lowercase hex *is* the identity. A
//! request is signed over six `\n`-joined fields (scheme, method, path+query, body hash, ts,
//! nonce), so no field can be crafted to look like the start of another. The hub checks the
//! signature and the clock window here; replay memory and authorization live in the hub, which
//! owns that state.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The Ed25519 key types, re-exported so users need no direct dependency.
pub use ed25519_dalek::{SigningKey as Ed25519Key, VerifyingKey as Ed25519PublicKey};

/// The request-signature scheme, the first field of every signed string.
pub const SCHEME: &str = "trantor-v1";
/// The instance-endorsement scheme, the first field of every endorsement string.
pub const INST_SCHEME: &str = "trantor-inst-v1";
/// How far a signature's `ts` may be from the verifier's clock, either way, in ms.
pub const SKEW_MS: i64 = 120_000;

/// Header: the signer's public key, 64 hex chars.
pub const HDR_PUBKEY: &str = "x-trantor-pubkey";
/// Header: the Ed25519 signature, standard base64.
pub const HDR_SIG: &str = "x-trantor-sig";
/// Header: the signing time, epoch ms in decimal.
pub const HDR_TS: &str = "x-trantor-ts";
/// Header: 16 random bytes as 32 hex chars.
pub const HDR_NONCE: &str = "x-trantor-nonce";
/// Header (instance keys): the durable identity's public key.
pub const HDR_DURABLE: &str = "x-trantor-durable";
/// Header (instance keys): the instance id.
pub const HDR_INST: &str = "x-trantor-inst";
/// Header (instance keys): the durable key's base64 signature over the endorsement string.
pub const HDR_ENDORSE: &str = "x-trantor-endorse";
/// Header (instance keys): the instance's createdAt, epoch ms.
pub const HDR_INST_TS: &str = "x-trantor-inst-ts";

/// The four headers whose presence marks a request as signed.
pub const SIGNATURE_HEADERS: [&str; 4] = [HDR_PUBKEY, HDR_SIG, HDR_TS, HDR_NONCE];

/// Why a signature or an identity was refused. [`AuthError::reason`] is the wire text, the same
/// words the original hub answers with, so clients of either can match on them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// None of the signature headers, or not all four.
    #[error("unsigned")]
    Unsigned,
    /// The pubkey header is not 64 hex chars.
    #[error("bad-pubkey")]
    BadPubkey,
    /// The nonce header is not 32 hex chars.
    #[error("bad-nonce")]
    BadNonce,
    /// The ts header is not a decimal epoch-ms number.
    #[error("bad-ts")]
    BadTs,
    /// The ts is more than [`SKEW_MS`] from the verifier's clock.
    #[error("stale")]
    Stale,
    /// The signature does not verify for this method, path, body, ts and nonce.
    #[error("bad-signature")]
    BadSignature,
    /// This key already signed a request with this nonce inside the window.
    #[error("replay")]
    Replay,
    /// The instance key's endorsement by the durable key does not verify.
    #[error("bad endorsement")]
    BadEndorsement,
    /// No enrolled identity has this key.
    #[error("unknown identity")]
    UnknownIdentity,
    /// The identity was revoked by an owner.
    #[error("revoked")]
    Revoked,
    /// A key's hex text is malformed (key files, not requests).
    #[error("bad key: {0}")]
    BadKey(String),
}

impl AuthError {
    /// The reason as the hub puts it in `{error}` (and in the warn-mode log line).
    pub fn reason(&self) -> String {
        self.to_string()
    }
}

/// Lowercase hex SHA-256 of the exact body bytes, or the empty string for an empty body.
pub fn body_hash(body: &[u8]) -> String {
    if body.is_empty() {
        return String::new();
    }
    hex::encode(Sha256::digest(body))
}

/// The signed string: six fields joined by `\n` (docs/protocol.md §2.2).
pub fn canonical_string(
    method: &str,
    path_and_query: &str,
    hash: &str,
    ts: i64,
    nonce: &str,
) -> String {
    format!(
        "{SCHEME}\n{}\n{path_and_query}\n{hash}\n{ts}\n{nonce}",
        method.to_ascii_uppercase()
    )
}

/// The instance-endorsement string: five fields joined by `\n` (docs/protocol.md §2.3).
pub fn endorsement_string(
    durable_pubkey: &str,
    instance_pubkey: &str,
    instance_id: &str,
    created_at: i64,
) -> String {
    format!("{INST_SCHEME}\n{durable_pubkey}\n{instance_pubkey}\n{instance_id}\n{created_at}")
}

/// A signing key from its 32-byte seed in hex (the key files' `privkey`).
pub fn signing_key_from_hex(seed_hex: &str) -> Result<SigningKey, AuthError> {
    let bytes = hex::decode(seed_hex.trim()).map_err(|e| AuthError::BadKey(e.to_string()))?;
    let seed: [u8; 32] = bytes
        .try_into()
        .map_err(|_| AuthError::BadKey("seed is not 32 bytes".into()))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// A fresh random signing key.
pub fn generate_key() -> SigningKey {
    SigningKey::generate(&mut rand::rngs::OsRng)
}

/// A key's public half as 64 lowercase hex chars: the identity.
pub fn pubkey_hex(key: &SigningKey) -> String {
    hex::encode(key.verifying_key().as_bytes())
}

/// A key's seed as 64 lowercase hex chars (the key files' `privkey`; never send it anywhere).
pub fn seed_hex(key: &SigningKey) -> String {
    hex::encode(key.to_bytes())
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn verifying_key(pubkey: &str) -> Option<VerifyingKey> {
    let bytes: [u8; 32] = hex::decode(pubkey).ok()?.try_into().ok()?;
    VerifyingKey::from_bytes(&bytes).ok()
}

fn verify_b64(pubkey: &str, msg: &[u8], sig_b64: &str) -> bool {
    let Some(key) = verifying_key(pubkey) else {
        return false;
    };
    let Ok(sig) = B64.decode(sig_b64.trim()) else {
        return false;
    };
    let Ok(sig) = Signature::from_slice(&sig) else {
        return false;
    };
    key.verify(msg, &sig).is_ok()
}

/// A 32-hex random nonce (16 bytes from the OS).
pub fn new_nonce() -> String {
    let mut b = [0u8; 16];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut b);
    hex::encode(b)
}

/// The headers one signed request carries: the four v1 headers, plus the four instance headers
/// when an endorsed instance key signed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    /// `(name, value)` pairs, lowercase names.
    pub headers: Vec<(&'static str, String)>,
}

impl SignedHeaders {
    /// The value of one header, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Signs one request now, with a fresh nonce: `path_and_query` exactly as it goes on the wire,
/// `body` the exact bytes sent (empty for GET).
pub fn sign_request(
    key: &SigningKey,
    method: &str,
    path_and_query: &str,
    body: &[u8],
) -> SignedHeaders {
    sign_request_at(
        key,
        method,
        path_and_query,
        body,
        crate::now_ms(),
        &new_nonce(),
    )
}

/// [`sign_request`] with the time and nonce given (tests and known vectors).
pub fn sign_request_at(
    key: &SigningKey,
    method: &str,
    path_and_query: &str,
    body: &[u8],
    ts: i64,
    nonce: &str,
) -> SignedHeaders {
    let msg = canonical_string(method, path_and_query, &body_hash(body), ts, nonce);
    let sig = key.sign(msg.as_bytes());
    SignedHeaders {
        headers: vec![
            (HDR_PUBKEY, pubkey_hex(key)),
            (HDR_SIG, B64.encode(sig.to_bytes())),
            (HDR_TS, ts.to_string()),
            (HDR_NONCE, nonce.to_string()),
        ],
    }
}

/// A per-process key endorsed by a durable key (docs/protocol.md §2.3): it signs the traffic,
/// the hub attributes it to the durable identity.
#[derive(Debug, Clone)]
pub struct InstanceKey {
    /// The instance's own signing key.
    pub key: SigningKey,
    /// The durable identity's public key (hex).
    pub durable_pubkey: String,
    /// Free-form instance id (`mcp-<base36 time>-<random>` for the MCP server).
    pub instance_id: String,
    /// When the instance was minted, epoch ms; part of the endorsed string.
    pub created_at: i64,
    /// The durable key's signature over [`endorsement_string`], base64.
    pub endorsement: String,
}

impl InstanceKey {
    /// Mints an instance key for `instance_id`, endorsed by `durable` at `created_at`.
    pub fn mint(durable: &SigningKey, instance_id: &str, created_at: i64) -> InstanceKey {
        let key = generate_key();
        let endorsement = endorse(durable, &pubkey_hex(&key), instance_id, created_at);
        InstanceKey {
            key,
            durable_pubkey: pubkey_hex(durable),
            instance_id: instance_id.to_string(),
            created_at,
            endorsement,
        }
    }

    /// Signs one request with the instance key and adds the four instance headers.
    pub fn sign_request(&self, method: &str, path_and_query: &str, body: &[u8]) -> SignedHeaders {
        let mut h = sign_request(&self.key, method, path_and_query, body);
        h.headers.extend(self.headers());
        h
    }

    /// The four instance headers.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        vec![
            (HDR_DURABLE, self.durable_pubkey.clone()),
            (HDR_INST, self.instance_id.clone()),
            (HDR_ENDORSE, self.endorsement.clone()),
            (HDR_INST_TS, self.created_at.to_string()),
        ]
    }
}

/// The durable key's endorsement of an instance public key, base64.
pub fn endorse(
    durable: &SigningKey,
    instance_pubkey: &str,
    instance_id: &str,
    created_at: i64,
) -> String {
    let msg = endorsement_string(
        &pubkey_hex(durable),
        instance_pubkey,
        instance_id,
        created_at,
    );
    B64.encode(durable.sign(msg.as_bytes()).to_bytes())
}

/// Whether `durable_pubkey` endorsed `instance_pubkey` for `instance_id` at `created_at`.
pub fn verify_endorsement(
    durable_pubkey: &str,
    instance_pubkey: &str,
    instance_id: &str,
    created_at: i64,
    endorsement: &str,
) -> bool {
    if instance_id.is_empty() || created_at == 0 || endorsement.is_empty() {
        return false;
    }
    if !is_hex(durable_pubkey, 64) || !is_hex(instance_pubkey, 64) {
        return false;
    }
    let msg = endorsement_string(durable_pubkey, instance_pubkey, instance_id, created_at);
    verify_b64(
        &durable_pubkey.to_ascii_lowercase(),
        msg.as_bytes(),
        endorsement,
    )
}

/// A request whose signature verified: who signed it, when, with which nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedKey {
    /// The signer's public key, lowercase hex.
    pub pubkey: String,
    /// The signed ts, epoch ms.
    pub ts: i64,
    /// The nonce, lowercase hex (the replay cache key with `pubkey`).
    pub nonce: String,
}

/// Whether any of the four signature headers is present (a request with some of them is treated
/// as signed, and fails verification as `unsigned` if one is missing).
pub fn has_signature_headers(get: impl Fn(&str) -> Option<String>) -> bool {
    SIGNATURE_HEADERS
        .iter()
        .any(|h| get(h).is_some_and(|v| !v.is_empty()))
}

/// Verifies a request's `trantor-v1` signature and clock window against `now_ms`. `get` looks a
/// header up by lowercase name; `path_and_query` is the raw request target as received; `body`
/// the exact bytes (empty for GET/HEAD). Replay and identity checks are the caller's.
pub fn verify_request(
    get: impl Fn(&str) -> Option<String>,
    method: &str,
    path_and_query: &str,
    body: &[u8],
    now_ms: i64,
) -> Result<VerifiedKey, AuthError> {
    let field = |h: &str| get(h).filter(|v| !v.is_empty());
    let (Some(pubkey), Some(sig), Some(ts), Some(nonce)) = (
        field(HDR_PUBKEY),
        field(HDR_SIG),
        field(HDR_TS),
        field(HDR_NONCE),
    ) else {
        return Err(AuthError::Unsigned);
    };
    if !is_hex(&pubkey, 64) {
        return Err(AuthError::BadPubkey);
    }
    if !is_hex(&nonce, 32) {
        return Err(AuthError::BadNonce);
    }
    let ts: i64 = ts.trim().parse().map_err(|_| AuthError::BadTs)?;
    if now_ms.abs_diff(ts) > SKEW_MS as u64 {
        return Err(AuthError::Stale);
    }
    let body = if method.eq_ignore_ascii_case("GET") || method.eq_ignore_ascii_case("HEAD") {
        &[][..]
    } else {
        body
    };
    let msg = canonical_string(method, path_and_query, &body_hash(body), ts, &nonce);
    let pubkey = pubkey.to_ascii_lowercase();
    if !verify_b64(&pubkey, msg.as_bytes(), &sig) {
        return Err(AuthError::BadSignature);
    }
    Ok(VerifiedKey {
        pubkey,
        ts,
        nonce: nonce.to_ascii_lowercase(),
    })
}

/// A role on a project. Ranked `read < write < owner`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// May read.
    Read,
    /// May read and post.
    Write,
    /// May also mint invites, revoke identities and run owner-only routes.
    Owner,
}

impl Role {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Owner => "owner",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "read" => Some(Role::Read),
            "write" => Some(Role::Write),
            "owner" => Some(Role::Owner),
            _ => None,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The project that stands for every project in a scope.
pub const ANY_PROJECT: &str = "*";

/// One grant: a role on a project (or on `*`, every project).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Scope {
    /// A project name, or `*` (empty means `*`). Requests may spell it `proj`.
    #[serde(alias = "proj")]
    #[schemars(length(max = crate::limits::PROJECT))]
    pub project: String,
    /// The role granted.
    pub role: Role,
}

impl Scope {
    /// Whether this scope grants at least `need` on `project`. An empty target project (a
    /// roster-style request naming none) matches any project.
    pub fn allows(&self, project: &str, need: Role) -> bool {
        self.role >= need
            && (self.project == ANY_PROJECT || project.is_empty() || self.project == project)
    }
}

/// Whether any scope in `scopes` grants at least `need` on `project`.
pub fn scopes_allow(scopes: &[Scope], project: &str, need: Role) -> bool {
    scopes.iter().any(|s| s.allows(project, need))
}

/// What an identity is. Distinct from a peer row's free-form `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum IdentityKind {
    /// A person (the operator's own key): exempt from the cross-project fence.
    Human,
    /// A crew seat.
    Agent,
    /// A tool or script.
    Tool,
}

/// The kinds `/enroll` and `/invite` accept, in the order the 400 reply lists them.
pub const IDENTITY_KINDS: [&str; 3] = ["human", "agent", "tool"];

impl IdentityKind {
    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<IdentityKind> {
        match s {
            "human" => Some(IdentityKind::Human),
            "agent" => Some(IdentityKind::Agent),
            "tool" => Some(IdentityKind::Tool),
            _ => None,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            IdentityKind::Human => "human",
            IdentityKind::Agent => "agent",
            IdentityKind::Tool => "tool",
        }
    }
}

/// How an identity came to be enrolled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EnrolledBy {
    /// The hub's bootstrap token (first identity only; owner of `*`).
    Bootstrap,
    /// An owner-minted invite.
    Invite,
    /// Trust on first use, on a loopback bind.
    Tofu,
}

/// What a peer may see of an identity: never a private key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityView {
    /// The identity's name (a session name for seats).
    pub name: String,
    /// human, agent or tool.
    pub kind: IdentityKind,
    /// Public key, 64 hex.
    pub pubkey: String,
    /// Enrollment time, epoch ms.
    pub created_at: i64,
}

/// An enrolled identity as the hub stores it (and lists it to owners).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityRecord {
    /// The identity's name.
    pub name: String,
    /// human, agent or tool.
    pub kind: IdentityKind,
    /// Public key, 64 hex.
    pub pubkey: String,
    /// Enrollment time, epoch ms.
    pub created_at: i64,
    /// bootstrap, invite or tofu.
    pub enrolled_by: EnrolledBy,
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// When an owner revoked it (absent while it is live).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<i64>,
}

impl IdentityRecord {
    /// The public view sent in `/enroll` replies.
    pub fn view(&self) -> IdentityView {
        IdentityView {
            name: self.name.clone(),
            kind: self.kind,
            pubkey: self.pubkey.clone(),
            created_at: self.created_at,
        }
    }
}

/// Body of `POST /enroll` (signed by the key being enrolled, in every mode).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnrollRequest {
    /// Name to enroll under (≤ 120 chars); default the first 16 hex of the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// human, agent (default) or tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// A bootstrap token or an invite token; none asks for trust on first use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Explicit scopes for a TOFU or bootstrap enrollment without invite scopes (≤ 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<Scope>>,
    /// Default scope project when `scopes` is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Default scope role when `scopes` is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Sent by the original's hooks; ignored (the key comes from the signature).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pubkey: Option<String>,
}

/// Reply of `POST /enroll`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EnrollReply {
    /// Always true.
    pub ok: bool,
    /// The enrolled identity.
    pub identity: IdentityView,
    /// Its scopes.
    pub scopes: Vec<Scope>,
}

/// Body of `POST /invite` (owner of `*`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InviteRequest {
    /// The scopes the invited key will get (1 to 20).
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = 20))]
    pub scopes: Vec<Scope>,
    /// Seconds until the invite expires: default 86400, clamped to 1 s … 30 days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_sec: Option<f64>,
    /// human, agent (default when empty or absent) or tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["human", "agent", "tool", "", null]))]
    pub kind: Option<String>,
}

/// Reply of `POST /invite`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InviteReply {
    /// Always true.
    pub ok: bool,
    /// The one-use token, 48 hex; shown once, the hub keeps only its SHA-256.
    pub token: String,
    /// The scopes it grants.
    pub scopes: Vec<Scope>,
    /// When it expires, epoch ms.
    pub expires_at: i64,
}

/// An invite as the hub stores it, under the SHA-256 of its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InviteRecord {
    /// The scopes it grants.
    pub scopes: Vec<Scope>,
    /// The kind of identity it was minted for.
    pub kind: IdentityKind,
    /// Expiry, epoch ms.
    pub expires_at: i64,
    /// Mint time, epoch ms.
    pub created_at: i64,
    /// The owner key that minted it.
    pub created_by: String,
    /// When it was used (absent while unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_at: Option<i64>,
    /// The key that used it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_by: Option<String>,
}

/// Reply of `GET /identities` (owner of `*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IdentitiesReply {
    /// Always true.
    pub ok: bool,
    /// Every enrolled identity, revoked ones included (with `revokedAt`), oldest first.
    pub identities: Vec<IdentityRecord>,
}

/// Body of `POST /identity/revoke` (owner of `*`): name a key or a name (every live key of it).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("anyOf" = crate::limits::one_of_non_blank("name", "pubkey")))]
pub struct RevokeRequest {
    /// Revoke this public key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pubkey: Option<String>,
    /// Revoke every live key enrolled under this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Reply of `POST /identity/revoke`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RevokeReply {
    /// Always true.
    pub ok: bool,
    /// The identities revoked by this call (empty when they already were).
    pub revoked: Vec<IdentityView>,
}

/// What a bearer token starts with (the rest is 64 hex digits of randomness).
pub const TOKEN_PREFIX: &str = "trt_";
/// Longest token lifetime, seconds (366 days).
pub const TOKEN_TTL_MAX_SEC: f64 = 366.0 * 86_400.0;
/// Default token lifetime, seconds (30 days).
pub const TOKEN_TTL_SEC: f64 = 30.0 * 86_400.0;

/// A bearer token as the hub keeps it: never the token, only its SHA-256 (the store key) and
/// what it is bound to — one session, one project, one role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenRecord {
    /// Its id: the first 16 hex of the token's SHA-256 (what `token revoke` names).
    pub id: String,
    /// The bus session every request with it speaks as.
    pub session: String,
    /// The one project it may act on.
    pub project: String,
    /// Its role on that project (read or write).
    pub role: Role,
    /// Minted, epoch ms.
    pub created_at: i64,
    /// Expires, epoch ms.
    pub expires_at: i64,
    /// The owner that minted it (identity name; empty on a hub not checking signatures).
    #[serde(default)]
    pub created_by: String,
    /// When an owner revoked it (absent while it is live).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<i64>,
}

impl TokenRecord {
    /// Whether it may be used at `now`.
    pub fn live(&self, now: i64) -> bool {
        self.revoked_at.is_none() && now < self.expires_at
    }
}

/// Body of `POST /token/mint` (owner of `*`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenMintRequest {
    /// The session the token speaks as (`<who>:<project>`).
    #[schemars(regex(pattern = r"^[^\s:]{1,100}:[A-Za-z0-9][A-Za-z0-9._-]{0,79}$"))]
    pub session: String,
    /// The project it may act on [default: the session's part after its last `:`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$"))]
    pub project: Option<String>,
    /// read or write (default write; a token is never an owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(read|write)$"))]
    pub role: Option<String>,
    /// Seconds until it expires: default 30 days, clamped to 1 s … 366 days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_sec: Option<f64>,
}

/// Reply of `POST /token/mint`: the token, shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TokenMintReply {
    /// Always true.
    pub ok: bool,
    /// The token (`trt_…`); the hub keeps only its hash.
    pub token: String,
    /// What it is bound to.
    pub record: TokenRecord,
}

/// Reply of `GET /tokens` (owner of `*`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TokensReply {
    /// Always true.
    pub ok: bool,
    /// Every token, revoked and expired ones included, oldest first.
    pub tokens: Vec<TokenRecord>,
}

/// Body of `POST /token/revoke` (owner of `*`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRevokeRequest {
    /// The token's id (from `GET /tokens`), or the token itself.
    #[schemars(regex(pattern = r"^[^\s]{1,200}$"))]
    pub id: String,
}

/// Reply of `POST /token/revoke`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TokenRevokeReply {
    /// Always true.
    pub ok: bool,
    /// Whether this call revoked it (false: it already was).
    pub revoked: bool,
    /// The token.
    pub record: TokenRecord,
}

/// Looks a bearer token up on the hub: its live record, or `None` for an unknown, expired or
/// revoked one (the hub hands one to the services it mounts, e.g. `/mcp`).
pub type TokenResolver = std::sync::Arc<
    dyn Fn(
            String,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<TokenRecord>> + Send>>
        + Send
        + Sync,
>;

/// The SHA-256 of a token, hex: its store key (its first 16 characters are its id).
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.trim().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Produced by running the original's `signRequest`, `bodyHash`, `loadOrCreateInstance` under
    // node with the seed 00 01 … 1f; the original's own verifier accepted each.
    const SEED: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const PUB: &str = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8";
    const BODY: &str = r#"{"from":"claude:proj","to":"all","body":"hi"}"#;
    const BODY_HASH: &str = "571b3dae15c799415e60a16015621ac227f79e31adf6f2e991d2beeca28a0398";
    const POST_SIG: &str =
        "diw7R74ChGfOqSsadbYvT5IFgSfuYF2XdNrAqrLivMcXc/1wa78ZfIsz6/N95SDtmTbalsl8wX+ZHhxWcYlrCQ==";
    const POST_TS: i64 = 1796070353040;
    const POST_NONCE: &str = "8606df8802f9109846d60ef961061e42";
    const GET_PATH: &str = "/inbox?session=claude%3Aproj&since=0";
    const GET_SIG: &str =
        "5rkjvKFx6DfoDGO120uhI1FC583QjCU/HNZ6lZbc2GQraBtfMApllKRZw95rjXN49VIMDaWcjr/NeF4NillhCA==";
    const GET_TS: i64 = 1796070353041;
    const GET_NONCE: &str = "fe1e9a9e51f8505d6c2f1aafad87f550";
    const INST_PUB: &str = "8597b886b479345a2fa1b77ffd6df562b1f66509605d0150cbd3404b737e26e5";
    const INST_SEED: &str = "726bd0c54aa6d2cd5fad5da88f53817083f3263c7d7fff79db6140fe18bbaaa9";
    const INST_ID: &str = "mcp-test-1";
    const INST_TS: i64 = 1796070353047;
    const ENDORSE: &str =
        "VGrlAJtUuNRQ9B+YvmUrrZXqfBWU3RfUGXY6xAfvErjbLzREEdRaqph7mcg8BAydRceglcAo8U/60QfbZpzjCQ==";

    fn lookup(h: &SignedHeaders) -> impl Fn(&str) -> Option<String> + '_ {
        |n| h.get(n).map(str::to_string)
    }

    #[test]
    fn known_vector_from_the_original_signer() {
        let key = signing_key_from_hex(SEED).expect("seed");
        assert_eq!(pubkey_hex(&key), PUB);
        assert_eq!(body_hash(BODY.as_bytes()), BODY_HASH);
        assert_eq!(body_hash(b""), "");
        // The original upper-cases a lower-case method before signing.
        let h = sign_request_at(
            &key,
            "post",
            "/send?x=1",
            BODY.as_bytes(),
            POST_TS,
            POST_NONCE,
        );
        assert_eq!(h.get(HDR_SIG), Some(POST_SIG));
        let h = sign_request_at(&key, "GET", GET_PATH, b"", GET_TS, GET_NONCE);
        assert_eq!(h.get(HDR_SIG), Some(GET_SIG));
        let got = verify_request(lookup(&h), "GET", GET_PATH, b"", GET_TS + 5).expect("verifies");
        assert_eq!(got.pubkey, PUB);
        assert_eq!(got.nonce, GET_NONCE);
    }

    #[test]
    fn known_endorsement_from_the_original() {
        let durable = signing_key_from_hex(SEED).expect("seed");
        let inst = signing_key_from_hex(INST_SEED).expect("seed");
        assert_eq!(pubkey_hex(&inst), INST_PUB);
        assert_eq!(endorse(&durable, INST_PUB, INST_ID, INST_TS), ENDORSE);
        assert!(verify_endorsement(PUB, INST_PUB, INST_ID, INST_TS, ENDORSE));
        assert!(!verify_endorsement(
            PUB,
            INST_PUB,
            INST_ID,
            INST_TS + 1,
            ENDORSE
        ));
        assert!(!verify_endorsement(
            PUB,
            INST_PUB,
            "mcp-other",
            INST_TS,
            ENDORSE
        ));
        assert!(!verify_endorsement(
            INST_PUB, INST_PUB, INST_ID, INST_TS, ENDORSE
        ));
    }

    #[test]
    fn verify_refuses_each_tampering() {
        let key = generate_key();
        let now = 1_000_000_000_000;
        let h = sign_request_at(&key, "POST", "/send", b"{}", now, &new_nonce());
        let v = |h: &SignedHeaders, m: &str, p: &str, b: &[u8], at: i64| {
            verify_request(lookup(h), m, p, b, at)
        };
        assert!(v(&h, "POST", "/send", b"{}", now).is_ok());
        assert_eq!(
            v(&h, "POST", "/send", b"{ }", now),
            Err(AuthError::BadSignature)
        );
        assert_eq!(
            v(&h, "POST", "/task", b"{}", now),
            Err(AuthError::BadSignature)
        );
        assert_eq!(
            v(&h, "PUT", "/send", b"{}", now),
            Err(AuthError::BadSignature)
        );
        assert_eq!(
            v(&h, "POST", "/send", b"{}", now + SKEW_MS + 1),
            Err(AuthError::Stale)
        );
        assert_eq!(
            v(&h, "POST", "/send", b"{}", now - SKEW_MS - 1),
            Err(AuthError::Stale)
        );
        assert!(v(&h, "POST", "/send", b"{}", now + SKEW_MS).is_ok());
        let none = SignedHeaders { headers: vec![] };
        assert_eq!(v(&none, "GET", "/", b"", now), Err(AuthError::Unsigned));
        let mut bad = h.clone();
        bad.headers[0].1 = "zz".into();
        assert_eq!(
            v(&bad, "POST", "/send", b"{}", now),
            Err(AuthError::BadPubkey)
        );
        let mut bad = h.clone();
        bad.headers[3].1 = "abc".into();
        assert_eq!(
            v(&bad, "POST", "/send", b"{}", now),
            Err(AuthError::BadNonce)
        );
        let mut bad = h.clone();
        bad.headers[2].1 = "soon".into();
        assert_eq!(v(&bad, "POST", "/send", b"{}", now), Err(AuthError::BadTs));
        let mut bad = h.clone();
        bad.headers[1].1 = "not base64!".into();
        assert_eq!(
            v(&bad, "POST", "/send", b"{}", now),
            Err(AuthError::BadSignature)
        );
        let other = generate_key();
        let mut bad = h.clone();
        bad.headers[0].1 = pubkey_hex(&other);
        assert_eq!(
            v(&bad, "POST", "/send", b"{}", now),
            Err(AuthError::BadSignature)
        );
    }

    #[test]
    fn instance_key_signs_with_endorsement_headers() {
        let durable = generate_key();
        let inst = InstanceKey::mint(&durable, "mcp-x", 42);
        let h = inst.sign_request("GET", "/peers", b"");
        assert_eq!(h.get(HDR_DURABLE), Some(pubkey_hex(&durable).as_str()));
        assert_eq!(h.get(HDR_INST_TS), Some("42"));
        let v = verify_request(
            |n| h.get(n).map(str::to_string),
            "GET",
            "/peers",
            b"",
            crate::now_ms(),
        )
        .expect("instance signature verifies");
        assert_eq!(v.pubkey, pubkey_hex(&inst.key));
        assert!(verify_endorsement(
            &inst.durable_pubkey,
            &v.pubkey,
            "mcp-x",
            42,
            h.get(HDR_ENDORSE).unwrap_or_default()
        ));
    }

    #[test]
    fn roles_rank_and_scopes_allow() {
        assert!(Role::Read < Role::Write && Role::Write < Role::Owner);
        let s = vec![Scope {
            project: "a".into(),
            role: Role::Write,
        }];
        assert!(scopes_allow(&s, "a", Role::Read));
        assert!(scopes_allow(&s, "a", Role::Write));
        assert!(!scopes_allow(&s, "a", Role::Owner));
        assert!(!scopes_allow(&s, "b", Role::Read));
        assert!(scopes_allow(&s, "", Role::Write));
        let star = vec![Scope {
            project: "*".into(),
            role: Role::Read,
        }];
        assert!(scopes_allow(&star, "zzz", Role::Read));
        assert!(!scopes_allow(&star, "zzz", Role::Write));
        let parsed: Scope = serde_json::from_str(r#"{"proj":"p","role":"owner"}"#).expect("alias");
        assert_eq!(
            parsed,
            Scope {
                project: "p".into(),
                role: Role::Owner
            }
        );
        assert!(serde_json::from_str::<Scope>(r#"{"project":"p","role":"god"}"#).is_err());
    }
}
