//! Processes a drill starts and must not leave behind.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

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

/// Wait for `child` with a deadline; past it the child is killed and `None` returned.
pub fn wait_with_deadline(mut child: Child, within: Duration) -> Option<std::process::Output> {
    let deadline = Instant::now() + within;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().ok(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Kill every process whose command line mentions `marker` (a unique temp path of one test):
/// the original runner spawns its turn shell and watchdog in sessions of their own, out of
/// reach of a process-group kill.
pub fn kill_processes_mentioning(marker: &Path) {
    let marker = marker.to_string_lossy().into_owned();
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if u32::try_from(pid).is_ok_and(|p| p == me) {
            continue;
        }
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&marker) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}
