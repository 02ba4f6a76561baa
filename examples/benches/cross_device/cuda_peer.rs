//! `cuda_peer`: 16 MiB from `cuda://0` into `cuda://1`: halcyon's `copy_from` (one peer copy
//! where the driver reports peer access) against the driver API alone, in the same run.
//! Skipped, saying why, without two CUDA devices. `HALCYON_CUDA_BENCH_FAKE=1` runs it on the
//! fake driver (`testing/fake-gpu`), which measures the host side only: its copies are host
//! `memcpy`s.

use std::ffi::c_uint;

use criterion::Criterion;
use cudarc::driver::sys::{CUcontext, CUdevice, CUdeviceptr, CUresult, CUstream, CUstream_flags};
use futures::executor::block_on;
use halcyon::topology::Reach;
use halcyon::{BufferParams, Timepoints};
use halcyon_cuda::sys::{self, Code};

use crate::{configured, BYTES};

/// `Ok` for `CUDA_SUCCESS`, else what failed.
fn ok(code: Code, call: &str) -> Result<(), String> {
    match code.is_success() {
        true => Ok(()),
        false => Err(format!("{call} failed: {code:?}")),
    }
}

/// The driver API alone: both devices' primary contexts, a non-blocking stream of `cuda://1`,
/// and a buffer of [`BYTES`] on each device. Made once the probe succeeded.
struct Raw {
    devices: [CUdevice; 2],
    contexts: [CUcontext; 2],
    stream: CUstream,
    source: CUdeviceptr,
    target: CUdeviceptr,
}

impl Raw {
    fn new() -> Result<Raw, String> {
        let mut raw = Raw {
            devices: [0; 2],
            contexts: [std::ptr::null_mut(); 2],
            stream: std::ptr::null_mut(),
            source: 0,
            target: 0,
        };
        let bytes = BYTES as usize;
        // SAFETY: (this block) the probe succeeded before this runs (see `run`); every
        // out-pointer is valid, every handle was made just above it and is live; each
        // allocation is made with its own device's context current.
        unsafe {
            for ordinal in 0..2 {
                let device = &mut raw.devices[ordinal];
                ok(sys::cuDeviceGet(device, ordinal as i32), "cuDeviceGet")?;
                let context = &mut raw.contexts[ordinal];
                ok(
                    sys::cuDevicePrimaryCtxRetain(context, *device),
                    "cuDevicePrimaryCtxRetain",
                )?;
            }
            ok(sys::cuCtxSetCurrent(raw.contexts[0]), "cuCtxSetCurrent")?;
            ok(sys::cuMemAlloc_v2(&mut raw.source, bytes), "cuMemAlloc")?;
            ok(sys::cuCtxSetCurrent(raw.contexts[1]), "cuCtxSetCurrent")?;
            ok(sys::cuMemAlloc_v2(&mut raw.target, bytes), "cuMemAlloc")?;
            let non_blocking = CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint;
            ok(
                sys::cuStreamCreate(&mut raw.stream, non_blocking),
                "cuStreamCreate",
            )?;
            // halcyon's device over the same primary context may have enabled it already.
            let enabled = sys::cuCtxEnablePeerAccess(raw.contexts[0], 0);
            if !enabled.is(CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
                ok(enabled, "cuCtxEnablePeerAccess")?;
            }
        }
        Ok(raw)
    }

    /// Makes `cuda://1`'s context current on this thread, where the raw copies are enqueued.
    fn bind(&self) {
        // SAFETY: a primary context this value retains.
        let bound = unsafe { sys::cuCtxSetCurrent(self.contexts[1]) };
        ok(bound, "cuCtxSetCurrent").unwrap();
    }

    /// One `cuMemcpyPeerAsync` from the source to the target, waited for.
    fn peer(&self) {
        let (from, to) = (self.contexts[0], self.contexts[1]);
        // SAFETY: both buffers are live allocations of BYTES in their contexts; the stream is
        // live and its context current (`bind`).
        unsafe {
            let copy = sys::cuMemcpyPeerAsync(
                self.target,
                to,
                self.source,
                from,
                BYTES as usize,
                self.stream,
            );
            ok(copy, "cuMemcpyPeerAsync").unwrap();
            ok(sys::cuStreamSynchronize(self.stream), "cuStreamSynchronize").unwrap();
        }
    }

    /// One `cuMemcpyAsync` (unified addresses) from the source to the target, waited for.
    fn unified(&self) {
        // SAFETY: as in `peer`; the current context reaches the source through peer access.
        unsafe {
            let copy = sys::cuMemcpyAsync(self.target, self.source, BYTES as usize, self.stream);
            ok(copy, "cuMemcpyAsync").unwrap();
            ok(sys::cuStreamSynchronize(self.stream), "cuStreamSynchronize").unwrap();
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: what `new` made, released once, each with its own context current.
        unsafe {
            if !self.stream.is_null() {
                let _ = sys::cuCtxSetCurrent(self.contexts[1]);
                let _ = sys::cuStreamDestroy_v2(self.stream);
                let _ = sys::cuMemFree_v2(self.target);
                let _ = sys::cuCtxSetCurrent(self.contexts[0]);
                let _ = sys::cuMemFree_v2(self.source);
            }
            let _ = sys::cuCtxSetCurrent(std::ptr::null_mut());
            for (context, device) in self.contexts.iter().zip(self.devices) {
                if !context.is_null() {
                    let _ = sys::cuDevicePrimaryCtxRelease_v2(device);
                }
            }
        }
    }
}

/// `cuda_peer`, if `cuda://0` and `cuda://1` exist.
pub fn run(c: &mut Criterion) {
    if std::env::var_os("HALCYON_CUDA_BENCH_FAKE").is_some() {
        if let Err(e) = halcyon_fake_gpu::client::Fake::load() {
            println!("cross_device cuda_peer group skipped: cannot load the fake driver: {e}");
            return;
        }
    }
    if let Err(e) = halcyon_cuda::probe::probe() {
        println!("cross_device cuda_peer group skipped: {e}");
        return;
    }
    let devices =
        halcyon_cuda::create_device(0).and_then(|a| Ok((a, halcyon_cuda::create_device(1)?)));
    let (a, b) = match devices {
        Ok(devices) => devices,
        Err(e) => {
            println!("cross_device cuda_peer group skipped: it needs cuda://0 and cuda://1: {e}");
            return;
        }
    };
    let reach = b.peer_reach(&a);
    println!("cross_device cuda_peer: cuda://1 reaches cuda://0 {reach:?}");
    if reach != Reach::Direct {
        println!("  (no peer access: copy_from is staged through host memory)");
    }
    let (qa, qb) = (a.queue(0).unwrap(), b.queue(0).unwrap());
    let on_a = a.allocator().allocate(BYTES, BufferParams::DEVICE).unwrap();
    let on_b = b.allocator().allocate(BYTES, BufferParams::DEVICE).unwrap();
    block_on(qa.fill(Timepoints::default(), 0x5au8, &on_a.whole())).unwrap();
    let raw = match Raw::new() {
        Ok(raw) => raw,
        Err(e) => {
            println!("cross_device cuda_peer group skipped: {e}");
            return;
        }
    };

    let mut group = configured(c, "cuda_peer");
    group.bench_function("copy_from", |bench| {
        bench.iter(|| {
            let copy = qb.copy_from(Timepoints::default(), &qa, &on_a.whole(), &on_b.whole());
            block_on(copy).unwrap()
        })
    });
    group.bench_function("raw_memcpy_peer_async", |bench| {
        raw.bind();
        bench.iter(|| raw.peer())
    });
    group.bench_function("raw_memcpy_async", |bench| {
        raw.bind();
        bench.iter(|| raw.unified())
    });
    group.finish();
}
