//! Every per-seat file, keyed by PERSONA and project under the one bus directory
//! (docs/runner.md §1.2). Two seats running the same CLI on one project never share a file.

use std::path::{Path, PathBuf};

/// A file-name-safe form of a name: each run of dots becomes `_`, and every character outside
/// `[A-Za-z0-9_.-]` becomes `_` (docs/runner.md §1.2).
pub fn safe(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_dots = false;
    for c in name.chars() {
        if c == '.' {
            if !in_dots {
                out.push('_');
            }
            in_dots = true;
            continue;
        }
        in_dots = false;
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            out.push(c);
        } else {
            out.push('_');
        }
    }
    out
}

/// The persona-keyed files of one seat.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The bus directory itself.
    pub bus: PathBuf,
    /// Durable queue of undelivered wakes, context, the seen ledger and the held ask.
    pub pending: PathBuf,
    /// The park record.
    pub park: PathBuf,
    /// The redacted output of the last turn.
    pub err: PathBuf,
    /// The prompt of the current turn.
    pub prompt: PathBuf,
    /// The turn-state file with the runner's phase.
    pub turnstate: PathBuf,
    /// The watchdog stamp (the turn the watchdog belongs to).
    pub turnstamp: PathBuf,
    /// Marker of a cut at the box.
    pub turncut: PathBuf,
    /// Marker of a stall.
    pub turnstall: PathBuf,
    /// The extended deadline (epoch seconds).
    pub turndeadline: PathBuf,
    /// One line per liveness extension.
    pub turnext: PathBuf,
    /// The containers this seat's turns started.
    pub docker: PathBuf,
    /// The telemetry ledger.
    pub ledger: PathBuf,
    /// Operator alerts (shared by every seat).
    pub alerts: PathBuf,
    /// The seat lock: one runner per seat (docs/runner.md §24.1).
    pub seat_lock: PathBuf,
    /// The durable turn record (docs/runner.md §24.2).
    pub turnrec: PathBuf,
    /// The exit status the turn wrapper leaves.
    pub turnexit: PathBuf,
    /// The turn wrapper's pid (its process group).
    pub turnpid: PathBuf,
    /// The poll cursor and the floor of the owed wakes (docs/runner.md §24.4).
    pub cursor: PathBuf,
}

impl Paths {
    /// The files of the seat `persona` on `project` under `bus`.
    pub fn new(bus: &Path, persona: &str, project: &str) -> Paths {
        let key = format!("{persona}-{project}");
        let f = |prefix: &str, suffix: &str| bus.join(format!("{prefix}-{key}{suffix}"));
        Paths {
            bus: bus.to_path_buf(),
            pending: f("pending", ".json"),
            park: f("park", ".json"),
            err: f("err", ".txt"),
            prompt: f("turn", ".txt"),
            turnstate: f("turnstate", ".json"),
            turnstamp: f("turnstamp", ".json"),
            turncut: f("turncut", ""),
            turnstall: f("turnstall", ""),
            turndeadline: f("turndeadline", ""),
            turnext: f("turnext", ""),
            docker: f("docker", ".json"),
            ledger: bus.join("logs").join(format!("{key}.jsonl")),
            alerts: bus.join("alerts.jsonl"),
            seat_lock: f("seat", ".lock"),
            turnrec: f("turnrec", ".json"),
            turnexit: f("turnexit", ".txt"),
            turnpid: f("turnpid", ".txt"),
            cursor: f("cursor", ".json"),
        }
    }

    /// The seat worktree `worktrees/<safe project>/<safe persona>`.
    pub fn worktree(&self, persona: &str, project: &str) -> PathBuf {
        self.bus
            .join("worktrees")
            .join(safe(project))
            .join(safe(persona))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_folds_dots_and_odd_characters() {
        assert_eq!(safe("a..b.c"), "a_b_c");
        assert_eq!(safe("re/vi ewer"), "re_vi_ewer");
        assert_eq!(safe("ok-Name_1"), "ok-Name_1");
    }

    #[test]
    fn files_are_keyed_by_persona() {
        let p = Paths::new(Path::new("/b"), "reviewer", "p");
        assert_eq!(p.pending, PathBuf::from("/b/pending-reviewer-p.json"));
        assert_eq!(p.park, PathBuf::from("/b/park-reviewer-p.json"));
        assert_eq!(p.err, PathBuf::from("/b/err-reviewer-p.txt"));
        assert_eq!(p.prompt, PathBuf::from("/b/turn-reviewer-p.txt"));
        assert_eq!(p.turnstate, PathBuf::from("/b/turnstate-reviewer-p.json"));
        assert_eq!(p.ledger, PathBuf::from("/b/logs/reviewer-p.jsonl"));
        assert_eq!(
            p.worktree("reviewer", "my.proj"),
            PathBuf::from("/b/worktrees/my_proj/reviewer")
        );
    }
}
