//! `trantor bench` (crate `trantor-bench`): benchmarks that hold the product to its bars (docs/architecture.md §6).
//!
//! Limits are measured here, on real processes, never by timed unit tests. Each benchmark
//! prints a markdown table with the target and a verdict per row, plus the context needed to
//! compare runs (date, cores, build, command line).

mod auth;
mod chaos;
mod commit;
mod crowd;
mod http;
mod hub;
mod hub_pg;
mod hub_proc;
mod hub_shared;
mod runner;
mod scaling;

use std::fmt::Write as _;

/// Options of `trantor bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// What to measure.
    #[command(subcommand)]
    pub what: BenchWhat,
}

/// The benchmarks.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum BenchWhat {
    /// The hub: wake latency, idle CPU, /send throughput, burst loss, RSS, restart time.
    Hub(hub_shared::HubBenchArgs),
    /// A seat: runner idle RSS and CPU, wake → CLI spawned latency (optionally beside the
    /// original JavaScript runner, in the same run).
    Runner(runner::RunnerBenchArgs),
    /// Internal: the bare-route ceiling server `bench hub` measures `/send` against (the hub's
    /// accept loop and `/send` body decoding, nothing stored). Not for direct use.
    #[command(hide = true)]
    CeilingServer(hub::CeilingArgs),
    /// The seat's promise under faults: contracts acknowledged, lost, duplicated, overlapping
    /// CLIs and acknowledgement → turn started, with and without `kill -9` of the hub and the
    /// runners.
    Chaos(chaos::ChaosBenchArgs),
    /// Signed identity: sign and verify cost per request, and /send throughput signed vs
    /// unsigned against one hub in one run.
    Auth(auth::AuthBenchArgs),
    /// A crowd of simulated seats (held polls, heartbeats, contracts, card moves at a runner's
    /// rates) against one hub and two hubs on one PostgreSQL: hub CPU, RSS, wake p50 / p99 and
    /// errors at N = 100, 1,000 and 10,000.
    ///
    /// For each size, fresh hubs: one on the embedded SQLite store, and with --store two hubs on
    /// one PostgreSQL database (a scratch database, seats split evenly, contracts to any seat).
    /// Each seat keeps one /poll held on its own connection, heartbeats every 30 s, sends a
    /// contract to a random seat every 60 s (its recipient answers it with re) and moves its
    /// card every 120 s (means, at random times); writes share a pool of keep-alive connections
    /// per hub. Measured after every poll is held: each hub's CPU (cores) and RSS, wake latency
    /// (a contract's /send written → the recipient's poll returned with it) and errors. The
    /// process raises its own open-file limit to the hard limit (the hubs inherit it); a size
    /// that needs more open files is reported as not measured. Run a release build; see
    /// docs/bench-crowd.md.
    Crowd(crowd::CrowdBenchArgs),
}

/// One line of a report.
pub struct Row {
    what: String,
    result: String,
    target: String,
    verdict: &'static str,
}

impl Row {
    /// A measurement held to a target.
    pub fn check(
        what: impl Into<String>,
        result: impl Into<String>,
        target: &str,
        ok: bool,
    ) -> Row {
        Row {
            what: what.into(),
            result: result.into(),
            target: target.into(),
            verdict: if ok { "pass" } else { "**MISS**" },
        }
    }

    /// A count that must be zero (things lost, duplicated, out of order), held to `0`.
    pub fn zero(what: impl Into<String>, count: usize) -> Row {
        Row::check(what, count.to_string(), "0", count == 0)
    }

    /// A measurement shown for context, with no target of its own.
    pub fn info(what: impl Into<String>, result: impl Into<String>) -> Row {
        Row {
            what: what.into(),
            result: result.into(),
            target: "—".into(),
            verdict: "",
        }
    }
}

/// A report: rows and free-text notes.
#[derive(Default)]
pub struct Table {
    rows: Vec<Row>,
    notes: Vec<String>,
}

impl Table {
    /// Add a row.
    pub fn row(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// Add a note printed under the table.
    pub fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    fn markdown(&self, title: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "## {title}\n");
        let _ = writeln!(s, "- date: {}", utc_now());
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let _ = writeln!(s, "- machine: {cores} cores, {}", std::env::consts::OS);
        let build = if cfg!(debug_assertions) {
            "debug (NOT representative: use a release build)"
        } else {
            "release"
        };
        let _ = writeln!(s, "- build: {build}, trantor {}", env!("CARGO_PKG_VERSION"));
        let args: Vec<String> = std::env::args().skip(1).collect();
        let _ = writeln!(s, "- command: `trantor {}`\n", args.join(" "));
        let _ = writeln!(s, "| measure | result | target | verdict |");
        let _ = writeln!(s, "|---|---|---|---|");
        for r in &self.rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                r.what, r.result, r.target, r.verdict
            );
        }
        if !self.notes.is_empty() {
            s.push('\n');
            for n in &self.notes {
                let _ = writeln!(s, "- {n}");
            }
        }
        s
    }
}

/// Today's date and time in UTC, `YYYY-MM-DD HH:MM UTC`.
fn utc_now() -> String {
    trantor_proto::date::fmt_utc_minutes(trantor_proto::now_ms())
}

/// Run the benchmarks and print a table.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let (md, out) = match &args.what {
        BenchWhat::Hub(a) => (hub::run(a).await?.markdown("trantor bench hub"), &a.out),
        BenchWhat::Runner(a) => (
            runner::run(a).await?.markdown("trantor bench runner"),
            &a.out,
        ),
        BenchWhat::CeilingServer(a) => return hub::ceiling_server(a).await,
        BenchWhat::Auth(a) => (auth::run(a).await?.markdown("trantor bench auth"), &a.out),
        BenchWhat::Chaos(a) => (chaos::run(a).await?.markdown("trantor bench chaos"), &a.out),
        BenchWhat::Crowd(a) => (crowd::run(a).await?.markdown("trantor bench crowd"), &a.out),
    };
    print!("{md}");
    if let Some(out) = out {
        std::fs::write(out, &md)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_now_is_well_formed() {
        let s = super::utc_now();
        assert_eq!(s.len(), "2026-01-01 00:00 UTC".len(), "{s}");
        assert!(s.starts_with("20"), "{s}");
    }
}
