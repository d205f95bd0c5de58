//! The storage limit of `/send`: a bare group commit of the same rows a `/send` writes (the
//! message, its `stored` delivery state and its `message` event, in one write closure), driven
//! straight through the store by as many concurrent writers as the HTTP load has connections —
//! no HTTP, no routing, no JSON. `/send` can approach this rate, never pass it.

use anyhow::{Context, Result};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use trantor_proto::delivery::{DeliveryEntry, DeliveryState};
use trantor_store::{NewEvent, NewMessage, Store};

/// Writes per second a store committed, and the CPU this process used per write meanwhile.
pub(super) struct Commit {
    /// Writes per second.
    pub(super) rate: f64,
    /// Seconds measured.
    pub(super) secs: f64,
}

/// Drive `writers` concurrent writers of `/send`'s rows (writer *i* to writer *i+1*, as the
/// HTTP load sends) for `secs` seconds.
pub(super) async fn bare_commit<S: Store>(store: S, writers: usize, secs: u64) -> Result<Commit> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(writers);
    let t0 = Instant::now();
    for k in 0..writers {
        let (store, stop, done) = (store.clone(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let from = format!("bench-c{k}");
            let to = format!("bench-c{}", (k + 1) % writers);
            while !stop.load(Ordering::Relaxed) {
                let (from, to) = (from.clone(), to.clone());
                store
                    .write(move |tx| {
                        let now = trantor_proto::now_ms();
                        let msg = tx.insert_message(
                            NewMessage {
                                ts: now,
                                from: from.clone(),
                                to: to.clone(),
                                project: "bench".into(),
                                text: super::hub_shared::LOAD_TEXT.into(),
                                ..Default::default()
                            },
                            &[],
                        )?;
                        tx.append_delivery(
                            msg.id,
                            &DeliveryEntry {
                                state: DeliveryState::Stored,
                                ts: now,
                                session: to.clone(),
                                instance: None,
                                turn: None,
                                pid: None,
                                outcome: None,
                                reason: None,
                            },
                        )?;
                        let data = json!({
                            "msgId": msg.id,
                            "toSession": to,
                            "text": super::hub_shared::LOAD_TEXT,
                            "refs": [],
                        });
                        tx.insert_event(NewEvent {
                            ts: now,
                            kind: "message".into(),
                            project: "bench".into(),
                            by: from,
                            data: data.as_object().cloned().unwrap_or_default(),
                            ..Default::default()
                        })?;
                        Ok(())
                    })
                    .await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    for t in tasks {
        t.await.context("writer task failed")??;
    }
    Ok(Commit {
        rate: n as f64 / secs,
        secs,
    })
}
