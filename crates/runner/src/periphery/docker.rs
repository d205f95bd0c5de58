//! The docker janitor (docs/runner.md §18): containers a turn started are recorded per card and
//! stopped — never removed, never their volumes — when the card reaches testing or done, or when
//! the seat parks. A seat that leaves a dev database running for every card would otherwise fill
//! the machine.
//!
//! Every docker call is time-bounded and quiet: with no docker client, or a client without a
//! running engine, the janitor does nothing and says nothing (debug logs only), and whatever is
//! recorded stays recorded for a later sweep.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sys::cmd::run_bounded;

/// `docker ps` limit (docs/runner.md §18).
const PS_TIMEOUT: Duration = Duration::from_secs(8);
/// `docker stop` limit: its own 10 s grace per container runs in parallel inside the daemon.
const STOP_TIMEOUT: Duration = Duration::from_secs(40);

/// One container a turn started.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Container {
    /// Container id (short form, as `docker ps` prints it).
    pub id: String,
    /// Container name.
    pub name: String,
    /// When it was first seen, ms.
    pub at: i64,
}

/// The record file: `{cards:{"<card|0>":[{id,name,at}]}}`.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
struct Record {
    #[serde(default)]
    cards: BTreeMap<String, Vec<Container>>,
}

/// How the janitor reaches docker; a trait so the bookkeeping is tested without an engine.
pub trait DockerApi: Send {
    /// Running containers as (id, name), or `None` when docker is unavailable.
    fn ps(&mut self) -> Option<Vec<(String, String)>>;
    /// Stop these containers; returns the ids that stopped (`None` when docker is unavailable).
    fn stop(&mut self, ids: &[String]) -> Option<Vec<String>>;
}

/// The real docker CLI, every call bounded.
#[derive(Debug, Default)]
pub struct DockerCli;

impl DockerApi for DockerCli {
    fn ps(&mut self) -> Option<Vec<(String, String)>> {
        let mut cmd = Command::new("docker");
        cmd.args(["ps", "--format", "{{.ID}} {{.Names}}"]);
        match run_bounded(cmd, PS_TIMEOUT) {
            Ok(out) if out.status.success() => Some(
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter_map(|l| {
                        let mut parts = l.split_whitespace();
                        let id = parts.next()?.to_string();
                        let name = parts.next().unwrap_or("").to_string();
                        Some((id, name))
                    })
                    .collect(),
            ),
            Ok(out) => {
                tracing::debug!(
                    "docker ps unavailable: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(e) => {
                tracing::debug!("docker ps unavailable: {e}");
                None
            }
        }
    }

    fn stop(&mut self, ids: &[String]) -> Option<Vec<String>> {
        let mut cmd = Command::new("docker");
        cmd.arg("stop").args(ids);
        match run_bounded(cmd, STOP_TIMEOUT) {
            // docker prints each id (or name) it stopped; it exits 1 when any failed.
            Ok(out) => {
                if !out.status.success() {
                    tracing::debug!(
                        "docker stop: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
                let stopped: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(|l| l.trim().to_string())
                    .collect();
                if !out.status.success() && stopped.is_empty() {
                    // Nothing stopped at all: the engine is unavailable or every id is gone.
                    let engine_down = String::from_utf8_lossy(&out.stderr)
                        .contains("Cannot connect to the Docker daemon");
                    if engine_down {
                        return None;
                    }
                }
                Some(
                    ids.iter()
                        .filter(|id| stopped.contains(*id))
                        .cloned()
                        .collect(),
                )
            }
            Err(e) => {
                tracing::debug!("docker stop unavailable: {e}");
                None
            }
        }
    }
}

/// The before-turn snapshot: not taken, being taken, or taken (`None` inside = unavailable).
enum Before {
    None,
    Pending(std::thread::JoinHandle<Option<Vec<(String, String)>>>),
    Ready(Option<Vec<(String, String)>>),
}

/// A persona or project as part of a file name: kept as is (like the other per-seat files),
/// except that a path separator cannot smuggle the file out of the bus directory.
fn file_part(s: &str) -> String {
    s.replace(['/', '\0'], "_")
}

/// Records the containers each turn starts and stops them when their card is finished.
pub struct DockerJanitor {
    file: PathBuf,
    session: String,
    api: Arc<Mutex<Box<dyn DockerApi>>>,
    before: Before,
    last_new: Vec<String>,
    notices: Vec<String>,
}

impl DockerJanitor {
    /// The janitor of one seat; its record is `<bus>/docker-<persona>-<project>.json`.
    pub fn new(bus_dir: &Path, persona: &str, project: &str) -> Self {
        Self::with_api(bus_dir, persona, project, Box::new(DockerCli))
    }

    /// The janitor with another docker backend (tests).
    pub fn with_api(bus_dir: &Path, persona: &str, project: &str, api: Box<dyn DockerApi>) -> Self {
        DockerJanitor {
            file: bus_dir.join(format!(
                "docker-{}-{}.json",
                file_part(persona),
                file_part(project)
            )),
            session: format!("{persona}:{project}"),
            api: Arc::new(Mutex::new(api)),
            before: Before::None,
            last_new: Vec::new(),
            notices: Vec::new(),
        }
    }

    /// Use `session` in the notices instead of `<persona>:<project>` (a `RUNNER_SESSION` seat).
    pub fn with_session(mut self, session: &str) -> Self {
        self.session = session.to_string();
        self
    }

    /// The record file.
    #[cfg(test)]
    pub fn record_path(&self) -> &Path {
        &self.file
    }

    /// Snapshot the running containers before a turn starts.
    ///
    /// The `docker ps` runs on a helper thread so it never delays the CLI's spawn (the client
    /// alone takes tens of milliseconds, even with no engine); [`DockerJanitor::after_turn`]
    /// collects it. An agent CLI takes far longer to start a container than `ps` takes to list.
    pub fn before_turn(&mut self) {
        self.last_new.clear();
        let api = self.api.clone();
        let spawned = std::thread::Builder::new()
            .name("docker-ps".into())
            .spawn(move || api.lock().ok().and_then(|mut a| a.ps()));
        self.before = match spawned {
            Ok(h) => Before::Pending(h),
            Err(e) => {
                // No thread to spare: take the snapshot inline rather than lose the turn's record.
                tracing::debug!("docker ps thread: {e}");
                Before::Ready(self.ps())
            }
        };
    }

    /// The before-turn snapshot, waiting for it if it is still running.
    fn take_before(&mut self) -> Option<Vec<(String, String)>> {
        match std::mem::replace(&mut self.before, Before::None) {
            Before::None => None,
            Before::Ready(v) => v,
            Before::Pending(h) => h.join().ok().flatten(),
        }
    }

    fn ps(&self) -> Option<Vec<(String, String)>> {
        self.api.lock().ok().and_then(|mut a| a.ps())
    }

    fn stop(&self, ids: &[String]) -> Option<Vec<String>> {
        self.api.lock().ok().and_then(|mut a| a.stop(ids))
    }

    /// After the turn: record the containers that appeared during it under `card` (0 when the
    /// turn had none). Nothing is new when either snapshot is unavailable.
    pub fn after_turn(&mut self, card: Option<i64>) {
        self.last_new.clear();
        let Some(before) = self.take_before() else {
            return;
        };
        let Some(after) = self.ps() else {
            return;
        };
        let known: BTreeSet<&str> = before.iter().map(|(id, _)| id.as_str()).collect();
        let now = trantor_proto::now_ms();
        let fresh: Vec<Container> = after
            .into_iter()
            .filter(|(id, _)| !known.contains(id.as_str()))
            .map(|(id, name)| Container { id, name, at: now })
            .collect();
        if fresh.is_empty() {
            return;
        }
        let key = card.unwrap_or(0).to_string();
        let mut record = self.load();
        let list = record.cards.entry(key.clone()).or_default();
        for c in fresh {
            self.last_new.push(c.name.clone());
            if !list.iter().any(|k| k.id == c.id) {
                list.push(c);
            }
        }
        tracing::info!(
            "docker: turn started {} on card #{key} — recorded",
            self.last_new.join(", ")
        );
        self.save(&record);
    }

    /// Names of the containers the last turn started (for the telemetry row's `containers`).
    pub fn last_turn_containers(&self) -> &[String] {
        &self.last_new
    }

    /// A card changed status: when it reached `testing` or `done`, stop its containers.
    pub fn on_card_status(&mut self, card: i64, status: &str) {
        if !matches!(status, "testing" | "done") {
            return;
        }
        let key = card.to_string();
        if !self.load().cards.contains_key(&key) {
            return;
        }
        self.sweep(Some(&key), &format!("card #{card} {status}"));
    }

    /// The seat parked: stop every recorded container.
    pub fn on_park(&mut self) {
        if self.load().cards.is_empty() {
            return;
        }
        self.sweep(None, "seat parked");
    }

    /// Status lines for `all` ("🧹 SESSION stopped N container(s) (why): names…"), one per sweep
    /// that stopped something, taken once.
    pub fn take_notices(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notices)
    }

    fn sweep(&mut self, only: Option<&str>, why: &str) {
        let mut record = self.load();
        let targets: Vec<Container> = record
            .cards
            .iter()
            .filter(|(k, _)| only.is_none_or(|o| o == k.as_str()))
            .flat_map(|(_, v)| v.iter().cloned())
            .collect();
        if targets.is_empty() {
            return;
        }
        let ids: Vec<String> = targets.iter().map(|c| c.id.clone()).collect();
        let Some(stopped) = self.stop(&ids) else {
            // No engine: stay silent, keep the record for a later sweep.
            return;
        };
        let stopped: BTreeSet<String> = stopped.into_iter().collect();
        for (k, list) in record.cards.iter_mut() {
            if only.is_none_or(|o| o == k.as_str()) {
                list.retain(|c| !stopped.contains(&c.id));
            }
        }
        record.cards.retain(|_, v| !v.is_empty());
        self.save(&record);
        if stopped.is_empty() {
            return;
        }
        let names: Vec<&str> = targets
            .iter()
            .filter(|c| stopped.contains(&c.id))
            .map(|c| c.name.as_str())
            .collect();
        let failed: Vec<&str> = targets
            .iter()
            .filter(|c| !stopped.contains(&c.id))
            .map(|c| c.name.as_str())
            .collect();
        let mut line = format!(
            "🧹 {} stopped {} container(s) ({why}): {}",
            self.session,
            names.len(),
            names.join(", ")
        );
        if !failed.is_empty() {
            line.push_str(&format!(" · could not stop: {}", failed.join(", ")));
        }
        tracing::info!("{line}");
        self.notices.push(line);
    }

    fn load(&self) -> Record {
        std::fs::read(&self.file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    fn save(&self, record: &Record) {
        if record.cards.is_empty() {
            let _ = std::fs::remove_file(&self.file);
            return;
        }
        if let Err(e) = crate::sys::fsx::write_json_atomic(&self.file, record) {
            tracing::warn!("docker record {}: {e}", self.file.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl DockerJanitor {
        /// Wait for the before-turn snapshot, so a test can start containers after it.
        fn settle(&mut self) {
            let v = self.take_before();
            self.before = Before::Ready(v);
        }
    }

    #[derive(Default)]
    struct Fake {
        running: Vec<(String, String)>,
        up: bool,
        stop_calls: Vec<Vec<String>>,
        refuse: BTreeSet<String>,
    }

    struct FakeApi(Arc<Mutex<Fake>>);

    impl DockerApi for FakeApi {
        fn ps(&mut self) -> Option<Vec<(String, String)>> {
            let f = self.0.lock().expect("lock");
            f.up.then(|| f.running.clone())
        }
        fn stop(&mut self, ids: &[String]) -> Option<Vec<String>> {
            let mut f = self.0.lock().expect("lock");
            if !f.up {
                return None;
            }
            f.stop_calls.push(ids.to_vec());
            let ok: Vec<String> = ids
                .iter()
                .filter(|i| !f.refuse.contains(*i))
                .cloned()
                .collect();
            f.running.retain(|(id, _)| !ok.contains(id));
            Some(ok)
        }
    }

    fn c(id: &str) -> (String, String) {
        (id.to_string(), format!("name-{id}"))
    }

    #[test]
    fn records_per_card_and_stops_on_done() {
        let tmp = tempfile::tempdir().expect("tmp");
        let fake = Arc::new(Mutex::new(Fake {
            up: true,
            running: vec![c("old")],
            ..Default::default()
        }));
        let mut j =
            DockerJanitor::with_api(tmp.path(), "rev", "p", Box::new(FakeApi(fake.clone())));
        assert!(j.record_path().ends_with("docker-rev-p.json"));

        j.before_turn();
        j.settle();
        fake.lock().expect("lock").running.push(c("a"));
        j.after_turn(Some(7));
        assert_eq!(j.last_turn_containers(), ["name-a"]);
        j.before_turn();
        j.settle();
        fake.lock().expect("lock").running.push(c("b"));
        j.after_turn(Some(8));

        j.on_card_status(7, "doing");
        assert!(fake.lock().expect("lock").stop_calls.is_empty());
        j.on_card_status(7, "testing");
        assert_eq!(
            fake.lock().expect("lock").stop_calls,
            vec![vec!["a".to_string()]]
        );
        let notices = j.take_notices();
        assert_eq!(notices.len(), 1);
        assert!(notices[0].contains("rev:p stopped 1 container(s) (card #7 testing): name-a"));
        // The pre-existing container is never touched; card 8's stays until it finishes.
        let rec = std::fs::read_to_string(j.record_path()).expect("record");
        assert!(rec.contains("\"8\"") && !rec.contains("\"7\""));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(j.record_path())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        j.on_park();
        assert!(!j.record_path().exists(), "empty record is deleted");
        assert!(
            fake.lock()
                .expect("lock")
                .running
                .iter()
                .any(|(id, _)| id == "old")
        );
    }

    #[test]
    fn failures_stay_recorded_and_absent_docker_is_silent() {
        let tmp = tempfile::tempdir().expect("tmp");
        let fake = Arc::new(Mutex::new(Fake {
            up: true,
            ..Default::default()
        }));
        let mut j = DockerJanitor::with_api(tmp.path(), "c", "p", Box::new(FakeApi(fake.clone())));
        j.before_turn();
        j.settle();
        fake.lock().expect("lock").running.extend([c("x"), c("y")]);
        j.after_turn(None);
        fake.lock().expect("lock").refuse.insert("y".into());
        j.on_park();
        let n = j.take_notices();
        assert!(n[0].contains("could not stop: name-y"), "{n:?}");
        let rec = std::fs::read_to_string(j.record_path()).expect("record");
        assert!(rec.contains("\"y\"") && !rec.contains("\"x\""));
        // Engine gone: nothing happens, nothing said, record kept.
        fake.lock().expect("lock").up = false;
        j.on_park();
        assert!(j.take_notices().is_empty());
        assert!(j.record_path().exists());
        // A turn with no engine records nothing.
        j.before_turn();
        j.after_turn(Some(1));
        assert!(j.last_turn_containers().is_empty());
    }

    #[test]
    fn real_cli_is_quiet_and_bounded_without_an_engine() {
        // This machine may have a client without a daemon, or no client at all: either way the
        // janitor must just do nothing.
        let tmp = tempfile::tempdir().expect("tmp");
        let mut j = DockerJanitor::new(tmp.path(), "c", "p");
        j.before_turn();
        j.after_turn(Some(3));
        j.on_card_status(3, "done");
        j.on_park();
        assert!(j.take_notices().is_empty());
    }
}
