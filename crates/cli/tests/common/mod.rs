//! Shared harness for the integration tests: real processes on temporary directories and free
//! ports. Each test file `mod common;` includes it; not every file uses every helper.
#![allow(dead_code)]

pub mod seat;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Path of the `trantor` binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_trantor"))
}

/// A TCP port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// The one hub wrapper of the integration tests. [`Hub::start`] and [`Hub::start_with`] serve the
/// hub inside the test process (its own thread and runtime, `trantor_hub::serve` on a port-0
/// listener): no process to spawn or wait for. [`Hub::spawn`] and [`Hub::start_in`] run the
/// `trantor hub` binary instead, for what needs a process: `kill -9`, a restart on the same
/// port, or the binary's own command line. Either kind stops when dropped.
pub struct Hub {
    /// Listening port.
    pub port: u16,
    /// The hub's data directory (RELAY_DATA_DIR).
    pub data_dir: PathBuf,
    child: Option<Child>,
    in_process: Option<InProcess>,
    store: Option<trantor_store_sqlite::SqliteStore>,
    _tmp: Option<tempfile::TempDir>,
}

/// The thread serving an in-process hub, the switch that stops it and its "stopped" signal.
struct InProcess {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    // A Mutex so a `&Hub` can be shared with scoped threads (the Receiver is not Sync).
    done: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Hub {
    /// An in-process hub with the default configuration on a fresh temporary data directory.
    pub fn start() -> Hub {
        Hub::start_with(|_| {})
    }

    /// An in-process hub on a fresh temporary data directory, its configuration (the same
    /// `HubArgs` as `trantor hub`'s flags) adjusted by `tune`, e.g. a short reaper period.
    pub fn start_with(tune: impl FnOnce(&mut trantor_hub::HubArgs)) -> Hub {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data_dir = tmp.path().to_path_buf();
        let mut args = trantor_hub::HubArgs {
            data_dir: Some(data_dir.clone()),
            ..Default::default()
        };
        tune(&mut args);
        let cfg = trantor_hub::Config::from_args(&args).expect("hub config");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
        let port = listener.local_addr().expect("local addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let store =
            trantor_store_sqlite::SqliteStore::open(&cfg.db_path()).expect("open the store");
        let handle = store.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name(format!("hub-{port}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("hub runtime");
                rt.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                    let shutdown = async move {
                        let _ = stopped.await;
                    };
                    if let Err(e) = trantor_hub::serve(listener, store, cfg, shutdown).await {
                        eprintln!("in-process hub failed: {e:#}");
                    }
                });
                let _ = done_tx.send(());
            })
            .expect("hub thread");
        Hub {
            port,
            data_dir,
            child: None,
            in_process: Some(InProcess {
                stop: Some(stop),
                done: std::sync::Mutex::new(done),
            }),
            store: Some(handle),
            _tmp: Some(tmp),
        }
    }

    /// A `trantor hub` process on a free port and a fresh temporary data directory.
    pub fn spawn() -> Hub {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let mut hub = Hub::start_in(&dir, free_port(), &[]);
        hub._tmp = Some(tmp);
        hub
    }

    /// A `trantor hub` process on `data_dir` and `port` with extra environment variables.
    pub fn start_in(data_dir: &Path, port: u16, env: &[(&str, &str)]) -> Hub {
        std::fs::create_dir_all(data_dir).expect("data dir");
        let log = std::fs::File::create(data_dir.join(format!("hub-{port}.log"))).expect("log");
        let mut cmd = Command::new(bin());
        cmd.arg("hub")
            .env("RELAY_PORT", port.to_string())
            .env("RELAY_HOST", "127.0.0.1")
            .env("RELAY_DATA_DIR", data_dir)
            .env("HOME", data_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn hub");
        let hub = Hub {
            port,
            data_dir: data_dir.to_path_buf(),
            child: Some(child),
            in_process: None,
            store: None,
            _tmp: None,
        };
        hub.wait_ready(Duration::from_secs(15));
        hub
    }

    /// Base URL, e.g. `http://127.0.0.1:4477`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The in-process hub's store, to seed rows in bulk (one transaction) where a test is about
    /// reading them back rather than sending them. Panics for a hub process.
    pub fn store(&self) -> &trantor_store_sqlite::SqliteStore {
        self.store
            .as_ref()
            .expect("store(): only an in-process hub (Hub::start) shares its store")
    }

    fn wait_ready(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "hub on port {} did not start; see {}",
            self.port,
            self.data_dir.display()
        );
    }

    /// `kill -9` the hub process (for durability drills); the data directory stays. An
    /// in-process hub has no process to kill: use [`Hub::spawn`] for such a test.
    pub fn kill9(&mut self) {
        assert!(
            self.in_process.is_none(),
            "kill9 on an in-process hub: start it with Hub::spawn or Hub::start_in"
        );
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The hub's process id (`None` for an in-process hub).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(mut p) = self.in_process.take() {
            if let Some(stop) = p.stop.take() {
                let _ = stop.send(());
            }
            // A graceful stop answers held polls and closes streams at once, and the store is
            // closed before the data directory goes; a client that still holds a connection
            // must not hang the suite, so the wait is bounded.
            if let Ok(done) = p.done.lock() {
                let _ = done.recv_timeout(Duration::from_secs(10));
            }
        }
    }
}

/// The hub a runner drill runs against, the one wrapper for both kinds: ours, or the original JavaScript hub (npm `trantor@0.18.72`),
/// on a fixed port and data directory so a drill can kill and restart it. Without node or the
/// package, an original-hub drill says SKIP (a developer machine) or fails (CI).
pub struct TestHub {
    /// Listening port (kept across restarts).
    pub port: u16,
    /// The data directory (kept across restarts).
    pub data: PathBuf,
    original: Option<PathBuf>,
    ours: Option<Hub>,
    theirs: Option<GroupChild>,
    _tmp: Option<tempfile::TempDir>,
}

impl TestHub {
    /// A hub on a fresh data directory; `None` (the drill skips) when the original is wanted
    /// but cannot be had.
    pub fn start(original: bool) -> Option<TestHub> {
        let tmp = tempfile::tempdir().expect("hub data");
        let mut hub = TestHub::start_in(tmp.path(), free_port(), original)?;
        hub._tmp = Some(tmp);
        Some(hub)
    }

    /// A hub on `data` and `port`; `None` after a SKIP when the original cannot be had.
    pub fn start_in(data: &Path, port: u16, original: bool) -> Option<TestHub> {
        let pkg = if original {
            Some(original_package()?)
        } else {
            None
        };
        let mut hub = TestHub {
            port,
            data: data.to_path_buf(),
            original: pkg,
            ours: None,
            theirs: None,
            _tmp: None,
        };
        hub.restart();
        Some(hub)
    }

    /// Whether this is the original JavaScript hub.
    pub fn is_original(&self) -> bool {
        self.original.is_some()
    }

    /// Base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// (Re)start the hub on the same port and data directory.
    pub fn restart(&mut self) {
        match &self.original {
            None => self.ours = Some(Hub::start_in(&self.data, self.port, &[])),
            Some(pkg) => {
                std::fs::create_dir_all(&self.data).expect("data");
                let log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.data.join("hub.log"))
                    .expect("log");
                let mut cmd = Command::new("node");
                cmd.arg(pkg.join("hub.mjs"))
                    .env("RELAY_PORT", self.port.to_string())
                    .env("RELAY_HOST", "127.0.0.1")
                    .env("RELAY_DATA_DIR", &self.data)
                    .env("HOME", &self.data)
                    .stdin(Stdio::null())
                    .stdout(log.try_clone().expect("log"))
                    .stderr(log);
                self.theirs = Some(GroupChild::spawn(cmd));
                let port = self.port;
                wait_until("the original hub", Duration::from_secs(90), || {
                    hub_request(port, "GET", "/health", None).is_ok_and(|(s, _)| s == 200)
                });
            }
        }
    }

    /// `kill -9` the hub; its data directory stays.
    pub fn kill9(&mut self) {
        if let Some(mut h) = self.ours.take() {
            h.kill9();
        }
        if let Some(mut c) = self.theirs.take() {
            c.kill_group();
        }
    }
}

// ---- Runner drills: plain HTTP to the hub, waiting on conditions, runner processes. ----

/// One HTTP/1.1 request to the hub on 127.0.0.1:`port` (no client library, so a drill depends on
/// nothing but the hub); returns the status and the JSON body (`Null` when it is not JSON).
pub fn hub_request(
    port: u16,
    method: &str,
    path_and_query: &str,
    body: Option<&serde_json::Value>,
) -> std::io::Result<(u16, serde_json::Value)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path_and_query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
        payload.len()
    );
    s.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body_text = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    let json = serde_json::from_str(&body_text).unwrap_or(serde_json::Value::Null);
    Ok((status, json))
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

/// `POST /send` from `from` to `to`; returns the new message id (0 if the hub gave none).
pub fn hub_send(port: u16, from: &str, to: &str, project: &str, text: &str) -> i64 {
    let body = serde_json::json!({"from": from, "to": to, "project": project, "text": text});
    let (status, reply) = hub_request(port, "POST", "/send", Some(&body)).expect("send");
    assert!(status < 300, "send failed: {status} {reply}");
    reply["id"].as_i64().unwrap_or(0)
}

/// Every message delivered to `session` so far (peeking: the session's cursor is not moved).
/// The states of message `id`'s delivery record on the hub (`GET /delivery?id=`), in order;
/// empty when the hub does not answer.
pub fn delivery_states(port: u16, id: i64) -> Vec<String> {
    let (_, v) = hub_request(port, "GET", &format!("/delivery?id={id}"), None)
        .unwrap_or((0, serde_json::Value::Null));
    v["states"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["state"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn hub_messages(port: u16, session: &str) -> Vec<serde_json::Value> {
    let q = format!("/inbox?session={}&since=0&peek=1", url_encode(session));
    match hub_request(port, "GET", &q, None) {
        Ok((_, v)) => v["messages"].as_array().cloned().unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

/// Percent-encode a query value.
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Poll `cond` every 50 ms until it holds; panic naming `what` after `within` (a generous
/// deadline, never a timing assertion).
pub fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        if Instant::now() > deadline {
            panic!("timed out after {within:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the hub on `port` holds `n` polls (`/health`'s `pollsHeld`): a waiting client's
/// request has reached the hub, so what is sent next arrives after its call started.
pub fn wait_polls_held(port: u16, n: u64) {
    wait_until(
        &format!("{n} held poll(s)"),
        Duration::from_secs(60),
        || {
            hub_request(port, "GET", "/health", None)
                .is_ok_and(|(_, v)| v["pollsHeld"].as_u64() == Some(n))
        },
    );
}

/// A process started in its own process group; the whole group is killed when dropped.
pub struct GroupChild {
    /// The child.
    pub child: Child,
}

impl GroupChild {
    /// Spawn `cmd` as the leader of a new process group.
    pub fn spawn(mut cmd: Command) -> GroupChild {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        GroupChild {
            child: cmd.spawn().expect("spawn"),
        }
    }

    /// The process id (also the process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL the whole group and reap the leader.
    pub fn kill_group(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// Run git in `dir` for a drill; panics on failure, returns trimmed stdout.
pub fn git_in(dir: &Path, args: &[&str]) -> String {
    let out = trantor_proto::git::git_command(dir)
        .args(args)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A git repository with one commit on `main` and a local identity.
pub fn init_git_repo(dir: &Path) {
    std::fs::create_dir_all(dir).expect("repo dir");
    git_in(dir, &["init", "-q", "-b", "main"]);
    git_in(dir, &["config", "user.name", "Drill"]);
    git_in(dir, &["config", "user.email", "drill@example.invalid"]);
    git_in(dir, &["config", "commit.gpgsign", "false"]);
    std::fs::write(dir.join("README.md"), "drill\n").expect("readme");
    git_in(dir, &["add", "README.md"]);
    git_in(dir, &["commit", "-q", "-m", "init"]);
}

// ---- Prerequisites: a missing tool skips visibly on a developer machine and fails under CI. ----

/// Whether this run is CI: `CI` is set to anything but empty, `0` or `false` (CI runners set
/// `CI=true`; `.ci/run` installs every prerequisite, so there a missing one is a failure).
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// The running test cannot run because `reason`. Under CI this panics (the test fails). On a
/// developer machine it writes `SKIP <test>: <reason>` to the process's stderr directly, not
/// through `eprintln!`: the harness captures and hides the print macros of a passing test, but
/// not the stream itself, so the line shows in plain `cargo test` output beside the test's `ok`.
/// Every skipping test says it, not just the first per binary.
pub fn skip_or_fail(reason: &str) {
    let current = std::thread::current();
    let test = current.name().unwrap_or("this test");
    if under_ci() {
        panic!("CI is set, so a missing prerequisite fails the test: {test}: {reason}");
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIP {test}: {reason}");
}

/// Whether an executable named `tool` is on PATH (looked up directly: no process is spawned, so
/// a PATH stripped of a tool is honoured exactly).
pub fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(tool))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Whether every tool in `tools` is on PATH; when one is missing, [`skip_or_fail`] names it and
/// this returns false (the caller returns: `if !require_tools(&["node"]) { return; }`).
pub fn require_tools(tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !on_path(t)).collect();
    if missing.is_empty() {
        return true;
    }
    skip_or_fail(&format!(
        "needs {} on PATH (.ci/run installs it)",
        missing.join(", ")
    ));
    false
}

/// [`require_tools`] for one tool.
pub fn require_tool(tool: &str) -> bool {
    require_tools(&[tool])
}

/// The original package (npm `trantor@0.18.72`), installed once per machine by
/// `tests-compat/install-original.sh` (idempotent). `None` after [`skip_or_fail`] when node or
/// npm is missing or the registry cannot be reached; every caller is told, not just the first.
pub fn original_package() -> Option<PathBuf> {
    static PKG: std::sync::Mutex<Option<Result<PathBuf, String>>> = std::sync::Mutex::new(None);
    if !require_tools(&["node", "npm"]) {
        return None;
    }
    let mut slot = PKG.lock().unwrap_or_else(|e| e.into_inner());
    let got = slot.get_or_insert_with(install_original).clone();
    drop(slot);
    match got {
        Ok(pkg) => Some(pkg),
        Err(reason) => {
            skip_or_fail(&reason);
            None
        }
    }
}

fn install_original() -> Result<PathBuf, String> {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests-compat/install-original.sh");
    let dir = std::env::temp_dir().join("trantor-orig-0.18.72");
    let out = Command::new("bash")
        .arg(&script)
        .arg(&dir)
        .arg("0.18.72")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let pkg = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && pkg.join("hub.mjs").is_file() && pkg.join("mcp.mjs").is_file() {
        return Ok(pkg);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = err.lines().rev().take(3).collect();
    Err(format!(
        "the original trantor@0.18.72 could not be installed from npm (offline?): {}",
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    ))
}

/// The directory holding the real `claude`, `codex` and `opencode` pinned by
/// `tests-compat/install-real-clis.sh` (installed once per machine, `TRANTOR_REAL_CLIS_DIR` or
/// `<tmp>/trantor-real-clis`). `None` after [`skip_or_fail`] when they cannot be had.
pub fn real_clis_bin() -> Option<PathBuf> {
    static BIN: std::sync::Mutex<Option<Result<PathBuf, String>>> = std::sync::Mutex::new(None);
    if !require_tools(&["node", "npm"]) {
        return None;
    }
    let mut slot = BIN.lock().unwrap_or_else(|e| e.into_inner());
    let got = slot
        .get_or_insert_with(|| {
            let script = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests-compat/install-real-clis.sh");
            let dir = std::env::var_os("TRANTOR_REAL_CLIS_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| std::env::temp_dir().join("trantor-real-clis"));
            let out = Command::new("bash")
                .arg(&script)
                .arg(&dir)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
            if out.status.success() {
                Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
            } else {
                Err(format!(
                    "the real agent CLIs could not be installed: {}",
                    String::from_utf8_lossy(&out.stderr)
                        .lines()
                        .last()
                        .unwrap_or("")
                ))
            }
        })
        .clone();
    drop(slot);
    match got {
        Ok(p) => Some(p),
        Err(reason) => {
            skip_or_fail(&reason);
            None
        }
    }
}
