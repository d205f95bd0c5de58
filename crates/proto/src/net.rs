//! A loopback port for a hub this binary starts itself (the demo, the benchmarks, the tests)
//! and may start again on the same port.

use std::net::TcpListener;

/// A TCP port on 127.0.0.1 that was free a moment ago, picked at random below the kernel's
/// ephemeral range.
///
/// Not from the ephemeral range, as `bind(0)` would give: a port from there is what the kernel
/// hands the next `bind(0)` (another hub of a parallel test) or the next outgoing connection
/// (a runner reconnecting while its hub restarts) — which then holds the port the hub is about
/// to bind, or answers a readiness probe in its place. Below the range only another pick can
/// collide. When no port there is free, `bind(0)`'s port.
pub fn free_loopback_port() -> std::io::Result<u16> {
    let below = ephemeral_low().max(LOWEST + 1);
    let span = u64::from(below - LOWEST);
    let mut seed = seed();
    for _ in 0..200 {
        // A linear congruential step (Knuth's MMIX constants): enough to spread the picks.
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let Ok(offset) = u16::try_from((seed >> 33) % span) else {
            continue;
        };
        let port = LOWEST + offset;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    TcpListener::bind("127.0.0.1:0")?
        .local_addr()
        .map(|a| a.port())
}

/// The lowest port picked: above the well-known and most registered services' ports.
const LOWEST: u16 = 10_000;

/// The low end of the kernel's ephemeral port range (Linux's default where it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A seed that differs between processes and between calls in one process.
fn seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    u64::from(nanos)
        ^ (u64::from(std::process::id()) << 32)
        ^ call.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_a_bindable_port_below_the_ephemeral_range() {
        let low = ephemeral_low();
        for _ in 0..20 {
            let port = free_loopback_port().expect("a port");
            assert!(TcpListener::bind(("127.0.0.1", port)).is_ok(), "{port}");
            if low > LOWEST {
                assert!((LOWEST..low).contains(&port), "{port} not below {low}");
            }
        }
    }

    #[test]
    fn successive_picks_differ() {
        let picks: std::collections::HashSet<u16> =
            (0..20).filter_map(|_| free_loopback_port().ok()).collect();
        assert!(picks.len() > 10, "{picks:?}");
    }
}
