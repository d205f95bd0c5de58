//! The delivery record's statements (schema version 2).

use postgres::Row;
use trantor_proto::{DeliveryEntry, DeliveryOpenItem, DeliveryState};
use trantor_store::StoreError;

use super::{PgTx, get, sql_limit};

fn corrupt(what: String) -> StoreError {
    StoreError::Corrupt {
        table: "delivery",
        context: what,
        source: None,
    }
}

fn state(id: i64, s: &str) -> Result<DeliveryState, StoreError> {
    DeliveryState::parse(s).ok_or_else(|| corrupt(format!("message #{id}: unknown state {s:?}")))
}

fn turn(id: i64, t: Option<i64>) -> Result<Option<u64>, StoreError> {
    t.map(u64::try_from)
        .transpose()
        .map_err(|_| corrupt(format!("message #{id}: negative turn")))
}

fn entry(id: i64, r: &Row) -> Result<DeliveryEntry, StoreError> {
    let t = "delivery";
    let st: String = get(r, 0, t)?;
    let pid: Option<i64> = get(r, 5, t)?;
    Ok(DeliveryEntry {
        state: state(id, &st)?,
        ts: get(r, 1, t)?,
        session: get(r, 2, t)?,
        instance: get(r, 3, t)?,
        turn: turn(id, get(r, 4, t)?)?,
        pid: pid
            .map(u32::try_from)
            .transpose()
            .map_err(|_| corrupt(format!("message #{id}: pid out of range")))?,
        outcome: get(r, 6, t)?,
        reason: get(r, 7, t)?,
    })
}

impl PgTx<'_> {
    pub(super) fn delivery_states_impl(&self, id: i64) -> Result<Vec<DeliveryEntry>, StoreError> {
        let rows = self.query(
            "delivery",
            "states",
            "SELECT state, ts, session, instance, turn, pid, outcome, reason
               FROM delivery WHERE msg_id = $1 ORDER BY seq",
            &[&id],
        )?;
        rows.iter().map(|r| entry(id, r)).collect()
    }

    pub(super) fn delivery_open_impl(
        &self,
        session: &str,
        limit: usize,
    ) -> Result<(Vec<DeliveryOpenItem>, i64), StoreError> {
        let rows = self.query(
            "delivery",
            "open",
            "SELECT o.msg_id, d.state, d.ts, d.turn, d.instance, d.reason
               FROM delivery_open o JOIN delivery d ON d.seq = o.seq
              WHERE o.session = $1 ORDER BY o.msg_id LIMIT $2",
            &[&session, &sql_limit(limit)],
        )?;
        let total = self.scalar(
            "delivery",
            "open count",
            "SELECT count(*) FROM delivery_open WHERE session = $1",
            &[&session],
        )?;
        let t = "delivery";
        let items = rows
            .iter()
            .map(|r| {
                let id: i64 = get(r, 0, t)?;
                let st: String = get(r, 1, t)?;
                Ok(DeliveryOpenItem {
                    id,
                    to: session.to_string(),
                    state: state(id, &st)?,
                    ts: get(r, 2, t)?,
                    turn: turn(id, get(r, 3, t)?)?,
                    instance: get(r, 4, t)?,
                    reason: get(r, 5, t)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok((items, total))
    }

    pub(super) fn delivery_fence_impl(&self, session: &str) -> Result<Option<String>, StoreError> {
        match self.query_opt(
            "delivery_fence",
            "fence",
            "SELECT instance FROM delivery_fence WHERE session = $1",
            &[&session],
        )? {
            Some(r) => Ok(Some(get(&r, 0, "delivery_fence")?)),
            None => Ok(None),
        }
    }

    pub(super) fn append_delivery_impl(
        &mut self,
        id: i64,
        e: &DeliveryEntry,
    ) -> Result<(), StoreError> {
        let turn = e.turn.map(|t| i64::try_from(t).unwrap_or(i64::MAX));
        let pid = e.pid.map(i64::from);
        let st = e.state.as_str();
        // One round trip: the row, then the open index (kept or closed by the state).
        let sql = if e.state.is_terminal() {
            "WITH d AS (
                 INSERT INTO delivery(msg_id, state, ts, session, instance, turn, pid, outcome, reason)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING seq)
             DELETE FROM delivery_open WHERE msg_id = $1 AND EXISTS (SELECT 1 FROM d)"
        } else {
            "WITH d AS (
                 INSERT INTO delivery(msg_id, state, ts, session, instance, turn, pid, outcome, reason)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING seq)
             INSERT INTO delivery_open(msg_id, session, seq) SELECT $1, $4, seq FROM d
             ON CONFLICT (msg_id) DO UPDATE SET seq = excluded.seq"
        };
        if self.conn.borrow().ids.is_some() {
            // Inside the writer's batch: nothing is read back, so it goes out with the next
            // round trip (an insert without a key of its own to conflict on).
            self.defer(super::batch::Row::Delivery(super::batch::DeliveryRow {
                msg_id: id,
                state: st.to_string(),
                terminal: e.state.is_terminal(),
                ts: e.ts,
                session: e.session.clone(),
                instance: e.instance.clone(),
                turn,
                pid,
                outcome: e.outcome.clone(),
                reason: e.reason.clone(),
            }));
            return Ok(());
        }
        self.exec(
            "delivery",
            "append",
            sql,
            &[
                &id,
                &st,
                &e.ts,
                &e.session,
                &e.instance,
                &turn,
                &pid,
                &e.outcome,
                &e.reason,
            ],
        )?;
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
            "INSERT INTO delivery_fence(session, instance, ts) VALUES ($1, $2, $3)
             ON CONFLICT (session) DO UPDATE SET instance = excluded.instance, ts = excluded.ts",
            &[&session, &instance, &ts],
        )?;
        Ok(previous)
    }
}
