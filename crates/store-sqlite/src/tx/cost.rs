//! The cost ledger's statements (schema version 5).

use rusqlite::params;
use rusqlite::params_from_iter;
use rusqlite::types::Value as SqlValue;
use trantor_proto::{CostSummary, TurnReport};
use trantor_store::{CostBy, CostQuery, StoreError, cost_summary_of, day_key};

use super::{SqlTx, map_err, sql_limit};

/// A stored count back to i64 (the wire bounds keep every count far below i64::MAX).
fn count(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl SqlTx<'_> {
    pub(super) fn record_turn_impl(&mut self, ts: i64, t: &TurnReport) -> Result<bool, StoreError> {
        let u = t.usage.unwrap_or_default();
        let n = self.exec(
            "turns",
            "record",
            "INSERT OR IGNORE INTO turns(session, instance, turn, ts, project, card, agent, model,
                 credential, outcome, has_usage, input, output, cache_read, cache_write, usd,
                 estimated, source)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
            params![
                t.session,
                t.instance,
                count(t.turn),
                ts,
                t.project,
                t.card,
                t.agent,
                t.model,
                t.credential.as_deref().unwrap_or(""),
                t.outcome,
                t.usage.is_some(),
                count(u.input),
                count(u.output),
                count(u.cache_read),
                count(u.cache_write),
                t.usd,
                t.estimated,
                t.source,
            ],
        )?;
        Ok(n == 1)
    }

    pub(super) fn all_turns_impl(&self) -> Result<Vec<(i64, TurnReport)>, StoreError> {
        self.rows(
            "turns",
            "all",
            "SELECT session, instance, turn, ts, project, card, agent, model, credential, outcome, has_usage, input, output, cache_read, cache_write, usd, estimated, source FROM turns ORDER BY ts, session, instance, turn",
            [],
            |r| {
                let n = |i: usize| -> rusqlite::Result<u64> {
                    Ok(u64::try_from(r.get::<_, i64>(i)?).unwrap_or(0))
                };
                let credential: String = r.get(8)?;
                let has_usage: bool = r.get(10)?;
                Ok((
                    r.get::<_, i64>(3)?,
                    TurnReport {
                        session: r.get(0)?,
                        instance: r.get(1)?,
                        turn: n(2)?,
                        project: r.get(4)?,
                        card: r.get(5)?,
                        agent: r.get(6)?,
                        model: r.get(7)?,
                        credential: (!credential.is_empty()).then_some(credential),
                        outcome: r.get(9)?,
                        usage: if has_usage {
                            Some(trantor_proto::TokenUsage {
                                input: n(11)?,
                                output: n(12)?,
                                cache_read: n(13)?,
                                cache_write: n(14)?,
                            })
                        } else {
                            None
                        },
                        usd: r.get(15)?,
                        estimated: r.get(16)?,
                        source: r.get(17)?,
                    },
                ))
            },
        )
    }

    pub(super) fn cost_impl(
        &self,
        q: &CostQuery,
        by: CostBy,
        limit: usize,
    ) -> Result<Vec<(String, CostSummary)>, StoreError> {
        let mut args: Vec<SqlValue> = Vec::new();
        let mut wh: Vec<String> = Vec::new();
        if let Some(c) = q.card {
            args.push(SqlValue::Integer(c));
            wh.push(format!("card = ?{}", args.len()));
        }
        if let Some(cs) = &q.cards {
            if cs.is_empty() {
                return Ok(Vec::new());
            }
            let mut ph = Vec::new();
            for c in cs {
                args.push(SqlValue::Integer(*c));
                ph.push(format!("?{}", args.len()));
            }
            wh.push(format!("card IN ({})", ph.join(",")));
        }
        if let Some(s) = &q.session {
            args.push(SqlValue::Text(s.clone()));
            wh.push(format!("session = ?{}", args.len()));
        }
        if let Some(p) = &q.project {
            args.push(SqlValue::Text(p.clone()));
            wh.push(format!("project = ?{}", args.len()));
        }
        if let Some(t) = q.since_ts {
            args.push(SqlValue::Integer(t));
            wh.push(format!("ts >= ?{}", args.len()));
        }
        let key = match by {
            CostBy::Total => "''",
            CostBy::Card => "CAST(card AS TEXT)",
            CostBy::Seat => "session",
            CostBy::Day => "CAST(ts / 86400000 AS TEXT)",
            CostBy::Credential => "credential",
        };
        let where_sql = if wh.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", wh.join(" AND "))
        };
        let group = if by == CostBy::Total {
            String::new()
        } else {
            args.push(SqlValue::Integer(sql_limit(limit)));
            format!(" GROUP BY 1 ORDER BY 6 DESC, 1 LIMIT ?{}", args.len())
        };
        let sql = format!(
            "SELECT {key}, COALESCE(SUM(input), 0), COALESCE(SUM(output), 0),
                    COALESCE(SUM(cache_read), 0), COALESCE(SUM(cache_write), 0),
                    COALESCE(SUM(usd), 0.0), count(*), COALESCE(SUM(usd IS NULL), 0),
                    COALESCE(MAX(estimated), 0)
               FROM turns{where_sql}{group}"
        );
        let err = map_err("turns", "cost");
        let mut st = self.conn.prepare(&sql).map_err(&err)?;
        let rows = st
            .query_map(params_from_iter(args.iter()), |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    cost_summary_of(
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                        r.get::<_, i64>(8)? != 0,
                    ),
                ))
            })
            .map_err(&err)?;
        let mut out = Vec::new();
        for r in rows {
            let (k, s) = r.map_err(&err)?;
            let k = match by {
                CostBy::Day => day_key(k.parse().unwrap_or(0)),
                _ => k,
            };
            out.push((k, s));
        }
        Ok(out)
    }
}
