//! [`Allocations`]: the memory a [`StreamApi`](super::StreamApi) allocated and has not freed,
//! by base address, so that a backend frees each allocation exactly once, with the call that
//! matches its allocator, and refuses copies and fills that do not lie within one allocation.
//!
//! A [`DevicePtr`] is a number a caller of the safe [`StreamApi`](super::StreamApi) methods can
//! make up or keep after freeing it. Given to the driver, a freed one may free or overwrite an
//! allocation made since at the same address, and a range that runs past its allocation writes
//! whatever lies next to it, which for mapped host memory is the process's own. A backend
//! records every allocation here (`kind` says which allocator made it: device, managed,
//! mapped host, stream-ordered) and checks each address against the record first: a free needs
//! the base of a live allocation, and a copy or fill must lie within one (an
//! [`StatusCode::InvalidArgument`] error otherwise, naming the range).
//!
//! A check holds what it checked: [`Allocations::check`] returns an [`AllocationGuard`], and the
//! allocation stays live until the guard drops, so a backend keeps it across the driver call
//! that uses the range. A [`Allocations::remove`] (a free) on another thread meanwhile
//! waits for the guards already taken (each lasts one enqueueing call, which never waits for
//! the device), while checks made after the removal began fail as for freed memory. Without
//! that, a free between the check and the call would hand the driver an address it no longer
//! knows, which HIP, for one, takes for host memory.
//!
//! ```
//! use halcyon_stream::allocations::Allocations;
//! use halcyon_stream::DevicePtr;
//!
//! let memory = Allocations::new("CUDA");
//! memory.insert(0x1000, 0x100, "device");
//! let pinned = memory.check(DevicePtr(0x1080), 0x80, "fill").unwrap();
//! // ... the driver call using the range; then the allocation may be removed.
//! drop(pinned);
//! let err = memory.check(DevicePtr(0x1080), 0x81, "fill").unwrap_err();
//! assert!(err.message().contains("do not lie within one live allocation"));
//! assert_eq!(memory.remove(0x1000, |_| Ok(())).unwrap(), (0x100, "device"));
//! assert!(memory.remove(0x1000, |_| Ok(())).is_err(), "freed once");
//! ```

use std::collections::BTreeMap;
use std::fmt;

use super::DevicePtr;
use crate::sync::{Condvar, Mutex, MutexGuard};
use halcyon::{Error, Result, StatusCode};

/// Live allocations by base address, with their sizes and allocator kinds `K` (see the
/// [module docs](self)).
pub struct Allocations<K> {
    api: &'static str,
    live: Mutex<BTreeMap<u64, Entry<K>>>,
    /// Notified when the last guard of an allocation being removed drops.
    unpinned: Condvar,
}

/// One allocation.
struct Entry<K> {
    len: u64,
    kind: K,
    /// [`AllocationGuard`]s alive.
    pins: usize,
    /// A removal is waiting for the guards: the allocation is no longer live to new checks.
    removing: bool,
}

/// An allocation held live by a successful [`Allocations::check`] until this drops (see the
/// [module docs](self)).
#[must_use = "the allocation is held only while the guard lives: keep it across the call"]
pub struct AllocationGuard<'a, K> {
    allocations: &'a Allocations<K>,
    base: u64,
}

impl<K> Drop for AllocationGuard<'_, K> {
    fn drop(&mut self) {
        let mut live = crate::sync::lock(&self.allocations.live);
        if let Some(entry) = live.get_mut(&self.base) {
            entry.pins -= 1;
            if entry.pins == 0 && entry.removing {
                self.allocations.unpinned.notify_all();
            }
        }
    }
}

impl<K> fmt::Debug for AllocationGuard<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AllocationGuard")
            .field("base", &format_args!("{:#x}", self.base))
            .finish()
    }
}

impl<K: Copy + fmt::Debug> Allocations<K> {
    /// No allocations, of the API named `api` (`"CUDA"`, `"HIP"`), which errors name.
    pub fn new(api: &'static str) -> Self {
        Allocations {
            api,
            live: Mutex::new(BTreeMap::new()),
            unpinned: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Entry<K>>> {
        crate::sync::lock(&self.live)
    }

    fn invalid(&self, message: String) -> Error {
        Error::new(
            StatusCode::InvalidArgument,
            format!("{} stream API: {message}", self.api),
        )
    }

    /// Records `len` bytes at `base`, made by the allocator `kind`.
    pub fn insert(&self, base: u64, len: u64, kind: K) {
        let entry = Entry {
            len,
            kind,
            pins: 0,
            removing: false,
        };
        self.lock().insert(base, entry);
    }

    /// Forgets the allocation starting at `base` if `accept` accepts its kind, and returns
    /// `(len, kind)`; `InvalidArgument` if `base` is not the start of a live allocation (or
    /// `accept`'s error). Only one of several concurrent removals of a base succeeds. Waits
    /// for the [`AllocationGuard`]s of the allocation that are alive (see the
    /// [module docs](self)); a thread must not remove an allocation it holds a guard of. A
    /// caller whose free then fails without freeing inserts it again.
    pub fn remove(&self, base: u64, accept: impl FnOnce(K) -> Result<()>) -> Result<(u64, K)> {
        let mut live = self.lock();
        let (len, kind) = match live.get(&base) {
            Some(entry) if !entry.removing => (entry.len, entry.kind),
            _ => {
                return Err(self.invalid(format!(
                    "{base:#x} is not the start of a live allocation of this API"
                )))
            }
        };
        accept(kind)?;
        if let Some(entry) = live.get_mut(&base) {
            entry.removing = true;
        }
        while live.get(&base).is_some_and(|entry| entry.pins > 0) {
            live = self.unpinned.wait(live).unwrap_or_else(|p| p.into_inner());
        }
        live.remove(&base);
        Ok((len, kind))
    }

    /// The live allocation containing `ptr`: `(base, len, kind)`.
    pub fn find(&self, ptr: u64) -> Option<(u64, u64, K)> {
        Self::find_in(&self.lock(), ptr)
    }

    fn find_in(live: &BTreeMap<u64, Entry<K>>, ptr: u64) -> Option<(u64, u64, K)> {
        let (&base, entry) = live.range(..=ptr).next_back()?;
        (ptr - base < entry.len && !entry.removing).then_some((base, entry.len, entry.kind))
    }

    /// The base of the live allocation holding all `len` bytes at `ptr`, if its kind `kind`
    /// accepts.
    fn base_within(
        live: &BTreeMap<u64, Entry<K>>,
        ptr: u64,
        len: u64,
        kind: impl FnOnce(K) -> bool,
    ) -> Option<u64> {
        match Self::find_in(live, ptr) {
            Some((base, size, k))
                if (ptr - base).checked_add(len).is_some_and(|end| end <= size) && kind(k) =>
            {
                Some(base)
            }
            _ => None,
        }
    }

    /// Whether `len` bytes at `ptr` lie within one live allocation whose kind `kind` accepts
    /// (an answer for now: to use the range, [`Allocations::check`] it).
    pub fn within(&self, ptr: u64, len: u64, kind: impl FnOnce(K) -> bool) -> bool {
        Self::base_within(&self.lock(), ptr, len, kind).is_some()
    }

    /// A guard holding the allocation live (see the [module docs](self)) if `len` bytes at
    /// `ptr` lie within one live allocation; else `InvalidArgument` naming `what` (`"fill"`,
    /// `"copy to the device"`) and the range.
    pub fn check(&self, ptr: DevicePtr, len: u64, what: &str) -> Result<AllocationGuard<'_, K>> {
        self.check_kind(ptr, len, what, |_| true)
    }

    /// [`Allocations::check`], for an allocation whose kind `kind` accepts.
    pub fn check_kind(
        &self,
        ptr: DevicePtr,
        len: u64,
        what: &str,
        kind: impl FnOnce(K) -> bool,
    ) -> Result<AllocationGuard<'_, K>> {
        let mut live = self.lock();
        if let Some(base) = Self::base_within(&live, ptr.0, len, kind) {
            if let Some(entry) = live.get_mut(&base) {
                entry.pins += 1;
                return Ok(AllocationGuard {
                    allocations: self,
                    base,
                });
            }
        }
        Err(self.invalid(format!(
            "{what}: {len} bytes at {ptr:?} do not lie within one live allocation (an illegal \
             address)"
        )))
    }

    /// Forgets every allocation and returns them as `(base, len, kind)`, by address (for an
    /// API being dropped, which frees them: no guard can be alive then).
    pub fn drain(&self) -> Vec<(u64, u64, K)> {
        std::mem::take(&mut *self.lock())
            .into_iter()
            .map(|(base, entry)| (base, entry.len, entry.kind))
            .collect()
    }

    /// How many allocations are live.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K> fmt::Debug for Allocations<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let live = self.live.lock().map(|l| l.len()).unwrap_or_default();
        f.debug_struct("Allocations")
            .field("api", &self.api)
            .field("live", &live)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Kind {
        Device,
        Mapped,
    }

    #[test]
    fn ranges_must_lie_within_one_allocation() {
        let memory = Allocations::new("HIP");
        memory.insert(0x1000, 0x100, Kind::Device);
        memory.insert(0x1100, 0x100, Kind::Mapped); // adjacent, but another allocation
        drop(memory.check(DevicePtr(0x1000), 0x100, "t").unwrap());
        drop(memory.check(DevicePtr(0x10f0), 0x10, "t").unwrap());
        drop(memory.check(DevicePtr(0x11ff), 1, "t").unwrap());
        assert!(memory
            .check_kind(DevicePtr(0x11ff), 1, "t", |k| k == Kind::Device)
            .is_err());
        for (ptr, len) in [
            (0x10f0, 0x11),
            (0x10f0, 0x20),
            (0x1200, 1),
            (0xfff, 1),
            (0x1000, u64::MAX),
            (0, 0),
        ] {
            let e = memory.check(DevicePtr(ptr), len, "copy").unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument);
            assert!(e.message().starts_with("HIP stream API: copy: "), "{e}");
            assert!(e.message().contains("illegal address"), "{e}");
        }
        assert!(memory.within(0x1180, 0x80, |k| k == Kind::Mapped));
        assert!(!memory.within(0x1080, 0x10, |k| k == Kind::Mapped));
        assert_eq!(memory.find(0x10ff), Some((0x1000, 0x100, Kind::Device)));
        assert_eq!(memory.find(0x1200), None);
    }

    #[test]
    fn frees_need_the_base_and_happen_once() {
        let memory = Allocations::new("CUDA");
        memory.insert(0x1000, 0x100, Kind::Device);
        memory.insert(0x2000, 0x100, Kind::Mapped);
        assert!(
            memory.remove(0x2080, |_| Ok(())).is_err(),
            "an inner address"
        );
        let refuse = |_| Err(Error::new(StatusCode::InvalidArgument, "no"));
        assert!(memory.remove(0x2000, refuse).is_err());
        assert_eq!(
            memory.remove(0x2000, |_| Ok(())).unwrap(),
            (0x100, Kind::Mapped)
        );
        let e = memory.remove(0x2000, |_| Ok(())).unwrap_err();
        assert!(e.message().contains("0x2000 is not the start"), "{e}");
        assert_eq!(memory.drain(), [(0x1000, 0x100, Kind::Device)]);
        assert!(memory.is_empty());
    }

    /// A removal waits for the guards of checks made before it, and checks made while it
    /// waits fail: no range checked for a driver call is freed before the call returns.
    #[test]
    fn a_removal_waits_for_the_checked_calls_and_refuses_new_checks() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let memory = Arc::new(Allocations::new("HIP"));
        memory.insert(0x1000, 0x100, Kind::Device);
        let first = memory.check(DevicePtr(0x1000), 0x10, "copy").unwrap();
        let second = memory.check(DevicePtr(0x1080), 0x10, "fill").unwrap();
        let removed = Arc::new(AtomicBool::new(false));
        let remover = {
            let (memory, removed) = (memory.clone(), removed.clone());
            std::thread::spawn(move || {
                let result = memory.remove(0x1000, |_| Ok(()));
                removed.store(true, Ordering::SeqCst);
                result
            })
        };
        // Once the removal has begun, the allocation is gone for new checks and lookups...
        while memory.find(0x1000).is_some() {
            std::thread::yield_now();
        }
        let e = memory.check(DevicePtr(0x1000), 1, "copy").unwrap_err();
        assert!(e.message().contains("illegal address"), "{e}");
        assert!(!memory.within(0x1000, 1, |_| true));
        assert!(memory.remove(0x1000, |_| Ok(())).is_err(), "removed once");
        // ...but not freed while a checked call is under way.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !removed.load(Ordering::SeqCst),
            "removed under a live guard"
        );
        drop(first);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(
            !removed.load(Ordering::SeqCst),
            "removed under a live guard"
        );
        drop(second);
        assert_eq!(remover.join().unwrap().unwrap(), (0x100, Kind::Device));
        assert!(memory.is_empty());
    }
}
