//! Buffer memory of a stream device: one [`StreamApi::allocate`] allocation per buffer, freed
//! when the buffer (and every submission holding its memory) is gone.
//!
//! Queue `alloca` memory on an API with stream-ordered allocation is
//! [`StreamApi::allocate_async`] on the queue's stream instead, and is returned with
//! [`StreamApi::free_async`] on that stream: no synchronisation either way.
//!
//! An allocation that runs out of memory first waits for the frees still on their way
//! ([`Core::retry_out_of_memory`]) and tries once more: memory the application already gave
//! back, whose free is pending with the reclaimer (see [`Reclaim`]), deferred behind an issue,
//! or enqueued on a queue's stream behind work still running there, must not turn into an
//! out-of-memory error. So once a task awaited a `dealloca` (or a submission that held the last
//! reference to a buffer) that memory is available to its next allocation, at the price of a
//! blocking wait on this rare path, as a GPU allocator's own out-of-memory path has.
//!
//! Host-visible buffers are mapped through the address [`StreamApi::host_pointer`] reports; an
//! API that cannot give one refuses host-visible buffers instead of pretending. Where they live
//! follows the memory type, as Vulkan's memory types do:
//!
//! * `HOST_VISIBLE` without `DEVICE_LOCAL` ([`halcyon::BufferParams::HOST`]) is system memory:
//!   [`MemoryPlacement::Pinned`], page-locked and mapped into the device's address space
//!   (`cuMemHostAlloc`, `hipHostMalloc`). A copy between it and device memory is a plain DMA at
//!   the bus's speed, with no staging and no host function, so a buffer of it is the way to
//!   move data at pinned bandwidth: write through its mapping, then `Queue::copy`. Kernels
//!   reach it over the bus. An API without pinned memory places it as `HOST_VISIBLE |
//!   DEVICE_LOCAL` instead.
//! * `HOST_VISIBLE | DEVICE_LOCAL` is [`MemoryPlacement::HostVisible`]: memory the API keeps
//!   near the device and lets the host address (managed memory on CUDA).
//!
//! Device-local buffers have no host mapping even where the API could provide one, so the
//! mapping rules cannot depend on the backend.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use crate::api::{DevicePtr, MemoryPlacement, StreamApi, StreamHandle};
use crate::device::core::{Core, QueueStreams};
use crate::device::reclaim::{Reclaim, Reclaimed};
use crate::event_pool::{Event, EventPool};
use halcyon::backend::BufferMemory;
use halcyon::{BufferParams, MemoryType};
use halcyon::{Error, Result, StatusCode};

/// What orders work on one queue's stream: the lock held while a submission is enqueued (and
/// while a command list is captured into a graph), and stream-ordered frees that found it held.
///
/// Everything enqueued on a stream while it is capturing becomes part of the graph, whichever
/// thread enqueues it. A stream-ordered allocation or free (a queue `alloca` buffer's memory)
/// must therefore never be enqueued while an issue holds the lock: allocations take the lock,
/// and a free that finds it held (another thread issuing, or the issuing thread itself dropping
/// the last reference) is deferred to the end of that issue.
#[derive(Default)]
pub(crate) struct StreamOrder {
    pub(crate) issue: Mutex<()>,
    deferred: Mutex<Vec<DevicePtr>>,
    /// Set when a stream-ordered free is enqueued, cleared when an out-of-memory path fenced
    /// the stream's frees ([`StreamOrder::fence_frees`]).
    unfenced: AtomicBool,
}

impl StreamOrder {
    /// Takes the issue lock until the guard drops; then frees, in stream order, what was
    /// deferred meanwhile (see [`StreamOrder::free_deferred_if_idle`]).
    pub(crate) fn lock_issue<'a, A: StreamApi>(
        &'a self,
        api: &'a A,
        stream: StreamHandle,
    ) -> IssueGuard<'a, A> {
        IssueGuard {
            order: self,
            api,
            stream,
            held: Some(self.issue.lock().unwrap_or_else(|p| p.into_inner())),
        }
    }

    /// Frees what was deferred, unless an issue holds the lock (it does when it releases it).
    /// Called after every release of the lock and after every deferral: a free deferred while
    /// some holder had the lock is then freed by that holder's call, or by the deferring
    /// thread's if the holder released it before the free was deferred. Without this, a free
    /// deferred too late for the holder's own drain would wait for the queue's next issue.
    fn free_deferred_if_idle<A: StreamApi>(&self, api: &A, stream: StreamHandle) {
        loop {
            if self
                .deferred
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
            {
                return;
            }
            let _in_order = match self.issue.try_lock() {
                Ok(held) => held,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => return,
            };
            self.free_deferred(api, stream);
        }
    }

    /// Frees, in stream order, what was deferred. Call with `issue` held (and no capture open).
    pub(crate) fn free_deferred<A: StreamApi>(&self, api: &A, stream: StreamHandle) {
        let deferred =
            std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|p| p.into_inner()));
        for ptr in deferred {
            match api.free_async(ptr, stream) {
                Ok(()) => self.unfenced.store(true, Ordering::SeqCst),
                Err(_) => {
                    let _ = api.free(ptr);
                }
            }
        }
    }

    /// For an allocation that ran out of memory: enqueues the deferred frees, and if the stream
    /// has stream-ordered frees the host has not seen complete, an event after them, which the
    /// caller waits for (outside the issue lock) before trying again. `None`: nothing to wait
    /// for (or no event could be recorded, and then the allocation fails as it would have).
    fn fence_frees<A: StreamApi>(
        &self,
        api: &A,
        stream: StreamHandle,
        events: &EventPool,
    ) -> Option<Event> {
        // The issue lock also keeps a graph capture from taking the frees or the event.
        let _in_order = self.lock_issue(api, stream);
        self.free_deferred(api, stream);
        if !self.unfenced.swap(false, Ordering::SeqCst) {
            return None;
        }
        let event = events.acquire().ok()?;
        api.record_event(event.handle(), stream).ok()?;
        Some(event)
    }

    /// Frees what was deferred directly (the stream is going away).
    pub(crate) fn free_deferred_now<A: StreamApi>(&self, api: &A) {
        let deferred =
            std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|p| p.into_inner()));
        for ptr in deferred {
            let _ = api.free(ptr);
        }
    }
}

/// The issue lock of a queue ([`StreamOrder::lock_issue`]): released on drop, then the frees
/// deferred meanwhile are made.
pub(crate) struct IssueGuard<'a, A: StreamApi> {
    order: &'a StreamOrder,
    api: &'a A,
    stream: StreamHandle,
    held: Option<MutexGuard<'a, ()>>,
}

impl<A: StreamApi> Drop for IssueGuard<'_, A> {
    fn drop(&mut self) {
        drop(self.held.take());
        self.order.free_deferred_if_idle(self.api, self.stream);
    }
}

/// Device memory behind a buffer of a stream device.
pub(crate) struct StreamMemory<A: StreamApi> {
    /// The API that allocated it (a peer copy reads it through that API's device).
    pub(crate) api: Arc<A>,
    /// The device that allocated it (its buffers are refused by other devices).
    pub(crate) owner: u64,
    pub(crate) ptr: DevicePtr,
    len: u64,
    host: Option<NonNull<u8>>,
    /// The stream it was allocated on in stream order (freed on it in stream order too), and
    /// what orders that stream.
    stream: Option<(StreamHandle, Arc<StreamOrder>)>,
    /// Where a free that must not run on the dropping thread goes (see [`Reclaim`]).
    reclaim: Arc<Reclaim>,
}

// SAFETY: `host` is the host address of device memory this value owns (freed only in `Drop`);
// handing it to other threads is what buffers are for, and host access to it goes through the
// core's mapping guards, which exclude in-flight device work.
unsafe impl<A: StreamApi> Send for StreamMemory<A> {}
// SAFETY: as above; `&StreamMemory` only reads immutable fields.
unsafe impl<A: StreamApi> Sync for StreamMemory<A> {}

impl<A: StreamApi> StreamMemory<A> {
    /// Allocates `size` bytes for a buffer with `params` on `core`'s device.
    pub(crate) fn allocate(core: &Core<A>, size: u64, params: &BufferParams) -> Result<Self> {
        let api = &core.api;
        let host_visible = params.memory.contains(MemoryType::HOST_VISIBLE);
        let placement = match (
            host_visible,
            params.memory.contains(MemoryType::DEVICE_LOCAL),
        ) {
            (false, _) => MemoryPlacement::Device,
            (true, true) => MemoryPlacement::HostVisible,
            (true, false) => MemoryPlacement::Pinned,
        };
        let ptr = match core.retry_out_of_memory(|| api.allocate(size, placement)) {
            // An API without pinned memory still has host-visible buffers, in its
            // host-visible memory.
            Err(error)
                if placement == MemoryPlacement::Pinned
                    && error.code() == StatusCode::Unimplemented =>
            {
                core.retry_out_of_memory(|| api.allocate(size, MemoryPlacement::HostVisible))?
            }
            result => result?,
        };
        let host = if host_visible {
            match api.host_pointer(ptr) {
                Some(host) => Some(host),
                None => {
                    let _ = api.free(ptr);
                    return Err(Error::new(
                        StatusCode::Unavailable,
                        format!(
                            "{} cannot map {size} bytes of host-visible memory: its stream API \
                             gave no host address for a host-visible allocation; allocate \
                             device memory and copy through queue reads and writes",
                            core.name
                        ),
                    ));
                }
            }
        } else {
            None
        };
        Ok(StreamMemory {
            api: api.clone(),
            owner: core.id,
            ptr,
            len: size,
            host,
            stream: None,
            reclaim: core.reclaim.clone(),
        })
    }

    /// Allocates `size` bytes of device memory in the order of `queue`'s stream (for a queue
    /// `alloca`).
    pub(crate) fn allocate_async(core: &Core<A>, queue: &QueueStreams, size: u64) -> Result<Self> {
        let (api, order) = (&core.api, &queue.order);
        let allocate = || {
            let _in_order = order.lock_issue(&**api, queue.stream);
            order.free_deferred(&**api, queue.stream);
            api.allocate_async(size, queue.stream)
        };
        // The wait for pending frees is outside the issue lock, which they need.
        let ptr = core.retry_out_of_memory(allocate)?;
        Ok(StreamMemory {
            api: api.clone(),
            owner: core.id,
            ptr,
            len: size,
            host: None,
            stream: Some((queue.stream, order.clone())),
            reclaim: core.reclaim.clone(),
        })
    }
}

impl<A: StreamApi> Core<A> {
    /// Runs `allocate`; if it runs out of memory while frees are on their way, waits for them
    /// and runs it once more (see the [module docs](self)). Waited for: the reclaimer's pending
    /// frees ([`Reclaim::flush`]), then every queue's deferred frees, enqueued now, and its
    /// stream-ordered frees not yet seen complete, through an event recorded after them. Work
    /// enqueued on a stream never waits for the host, so the wait ends; it blocks the calling
    /// thread meanwhile, which only an allocation that would otherwise fail pays.
    pub(crate) fn retry_out_of_memory<T>(&self, allocate: impl Fn() -> Result<T>) -> Result<T> {
        match allocate() {
            Err(error) if error.code() == StatusCode::ResourceExhausted => {
                if self.wait_for_frees() {
                    allocate()
                } else {
                    Err(error)
                }
            }
            allocated => allocated,
        }
    }

    /// Waits for the frees on their way (see [`Core::retry_out_of_memory`]); `false`: there
    /// were none.
    fn wait_for_frees(&self) -> bool {
        let mut waited = self.reclaim.pending() > 0;
        self.reclaim.flush();
        let fences: Vec<Event> = self
            .queues
            .iter()
            .filter_map(|q| q.order.fence_frees(&*self.api, q.stream, &self.events))
            .collect();
        for fence in &fences {
            // An error (a device fault) leaves the memory where it is: the retry reports it.
            let _ = self.api.synchronize_event(fence.handle());
            waited = true;
        }
        waited
    }
}

// SAFETY: `host` is the API's host address of this allocation (valid for `len` bytes until it is
// freed on drop, by the `StreamApi` contract), and the allocation belongs to this value alone.
unsafe impl<A: StreamApi> BufferMemory for StreamMemory<A> {
    fn len(&self) -> u64 {
        self.len
    }

    fn host_ptr(&self) -> Option<NonNull<u8>> {
        self.host
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl<A: StreamApi> Drop for StreamMemory<A> {
    fn drop(&mut self) {
        // Every submission that used the memory holds it until its fence settled, so nothing
        // enqueued still addresses it. A failure cannot be reported from here.
        if let Some((stream, order)) = &self.stream {
            match order.issue.try_lock() {
                // In stream order: after what the stream holds now, without blocking.
                Ok(_in_order) => {
                    if self.api.free_async(self.ptr, *stream).is_ok() {
                        order.unfenced.store(true, Ordering::SeqCst);
                        return;
                    }
                    // The stream is gone (the buffer outlived its device): free it directly,
                    // which stream-ordered memory allows.
                }
                // An issue (perhaps a graph capture) holds the stream: it frees this when done.
                Err(_) => {
                    order
                        .deferred
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(self.ptr);
                    order.free_deferred_if_idle(&*self.api, *stream);
                    return;
                }
            }
        }
        // While a submission is settled, the free goes to the reclaimer (it may wait for the
        // device); elsewhere it is made here.
        if !self.reclaim.defer(Reclaimed::Memory(self.ptr)) {
            let _ = self.api.free(self.ptr);
        }
    }
}
