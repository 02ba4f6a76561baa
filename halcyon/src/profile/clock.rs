//! The profile clock: one host clock for every device of the process.
//!
//! Times are nanoseconds since the clock's epoch, the first time anything in the process read
//! it, on the monotonic clock [`std::time::Instant`] reads (`CLOCK_MONOTONIC` on Linux). Every
//! record of every device uses it, so ranges from two devices line up on one axis; a backend
//! whose device keeps its own clock (GPU timestamps) converts to it before recording.
//!
//! On Linux a reading is one `clock_gettime(CLOCK_MONOTONIC)` and a subtraction (about 15 ns
//! through the vDSO); `Instant`'s arithmetic cost several times the read itself. A profiled
//! operation reads the clock three to five times. Elsewhere it goes through `Instant`.

use std::sync::OnceLock;
use std::time::Instant;

/// The epoch: as an `Instant`, and (on Linux) as `CLOCK_MONOTONIC` nanoseconds read right
/// after it, which are the same clock.
struct Epoch {
    instant: Instant,
    #[cfg(target_os = "linux")]
    monotonic_ns: u64,
}

static EPOCH: OnceLock<Epoch> = OnceLock::new();

fn get() -> &'static Epoch {
    EPOCH.get_or_init(|| Epoch {
        instant: Instant::now(),
        #[cfg(target_os = "linux")]
        monotonic_ns: monotonic_ns(),
    })
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
#[cfg(target_os = "linux")]
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC exists on every Linux, and the call
    // cannot fail with these arguments.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(now.tv_nsec as u64)
}

/// The clock's epoch.
pub fn epoch() -> Instant {
    get().instant
}

/// Now, on the profile clock: nanoseconds since [`epoch`], never 0.
pub fn now_ns() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let epoch = get();
        monotonic_ns().saturating_sub(epoch.monotonic_ns).max(1)
    }
    #[cfg(not(target_os = "linux"))]
    {
        instant_ns(Instant::now())
    }
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

    /// `now_ns` (one clock read) and `instant_ns` of an `Instant` read just before and after
    /// agree: they are one clock.
    #[test]
    fn readings_and_instants_are_one_clock() {
        for _ in 0..100 {
            let before = instant_ns(Instant::now());
            let now = now_ns();
            let after = instant_ns(Instant::now());
            // The epoch's two readings were taken a few nanoseconds apart; allow a microsecond.
            assert!(
                before <= now + 1_000 && now <= after + 1_000,
                "{before} {now} {after}"
            );
        }
    }
}
