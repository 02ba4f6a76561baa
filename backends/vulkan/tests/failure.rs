//! Driver failures, simulated with [`FaultInjector`]: a failed `vkQueueSubmit` fails that
//! submission (and what waits on it) with the `VkResult` named; a lost device fails everything
//! in flight and everything after, never hangs a waiter, and never spins.

mod common;

use std::time::Duration;

use ash::vk;
use halcyon::{BufferParams, Device, Fence, Semaphore, StatusCode, Timepoints};
use halcyon_conformance::harness::{assert_error, block_on, done, within};
use halcyon_vulkan::{FaultInjector, VulkanDeviceOptions};

/// `vulkan://0` with `faults` armed, or `None` (reason printed) without Vulkan.
fn faulty_device(test: &str) -> Option<(Device, FaultInjector)> {
    let faults = FaultInjector::new();
    let options = VulkanDeviceOptions::default().with_faults(Some(faults.clone()));
    match halcyon_vulkan::create_device_with(0, options) {
        Ok(device) => Some((device, faults)),
        Err(error) if error.code() == StatusCode::Unavailable => {
            eprintln!("skipping {test}: no Vulkan: {error}");
            None
        }
        Err(error) => panic!("{test}: cannot create vulkan://0: {error}"),
    }
}

fn signals(semaphore: &Semaphore, value: u64) -> Timepoints {
    Timepoints::new(Fence::new(), Fence::at(semaphore, value))
}

/// An out-of-memory `vkQueueSubmit` fails that submission, its signal semaphore and the work
/// waiting on it, naming the call and the result; the device keeps working.
#[test]
fn a_failed_submit_fails_that_submission_and_its_dependents() {
    let Some((device, faults)) =
        faulty_device("a_failed_submit_fails_that_submission_and_its_dependents")
    else {
        return;
    };
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(256, BufferParams::HOST)?;
        let sem = device.create_semaphore(0)?;
        faults.fail_next_submit(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
        let failed = queue.fill(signals(&sem, 1), 9u8, &buffer.whole());
        let dependent = queue.fill(
            Timepoints::new(Fence::at(&sem, 1), Fence::new()),
            5u8,
            &buffer.whole(),
        );
        let mentions = ["vkQueueSubmit", "ERROR_OUT_OF_DEVICE_MEMORY"];
        assert_error(
            within("the failed fill", failed).await?,
            StatusCode::ResourceExhausted,
            &mentions,
        );
        assert_error(
            within("the dependent fill", dependent).await?,
            StatusCode::ResourceExhausted,
            &mentions,
        );
        assert_error(sem.query(), StatusCode::ResourceExhausted, &mentions);
        assert!(buffer.map_read(..)?.iter().all(|&b| b == 0));
        // Not a lost device: the next submission runs.
        done(
            "the next fill",
            queue.fill(Timepoints::default(), 3u8, &buffer.whole()),
        )
        .await?;
        assert!(buffer.map_read(..)?.iter().all(|&b| b == 3));
        Ok(())
    })
    .unwrap();
}

/// A device lost while work is in flight (reported by the completion thread's
/// `vkWaitSemaphores`) fails the in-flight submission, every later submission, and work still
/// parked on a host semaphore when that is released; dropping the device afterwards is clean.
#[test]
fn a_lost_device_fails_in_flight_parked_and_later_work() {
    let Some((device, faults)) =
        faulty_device("a_lost_device_fails_in_flight_parked_and_later_work")
    else {
        return;
    };
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(4096, BufferParams::DEVICE)?;
        let gate = Semaphore::new(0);
        let (parked_signal, in_flight_signal) = (device.create_semaphore(0)?, Semaphore::new(0));
        let parked = queue.fill(
            Timepoints::new(Fence::at(&gate, 1), Fence::at(&parked_signal, 1)),
            1u8,
            &buffer.whole(),
        );
        faults.fail_next_completion_wait(vk::Result::ERROR_DEVICE_LOST);
        let in_flight = queue.fill(signals(&in_flight_signal, 1), 2u8, &buffer.whole());
        let lost = [
            "vkWaitSemaphores",
            "ERROR_DEVICE_LOST",
            "vulkan://0 is lost",
        ];
        let error = assert_error(
            within("the in-flight fill", in_flight).await?,
            StatusCode::Aborted,
            &lost,
        );
        eprintln!("in flight: {error}");
        assert_error(in_flight_signal.query(), StatusCode::Aborted, &lost);
        // Later work fails at once, with the same cause.
        assert_error(
            within(
                "a later fill",
                queue.fill(Timepoints::default(), 3u8, &buffer.whole()),
            )
            .await?,
            StatusCode::Aborted,
            &lost,
        );
        let read = queue.read::<u8>(Timepoints::default(), &buffer.whole());
        assert_error(
            within("a later read", read).await?,
            StatusCode::Aborted,
            &lost,
        );
        // Parked work fails when its host wait is reached.
        gate.signal(1)?;
        assert_error(
            within("the parked fill", parked).await?,
            StatusCode::Aborted,
            &lost,
        );
        assert_error(parked_signal.query(), StatusCode::Aborted, &lost);
        // Waiting on a lost device's semaphore for a value nothing will signal does not hang
        // forever once the caller gives up, and host calls (no device involved) still run.
        let pending = device.create_semaphore(0)?;
        let wait = tokio::time::timeout(Duration::from_millis(50), pending.wait(1)).await;
        assert!(wait.is_err(), "nothing signals it");
        Ok(())
    })
    .unwrap();
    // Dropping the lost device releases what the failed submissions held without hanging.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(device);
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("dropping a lost device hangs");
}

/// A `vkQueueSubmit` that reports `VK_ERROR_DEVICE_LOST` loses the device too.
#[test]
fn a_lost_device_on_submit_fails_later_work() {
    let Some((device, faults)) = faulty_device("a_lost_device_on_submit_fails_later_work") else {
        return;
    };
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(64, BufferParams::HOST)?;
        faults.fail_next_submit(vk::Result::ERROR_DEVICE_LOST);
        let lost = ["vkQueueSubmit", "ERROR_DEVICE_LOST", "vulkan://0 is lost"];
        let first = queue.fill(Timepoints::default(), 1u8, &buffer.whole());
        assert_error(
            within("the lost fill", first).await?,
            StatusCode::Aborted,
            &lost,
        );
        let second = queue.fill(Timepoints::default(), 2u8, &buffer.whole());
        assert_error(
            within("a later fill", second).await?,
            StatusCode::Aborted,
            &lost,
        );
        assert!(buffer.map_read(..)?.iter().all(|&b| b == 0));
        Ok(())
    })
    .unwrap();
}

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0 // USER_HZ
}

/// After a loss, the reactor sleeps on a condition variable instead of a failing Vulkan wait:
/// a pending host wait costs (almost) no CPU, and releasing it is still prompt.
#[test]
fn a_lost_device_does_not_spin() {
    let Some((device, faults)) = faulty_device("a_lost_device_does_not_spin") else {
        return;
    };
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(64, BufferParams::HOST)?;
        faults.fail_next_submit(vk::Result::ERROR_DEVICE_LOST);
        let _ = queue
            .fill(Timepoints::default(), 1u8, &buffer.whole())
            .await;
        let gate = Semaphore::new(0);
        let parked = queue.host_call(
            Timepoints::new(Fence::at(&gate, 1), Fence::new()),
            || Ok(()),
        );
        let before = cpu_seconds();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let used = cpu_seconds() - before;
        eprintln!(
            "CPU over 1 s after a loss with a parked action: {:.3} s",
            used
        );
        assert!(used < 0.2, "{used} s of CPU in 1 s");
        gate.signal(1)?;
        // Host calls touch no device: they still run.
        done("the parked host call", parked).await?;
        Ok(())
    })
    .unwrap();
}
