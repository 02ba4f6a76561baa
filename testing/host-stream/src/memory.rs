//! "Device" memory of the host stream API: zeroed, 256-byte aligned heap allocations whose
//! addresses are the device pointers.
//!
//! Every operation that addresses memory resolves its pointers when it is enqueued, against a
//! registry of live allocations: an address outside every allocation is an `InvalidArgument`
//! error (a GPU would raise an illegal-address fault), never a wild host access. The operation
//! then holds the allocation (an `Arc`) until it ran, so freeing memory while work using it is
//! still enqueued cannot free it under that work.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use halcyon::{Error, Result, StatusCode};
use halcyon_stream::api::DevicePtr;

/// Alignment of every allocation (what `cudaMalloc` guarantees).
pub(crate) const ALIGNMENT: usize = 256;

/// One allocation; freed when the registry and every operation using it let go.
pub(crate) struct Allocation {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: plain bytes owned by this value; every access goes through stream operations, which
// streams and events order, or through the core's mapping guards.
unsafe impl Send for Allocation {}
// SAFETY: as above.
unsafe impl Sync for Allocation {}

impl Drop for Allocation {
    fn drop(&mut self) {
        // SAFETY: allocated in `Registry::allocate` with exactly this layout, freed once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// A resolved address: where it points, and the allocation kept alive for the operation.
pub(crate) struct Resolved {
    ptr: *mut u8,
    /// Bytes from `ptr` to the end of the allocation.
    pub(crate) available: usize,
    _allocation: Arc<Allocation>,
}

// SAFETY: the pointer addresses the allocation `_allocation` keeps alive; moving it to a stream
// thread is how operations run.
unsafe impl Send for Resolved {}
// SAFETY: sharing only reads the pointer value; the memory behind it is accessed by the stream
// operation that holds it, in stream order (a graph's operations run one launch at a time).
unsafe impl Sync for Resolved {}

impl Resolved {
    /// The resolved address (a method, so closures capture the whole value, which is `Send`).
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

/// The live allocations, by base address.
pub(crate) struct Registry {
    allocations: Mutex<BTreeMap<u64, Arc<Allocation>>>,
    /// The most bytes live at once ([`crate::HostStreamApi::limit_memory`]).
    limit: AtomicU64,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            allocations: Mutex::default(),
            limit: AtomicU64::new(u64::MAX),
        }
    }
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Allocation>>> {
        self.allocations.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Allocates `size` zeroed bytes.
    pub(crate) fn allocate(&self, size: u64) -> Result<DevicePtr> {
        let too_big = || {
            Error::new(
                StatusCode::ResourceExhausted,
                format!("host stream API: cannot allocate {size} bytes of host memory"),
            )
        };
        let size = usize::try_from(size).map_err(|_| too_big())?.max(1);
        let layout = Layout::from_size_align(size, ALIGNMENT).map_err(|_| too_big())?;
        let mut allocations = self.lock();
        let live: u64 = allocations.values().map(|a| a.layout.size() as u64).sum();
        if live.saturating_add(size as u64) > self.limit.load(Ordering::Relaxed) {
            return Err(too_big());
        }
        // SAFETY: `layout` has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or_else(too_big)?;
        let address = ptr.as_ptr() as u64;
        allocations.insert(address, Arc::new(Allocation { ptr, layout }));
        Ok(DevicePtr(address))
    }

    /// Forgets the allocation at `ptr` (its base); the memory goes once operations using it ran.
    pub(crate) fn free(&self, ptr: DevicePtr) -> Result<()> {
        match self.lock().remove(&ptr.0) {
            Some(_) => Ok(()),
            None => Err(Error::new(
                StatusCode::InvalidArgument,
                format!("host stream API: {ptr:?} is not the start of a live allocation"),
            )),
        }
    }

    /// Resolves `len` bytes at `ptr`, which must lie within one live allocation.
    pub(crate) fn resolve(&self, ptr: DevicePtr, len: u64) -> Result<Resolved> {
        let allocations = self.lock();
        let found = allocations.range(..=ptr.0).next_back();
        if let Some((&base, allocation)) = found {
            let size = allocation.layout.size() as u64;
            let offset = ptr.0 - base;
            if offset.checked_add(len).is_some_and(|end| end <= size) {
                return Ok(Resolved {
                    // SAFETY: `offset + len <= size`, so the pointer stays within the allocation.
                    ptr: unsafe { allocation.ptr.as_ptr().add(offset as usize) },
                    available: (size - offset) as usize,
                    _allocation: allocation.clone(),
                });
            }
        }
        Err(Error::new(
            StatusCode::InvalidArgument,
            format!(
                "host stream API: {len} bytes at {ptr:?} do not lie within one live allocation \
                 (an illegal address on a GPU)"
            ),
        ))
    }

    /// Refuses allocations that would take the live bytes above `bytes`.
    pub(crate) fn set_limit(&self, bytes: u64) {
        self.limit.store(bytes, Ordering::Relaxed);
    }

    /// How many allocations are live.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}
