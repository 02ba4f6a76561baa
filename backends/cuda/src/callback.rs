//! Host functions for `cuLaunchHostFunc`: a process-wide registry of pending closures and the
//! `extern "C"` trampoline CUDA calls.
//!
//! `cuLaunchHostFunc` takes a C function pointer and one `void*` of user data. Passing a leaked
//! `Box<HostFunc>` as that pointer would be the obvious translation, but CUDA **drops host
//! functions after a sticky device error**: they never run, so the box (and everything the
//! closure holds) would leak, once per submission in flight at the time of the fault. Instead
//! the closure is kept here, in a registry keyed by a process-unique id, and the user data is
//! that id (an integer smuggled through the pointer, never dereferenced). The trampoline takes
//! the closure out and runs it; [`drop_owned_by`] drops whatever a [`crate::api::CudaApi`] still
//! has pending when it is dropped (after a fault those would never run; before one, the stream
//! device has synchronised its streams, so nothing of its own is left). A late call of the
//! trampoline for a dropped entry finds nothing and returns. No memory is leaked on any path,
//! and no pointer CUDA holds can dangle.
//!
//! The trampoline runs on a CUDA-owned thread and must not call the CUDA API: the closures
//! halcyon registers only post to the reactor or copy host memory. A panic in a closure is
//! caught (unwinding out of an `extern "C"` function would abort the process).

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use halcyon_stream::HostFunc;

/// Pending host functions: id → (owner, closure).
static PENDING: Mutex<BTreeMap<usize, (u64, HostFunc)>> = Mutex::new(BTreeMap::new());
static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

fn pending() -> std::sync::MutexGuard<'static, BTreeMap<usize, (u64, HostFunc)>> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Registers `func` for owner `owner` (a `CudaApi`'s id) and returns the user-data pointer to
/// pass to `cuLaunchHostFunc` with [`trampoline`].
pub(crate) fn register(owner: u64, func: HostFunc) -> *mut c_void {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    pending().insert(id, (owner, func));
    std::ptr::without_provenance_mut(id)
}

/// Takes back a registration whose `cuLaunchHostFunc` failed (so CUDA will never call it) and
/// drops the closure unrun.
pub(crate) fn cancel(user_data: *mut c_void) {
    let removed = pending().remove(&user_data.addr());
    drop(removed); // outside the lock
}

/// Drops, unrun, every pending host function of `owner`; returns how many there were.
pub(crate) fn drop_owned_by(owner: u64) -> usize {
    let removed: Vec<HostFunc> = {
        let mut map = pending();
        let ids: Vec<usize> = map
            .iter()
            .filter(|(_, (o, _))| *o == owner)
            .map(|(id, _)| *id)
            .collect();
        ids.iter()
            .filter_map(|id| map.remove(id).map(|(_, f)| f))
            .collect()
    };
    removed.len() // the closures drop here, outside the lock
}

/// How many host functions are pending (registered, neither run nor dropped).
pub(crate) fn pending_count(owner: u64) -> usize {
    pending().values().filter(|(o, _)| *o == owner).count()
}

/// The `CUhostFn` passed to `cuLaunchHostFunc`: runs (and frees) the closure registered under
/// `user_data`, if it is still there.
pub(crate) extern "C" fn trampoline(user_data: *mut c_void) {
    let entry = pending().remove(&user_data.addr());
    if let Some((_, func)) = entry {
        // Run outside the lock. Unwinding must not cross the C frame: catch and drop it.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(func));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::Arc;

    static OWNER: AtomicUsize = AtomicUsize::new(1_000_000);

    fn owner() -> u64 {
        OWNER.fetch_add(1, Ordering::Relaxed) as u64
    }

    fn counter_func(runs: &Arc<AtomicU32>) -> HostFunc {
        let runs = runs.clone();
        Box::new(move || {
            runs.fetch_add(1, Ordering::SeqCst);
        })
    }

    #[test]
    fn the_trampoline_runs_each_registration_once() {
        let owner = owner();
        let runs = Arc::new(AtomicU32::new(0));
        let data = register(owner, counter_func(&runs));
        assert_eq!(pending_count(owner), 1);
        trampoline(data);
        trampoline(data); // a second call finds nothing
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(pending_count(owner), 0);
    }

    #[test]
    fn dropped_and_cancelled_registrations_never_run_and_free_their_closures() {
        let owner = owner();
        let runs = Arc::new(AtomicU32::new(0));
        let a = register(owner, counter_func(&runs));
        let b = register(owner, counter_func(&runs));
        let other = register(owner + 1_000, counter_func(&runs));
        cancel(a);
        assert_eq!(Arc::strong_count(&runs), 3);
        assert_eq!(drop_owned_by(owner), 1);
        assert_eq!(Arc::strong_count(&runs), 2, "closures are freed");
        trampoline(b); // as CUDA would if it ran it late: nothing happens
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        trampoline(other);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(Arc::strong_count(&runs), 1);
    }

    #[test]
    fn a_panicking_host_function_does_not_unwind_into_c() {
        let data = register(
            owner(),
            Box::new(|| panic!("host function panicked (expected)")),
        );
        trampoline(data);
    }
}
