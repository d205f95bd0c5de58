//! Row decoding both backends share: each row the shared statements read ([`crate::sql`]) into
//! its type, the JSON columns, and the errors a row that does not decode gives. A backend reads
//! the columns with its driver ([`Columns`]) and hands them here.

use serde_json::{Map, Value};
use trantor_proto::{
    Card, CostSummary, DeliveryEntry, DeliveryOpenItem, DeliveryState, Event, Lesson, Message,
    Peer, TokenUsage, TurnReport,
};

use crate::sql::{Arg, Columns};
use crate::{ContractRow, CostBy, Counts, OpRecord, ReapedContract, StoreError};

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

/// A peer row: session, last seen, delivered up to, and the JSON of the rest. The columns stay
/// authoritative (`raise_delivered` only touches the column).
pub fn peer(c: &dyn Columns) -> Result<Peer, StoreError> {
    let (session, last_seen, delivered, data) = (c.text(0)?, c.int(1)?, c.int(2)?, c.text(3)?);
    // Fast path: rows written by put_peer hold a whole Peer.
    if let Ok(mut peer) = serde_json::from_str::<Peer>(&data) {
        peer.session = session;
        peer.last_seen = last_seen;
        peer.delivered_up_to = delivered;
        return Ok(peer);
    }
    // A bare row (raise_delivered for an unknown session stores `{}`) or an older shape.
    let mut map: Map<String, Value> = decode_json("peers", &session, &data)?;
    map.insert("session".into(), Value::String(session.clone()));
    map.insert("lastSeen".into(), Value::from(last_seen));
    map.insert("deliveredUpTo".into(), Value::from(delivered));
    serde_json::from_value(Value::Object(map)).map_err(|e| corrupt("peers", session.as_str(), e))
}

/// A card row: id, JSON.
pub fn card(c: &dyn Columns) -> Result<Card, StoreError> {
    let id = c.int(0)?;
    let mut card: Card = decode_json("cards", &format!("#{id}"), &c.text(1)?)?;
    card.id = id;
    Ok(card)
}

/// An event row: id, ts, type, project, by, the JSON of the type-specific fields, and for a
/// `message` event stored as a reference to its message, the characters of the message's text
/// it holds (NULL otherwise) and that text, which replaces the `text` field (a message pruned
/// under its event reads as "").
pub fn event(c: &dyn Columns) -> Result<Event, StoreError> {
    let id = c.int(0)?;
    let mut data: Map<String, Value> = decode_json("events", &format!("#{id}"), &c.text(5)?)?;
    if c.opt_int(6)?.is_some() {
        data.insert(
            "text".into(),
            Value::String(c.opt_text(7)?.unwrap_or_default()),
        );
    }
    Ok(Event {
        id,
        ts: c.int(1)?,
        kind: c.text(2)?,
        project: c.text(3)?,
        by: c.text(4)?,
        data,
    })
}

/// An `_op` row: id, ts, code, body.
pub fn op(c: &dyn Columns) -> Result<OpRecord, StoreError> {
    let (id, code) = (c.text(0)?, c.int(2)?);
    let code = u16::try_from(code).map_err(|e| corrupt("ops", format!("{id}: code {code}"), e))?;
    let body = decode_json("ops", &id, &c.text(3)?)?;
    Ok(OpRecord {
        ts: c.int(1)?,
        id,
        code,
        body,
    })
}

/// A `kv` row: key, document.
pub fn kv(c: &dyn Columns) -> Result<(String, Value), StoreError> {
    let key = c.text(0)?;
    let v = decode_json("kv", &key, &c.text(1)?)?;
    Ok((key, v))
}

/// A message row: id, ts, from, to, project, text (NULL: pruned, read as ""), re, kind, wake.
pub fn message(c: &dyn Columns) -> Result<Message, StoreError> {
    Ok(Message {
        id: c.int(0)?,
        ts: c.int(1)?,
        from: c.text(2)?,
        to: c.text(3)?,
        project: c.text(4)?,
        text: c.opt_text(5)?.unwrap_or_default(),
        re: c.opt_int(6)?,
        kind: c.opt_text(7)?,
        wake: c.opt_bool(8)?,
    })
}

/// The columns of message `m` after its id, as the parameters of an insert: ts, from, to,
/// project, text, re, kind, wake.
pub fn message_args(m: &Message) -> [Arg<'_>; 8] {
    [
        Arg::Int(m.ts),
        Arg::Text(&m.from),
        Arg::Text(&m.to),
        Arg::Text(&m.project),
        Arg::Text(&m.text),
        Arg::OptInt(m.re),
        Arg::OptText(m.kind.as_deref()),
        Arg::OptBool(m.wake),
    ]
}

/// A contract row: its message's columns ([`message`]), then ack, answer id, answer ts,
/// answer text, reaped ts, reaped reason, overtaken.
pub fn contract(c: &dyn Columns) -> Result<ContractRow, StoreError> {
    let answer = match c.opt_int(10)? {
        Some(id) => Some((
            id,
            c.opt_int(11)?.unwrap_or(0),
            c.opt_text(12)?.unwrap_or_default(),
        )),
        None => None,
    };
    let reaped = match c.opt_int(13)? {
        Some(ts) => Some((ts, c.opt_text(14)?.unwrap_or_default())),
        None => None,
    };
    Ok(ContractRow {
        contract: message(c)?,
        ack: c.bool(9)?,
        answer,
        overtaken: c.bool(15)?,
        reaped,
    })
}

/// A reaped contract: sender, id, assignee, ts, reaped ts, reason.
pub fn reaped(c: &dyn Columns) -> Result<ReapedContract, StoreError> {
    Ok(ReapedContract {
        sender: c.text(0)?,
        id: c.int(1)?,
        assignee: c.text(2)?,
        ts: c.int(3)?,
        reaped_ts: c.int(4)?,
        reason: c.text(5)?,
    })
}

/// A lesson row: id, scope, text, by, ts, project.
pub fn lesson(c: &dyn Columns) -> Result<Lesson, StoreError> {
    Ok(Lesson {
        id: c.int(0)?,
        scope: c.text(1)?,
        text: c.text(2)?,
        by: c.text(3)?,
        ts: c.int(4)?,
        project: c.text(5)?,
    })
}

/// The row counts: messages, events, peers, cards, lessons (NULL: 0).
pub fn counts(c: &dyn Columns) -> Result<Counts, StoreError> {
    let n = |i: usize| Ok::<_, StoreError>(c.opt_int(i)?.unwrap_or(0));
    Ok(Counts {
        messages: n(0)?,
        events: n(1)?,
        peers: n(2)?,
        cards: n(3)?,
        lessons: n(4)?,
    })
}

/// A delivery state of a message that is not one (a row written by a newer build, or
/// damaged).
fn bad_delivery(what: String) -> StoreError {
    StoreError::Corrupt {
        table: "delivery",
        context: what,
        source: None,
    }
}

/// A stored state name of message `id` back to its type.
fn delivery_state(id: i64, s: &str) -> Result<DeliveryState, StoreError> {
    DeliveryState::parse(s)
        .ok_or_else(|| bad_delivery(format!("message #{id}: unknown state {s:?}")))
}

/// A stored turn number of message `id` back to its type.
fn delivery_turn(id: i64, t: Option<i64>) -> Result<Option<u64>, StoreError> {
    t.map(u64::try_from)
        .transpose()
        .map_err(|_| bad_delivery(format!("message #{id}: negative turn")))
}

/// A delivery entry of message `id`: state, ts, session, instance, turn, pid, outcome, reason.
pub fn delivery_entry(id: i64, c: &dyn Columns) -> Result<DeliveryEntry, StoreError> {
    Ok(DeliveryEntry {
        state: delivery_state(id, &c.text(0)?)?,
        ts: c.int(1)?,
        session: c.text(2)?,
        instance: c.opt_text(3)?,
        turn: delivery_turn(id, c.opt_int(4)?)?,
        pid: c
            .opt_int(5)?
            .map(u32::try_from)
            .transpose()
            .map_err(|_| bad_delivery(format!("message #{id}: pid out of range")))?,
        outcome: c.opt_text(6)?,
        reason: c.opt_text(7)?,
    })
}

/// An open item of `session`'s: message id, state, ts, turn, instance, reason.
pub fn delivery_open_item(session: &str, c: &dyn Columns) -> Result<DeliveryOpenItem, StoreError> {
    let id = c.int(0)?;
    Ok(DeliveryOpenItem {
        id,
        to: session.to_string(),
        state: delivery_state(id, &c.text(1)?)?,
        ts: c.int(2)?,
        turn: delivery_turn(id, c.opt_int(3)?)?,
        instance: c.opt_text(4)?,
        reason: c.opt_text(5)?,
    })
}

/// A stored count back to its type (a negative one reads as 0).
fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A turn row with its hub time: session, instance, turn, ts, project, card, agent, model,
/// credential (`""`: none), outcome, has usage, input, output, cache read, cache write, usd,
/// estimated, source.
pub fn turn(c: &dyn Columns) -> Result<(i64, TurnReport), StoreError> {
    let credential = c.text(8)?;
    let usage = if c.bool(10)? {
        Some(TokenUsage {
            input: unsigned(c.int(11)?),
            output: unsigned(c.int(12)?),
            cache_read: unsigned(c.int(13)?),
            cache_write: unsigned(c.int(14)?),
        })
    } else {
        None
    };
    let report = TurnReport {
        session: c.text(0)?,
        instance: c.text(1)?,
        turn: unsigned(c.int(2)?),
        project: c.text(4)?,
        card: c.int(5)?,
        agent: c.text(6)?,
        model: c.text(7)?,
        credential: (!credential.is_empty()).then_some(credential),
        outcome: c.text(9)?,
        usage,
        usd: c.opt_real(15)?,
        estimated: c.bool(16)?,
        source: c.text(17)?,
    };
    Ok((c.int(3)?, report))
}

/// The arguments of [`crate::sql::Stmt::RecordTurn`]: the columns of [`turn`], in order.
pub fn turn_args(ts: i64, t: &TurnReport) -> [Arg<'_>; 18] {
    let u = t.usage.unwrap_or_default();
    [
        Arg::Text(&t.session),
        Arg::Text(&t.instance),
        Arg::count(t.turn),
        Arg::Int(ts),
        Arg::Text(&t.project),
        Arg::Int(t.card),
        Arg::Text(&t.agent),
        Arg::Text(&t.model),
        Arg::Text(t.credential.as_deref().unwrap_or("")),
        Arg::Text(&t.outcome),
        Arg::Bool(t.usage.is_some()),
        Arg::count(u.input),
        Arg::count(u.output),
        Arg::count(u.cache_read),
        Arg::count(u.cache_write),
        Arg::OptReal(t.usd),
        Arg::Bool(t.estimated),
        Arg::Text(&t.source),
    ]
}

/// A group of a cost read grouped `by`: key (for [`CostBy::Day`], the day number), input,
/// output, cache read, cache write, usd, turns, turns of unknown dollars, any estimated.
pub fn cost(by: CostBy, c: &dyn Columns) -> Result<(String, CostSummary), StoreError> {
    let key = c.text(0)?;
    let key = match by {
        CostBy::Day => day_key(key.parse().unwrap_or(0)),
        _ => key,
    };
    let (input, cache_read, cache_write) = (
        unsigned(c.int(1)?),
        unsigned(c.int(3)?),
        unsigned(c.int(4)?),
    );
    let summary = CostSummary {
        tokens_in: input.saturating_add(cache_read).saturating_add(cache_write),
        tokens_out: unsigned(c.int(2)?),
        cache_read,
        cache_write,
        usd: c.real(5)?,
        turns: unsigned(c.int(6)?),
        unknown: unsigned(c.int(7)?),
        estimated: c.bool(8)?,
    };
    Ok((key, summary))
}

/// The UTC day (`YYYY-MM-DD`) of day number `day` (days since the epoch), for [`CostBy::Day`].
pub fn day_key(day: i64) -> String {
    let (y, m, d) = trantor_proto::date::civil_from_days(day);
    format!("{y:04}-{m:02}-{d:02}")
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
