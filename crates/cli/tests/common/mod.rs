//! Shared harness for the integration tests: real processes on temporary directories and free
//! ports. Each test file `mod common;` includes it; not every file uses every helper.
#![allow(dead_code)]

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

/// A hub process on a free port with its own data directory; killed when dropped.
pub struct Hub {
    /// Listening port.
    pub port: u16,
    /// The hub's data directory (RELAY_DATA_DIR).
    pub data_dir: PathBuf,
    child: Option<Child>,
    _tmp: Option<tempfile::TempDir>,
}

impl Hub {
    /// Start a hub on a fresh temporary data directory.
    pub fn start() -> Hub {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let mut hub = Hub::start_in(&dir, free_port(), &[]);
        hub._tmp = Some(tmp);
        hub
    }

    /// Start a hub on `data_dir` and `port` with extra environment variables.
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
            _tmp: None,
        };
        hub.wait_ready(Duration::from_secs(15));
        hub
    }

    /// Base URL, e.g. `http://127.0.0.1:4477`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn wait_ready(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("hub on port {} did not start; see {}", self.port, self.data_dir.display());
    }

    /// `kill -9` the hub (for durability drills); the data directory stays.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The hub's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.kill9();
    }
}
