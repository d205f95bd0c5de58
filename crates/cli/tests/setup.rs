//! `trantor setup` in a fresh HOME: `--dry-run` prints a unit `systemd-analyze verify` accepts
//! (where that tool is installed) and changes nothing; in a container, where systemd --user
//! cannot run, setup falls back to a supervised background hub that answers `/health`, is
//! started again when it dies, is left alone by a second run, and `setup --remove` stops it and
//! takes out what setup wrote.

mod common;

use common::{bin, free_port, hub_request, wait_until};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);

/// Whether a systemd user manager runs here (then the test must not install a real unit).
fn systemd_user_runs() -> bool {
    Command::new("systemctl")
        .args(["--user", "is-system-running"])
        .output()
        .map(|o| {
            let s = String::from_utf8_lossy(&o.stdout);
            s.trim() == "running" || s.trim() == "degraded"
        })
        .unwrap_or(false)
}

fn setup(home: &Path, port: u16, args: &[&str]) -> (i32, String) {
    let out = Command::new(bin())
        .arg("setup")
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("RELAY_PORT", port.to_string())
        // No agent CLI and no Claude Code: connect and the plugin have their own tests.
        .env("PATH", "/usr/bin:/bin")
        .env("TRANTOR_CLAUDE", "/nonexistent/claude")
        .env_remove("AGENT_BUS_DIR")
        .env_remove("RELAY_DATA_DIR")
        .env_remove("RELAY_URL")
        .env_remove("TRANTOR_SETUP_SERVICE")
        .stdin(Stdio::null())
        .output()
        .expect("run setup");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn healthy(port: u16) -> bool {
    matches!(hub_request(port, "GET", "/health", None), Ok((200, _)))
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start())
                .unwrap_or("");
            !state.starts_with('Z') && !state.starts_with('X')
        })
        .unwrap_or(false)
}

fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Stops a supervisor left running by a failed assertion.
struct Reap(PathBuf);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0)
            && let Ok(pid) = pid.trim().parse::<u32>()
        {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}

#[test]
fn dry_run_prints_a_unit_systemd_accepts_and_changes_nothing() {
    let home = tempfile::tempdir().expect("home");
    let (code, out) = setup(home.path(), free_port(), &["--dry-run"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("nothing is changed"), "{out}");
    let entries: Vec<_> = std::fs::read_dir(home.path())
        .expect("read home")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(entries.is_empty(), "dry run wrote {entries:?}:\n{out}");
    let start = out.find("[Unit]").expect("a unit");
    let end = start + out[start..].find("\n---").expect("end of the unit");
    let unit = &out[start..end];
    assert!(
        unit.contains("ExecStart=") && unit.contains(" hub"),
        "{unit}"
    );
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIP (assertion): systemd-analyze is not installed here");
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("trantor-hub.service");
    std::fs::write(&file, unit).expect("write unit");
    let v = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&file)
        .output()
        .expect("systemd-analyze");
    assert!(
        v.status.success(),
        "systemd-analyze verify refused the unit:\n{unit}\n{}{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );
}

#[test]
fn setup_in_a_container_runs_a_supervised_background_hub_and_remove_takes_it_out() {
    let home = tempfile::tempdir().expect("home");
    let h = home.path();
    let bus = h.join(".agent-bus");
    let pid_file = bus.join("hub-supervisor.pid");
    let _reap = Reap(pid_file.clone());
    let port = free_port();
    let forced: &[&str] = if systemd_user_runs() {
        &["--service", "background"]
    } else {
        &[]
    };
    let (code, out) = setup(h, port, forced);
    assert_eq!(code, 0, "{out}");
    if forced.is_empty() {
        assert!(out.contains("systemd --user cannot run here"), "{out}");
    }
    assert!(out.contains("supervised background hub"), "{out}");
    assert!(out.contains("trantor setup --remove"), "{out}");
    assert!(healthy(port), "{out}");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    let config = std::fs::read_to_string(bus.join("config.json")).expect("config");
    assert!(config.contains(&format!("127.0.0.1:{port}")), "{config}");

    // Twice: nothing changes, the same supervisor keeps the hub.
    let (code, again) = setup(h, port, forced);
    assert_eq!(code, 0, "{again}");
    assert!(
        again.contains("hub       unchanged") && again.contains("config    unchanged"),
        "{again}"
    );
    assert_eq!(
        std::fs::read_to_string(&pid_file).expect("pid").trim(),
        pid.to_string()
    );

    // Supervised: a hub that dies is started again.
    let hub = *children(pid).first().expect("the hub under the supervisor");
    let _ = Command::new("kill").args(["-9", &hub.to_string()]).status();
    wait_until("the hub to be started again", LONG, || {
        children(pid).iter().any(|c| *c != hub) && healthy(port)
    });

    let (code, out) = setup(h, port, &["--remove"]);
    assert_eq!(code, 0, "{out}");
    wait_until("the hub to stop", LONG, || !healthy(port));
    wait_until("the supervisor to exit", LONG, || !alive(pid));
    assert!(!pid_file.exists(), "{out}");
    assert!(!bus.join("setup.json").exists(), "{out}");
    let config = std::fs::read_to_string(bus.join("config.json")).expect("config");
    assert!(!config.contains("url"), "{config}");
    // Again: nothing left to do.
    let (code, out) = setup(h, port, &["--remove"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("setup runs no hub here"), "{out}");
}
