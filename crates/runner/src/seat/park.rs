//! Parking (docs/runner.md §12.3, §12.4): when redelivery stops, until when, and the
//! park file that says so to every reader off the bus.
//!
//! Quota and credential failures park *unbounded* (until the reset time the CLI printed, else
//! until an operator acts); anything else that fails twice parks *bounded* for the park window,
//! and a direct message ends a bounded park at once.

use crate::sys::fsx;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// "Never": an unbounded park with no known reset.
pub const NEVER: i64 = i64::MAX;

/// Reasons that park unbounded (docs/runner.md §12.3; `budget`, docs/runner.md §12.6).
pub fn is_parking_reason(reason: &str) -> bool {
    matches!(
        reason,
        "exhausted" | "auth" | "provider-rejected" | "budget"
    )
}

/// A park in force, as written to `park-<persona>-<project>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Park {
    /// Bus name.
    pub session: String,
    /// PERSONA.
    pub persona: String,
    /// AGENT.
    pub agent: String,
    /// Project.
    pub project: String,
    /// Why.
    pub reason: String,
    /// Until when, ms ([`NEVER`] = until an operator acts).
    pub until: i64,
    /// The evidence line (cut chain, matched output).
    pub evidence: String,
    /// Messages held.
    pub held: usize,
    /// When it parked, ms.
    pub ts: i64,
    /// A direct message ends it.
    pub bounded: bool,
}

/// The park decision after a failure: `None` keeps retrying on the backoff ladder.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The park reason.
    pub reason: String,
    /// Until when, ms.
    pub until: i64,
    /// Bounded (a direct message ends it).
    pub bounded: bool,
}

/// Facts the park decision reads.
#[derive(Debug, Clone, Default)]
pub struct Facts<'a> {
    /// The failure reason (classifier's, or `stalled`).
    pub reason: &'a str,
    /// Consecutive failed deliveries of the held batch (after counting this one).
    pub delivery_fails: u32,
    /// The last turn was a stall cut.
    pub last_stalled: bool,
    /// The last turn was cut.
    pub last_cut: bool,
    /// `TRANTOR_PARK_WINDOW_MS` (0 = bounded parks are unbounded).
    pub window_ms: u64,
    /// The reset time parsed from the output or a balance row.
    pub reset_at: Option<i64>,
    /// Now, ms.
    pub now: i64,
}

/// Decide whether to park (docs/runner.md §12.3).
pub fn decide(f: &Facts<'_>) -> Option<Decision> {
    if !is_parking_reason(f.reason) && f.delivery_fails < 2 {
        return None;
    }
    let reason = if f.last_stalled {
        "stalled".to_string()
    } else if is_parking_reason(f.reason) {
        f.reason.to_string()
    } else if f.last_cut {
        "time-box".to_string()
    } else if matches!(f.reason, "no-delivery" | "empty-turn") {
        f.reason.to_string()
    } else {
        "api-error".to_string()
    };
    let bounded = !is_parking_reason(&reason) && f.window_ms > 0;
    let until = if bounded {
        f.now.saturating_add(f.window_ms as i64)
    } else {
        f.reset_at.filter(|t| *t > f.now).unwrap_or(NEVER)
    };
    Some(Decision {
        reason,
        until,
        bounded,
    })
}

/// Write the park file (errors logged, never fatal).
pub fn write(path: &Path, park: &Park) {
    match serde_json::to_vec(park) {
        Ok(b) => {
            if let Err(e) = fsx::write_atomic(path, &b) {
                tracing::warn!("park file {}: {e}", path.display());
            }
        }
        Err(e) => tracing::warn!("park record not serialisable: {e}"),
    }
}

/// Read the park file, if one is there.
pub fn read(path: &Path) -> Option<Park> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// `2026-11-30 09:05 UTC` for a time in ms.
pub fn fmt_time(ms: i64) -> String {
    trantor_proto::date::fmt_utc_minutes(ms)
}

/// A short duration: `45s`, `12m`, `2h05m`.
pub fn fmt_duration(ms: i64) -> String {
    let s = (ms.max(0) + 999) / 1000;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m", s / 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(reason: &str, fails: u32) -> Facts<'_> {
        Facts {
            reason,
            delivery_fails: fails,
            window_ms: 900_000,
            now: 1_000,
            ..Default::default()
        }
    }

    #[test]
    fn quota_parks_unbounded_until_the_reset() {
        let mut f = facts("exhausted", 1);
        f.reset_at = Some(7_201_000);
        let d = decide(&f).expect("parks");
        assert_eq!(
            (d.reason.as_str(), d.until, d.bounded),
            ("exhausted", 7_201_000, false)
        );
        f.reset_at = None;
        assert_eq!(decide(&f).expect("parks").until, NEVER);
    }

    #[test]
    fn other_failures_park_bounded_on_the_second() {
        assert_eq!(decide(&facts("crashed", 1)), None);
        let d = decide(&facts("crashed", 2)).expect("parks");
        assert_eq!(
            (d.reason.as_str(), d.until, d.bounded),
            ("api-error", 901_000, true)
        );
        let mut f = facts("cut-signal", 2);
        f.last_cut = true;
        assert_eq!(decide(&f).expect("p").reason, "time-box");
        f.last_stalled = true;
        assert_eq!(decide(&f).expect("p").reason, "stalled");
        let mut f = facts("crashed", 2);
        f.window_ms = 0;
        let d = decide(&f).expect("p");
        assert!(!d.bounded);
        assert_eq!(d.until, NEVER);
    }

    #[test]
    fn file_round_trips_and_times_format() {
        let d = tempfile::tempdir().expect("tmp");
        let p = Park {
            session: "claude:p".into(),
            persona: "claude".into(),
            agent: "claude".into(),
            project: "p".into(),
            reason: "exhausted".into(),
            until: NEVER,
            evidence: "usage limit".into(),
            held: 1,
            ts: 5,
            bounded: false,
        };
        let path = d.path().join("park-claude-p.json");
        write(&path, &p);
        assert_eq!(read(&path), Some(p));
        assert_eq!(fmt_time(0), "1970-01-01 00:00 UTC");
        assert_eq!(
            fmt_time(1_772_323_200_000 + 3_660_000),
            "2026-03-01 01:01 UTC"
        );
        assert_eq!(fmt_duration(7_200_000), "2h00m");
        assert_eq!(fmt_duration(30_000), "30s");
    }
}
