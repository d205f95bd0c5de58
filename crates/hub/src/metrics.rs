//! Counters for `GET /metrics` (Prometheus text exposition format, version 0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use trantor_store::{Counts, PruneReport};

/// Hub counters. Cheap to bump from any handler.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, &'static str, u16), u64>>,
    /// Requests that reached the router since start, answered or not (a held poll counts
    /// when it arrives); the quiet check of `trim` reads it.
    arrived: AtomicU64,
    /// Messages stored by `/send`.
    pub messages_sent: AtomicU64,
    /// Polls that returned because a wake arrived.
    pub polls_woken: AtomicU64,
    /// Polls that returned at their deadline with nothing.
    pub polls_timed_out: AtomicU64,
    /// Events published to SSE streams.
    pub events_published: AtomicU64,
    /// SSE streams currently open (the only readers of the feed's messages).
    pub streams_open: AtomicU64,
    /// Messages committed by another hub on the shared store and read back for SSE streams.
    pub remote_messages_read: AtomicU64,
    /// `_op` replays served from the outcome table.
    pub op_replays: AtomicU64,
    pruned: Mutex<PrunedTotals>,
}

/// What retention removed since start, and the last pass.
#[derive(Debug, Default, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrunedTotals {
    /// Messages removed since start.
    pub messages: i64,
    /// Events removed since start.
    pub events: i64,
    /// `_op` records removed since start.
    pub ops: i64,
    /// When the last pass ran (ms; 0 = never).
    pub last_run_ts: i64,
    /// What the last pass removed.
    pub last: Option<PruneReport>,
}

impl Metrics {
    /// Count one request as it arrives.
    pub fn arrive(&self) {
        self.arrived.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests arrived since start.
    pub fn arrived(&self) -> u64 {
        self.arrived.load(Ordering::Relaxed)
    }

    /// Count one answered request.
    pub fn request(&self, method: &'static str, route: &'static str, status: u16) {
        let mut m = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((method, route, status)).or_default() += 1;
    }

    /// Record a retention pass.
    pub fn pruned(&self, report: &PruneReport, now: i64) {
        let mut p = self.pruned.lock().unwrap_or_else(|e| e.into_inner());
        p.messages += report.messages;
        p.events += report.events;
        p.ops += report.ops;
        p.last_run_ts = now;
        p.last = Some(report.clone());
    }

    /// Retention totals.
    pub fn pruned_totals(&self) -> PrunedTotals {
        self.pruned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Render everything as Prometheus text, with the store's row counts and live gauges.
    pub fn render(&self, counts: Option<&Counts>, held_polls: u64, wakes: u64) -> String {
        let mut out = String::with_capacity(4096);
        out.push_str(
            "# HELP trantor_http_requests_total HTTP requests answered, by route and status.\n",
        );
        out.push_str("# TYPE trantor_http_requests_total counter\n");
        for ((method, route, status), n) in self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "trantor_http_requests_total{{method=\"{}\",route=\"{}\",status=\"{status}\"}} {n}",
                escape(method),
                escape(route)
            );
        }
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        };
        let gauge = |out: &mut String, name: &str, help: &str, v: i64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        counter(
            &mut out,
            "trantor_messages_sent_total",
            "Messages accepted by /send.",
            self.messages_sent.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "trantor_wake_rings_total",
            "Committed messages that rang the wake registry.",
            wakes,
        );
        counter(
            &mut out,
            "trantor_polls_woken_total",
            "Held polls answered because a message arrived.",
            self.polls_woken.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "trantor_polls_timed_out_total",
            "Held polls answered empty at their deadline.",
            self.polls_timed_out.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "trantor_events_published_total",
            "Events and messages published to SSE streams.",
            self.events_published.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "trantor_op_replays_total",
            "Writes answered from the _op outcome table instead of running again.",
            self.op_replays.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "trantor_polls_held",
            "Polls being held right now.",
            i64::try_from(held_polls).unwrap_or(i64::MAX),
        );
        counter(
            &mut out,
            "trantor_remote_messages_read_total",
            "Messages another hub committed, read from the shared store for this hub's SSE streams.",
            self.remote_messages_read.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "trantor_streams_open",
            "SSE streams open right now.",
            i64::try_from(self.streams_open.load(Ordering::SeqCst)).unwrap_or(i64::MAX),
        );
        let p = self.pruned_totals();
        out.push_str("# HELP trantor_pruned_total Rows removed by read-history retention.\n");
        out.push_str("# TYPE trantor_pruned_total counter\n");
        let _ = writeln!(
            out,
            "trantor_pruned_total{{kind=\"messages\"}} {}",
            p.messages
        );
        let _ = writeln!(out, "trantor_pruned_total{{kind=\"events\"}} {}", p.events);
        let _ = writeln!(out, "trantor_pruned_total{{kind=\"ops\"}} {}", p.ops);
        if let Some(c) = counts {
            out.push_str("# HELP trantor_store_rows Rows in the store.\n");
            out.push_str("# TYPE trantor_store_rows gauge\n");
            for (kind, n) in [
                ("messages", c.messages),
                ("peers", c.peers),
                ("cards", c.cards),
                ("events", c.events),
                ("lessons", c.lessons),
            ] {
                let _ = writeln!(out, "trantor_store_rows{{kind=\"{kind}\"}} {n}");
            }
        }
        out
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.request("GET", "/poll", 200);
        m.request("GET", "/poll", 200);
        m.messages_sent.fetch_add(3, Ordering::Relaxed);
        m.pruned(
            &PruneReport {
                messages: 2,
                events: 1,
                ops: 0,
            },
            5,
        );
        let text = m.render(Some(&Counts::default()), 4, 7);
        assert!(text.contains(
            "trantor_http_requests_total{method=\"GET\",route=\"/poll\",status=\"200\"} 2"
        ));
        assert!(text.contains("trantor_messages_sent_total 3"));
        assert!(text.contains("trantor_polls_held 4"));
        assert!(text.contains("trantor_wake_rings_total 7"));
        assert!(text.contains("trantor_pruned_total{kind=\"messages\"} 2"));
        assert!(text.contains("trantor_store_rows{kind=\"cards\"} 0"));
    }
}
