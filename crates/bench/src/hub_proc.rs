//! The hub child process the benches start, the temporary directory it lives in, and what is
//! read off a process: CPU (process clock, `/proc` ticks, this process), RSS, percentiles and
//! `/health` fields.

use super::http::Http;
use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A temporary directory removed on drop (the cli crate has no tempfile dependency).
pub(super) struct TempDir(PathBuf);

impl TempDir {
    pub(super) fn new(tag: &str) -> Result<TempDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "trantor-bench-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(TempDir(dir))
    }

    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The hub child process; killed on drop so a failing benchmark leaves nothing behind.
pub(super) struct HubProc {
    child: Child,
    pub(super) port: u16,
    log: PathBuf,
}

impl HubProc {
    /// Start `trantor hub --sync <sync>` on a free port with its state under `data` and `HOME`
    /// at `home`.
    pub(super) fn spawn(data: &Path, home: &Path, sync: &str) -> Result<HubProc> {
        Self::spawn_with(home, |cmd, _| {
            cmd.arg("hub")
                .env("RELAY_DATA_DIR", data)
                .env("TRANTOR_SYNC", sync);
        })
    }

    /// Start the bare-route ceiling server (`trantor bench ceiling-server`) on a free port.
    pub(super) fn spawn_ceiling(home: &Path) -> Result<HubProc> {
        Self::spawn_with(home, |cmd, port| {
            cmd.args(["bench", "ceiling-server", "--port", &port.to_string()]);
        })
    }

    pub(super) fn spawn_with(home: &Path, args: impl FnOnce(&mut Command, u16)) -> Result<HubProc> {
        // TRANTOR_BENCH_HUB_EXE runs another build's hub under this bench (before/after
        // comparisons with the same client); this binary by default.
        let exe = match std::env::var_os("TRANTOR_BENCH_HUB_EXE") {
            Some(p) => PathBuf::from(p),
            None => std::env::current_exe().context("cannot find this executable")?,
        };
        Self::spawn_program(home, &exe, args)
    }

    /// Start `exe` as a hub on a free port (`RELAY_PORT`, `RELAY_HOST`, `HOME` set; `args` adds
    /// the rest): this build, another build, or the original JavaScript hub under `node`.
    pub(super) fn spawn_program(
        home: &Path,
        exe: &Path,
        args: impl FnOnce(&mut Command, u16),
    ) -> Result<HubProc> {
        let port = trantor_proto::net::free_loopback_port().context("no free loopback port")?;
        let log = home.join(format!("hub-{port}.log"));
        let out = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(exe);
        cmd.env("RELAY_PORT", port.to_string())
            .env("RELAY_HOST", "127.0.0.1")
            .env("HOME", home)
            .env("TRANTOR_LOG", "warn")
            .env_remove("RELAY_DATABASE_URL")
            .env_remove("DATABASE_URL")
            .env_remove("RELAY_AUTH");
        // After the defaults, so a caller may set any of them (the PostgreSQL bench sets
        // RELAY_DATABASE_URL).
        args(&mut cmd, port);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .context("cannot start the hub")?;
        Ok(HubProc { child, port, log })
    }

    /// The file the hub's stdout and stderr go to.
    pub(super) fn log_path(&self) -> &Path {
        &self.log
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait until `/health` answers 200; returns how long that took from `since`.
    pub(super) async fn wait_healthy(
        &mut self,
        since: Instant,
        timeout: Duration,
    ) -> Result<Duration> {
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("the hub exited ({status}); log:\n{}", self.log_tail());
            }
            if let Ok(mut c) = Http::connect(self.port).await
                && let Ok(r) = c.get("/health").await
                && r.status == 200
            {
                return Ok(since.elapsed());
            }
            if since.elapsed() > timeout {
                bail!(
                    "the hub did not become healthy in {timeout:?}; log:\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// SIGTERM, then SIGKILL after 10 s.
    pub(super) fn stop(&mut self) -> Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for HubProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// CPU time `pid` has used over its whole life, ns: the kernel's CPU clock of the process
/// (`clock_getcpuclockid`), which sums every thread, those that already ended included — the
/// same accounting as utime + stime in `/proc/<pid>/stat`, at ns rather than tick resolution.
/// A delta of two readings is the CPU the process used in between; it never goes backwards.
pub(super) fn process_cpu_ns(pid: u32) -> Result<u64> {
    let raw = i32::try_from(pid).context("pid out of range")?;
    let clock = nix::time::clock_getcpuclockid(nix::unistd::Pid::from_raw(raw))
        .with_context(|| format!("no CPU clock for pid {pid}"))?;
    let t = clock
        .now()
        .with_context(|| format!("cannot read the CPU clock of pid {pid}"))?;
    let ns = i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec());
    u64::try_from(ns).context("negative CPU time")
}

/// utime + stime of `pid` from `/proc/<pid>/stat`, in ns (tick resolution, usually 10 ms): the
/// cross-check of [`process_cpu_ns`] printed beside it.
pub(super) fn stat_cpu_ns(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("cannot read /proc/{pid}/stat"))?;
    // The command name may hold spaces and parentheses: fields count from the last ')'.
    let rest = stat.rsplit(')').next().context("odd /proc stat line")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the ')'.
    let tick = |i: usize| -> Result<u64> {
        f.get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .context("no utime/stime in /proc stat")
    };
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|v| u64::try_from(v).ok())
        .filter(|v| *v > 0)
        .unwrap_or(100);
    Ok((tick(11)? + tick(12)?) * (1_000_000_000 / hz))
}

/// CPU this process (the bench client) has used, ns (`getrusage(RUSAGE_SELF)`, µs resolution).
pub(super) fn self_cpu_ns() -> Result<u64> {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .context("getrusage")?;
    let us =
        |t: nix::sys::time::TimeVal| i128::from(t.tv_sec()) * 1_000_000 + i128::from(t.tv_usec());
    u64::try_from((us(u.user_time()) + us(u.system_time())) * 1_000).context("negative CPU time")
}

/// CPU used by `pid` over a window: the process clock's delta, with the `/proc` tick delta
/// beside it. Fails rather than clamp if the clock went backwards (it cannot).
pub(super) struct CpuWindow {
    pid: u32,
    clock0: u64,
    stat0: u64,
    t0: Instant,
}

impl CpuWindow {
    /// Start a window now.
    pub(super) fn start(pid: u32) -> Result<CpuWindow> {
        Ok(CpuWindow {
            pid,
            clock0: process_cpu_ns(pid)?,
            stat0: stat_cpu_ns(pid)?,
            t0: Instant::now(),
        })
    }

    /// End the window: (CPU ns by the process clock, CPU ns by /proc ticks, wall ns).
    pub(super) fn end(&self) -> Result<(u64, u64, u64)> {
        let clock1 = process_cpu_ns(self.pid)?;
        let stat1 = stat_cpu_ns(self.pid)?;
        let wall = u64::try_from(self.t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let used = clock1
            .checked_sub(self.clock0)
            .context("the process CPU clock went backwards")?;
        let ticks = stat1
            .checked_sub(self.stat0)
            .context("/proc utime+stime went backwards")?;
        Ok((used, ticks, wall))
    }
}

/// Resident set of `pid`, KiB (`VmRSS`).
pub(super) fn rss_kib(pid: u32) -> Result<u64> {
    proc_status_kib(pid, "VmRSS")
}

/// Where `pid`'s resident set lives: "anon A, file F (the binary's code B), shmem S", MB.
/// The file part is clean and shared (the kernel maps a touched page's neighbours with it);
/// the anonymous part is what the hub itself allocated.
pub(super) fn rss_split(pid: u32) -> Result<String> {
    let mb = |kib: u64| kib as f64 / 1024.0;
    let anon = proc_status_kib(pid, "RssAnon")?;
    let file = proc_status_kib(pid, "RssFile")?;
    let shmem = proc_status_kib(pid, "RssShmem")?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let (mut in_exe, mut code) = (false, 0u64);
    for line in smaps.lines() {
        if let Some(kib) = line.strip_prefix("Rss:") {
            if in_exe {
                code += kib
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0);
            }
        } else if line
            .split_whitespace()
            .next()
            .is_some_and(|r| r.contains('-') && !r.ends_with(':'))
        {
            in_exe = line.ends_with(&*exe.to_string_lossy());
        }
    }
    Ok(format!(
        "anon {:.1}, file {:.1} (the binary's pages {:.1}), shmem {:.1} MB",
        mb(anon),
        mb(file),
        mb(code),
        mb(shmem)
    ))
}

/// A KiB field (`VmRSS`, `RssAnon`, …) of `/proc/<pid>/status`.
pub(super) fn proc_status_kib(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no {field} in /proc status"))
}

pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

pub(super) fn field_i64(v: &Value, name: &str) -> Result<i64> {
    v[name]
        .as_i64()
        .with_context(|| format!("reply has no integer {name:?}: {v}"))
}

pub(super) async fn health(c: &mut Http) -> Result<Value> {
    c.get("/health").await?.json()
}
