//! Host memory for CPU buffers: zeroed, 64-byte aligned heap allocations.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

use halcyon::backend::BufferMemory;
use halcyon::{Error, Result, StatusCode};

/// Alignment of every CPU buffer: a cache line, enough for any SIMD type.
pub(crate) const ALIGNMENT: usize = 64;

pub(crate) struct HostMemory {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the allocation is plain bytes owned by this value; sharing the pointer between threads
// is what buffers are for, and every access goes through mapping guards or queue work that the
// core orders with semaphores.
unsafe impl Send for HostMemory {}
// SAFETY: as above.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    pub(crate) fn new(size: u64) -> Result<Self> {
        let too_big = || {
            Error::new(
                StatusCode::ResourceExhausted,
                format!("cannot allocate {size} bytes of host memory for a CPU buffer"),
            )
        };
        let size = usize::try_from(size).map_err(|_| too_big())?.max(1);
        let layout = Layout::from_size_align(size, ALIGNMENT).map_err(|_| too_big())?;
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(too_big)?;
        Ok(HostMemory { ptr, layout })
    }
}

// SAFETY: `ptr` is this value's own allocation of `layout.size()` bytes, fixed for its life and
// freed only on drop; the host touches it only through the buffer that owns it.
unsafe impl BufferMemory for HostMemory {
    fn len(&self) -> u64 {
        self.layout.size() as u64
    }

    fn host_ptr(&self) -> Option<NonNull<u8>> {
        Some(self.ptr)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout, freed once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}
