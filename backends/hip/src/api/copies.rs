//! Copies and fills on a stream. Host↔device copies go through pinned staging buffers
//! (`halcyon_stream::staging`) in chunks of up to 8 MiB, because `hipMemcpyAsync` from or to
//! pageable memory waits on the host for the stream; copies from or to this API's own
//! host-visible or pinned memory go straight to `hipMemcpyAsync`. See
//! [Copies between host and device](super#copies-between-host-and-device).
//!
//! `hipHostFree` waits for every stream of the device, so staging buffers retired beyond the
//! pool's limits are freed only where the API may block ([`HipStreamApi::free_retired`]).

use std::ffi::c_void;
use std::ptr::NonNull;

use halcyon::{Error, Result, StatusCode};
use halcyon_stream::arguments::{fill_elements, host_len};
use halcyon_stream::staging::{
    stage_from_device, stage_to_device, staging_len, Lease, PinnedBuffer,
};
use halcyon_stream::{DevicePtr, StreamHandle};

use super::memory::host_resident;
use super::{null_from, HipStreamApi};
use crate::sys;

impl HipStreamApi {
    /// A lease of pinned staging of at least `len` bytes for one copy
    /// ([`StagingPool::lease`](halcyon_stream::staging::StagingPool::lease)): new buffers come
    /// from `hipHostMalloc`.
    pub(super) fn pinned(&self, len: usize) -> Result<Lease> {
        self.staging.lease(len, |capacity| {
            let ptr = self
                .hip
                .host_malloc(capacity, sys::hipHostMallocDefault)
                .map_err(|e| e.context("cannot allocate pinned staging for a copy"))?;
            NonNull::new(ptr.cast()).ok_or_else(|| null_from("hipHostMalloc"))
        })
    }

    /// Frees pinned buffers no device work uses (`hipHostFree` may wait for the device: only
    /// where the API may block).
    pub(super) fn free_pinned(&self, buffers: Vec<PinnedBuffer>) {
        for buffer in buffers {
            // SAFETY: allocated by hipHostMalloc, handed over by the pool exactly once, and no
            // longer used by any copy (idle or retired, or everything is synchronised).
            let _ = unsafe { self.hip.host_free(buffer.ptr.as_ptr().cast()) };
        }
    }

    /// Frees the staging buffers retired beyond the pool's limits.
    pub(super) fn free_retired(&self) {
        self.free_pinned(self.staging.take_retired());
    }

    /// [`StreamApi::copy_host_to_device_async`](super::StreamApi::copy_host_to_device_async).
    ///
    /// # Safety
    /// As for [`StreamApi::copy_host_to_device_async`](super::StreamApi::copy_host_to_device_async).
    pub(super) unsafe fn copy_host_to_device_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // Held live until the copy is enqueued (a free meanwhile waits).
        let _dst = self.memory.check(dst, len, "copy to the device")?;
        let bytes = host_len(len, "a copy")?;
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        let copy = |src: *const u8| {
            // SAFETY: `dst..dst+len` lies in a live allocation; `src..src+len` is pinned or
            // host-visible memory that stays valid and unmodified until the copy completed on
            // the (live, held) stream (the caller's contract, or the staging lease).
            unsafe {
                self.hip.memcpy_async(
                    dst.0 as usize as *mut c_void,
                    src.cast(),
                    bytes,
                    sys::hipMemcpyHostToDevice,
                    stream.raw,
                )
            }
        };
        if host_resident(&self.memory, src, len) {
            return copy(src); // already asynchronous: no staging
        }
        // Through pinned staging, chunk by chunk: from pageable memory hipMemcpyAsync would
        // wait for the stream (see the module docs).
        let lease = self.pinned(staging_len(bytes))?;
        let copy = |staging: *const u8, offset: usize, n: usize| {
            // SAFETY: `dst+offset..+n` lies in the checked live allocation; `staging` holds `n`
            // bytes of pinned memory that stage_to_device keeps for this copy until the
            // (live, held) stream passed it.
            unsafe {
                self.hip.memcpy_async(
                    (dst.0 as usize + offset) as *mut c_void,
                    staging.cast(),
                    n,
                    sys::hipMemcpyHostToDevice,
                    stream.raw,
                )
            }
        };
        // SAFETY: the caller keeps `src..src+len` readable and unmodified until the copy
        // completed on the stream (which includes the host functions enqueued on it), and
        // pinned staging is not the caller's memory. A buffer a failure orphans, or whose host
        // function a stream error drops, is never reused; the API frees it when dropped.
        unsafe {
            stage_to_device(lease, src, bytes, copy, |f| {
                self.enqueue_host_func(&stream, f)
            })
            .map_err(|e| e.context("cannot stage a copy to the device"))
        }
    }

    /// [`StreamApi::copy_device_to_host_async`](super::StreamApi::copy_device_to_host_async).
    ///
    /// # Safety
    /// As for [`StreamApi::copy_device_to_host_async`](super::StreamApi::copy_device_to_host_async).
    pub(super) unsafe fn copy_device_to_host_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // Held live until the copy is enqueued (a free meanwhile waits).
        let _src = self.memory.check(src, len, "copy from the device")?;
        let bytes = host_len(len, "a copy")?;
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        let copy = |dst: *mut u8| {
            // SAFETY: `src..src+len` lies in a live allocation; `dst..dst+len` is pinned or
            // host-visible memory that stays valid and untouched until the copy completed on
            // the (live, held) stream (the caller's contract, or the staging lease).
            unsafe {
                self.hip.memcpy_async(
                    dst.cast(),
                    src.0 as usize as *const c_void,
                    bytes,
                    sys::hipMemcpyDeviceToHost,
                    stream.raw,
                )
            }
        };
        if host_resident(&self.memory, dst, len) {
            return copy(dst); // already asynchronous: no staging
        }
        // Into pinned staging, chunk by chunk: into pageable memory hipMemcpyAsync would wait
        // for the stream (see the module docs).
        let lease = self.pinned(staging_len(bytes))?;
        let copy = |staging: *mut u8, offset: usize, n: usize| {
            // SAFETY: `src+offset..+n` lies in the checked live allocation; `staging` holds `n`
            // bytes of pinned memory that stage_from_device keeps for this copy until its host
            // function copied them out.
            unsafe {
                self.hip.memcpy_async(
                    staging.cast(),
                    (src.0 as usize + offset) as *const c_void,
                    n,
                    sys::hipMemcpyDeviceToHost,
                    stream.raw,
                )
            }
        };
        // SAFETY: the caller keeps `dst..dst+len` valid and untouched until the copy completed
        // on the stream, which includes the host functions enqueued on it (later work on the
        // stream waits for them); pinned staging and the caller's memory are disjoint.
        unsafe {
            stage_from_device(lease, dst, bytes, copy, |f| {
                self.enqueue_host_func(&stream, f)
            })
            .map_err(|e| e.context("cannot stage a copy from the device"))
        }
    }

    /// [`StreamApi::copy_device_to_device_async`](super::StreamApi::copy_device_to_device_async).
    pub(super) fn copy_device_to_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // Both held live until the copy is enqueued (a free meanwhile waits).
        let _dst = self.memory.check(dst, len, "device copy destination")?;
        let _src = self.memory.check(src, len, "device copy source")?;
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        // SAFETY: both ranges lie in live allocations of this API (checked above), so the copy
        // cannot touch other memory; the stream is live and held.
        unsafe {
            self.hip.memcpy_async(
                dst.0 as usize as *mut c_void,
                src.0 as usize as *const c_void,
                len as usize,
                sys::hipMemcpyDeviceToDevice,
                stream.raw,
            )
        }
    }

    /// [`StreamApi::memset_async`](super::StreamApi::memset_async).
    pub(super) fn memset_async(
        &self,
        dst: DevicePtr,
        pattern: u32,
        pattern_len: u8,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        let count = fill_elements(dst, pattern_len, len)?;
        if count == 0 {
            return Ok(());
        }
        // Held live until the fill is enqueued (a free meanwhile waits).
        let _dst = self.memory.check(dst, len, "fill")?;
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        let ptr = dst.0 as usize as sys::hipDeviceptr_t;
        // SAFETY: `dst..dst+len` lies in a live allocation (checked above) and is aligned to
        // the pattern (fill_elements); the stream is live and held.
        unsafe {
            match pattern_len {
                1 => self
                    .hip
                    .memset_d8_async(ptr, pattern as u8, count, stream.raw),
                2 => self
                    .hip
                    .memset_d16_async(ptr, pattern as u16, count, stream.raw),
                _ => self.hip.memset_d32_async(ptr, pattern, count, stream.raw),
            }
        }
    }

    /// `hipStreamWriteValue32` of `value` at `ptr` (4-aligned, within a live allocation).
    pub(super) fn write_value32(
        &self,
        stream: StreamHandle,
        ptr: DevicePtr,
        value: u32,
    ) -> Result<()> {
        if !ptr.0.is_multiple_of(4) {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!("hipStreamWriteValue32 at {ptr:?}: the address must be 4-byte aligned"),
            ));
        }
        // Held live until the write is enqueued (a free meanwhile waits).
        let _word = self.memory.check(ptr, 4, "stream write")?;
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        // SAFETY: 4 aligned bytes within a live allocation (checked above); the stream is
        // live and held.
        unsafe {
            self.hip
                .stream_write_value32(stream.raw, ptr.0 as usize as *mut c_void, value)
        }
    }
}
