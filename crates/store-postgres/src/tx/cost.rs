//! The cost ledger's statements (schema version 4).

use trantor_proto::{CostSummary, TurnReport};
use trantor_store::{CostBy, CostQuery, StoreError, cost_summary_of, day_key};

use super::{PgTx, Query, get, sql_limit};

/// A count as stored (the wire bounds keep every count far below i64::MAX).
fn count(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl PgTx<'_> {
    pub(super) fn record_turn_impl(&mut self, ts: i64, t: &TurnReport) -> Result<bool, StoreError> {
        let u = t.usage.unwrap_or_default();
        let credential = t.credential.clone().unwrap_or_default();
        let n = self.exec(
            "turns",
            "record",
            "INSERT INTO turns(session, instance, turn, ts, project, card, agent, model,
                 credential, outcome, has_usage, input, output, cache_read, cache_write, usd,
                 estimated, source)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
             ON CONFLICT (session, instance, turn) DO NOTHING",
            &[
                &t.session,
                &t.instance,
                &count(t.turn),
                &ts,
                &t.project,
                &t.card,
                &t.agent,
                &t.model,
                &credential,
                &t.outcome,
                &t.usage.is_some(),
                &count(u.input),
                &count(u.output),
                &count(u.cache_read),
                &count(u.cache_write),
                &t.usd,
                &t.estimated,
                &t.source,
            ],
        )?;
        Ok(n == 1)
    }

    pub(super) fn all_turns_impl(&self) -> Result<Vec<(i64, TurnReport)>, StoreError> {
        let t = "turns";
        let rows = self.query(
            t,
            "all",
            "SELECT session, instance, turn, ts, project, card, agent, model, credential, outcome, has_usage, input, output, cache_read, cache_write, usd, estimated, source FROM turns ORDER BY ts, session, instance, turn",
            &[],
        )?;
        let n = |r: &postgres::Row, i: usize| -> Result<u64, StoreError> {
            Ok(u64::try_from(get::<i64>(r, i, t)?).unwrap_or(0))
        };
        rows.iter()
            .map(|r| {
                let credential: String = get(r, 8, t)?;
                let has_usage: bool = get(r, 10, t)?;
                Ok((
                    get(r, 3, t)?,
                    TurnReport {
                        session: get(r, 0, t)?,
                        instance: get(r, 1, t)?,
                        turn: n(r, 2)?,
                        project: get(r, 4, t)?,
                        card: get(r, 5, t)?,
                        agent: get(r, 6, t)?,
                        model: get(r, 7, t)?,
                        credential: (!credential.is_empty()).then_some(credential),
                        outcome: get(r, 9, t)?,
                        usage: if has_usage {
                            Some(trantor_proto::TokenUsage {
                                input: n(r, 11)?,
                                output: n(r, 12)?,
                                cache_read: n(r, 13)?,
                                cache_write: n(r, 14)?,
                            })
                        } else {
                            None
                        },
                        usd: get(r, 15, t)?,
                        estimated: get(r, 16, t)?,
                        source: get(r, 17, t)?,
                    },
                ))
            })
            .collect()
    }

    pub(super) fn cost_impl(
        &self,
        cq: &CostQuery,
        by: CostBy,
        limit: usize,
    ) -> Result<Vec<(String, CostSummary)>, StoreError> {
        let key = match by {
            CostBy::Total => "''::text",
            CostBy::Card => "card::text",
            CostBy::Seat => "session::text",
            CostBy::Day => "(ts / 86400000)::text",
            CostBy::Credential => "credential::text",
        };
        let mut q = Query {
            sql: format!(
                "SELECT {key}, COALESCE(SUM(input), 0)::BIGINT, COALESCE(SUM(output), 0)::BIGINT,
                        COALESCE(SUM(cache_read), 0)::BIGINT, COALESCE(SUM(cache_write), 0)::BIGINT,
                        COALESCE(SUM(usd), 0)::DOUBLE PRECISION, count(*)::BIGINT,
                        COALESCE(SUM(CASE WHEN usd IS NULL THEN 1 ELSE 0 END), 0)::BIGINT,
                        COALESCE(BOOL_OR(estimated), false)
                   FROM turns WHERE true"
            ),
            ..Default::default()
        };
        if let Some(c) = cq.card {
            let n = q.arg(c);
            q.sql.push_str(&format!(" AND card = {n}"));
        }
        if let Some(cs) = &cq.cards {
            if cs.is_empty() {
                return Ok(Vec::new());
            }
            let n = q.arg(cs.clone());
            q.sql.push_str(&format!(" AND card = ANY({n})"));
        }
        if let Some(s) = &cq.session {
            let n = q.arg(s.clone());
            q.sql.push_str(&format!(" AND session = {n}"));
        }
        if let Some(p) = &cq.project {
            let n = q.arg(p.clone());
            q.sql.push_str(&format!(" AND project = {n}"));
        }
        if let Some(t) = cq.since_ts {
            let n = q.arg(t);
            q.sql.push_str(&format!(" AND ts >= {n}"));
        }
        if by != CostBy::Total {
            let n = q.arg(sql_limit(limit));
            q.sql
                .push_str(&format!(" GROUP BY 1 ORDER BY 6 DESC, 1 LIMIT {n}"));
        }
        let t = "turns";
        let rows = self.query(t, "cost", &q.sql, &q.params())?;
        let mut out = Vec::new();
        for r in &rows {
            let k: String = get(r, 0, t)?;
            let k = match by {
                CostBy::Day => day_key(k.parse().unwrap_or(0)),
                _ => k,
            };
            out.push((
                k,
                cost_summary_of(
                    get(r, 1, t)?,
                    get(r, 2, t)?,
                    get(r, 3, t)?,
                    get(r, 4, t)?,
                    get(r, 5, t)?,
                    get(r, 6, t)?,
                    get(r, 7, t)?,
                    get(r, 8, t)?,
                ),
            ));
        }
        Ok(out)
    }
}
