//! In-memory presence: `lastSeen` per session, the online edge, and held polls.
//!
//! Presence touches come with nearly every request (every poll, twice). Writing each to the
//! store would make heartbeats the write bottleneck, so `lastSeen` lives here and is flushed to
//! the peer rows in batches ([`Presence::take_dirty`]). The store stays authoritative for every
//! other peer field; reads overlay this cache. Only the offline→online edge needs a write at
//! touch time (the peer row may not exist yet, and a `presence.online` event is due), and that
//! edge is rare.
//!
//! A held `/poll` counts as present for as long as it is held, whatever its age.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use trantor_proto::{BROADCAST, Peer};

#[derive(Debug, Clone)]
struct Live {
    last_seen: i64,
    /// Polls of this session being held right now.
    held: u32,
    /// Whether the session was last announced online (the edge tracker).
    announced: bool,
    /// `last_seen` changed since the last flush.
    dirty: bool,
    /// The session's project as stored on its peer row, once known (`/send` stamps it on
    /// every message without reading the row inside the write).
    project: Option<Arc<str>>,
    /// The highest cursor a non-peeking `/poll` on this hub has answered the session with.
    /// The poll raises the stored ledger in the next group commit after its reply; until then
    /// reads overlay this value, so a reply and a read after it agree (docs/protocol.md §5.3).
    delivered: i64,
}

/// What a touch means for the caller's write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    /// Nothing to persist now (the new `lastSeen` is flushed later).
    Seen,
    /// The session just came online: the caller must make sure its peer row exists with this
    /// `lastSeen` and write a `presence.online` event.
    CameOnline,
    /// Not a session (empty or `all`): ignored.
    Ignored,
}

/// The presence cache.
#[derive(Debug)]
pub struct Presence {
    map: Mutex<HashMap<String, Live>>,
    online_ms: i64,
}

impl Presence {
    /// A cache seeded from the stored peer rows (so the online edge survives a restart).
    pub fn new(online_ms: i64, peers: &[Peer], now: i64) -> Self {
        let map = peers
            .iter()
            .map(|p| {
                (
                    p.session.clone(),
                    Live {
                        last_seen: p.last_seen,
                        held: 0,
                        announced: now - p.last_seen < online_ms,
                        dirty: false,
                        project: (!p.project.is_empty()).then(|| Arc::from(p.project.as_str())),
                        delivered: 0,
                    },
                )
            })
            .collect();
        Presence {
            map: Mutex::new(map),
            online_ms,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        // Entries are plain values updated in place; a poisoned lock holds no broken invariant.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record that `session` was seen at `now`.
    pub fn touch(&self, session: &str, now: i64) -> Touch {
        if session.is_empty() || session == BROADCAST {
            return Touch::Ignored;
        }
        let mut map = self.map();
        match map.get_mut(session) {
            Some(live) => {
                let was_online = live.held > 0 || now - live.last_seen < self.online_ms;
                live.last_seen = live.last_seen.max(now);
                if live.announced && was_online {
                    live.dirty = true;
                    Touch::Seen
                } else {
                    live.announced = true;
                    live.dirty = false;
                    Touch::CameOnline
                }
            }
            None => {
                map.insert(
                    session.to_string(),
                    Live {
                        last_seen: now,
                        held: 0,
                        announced: true,
                        dirty: false,
                        project: None,
                        delivered: 0,
                    },
                );
                Touch::CameOnline
            }
        }
    }

    /// Undo the edge of a touch whose write failed, so the next touch retries it.
    pub fn forget_edge(&self, session: &str) {
        if let Some(live) = self.map().get_mut(session) {
            live.announced = false;
        }
    }

    /// Count a held poll of `session` (which must have been touched) until the matching
    /// [`Presence::end_hold`]. A plain pair, not a guard borrowing the cache, so a parked poll
    /// can own its side of it.
    pub fn begin_hold(&self, session: &str) {
        if let Some(live) = self.map().get_mut(session) {
            live.held += 1;
        }
    }

    /// A held poll of `session` ended.
    pub fn end_hold(&self, session: &str) {
        if let Some(live) = self.map().get_mut(session) {
            live.held = live.held.saturating_sub(1);
        }
    }

    /// The session's cached project (see [`Presence::set_project`]).
    pub fn project(&self, session: &str) -> Option<Arc<str>> {
        self.map().get(session).and_then(|l| l.project.clone())
    }

    /// Cache the project a committed write found (`overwrite: false`, kept if one is already
    /// known) or stored (`overwrite: true`, `/register`) for a session that is in the cache.
    /// Only `/register` changes a stored project, and it overwrites after its commit, so a
    /// `/send` that read the row before it cannot leave the older value behind.
    pub fn set_project(&self, session: &str, project: &str, overwrite: bool) {
        if let Some(live) = self.map().get_mut(session)
            && (overwrite || live.project.is_none())
        {
            live.project = Some(Arc::from(project));
        }
    }

    /// Record that a poll answered `session` with messages up to `up_to`, before its ledger
    /// raise has committed ([`Presence::overlay`] reports it from now on).
    pub fn note_delivered(&self, session: &str, up_to: i64) {
        if let Some(live) = self.map().get_mut(session) {
            live.delivered = live.delivered.max(up_to);
        }
    }

    /// Cached `lastSeen` of a session.
    pub fn last_seen(&self, session: &str) -> Option<i64> {
        self.map().get(session).map(|l| l.last_seen)
    }

    /// Whether the session is online now: a held poll, or seen within the online window.
    pub fn is_online(&self, session: &str, now: i64) -> bool {
        self.map()
            .get(session)
            .is_some_and(|l| l.held > 0 || now - l.last_seen < self.online_ms)
    }

    /// Polls currently held, over all sessions.
    pub fn held_polls(&self) -> u64 {
        self.map().values().map(|l| u64::from(l.held)).sum()
    }

    /// Put the cached `lastSeen`, the online flag and the ledger a poll answered up to (see
    /// [`Presence::note_delivered`]) onto a stored peer row.
    pub fn overlay(&self, peer: &mut Peer, now: i64) {
        let map = self.map();
        let live = map.get(&peer.session);
        if let Some(l) = live {
            peer.last_seen = peer.last_seen.max(l.last_seen);
            peer.delivered_up_to = peer.delivered_up_to.max(l.delivered);
        }
        let held = live.is_some_and(|l| l.held > 0);
        peer.online = held || now - peer.last_seen < self.online_ms;
    }

    /// Sessions whose `lastSeen` changed since the last flush, with that value; marks them
    /// clean. Sessions holding a poll are refreshed to `now` first (a held poll is presence).
    pub fn take_dirty(&self, now: i64) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        for (s, l) in self.map().iter_mut() {
            if l.held > 0 {
                l.last_seen = now;
                l.dirty = true;
            }
            if l.dirty {
                l.dirty = false;
                out.push((s.clone(), l.last_seen));
            }
        }
        out
    }

    /// Mark a flushed value dirty again (its write failed).
    pub fn redirty(&self, session: &str) {
        if let Some(l) = self.map().get_mut(session) {
            l.dirty = true;
        }
    }

    /// Sessions announced online that are now offline (no held poll, not seen within the
    /// window): clears their flag and returns them with their `lastSeen`.
    pub fn sweep_offline(&self, now: i64) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        for (s, l) in self.map().iter_mut() {
            if l.announced && l.held == 0 && now - l.last_seen >= self.online_ms {
                l.announced = false;
                out.push((s.clone(), l.last_seen));
            }
        }
        out
    }

    /// Drop sessions whose peer rows were deleted (unless they came back meanwhile).
    pub fn forget(&self, sessions: &[String], cutoff: i64) {
        let mut map = self.map();
        for s in sessions {
            if map
                .get(s)
                .is_some_and(|l| l.held == 0 && l.last_seen < cutoff)
            {
                map.remove(s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_and_windows() {
        let p = Presence::new(1000, &[], 0);
        assert_eq!(p.touch("all", 10), Touch::Ignored);
        assert_eq!(p.touch("a:p", 10), Touch::CameOnline);
        assert_eq!(p.touch("a:p", 500), Touch::Seen);
        assert!(p.is_online("a:p", 1400));
        assert!(!p.is_online("a:p", 1600));
        assert_eq!(p.sweep_offline(1600), vec![("a:p".to_string(), 500)]);
        assert!(p.sweep_offline(1700).is_empty());
        assert_eq!(p.touch("a:p", 1800), Touch::CameOnline);
    }

    #[test]
    fn held_poll_is_present_past_the_window() {
        let p = Presence::new(1000, &[], 0);
        p.touch("a:p", 0);
        p.begin_hold("a:p");
        assert!(p.is_online("a:p", 50_000));
        assert!(p.sweep_offline(50_000).is_empty());
        assert_eq!(p.held_polls(), 1);
        assert_eq!(p.take_dirty(50_000), vec![("a:p".to_string(), 50_000)]);
        p.end_hold("a:p");
        assert_eq!(p.held_polls(), 0);
        assert!(!p.is_online("a:p", 60_000));
    }

    #[test]
    fn seeded_from_store_and_overlay() {
        let peer = Peer {
            session: "b:p".into(),
            last_seen: 100,
            ..Peer::default()
        };
        let p = Presence::new(1000, std::slice::from_ref(&peer), 200);
        assert_eq!(p.touch("b:p", 300), Touch::Seen);
        let mut row = peer.clone();
        p.overlay(&mut row, 400);
        assert_eq!(row.last_seen, 300);
        assert!(row.online);
        // A poll's answered cursor shows before its ledger raise commits, and never lowers
        // a stored ledger that is already past it.
        p.note_delivered("b:p", 7);
        let mut row = peer.clone();
        p.overlay(&mut row, 400);
        assert_eq!(row.delivered_up_to, 7);
        let mut ahead = Peer {
            delivered_up_to: 9,
            ..peer.clone()
        };
        p.overlay(&mut ahead, 400);
        assert_eq!(ahead.delivered_up_to, 9);
        assert_eq!(p.take_dirty(400), vec![("b:p".to_string(), 300)]);
        assert!(p.take_dirty(400).is_empty());
    }
}
