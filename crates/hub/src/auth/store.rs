//! Identities and invites in the store's small-document table, so every backend carries them
//! without a schema of their own: `auth:identity:<pubkey>` holds an [`IdentityRecord`],
//! `auth:invite:<sha256(token)>` an [`InviteRecord`] and `auth:token:<sha256(token)>` a
//! bearer token's [`TokenRecord`] (neither token itself is ever stored).

use serde_json::Value;
use sha2::{Digest, Sha256};
use trantor_proto::auth::{IdentityRecord, InviteRecord, TokenRecord, token_hash};
use trantor_store::{ReadTx, StoreError, WriteTx};

/// Key prefix of identity documents.
pub const IDENTITY_PREFIX: &str = "auth:identity:";
/// Key prefix of bearer token documents.
pub const TOKEN_PREFIX: &str = "auth:token:";
/// Key prefix of invite documents.
pub const INVITE_PREFIX: &str = "auth:invite:";

fn decode<T: serde::de::DeserializeOwned>(what: &str, v: Value) -> Result<T, StoreError> {
    serde_json::from_value(v).map_err(|e| StoreError::db_from(what, e))
}

fn encode<T: serde::Serialize>(what: &str, v: &T) -> Result<Value, StoreError> {
    serde_json::to_value(v).map_err(|e| StoreError::db_from(what, e))
}

/// The identity enrolled with `pubkey` (revoked ones included).
pub fn identity(tx: &dyn ReadTx, pubkey: &str) -> Result<Option<IdentityRecord>, StoreError> {
    tx.kv(&format!("{IDENTITY_PREFIX}{}", pubkey.to_ascii_lowercase()))?
        .map(|v| decode("identity record", v))
        .transpose()
}

/// Every identity, oldest first.
pub fn identities(tx: &dyn ReadTx) -> Result<Vec<IdentityRecord>, StoreError> {
    let mut all = tx
        .kv_prefix(IDENTITY_PREFIX)?
        .into_iter()
        .map(|(_, v)| decode::<IdentityRecord>("identity record", v))
        .collect::<Result<Vec<_>, _>>()?;
    all.sort_by(|a, b| (a.created_at, &a.pubkey).cmp(&(b.created_at, &b.pubkey)));
    Ok(all)
}

/// Whether any identity exists (the bootstrap token is honoured only before the first).
pub fn any_identity(tx: &dyn ReadTx) -> Result<bool, StoreError> {
    Ok(!tx.kv_prefix(IDENTITY_PREFIX)?.is_empty())
}

/// Store (or replace) an identity.
pub fn put_identity(tx: &mut dyn WriteTx, rec: &IdentityRecord) -> Result<(), StoreError> {
    tx.set_kv(
        &format!("{IDENTITY_PREFIX}{}", rec.pubkey),
        &encode("identity record", rec)?,
    )
}

/// The store key of an invite token: the SHA-256 of the token, so a leaked database does not
/// leak usable invites.
pub fn invite_key(token: &str) -> String {
    format!(
        "{INVITE_PREFIX}{}",
        hex::encode(Sha256::digest(token.as_bytes()))
    )
}

/// The invite minted with `token`.
pub fn invite(tx: &dyn ReadTx, token: &str) -> Result<Option<InviteRecord>, StoreError> {
    tx.kv(&invite_key(token))?
        .map(|v| decode("invite record", v))
        .transpose()
}

/// Store (or replace) the invite of `token`.
pub fn put_invite(tx: &mut dyn WriteTx, token: &str, rec: &InviteRecord) -> Result<(), StoreError> {
    tx.set_kv(&invite_key(token), &encode("invite record", rec)?)
}

/// The bearer token `token` (live or not), found by its hash.
pub fn token(tx: &dyn ReadTx, token: &str) -> Result<Option<TokenRecord>, StoreError> {
    tx.kv(&format!("{TOKEN_PREFIX}{}", token_hash(token)))?
        .map(|v| decode("token record", v))
        .transpose()
}

/// Every bearer token with its store key, oldest first.
pub fn tokens(tx: &dyn ReadTx) -> Result<Vec<(String, TokenRecord)>, StoreError> {
    let mut all = tx
        .kv_prefix(TOKEN_PREFIX)?
        .into_iter()
        .map(|(k, v)| decode::<TokenRecord>("token record", v).map(|r| (k, r)))
        .collect::<Result<Vec<_>, _>>()?;
    all.sort_by(|a, b| (a.1.created_at, &a.1.id).cmp(&(b.1.created_at, &b.1.id)));
    Ok(all)
}

/// Store (or replace) the record of the token whose hash is `hash`.
pub fn put_token(tx: &mut dyn WriteTx, hash: &str, rec: &TokenRecord) -> Result<(), StoreError> {
    tx.set_kv(
        &format!("{TOKEN_PREFIX}{hash}"),
        &encode("token record", rec)?,
    )
}
