//! Row decoding both backends share: the JSON columns, and the errors a row that does not decode
//! gives. A backend reads the columns with its driver and hands them here.

use serde_json::{Map, Value};
use trantor_proto::{Card, Event, Peer};

use crate::{OpRecord, StoreError};

/// A row of `table` (named by `context`) that does not decode, with the decoder's error.
pub fn corrupt(
    table: &'static str,
    context: impl Into<String>,
    e: impl std::error::Error + Send + Sync + 'static,
) -> StoreError {
    StoreError::Corrupt {
        table,
        context: context.into(),
        source: Some(std::sync::Arc::new(e)),
    }
}

/// `v` as the JSON text a `data` column holds.
pub fn encode(table: &'static str, v: &impl serde::Serialize) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::db_from(format!("{table}: cannot encode"), e))
}

/// A JSON column of `table` (the row named by `context`).
pub fn decode_json<T: serde::de::DeserializeOwned>(
    table: &'static str,
    context: &str,
    data: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(data).map_err(|e| corrupt(table, context, e))
}

/// A peer from its columns: session, last seen, delivery ledger and the JSON of the rest. The
/// columns stay authoritative (`raise_delivered` only touches the column).
pub fn decode_peer(
    session: String,
    last_seen: i64,
    delivered: i64,
    data: &str,
) -> Result<Peer, StoreError> {
    // Fast path: rows written by put_peer hold a whole Peer.
    if let Ok(mut peer) = serde_json::from_str::<Peer>(data) {
        peer.session = session;
        peer.last_seen = last_seen;
        peer.delivered_up_to = delivered;
        return Ok(peer);
    }
    // A bare row (raise_delivered for an unknown session stores `{}`) or an older shape.
    let mut map: Map<String, Value> = decode_json("peers", &session, data)?;
    map.insert("session".into(), Value::String(session.clone()));
    map.insert("lastSeen".into(), Value::from(last_seen));
    map.insert("deliveredUpTo".into(), Value::from(delivered));
    serde_json::from_value(Value::Object(map)).map_err(|e| corrupt("peers", session.as_str(), e))
}

/// A card from its id and JSON.
pub fn decode_card(id: i64, data: &str) -> Result<Card, StoreError> {
    let mut card: Card = decode_json("cards", &format!("#{id}"), data)?;
    card.id = id;
    Ok(card)
}

/// The columns of an event row.
pub struct EventColumns {
    /// Id.
    pub id: i64,
    /// When, ms.
    pub ts: i64,
    /// Event type.
    pub kind: String,
    /// Project.
    pub project: String,
    /// Actor.
    pub by: String,
    /// The JSON of the type-specific fields.
    pub data: String,
}

/// An event from its columns; `text`, when given, replaces the `text` field (a `message` event
/// stored as a reference to its message's text).
pub fn decode_event(cols: EventColumns, text: Option<String>) -> Result<Event, StoreError> {
    let mut data: Map<String, Value> = decode_json("events", &format!("#{}", cols.id), &cols.data)?;
    if let Some(text) = text {
        data.insert("text".into(), Value::String(text));
    }
    Ok(Event {
        id: cols.id,
        ts: cols.ts,
        kind: cols.kind,
        project: cols.project,
        by: cols.by,
        data,
    })
}

/// An `_op` record from its columns.
pub fn decode_op(id: String, ts: i64, code: i64, body: &str) -> Result<OpRecord, StoreError> {
    let code = u16::try_from(code).map_err(|e| corrupt("ops", format!("{id}: code {code}"), e))?;
    let body = decode_json("ops", &id, body)?;
    Ok(OpRecord { id, ts, code, body })
}

/// A `(key, document)` pair of the `kv` table.
pub fn decode_kv(key: String, value: &str) -> Result<(String, Value), StoreError> {
    let v = decode_json("kv", &key, value)?;
    Ok((key, v))
}

/// The smallest string greater than every string starting with `prefix` (for an index range),
/// or `None` when there is none (prefix empty or ending in the last code point).
pub fn prefix_upper_bound(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let mut next = last as u32 + 1;
        // Skip the surrogate gap, which has no `char`.
        if (0xD800..=0xDFFF).contains(&next) {
            next = 0xE000;
        }
        if let Some(c) = char::from_u32(next) {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::prefix_upper_bound;

    #[test]
    fn prefix_bounds() {
        assert_eq!(
            prefix_upper_bound("presence.").as_deref(),
            Some("presence/")
        );
        assert_eq!(prefix_upper_bound(""), None);
        assert_eq!(prefix_upper_bound("a\u{10FFFF}").as_deref(), Some("b"));
    }
}
