//! The one back-off of the workspace: a wait that starts at `start`, doubles after every
//! failed try up to `max`, and starts again at `start` once a try succeeds. The runner's hub
//! link, its outbound bus, its boot and enrollment retries and the hub supervisor all wait on it.

use std::time::Duration;

/// A doubling back-off between `start` and `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    start: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    /// A back-off whose first wait is `start` and whose waits never grow past `max`.
    pub fn new(start: Duration, max: Duration) -> Backoff {
        Backoff {
            start,
            max,
            current: start,
        }
    }

    /// The wait before the next try.
    pub fn current(&self) -> Duration {
        self.current
    }

    /// The longest wait.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// A try failed: the next wait is twice this one, at most `max`.
    pub fn grow(&mut self) {
        self.current = (self.current * 2).min(self.max);
    }

    /// A try succeeded: the next wait is `start` again.
    pub fn reset(&mut self) {
        self.current = self.start;
    }

    /// Wait out the current wait, then [`grow`](Backoff::grow).
    pub async fn sleep(&mut self) {
        tokio::time::sleep(self.current).await;
        self.grow();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_starts_over_on_reset() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(500), ms(3000));
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push(b.current());
            b.grow();
        }
        assert_eq!(seen, [ms(500), ms(1000), ms(2000), ms(3000), ms(3000)]);
        b.reset();
        assert_eq!(b.current(), ms(500));
        // A cap below the start leaves the first wait as given, then holds the cap.
        let mut low = Backoff::new(ms(500), ms(200));
        assert_eq!(low.current(), ms(500));
        low.grow();
        assert_eq!(low.current(), ms(200));
    }
}
