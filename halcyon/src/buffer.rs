//! Buffers: device memory with a memory type and usage bits, subspans, and mapping guards.
//!
//! A [`Buffer`] is a shared handle; a [`BufferRef`] is a byte range of one (a subspan). Host
//! access goes through mapping guards, and the rules that make it safe are enforced at run time:
//!
//! * **Mapping vs in-flight device work.** Every queue operation records, on each buffer it
//!   touches, its signal fence and whether it reads or writes. [`Buffer::map_read`] is refused
//!   with [`StatusCode::FailedPrecondition`] while device writes to the buffer are in flight,
//!   [`Buffer::map_write`] while any device access is. [`Buffer::map_read_async`] and
//!   [`Buffer::map_write_async`] wait for that work instead (asynchronously) and then map.
//! * **Submissions vs live mappings.** While a read guard lives, submitting device work that
//!   writes the buffer is refused with [`StatusCode::FailedPrecondition`]; while a write guard
//!   lives, any device access is. The borrow checker keeps guards from outliving the buffer.
//! * **Lifetime.** Memory is freed (or returned to its pool) when the last handle and the last
//!   in-flight submission using it are gone; dropping a buffer while the device uses it is safe.

use std::fmt;
use std::ops::{Bound, Deref, DerefMut, RangeBounds};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytemuck::Pod;

use crate::error::{Error, Result, StatusCode};
use crate::fence::Fence;
use crate::semaphore::Semaphore;

bitflags::bitflags! {
    /// Where memory lives and how the host may see it (Vulkan's memory property flags).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct MemoryType: u32 {
        /// Fastest for the device.
        const DEVICE_LOCAL = 1 << 0;
        /// The host can map it.
        const HOST_VISIBLE = 1 << 1;
        /// Host writes and device writes are visible to each other without flushes.
        const HOST_COHERENT = 1 << 2;
        /// Host reads are cached (fast host reads; may need invalidation if not coherent).
        const HOST_CACHED = 1 << 3;
    }
}

bitflags::bitflags! {
    /// What a buffer may be used for. Checked when commands are recorded and submitted.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct BufferUsage: u32 {
        /// Source of copies and queue reads.
        const TRANSFER_SOURCE = 1 << 0;
        /// Target of fills, updates, copies and queue writes.
        const TRANSFER_TARGET = 1 << 1;
        /// Both transfer directions.
        const TRANSFER = Self::TRANSFER_SOURCE.bits() | Self::TRANSFER_TARGET.bits();
        /// Bound to dispatches as storage.
        const DISPATCH_STORAGE = 1 << 2;
        /// Mapped by the host (requires [`MemoryType::HOST_VISIBLE`]).
        const MAPPING = 1 << 3;
    }
}

/// How to allocate a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferParams {
    /// Required memory properties.
    pub memory: MemoryType,
    /// Allowed usage.
    pub usage: BufferUsage,
}

impl BufferParams {
    /// Device-local memory for transfers and dispatches, not mappable.
    pub const DEVICE: BufferParams = BufferParams {
        memory: MemoryType::DEVICE_LOCAL,
        usage: BufferUsage::TRANSFER.union(BufferUsage::DISPATCH_STORAGE),
    };

    /// Host-visible, coherent memory usable for everything, mappable: the simplest choice.
    ///
    /// Without [`MemoryType::DEVICE_LOCAL`] it is system memory the device reaches over the
    /// bus, as in Vulkan: on CUDA and HIP pinned (page-locked) host memory, so a
    /// [`Queue::copy`](crate::Queue::copy) between it and device memory is one DMA at the bus's
    /// speed, with no staging. Kernels that read it heavily are better served by device memory,
    /// or by `HOST_VISIBLE | DEVICE_LOCAL` where the device offers it (managed memory on
    /// CUDA).
    pub const HOST: BufferParams = BufferParams {
        memory: MemoryType::HOST_VISIBLE.union(MemoryType::HOST_COHERENT),
        usage: BufferUsage::all(),
    };

    /// Checks the combination itself (independent of any device).
    pub fn validate(&self) -> Result<()> {
        if self.usage.contains(BufferUsage::MAPPING)
            && !self.memory.contains(MemoryType::HOST_VISIBLE)
        {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "buffer usage includes MAPPING but memory type {:?} is not HOST_VISIBLE; \
                     add MemoryType::HOST_VISIBLE or drop BufferUsage::MAPPING",
                    self.memory
                ),
            ));
        }
        if self.usage.is_empty() {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                "buffer usage is empty: a buffer nobody may use is useless; set BufferUsage bits",
            ));
        }
        Ok(())
    }
}

/// Backend memory behind a buffer (the SPI): what a device's allocator hands out.
///
/// # Safety
///
/// Host mappings dereference [`BufferMemory::host_ptr`] without further checks, so an
/// implementation promises:
///
/// * [`BufferMemory::len`] returns the same value for the memory's whole life;
/// * [`BufferMemory::host_ptr`], where it is `Some`, returns the same pointer on every call, and
///   that pointer is valid for reads and writes of `len()` bytes until the memory is dropped;
/// * nothing but halcyon accesses those bytes on the host while the memory belongs to a
///   [`Buffer`] (device work does so only as the queue operations that touch the buffer order
///   it), so the buffer's mapping guards are the only host references to them;
/// * `flush` and `invalidate` accept any range within `len()` without undefined behaviour.
pub unsafe trait BufferMemory: Send + Sync + 'static {
    /// The usable size in bytes.
    fn len(&self) -> u64;

    /// Whether the memory is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The host address of byte 0 if the memory is host-visible and persistently mapped.
    fn host_ptr(&self) -> Option<NonNull<u8>>;

    /// Makes host writes to `[offset, offset + len)` visible to the device (non-coherent memory).
    fn flush(&self, offset: u64, len: u64) -> Result<()> {
        let _ = (offset, len);
        Ok(())
    }

    /// Makes device writes to `[offset, offset + len)` visible to the host (non-coherent memory).
    fn invalidate(&self, offset: u64, len: u64) -> Result<()> {
        let _ = (offset, len);
        Ok(())
    }

    /// The memory as `Any`, so the backend can reach its own type (`VkBuffer`, device pointer).
    fn as_any(&self) -> &dyn std::any::Any;
}

/// How a queue operation touches a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The device reads it.
    Read,
    /// The device writes it (possibly reading too).
    Write,
}

/// The smallest `in_flight` length at which `track` prunes.
const PRUNE_MIN: usize = 16;

struct Tracker {
    /// The memory; `None` once a queue-ordered `dealloca` released it.
    memory: Option<Arc<dyn BufferMemory>>,
    /// The completion markers of in-flight submissions touching the buffer (each operation's
    /// private completion semaphore and value: the first entry of its signal fence), with
    /// their access.
    in_flight: Vec<(Semaphore, u64, Access)>,
    /// `track` prunes `in_flight` when it reaches this length, then sets it to twice what is
    /// left (at least [`PRUNE_MIN`]), so a long run of submissions that are all still in flight
    /// costs amortised O(1) per submission instead of a scan of every earlier one.
    prune_at: usize,
    host_readers: u32,
    host_writer: bool,
}

impl Tracker {
    /// Drops entries whose submissions completed (or failed: failed work no longer runs).
    fn prune(&mut self) {
        self.in_flight
            .retain(|(semaphore, value, _)| matches!(semaphore.query(), Ok(v) if v < *value));
        self.prune_at = (2 * self.in_flight.len()).max(PRUNE_MIN);
    }

    fn busy(&mut self, conflicting: impl Fn(Access) -> bool) -> Option<Fence> {
        self.prune();
        let mut busy = Fence::new();
        for (semaphore, value, access) in &self.in_flight {
            if conflicting(*access) {
                busy.insert(semaphore, *value);
            }
        }
        (!busy.is_empty()).then_some(busy)
    }
}

struct Inner {
    id: u64,
    size: u64,
    params: BufferParams,
    tracker: Mutex<Tracker>,
    label: crate::label::Label,
    /// Why the buffer may no longer be used, if [`Buffer::quarantine`]d.
    quarantined: std::sync::OnceLock<String>,
}

static NEXT_BUFFER_ID: AtomicU64 = AtomicU64::new(1);

/// A device buffer. Cloning gives another handle to the same memory.
///
/// Commands take byte ranges of buffers ([`BufferRef`]: [`Buffer::whole`], [`Buffer::slice`]).
/// Host-visible memory maps directly; a mapping is refused while device work that could race
/// it is in flight (or waited for, with [`Buffer::map_write_async`]).
///
/// ```
/// use halcyon::{BufferParams, Device};
///
/// fn upload(device: &Device, data: &[u8]) -> halcyon::Result<halcyon::Buffer> {
///     let buffer = device.allocator().allocate(data.len() as u64, BufferParams::HOST)?;
///     buffer.map_write(..)?.copy_from_slice(data); // the guard unmaps when dropped
///     let _second_half = buffer.slice(data.len() as u64 / 2..)?;
///     Ok(buffer)
/// }
/// ```
#[derive(Clone)]
pub struct Buffer {
    inner: Arc<Inner>,
}

impl Buffer {
    /// Whether this is the only handle to the buffer (no range of it, no submission holds it).
    pub(crate) fn is_unshared(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    /// Wraps backend memory in a buffer of `size` bytes (the SPI; users allocate through a
    /// device's allocator).
    ///
    /// The buffer owns the memory: its mapping state and in-flight tracking live with it, and no
    /// other buffer can be made over the same memory (the memory is taken by value, and the
    /// handle [`Buffer::memory`] gives back is not a [`BufferMemory`] of its own), so two
    /// buffers never hand out conflicting mappings of the same bytes. `InvalidArgument` if
    /// `size` is larger than the memory, or the params are incoherent.
    pub fn from_memory<M: BufferMemory>(
        memory: M,
        size: u64,
        params: BufferParams,
    ) -> Result<Self> {
        params.validate()?;
        if size > memory.len() {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "a buffer of {size} bytes cannot be made over {} bytes of memory; the \
                     backend's allocation must be at least as large as the buffer",
                    memory.len()
                ),
            ));
        }
        let memory: Arc<dyn BufferMemory> = Arc::new(memory);
        Ok(Buffer {
            inner: Arc::new(Inner {
                id: NEXT_BUFFER_ID.fetch_add(1, Ordering::Relaxed),
                size,
                params,
                tracker: Mutex::new(Tracker {
                    memory: Some(memory),
                    in_flight: Vec::new(),
                    prune_at: PRUNE_MIN,
                    host_readers: 0,
                    host_writer: false,
                }),
                label: crate::label::Label::default(),
                quarantined: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.inner.size
    }

    /// Names the buffer in error messages and profile records (`buffer 12 'weights'`; see
    /// its `Display`). Every handle to the buffer sees the new label.
    pub fn set_label(&self, label: &str) {
        self.inner.label.set(label);
    }

    /// The buffer's label, if it has one.
    pub fn label(&self) -> Option<std::sync::Arc<str>> {
        self.inner.label.get()
    }

    /// Memory type the buffer was allocated with.
    pub fn memory_type(&self) -> MemoryType {
        self.inner.params.memory
    }

    /// Allowed usage.
    pub fn usage(&self) -> BufferUsage {
        self.inner.params.usage
    }

    /// A process-unique id, for diagnostics.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The backend memory (the SPI), for a backend to reach its own type through
    /// [`BufferMemory::as_any`]. `FailedPrecondition` after a queue `dealloca` released it.
    pub fn memory(&self) -> Result<Arc<dyn BufferMemory>> {
        self.lock()
            .memory
            .clone()
            .ok_or_else(|| self.released_error())
    }

    /// Whether a queue `dealloca` released the memory.
    pub fn is_released(&self) -> bool {
        self.lock().memory.is_none()
    }

    /// Detaches the memory (the completion of a queue-ordered `dealloca`). In-flight work that
    /// still holds it keeps it alive; the pool gets it back when the last holder drops it.
    pub(crate) fn release_memory(&self) -> Option<Arc<dyn BufferMemory>> {
        self.lock().memory.take()
    }

    fn released_error(&self) -> Error {
        if let Some(reason) = self.inner.quarantined.get() {
            return Error::new(
                StatusCode::FailedPrecondition,
                format!(
                    "{self} was lent to {reason}, whose engine may still write it, so it can \
                     no longer be used; allocate a new buffer"
                ),
            );
        }
        Error::new(
            StatusCode::FailedPrecondition,
            format!(
                "{} was deallocated (queue dealloca); allocate a new buffer",
                self
            ),
        )
    }

    /// Makes the buffer unusable for good because `reason` (an abandoned collective) may still
    /// write its memory: every later mapping and submission touching it fails, saying why. The
    /// memory is whoever holds it's to keep.
    pub(crate) fn quarantine(&self, reason: &str) {
        let _ = self.inner.quarantined.set(reason.to_owned());
        self.lock().memory = None;
    }

    /// Whether two handles refer to the same buffer.
    pub fn ptr_eq(&self, other: &Buffer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The whole buffer as a [`BufferRef`].
    pub fn whole(&self) -> BufferRef {
        BufferRef {
            buffer: self.clone(),
            offset: 0,
            length: self.inner.size,
        }
    }

    /// A subspan. `OutOfRange` if it does not lie within the buffer.
    pub fn slice(&self, range: impl RangeBounds<u64>) -> Result<BufferRef> {
        self.whole().slice(range)
    }

    /// A fence covering every in-flight submission that touches this buffer (empty if idle).
    pub fn busy_fence(&self) -> Fence {
        self.lock().busy(|_| true).unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tracker> {
        self.inner
            .tracker
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn check_mappable(
        &self,
        memory: &Option<Arc<dyn BufferMemory>>,
    ) -> Result<(Arc<dyn BufferMemory>, NonNull<u8>)> {
        if !self.usage().contains(BufferUsage::MAPPING) {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "{} was allocated without BufferUsage::MAPPING (usage {:?}); allocate \
                     it host-visible with MAPPING, or copy through a queue read/write",
                    self,
                    self.usage()
                ),
            ));
        }
        let memory = memory.clone().ok_or_else(|| self.released_error())?;
        let ptr = memory.host_ptr().ok_or_else(|| {
            Error::new(
                StatusCode::FailedPrecondition,
                format!("{} memory has no host mapping", self),
            )
        })?;
        Ok((memory, ptr))
    }

    /// Maps `range` for host reading.
    ///
    /// Fails with `FailedPrecondition` while device writes to the buffer are in flight (or a
    /// host write guard lives), `InvalidArgument` without [`BufferUsage::MAPPING`], `OutOfRange`
    /// outside the buffer. Non-coherent memory is invalidated first.
    pub fn map_read(&self, range: impl RangeBounds<u64>) -> Result<MappedRead<'_>> {
        let range = self.slice(range)?;
        let mut tracker = self.lock();
        let (memory, ptr) = self.check_mappable(&tracker.memory)?;
        if tracker.host_writer {
            return Err(self.mapped_error("for reading", "it is mapped for writing"));
        }
        if let Some(busy) = tracker.busy(|a| a == Access::Write) {
            return Err(self.busy_error("for reading", "device writes", &busy));
        }
        tracker.host_readers += 1;
        drop(tracker);
        let guard = MappedRead {
            buffer: self,
            // SAFETY: `range` lies within the buffer (checked by `slice`), and `ptr` maps it.
            ptr: unsafe { ptr.as_ptr().add(range.offset as usize) },
            len: range.length as usize,
            memory,
        };
        guard.memory.invalidate(range.offset, range.length)?;
        Ok(guard)
    }

    /// Maps `range` for host writing (and reading).
    ///
    /// Fails with `FailedPrecondition` while any device access to the buffer is in flight or
    /// any other guard lives. Non-coherent memory is flushed when the guard drops.
    pub fn map_write(&self, range: impl RangeBounds<u64>) -> Result<MappedWrite<'_>> {
        let range = self.slice(range)?;
        let mut tracker = self.lock();
        let (memory, ptr) = self.check_mappable(&tracker.memory)?;
        if tracker.host_writer || tracker.host_readers > 0 {
            return Err(self.mapped_error("for writing", "it is already mapped"));
        }
        if let Some(busy) = tracker.busy(|_| true) {
            return Err(self.busy_error("for writing", "device accesses", &busy));
        }
        tracker.host_writer = true;
        drop(tracker);
        let guard = MappedWrite {
            buffer: self,
            // SAFETY: as in `map_read`.
            ptr: unsafe { ptr.as_ptr().add(range.offset as usize) },
            offset: range.offset,
            len: range.length as usize,
            memory,
        };
        guard.memory.invalidate(range.offset, range.length)?;
        Ok(guard)
    }

    /// Waits (asynchronously) for in-flight device writes, then maps for reading. Fails like
    /// [`Buffer::map_read`] for bad usage or range, or with the error of failed work.
    pub async fn map_read_async(&self, range: impl RangeBounds<u64>) -> Result<MappedRead<'_>> {
        let range = self.slice(range)?;
        loop {
            let busy = self.lock().busy(|a| a == Access::Write);
            match busy {
                Some(fence) => fence.wait_all().await?,
                None => return self.map_read(range.offset..range.offset + range.length),
            }
        }
    }

    /// Waits (asynchronously) for in-flight device accesses, then maps for writing.
    pub async fn map_write_async(&self, range: impl RangeBounds<u64>) -> Result<MappedWrite<'_>> {
        let range = self.slice(range)?;
        loop {
            let busy = self.lock().busy(|_| true);
            match busy {
                Some(fence) => fence.wait_all().await?,
                None => return self.map_write(range.offset..range.offset + range.length),
            }
        }
    }

    /// Records that a submission signalling `fence` accesses this buffer (the queue's side of
    /// the mapping rules). Fails with `FailedPrecondition` if a live host mapping conflicts.
    pub(crate) fn track(&self, done: &Semaphore, value: u64, access: Access) -> Result<()> {
        let mut tracker = self.lock();
        if tracker.memory.is_none() {
            return Err(self.released_error());
        }
        let conflict = tracker.host_writer || (access == Access::Write && tracker.host_readers > 0);
        if conflict {
            return Err(Error::new(
                StatusCode::FailedPrecondition,
                format!(
                    "{} is mapped on the host ({}), so the device may not {} it; drop the \
                     mapping guard before submitting",
                    self,
                    if tracker.host_writer {
                        "for writing"
                    } else {
                        "for reading"
                    },
                    if access == Access::Write {
                        "write"
                    } else {
                        "read"
                    },
                ),
            ));
        }
        if tracker.in_flight.len() >= tracker.prune_at {
            tracker.prune();
        }
        tracker.in_flight.push((done.clone(), value, access));
        Ok(())
    }

    fn mapped_error(&self, what: &str, why: &str) -> Error {
        Error::new(
            StatusCode::FailedPrecondition,
            format!(
                "cannot map {} {what}: {why}; drop the other guard first",
                self
            ),
        )
    }

    fn busy_error(&self, what: &str, kind: &str, busy: &Fence) -> Error {
        Error::new(
            StatusCode::FailedPrecondition,
            format!(
                "cannot map {} {what}: {kind} are in flight (until {busy:?}); await the \
                 submission, or use map_{}_async",
                self,
                if what == "for reading" {
                    "read"
                } else {
                    "write"
                },
            ),
        )
    }
}

/// `buffer 12`, or `buffer 12 'weights'` once labelled ([`Buffer::set_label`]).
impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::label::write(f, "buffer", self.id(), &self.inner.label)
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("id", &self.id())
            .field("label", &self.inner.label)
            .field("size", &self.size())
            .field("memory", &self.memory_type())
            .field("usage", &self.usage())
            .finish()
    }
}

/// A byte range of a buffer: what commands operate on.
///
/// Always lies within its buffer (every constructor checks).
#[derive(Clone, Debug)]
pub struct BufferRef {
    buffer: Buffer,
    offset: u64,
    length: u64,
}

impl BufferRef {
    /// The buffer.
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// First byte, from the start of the buffer.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.length
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// A subrange, relative to this one. `OutOfRange` if it does not lie within it.
    pub fn slice(&self, range: impl RangeBounds<u64>) -> Result<BufferRef> {
        let start = match range.start_bound() {
            Bound::Included(&s) => Some(s),
            Bound::Excluded(&s) => s.checked_add(1),
            Bound::Unbounded => Some(0),
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.checked_add(1),
            Bound::Excluded(&e) => Some(e),
            Bound::Unbounded => Some(self.length),
        };
        match (start, end) {
            (Some(start), Some(end)) if start <= end && end <= self.length => Ok(BufferRef {
                buffer: self.buffer.clone(),
                offset: self.offset + start,
                length: end - start,
            }),
            _ => Err(Error::new(
                StatusCode::OutOfRange,
                format!(
                    "range {:?}..{:?} does not lie within {} bytes ({} at offset {})",
                    range.start_bound(),
                    range.end_bound(),
                    self.length,
                    self.buffer,
                    self.offset
                ),
            )),
        }
    }

    /// One past the last byte, within the buffer.
    pub fn end(&self) -> u64 {
        self.offset + self.length
    }

    /// Whether the two ranges share bytes of one buffer.
    pub(crate) fn overlaps(&self, other: &BufferRef) -> bool {
        self.buffer.ptr_eq(&other.buffer) && self.offset < other.end() && other.offset < self.end()
    }
}

/// A host read mapping; derefs to the bytes. See [`Buffer::map_read`].
pub struct MappedRead<'a> {
    buffer: &'a Buffer,
    ptr: *mut u8,
    len: usize,
    memory: Arc<dyn BufferMemory>,
}

impl fmt::Debug for MappedRead<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedRead")
            .field("buffer", &self.buffer.id())
            .field("len", &self.len)
            .finish()
    }
}

// SAFETY: the guard only hands out shared access to memory that no device work writes while it
// lives (enforced by the tracker), and the memory is `Send + Sync` backend memory.
unsafe impl Send for MappedRead<'_> {}
// SAFETY: as above; `&MappedRead` only gives `&[u8]`.
unsafe impl Sync for MappedRead<'_> {}

impl MappedRead<'_> {
    /// The bytes as a slice of `T`; `InvalidArgument` if the size or alignment does not fit.
    pub fn as_slice<T: Pod>(&self) -> Result<&[T]> {
        bytemuck::try_cast_slice(self).map_err(cast_error::<T>)
    }
}

impl Deref for MappedRead<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is mapped host memory of the buffer, kept alive by the borrow
        // of the buffer, and no device write runs while this read guard lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for MappedRead<'_> {
    fn drop(&mut self) {
        self.buffer.lock().host_readers -= 1;
    }
}

/// A host write mapping; derefs (mutably) to the bytes. See [`Buffer::map_write`].
pub struct MappedWrite<'a> {
    buffer: &'a Buffer,
    ptr: *mut u8,
    offset: u64,
    len: usize,
    memory: Arc<dyn BufferMemory>,
}

impl fmt::Debug for MappedWrite<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedWrite")
            .field("buffer", &self.buffer.id())
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

// SAFETY: the guard has exclusive host access and no device access runs while it lives.
unsafe impl Send for MappedWrite<'_> {}
// SAFETY: `&MappedWrite` only gives `&[u8]`.
unsafe impl Sync for MappedWrite<'_> {}

impl MappedWrite<'_> {
    /// The bytes as a slice of `T`; `InvalidArgument` if the size or alignment does not fit.
    pub fn as_slice<T: Pod>(&self) -> Result<&[T]> {
        bytemuck::try_cast_slice(self).map_err(cast_error::<T>)
    }

    /// The bytes as a mutable slice of `T`; `InvalidArgument` if the size or alignment does
    /// not fit.
    pub fn as_mut_slice<T: Pod>(&mut self) -> Result<&mut [T]> {
        bytemuck::try_cast_slice_mut(self).map_err(cast_error::<T>)
    }
}

impl Deref for MappedWrite<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: as in `MappedRead::deref`; this guard is the only access of any kind.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for MappedWrite<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: exclusive: no other guard and no device access while this guard lives, and
        // `&mut self` keeps this the only slice.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for MappedWrite<'_> {
    fn drop(&mut self) {
        // A flush failure cannot be reported from drop; non-coherent backends that can fail a
        // flush also report it on the next submission.
        let _ = self.memory.flush(self.offset, self.len as u64);
        self.buffer.lock().host_writer = false;
    }
}

fn cast_error<T>(error: bytemuck::PodCastError) -> Error {
    Error::new(
        StatusCode::InvalidArgument,
        format!(
            "cannot view mapped bytes as [{}]: {error:?} (size {} align {})",
            std::any::type_name::<T>(),
            std::mem::size_of::<T>(),
            std::mem::align_of::<T>()
        ),
    )
}

#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    use super::*;

    /// A host buffer of `words` 8-byte words, for unit tests elsewhere in the crate.
    pub(crate) fn host_buffer(words_len: usize) -> Buffer {
        let bytes = words_len as u64 * 8;
        Buffer::from_memory(words(words_len), bytes, BufferParams::HOST).expect("host buffer")
    }

    /// Host memory of a fixed size (a boxed slice of words), for mapping tests under Miri.
    struct Words(Box<[std::cell::UnsafeCell<u64>]>);

    // SAFETY: the box is this value's own allocation of `len()` bytes, never moved while it
    // lives; its cells make writes through the shared pointer sound.
    unsafe impl BufferMemory for Words {
        fn len(&self) -> u64 {
            self.0.len() as u64 * 8
        }
        fn host_ptr(&self) -> Option<NonNull<u8>> {
            NonNull::new(self.0.as_ptr() as *mut u8)
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    // SAFETY: only buffers (whose guards exclude each other) touch the cells.
    unsafe impl Sync for Words {}

    fn words(n: usize) -> Words {
        Words((0..n).map(|_| std::cell::UnsafeCell::new(0)).collect())
    }

    #[test]
    fn a_buffer_cannot_be_larger_than_its_memory() {
        let error = Buffer::from_memory(words(8), 64 << 20, BufferParams::HOST).unwrap_err();
        assert_eq!(error.code(), StatusCode::InvalidArgument);
        assert!(error.message().contains("64 bytes of memory"), "{error}");
        let buffer = Buffer::from_memory(words(8), 64, BufferParams::HOST).unwrap();
        assert!(buffer.map_read(0..65).is_err());
        assert_eq!(buffer.map_read(..).unwrap().len(), 64);
    }

    #[test]
    fn mapping_guards_exclude_each_other() {
        let buffer = Buffer::from_memory(words(8), 64, BufferParams::HOST).unwrap();
        let alias = buffer.clone();
        let mut write = buffer.map_write(..).unwrap();
        write.as_mut_slice::<u32>().unwrap()[3] = 7;
        assert_eq!(
            alias.map_write(..).err().map(|e| e.code()),
            Some(StatusCode::FailedPrecondition)
        );
        assert!(alias.map_read(..).is_err());
        drop(write);
        let (a, b) = (alias.map_read(..).unwrap(), buffer.map_read(8..16).unwrap());
        assert_eq!(a.as_slice::<u32>().unwrap()[3], 7);
        assert_eq!(b.as_slice::<u32>().unwrap()[1], 7);
        assert!(buffer.map_write(..).is_err());
    }
}
