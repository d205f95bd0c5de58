//! The delivery record's statements (schema version 3).

use rusqlite::{Row, params};
use trantor_proto::{DeliveryEntry, DeliveryOpenItem, DeliveryState};

use super::{SqlTx, sql_limit};
use crate::StoreError;

const ENTRY_COLS: &str = "state, ts, session, instance, turn, pid, outcome, reason";

/// Raw entry columns, decoded after the statement is done.
type EntryRow = (
    String,
    i64,
    String,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<String>,
);

fn entry_row(r: &Row<'_>) -> rusqlite::Result<EntryRow> {
    EntryRow::try_from(r)
}

fn corrupt(what: String) -> StoreError {
    StoreError::Corrupt {
        table: "delivery",
        context: what,
        source: None,
    }
}

/// A stored state name back to its type.
pub(crate) fn state(id: i64, s: &str) -> Result<DeliveryState, StoreError> {
    DeliveryState::parse(s).ok_or_else(|| corrupt(format!("message #{id}: unknown state {s:?}")))
}

fn decode(id: i64, row: EntryRow) -> Result<DeliveryEntry, StoreError> {
    let (st, ts, session, instance, turn, pid, outcome, reason) = row;
    Ok(DeliveryEntry {
        state: state(id, &st)?,
        ts,
        session,
        instance,
        turn: turn
            .map(u64::try_from)
            .transpose()
            .map_err(|_| corrupt(format!("message #{id}: negative turn")))?,
        pid: pid
            .map(u32::try_from)
            .transpose()
            .map_err(|_| corrupt(format!("message #{id}: pid out of range")))?,
        outcome,
        reason,
    })
}

impl SqlTx<'_> {
    pub(super) fn delivery_states_impl(&self, id: i64) -> Result<Vec<DeliveryEntry>, StoreError> {
        let rows = self.rows(
            "delivery",
            "states",
            &format!("SELECT {ENTRY_COLS} FROM delivery WHERE msg_id = ?1 ORDER BY seq"),
            [id],
            entry_row,
        )?;
        rows.into_iter().map(|r| decode(id, r)).collect()
    }

    pub(super) fn delivery_open_impl(
        &self,
        session: &str,
        limit: usize,
    ) -> Result<(Vec<DeliveryOpenItem>, i64), StoreError> {
        let rows = self.rows(
            "delivery",
            "open",
            "SELECT o.msg_id, d.state, d.ts, d.turn, d.instance, d.reason
               FROM delivery_open o JOIN delivery d ON d.seq = o.seq
              WHERE o.session = ?1 ORDER BY o.msg_id LIMIT ?2",
            params![session, sql_limit(limit)],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, Option<String>>(5)?,
                ))
            },
        )?;
        let total: i64 = self
            .row(
                "delivery",
                "open count",
                "SELECT count(*) FROM delivery_open WHERE session = ?1",
                [session],
                |r| r.get(0),
            )?
            .unwrap_or(0);
        let items = rows
            .into_iter()
            .map(|(id, st, ts, turn, instance, reason)| {
                Ok(DeliveryOpenItem {
                    id,
                    to: session.to_string(),
                    state: state(id, &st)?,
                    ts,
                    turn: turn
                        .map(u64::try_from)
                        .transpose()
                        .map_err(|_| corrupt(format!("message #{id}: negative turn")))?,
                    instance,
                    reason,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok((items, total))
    }

    pub(super) fn delivery_fence_impl(&self, session: &str) -> Result<Option<String>, StoreError> {
        self.row(
            "delivery_fence",
            "fence",
            "SELECT instance FROM delivery_fence WHERE session = ?1",
            [session],
            |r| r.get(0),
        )
    }

    pub(super) fn append_delivery_impl(
        &mut self,
        id: i64,
        e: &DeliveryEntry,
    ) -> Result<(), StoreError> {
        let seq = self.insert(
            "delivery",
            "append",
            "INSERT INTO delivery(msg_id, state, ts, session, instance, turn, pid, outcome, reason)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                id,
                e.state.as_str(),
                e.ts,
                e.session,
                e.instance,
                e.turn.map(|t| i64::try_from(t).unwrap_or(i64::MAX)),
                e.pid.map(i64::from),
                e.outcome,
                e.reason
            ],
        )?;
        if e.state.is_terminal() {
            self.exec(
                "delivery_open",
                "close",
                "DELETE FROM delivery_open WHERE msg_id = ?1",
                [id],
            )?;
        } else {
            self.exec(
                "delivery_open",
                "open",
                "INSERT INTO delivery_open(msg_id, session, seq) VALUES (?1, ?2, ?3)
                 ON CONFLICT(msg_id) DO UPDATE SET seq = excluded.seq",
                params![id, e.session, seq],
            )?;
        }
        Ok(())
    }

    pub(super) fn set_delivery_fence_impl(
        &mut self,
        session: &str,
        instance: &str,
        ts: i64,
    ) -> Result<Option<String>, StoreError> {
        let previous = self.delivery_fence_impl(session)?;
        self.exec(
            "delivery_fence",
            "set",
            "INSERT INTO delivery_fence(session, instance, ts) VALUES (?1, ?2, ?3)
             ON CONFLICT(session) DO UPDATE SET instance = excluded.instance, ts = excluded.ts",
            params![session, instance, ts],
        )?;
        Ok(previous)
    }
}
