//! The profile clock: one host clock for every device of the process.
//!
//! Times are nanoseconds since the clock's epoch, the first time anything in the process read
//! it, on the monotonic clock [`std::time::Instant`] reads. Every record of every device uses
//! it, so ranges from two devices line up on one axis; a backend whose device keeps its own
//! clock (GPU timestamps) converts to it before recording.

use std::sync::OnceLock;
use std::time::Instant;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// The clock's epoch.
pub fn epoch() -> Instant {
    *EPOCH.get_or_init(Instant::now)
}

/// Now, on the profile clock: nanoseconds since [`epoch`], never 0.
pub fn now_ns() -> u64 {
    instant_ns(Instant::now())
}

/// `instant` on the profile clock (0 for an instant before the epoch, which no record holds).
pub fn instant_ns(instant: Instant) -> u64 {
    let ns = instant.saturating_duration_since(epoch()).as_nanos();
    u64::try_from(ns).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_moves_forward_and_never_reads_zero() {
        let a = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(1));
        let b = now_ns();
        assert!(a >= 1 && b >= a + 1_000_000, "{a} {b}");
    }
}
