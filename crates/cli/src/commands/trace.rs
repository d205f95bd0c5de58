//! `trantor trace <id>`: the life of one message, from the hub's delivery record
//! (docs/protocol.md §5.8).

use super::{Common, print_json};
use std::process::ExitCode;
use trantor_proto::{ClientError, DeliveryEntry, DeliveryRecord, DeliveryState};

pub(crate) const TRACE_HELP: &str = concat!(
    "\
Every direct message has a life on the hub: stored (with the message), claimed by a seat's
runner, started (the turn number and the agent CLI's pid), consumed (the turn's verdict), or
requeued / failed / parked with the reason. Times are relative to `stored`.

Examples:
  trantor trace 42          the life of message #42
  trantor trace 42 --json   the record as JSON: {id, to, states:[{state, ts, session, instance, turn, pid, outcome, reason}]}

",
    exit_codes!()
);

/// `trantor trace` options.
#[derive(Debug, clap::Args)]
pub struct TraceArgs {
    /// The message id (as `trantor send` printed it; a leading `#` is fine).
    pub id: String,
    #[command(flatten)]
    pub common: Common,
}

/// `+1.234s`, `+2m05s`, `+1h02m` after the first state.
fn offset(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "+" };
    let ms = ms.unsigned_abs();
    if ms < 60_000 {
        format!("{sign}{}.{:03}s", ms / 1000, ms % 1000)
    } else if ms < 3_600_000 {
        format!("{sign}{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{sign}{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60)
    }
}

fn line(base: i64, e: &DeliveryEntry) -> String {
    let mut s = format!("  {:>10}  {:<9}", offset(e.ts - base), e.state.as_str());
    if let Some(i) = &e.instance {
        s.push_str(&format!("  instance {i}"));
    }
    if let Some(t) = e.turn {
        s.push_str(&format!("  turn {t}"));
    }
    if let Some(p) = e.pid {
        s.push_str(&format!("  pid {p}"));
    }
    if let Some(o) = &e.outcome {
        s.push_str(&format!("  outcome {o}"));
    }
    if let Some(r) = &e.reason {
        s.push_str(&format!("  reason: {r}"));
    }
    s
}

/// The record as text lines.
pub(crate) fn render(rec: &DeliveryRecord) -> Vec<String> {
    let mut out = vec![format!("message #{} → {}", rec.id, rec.to)];
    let Some(first) = rec.states.first() else {
        out.push("  no delivery record: a broadcast is delivered to everyone, not tracked".into());
        return out;
    };
    let base = rec
        .states
        .iter()
        .find(|e| e.state == DeliveryState::Stored)
        .unwrap_or(first)
        .ts;
    out.extend(rec.states.iter().map(|e| line(base, e)));
    if let Some(last) = rec.states.last() {
        let verdict = match last.state {
            DeliveryState::Consumed => "acted on",
            DeliveryState::Failed => "failed, not retried",
            DeliveryState::Stored => "waiting on the hub: no runner has claimed it",
            DeliveryState::Claimed => "claimed, its turn has not started",
            DeliveryState::Started => "its turn is running (or its end was not recorded yet)",
            DeliveryState::Requeued => "requeued, will run again",
            DeliveryState::Parked => "held: the seat is parked",
        };
        out.push(format!(
            "now: {} ({verdict}), {} after stored",
            last.state,
            offset(last.ts - base)
        ));
    }
    out
}

pub(crate) async fn trace(a: TraceArgs) -> anyhow::Result<ExitCode> {
    let raw = a.id.trim().trim_start_matches('#');
    let Ok(id) = raw.parse::<i64>() else {
        return Err(super::usage(format!(
            "`{}` is not a message id: give the number `trantor send` printed (e.g. trantor trace 42)",
            a.id
        )));
    };
    let (_, hub) = a.common.connect()?;
    let rec = match hub.delivery(id).await {
        Ok(r) => r,
        Err(ClientError::Http {
            status: 404, body, ..
        }) if body.error.starts_with("no message") => {
            return Err(super::VerbError::Hub {
                message: format!("there is no message #{id} on the hub at {}", hub.base()),
                unreachable: false,
            }
            .into());
        }
        Err(ClientError::Http { status: 404, .. }) => {
            return Err(super::VerbError::Hub {
                message: format!(
                    "the hub at {} has no delivery record (GET /delivery is 404): it is an \
                     older or the original hub, which does not keep one",
                    hub.base()
                ),
                unreachable: false,
            }
            .into());
        }
        Err(e) => return Err(super::hub_failure(hub.base(), e)),
    };
    if a.common.json {
        print_json(&rec)?;
    } else {
        for l in render(&rec) {
            say!("{l}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_read_at_a_glance() {
        assert_eq!(offset(0), "+0.000s");
        assert_eq!(offset(1_234), "+1.234s");
        assert_eq!(offset(125_000), "+2m05s");
        assert_eq!(offset(3_720_000), "+1h02m");
        assert_eq!(offset(-5), "-0.005s");
    }
}
