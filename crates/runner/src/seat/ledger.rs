//! The telemetry ledger `logs/<persona>-<project>.jsonl` (docs/runner.md §15.1) and the
//! turn-state file with the runner's phase (docs/runner.md §15.2).
//!
//! The ledger is append-only and its write errors are logged at debug and swallowed: telemetry
//! must never stop a seat. The turn-state file is merged over its previous content and replaced
//! atomically, because the watchdog refreshes liveness fields in it while the runner owns the
//! phase.

use crate::sys::fsx;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

/// The runner's phases as the hub and the turn-state file name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// A turn is running.
    Working,
    /// Waiting on the bus.
    Idle,
    /// The last turn was cut at the box.
    Cut,
    /// The last turn was cut at the stall window.
    Stalled,
    /// Parked: redelivery stopped.
    Parked,
}

impl Phase {
    /// The wire word.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Working => "working",
            Phase::Idle => "idle",
            Phase::Cut => "cut",
            Phase::Stalled => "stalled",
            Phase::Parked => "parked",
        }
    }
}

/// The seat's telemetry ledger.
#[derive(Debug, Clone)]
pub struct Ledger {
    path: PathBuf,
}

impl Ledger {
    /// The ledger at `path`.
    pub fn new(path: &Path) -> Ledger {
        Ledger {
            path: path.to_path_buf(),
        }
    }

    /// Append one row (errors are swallowed after a debug log).
    pub fn append(&self, row: &Value) {
        let line = match serde_json::to_string(row) {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!("ledger row not serialisable: {e}");
                return;
            }
        };
        if let Err(e) = fsx::append_line(&self.path, &line) {
            tracing::debug!("ledger {}: {e}", self.path.display());
        }
    }
}

/// The boot row (docs/runner.md §3): `{ts, persona, agent, project, boot:true, hub, pid, version}`.
pub fn boot_row(persona: &str, agent: &str, project: &str, hub: &str, version: &str) -> Value {
    json!({
        "ts": trantor_proto::now_ms(),
        "persona": persona,
        "agent": agent,
        "project": project,
        "boot": true,
        "hub": hub,
        "pid": std::process::id(),
        "version": version,
    })
}

/// The restart row (docs/runner.md §3): `{ts, text:"runner restarted onto V", version}`.
pub fn restart_row(version: &str) -> Value {
    json!({
        "ts": trantor_proto::now_ms(),
        "text": format!("runner restarted onto {version}"),
        "version": version,
    })
}

/// Merge `patch` over the turn-state file and replace it atomically (docs/runner.md §15.2).
pub fn write_turn_state(path: &Path, patch: Value) {
    let mut base: Map<String, Value> = std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default();
    if let Value::Object(p) = patch {
        for (k, v) in p {
            base.insert(k, v);
        }
    }
    match serde_json::to_vec(&Value::Object(base)) {
        Ok(bytes) => {
            if let Err(e) = fsx::write_replace(path, &bytes) {
                tracing::debug!("turn state {}: {e}", path.display());
            }
        }
        Err(e) => tracing::debug!("turn state not serialisable: {e}"),
    }
}

/// Write a phase transition `{phase, since}` (plus any extra fields).
pub fn write_phase(path: &Path, phase: Phase, extra: Value) {
    let mut patch = json!({ "phase": phase.as_str(), "since": trantor_proto::now_ms() });
    if let (Value::Object(p), Value::Object(e)) = (&mut patch, extra) {
        p.extend(e);
    }
    write_turn_state(path, patch);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_append_and_turn_state_merges() {
        let d = tempfile::tempdir().expect("tmp");
        let file = d.path().join("logs/reviewer-p.jsonl");
        let l = Ledger::new(&file);
        l.append(&boot_row("reviewer", "claude", "p", "http://h", "0.1.0"));
        l.append(&restart_row("0.2.0"));
        let text = std::fs::read_to_string(&file).expect("ledger");
        let rows: Vec<Value> = text
            .lines()
            .map(|s| serde_json::from_str(s).expect("row"))
            .collect();
        assert_eq!(rows[0]["persona"], "reviewer");
        assert_eq!(rows[0]["boot"], true);
        assert_eq!(rows[0]["pid"], std::process::id());
        assert_eq!(rows[1]["text"], "runner restarted onto 0.2.0");

        let ts = d.path().join("turnstate-reviewer-p.json");
        write_turn_state(
            &ts,
            json!({"turn": 3, "phase": "working", "lastBytesAt": 5}),
        );
        write_phase(&ts, Phase::Idle, json!({}));
        let v: Value = serde_json::from_slice(&std::fs::read(&ts).expect("r")).expect("j");
        assert_eq!(v["phase"], "idle");
        assert_eq!(v["turn"], 3);
        assert_eq!(v["lastBytesAt"], 5);
    }
}
