//! Device faults on the fake CUDA driver (see `tests/fake_driver.rs`): a kernel that faults
//! the device makes the context's error sticky, as on a GPU, until every user of the primary
//! context has released it. So these tests run one at a time, in a process of their own. A
//! contract violation aborts the process (the fake's default), so none is asserted on; the
//! fake does not report leaks from a context that faulted (CUDA drops host functions, and what
//! they hold, after a fault).

mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use halcyon::{Fence, Timepoints};
use halcyon_conformance::harness::{block_on, download_u32, upload_u32};
use halcyon_cuda::{create_device_with, CudaDeviceOptions};
use halcyon_fake_gpu::client::Fake;
use halcyon_stream::CompletionStrategy;

/// One test at a time: a fault is the whole process's.
static SERIAL: Mutex<()> = Mutex::new(());

/// `CUDA_ERROR_ILLEGAL_ADDRESS`.
const ILLEGAL_ADDRESS: u32 = 700;

fn fake_or_skip(test: &str) -> Option<&'static Fake> {
    match Fake::load() {
        Ok(fake) => Some(fake),
        Err(e) => {
            assert!(!e.contains("was not built"), "{e}");
            eprintln!("skipped {test}: {e}");
            None
        }
    }
}

fn options(completion: CompletionStrategy) -> CudaDeviceOptions {
    CudaDeviceOptions::default()
        .with_completion(completion)
        .with_probe_interval(Duration::from_millis(5))
}

/// Waits until the fake's context is gone (every device dropped, their threads ended) and so
/// its sticky error cleared.
fn wait_for_context_release(fake: &Fake) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.stats().context_retains > 0 {
        assert!(
            Instant::now() < deadline,
            "the devices never released the context"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(fake.sticky_error(), 0);
}

/// Under every completion strategy: the faulting dispatch fails with the driver's error (the
/// completion thread's event wait returns it; with host callbacks, which CUDA drops after a
/// fault, and with flags, which a faulted device never writes, the fault probe finds it), so does everything submitted after it, nothing hangs,
/// and once the device is dropped a new one works.
#[test]
fn a_device_fault_fails_the_work_in_flight_and_after_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(fake) = fake_or_skip("a_device_fault_fails_the_work_in_flight_and_after_it") else {
        return;
    };
    for completion in [
        CompletionStrategy::CompletionThread,
        CompletionStrategy::HostCallback,
        CompletionStrategy::FlagWrite,
    ] {
        let device = create_device_with(0, options(completion)).unwrap();
        let executable = device
            .load_executable(&common::standard_module().spec())
            .unwrap();
        let add_one = executable.kernel("add_one_u32").unwrap();
        let queue = device.queue(0).unwrap();
        let buffer = block_on(upload_u32(&queue, &[1, 2, 3, 4])).unwrap();
        let dispatch = || {
            queue.dispatch(
                Timepoints::default(),
                &add_one
                    .launch([1, 1, 1])
                    .constant(4u32)
                    .binding(buffer.whole()),
            )
        };
        block_on(dispatch()).unwrap();

        fake.fault_next_kernel(ILLEGAL_ADDRESS);
        let e = block_on(dispatch()).unwrap_err();
        assert!(
            e.message().contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
            "{completion:?}: {e}"
        );
        let e = block_on(dispatch()).unwrap_err();
        assert!(
            e.message().contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
            "{completion:?}: work after the fault: {e}"
        );
        let e = block_on(download_u32(&queue, Fence::new(), &buffer.whole())).unwrap_err();
        println!("{completion:?}: a read after the fault: {e}");

        drop((buffer, queue, add_one, executable, device));
        wait_for_context_release(fake);

        // A fresh device on a fresh context.
        let device = create_device_with(0, options(completion)).unwrap();
        let queue = device.queue(0).unwrap();
        let buffer = block_on(upload_u32(&queue, &[9, 8])).unwrap();
        let out = block_on(download_u32(&queue, Fence::new(), &buffer.whole())).unwrap();
        assert_eq!(out, [9, 8]);
        drop((buffer, queue, device));
        wait_for_context_release(fake);
    }
}

/// A `trap` kernel (PTX of its own) faults the device the same way, and the error names the
/// launch failure.
#[test]
fn a_trapping_kernel_fails_its_dispatch() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(fake) = fake_or_skip("a_trapping_kernel_fails_its_dispatch") else {
        return;
    };
    let device = create_device_with(0, options(CompletionStrategy::CompletionThread)).unwrap();
    let trap = halcyon_cuda::CudaModule::ptx(
        ".version 8.0\n.target sm_52\n.address_size 64\n.visible .entry trap()\n{\n\ttrap;\n}\n",
        vec![halcyon::EntryPoint {
            name: "trap".into(),
            workgroup_size: [1, 1, 1],
            binding_count: 0,
            constant_count: 0,
        }],
    );
    let executable = device.load_executable(&trap.spec()).unwrap();
    let queue = device.queue(0).unwrap();
    let e = block_on(queue.dispatch(
        Timepoints::default(),
        &executable.kernel("trap").unwrap().launch([1, 1, 1]),
    ))
    .unwrap_err();
    assert!(e.message().contains("CUDA_ERROR_LAUNCH_FAILED"), "{e}");
    drop((queue, executable, device));
    wait_for_context_release(fake);
}

/// Two devices (`cuda://0` and `cuda://1`, each with its own primary context): a fault on one
/// fails that device's work in flight and after it, while the other goes on as if nothing
/// happened, under both completion strategies; dropping the faulted device releases only its
/// context.
#[test]
fn a_fault_on_one_device_leaves_the_other_working() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(fake) = fake_or_skip("a_fault_on_one_device_leaves_the_other_working") else {
        return;
    };
    for completion in [
        CompletionStrategy::CompletionThread,
        CompletionStrategy::HostCallback,
        CompletionStrategy::FlagWrite,
    ] {
        let devices = [0, 1].map(|index| create_device_with(index, options(completion)).unwrap());
        let add_one = devices.each_ref().map(|device| {
            device
                .load_executable(&common::standard_module().spec())
                .unwrap()
                .kernel("add_one_u32")
                .unwrap()
        });
        let queues = devices.each_ref().map(|device| device.queue(0).unwrap());
        let buffers = queues
            .each_ref()
            .map(|queue| block_on(upload_u32(queue, &[1, 2, 3, 4])).unwrap());
        let dispatch = |i: usize| {
            queues[i].dispatch(
                Timepoints::default(),
                &add_one[i]
                    .launch([1, 1, 1])
                    .constant(4u32)
                    .binding(buffers[i].whole()),
            )
        };
        block_on(dispatch(0)).unwrap();
        block_on(dispatch(1)).unwrap();

        fake.fault_next_kernel(ILLEGAL_ADDRESS);
        let e = block_on(dispatch(0)).unwrap_err();
        assert!(e.message().contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{e}");
        let e = block_on(dispatch(0)).unwrap_err();
        assert!(
            e.message().contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
            "{completion:?}: device 0 after its fault: {e}"
        );
        for _ in 0..3 {
            block_on(dispatch(1)).unwrap_or_else(|e| {
                panic!("{completion:?}: device 1 failed after device 0's fault: {e}")
            });
        }
        let out = block_on(download_u32(&queues[1], Fence::new(), &buffers[1].whole())).unwrap();
        assert_eq!(out, [5, 6, 7, 8], "{completion:?}: device 1's results");

        let [b0, b1] = buffers;
        let [q0, q1] = queues;
        let [x0, x1] = add_one;
        let [d0, d1] = devices;
        drop((b0, q0, x0, d0));
        // Device 0's context goes once its threads end; device 1 still works meanwhile.
        let buffer = block_on(upload_u32(&q1, &[7])).unwrap();
        let out = block_on(download_u32(&q1, Fence::new(), &buffer.whole())).unwrap();
        assert_eq!(out, [7]);
        drop((buffer, b1, q1, x1, d1));
        wait_for_context_release(fake);
    }
}
