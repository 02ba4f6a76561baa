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
//! ```
//! use halcyon::stream::allocations::Allocations;
//! use halcyon::stream::DevicePtr;
//!
//! let memory = Allocations::new("CUDA");
//! memory.insert(0x1000, 0x100, "device");
//! memory.check(DevicePtr(0x1080), 0x80, "fill").unwrap();
//! let err = memory.check(DevicePtr(0x1080), 0x81, "fill").unwrap_err();
//! assert!(err.message().contains("do not lie within one live allocation"));
//! assert_eq!(memory.remove(0x1000, |_| Ok(())).unwrap(), (0x100, "device"));
//! assert!(memory.remove(0x1000, |_| Ok(())).is_err(), "freed once");
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard};

use super::DevicePtr;
use crate::{Error, Result, StatusCode};

/// Live allocations by base address, with their sizes and allocator kinds `K` (see the
/// [module docs](self)).
pub struct Allocations<K> {
    api: &'static str,
    live: Mutex<BTreeMap<u64, (u64, K)>>,
}

impl<K: Copy + fmt::Debug> Allocations<K> {
    /// No allocations, of the API named `api` (`"CUDA"`, `"HIP"`), which errors name.
    pub fn new(api: &'static str) -> Self {
        Allocations {
            api,
            live: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, (u64, K)>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn invalid(&self, message: String) -> Error {
        Error::new(
            StatusCode::InvalidArgument,
            format!("{} stream API: {message}", self.api),
        )
    }

    /// Records `len` bytes at `base`, made by the allocator `kind`.
    pub fn insert(&self, base: u64, len: u64, kind: K) {
        self.lock().insert(base, (len, kind));
    }

    /// Forgets the allocation starting at `base` if `accept` accepts its kind, and returns
    /// `(len, kind)`; `InvalidArgument` if `base` is not the start of a live allocation (or
    /// `accept`'s error). Only one of several concurrent removals of a base succeeds. A caller
    /// whose free then fails without freeing inserts it again.
    pub fn remove(&self, base: u64, accept: impl FnOnce(K) -> Result<()>) -> Result<(u64, K)> {
        let mut live = self.lock();
        let &(len, kind) = live.get(&base).ok_or_else(|| {
            self.invalid(format!(
                "{base:#x} is not the start of a live allocation of this API"
            ))
        })?;
        accept(kind)?;
        live.remove(&base);
        Ok((len, kind))
    }

    /// The allocation containing `ptr`: `(base, len, kind)`.
    pub fn find(&self, ptr: u64) -> Option<(u64, u64, K)> {
        let live = self.lock();
        let (&base, &(len, kind)) = live.range(..=ptr).next_back()?;
        (ptr - base < len).then_some((base, len, kind))
    }

    /// Whether `len` bytes at `ptr` lie within one live allocation whose kind `kind` accepts.
    pub fn within(&self, ptr: u64, len: u64, kind: impl FnOnce(K) -> bool) -> bool {
        matches!(
            self.find(ptr),
            Some((base, size, k))
                if (ptr - base).checked_add(len).is_some_and(|end| end <= size) && kind(k)
        )
    }

    /// `Ok` if `len` bytes at `ptr` lie within one live allocation; else `InvalidArgument`
    /// naming `what` (`"fill"`, `"copy to the device"`) and the range.
    pub fn check(&self, ptr: DevicePtr, len: u64, what: &str) -> Result<()> {
        if self.within(ptr.0, len, |_| true) {
            return Ok(());
        }
        Err(self.invalid(format!(
            "{what}: {len} bytes at {ptr:?} do not lie within one live allocation (an illegal \
             address)"
        )))
    }

    /// Forgets every allocation and returns them as `(base, len, kind)`, by address (for an
    /// API being dropped, which frees them).
    pub fn drain(&self) -> Vec<(u64, u64, K)> {
        std::mem::take(&mut *self.lock())
            .into_iter()
            .map(|(base, (len, kind))| (base, len, kind))
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
        memory.check(DevicePtr(0x1000), 0x100, "t").unwrap();
        memory.check(DevicePtr(0x10f0), 0x10, "t").unwrap();
        memory.check(DevicePtr(0x11ff), 1, "t").unwrap();
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
}
