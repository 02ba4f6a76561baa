//! Bounded spinning: watching a condition in a loop, for at most a budget, before paying for a
//! sleep and a wake-up.
//!
//! Waking a sleeping thread costs microseconds (tens on a VM whose idle vCPU halts), so an
//! operation that completes sooner than that is cheaper to watch than to sleep through.
//! Spinning burns the thread it runs on for up to its budget: every use names whose thread that
//! is and who sets the budget ([`crate::Device::set_completion_spin`] for an awaited
//! submission; a backend's own option for its threads).
//!
//! Under loom, which has no model of time, the condition is checked once.

use std::time::Duration;

/// Checks `done` until it holds or `budget` has passed; whether it held. Checks at least once,
/// and reads the clock once per 32 checks.
///
/// ```
/// use std::time::Duration;
/// let start = std::time::Instant::now();
/// assert!(!halcyon::backend::spin_until(Duration::from_micros(50), || false));
/// assert!(start.elapsed() >= Duration::from_micros(50));
/// assert!(halcyon::backend::spin_until(Duration::ZERO, || true));
/// ```
pub fn spin_until(budget: Duration, mut done: impl FnMut() -> bool) -> bool {
    if done() {
        return true;
    }
    #[cfg(not(loom))]
    {
        if budget.is_zero() {
            return false;
        }
        let start = std::time::Instant::now();
        loop {
            for _ in 0..32 {
                std::hint::spin_loop();
                if done() {
                    return true;
                }
            }
            if start.elapsed() >= budget {
                return done();
            }
        }
    }
    #[cfg(loom)]
    {
        let _ = budget;
        false
    }
}
