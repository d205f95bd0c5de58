//! Memory per held `/poll`, counted by a counting global allocator (not RSS, not timing).
//!
//! The hub runs in process on port 0 over a temporary store; raw TCP clients hold long-polls.
//! The allocator counts the bytes live in the Rust heap of the whole test process (the hub and
//! the test's own sockets); SQLite allocates through its own allocator and is not counted.
//! The test fails when holding a poll costs more than [`PER_POLL_BOUND`] bytes, when the memory
//! is not returned after the polls end, or when it creeps up over repeated rounds.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use trantor_hub::{Config, HubArgs};
use trantor_store_sqlite::SqliteStore;

/// Bytes currently allocated through the Rust global allocator.
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// Allocations of each size live now (sizes from [`HIST_MAX`] on share the last slot): what a
/// held poll is made of, printed per round.
const HIST_MAX: usize = 4096;
static HIST: [AtomicIsize; HIST_MAX + 1] = [const { AtomicIsize::new(0) }; HIST_MAX + 1];

fn hist_add(size: usize, n: isize) {
    HIST[size.min(HIST_MAX)].fetch_add(n, Ordering::Relaxed);
}

fn hist() -> Vec<isize> {
    HIST.iter().map(|c| c.load(Ordering::Relaxed)).collect()
}

/// The sizes whose live count grew by at least half a poll each between `before` and `after`,
/// as `size×count` per poll, largest first.
fn hist_delta(before: &[isize], after: &[isize], polls: usize) -> String {
    let mut rows: Vec<(usize, f64)> = before
        .iter()
        .zip(after)
        .enumerate()
        .filter_map(|(size, (b, a))| {
            let per = (a - b) as f64 / polls as f64;
            (per >= 0.5).then_some((size, per))
        })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    rows.iter()
        .map(|(size, per)| {
            let size = if *size == HIST_MAX {
                format!("{HIST_MAX}+")
            } else {
                size.to_string()
            };
            format!("{size}×{per:.2}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

struct Counting;

// SAFETY: every call is forwarded to `System` unchanged; only a counter is updated beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
            hist_add(layout.size(), 1);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        hist_add(layout.size(), -1);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
            hist_add(layout.size(), 1);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `alloc` with `layout`; forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
            hist_add(layout.size(), -1);
            hist_add(new_size, 1);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Polls held per round.
const POLLS: usize = 400;
/// The most a held poll may cost, bytes of Rust heap (hub connection + handler + the test's
/// client socket). Measured 1,796–1,802 bytes in a debug build and 1,780–1,783 in a release
/// one (2026-12-04 21:20), down from 2,132–2,160 (the hold as a boxed future beside the
/// connection's task), 4,857, and 25,630 when hyper held the connection and the router's
/// futures for the whole hold. What they are, from the histogram this test prints: the
/// connection's task with the driver's wait inline (768: tokio rounds a task to 128 bytes), the
/// two sockets' registrations (256 each, the test's and the hub's), the poll's hold state
/// (104), the timer entry (96 in a debug build) or a second 88, the connection's shedding slot
/// (88), the session's wake slot (48) and its name, shared by the hold's presence and wake
/// entries (24). See docs/bench-hub.md, "Held polls".
const PER_POLL_BOUND: isize = 5 * 512;
/// What may stay per session after its polls ended: its presence entry (name, lastSeen).
const PER_SESSION_AFTER: isize = 512;

/// A deadline that only keeps a broken hub from hanging the suite (never a timing bound).
const GUARD: Duration = Duration::from_secs(60);

async fn get_json(port: u16, path: &str) -> serde_json::Value {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8_lossy(&buf);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    serde_json::from_str(body).unwrap_or(serde_json::Value::Null)
}

/// Wait until `/health` reports `want` held polls.
async fn wait_held(port: u16, want: i64) {
    let start = tokio::time::Instant::now();
    loop {
        let h = get_json(port, "/health").await;
        if h["pollsHeld"].as_i64() == Some(want) {
            return;
        }
        assert!(
            start.elapsed() < GUARD,
            "pollsHeld stayed at {} (want {want})",
            h["pollsHeld"]
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait until the live heap is at most `limit` (freeing after a close is asynchronous: the
/// connection tasks end on the runtime's workers).
async fn wait_heap_at_most(limit: isize) -> isize {
    let start = tokio::time::Instant::now();
    loop {
        let now = live();
        if now <= limit || start.elapsed() > Duration::from_secs(10) {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait until the live heap stops changing (two readings 200 ms apart agree), at most 10 s.
async fn wait_settled() -> isize {
    let start = tokio::time::Instant::now();
    let mut last = live();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = live();
        if now == last || start.elapsed() > Duration::from_secs(10) {
            return now;
        }
        last = now;
    }
}

/// Open `n` connections each holding `GET /poll` for session `mem-<i>`; returns the sockets.
async fn hold(port: u16, n: usize) -> Vec<TcpStream> {
    let mut socks = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        let req = format!(
            "GET /poll?session=mem-{i}&since=0&wait=120 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.expect("write");
        socks.push(s);
    }
    socks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_poll_memory_is_bounded_and_returned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(&dir.path().join("hub.db")).expect("store");
    let args = HubArgs {
        data_dir: Some(dir.path().to_path_buf()),
        port: 0,
        presence_flush_ms: 600_000,
        reap_interval_ms: 3_600_000,
        ..HubArgs::default()
    };
    let cfg = Config::from_args(&args).expect("config");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let hub = tokio::spawn(async move {
        let stop = async move {
            let _ = stop_rx.await;
        };
        if let Err(e) = trantor_hub::serve(listener, store, cfg, stop).await {
            panic!("hub failed: {e:#}");
        }
    });

    // Round 0 warms every lazy structure (presence entries and peer rows of the sessions,
    // the wake registry's table, the runtime's slabs) so later rounds measure steady state.
    let socks = hold(port, POLLS).await;
    wait_held(port, POLLS as i64).await;
    drop(socks);
    wait_held(port, 0).await;
    let settled = wait_settled().await;

    let mut after_rounds = Vec::new();
    for round in 1..=3 {
        let before = live();
        let hist_before = hist();
        let socks = hold(port, POLLS).await;
        wait_held(port, POLLS as i64).await;
        let held = live();
        let per_poll = (held - before) / POLLS as isize;
        eprintln!("round {round}: {per_poll} bytes of heap per held poll");
        eprintln!(
            "round {round}: live allocations per held poll, size×count: {}",
            hist_delta(&hist_before, &hist(), POLLS)
        );
        assert!(
            per_poll <= PER_POLL_BOUND,
            "round {round}: a held poll costs {per_poll} bytes of heap (bound {PER_POLL_BOUND})"
        );
        drop(socks);
        wait_held(port, 0).await;
        let after = wait_heap_at_most(before).await;
        eprintln!("round {round}: heap {before} before, {held} held, {after} after close");
        after_rounds.push(after);
    }
    // Memory is returned after close: no round keeps more than its sessions' presence entries
    // above the settled heap, and later rounds do not creep above the first.
    for (i, after) in after_rounds.iter().enumerate() {
        assert!(
            after - settled <= PER_SESSION_AFTER * POLLS as isize,
            "round {}: {} bytes still allocated after the polls closed",
            i + 1,
            after - settled
        );
    }
    let creep = after_rounds[2] - after_rounds[0];
    assert!(
        creep <= 64 * 1024,
        "heap crept by {creep} bytes over rounds 1-3"
    );

    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(GUARD, hub).await;
}
