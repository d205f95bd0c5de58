//! `GET /stream?session=S[&events=1][&status=]`: server-sent events.
//!
//! The stream opens with the comment `: connected as S`. Unnamed frames (`data: <message>`)
//! carry each new message deliverable to S; with `events=1`, every event of the unified log
//! follows as `event: ev`. Every 20 s a `: ka` comment keeps proxies from closing the stream
//! and touches S. Frames come from an in-process broadcast channel fed after each commit, so a
//! stream costs nothing between messages.

use crate::error::{ApiResult, check_len};
use crate::extract::Params;
use crate::presence::Touch;
use crate::state::{AppState, FeedItem, Outbox, persist_edge};
use axum::extract::State;
use axum::response::sse::{Event, Sse};
use futures::Stream;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use trantor_proto::{BROADCAST, limits, now_ms};
use trantor_store::Store;

/// Keep-alive period.
const KEEP_ALIVE: Duration = Duration::from_secs(20);

/// SSE comments and field values may not contain line breaks.
fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

struct StreamState<S: Store> {
    hub: AppState<S>,
    session: String,
    events: bool,
    rx: tokio::sync::broadcast::Receiver<FeedItem>,
    ka: tokio::time::Interval,
    shutdown: tokio::sync::watch::Receiver<bool>,
    opened: bool,
}

impl<S: Store> Drop for StreamState<S> {
    fn drop(&mut self) {
        self.hub.metrics.streams_open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `GET /stream`.
pub async fn stream<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let session = p.text("session").unwrap_or(BROADCAST).to_string();
    check_len("session", &session, limits::SESSION)?;
    let events = p.flag("events")?;
    let status = p.get("status").map(str::to_string);
    if let Some(st) = &status {
        check_len("status", st, limits::STATUS)?;
        crate::error::check_secrets([st.as_str()])?;
    }
    let now = now_ms();
    let touch = hub.presence.touch(&session, now);
    if touch == Touch::CameOnline || (status.is_some() && session != BROADCAST) {
        let s = session.clone();
        let out = hub
            .write(move |tx| {
                let mut out = Outbox::default();
                persist_edge(tx, &mut out, &s, touch, now)?;
                if let Some(st) = status
                    && let Some(mut peer) = tx.peer(&s)?
                {
                    peer.health = crate::state::health(&st).to_string();
                    peer.status = st;
                    peer.last_seen = peer.last_seen.max(now);
                    tx.put_peer(&peer)?;
                }
                Ok(out)
            })
            .await?;
        hub.publish(out);
    }
    // Subscribe before answering so nothing committed after this point is missed; counted
    // open first, so whatever is published after the subscription sees a stream to feed.
    hub.metrics.streams_open.fetch_add(1, Ordering::SeqCst);
    let rx = hub.feed.subscribe();
    let start = tokio::time::Instant::now() + KEEP_ALIVE;
    let state = StreamState {
        shutdown: hub.shutdown.clone(),
        hub,
        session,
        events,
        rx,
        ka: tokio::time::interval_at(start, KEEP_ALIVE),
        opened: false,
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        if !st.opened {
            st.opened = true;
            let ev = Event::default().comment(format!("connected as {}", one_line(&st.session)));
            return Some((Ok(ev), st));
        }
        loop {
            tokio::select! {
                item = st.rx.recv() => match item {
                    Ok(FeedItem::Message(m)) if m.deliverable_to(&st.session) => {
                        let data = serde_json::to_string(&*m).unwrap_or_default();
                        st.hub.metrics.events_published.fetch_add(1, Ordering::Relaxed);
                        return Some((Ok(Event::default().data(data)), st));
                    }
                    Ok(FeedItem::Event(e)) if st.events => {
                        let data = serde_json::to_string(&*e).unwrap_or_default();
                        st.hub.metrics.events_published.fetch_add(1, Ordering::Relaxed);
                        return Some((Ok(Event::default().event("ev").data(data)), st));
                    }
                    Ok(_) => continue,
                    Err(RecvError::Lagged(n)) => {
                        // The reader fell behind the channel; say so rather than skip silently.
                        let ev = Event::default().comment(format!("lagged {n} frames; re-read /inbox"));
                        return Some((Ok(ev), st));
                    }
                    Err(RecvError::Closed) => return None,
                },
                _ = st.ka.tick() => {
                    st.hub.presence.touch(&st.session, now_ms());
                    return Some((Ok(Event::default().comment("ka")), st));
                }
                _ = st.shutdown.changed() => return None,
            }
        }
    });
    Ok(Sse::new(stream))
}
