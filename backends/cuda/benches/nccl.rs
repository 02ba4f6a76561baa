//! A 1-rank NCCL all-reduce through a halcyon channel against `ncclAllReduce` called directly,
//! in the same run, on `cuda://0`.
//!
//! Group `nccl_all_reduce_{4k,64m}` (f32 sum in place, submitted and awaited):
//!
//! * `raw/all_reduce_stream_sync`: `ncclAllReduce` on a stream of its own, then
//!   `cuStreamSynchronize`: the floor.
//! * `halcyon/all_reduce_block_on`: `queue.all_reduce` on a 1-rank channel
//!   (`LocalGroup::channels`), then `futures::executor::block_on` of the submission: the turn
//!   on the channel, the stream layer's enqueue and completion, the engine's verdict.
//!
//! NCCL comes from `libnccl.so.2` on the loader path, or from the file `HALCYON_NCCL_LIBRARY`
//! names (the `nvidia-nccl-cu12` wheel's, carried with the GPU bundle). Without a GPU, or
//! without NCCL, it says so and skips. `HALCYON_CUDA_BENCH_FAKE=1` runs it on the fake driver
//! and its NCCL, where it shows only that the path works (the fake's collectives are host
//! memcpys).

use std::ffi::c_void;

use criterion::{BenchmarkId, Criterion};
use cudarc::driver::sys::{CUcontext, CUdevice, CUdeviceptr, CUstream};
use cudarc::nccl::sys::{cudaStream_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclUniqueId};
use halcyon::channel::LocalGroup;
use halcyon::{BufferParams, ChannelParams, ElementType, ReduceOp, Timepoints};
use halcyon_cuda::nccl::Nccl;
use halcyon_cuda::sys;
use halcyon_cuda::{create_device_with, CudaDeviceOptions};

fn ok(code: sys::Code, what: &str) {
    assert!(code.is_success(), "{what}: {code:?}");
}

fn nccl_ok(code: u32, what: &str) {
    assert_eq!(code, 0, "{what}: NCCL error {code}");
}

/// NCCL called directly: a communicator of one rank, a stream and the memory.
struct Raw {
    nccl: &'static Nccl,
    comm: ncclComm_t,
    stream: CUstream,
    memory: CUdeviceptr,
}

impl Raw {
    fn new(nccl: &'static Nccl, bytes: usize) -> Raw {
        let mut device: CUdevice = 0;
        let mut context: CUcontext = std::ptr::null_mut();
        let mut raw = Raw {
            nccl,
            comm: std::ptr::null_mut(),
            stream: std::ptr::null_mut(),
            memory: 0,
        };
        let calls = nccl.calls();
        let mut id = ncclUniqueId { internal: [0; 128] };
        // SAFETY: the probe succeeded (see main); every out-pointer is valid; the context is
        // made current before the calls that need one.
        unsafe {
            ok(sys::cuDeviceGet(&mut device, 0), "cuDeviceGet");
            ok(
                sys::cuDevicePrimaryCtxRetain(&mut context, device),
                "retain",
            );
            ok(sys::cuCtxSetCurrent(context), "cuCtxSetCurrent");
            ok(sys::cuStreamCreate(&mut raw.stream, 1), "cuStreamCreate");
            ok(sys::cuMemAlloc_v2(&mut raw.memory, bytes), "cuMemAlloc");
            nccl_ok((calls.ncclGetUniqueId)(&mut id), "ncclGetUniqueId");
            nccl_ok(
                (calls.ncclCommInitRank)(&mut raw.comm, 1, id, 0),
                "ncclCommInitRank",
            );
        }
        raw
    }

    fn all_reduce(&self, elements: usize) {
        let calls = self.nccl.calls();
        let ptr = self.memory as usize as *mut c_void;
        // SAFETY: live communicator, stream and memory of `elements` f32s; the context is
        // current on this thread (criterion runs the routines on the thread that made it).
        unsafe {
            nccl_ok(
                (calls.ncclAllReduce)(
                    ptr,
                    ptr,
                    elements,
                    ncclDataType_t::ncclFloat32,
                    ncclRedOp_t::ncclSum,
                    self.comm,
                    self.stream as cudaStream_t,
                ),
                "ncclAllReduce",
            );
            ok(sys::cuStreamSynchronize(self.stream), "cuStreamSynchronize");
        }
    }
}

fn main() {
    let fake = std::env::var_os("HALCYON_CUDA_BENCH_FAKE").is_some();
    if fake {
        match halcyon_fake_gpu::client::Fake::load() {
            // SAFETY: the fake driver exports NCCL's API.
            Ok(fake) => drop(unsafe { Nccl::use_library(fake.path()) }),
            Err(e) => return println!("skipping the NCCL benchmark: no fake driver: {e}"),
        }
    } else if let Some(path) = std::env::var_os("HALCYON_NCCL_LIBRARY") {
        // SAFETY: the caller names an NCCL.
        if let Err(e) = unsafe { Nccl::use_library(&path) } {
            return println!("skipping the NCCL benchmark: {e}");
        }
    }
    if let Err(e) = halcyon_cuda::probe::probe() {
        return println!("skipping the NCCL benchmark: {e}");
    }
    let nccl = match Nccl::load() {
        Ok(nccl) => nccl,
        Err(e) => return println!("skipping the NCCL benchmark: {e}"),
    };
    let device = match create_device_with(0, CudaDeviceOptions::default()) {
        Ok(device) => device,
        Err(e) => return println!("skipping the NCCL benchmark: {e}"),
    };
    println!("NCCL {} from {}", nccl.version(), nccl.name());
    let channel = LocalGroup::channels(std::slice::from_ref(&device), &ChannelParams::default())
        .expect("a 1-rank NCCL channel")
        .remove(0);
    let queue = device.queue(0).unwrap();
    let mut criterion = Criterion::default().configure_from_args();
    for (name, bytes) in [
        ("nccl_all_reduce_4k", 4096usize),
        ("nccl_all_reduce_64m", 64 << 20),
    ] {
        let raw = Raw::new(nccl, bytes);
        let buffer = device
            .allocator()
            .allocate(bytes as u64, BufferParams::DEVICE)
            .unwrap();
        let all = buffer.whole();
        let mut group = criterion.benchmark_group(name);
        group.bench_function(BenchmarkId::new("raw", "all_reduce_stream_sync"), |b| {
            b.iter(|| raw.all_reduce(bytes / 4))
        });
        group.bench_function(BenchmarkId::new("halcyon", "all_reduce_block_on"), |b| {
            b.iter(|| {
                let sum = queue.all_reduce(
                    Timepoints::default(),
                    &channel,
                    ReduceOp::Sum,
                    ElementType::F32,
                    &all,
                    &all,
                );
                futures::executor::block_on(sum).unwrap()
            })
        });
        group.finish();
    }
    criterion.final_summary();
}
