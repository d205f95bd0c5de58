//! The chaos test (issue 20, docs/runner.md §24): a real hub and four real runner seats, 60
//! contracts at a steady rate, while the hub and the runners (the runner process alone, leaving
//! its CLI running as a crash does) are `kill -9`ed at random and restarted — by
//! `trantor bench chaos --kills on`, whose files this test counts itself:
//!
//! - no acknowledged contract lost (each reached a completed turn),
//! - none acted on by two completed turns,
//! - never two agent CLIs at once in one seat's worktree,
//! - every contract's `/delivery` record complete and in order.
//!
//! The agent stand-in logs a contract as done only as its very last act, after its answer
//! reached the runner, so a turn that died on the way is not a completed one. Bounded: the
//! sending takes about 36 s, the drain at most 120 s; the seed is printed (`CHAOS_SEED` replays
//! a run's kills).

mod common;

use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

fn ledger_lines(dir: &std::path::Path) -> Vec<(String, String, Vec<String>)> {
    let mut out = Vec::new();
    for seat in std::fs::read_dir(dir.join("chaos"))
        .expect("chaos dir")
        .flatten()
    {
        let persona = seat.file_name().to_string_lossy().to_string();
        let text = std::fs::read_to_string(seat.path().join("ledger")).unwrap_or_default();
        for l in text.lines() {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() >= 4 {
                out.push((
                    persona.clone(),
                    w[0].to_string(),
                    w[4..].iter().map(|s| s.to_string()).collect(),
                ));
            }
        }
    }
    out
}

#[test]
fn kill_9_of_hub_and_runners_loses_no_contract_runs_none_twice_and_never_overlaps_clis() {
    if !common::require_tools(&["git", "bash"]) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let json = tmp.path().join("numbers.json");
    let mut cmd = Command::new(common::bin());
    cmd.args([
        "bench",
        "chaos",
        "--kills",
        "on",
        "--seats",
        "4",
        "--contracts",
        "60",
        "--interval-ms",
        "600",
        "--kill-every-ms",
        "2500",
        "--drain-secs",
        "120",
    ])
    .arg("--dir")
    .arg(tmp.path())
    .arg("--json")
    .arg(&json);
    if let Ok(seed) = std::env::var("CHAOS_SEED") {
        cmd.args(["--seed", &seed]);
    }
    let out = cmd.output().expect("trantor bench chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}\n{stdout}");
    assert!(out.status.success(), "bench chaos failed:\n{stderr}");
    let dir = tmp.path().join("kills");

    // Counted here, from the files, not taken from the bench's own summary.
    let acked: Vec<(String, String)> = std::fs::read_to_string(dir.join("acked.jsonl"))
        .expect("acked contracts")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            (
                v["token"].as_str().unwrap_or_default().to_string(),
                v["seat"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(acked.len(), 60, "every contract was acknowledged once");
    let lines = ledger_lines(&dir);
    let mut done: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (persona, what, tokens) in &lines {
        if what == "done" {
            for t in tokens {
                done.entry(t.as_str()).or_default().push(persona.as_str());
            }
        }
    }
    let lost: Vec<&str> = acked
        .iter()
        .filter(|(t, _)| !done.contains_key(t.as_str()))
        .map(|(t, _)| t.as_str())
        .collect();
    let twice: Vec<(&str, usize)> = acked
        .iter()
        .filter_map(|(t, _)| {
            let n = done.get(t.as_str()).map_or(0, Vec::len);
            (n > 1).then_some((t.as_str(), n))
        })
        .collect();
    for (t, seat) in &acked {
        let persona = seat.split(':').next().unwrap_or_default();
        if let Some(by) = done.get(t.as_str()) {
            assert!(
                by.iter().all(|p| *p == persona),
                "{t} was acted on by {by:?}, not only by its seat {persona}"
            );
        }
    }
    let overlaps: Vec<String> = std::fs::read_dir(dir.join("chaos"))
        .expect("chaos dir")
        .flatten()
        .flat_map(|s| {
            std::fs::read_to_string(s.path().join("overlap"))
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let numbers: Value =
        serde_json::from_slice(&std::fs::read(&json).expect("numbers")).expect("json");
    let n = &numbers[0];
    eprintln!(
        "chaos: {} acknowledged, {} hub kills, {} runner kills, lost {}, duplicated {}, overlapping {}",
        acked.len(),
        n["hub_kills"],
        n["runner_kills"],
        lost.len(),
        twice.len(),
        overlaps.len()
    );
    if !lost.is_empty() {
        // Keep the run for a post-mortem and say what each lost contract's seat was doing.
        let kept = tmp.keep();
        let mut why = String::new();
        for t in &lost {
            let Some((_, seat)) = acked.iter().find(|(tok, _)| tok == t) else {
                continue;
            };
            let persona = seat.split(':').next().unwrap_or_default();
            let ack = std::fs::read_to_string(kept.join("kills/acked.jsonl")).unwrap_or_default();
            let id = ack
                .lines()
                .find(|l| l.contains(&format!("\"{t}\"")))
                .and_then(|l| serde_json::from_str::<Value>(l).ok())
                .and_then(|v| v["id"].as_i64())
                .unwrap_or(0);
            let record = std::fs::read_to_string(kept.join("kills/delivery.jsonl"))
                .unwrap_or_default()
                .lines()
                .find(|l| l.starts_with(&format!("{{\"id\":{id},")))
                .unwrap_or("(no record)")
                .to_string();
            why.push_str(&format!("\n{t} (#{id}, seat {persona}): {record}\n"));
            let mut logs: Vec<_> = std::fs::read_dir(kept.join("kills/logs"))
                .map(|d| d.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
            logs.retain(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{persona}-")))
            });
            logs.sort();
            if let Some(last) = logs.last() {
                let text = std::fs::read_to_string(last).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(25).collect();
                why.push_str(&format!("  last runner log {}:\n", last.display()));
                for l in tail.iter().rev() {
                    why.push_str(&format!("    {l}\n"));
                }
            }
        }
        panic!(
            "acknowledged contracts never completed: {lost:?} (run kept in {}){why}",
            kept.display()
        );
    }
    assert!(
        twice.is_empty(),
        "contracts completed by two turns: {twice:?}"
    );
    assert!(
        overlaps.is_empty(),
        "two CLIs at once in a seat: {overlaps:?}"
    );
    // The faults really happened (36 s of sending, a kill every 1.25–3.75 s).
    let kills = n["hub_kills"].as_u64().unwrap_or(0) + n["runner_kills"].as_u64().unwrap_or(0);
    assert!(kills >= 5, "only {kills} kills happened: {n}");
    // Every acknowledged contract's /delivery record is complete and in order: stored first,
    // claimed and started before its one consumed, which ends it.
    let records: Vec<Value> = std::fs::read_to_string(dir.join("delivery.jsonl"))
        .expect("delivery records")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(records.len(), 60);
    for r in &records {
        let states: Vec<&str> = r["states"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let end = states.iter().position(|s| *s == "consumed");
        assert_eq!(states.first(), Some(&"stored"), "{r}");
        assert_eq!(end, Some(states.len() - 1), "one consumed, last: {r}");
        let before = &states[..states.len() - 1];
        let claimed = before.iter().position(|s| *s == "claimed");
        let started = before.iter().rposition(|s| *s == "started");
        assert!(
            matches!((claimed, started), (Some(c), Some(s)) if c < s),
            "claimed, then started, before consumed: {r}"
        );
    }
    // The bench's own count agrees with this one.
    assert_eq!(n["lost"], 0);
    assert_eq!(n["duplicated"], 0);
    assert_eq!(n["overlapping"], 0);
    assert_eq!(n["incomplete_records"], 0);
}
