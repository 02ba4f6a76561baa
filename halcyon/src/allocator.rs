//! Device allocators: statistics, and the pool behind queue-ordered `alloca` / `dealloca`.
//!
//! [`Allocator::allocate`] asks the backend for memory and wraps it so that statistics (bytes in
//! use, peak) stay exact however buffers are dropped. Queue `alloca` draws from a [`Pool`] of
//! blocks in power-of-two size classes; a queue `dealloca` (or dropping a pooled buffer) returns
//! its block to the pool once no in-flight work holds it, where a later `alloca` reuses it.
//! Backends with queue-ordered memory of their own (CUDA and HIP stream-ordered pools) serve
//! `alloca` themselves through [`DeviceBackend::allocate_queued`].

use std::collections::HashMap;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::buffer::{Buffer, BufferMemory, BufferParams};
use crate::device::DeviceBackend;
use crate::error::{Error, Result, StatusCode};

/// What an allocator has handed out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AllocatorStats {
    /// Bytes of live buffers (pooled blocks in use count at their block size).
    pub bytes_in_use: u64,
    /// The most `bytes_in_use` ever was.
    pub peak_bytes_in_use: u64,
    /// Bytes held by the alloca pool for reuse.
    pub bytes_pooled: u64,
    /// Backend allocations made so far (pool reuses are not allocations).
    pub allocations: u64,
    /// Of those, queue `alloca`s the backend served from its own queue-ordered memory
    /// ([`DeviceBackend::allocate_queued`]: a stream-ordered pool, which reuses memory itself).
    pub queue_ordered_allocations: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    in_use: AtomicU64,
    peak: AtomicU64,
    pooled: AtomicU64,
    allocations: AtomicU64,
    queue_ordered: AtomicU64,
}

impl Counters {
    fn add(&self, bytes: u64) {
        let now = self.in_use.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }
    fn sub(&self, bytes: u64) {
        self.in_use.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// Backend memory counted in the allocator's statistics while it lives.
struct Counted {
    memory: Arc<dyn BufferMemory>,
    counters: Arc<Counters>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.counters.sub(self.memory.len());
    }
}

/// Memory seen by a buffer: counted backend memory, returned to a pool on drop if pooled.
struct Tracked {
    block: Option<Counted>,
    pool: Option<Weak<PoolInner>>,
    params: BufferParams,
}

// SAFETY: every method forwards to the backend's memory, which upholds the contract; a
// `Tracked` is the only wrapper of its block while a buffer holds it (the pool hands a block to
// one buffer at a time, and takes it back only when that buffer's memory is dropped).
unsafe impl BufferMemory for Tracked {
    fn len(&self) -> u64 {
        self.counted().memory.len()
    }
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        self.counted().memory.host_ptr()
    }
    fn flush(&self, offset: u64, len: u64) -> Result<()> {
        self.counted().memory.flush(offset, len)
    }
    fn invalidate(&self, offset: u64, len: u64) -> Result<()> {
        self.counted().memory.invalidate(offset, len)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self.counted().memory.as_any()
    }
}

impl Tracked {
    fn counted(&self) -> &Counted {
        self.block
            .as_ref()
            .expect("memory block present until drop")
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        let (Some(block), Some(pool)) = (self.block.take(), self.pool.as_ref()) else {
            return; // not pooled: `Counted` drops and frees
        };
        if let Some(pool) = pool.upgrade() {
            pool.put(block, self.params);
        }
    }
}

/// A device's allocator: cheap to clone.
///
/// ```
/// use halcyon::{BufferParams, Device};
///
/// fn scratch(device: &Device) -> halcyon::Result<()> {
///     let allocator = device.allocator();
///     let before = allocator.stats();
///     let buffer = allocator.allocate(1 << 20, BufferParams::DEVICE)?;
///     assert!(allocator.stats().bytes_in_use >= before.bytes_in_use + buffer.size());
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct Allocator {
    backend: Arc<dyn DeviceBackend>,
    counters: Arc<Counters>,
    pool: Pool,
}

impl Allocator {
    pub(crate) fn new(backend: Arc<dyn DeviceBackend>) -> Self {
        let counters = Arc::new(Counters::default());
        Allocator {
            pool: Pool {
                inner: Arc::new(PoolInner {
                    free: Mutex::new(HashMap::new()),
                    counters: counters.clone(),
                }),
            },
            backend,
            counters,
        }
    }

    /// Allocates a buffer of `size` bytes (validated: non-zero size, a coherent combination of
    /// memory type and usage, and whatever the device supports).
    pub fn allocate(&self, size: u64, params: BufferParams) -> Result<Buffer> {
        validate(size, &params)?;
        let memory = self.backend_allocate(size, params)?;
        Buffer::from_memory(
            Tracked {
                block: Some(memory),
                pool: None,
                params,
            },
            size,
            params,
        )
    }

    /// Allocates from the pool (reusing a returned block of the same size class and params if
    /// there is one); the buffer's memory goes back to the pool when released.
    pub(crate) fn allocate_pooled(&self, size: u64, params: BufferParams) -> Result<Buffer> {
        validate(size, &params)?;
        let class = size_class(size);
        let block = match self.pool.inner.take(class, params) {
            Some(block) => block,
            None => self.backend_allocate(class, params)?,
        };
        Buffer::from_memory(
            Tracked {
                block: Some(block),
                pool: Some(Arc::downgrade(&self.pool.inner)),
                params,
            },
            size,
            params,
        )
    }

    /// Memory for a queue `alloca` on `queue`: queue-ordered backend memory where the backend
    /// has it ([`DeviceBackend::allocate_queued`], e.g. a stream-ordered pool), else the pool.
    pub(crate) fn allocate_for_queue(
        &self,
        queue: u32,
        size: u64,
        params: BufferParams,
    ) -> Result<Buffer> {
        validate(size, &params)?;
        let Some(memory) = self.backend.allocate_queued(queue, size, &params) else {
            return self.allocate_pooled(size, params);
        };
        let memory = memory?;
        self.counters.allocations.fetch_add(1, Ordering::Relaxed);
        self.counters.queue_ordered.fetch_add(1, Ordering::Relaxed);
        self.counters.add(memory.len());
        let block = Counted {
            memory,
            counters: self.counters.clone(),
        };
        Buffer::from_memory(
            Tracked {
                block: Some(block),
                pool: None,
                params,
            },
            size,
            params,
        )
    }

    fn backend_allocate(&self, size: u64, params: BufferParams) -> Result<Counted> {
        let memory = self.backend.allocate(size, &params)?;
        self.counters.allocations.fetch_add(1, Ordering::Relaxed);
        self.counters.add(memory.len());
        Ok(Counted {
            memory,
            counters: self.counters.clone(),
        })
    }

    /// Frees every block the alloca pool holds.
    pub fn trim(&self) {
        self.pool.inner.clear();
    }

    /// Current statistics.
    pub fn stats(&self) -> AllocatorStats {
        AllocatorStats {
            bytes_in_use: self.counters.in_use.load(Ordering::Relaxed),
            peak_bytes_in_use: self.counters.peak.load(Ordering::Relaxed),
            bytes_pooled: self.counters.pooled.load(Ordering::Relaxed),
            allocations: self.counters.allocations.load(Ordering::Relaxed),
            queue_ordered_allocations: self.counters.queue_ordered.load(Ordering::Relaxed),
        }
    }
}

impl fmt::Debug for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allocator")
            .field("stats", &self.stats())
            .finish()
    }
}

fn validate(size: u64, params: &BufferParams) -> Result<()> {
    if size == 0 {
        return Err(Error::new(
            StatusCode::InvalidArgument,
            "cannot allocate a 0-byte buffer; request at least 1 byte",
        ));
    }
    params.validate()
}

/// Power-of-two size classes from 256 bytes.
fn size_class(size: u64) -> u64 {
    size.max(256).checked_next_power_of_two().unwrap_or(size)
}

#[derive(Clone)]
struct Pool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    free: Mutex<HashMap<(u64, BufferParams), Vec<Counted>>>,
    counters: Arc<Counters>,
}

impl PoolInner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, BufferParams), Vec<Counted>>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, class: u64, params: BufferParams) -> Option<Counted> {
        let block = self.lock().get_mut(&(class, params))?.pop()?;
        self.counters.pooled.fetch_sub(class, Ordering::Relaxed);
        self.counters.add(class);
        Some(block)
    }

    fn put(&self, block: Counted, params: BufferParams) {
        let class = block.memory.len();
        // Pooled bytes are not "in use"; move them between the counters.
        self.counters.sub(class);
        self.counters.pooled.fetch_add(class, Ordering::Relaxed);
        self.lock().entry((class, params)).or_default().push(block);
    }

    fn clear(&self) {
        let blocks: Vec<Counted> = self.lock().drain().flat_map(|(_, v)| v).collect();
        for block in blocks {
            let len = block.memory.len();
            self.counters.pooled.fetch_sub(len, Ordering::Relaxed);
            // Dropping `Counted` subtracts from in-use; it was moved out of in-use when pooled.
            self.counters.in_use.fetch_add(len, Ordering::Relaxed);
            drop(block);
        }
    }
}
