//! halcyon-cuda on the fake CUDA driver (see `tests/fake_driver.rs`) as on a system where
//! pinned host memory has no single address: `cuMemHostGetDevicePointer` answers a device
//! address that differs from the host address. There the API refuses
//! `MemoryPlacement::Pinned` (`Unimplemented`, freeing what it allocated), the stream layer's
//! queue updates and reads fall back to the API's staging, and only a dispatch whose kernel
//! takes a status word fails, naming why. The setting is the whole driver's, so this is a
//! process of its own.

mod common;

use std::time::Duration;

use common::CudaKernels;
use halcyon::{Device, Error, StatusCode, Timepoints};
use halcyon_conformance::harness::{block_on, download_u32, upload_u32};
use halcyon_cuda::{create_device_with, probe, CudaApi, CudaDeviceOptions};
use halcyon_fake_gpu::client::Fake;
use halcyon_stream::{CompletionStrategy, MemoryPlacement, StreamApi};

/// The fake driver, loaded before anything opens libcuda, with mapped pointers that differ
/// from their host addresses. A fake that was not built is a test failure; one that another
/// libcuda.so.1 loaded first shadows skips.
fn unmapped_driver() -> Result<&'static Fake, String> {
    let fake = Fake::load();
    match &fake {
        Ok(fake) => fake.offset_mapped_pointers(true),
        Err(e) => assert!(!e.contains("was not built"), "{e}"),
    }
    fake
}

fn fake_device(completion: CompletionStrategy) -> halcyon::Result<Device> {
    unmapped_driver().map_err(|e| Error::new(StatusCode::Unavailable, e))?;
    create_device_with(
        0,
        CudaDeviceOptions::default()
            .with_queue_count(2)
            .with_completion(completion)
            .with_probe_interval(Duration::from_millis(10)),
    )
}

/// The conformance suite with every update and read staged by the API (no pinned leases).
mod completion_thread {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || fake_device(CompletionStrategy::CompletionThread),
        CudaKernels
    );
}

/// The same with host callbacks, which also carry the API's staging returns.
mod host_callback {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || fake_device(CompletionStrategy::HostCallback),
        CudaKernels
    );
}

/// `MemoryPlacement::Pinned` is `Unimplemented`, saying why; device memory is unaffected.
/// (That the refused allocation is freed is checked by the fake when the primary context is
/// released: a leak there aborts this process.)
#[test]
fn pinned_memory_is_refused() {
    if let Err(e) = unmapped_driver() {
        return eprintln!("skipped: {e}");
    }
    let api = CudaApi::new(probe::probe().unwrap(), 0).unwrap();
    let e = api.allocate(4096, MemoryPlacement::Pinned).unwrap_err();
    assert_eq!(e.code(), StatusCode::Unimplemented, "{e}");
    assert!(
        e.message().contains("differs from its host address")
            && e.message().contains("use queue reads and writes"),
        "{e}"
    );
    let device = api.allocate(4096, MemoryPlacement::Device).unwrap();
    api.free(device).unwrap();
}

/// Transfers of every size work through the API's staging, while a dispatch of a kernel that
/// takes a status word (which needs pinned memory the device writes over the bus) fails with
/// `Unimplemented`, naming the status words, and fails its chain without running the kernel.
#[test]
fn transfers_stage_and_status_words_fail_clearly() {
    let device = match fake_device(CompletionStrategy::CompletionThread) {
        Ok(device) => device,
        Err(e) => return eprintln!("skipped: {e}"),
    };
    let executable = device
        .load_executable(&common::standard_module().spec())
        .unwrap();
    let queue = device.queue(0).unwrap();
    for n in [1usize, 1000, 300_000] {
        let data: Vec<u32> = (0..n as u32).collect();
        let buffer = block_on(upload_u32(&queue, &data)).unwrap();
        let back = block_on(download_u32(&queue, halcyon::Fence::new(), &buffer.whole())).unwrap();
        assert_eq!(back, data, "{n} words");
    }
    let status = device.create_semaphore(0).unwrap();
    let fail = executable.kernel("fail").unwrap();
    let e = block_on(queue.dispatch(
        Timepoints::new(halcyon::Fence::new(), halcyon::Fence::at(&status, 1)),
        &fail.launch([1, 1, 1]),
    ))
    .unwrap_err();
    assert_eq!(e.code(), StatusCode::Unimplemented, "{e}");
    assert!(e.message().contains("status words"), "{e}");
    assert_eq!(
        status.query().unwrap_err().code(),
        StatusCode::Unimplemented
    );
}
