//! Background jobs: the presence flush, and the reaper (presence sweep, peer TTL, stale cards,
//! abandoned contracts, read-history retention).
//!
//! Every job works through the store with bounded queries (open cards, recent dispatchers);
//! none loads the whole state.

use crate::domain::cards::{move_card, push_log};
use crate::domain::ledger::{REAP_KEY, abandoned_assignees};
use crate::state::{AppState, Outbox, event};
use serde_json::{Map, Value, json};
use trantor_proto::{CardStatus, now_ms};
use trantor_store::{CardFilter, LedgerQuery, Store, StoreError};

/// Start the background jobs; they stop when the hub shuts down.
pub fn spawn<S: Store>(hub: AppState<S>) {
    let h = hub.clone();
    tokio::spawn(async move {
        let mut shutdown = h.shutdown.clone();
        let mut tick = tokio::time::interval(h.cfg.presence_flush);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => flush_presence(&h).await,
                _ = shutdown.changed() => break,
            }
        }
    });
    // On a shared store only the lease holder reaps (crate::cluster).
    let every = hub.cfg.reap_interval;
    crate::cluster::spawn_leased(hub, every, "reaper", |hub| async move {
        reap(&hub).await.map_err(|e| e.report())
    });
}

/// Write the cached `lastSeen` values to the peer rows (one write for all of them, no row
/// read: [`trantor_store::WriteTx::touch_peers`]).
pub async fn flush_presence<S: Store>(hub: &AppState<S>) {
    let dirty = hub.presence.take_dirty(now_ms());
    if dirty.is_empty() {
        return;
    }
    let batch = dirty.clone();
    let res = hub.write(move |tx| tx.touch_peers(&batch)).await;
    if let Err(e) = res {
        tracing::warn!(error = %e, "presence flush failed; will retry");
        for (s, _) in dirty {
            hub.presence.redirty(&s);
        }
    }
}

/// One reaper pass.
pub async fn reap<S: Store>(hub: &AppState<S>) -> Result<(), StoreError> {
    flush_presence(hub).await;
    let now = now_ms();
    sweep_presence(hub, now).await?;
    reap_cards(hub, now).await?;
    reap_contracts(hub, now).await?;
    retention(hub, now).await?;
    // A reset that passed while the hub was down (its timer died with it).
    crate::domain::credentials::resume_due(hub).await?;
    Ok(())
}

async fn sweep_presence<S: Store>(hub: &AppState<S>, now: i64) -> Result<(), StoreError> {
    let gone = hub.presence.sweep_offline(now);
    let cutoff = now - hub.cfg.peer_ttl_ms;
    let anon_cutoff = now - hub.cfg.anon_peer_ttl_ms;
    let (deleted, anon, out) = hub
        .write(move |tx| {
            let mut out = Outbox::default();
            for (session, last_seen) in &gone {
                let project = tx.peer(session)?.map(|p| p.project).unwrap_or_default();
                out.event(
                    tx,
                    event(
                        now,
                        "presence.offline",
                        &project,
                        session,
                        json!({ "lastSeen": last_seen }),
                    ),
                )?;
            }
            let deleted = tx.delete_peers_before(cutoff)?;
            let anon = tx.delete_anonymous_peers_before(anon_cutoff)?;
            Ok((deleted, anon, out))
        })
        .await?;
    hub.presence.forget(&deleted, cutoff);
    hub.presence.forget(&anon, anon_cutoff);
    if !anon.is_empty() {
        tracing::info!(
            count = anon.len(),
            "quiet peers that never registered removed"
        );
    }
    if !deleted.is_empty() {
        tracing::info!(count = deleted.len(), "peers past their TTL removed");
    }
    hub.publish(out);
    Ok(())
}

/// A duration as the reaper's notes write it: `42s`, `17m`, `2.5h`, `30h`.
pub fn human_ms(ms: i64) -> String {
    let n = ms.max(0);
    if n < 60_000 {
        format!("{}s", ((n as f64 / 1000.0).round() as i64).max(1))
    } else if n < 3_600_000 {
        format!("{}m", (n as f64 / 60_000.0).round() as i64)
    } else if n < 36_000_000 {
        format!("{:.1}h", n as f64 / 3_600_000.0)
    } else {
        format!("{:.0}h", n as f64 / 3_600_000.0)
    }
}

fn days(ms: i64) -> i64 {
    ms / 86_400_000
}

async fn reap_cards<S: Store>(hub: &AppState<S>, now: i64) -> Result<(), StoreError> {
    let open = hub
        .store
        .read(|tx| {
            tx.cards(&CardFilter {
                statuses: Some(vec![CardStatus::Todo, CardStatus::Doing]),
                ..CardFilter::default()
            })
        })
        .await?;
    let todo_cut = now - hub.cfg.todo_stale_ms;
    let doing_cut = now - hub.cfg.reap_grace_ms;
    let mut moves: Vec<(i64, String)> = Vec::new();
    for c in &open {
        // "owner last seen": the latest heartbeat of the assignee, the parent or the creator.
        let parent = c.extra.get("parent").and_then(Value::as_str).unwrap_or("");
        let owners = [c.assignee.as_str(), parent, c.by.as_str()];
        let seen = owners
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| hub.presence.last_seen(s))
            .max()
            .map(|t| format!("{} ago", human_ms(now - t)))
            .unwrap_or_else(|| "never".into());
        if c.status == CardStatus::Todo && c.updated < todo_cut {
            moves.push((
                c.id,
                format!(
                    "todo aged out after {}d untouched; owner last seen {seen}",
                    days(now - c.updated)
                ),
            ));
        } else if c.status == CardStatus::Doing && c.updated < doing_cut {
            let anyone = owners.iter().any(|s| !s.is_empty() && hub.online(s, now));
            if !anyone {
                moves.push((
                    c.id,
                    format!("owner offline → stale; owner last seen {seen}"),
                ));
            }
        }
    }
    if moves.is_empty() {
        return Ok(());
    }
    let out = hub
        .write(move |tx| {
            let mut out = Outbox::default();
            for (id, note) in &moves {
                // Re-read inside the write: the card may have moved since the scan.
                let Some(mut card) = tx.card(*id)? else {
                    continue;
                };
                if !matches!(card.status, CardStatus::Todo | CardStatus::Doing) {
                    continue;
                }
                if let Some(ev) = move_card(&mut card, CardStatus::Stale, "reaper", Some(note), now)
                {
                    push_log(&mut card, now, "reaper", note);
                    card.extra.insert("_reaped".into(), json!(now));
                    tx.put_card(&card)?;
                    out.event(tx, ev)?;
                }
            }
            Ok(out)
        })
        .await?;
    let n = out.events.len();
    if n > 0 {
        tracing::info!(cards = n, "reaper moved cards to stale");
    }
    hub.publish(out);
    Ok(())
}

async fn reap_contracts<S: Store>(hub: &AppState<S>, now: i64) -> Result<(), StoreError> {
    let window = hub.cfg.contract_window_ms;
    let since = now - window;
    adopt_reap_records(hub).await?;
    // Only senders with open contracts; of each only the assignees abandoned now (found on the
    // tally), and of those only the contracts not recorded yet, page by page in the open
    // index's order: a pass costs the open contracts to abandoned assignees, never a sort.
    hub.store.ledger_current().await?;
    let senders = hub.store.read(move |tx| tx.ledger_senders(since)).await?;
    let mut total = 0usize;
    for d in senders.iter().filter(|d| !d.starts_with("hub:")) {
        match reap_dispatcher(hub, d, since, now).await {
            Ok(n) => total += n,
            Err(e) => tracing::warn!(dispatcher = %d, error = %e, "contract reaping failed"),
        }
    }
    if total > 0 {
        tracing::info!(count = total, "contracts abandoned");
    }
    Ok(())
}

/// Record the newly abandoned contracts of one dispatcher; how many.
async fn reap_dispatcher<S: Store>(
    hub: &AppState<S>,
    d: &str,
    since: i64,
    now: i64,
) -> Result<usize, StoreError> {
    let q = LedgerQuery {
        sender: d.to_string(),
        since_ts: since,
        ..LedgerQuery::default()
    };
    let mut total = 0;
    for (to, seen) in abandoned_assignees(hub, &q, now).await? {
        let reason = if seen {
            "assignee not seen within the abandon window"
        } else {
            "assignee never seen"
        };
        let mut after = (i64::MIN, i64::MIN);
        loop {
            let (q2, a) = (q.clone(), to.clone());
            let rows = hub
                .store
                .read(move |tx| tx.ledger_unreaped(&q2, &a, after, REAP_PAGE))
                .await?;
            let Some(last) = rows.last() else { break };
            after = (last.contract.ts, last.contract.id);
            let more = rows.len() == REAP_PAGE;
            let from = d.to_string();
            let out = hub
                .write(move |tx| {
                    let mut out = Outbox::default();
                    for r in rows {
                        let c = r.contract;
                        if !tx.mark_reaped(&from, c.id, now, reason)? {
                            continue;
                        }
                        out.event(
                            tx,
                            event(
                                now,
                                "contract.abandoned",
                                "",
                                "reaper",
                                json!({
                                    "msgId": c.id,
                                    "fromSession": from,
                                    "toSession": c.to,
                                    "reason": reason,
                                    "text": crate::domain::cards::truncate(&c.text, 2000),
                                }),
                            ),
                        )?;
                    }
                    Ok(out)
                })
                .await?;
            total += out.events.len();
            hub.publish(out);
            if !more {
                break;
            }
        }
    }
    Ok(total)
}

/// Rows of a reaper pass's page.
const REAP_PAGE: usize = 1000;

/// Reaper records kept the original's way (the `contractReap` kv document, as `hub import`
/// writes it) move into the ledger's rows, and the document is emptied.
async fn adopt_reap_records<S: Store>(hub: &AppState<S>) -> Result<(), StoreError> {
    let doc = hub.store.read(|tx| tx.kv(REAP_KEY)).await?;
    let records = match doc {
        Some(Value::Object(m)) if !m.is_empty() => m,
        _ => return Ok(()),
    };
    let n = records.len();
    hub.write(move |tx| {
        for (k, rec) in &records {
            let (Ok(id), Some(from)) = (k.parse::<i64>(), rec.get("from").and_then(Value::as_str))
            else {
                continue;
            };
            let ts = rec.get("ts").and_then(Value::as_i64).unwrap_or(0);
            let reason = rec.get("reason").and_then(Value::as_str).unwrap_or("");
            tx.mark_reaped(from, id, ts, reason)?;
        }
        tx.set_kv(REAP_KEY, &Value::Object(Map::new()))?;
        Ok(Outbox::default())
    })
    .await?;
    tracing::info!(records = n, "reaper records moved into the contract ledger");
    Ok(())
}

async fn retention<S: Store>(hub: &AppState<S>, now: i64) -> Result<(), StoreError> {
    // Retention 0 keeps read history forever; expired `_op` outcomes still go.
    let before = if hub.cfg.retention_ms > 0 {
        now - hub.cfg.retention_ms
    } else {
        i64::MIN
    };
    let ops_before = now - hub.cfg.op_ttl_ms;
    let report = hub.write(move |tx| tx.prune(before, ops_before)).await?;
    if report.messages > 0 || report.events > 0 || report.ops > 0 {
        tracing::info!(
            messages = report.messages,
            events = report.events,
            ops = report.ops,
            "retention pruned read history"
        );
    }
    hub.metrics.pruned(&report, now);
    Ok(())
}
