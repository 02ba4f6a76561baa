//! Copies and fills on a stream. Host memory reaches the device through pooled pinned staging
//! (`halcyon_stream::staging`), except from or into this API's own pinned allocations, which
//! are copied as they are; staging beyond the pool's limits is retired on the copy paths and
//! freed only where the API may block (see the [module docs](super), "Freeing staging").

use std::ffi::c_void;
use std::ptr::NonNull;

use halcyon::{Error, Result, StatusCode};
use halcyon_stream::arguments::{fill_elements, host_len};
use halcyon_stream::staging::{
    stage_from_device, stage_to_device, staging_len, Lease, PinnedBuffer,
};
use halcyon_stream::{DevicePtr, StreamHandle};

use super::CudaApi;
use crate::result::check;
use crate::sys;

impl CudaApi {
    pub(super) fn free_pinned(&self, buffers: Vec<PinnedBuffer>) {
        let _no_captures = (!buffers.is_empty()).then(|| self.no_captures());
        for buffer in buffers {
            // SAFETY: allocated by cuMemAllocHost in this context and no longer in use (it was
            // idle in the pool).
            let _ = unsafe { sys::cuMemFreeHost(buffer.ptr.as_ptr().cast()) };
        }
    }

    /// Frees the staging buffers retired beyond the pool's limits. `cuMemFreeHost` may wait for
    /// the device, so only where the API may block: `synchronize_stream`, `free` and drop, never
    /// on the copy paths (the issuing thread) or in event waits (completion threads).
    pub(super) fn free_retired(&self) {
        self.free_pinned(self.staging.take_retired());
        let captured = std::mem::take(
            &mut self
                .captured
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retired,
        );
        self.free_pinned(captured);
    }

    /// A lease of pinned staging of at least `len` bytes for one copy
    /// ([`StagingPool::lease`](halcyon_stream::staging::StagingPool::lease)): new buffers come
    /// from `cuMemAllocHost`.
    fn staging_lease(&self, len: usize) -> Result<Lease> {
        self.staging.lease(len, |capacity| {
            let mut ptr: *mut c_void = std::ptr::null_mut();
            check(
                // SAFETY: valid out-pointer; the context is bound.
                unsafe { sys::cuMemAllocHost_v2(&mut ptr, capacity) },
                || format!("cuMemAllocHost({capacity} bytes of pinned staging)"),
            )?;
            NonNull::new(ptr.cast()).ok_or_else(|| {
                Error::new(
                    StatusCode::Internal,
                    "cuMemAllocHost succeeded but returned a null pointer",
                )
            })
        })
    }

    /// # Safety
    /// The contract of [`StreamApi`](halcyon_stream::StreamApi)'s method of the same name.
    pub(super) unsafe fn copy_host_to_device_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: u64,
        s: StreamHandle,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let bytes = host_len(len, "a copy")?;
        // Held live until the copy is enqueued (a free meanwhile waits).
        let _dst = self.memory.check(dst, len, "copy to the device")?;
        let _bound = self.bind()?;
        let live = self.enqueue_stream(s)?;
        // Checked whether or not GRAPHS is advertised: the staged path below enqueues a host
        // function, which a capture would turn into a one-shot host node (see refuse_capture).
        if self.capturing(s, &live)? {
            // SAFETY: forwarded from the caller.
            return unsafe { self.copy_captured_host_to_device(dst, src, bytes, s, &live) };
        }
        if self.pinned_range(src as usize as u64, len) {
            // From this API's pinned memory the copy is asynchronous as it is: no staging.
            return check(
                // SAFETY: `src..src+len` lies within a live pinned allocation, which the caller
                // keeps valid and unmodified until the copy completed on `s`.
                unsafe { sys::cuMemcpyHtoDAsync_v2(dst.0, src.cast(), bytes, live.raw()) },
                || format!("cuMemcpyHtoDAsync({dst:?}, {len} bytes from pinned memory, {s:?})"),
            );
        }
        // From pageable memory cuMemcpyHtoDAsync may wait for the stream (the driver stages
        // the bytes and may synchronise to do so); from pinned memory it returns at once. So
        // the caller's bytes go through pooled pinned staging, chunk by chunk, the buffer
        // returned to the pool by a host function once the stream passed the last copy from it
        // (see halcyon_stream::staging).
        let lease = self.staging_lease(staging_len(bytes))?;
        let copy = |staging: *const u8, offset: usize, n: usize| {
            let to = DevicePtr(dst.0 + offset as u64);
            // SAFETY: `staging` holds `n` bytes of pinned memory that stage_to_device keeps
            // for this copy until the stream passed it.
            let r = unsafe { sys::cuMemcpyHtoDAsync_v2(to.0, staging.cast(), n, live.raw()) };
            check(r, || format!("cuMemcpyHtoDAsync({to:?}, {n} bytes, {s:?})"))
        };
        // SAFETY: the caller keeps `src..src+len` readable and unmodified until the copy
        // completed on `s` (which includes the host functions enqueued on it), and pinned
        // staging is not the caller's memory. A buffer a failure orphans, or whose host
        // function a sticky fault drops, is never reused; the API frees it when dropped.
        unsafe {
            stage_to_device(lease, src, bytes, copy, |f| {
                self.enqueue_host_func(s, &live, f)
            })
            .map_err(|e| e.context("cannot stage a copy to the device"))
        }
    }

    /// # Safety
    /// The contract of [`StreamApi`](halcyon_stream::StreamApi)'s method of the same name.
    pub(super) unsafe fn copy_device_to_host_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: u64,
        s: StreamHandle,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let bytes = host_len(len, "a copy")?;
        // Held live until the copy is enqueued (a free meanwhile waits).
        let _src = self.memory.check(src, len, "copy from the device")?;
        let _bound = self.bind()?;
        let live = self.enqueue_stream(s)?;
        // Checked before anything is enqueued (the copy into staging would be captured too).
        self.refuse_capture(s, &live, "a device-to-host copy")?;
        if self.pinned_range(dst as usize as u64, len) {
            // Into this API's pinned memory the copy is asynchronous as it is: no staging.
            return check(
                // SAFETY: `dst..dst+len` lies within a live pinned allocation, which the caller
                // keeps valid and untouched by anything else until the copy completed on `s`.
                unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src.0, bytes, live.raw()) },
                || format!("cuMemcpyDtoHAsync({src:?}, {len} bytes into pinned memory, {s:?})"),
            );
        }
        // Into pinned memory: into pageable memory cuMemcpyDtoHAsync would block until the
        // stream reached and finished it. So the bytes come through pooled pinned staging,
        // chunk by chunk, each copied out by a host function (see halcyon_stream::staging).
        let lease = self.staging_lease(staging_len(bytes))?;
        let copy = |staging: *mut u8, offset: usize, n: usize| {
            let from = DevicePtr(src.0 + offset as u64);
            // SAFETY: `staging` holds `n` bytes of pinned memory that stage_from_device keeps
            // for this copy until its host function copied them out.
            let r = unsafe { sys::cuMemcpyDtoHAsync_v2(staging.cast(), from.0, n, live.raw()) };
            check(r, || {
                format!("cuMemcpyDtoHAsync({from:?}, {n} bytes, {s:?})")
            })
        };
        // SAFETY: the caller keeps `dst..dst+len` valid and untouched until the copy completed
        // on `s`, which includes the host functions enqueued on it (work after them waits for
        // them); pinned staging and the caller's memory are disjoint. A buffer a failure
        // orphans, or whose host function a sticky fault drops, is never reused.
        unsafe {
            stage_from_device(lease, dst, bytes, copy, |f| {
                self.enqueue_host_func(s, &live, f)
            })
            .map_err(|e| e.context("cannot stage a copy from the device"))
        }
    }

    pub(super) fn copy_device_to_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        len: u64,
        s: StreamHandle,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let bytes = host_len(len, "a copy")?;
        // Both held live until the copy is enqueued (a free meanwhile waits).
        let _dst = self.memory.check(dst, len, "device copy destination")?;
        let _src = self.memory.check(src, len, "device copy source")?;
        let _bound = self.bind()?;
        let live = self.enqueue_stream(s)?;
        check(
            // SAFETY: a live stream, held for the call; both ranges within live allocations
            // (checked above), so the copy touches no host memory.
            unsafe { sys::cuMemcpyDtoDAsync_v2(dst.0, src.0, bytes, live.raw()) },
            || format!("cuMemcpyDtoDAsync({dst:?}, {src:?}, {len} bytes, {s:?})"),
        )
    }

    pub(super) fn memset_async(
        &self,
        dst: DevicePtr,
        pattern: u32,
        pattern_len: u8,
        len: u64,
        s: StreamHandle,
    ) -> Result<()> {
        let count = fill_elements(dst, pattern_len, len)?;
        if count == 0 {
            return Ok(());
        }
        // Held live until the fill is enqueued (a free meanwhile waits).
        let _dst = self.memory.check(dst, len, "fill")?;
        let _bound = self.bind()?;
        let live = self.enqueue_stream(s)?;
        let (d, st) = (dst.0, live.raw());
        // SAFETY: a live stream, held for the call; a range within a live allocation, aligned
        // for the element width (both checked above).
        let (r, call) = unsafe {
            match pattern_len {
                1 => (
                    sys::cuMemsetD8Async(d, pattern as u8, count, st),
                    "cuMemsetD8Async",
                ),
                2 => (
                    sys::cuMemsetD16Async(d, pattern as u16, count, st),
                    "cuMemsetD16Async",
                ),
                _ => (
                    sys::cuMemsetD32Async(d, pattern, count, st),
                    "cuMemsetD32Async",
                ),
            }
        };
        check(r, || {
            format!("{call}({dst:?}, {pattern:#x}, {count} elements, {s:?})")
        })
    }

    /// `cuStreamWriteValue32` of `value` at `ptr` (4-aligned, within a live allocation), with
    /// the default flags: the write waits for the stream's earlier work and a memory barrier
    /// orders that work's writes before it.
    pub(super) fn write_value32(&self, s: StreamHandle, ptr: DevicePtr, value: u32) -> Result<()> {
        if !ptr.0.is_multiple_of(4) {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!("cuStreamWriteValue32 at {ptr:?}: the address must be 4-byte aligned"),
            ));
        }
        // Held live until the write is enqueued (a free meanwhile waits).
        let _word = self.memory.check(ptr, 4, "stream write")?;
        let _bound = self.bind()?;
        let live = self.enqueue_stream(s)?;
        // SAFETY: a live stream, held for the call; 4 aligned bytes within a live allocation
        // (both checked above); flags 0 is the documented default.
        let r = unsafe { sys::cuStreamWriteValue32_v2(live.raw(), ptr.0, value, 0) };
        check(r, || {
            format!("cuStreamWriteValue32({s:?}, {ptr:?}, {value})")
        })
    }
}
