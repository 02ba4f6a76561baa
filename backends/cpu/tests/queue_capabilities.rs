//! Queue capabilities: a transfer-only queue is found through `Device::queue_affinity` and
//! refuses dispatches before they reach the backend, failing the signal fence in order (through
//! a failing host call); transfers run.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use halcyon::backend::{BufferMemory, DeviceBackend, ExecutableBackend, Work};
use halcyon::device::keys;
use halcyon::{
    BufferParams, Device, DeviceInfo, EntryPoint, ExecutableSpec, Fence, QueueCapabilities, Result,
    Semaphore, StatusCode, Timepoints,
};
use halcyon_cpu::{CpuDeviceOptions, RustKernels};

/// A CPU device whose queue 1 is transfer-only (like a Vulkan transfer family).
struct TransferQueue {
    cpu: Arc<dyn DeviceBackend>,
    submits: AtomicU32,
    /// Submissions that were not host calls: work that reached the device.
    device_work: AtomicU32,
}

impl DeviceBackend for TransferQueue {
    fn info(&self) -> &DeviceInfo {
        self.cpu.info()
    }
    fn query(&self, key: &str) -> Option<i64> {
        match key {
            // Vulkan's smallest maxComputeWorkGroupCount (lavapipe's) in x and z.
            keys::names::MAX_WORKGROUP_COUNT_X | keys::names::MAX_WORKGROUP_COUNT_Z => Some(65535),
            _ => self.cpu.query(key),
        }
    }
    fn queue_count(&self) -> u32 {
        2
    }
    fn allocate(&self, size: u64, params: &BufferParams) -> Result<Arc<dyn BufferMemory>> {
        self.cpu.allocate(size, params)
    }
    fn executable_formats(&self) -> Vec<String> {
        self.cpu.executable_formats()
    }
    fn load_executable(&self, spec: &ExecutableSpec) -> Result<Box<dyn ExecutableBackend>> {
        self.cpu.load_executable(spec)
    }
    fn queue_capabilities(&self, queue: u32) -> QueueCapabilities {
        match queue {
            1 => QueueCapabilities::TRANSFER,
            _ => QueueCapabilities::all(),
        }
    }
    fn submit(&self, _queue: u32, wait: Fence, signal: Fence, work: Work) {
        self.submits.fetch_add(1, Ordering::SeqCst);
        if !matches!(work, Work::HostCall(_)) {
            self.device_work.fetch_add(1, Ordering::SeqCst);
        }
        self.cpu.submit(0, wait, signal, work)
    }
}

fn device() -> (Device, Arc<TransferQueue>) {
    let cpu = halcyon_cpu::create_device(CpuDeviceOptions::default()).unwrap();
    let backend = Arc::new(TransferQueue {
        cpu: cpu.backend().clone(),
        submits: AtomicU32::new(0),
        device_work: AtomicU32::new(0),
    });
    (Device::from_backend(backend.clone()), backend)
}

#[test]
fn affinity_selects_queues_by_capability() {
    let (device, _) = device();
    assert_eq!(device.queue_affinity(QueueCapabilities::DISPATCH), 0b01);
    assert_eq!(device.queue_affinity(QueueCapabilities::TRANSFER), 0b11);
    assert_eq!(device.queue_affinity(QueueCapabilities::all()), 0b01);
    assert_eq!(
        device.queue(1).unwrap().capabilities(),
        QueueCapabilities::TRANSFER
    );
    let dispatch = device
        .queues(device.queue_affinity(QueueCapabilities::DISPATCH))
        .unwrap();
    assert_eq!(dispatch.len(), 1);
    assert_eq!(dispatch[0].index(), 0);
}

#[test]
fn a_transfer_queue_refuses_dispatches_and_runs_transfers() {
    let (device, backend) = device();
    let entry = EntryPoint {
        name: "add_one".into(),
        workgroup_size: [64, 1, 1],
        binding_count: 1,
        constant_count: 0,
    };
    let spec = RustKernels::new().entry(entry, |_| Ok(())).spec();
    let executable = device.load_executable(&spec).unwrap();
    let buffer = device
        .allocator()
        .allocate(256, BufferParams::HOST)
        .unwrap();
    let transfer = device.queue(1).unwrap();
    futures::executor::block_on(async {
        let signal = Semaphore::new(0);
        let submission = transfer.dispatch(
            Timepoints::new(Fence::new(), Fence::at(&signal, 1)),
            &executable
                .kernel("add_one")
                .unwrap()
                .launch([1, 1, 1])
                .binding(buffer.whole()),
        );
        let error = submission.await.unwrap_err();
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
        let message = error.to_string();
        assert!(
            message.contains("queue 1") && message.contains("DISPATCH"),
            "{message}"
        );
        assert!(message.contains("queue_affinity"), "{message}");
        assert_eq!(
            signal.query().unwrap_err().code(),
            StatusCode::InvalidArgument
        );
        assert_eq!(
            backend.device_work.load(Ordering::SeqCst),
            0,
            "the dispatch reached the backend"
        );
        assert_eq!(
            backend.submits.load(Ordering::SeqCst),
            1,
            "no failing host call"
        );
        transfer
            .fill(Timepoints::default(), 7u8, &buffer.whole())
            .await
            .unwrap();
        let bytes = transfer
            .read::<u8>(Timepoints::default(), &buffer.whole())
            .await
            .unwrap();
        assert!(bytes.iter().all(|&b| b == 7));
        device
            .queue(0)
            .unwrap()
            .dispatch(
                Timepoints::default(),
                &executable
                    .kernel("add_one")
                    .unwrap()
                    .launch([1, 1, 1])
                    .binding(buffer.whole()),
            )
            .await
            .unwrap();
    });
    assert_eq!(backend.submits.load(Ordering::SeqCst), 4);
    assert_eq!(backend.device_work.load(Ordering::SeqCst), 3);
}

/// A dispatch with more workgroups in one dimension than the device allows is refused at
/// submission (`InvalidArgument` naming the dimension, the count and the limit), before the
/// backend sees it; one at the limit runs.
#[test]
fn workgroup_counts_are_checked_against_the_device_limits() {
    let (device, backend) = device();
    assert_eq!(device.max_workgroup_count(), [65535, u32::MAX, 65535]);
    let entry = EntryPoint {
        name: "noop".into(),
        workgroup_size: [1, 1, 1],
        binding_count: 0,
        constant_count: 0,
    };
    let spec = RustKernels::new().entry(entry, |_| Ok(())).spec();
    let executable = device.load_executable(&spec).unwrap();
    let queue = device.queue(0).unwrap();
    futures::executor::block_on(async {
        for workgroups in [[70_000, 1, 1], [1, 1, 65536]] {
            let error = queue
                .dispatch(
                    Timepoints::default(),
                    &executable.kernel("noop").unwrap().launch(workgroups),
                )
                .await
                .unwrap_err();
            assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
            let message = error.to_string();
            assert!(message.contains("at most 65535"), "{message}");
            assert!(message.contains("'noop'"), "{message}");
        }
        assert_eq!(backend.device_work.load(Ordering::SeqCst), 0);
        queue
            .dispatch(
                Timepoints::default(),
                &executable.kernel("noop").unwrap().launch([65535, 2, 1]),
            )
            .await
            .unwrap();
    });
}
