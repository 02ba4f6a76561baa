//! halcyon-hip on the fake GPU runtime (see `tests/fake_runtime.rs`) as on a system where
//! pinned host memory has no single address: `hipHostGetDevicePointer` answers a device
//! address that differs from the host address. There `MemoryPlacement::Pinned` and mapped
//! host-visible memory are refused (`Unimplemented`, freeing what was allocated), the stream
//! layer's queue updates and reads fall back to the API's staging, which must still never
//! hand `hipMemcpyAsync` pageable memory (the fake aborts if it does), and only a dispatch
//! whose kernel takes a status word fails, naming why. The setting is the whole runtime's, so
//! this is a process of its own.

mod fake;

use std::time::Duration;

use halcyon::{Device, Fence, StatusCode, Timepoints};
use halcyon_conformance::harness::{block_on, download_u32, upload_u32};
use halcyon_conformance::Kernels;
use halcyon_hip::result::Hip;
use halcyon_hip::{HipDeviceOptions, HipDriver, HipStreamApi, HostVisibleMemory};
use halcyon_stream::{CompletionStrategy, MemoryPlacement, StreamApi};

use fake::{fake, FakeKernels};

/// The fake runtime, with mapped pointers that differ from their host addresses.
fn unmapped() -> Hip {
    fake().offset_mapped_pointers(true);
    fake::hip()
}

fn device(hip: Hip, completion: CompletionStrategy) -> halcyon::Result<Device> {
    HipDriver::with_hip(hip).create_device_with(
        0,
        &HipDeviceOptions::default()
            .with_queue_count(2)
            .with_completion(completion)
            .with_probe_interval(Duration::from_millis(10)),
    )
}

/// The conformance suite with every update and read staged by the API (no pinned leases).
mod completion_thread {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || device(unmapped(), CompletionStrategy::CompletionThread),
        FakeKernels
    );
}

/// The same with stream callbacks as on HIP 5.2, which also carry the API's staging returns.
mod stream_callbacks {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || {
            unmapped();
            device(fake::hip_5_2(), CompletionStrategy::HostCallback)
        },
        FakeKernels
    );
}

/// `MemoryPlacement::Pinned` and mapped host-visible memory are `Unimplemented`, saying why.
/// (That the refused allocation is freed is not asserted here: the other tests in this
/// process allocate meanwhile.)
#[test]
fn pinned_and_mapped_memory_are_refused() {
    let hip = unmapped();
    let api = HipStreamApi::new(hip, 0, HostVisibleMemory::Auto).unwrap();
    let e = api.allocate(4096, MemoryPlacement::Pinned).unwrap_err();
    assert_eq!(e.code(), StatusCode::Unimplemented, "{e}");
    assert!(e.message().contains("differs from"), "{e}");
    let mapped = HipStreamApi::new(hip, 0, HostVisibleMemory::MappedHost).and_then(|api| {
        api.allocate(4096, MemoryPlacement::HostVisible)
            .and_then(|ptr| api.free(ptr))
    });
    let e = mapped.unwrap_err();
    assert_eq!(e.code(), StatusCode::Unimplemented, "{e}");
    assert!(e.message().contains("differs from host address"), "{e}");
}

/// Transfers of every size work through the API's staging, while a dispatch of a kernel that
/// takes a status word fails with `Unimplemented`, naming the status words, and fails its
/// signal without running the kernel.
#[test]
fn transfers_stage_and_status_words_fail_clearly() {
    let device = device(unmapped(), CompletionStrategy::CompletionThread).unwrap();
    let executable = FakeKernels.load(&device).unwrap();
    let queue = device.queue(0).unwrap();
    for n in [1usize, 1000, 300_000] {
        let data: Vec<u32> = (0..n as u32).collect();
        let buffer = block_on(upload_u32(&queue, &data)).unwrap();
        let back = block_on(download_u32(&queue, Fence::new(), &buffer.whole())).unwrap();
        assert_eq!(back, data, "{n} words");
    }
    let status = device.create_semaphore(0).unwrap();
    let fail = executable.kernel("fail").unwrap();
    let e = block_on(queue.dispatch(
        Timepoints::new(Fence::new(), Fence::at(&status, 1)),
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
