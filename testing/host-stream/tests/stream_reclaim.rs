//! Frees of buffer memory and unloads of modules whose last reference goes while a submission
//! is settled: they are made by the device's reclaimer thread, not on the completion path (a
//! GPU free or unload may wait for the device), and an allocation that follows never fails for
//! memory whose free is pending.

use std::time::Duration;

use halcyon::{BufferParams, EntryPoint, Result, StatusCode, Timepoints};
use halcyon_conformance::harness::{block_on, done, eventually};
use halcyon_host_stream::{HostModule, HostStreamApi, LaunchArgs};
use halcyon_stream::{create_device, keys, StreamDeviceOptions};

#[path = "common/stream.rs"]
mod stream_device;

use stream_device::{device, stat, STRATEGIES};

/// A buffer the application drops while a submission uses it is freed when the submission is
/// settled, by the reclaimer; one dropped by the application with nothing in flight is freed
/// at once, on the application's thread.
#[test]
fn memory_released_while_settling_goes_to_the_reclaimer() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        block_on(async {
            let before = api.stats().allocations;
            let idle = device.allocator().allocate(4096, BufferParams::DEVICE)?;
            drop(idle);
            assert_eq!(
                api.stats().allocations,
                before,
                "{strategy:?}: freed at once"
            );
            assert_eq!(stat(&device, keys::DEFERRED_FREES), 0);

            let buffer = device.allocator().allocate(4096, BufferParams::DEVICE)?;
            let hold = api.hold();
            let fill = queue.fill(Timepoints::default(), 1u8, &buffer.whole());
            drop(buffer); // the submission holds the memory now
            assert_eq!(api.stats().allocations, before + 1);
            drop(hold);
            done("fill", fill).await?;
            assert_eq!(stat(&device, keys::DEFERRED_FREES), 1, "{strategy:?}");
            eventually("the reclaimer freed it", || {
                api.stats().allocations == before
            })
            .await
        })?;
    }
    Ok(())
}

/// A buffer or an executable the application drops while other work is in flight on the
/// device goes to the reclaimer too: on CUDA and HIP the free or unload would wait for that
/// work, blocking the dropping thread (perhaps an async executor's worker). Once the device is
/// idle again, drops free at once.
#[test]
fn memory_dropped_while_the_device_is_busy_goes_to_the_reclaimer() -> Result<()> {
    let entry = EntryPoint {
        name: "noop".into(),
        workgroup_size: [1, 1, 1],
        binding_count: 0,
        constant_count: 0,
    };
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        block_on(async {
            let before = api.stats().allocations;
            let idle = device.allocator().allocate(4096, BufferParams::DEVICE)?;
            let executable = device.load_executable(
                &HostModule::new()
                    .kernel(entry.clone(), |_: &LaunchArgs<'_>| Ok(()))
                    .spec(),
            )?;
            let busy = device.allocator().allocate(4096, BufferParams::DEVICE)?;
            let hold = api.hold();
            let fill = queue.fill(Timepoints::default(), 1u8, &busy.whole());
            drop(idle);
            drop(executable);
            assert_eq!(
                stat(&device, keys::DEFERRED_FREES),
                2,
                "{strategy:?}: handed over while the fill is in flight"
            );
            drop(hold);
            done("fill", fill).await?;
            eventually("the reclaimer freed and unloaded them", || {
                api.stats().allocations == before + 1 && api.stats().modules == 0
            })
            .await?;
            eventually("the fill is settled", || {
                stat(&device, keys::IN_FLIGHT) == 0
            })
            .await?;
            drop(busy);
            assert_eq!(
                api.stats().allocations,
                before,
                "{strategy:?}: idle, freed at once"
            );
            assert_eq!(stat(&device, keys::DEFERRED_FREES), 2);
            Ok(())
        })?;
    }
    Ok(())
}

/// On a device with room for one 600 KiB buffer, a task that drops its buffer while a
/// submission uses it, awaits the submission and allocates again always succeeds: the memory
/// is freed, or its free is pending with the reclaimer and the allocation waits for it.
#[test]
fn an_allocation_after_awaiting_never_fails_for_a_pending_free() -> Result<()> {
    const SIZE: u64 = 600 << 10;
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        api.limit_memory(1 << 20);
        // Each free takes a while, so the allocation below finds it pending.
        api.delay_frees(Duration::from_millis(2));
        block_on(async {
            let mut buffer = device.allocator().allocate(SIZE, BufferParams::DEVICE)?;
            let error = device
                .allocator()
                .allocate(SIZE, BufferParams::DEVICE)
                .expect_err("the limit leaves room for one buffer");
            assert_eq!(error.code(), StatusCode::ResourceExhausted, "{error}");
            for round in 0..50 {
                let hold = api.hold();
                let fill = queue.fill(Timepoints::default(), round as u8, &buffer.whole());
                drop(buffer);
                drop(hold);
                done("fill", fill).await?;
                buffer = device
                    .allocator()
                    .allocate(SIZE, BufferParams::DEVICE)
                    .map_err(|e| e.context(format!("round {round}, {strategy:?}")))?;
            }
            assert_eq!(stat(&device, keys::DEFERRED_FREES), 50, "{strategy:?}");
            Ok(())
        })?;
    }
    Ok(())
}

/// The same for a queue `alloca` (stream-ordered allocation on the queue's stream): memory
/// whose free is pending with the reclaimer is waited for, not reported missing; and so is the
/// memory the `dealloca` gave back, whose free runs on the queue's stream.
#[test]
fn a_queue_alloca_after_awaiting_never_fails_for_a_pending_free() -> Result<()> {
    const SIZE: u64 = 600 << 10;
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        api.limit_memory(1 << 20);
        api.delay_frees(Duration::from_millis(2));
        block_on(async {
            for round in 0..50 {
                let context = |e: halcyon::Error| e.context(format!("round {round}, {strategy:?}"));
                let buffer = device.allocator().allocate(SIZE, BufferParams::DEVICE)?;
                let hold = api.hold();
                let fill = queue.fill(Timepoints::default(), round as u8, &buffer.whole());
                drop(buffer);
                drop(hold);
                done("fill", fill).await?;
                let (scratch, allocated) = queue
                    .alloca(Timepoints::default(), SIZE, BufferParams::DEVICE)
                    .map_err(context)?;
                done("alloca", allocated).await.map_err(context)?;
                done("dealloca", queue.dealloca(Timepoints::default(), &scratch)).await?;
                drop(scratch);
            }
            assert_eq!(stat(&device, keys::DEFERRED_FREES), 50, "{strategy:?}");
            Ok(())
        })?;
    }
    Ok(())
}

/// Once a task awaited a `dealloca`, the memory is its to allocate again, even while the free
/// is still queued on the stream behind other work (here, a stream held for a while): an
/// allocation that finds the device full waits for it instead of failing, and so does a queue
/// `alloca` on another queue.
#[test]
fn an_allocation_after_awaiting_a_dealloca_waits_for_its_stream_ordered_free() -> Result<()> {
    const SIZE: u64 = 600 << 10;
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = create_device(
            api.clone(),
            StreamDeviceOptions::default()
                .with_completion(strategy)
                .with_queue_count(2)
                .with_probe_interval(Duration::from_millis(5)),
        )?;
        let (first, second) = (device.queue(0)?, device.queue(1)?);
        api.limit_memory(1 << 20);
        block_on(async {
            for round in 0..10 {
                let context = |e: halcyon::Error| e.context(format!("round {round}, {strategy:?}"));
                let (scratch, allocated) = first
                    .alloca(Timepoints::default(), SIZE, BufferParams::DEVICE)
                    .map_err(context)?;
                done("alloca", allocated).await?;
                // The streams stop before their next operation, the free among them, for a while.
                let hold = api.hold();
                let release = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(20));
                    drop(hold);
                });
                done("dealloca", first.dealloca(Timepoints::default(), &scratch)).await?;
                drop(scratch);
                let again = if round % 2 == 0 {
                    device.allocator().allocate(SIZE, BufferParams::DEVICE)
                } else {
                    let (again, allocated) = second
                        .alloca(Timepoints::default(), SIZE, BufferParams::DEVICE)
                        .map_err(context)?;
                    done("second alloca", allocated).await?;
                    Ok(again)
                };
                let again = again.map_err(context)?;
                release.join().unwrap();
                if round % 2 == 1 {
                    done(
                        "second dealloca",
                        second.dealloca(Timepoints::default(), &again),
                    )
                    .await?;
                }
                drop(again);
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// Loading an executable takes device memory too (code and globals): a load that finds the
/// device full while a buffer's free is pending with the reclaimer waits for it, as an
/// allocation does, instead of failing.
#[test]
fn a_load_after_awaiting_never_fails_for_a_pending_free() -> Result<()> {
    const SIZE: u64 = 600 << 10;
    let entry = EntryPoint {
        name: "noop".into(),
        workgroup_size: [1, 1, 1],
        binding_count: 0,
        constant_count: 0,
    };
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        api.limit_memory(1 << 20);
        api.modules_take_memory(SIZE);
        api.delay_frees(Duration::from_millis(2));
        let spec = HostModule::new()
            .kernel(entry.clone(), |_: &LaunchArgs<'_>| Ok(()))
            .spec();
        block_on(async {
            let buffer = device.allocator().allocate(SIZE, BufferParams::DEVICE)?;
            let Err(error) = device.load_executable(&spec) else {
                panic!("the limit leaves room for the buffer or the module");
            };
            assert_eq!(error.code(), StatusCode::ResourceExhausted, "{error}");
            let mut buffer = Some(buffer);
            for round in 0..20 {
                let context = |e: halcyon::Error| e.context(format!("round {round}, {strategy:?}"));
                let used = buffer.take().expect("a buffer each round");
                let hold = api.hold();
                let fill = queue.fill(Timepoints::default(), round as u8, &used.whole());
                drop(used);
                drop(hold);
                done("fill", fill).await?;
                let executable = device.load_executable(&spec).map_err(context)?;
                drop(executable);
                buffer = Some(device.allocator().allocate(SIZE, BufferParams::DEVICE)?);
            }
            assert_eq!(stat(&device, keys::DEFERRED_FREES), 20, "{strategy:?}");
            Ok(())
        })?;
    }
    Ok(())
}

/// An executable the application drops while a dispatch of it is in flight is unloaded when
/// that submission is settled, by the reclaimer (an unload may wait for the device, like a
/// free); one dropped with nothing in flight is unloaded at once.
#[test]
fn executables_released_while_settling_are_unloaded_by_the_reclaimer() -> Result<()> {
    let entry = EntryPoint {
        name: "noop".into(),
        workgroup_size: [1, 1, 1],
        binding_count: 0,
        constant_count: 0,
    };
    let spec = || {
        HostModule::new()
            .kernel(entry.clone(), |_: &LaunchArgs<'_>| Ok(()))
            .spec()
    };
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        block_on(async {
            let idle = device.load_executable(&spec())?;
            assert_eq!(api.stats().modules, 1);
            drop(idle);
            assert_eq!(api.stats().modules, 0, "{strategy:?}: unloaded at once");
            assert_eq!(stat(&device, keys::DEFERRED_FREES), 0);

            let executable = device.load_executable(&spec())?;
            let hold = api.hold();
            let run = queue.dispatch(
                Timepoints::default(),
                &executable.kernel_at(0)?.launch([1, 1, 1]),
            );
            drop(executable); // the submission holds the module now
            assert_eq!(api.stats().modules, 1);
            drop(hold);
            done("dispatch", run).await?;
            assert_eq!(stat(&device, keys::DEFERRED_FREES), 1, "{strategy:?}");
            eventually("the reclaimer unloaded it", || api.stats().modules == 0).await
        })?;
    }
    Ok(())
}
