//! Dropping the last handle of a pool device while an operation runs and a later one waits on
//! it: the running operation reports its own outcome (it completed), and only work never issued
//! is aborted. Before the fix the device's reactor shut down at once, the waiting operation's
//! `Aborted` failed the shared timeline semaphore, and the running operation, which had written
//! its bytes, reported `Aborted` too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use halcyon::{BufferParams, EntryPoint, StatusCode};
use halcyon_cpu::{CpuDeviceOptions, ExecutionMode, RustKernels};

const HANG: Duration = Duration::from_secs(20);

/// A flag one side raises and the other waits for (polling; the waits are short).
#[derive(Clone, Default)]
struct Flag(Arc<AtomicBool>);

impl Flag {
    fn raise(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn wait(&self) {
        let start = Instant::now();
        while !self.0.load(Ordering::SeqCst) {
            assert!(start.elapsed() < HANG, "a test flag was never raised");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn pool_device() -> halcyon::Device {
    halcyon_cpu::create_device(
        CpuDeviceOptions::default()
            .with_mode(ExecutionMode::Pool { workers: 2 })
            .with_queue_count(1),
    )
    .expect("create a pool device")
}

#[test]
fn a_running_dispatch_reports_its_own_outcome_when_the_device_is_dropped() {
    let device = pool_device();
    let (started, release) = (Flag::default(), Flag::default());
    let (kernel_started, kernel_release) = (started.clone(), release.clone());
    let spec = RustKernels::new()
        .entry(
            EntryPoint {
                name: "slow_fill".into(),
                workgroup_size: [1, 1, 1],
                binding_count: 1,
                constant_count: 0,
            },
            move |ctx| {
                kernel_started.raise();
                kernel_release.wait();
                ctx.chunk_mut::<u32>(0, 16)?.fill(7);
                Ok(())
            },
        )
        .spec();
    let executable = device.load_executable(&spec).unwrap();
    let buffer = device
        .allocator()
        .allocate(64, BufferParams::DEVICE)
        .unwrap();
    let queue = device.queue(0).unwrap();
    let timeline = queue.timeline().unwrap();
    let running = queue.dispatch(
        timeline.next(),
        &executable
            .kernel("slow_fill")
            .unwrap()
            .launch([1, 1, 1])
            .binding(buffer.whole()),
    );
    // Waits on the dispatch, so it is pending on the reactor when the device goes.
    let waiting = queue.read::<u8>(timeline.next(), &buffer.whole());
    started.wait();
    drop((device, queue, executable, buffer, timeline));
    release.raise();

    futures::executor::block_on(async {
        let outcome = running.await;
        assert!(
            outcome.is_ok(),
            "the dispatch that ran to completion reported {outcome:?}"
        );
        // The read waited on the dispatch: it was issued once the dispatch signalled (then it
        // reads the dispatch's bytes), or aborted if it never was.
        match waiting.await {
            Ok(bytes) => assert!(
                bytes.chunks_exact(4).all(|c| c == 7u32.to_le_bytes()),
                "{bytes:?}"
            ),
            Err(error) => assert_eq!(error.code(), StatusCode::Aborted, "{error}"),
        }
    });
}

#[test]
fn a_host_call_holding_the_last_handle_reports_its_own_outcome() {
    let device = pool_device();
    let queue = device.queue(0).unwrap();
    let timeline = queue.timeline().unwrap();
    let (started, release, ran) = (Flag::default(), Flag::default(), Flag::default());
    let (call_started, call_release, call_ran) = (started.clone(), release.clone(), ran.clone());
    let last_handle = device.clone();
    let running = queue.host_call(timeline.next(), move || {
        call_started.raise();
        call_release.wait();
        call_ran.raise();
        // The device's last handle drops when this call returns, on a pool worker.
        drop(last_handle);
        Ok(())
    });
    let waiting = queue.host_call(timeline.next(), || Ok(()));
    started.wait();
    drop((device, queue, timeline));
    release.raise();

    futures::executor::block_on(async {
        let outcome = running.await;
        assert!(
            outcome.is_ok(),
            "the host call that ran reported {outcome:?}"
        );
        ran.wait();
        if let Err(error) = waiting.await {
            assert_eq!(error.code(), StatusCode::Aborted, "{error}");
        }
    });
}

#[test]
fn work_never_issued_is_still_aborted() {
    let device = pool_device();
    let queue = device.queue(0).unwrap();
    let gate = device.create_semaphore(0).unwrap();
    let signal = device.create_semaphore(0).unwrap();
    let ran = Flag::default();
    let call_ran = ran.clone();
    let pending = queue.host_call(
        (halcyon::Fence::at(&gate, 1), halcyon::Fence::at(&signal, 1)),
        move || {
            call_ran.raise();
            Ok(())
        },
    );
    drop((device, queue));
    let error = futures::executor::block_on(pending).expect_err("gated work ran");
    assert_eq!(error.code(), StatusCode::Aborted, "{error}");
    gate.signal(1).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(!ran.0.load(Ordering::SeqCst), "the aborted call ran");
}
