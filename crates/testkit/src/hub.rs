//! The one hub wrapper: in process, as a process, or the original JavaScript hub.

use crate::{GroupChild, bin, free_port, hub_request, original_package, wait_until};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
    done: std::sync::Mutex<std::sync::mpsc::Receiver<Result<(), String>>>,
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
        let mut hub = Hub::start_on(tmp.path(), tune);
        hub._tmp = Some(tmp);
        hub
    }

    /// An in-process hub on `data_dir` (kept when the hub stops, so a test can start another
    /// on the same store), its configuration adjusted by `tune`.
    pub fn start_on(data_dir: &Path, tune: impl FnOnce(&mut trantor_hub::HubArgs)) -> Hub {
        let data_dir = data_dir.to_path_buf();
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
        let (done_tx, done) = std::sync::mpsc::channel::<Result<(), String>>();
        std::thread::Builder::new()
            .name(format!("hub-{port}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("hub runtime");
                let served = rt.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                    let shutdown = async move {
                        let _ = stopped.await;
                    };
                    trantor_hub::serve(listener, store, cfg, shutdown).await
                });
                if let Err(e) = &served {
                    eprintln!("in-process hub failed: {e:#}");
                }
                let _ = done_tx.send(served.map_err(|e| format!("{e:#}")));
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
            _tmp: None,
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
        let mut hub = Hub {
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

    /// proto's typed client on this hub (the one the runner and the CLI use).
    pub fn client(&self) -> trantor_proto::HubClient {
        trantor_proto::HubClient::new(self.url())
    }

    /// Stop the hub and wait for it; panics unless an in-process hub stopped cleanly within
    /// 10 s (`serve` returned `Ok`). Dropping a hub stops it too, without the check.
    pub fn stop(mut self) {
        let Some(mut p) = self.in_process.take() else {
            return;
        };
        if let Some(stop) = p.stop.take() {
            let _ = stop.send(());
        }
        let done = p.done.lock().unwrap_or_else(|e| e.into_inner());
        match done.recv_timeout(Duration::from_secs(10)) {
            Ok(served) => assert!(served.is_ok(), "the hub stopped with an error: {served:?}"),
            Err(e) => panic!("the hub did not stop within 10 s: {e}"),
        }
    }

    /// The in-process hub's store, to seed rows in bulk (one transaction) where a test is about
    /// reading them back rather than sending them. Panics for a hub process.
    pub fn store(&self) -> &trantor_store_sqlite::SqliteStore {
        self.store
            .as_ref()
            .expect("store(): only an in-process hub (Hub::start) shares its store")
    }

    /// Waits until this hub process answers `/health`. A port that merely accepts is not
    /// enough (another test's socket may hold it); a hub that exited fails at once, with its log.
    fn wait_ready(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        let log = self.data_dir.join(format!("hub-{}.log", self.port));
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "hub on port {} exited at start ({status}): {}",
                    self.port,
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            if hub_request(self.port, "GET", "/health", None).is_ok_and(|(s, _)| s == 200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "hub on port {} did not start; see {}",
            self.port,
            log.display()
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
