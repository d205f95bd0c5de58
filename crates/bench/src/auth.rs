//! `trantor bench auth`: what signed identity costs (docs/bench-auth.md).
//!
//! * sign and verify cost per request, in process, over the exact code the clients and the hub
//!   run (`trantor_proto::auth`);
//! * `/send` throughput against one hub (this binary, `RELAY_AUTH=warn`, `TRANTOR_SYNC=normal`
//!   so the disk does not hide the difference), unsigned and signed by an enrolled key, in
//!   alternating rounds of one run on one keep-alive connection each. The signed path includes
//!   the client's signing, the hub's verification, identity lookup, replay check and
//!   authorization.

use super::http::Http;
use super::{Row, Table};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use trantor_proto::auth;

/// Options of `trantor bench auth`.
#[derive(Debug, Clone, clap::Args)]
pub struct AuthBenchArgs {
    /// Shorter rounds (a smoke run, not a measurement).
    #[arg(long)]
    pub quick: bool,
    /// Also write the markdown report to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

const BOOT: &str = "bench-auth-bootstrap-token";

struct HubProc {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for HubProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn spawn_hub(dir: &Path) -> Result<HubProc> {
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("no free port")?
        .port();
    let child = Command::new(exe)
        .arg("hub")
        .env("RELAY_PORT", port.to_string())
        .env("RELAY_HOST", "127.0.0.1")
        .env("RELAY_DATA_DIR", dir)
        .env("HOME", dir)
        .env("TRANTOR_SYNC", "normal")
        .env("RELAY_AUTH", "warn")
        .env("RELAY_BOOTSTRAP_TOKEN", BOOT)
        .env("TRANTOR_LOG", "error")
        .env_remove("RELAY_DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start the hub")?;
    Ok(HubProc {
        child,
        port,
        dir: dir.to_path_buf(),
    })
}

fn per_op_us(total: Duration, n: usize) -> f64 {
    total.as_secs_f64() * 1e6 / n.max(1) as f64
}

/// Sign and verify cost per request, in µs.
fn crypto_cost(n: usize) -> Result<(f64, f64)> {
    let key = auth::generate_key();
    let body =
        br#"{"from":"bench:p","to":"all","text":"a message of ordinary length for the bus"}"#;
    let now = trantor_proto::now_ms();
    let start = Instant::now();
    let signed: Vec<auth::SignedHeaders> = (0..n)
        .map(|_| auth::sign_request(&key, "POST", "/send", body))
        .collect();
    let sign = per_op_us(start.elapsed(), n);
    let start = Instant::now();
    for h in &signed {
        auth::verify_request(|k| h.get(k).map(str::to_string), "POST", "/send", body, now)
            .map_err(|e| anyhow::anyhow!("own signature refused: {e}"))?;
    }
    let verify = per_op_us(start.elapsed(), n);
    Ok((sign, verify))
}

async fn send_loop(
    c: &mut Http,
    key: Option<&auth::Ed25519Key>,
    from: &str,
    span: Duration,
) -> Result<usize> {
    let body = format!(r#"{{"from":"{from}","to":"all","text":"bench"}}"#);
    let end = Instant::now() + span;
    let mut n = 0usize;
    while Instant::now() < end {
        let headers: Vec<(&str, String)> = match key {
            Some(k) => auth::sign_request(k, "POST", "/send", body.as_bytes()).headers,
            None => Vec::new(),
        };
        c.request_with("POST", "/send", &headers, Some(&body))
            .await?
            .ok("/send")?;
        n += 1;
    }
    Ok(n)
}

/// Run the benchmark.
pub async fn run(args: &AuthBenchArgs) -> Result<Table> {
    let mut t = Table::default();
    let n = if args.quick { 2_000 } else { 20_000 };
    let (sign, verify) = crypto_cost(n)?;
    t.row(Row::check(
        "sign one request (client)",
        format!("{sign:.1} µs"),
        "≤ 100 µs",
        sign <= 100.0,
    ));
    t.row(Row::check(
        "verify one signature (hub)",
        format!("{verify:.1} µs"),
        "≤ 100 µs",
        verify <= 100.0,
    ));

    let dir = std::env::temp_dir().join(format!("trantor-bench-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).context("temp dir")?;
    let hub = spawn_hub(&dir)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut c = loop {
        if let Ok(mut c) = Http::connect(hub.port).await
            && c.get("/health").await.is_ok_and(|r| r.status == 200)
        {
            break c;
        }
        if Instant::now() > deadline {
            bail!("the hub did not become healthy in 30 s");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let key = auth::generate_key();
    let enroll = serde_json::json!({"name": "bench:p", "kind": "agent", "token": BOOT}).to_string();
    let h = auth::sign_request(&key, "POST", "/enroll", enroll.as_bytes());
    c.request_with("POST", "/enroll", &h.headers, Some(&enroll))
        .await?
        .json()
        .context("enroll")?;

    let (rounds, span) = if args.quick {
        (2, Duration::from_millis(300))
    } else {
        (5, Duration::from_secs(2))
    };
    // Warm up both paths, then alternate so drift hits both alike.
    send_loop(&mut c, None, "bench:p", span / 4).await?;
    send_loop(&mut c, Some(&key), "bench:p", span / 4).await?;
    let (mut plain, mut signed) = (0usize, 0usize);
    for _ in 0..rounds {
        plain += send_loop(&mut c, None, "bench:p", span).await?;
        signed += send_loop(&mut c, Some(&key), "bench:p", span).await?;
    }
    let secs = span.as_secs_f64() * rounds as f64;
    let plain_rps = plain as f64 / secs;
    let signed_rps = signed as f64 / secs;
    let overhead_us = 1e6 / signed_rps - 1e6 / plain_rps;
    t.row(Row::info(
        "/send unsigned, one connection",
        format!("{plain_rps:.0} req/s"),
    ));
    t.row(Row::info(
        "/send signed (sign + verify + lookup + replay + authorize)",
        format!("{signed_rps:.0} req/s"),
    ));
    t.row(Row::check(
        "added time per signed /send",
        format!("{overhead_us:.1} µs"),
        "≤ 200 µs",
        overhead_us <= 200.0,
    ));
    t.note(format!(
        "crypto: {n} signatures made then verified in process; throughput: {rounds} alternating \
         rounds of {:.1} s each path, RELAY_AUTH=warn, TRANTOR_SYNC=normal, hub and client on \
         this machine",
        span.as_secs_f64()
    ));
    t.note(
        "the signed path's extra time includes the client's signing (one row above); an \
         Ed25519 verification alone costs tens of µs on this class of machine, so \"a few µs\" \
         is not reachable without batching"
            .into(),
    );
    drop(hub);
    Ok(t)
}
