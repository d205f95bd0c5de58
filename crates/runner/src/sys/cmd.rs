//! The one bounded-command helper: every external program the runner runs outside a turn (git,
//! docker, sqlite3, the release's version probe) goes through [`run_bounded`], so a wedged tool
//! can slow a seat down but never hang it.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Why a bounded command did not produce an output.
#[derive(Debug, thiserror::Error)]
pub enum BoundedError {
    /// The program could not be started (missing binary, permissions, …).
    #[error("could not start {program}: {source}")]
    Spawn {
        /// The program name.
        program: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The program ran past its time limit and was killed.
    #[error("{program} timed out after {after:?}")]
    TimedOut {
        /// The program name.
        program: String,
        /// The limit that was exceeded.
        after: Duration,
    },
    /// Waiting for the program failed.
    #[error("waiting for {program} failed: {source}")]
    Wait {
        /// The program name.
        program: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// Run `cmd` to completion with stdin on /dev/null and stdout/stderr captured, killing its whole
/// process group when it runs longer than `timeout`.
///
/// The child leads its own process group so a timeout also reaches anything it spawned (git's
/// helpers, docker's plugins); otherwise a grandchild could keep the output pipes open forever.
pub fn run_bounded(mut cmd: Command, timeout: Duration) -> Result<Output, BoundedError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().map_err(|source| BoundedError::Spawn {
        program: program.clone(),
        source,
    })?;
    // Readers on their own threads: a chatty child must never block on a full pipe while we wait.
    let out_reader = child.stdout.take().map(spawn_reader);
    let err_reader = child.stderr.take().map(spawn_reader);
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= timeout => {
                kill_group(child.id());
                let _ = child.kill();
                let _ = child.wait();
                // The readers end once the killed group's pipe ends close; do not wait on them
                // if a stray process escaped the group and still holds a pipe.
                return Err(BoundedError::TimedOut {
                    program,
                    after: timeout,
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(source) => {
                kill_group(child.id());
                let _ = child.kill();
                let _ = child.wait();
                return Err(BoundedError::Wait { program, source });
            }
        }
    };
    let stdout = join_reader(out_reader);
    let stderr = join_reader(err_reader);
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

fn spawn_reader<R: Read + Send + 'static>(mut pipe: R) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        buf
    })
}

fn join_reader(handle: Option<std::thread::JoinHandle<Vec<u8>>>) -> Vec<u8> {
    handle.and_then(|h| h.join().ok()).unwrap_or_default()
}

fn kill_group(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_run_kills_a_hung_child() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 30"]);
        let err = run_bounded(cmd, Duration::from_millis(200)).expect_err("must time out");
        assert!(matches!(err, BoundedError::TimedOut { .. }));
    }

    #[test]
    fn bounded_run_captures_output_and_status() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"]);
        let out = run_bounded(cmd, Duration::from_secs(20)).expect("run");
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }
}
