//! Fencing (docs/runner.md §24.1, §24.2): one runner per seat, and at most one agent CLI in a
//! seat's worktree at any moment.
//!
//! Both are `flock`s, which the kernel drops when the last holder of the open file goes away, so
//! a lock left by a killed process is stale by construction: the next `try_lock` simply succeeds.
//!
//! - The **seat lock** `seat-<persona>-<project>.lock` is held by the runner for its whole life
//!   and names it (`{pid, instance, since}`), so a second runner can say who it is refusing for.
//!   Its descriptor is close-on-exec: no CLI inherits it.
//! - The **CLI lock** `clilock-<hash of the turn directory>.lock` is taken by the runner before a
//!   spawn and handed to the turn's wrapper shell as its stdin, so it stays held exactly as long
//!   as the wrapper — the CLI's parent, which waits for it — lives. A runner killed mid-turn leaves
//!   the wrapper and its CLI running, and the lock held: the next runner sees an orphan CLI in the
//!   worktree and adopts it (docs/runner.md §24.3) instead of starting another one beside it.

use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Who holds a seat lock.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The runner's pid.
    pub pid: u32,
    /// The runner's instance id (fresh per process image).
    pub instance: String,
    /// When it took the lock, ms since the epoch.
    pub since: i64,
}

/// Why a seat lock could not be had.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// Another live runner holds the seat.
    #[error(
        "seat {seat} is already run by runner pid {} (instance {}, since {}) — stop it first, or start this runner with --take-over (TRANTOR_TAKE_OVER=1) to replace it",
        holder.pid, holder.instance, crate::seat::park::fmt_time(holder.since)
    )]
    Held {
        /// The seat's session.
        seat: String,
        /// Who holds it.
        holder: Holder,
    },
    /// `--take-over` could not make the holder let go.
    #[error("--take-over: runner pid {pid} still holds seat {seat} after SIGTERM and SIGKILL")]
    Stuck {
        /// The seat's session.
        seat: String,
        /// The holder's pid.
        pid: u32,
    },
    /// The lock file itself.
    #[error("seat lock {}: {source}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// The exit status of a runner that stopped because it was superseded (docs/runner.md §24.1):
/// distinct from a failure (1), so a supervisor can tell that restarting it would only fight
/// the runner that replaced it.
pub const EXIT_SUPERSEDED: u8 = 3;

/// The runner stopped because another runner instance took the seat's fence on the hub
/// (docs/runner.md §24.1): it runs no further turn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "superseded: seat {session} is now run by runner instance {current} (the hub's delivery fence moved to it) — this runner (instance {instance}) stops without running another turn; its pending queue stays on disk"
)]
pub struct Superseded {
    /// The seat's session.
    pub session: String,
    /// This runner's instance.
    pub instance: String,
    /// The instance the hub fenced the session to.
    pub current: String,
}

/// How a seat lock was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// Nobody had held it (or the file was empty).
    Fresh,
    /// A dead runner's lock: the kernel had released it; its record names the dead runner.
    Stale(Holder),
    /// A live runner was replaced (`--take-over`).
    TookOver(Holder),
}

/// The held seat lock; dropping it releases the seat.
#[derive(Debug)]
pub struct SeatLock {
    _file: File,
}

fn open_lock(path: &Path) -> std::io::Result<File> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

fn read_holder(file: &File) -> Option<Holder> {
    let mut buf = vec![0u8; 4096];
    let n = file.read_at(&mut buf, 0).ok()?;
    serde_json::from_slice(&buf[..n]).ok()
}

fn try_lock(file: &File) -> std::io::Result<bool> {
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    if let Ok(p) = i32::try_from(pid)
        && p > 1
    {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), sig);
    }
}

/// Wait until `file` can be locked, up to `within`.
fn lock_within(file: &File, within: Duration) -> std::io::Result<bool> {
    let deadline = Instant::now() + within;
    loop {
        if try_lock(file)? {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl SeatLock {
    /// Take the seat lock at `path` for `instance` (docs/runner.md §24.1). A live holder is
    /// refused with its pid, unless `take_over`: then it gets SIGTERM, SIGKILL after `grace`,
    /// and the lock is taken when the kernel releases it. Blocking (use from a blocking thread).
    pub fn acquire(
        path: &Path,
        seat: &str,
        instance: &str,
        take_over: bool,
        grace: Duration,
    ) -> Result<(SeatLock, Taken), FenceError> {
        let io = |source| FenceError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = open_lock(path).map_err(io)?;
        let previous = read_holder(&file);
        let taken = if try_lock(&file).map_err(io)? {
            match previous {
                Some(h) => Taken::Stale(h),
                None => Taken::Fresh,
            }
        } else {
            let holder = previous.unwrap_or_default();
            if !take_over {
                return Err(FenceError::Held {
                    seat: seat.to_string(),
                    holder,
                });
            }
            tracing::warn!(
                "--take-over: stopping runner pid {} (instance {}) that holds {seat}",
                holder.pid,
                holder.instance
            );
            signal(holder.pid, nix::sys::signal::Signal::SIGTERM);
            if !lock_within(&file, grace).map_err(io)? {
                tracing::warn!(
                    "--take-over: runner pid {} ignored SIGTERM for {grace:?} — SIGKILL",
                    holder.pid
                );
                signal(holder.pid, nix::sys::signal::Signal::SIGKILL);
                if !lock_within(&file, Duration::from_secs(5)).map_err(io)? {
                    return Err(FenceError::Stuck {
                        seat: seat.to_string(),
                        pid: holder.pid,
                    });
                }
            }
            Taken::TookOver(holder)
        };
        let me = Holder {
            pid: std::process::id(),
            instance: instance.to_string(),
            since: trantor_proto::now_ms(),
        };
        // Rewritten in place (a rename would make a new file nobody is locking).
        let bytes = serde_json::to_vec(&me).map_err(|e| io(std::io::Error::other(e)))?;
        file.set_len(0).map_err(io)?;
        file.write_all_at(&bytes, 0).map_err(io)?;
        file.sync_data().map_err(io)?;
        Ok((SeatLock { _file: file }, taken))
    }
}

/// The CLI lock file of a turn directory: one per directory, whoever's seat runs there.
pub fn cli_lock_path(bus: &Path, turn_dir: &Path) -> PathBuf {
    let canon = std::fs::canonicalize(turn_dir).unwrap_or_else(|_| turn_dir.to_path_buf());
    // FNV-1a over the path bytes: stable across builds and Rust versions.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canon.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    bus.join(format!("clilock-{h:016x}.lock"))
}

/// The held CLI lock of a turn directory (docs/runner.md §24.2).
#[derive(Debug)]
pub struct CliLock {
    file: File,
}

impl CliLock {
    /// Take the lock when no CLI holds it; `None` while one does (an orphan of a killed runner).
    pub fn try_acquire(path: &Path) -> std::io::Result<Option<CliLock>> {
        let file = open_lock(path)?;
        if !try_lock(&file)? {
            return Ok(None);
        }
        let note = format!(
            "{{\"runner\":{},\"ts\":{}}}\n",
            std::process::id(),
            trantor_proto::now_ms()
        );
        let _ = file.set_len(0);
        let _ = (&file).write_all(note.as_bytes());
        Ok(Some(CliLock { file }))
    }

    /// Whether a CLI holds the lock at `path` now (a probe: takes and drops it when free).
    pub fn held(path: &Path) -> std::io::Result<bool> {
        Ok(CliLock::try_acquire(path)?.is_none())
    }

    /// A handle on the same open file, for the turn's wrapper to hold (its stdin): the lock
    /// stays held while the wrapper lives, even when the runner does not.
    pub fn handle(&self) -> std::io::Result<File> {
        self.file.try_clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_runner_is_refused_with_the_holders_pid_and_a_dead_ones_lock_is_stale() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("seat-x-p.lock");
        let (lock, taken) =
            SeatLock::acquire(&p, "x:p", "i1", false, Duration::from_secs(1)).expect("first");
        assert_eq!(taken, Taken::Fresh);
        let err = SeatLock::acquire(&p, "x:p", "i2", false, Duration::from_secs(1))
            .expect_err("second runner refused");
        let text = err.to_string();
        assert!(
            text.contains(&format!("runner pid {}", std::process::id())),
            "{text}"
        );
        assert!(
            text.contains("instance i1") && text.contains("--take-over"),
            "{text}"
        );
        drop(lock);
        // The holder is gone (its descriptor closed, as a killed process's is): stale, taken.
        // Another test of this process that spawns a child shares every descriptor between its
        // fork and its exec, so the lock is free within moments of the drop, not at once: wait
        // that out, with a deadline (as the CLI lock's test below does).
        let deadline = Instant::now() + Duration::from_secs(10);
        let (_l, taken) = loop {
            match SeatLock::acquire(&p, "x:p", "i3", false, Duration::from_secs(1)) {
                Ok(t) => break t,
                Err(FenceError::Held { .. }) if Instant::now() < deadline => {
                    std::thread::yield_now()
                }
                Err(e) => panic!("stale: {e:?}"),
            }
        };
        match taken {
            Taken::Stale(h) => assert_eq!(h.instance, "i1"),
            other => panic!("expected a stale lock, got {other:?}"),
        }
    }

    #[test]
    fn the_cli_lock_is_held_while_a_handle_lives() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = cli_lock_path(d.path(), d.path());
        let lock = CliLock::try_acquire(&p).expect("io").expect("free");
        let handle = lock.handle().expect("clone");
        drop(lock);
        // The wrapper's handle (the same open file) keeps it held after the runner let go.
        assert!(CliLock::held(&p).expect("probe"));
        drop(handle);
        // Free once every holder let go. Another test of this process that spawns a child
        // shares every descriptor between its fork and its exec (close-on-exec closes them only
        // at the exec), so the probe waits out that moment, with a deadline.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while CliLock::held(&p).expect("probe") {
            assert!(
                std::time::Instant::now() < deadline,
                "the lock is still held 10 s after its last handle closed"
            );
            std::thread::yield_now();
        }
    }
}
