//! The stream device on the host stream API, beyond the conformance suite: device-to-device
//! waits as stream waits, parked actions released when their signal is scheduled, the fault
//! probe, failures travelling through stream waits, event and timepoint reuse, the completion
//! strategies, and shutdown with work in flight. The host API's own semantics are tested in
//! `stream_host_api.rs`.
//!
//! [`HostStreamApi::hold`] keeps work in flight deterministically: while a hold lives no stream
//! starts an operation, so "issued but not complete" is a state a test can observe.

use std::time::Duration;

use halcyon::{
    Buffer, BufferParams, Device, EntryPoint, Error, Fence, Result, Semaphore, StatusCode,
    Timepoints,
};
use halcyon_conformance::harness::{
    assert_error, block_on, bytes_u32, done, download, eventually, signals, u32_bytes, upload,
    within,
};
use halcyon_host_stream::{HostModule, HostStreamApi, LaunchArgs};
use halcyon_stream::{create_device, keys, CompletionStrategy, StreamDeviceOptions};

const STRATEGIES: [CompletionStrategy; 3] = [
    CompletionStrategy::HostCallback,
    CompletionStrategy::CompletionThread,
    CompletionStrategy::FlagWrite,
];

fn device(api: &HostStreamApi, completion: CompletionStrategy) -> Result<Device> {
    create_device(
        api.clone(),
        StreamDeviceOptions::default()
            .with_queue_count(2)
            .with_completion(completion)
            .with_probe_interval(Duration::from_millis(5)),
    )
}

fn stat(device: &Device, key: halcyon::device::Key<u64>) -> i64 {
    device.query(key).unwrap() as i64
}

/// Waits (a bounded time) for `condition`, from sync code.
fn wait_until(what: &str, condition: impl FnMut() -> bool) -> Result<()> {
    block_on(eventually(what, condition))
}

/// A wait on queue 1 for a value queue 0's work signals, submitted while that work is issued but
/// held (so certainly not complete), is handed to queue 1's stream as a stream-wait-event at
/// once: no host wait, no deferral, no reactor poll; the copy then sees the fill's data.
#[test]
fn cross_queue_wait_is_a_stream_wait() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let (q0, q1) = (device.queue(0)?, device.queue(1)?);
        let x = device.allocator().allocate(256, BufferParams::DEVICE)?;
        let y = device.allocator().allocate(256, BufferParams::DEVICE)?;
        let (a, b) = (device.create_semaphore(0)?, device.create_semaphore(0)?);

        let hold = api.hold();
        let fill = q0.fill(signals(&a, 1), 7u8, &x.whole());
        let polls = stat(&device, keys::REACTOR_POLLS);
        let copy = q1.copy(
            Timepoints::new(Fence::at(&a, 1), Fence::at(&b, 1)),
            &x.whole(),
            &y.whole(),
        );
        assert_eq!(stat(&device, keys::NATIVE_WAITS), 1, "{strategy:?}");
        assert_eq!(stat(&device, keys::HOST_WAITS), 0, "{strategy:?}");
        assert_eq!(stat(&device, keys::DEFERRED_WAITS), 0, "{strategy:?}");
        assert_eq!(stat(&device, keys::REACTOR_POLLS), polls, "{strategy:?}");
        assert_eq!(
            stat(&device, keys::IN_FLIGHT),
            2,
            "both issued: {strategy:?}"
        );
        assert_eq!(a.query()?, 0, "held work completed: {strategy:?}");
        drop(hold);

        block_on(async {
            done("fill", fill).await?;
            done("copy", copy).await?;
            let bytes = download(&q1, Fence::at(&b, 1), &y.whole()).await?;
            assert!(
                bytes.iter().all(|&v| v == 7),
                "{strategy:?}: copy missed the fill"
            );
            Ok(())
        })?;
    }
    Ok(())
}

/// A submission waiting on a value nobody has scheduled is parked (deferred, nothing reaches a
/// stream); the moment another queue issues the signal, still held so not complete, the
/// reactor releases it onto its stream with a stream wait.
#[test]
fn parked_action_released_when_its_signal_is_scheduled() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let (q0, q1) = (device.queue(0)?, device.queue(1)?);
        let x = device.allocator().allocate(64, BufferParams::DEVICE)?;
        let y = device.allocator().allocate(64, BufferParams::DEVICE)?;
        let (a, b) = (device.create_semaphore(0)?, device.create_semaphore(0)?);

        let hold = api.hold();
        let copy = q1.copy(
            Timepoints::new(Fence::at(&a, 1), Fence::at(&b, 1)),
            &x.whole(),
            &y.whole(),
        );
        assert_eq!(stat(&device, keys::DEFERRED_WAITS), 1, "{strategy:?}");
        assert_eq!(stat(&device, keys::IN_FLIGHT), 0, "parked work was issued");
        let fill = q0.fill(signals(&a, 1), 9u8, &x.whole());
        wait_until("the parked copy to be issued", || {
            stat(&device, keys::IN_FLIGHT) == 2
        })?;
        assert_eq!(stat(&device, keys::NATIVE_WAITS), 1, "{strategy:?}");
        assert_eq!(stat(&device, keys::HOST_WAITS), 0, "{strategy:?}");
        assert_eq!(
            a.query()?,
            0,
            "released only after completion: {strategy:?}"
        );
        drop(hold);

        block_on(async {
            done("fill", fill).await?;
            done("copy", copy).await?;
            let bytes = download(&q1, Fence::at(&b, 1), &y.whole()).await?;
            assert!(bytes.iter().all(|&v| v == 9), "{strategy:?}");
            Ok(())
        })?;
    }
    Ok(())
}

/// A device fault while work is in flight (issued to streams, with its completion host
/// functions queued), while work waits natively on it, and while work is parked on a host
/// semaphore: every one of their fences fails with the fault, naming its cause, and nothing
/// hangs; host functions never ran (so with host callbacks only the probe can have done it);
/// later submissions fail too, and the device drops cleanly.
#[test]
fn fault_probe_fails_every_affected_fence() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let (q0, q1) = (device.queue(0)?, device.queue(1)?);
        let x = device.allocator().allocate(64, BufferParams::DEVICE)?;
        let (a, b, c) = (
            device.create_semaphore(0)?,
            device.create_semaphore(0)?,
            device.create_semaphore(0)?,
        );
        let gate = Semaphore::new(0);
        let host_funcs = api.stats().host_funcs;

        let hold = api.hold();
        let in_flight = q0.fill(signals(&a, 1), 1u8, &x.whole());
        let native = q1.fill(
            Timepoints::new(Fence::at(&a, 1), Fence::at(&b, 1)),
            2u8,
            &x.whole(),
        );
        let parked = q0.barrier(Timepoints::new(Fence::at(&gate, 1), Fence::at(&c, 1)));
        assert_eq!(stat(&device, keys::IN_FLIGHT), 2);
        api.inject_fault("ECC error in bank 3");
        drop(hold);
        gate.signal(1)?;

        block_on(async {
            for (name, submission) in [
                ("in flight", in_flight),
                ("native", native),
                ("parked", parked),
            ] {
                let outcome = within(name, submission).await?;
                assert_error(outcome, StatusCode::Aborted, &["ECC error in bank 3"]);
            }
            let after = q1.fill(signals(&c, 2), 3u8, &x.whole());
            let outcome = within("after the fault", after).await?;
            assert_error(outcome, StatusCode::Aborted, &["ECC error in bank 3"]);
            Ok(())
        })?;
        for semaphore in [&a, &b, &c] {
            assert_error(semaphore.query(), StatusCode::Aborted, &["bank 3"]);
        }
        assert_eq!(
            api.stats().host_funcs,
            host_funcs,
            "a host function ran after the fault"
        );
        if strategy != CompletionStrategy::CompletionThread {
            assert_eq!(
                stat(&device, keys::PROBE_FAILURES),
                2,
                "the probe failed the two in flight"
            );
        }
        assert_eq!(stat(&device, keys::IN_FLIGHT), 0);
        drop(device);
    }
    Ok(())
}

/// A kernel failing on queue 0 fails work on queue 1 that waits on it natively, with the same
/// error, and that work does not run (its buffer keeps its data).
#[test]
fn kernel_failure_travels_through_stream_waits() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let (q0, q1) = (device.queue(0)?, device.queue(1)?);
        let module = HostModule::new().kernel(entry("boom", 0, 0), |_: &LaunchArgs<'_>| {
            Err("boom went the kernel".into())
        });
        let executable = device.load_executable(&module.spec())?;
        let (a, b, gate) = (
            device.create_semaphore(0)?,
            device.create_semaphore(0)?,
            device.create_semaphore(0)?,
        );
        block_on(async {
            let y = upload(&q1, BufferParams::DEVICE, &u32_bytes(&[5; 16])).await?;
            let hold = api.hold();
            let failing = q0.dispatch(
                Timepoints::new(Fence::at(&gate, 1), Fence::at(&a, 1)),
                &executable.kernel_at(0)?.launch([1, 1, 1]),
            );
            let dependent = q1.fill(
                Timepoints::new(Fence::at(&a, 1), Fence::at(&b, 1)),
                0u8,
                &y.whole(),
            );
            gate.signal(1)?;
            eventually("both issued", || stat(&device, keys::IN_FLIGHT) == 2).await?;
            assert_eq!(stat(&device, keys::NATIVE_WAITS), 1);
            drop(hold);
            let error = within("failing", failing)
                .await?
                .expect_err("the kernel fails");
            assert!(error.message().contains("boom went the kernel"), "{error}");
            let outcome = within("dependent", dependent).await?;
            assert_error(outcome, error.code(), &[error.message()]);
            let bytes = download(&q1, Fence::new(), &y.whole()).await?;
            assert_eq!(bytes_u32(&bytes)?, [5; 16], "the dependent fill ran");
            assert!(api.stats().skipped >= 1);
            Ok(())
        })?;
    }
    Ok(())
}

/// Work that waited on a submission's event through a stream wait settles only after that
/// submission, and fails with it: here the host fails `t` while the work signalling it is in
/// flight, so `a2`, which waited for `t` on the device, fails; its failure of `s` is held
/// back behind `a1`'s earlier value (500 ms), yet `d`, which waited on `a2`'s event, fails at
/// once with the same error instead of reaching `r`.
#[test]
fn work_after_a_failed_submission_fails_though_its_event_completed() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = create_device(
            api.clone(),
            StreamDeviceOptions::default()
                .with_queue_count(3)
                .with_completion(strategy)
                .with_probe_interval(Duration::from_millis(5)),
        )?;
        let (q0, q1, q2) = (device.queue(0)?, device.queue(1)?, device.queue(2)?);
        let module = HostModule::new()
            .kernel(entry("slow", 0, 0), |_: &LaunchArgs<'_>| {
                std::thread::sleep(Duration::from_millis(500));
                Ok(())
            })
            .kernel(entry("noop", 0, 0), |_: &LaunchArgs<'_>| Ok(()));
        let executable = device.load_executable(&module.spec())?;
        let [s, t, r] = [0; 3].map(|_| device.create_semaphore(0).unwrap());
        let dispatch = |queue: &halcyon::Queue, wait: Fence, signal: Fence, entry: u32| {
            queue.dispatch(
                Timepoints::new(wait, signal),
                &executable.kernel_at(entry).unwrap().launch([1, 1, 1]),
            )
        };
        let hold = api.hold();
        let a1 = dispatch(&q0, Fence::new(), Fence::at(&s, 1), 0);
        let p = dispatch(&q1, Fence::new(), Fence::at(&t, 1), 1);
        let a2 = dispatch(&q2, Fence::at(&t, 1), Fence::at(&s, 2), 1);
        let d = dispatch(&q1, Fence::at(&s, 2), Fence::at(&r, 1), 1);
        assert_eq!(
            stat(&device, keys::NATIVE_WAITS),
            2,
            "both waits are stream waits"
        );
        t.fail(Error::new(StatusCode::Aborted, "t cancelled by the host"));
        drop(hold);
        block_on(async {
            let error = within("d", d).await?.expect_err("d fails");
            assert!(error.message().contains("t cancelled"), "{error}");
            assert!(r.query().is_err(), "r fails with d");
            assert!(
                matches!(s.query(), Ok(0)),
                "s's failure still waits for a1's value"
            );
            let a2_error = within("a2", a2).await?.expect_err("a2 fails");
            assert!(a2_error.message().contains("t cancelled"), "{a2_error}");
            within("a1", a1).await??;
            // `p` ran, but the semaphore it signals failed under it.
            let _ = within("p", p).await?;
            assert!(s.query().is_err(), "s fails once a1 reached 1");
            // Both failures are counted, also when `d` settles late, on the reactor (`p`
            // itself succeeded).
            assert_eq!(stat(&device, keys::COMPLETED), 4);
            assert_eq!(
                stat(&device, keys::FAILED),
                2,
                "{strategy:?}: {} settles deferred",
                stat(&device, keys::SETTLES_DEFERRED)
            );
            Ok::<(), Error>(())
        })?;
    }
    Ok(())
}

/// Sequential submissions reuse one event and one in-flight record: the pools create a handful
/// and hand them out hundreds of times, and every event is back in the pool at the end.
#[test]
fn events_and_timepoints_are_reused() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(64, BufferParams::DEVICE)?;
        let timeline = queue.timeline()?;
        block_on(async {
            for i in 0..200u32 {
                done(
                    "fill",
                    queue.fill(timeline.next(), i as u8, &buffer.whole()),
                )
                .await?;
            }
            Ok(())
        })?;
        let acquired = stat(&device, keys::EVENTS_ACQUIRED);
        let created = stat(&device, keys::EVENTS_CREATED);
        assert!(acquired >= 200, "{strategy:?}: {acquired} events acquired");
        assert!(
            created <= 4,
            "{strategy:?}: {created} events created for 200 fills"
        );
        wait_until("every event back in the pool", || {
            stat(&device, keys::EVENTS_FREE) == stat(&device, keys::EVENTS_CREATED)
        })?;
        let created = stat(&device, keys::TIMEPOINTS_CREATED);
        assert!(stat(&device, keys::TIMEPOINTS_ACQUIRED) >= 200);
        assert!(
            created <= 4,
            "{strategy:?}: {created} timepoints created for 200 fills"
        );
        // The synchronisation events, and the timing events of the clock's calibration.
        assert_eq!(
            api.stats().events,
            (stat(&device, keys::EVENTS_CREATED) + stat(&device, keys::TIMING_EVENTS_CREATED))
                as u64
        );
    }
    Ok(())
}

/// Dropping the device while work is in flight (held on its stream) waits for the streams and
/// settles the work's fences (reached, not failed); the API's streams are destroyed and its
/// memory freed once the buffers go.
#[test]
fn dropping_the_device_settles_work_in_flight() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(64, BufferParams::DEVICE)?;
        let done_sem = device.create_semaphore(0)?;
        let hold = api.hold();
        let fill = queue.fill(signals(&done_sem, 1), 1u8, &buffer.whole());
        let dropper = std::thread::spawn(move || drop(device));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(done_sem.query()?, 0);
        drop(hold);
        dropper.join().expect("dropping the device panicked");
        block_on(async { done("fill", fill).await })?;
        assert_eq!(done_sem.query()?, 1);
        drop((queue, buffer));
        wait_until("streams destroyed and memory freed", || {
            let stats = api.stats();
            stats.streams == 0 && stats.allocations == 0
        })?;
    }
    Ok(())
}

/// While work is in flight, the reactor of a host-callback or flag-write device runs the fault
/// probe every probe interval (a faulted device never runs host functions nor writes flags); a
/// completion-thread device has no probe (its threads see faults themselves)
/// and its reactor is not woken for it.
#[test]
fn only_host_callback_devices_probe() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(64, BufferParams::DEVICE)?;
        let (hold, polls) = (api.hold(), stat(&device, keys::REACTOR_POLLS));
        let fill = queue.fill(Timepoints::default(), 1u8, &buffer.whole());
        match strategy {
            CompletionStrategy::HostCallback | CompletionStrategy::FlagWrite => {
                wait_until("the probe runs", || stat(&device, keys::PROBES) >= 3)?;
            }
            CompletionStrategy::CompletionThread => {
                // Ten probe intervals with work in flight.
                std::thread::sleep(Duration::from_millis(50));
                assert_eq!(
                    stat(&device, keys::PROBES),
                    0,
                    "a completion-thread device probed"
                );
                assert_eq!(
                    stat(&device, keys::REACTOR_POLLS),
                    polls,
                    "the reactor of a completion-thread device woke while work was in flight"
                );
            }
        }
        drop(hold);
        block_on(async { done("fill", fill).await })?;
    }
    Ok(())
}

/// Host callbacks run on the callback stream and only post: with that strategy completions are
/// counted as callback completions; with completion threads as thread completions; with
/// device-written flags as flag completions, and no host function runs.
#[test]
fn completions_come_from_the_chosen_strategy() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(64, BufferParams::DEVICE)?;
        let timeline = queue.timeline()?;
        block_on(async {
            for _ in 0..10 {
                done("fill", queue.fill(timeline.next(), 1u8, &buffer.whole())).await?;
            }
            Ok(())
        })?;
        let (callbacks, threads, flags) = (
            stat(&device, keys::CALLBACK_COMPLETIONS),
            stat(&device, keys::THREAD_COMPLETIONS),
            stat(&device, keys::FLAG_COMPLETIONS),
        );
        let probed = stat(&device, keys::PROBE_COMPLETIONS);
        match strategy {
            CompletionStrategy::HostCallback => {
                assert_eq!(threads + flags, 0);
                assert_eq!(callbacks + probed, 10);
                assert!(api.stats().host_funcs >= 10);
            }
            CompletionStrategy::CompletionThread => {
                assert_eq!(callbacks + flags, 0);
                assert_eq!(threads + probed, 10);
                assert_eq!(api.stats().host_funcs, 0);
            }
            CompletionStrategy::FlagWrite => {
                assert_eq!(callbacks + threads, 0);
                assert_eq!(flags + probed, 10);
                assert!(flags > 0, "no completion came from the flags");
                assert_eq!(api.stats().host_funcs, 0);
            }
        }
    }
    Ok(())
}

fn entry(name: &str, bindings: u32, constants: u32) -> EntryPoint {
    EntryPoint {
        name: name.into(),
        workgroup_size: [1, 1, 1],
        binding_count: bindings,
        constant_count: constants,
    }
}

/// A module with kernel `add_one(x)`: adds 1 to every `u32` of binding 0.
fn add_one_module() -> HostModule {
    HostModule::new().kernel(entry("add_one", 1, 0), |args: &LaunchArgs<'_>| {
        // SAFETY: the only binding; blocks of one launch run one after another.
        let data = unsafe { args.binding_mut::<u32>(0) };
        data.iter_mut().for_each(|x| *x += 1);
        Ok(())
    })
}

/// Buffers of one stream device are refused by another, naming the buffer and the device.
#[test]
fn buffers_of_another_device_are_refused() -> Result<()> {
    let (one, two) = (
        device(&HostStreamApi::new(), CompletionStrategy::HostCallback)?,
        device(&HostStreamApi::new(), CompletionStrategy::HostCallback)?,
    );
    let buffer: Buffer = one.allocator().allocate(16, BufferParams::DEVICE)?;
    let signal = two.create_semaphore(0)?;
    block_on(async {
        let fill = two
            .queue(0)?
            .fill(signals(&signal, 1), 1u8, &buffer.whole());
        let outcome = within("fill", fill).await?;
        let id = buffer.id().to_string();
        assert_error(outcome, StatusCode::InvalidArgument, &[&id, &two.info().id]);
        Ok::<(), Error>(())
    })
}

/// A reusable command buffer executed again becomes a graph: issued directly the first time,
/// captured the second, launched as the graph from then on, with the right results each time;
/// so does one executed with a binding table (resolved to a new list each time, one recording);
/// one-shot operations are never captured.
#[test]
fn resubmitted_command_lists_become_graphs() -> Result<()> {
    use halcyon::{Binding, BindingTable, CommandBuffer, CommandBufferMode};
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        let module = add_one_module();
        let executable = device.load_executable(&module.spec())?;
        block_on(async {
            let x = upload(&queue, BufferParams::DEVICE, &u32_bytes(&[10; 16])).await?;
            let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
            builder.dispatch(
                &executable
                    .kernel_at(0)?
                    .launch([1, 1, 1])
                    .binding(x.whole()),
            )?;
            builder.update(&u32_bytes(&[100]), x.slice(0..4)?)?;
            builder.dispatch(
                &executable
                    .kernel_at(0)?
                    .launch([1, 1, 1])
                    .binding(x.whole()),
            )?;
            let twice = builder.finish();
            for round in 1..=4u32 {
                done(
                    "execute",
                    queue.execute(Timepoints::default(), &twice, None),
                )
                .await?;
                let bytes = download(&queue, Fence::new(), &x.whole()).await?;
                let values = bytes_u32(&bytes)?;
                assert_eq!(values[0], 101, "round {round}, {strategy:?}");
                assert_eq!(values[1], 10 + 2 * round, "round {round}, {strategy:?}");
            }
            assert_eq!(stat(&device, keys::GRAPH_CAPTURES), 1, "{strategy:?}");
            assert_eq!(stat(&device, keys::GRAPH_LAUNCHES), 3, "{strategy:?}");
            assert_eq!(api.stats().graph_launches, 3, "{strategy:?}");

            // A binding table resolves to a new list each time, of one recording: a graph too.
            let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
            builder.dispatch(
                &executable
                    .kernel_at(0)?
                    .launch([1, 1, 1])
                    .binding(Binding::slot(0, 0, 64)),
            )?;
            let slotted = builder.finish();
            let mut table = BindingTable::new();
            table.set(0, x.whole())?;
            for _ in 0..3 {
                let run = queue.execute(Timepoints::default(), &slotted, Some(&table));
                done("execute with a table", run).await?;
                done(
                    "fill",
                    queue.fill(Timepoints::default(), 1u8, &x.slice(60..64)?),
                )
                .await?;
            }
            assert_eq!(stat(&device, keys::GRAPH_CAPTURES), 2, "{strategy:?}");
            assert_eq!(stat(&device, keys::GRAPH_LAUNCHES), 5, "{strategy:?}");
            assert_eq!(stat(&device, keys::GRAPH_KERNEL_UPDATES), 0, "{strategy:?}");
            let values = bytes_u32(&download(&queue, Fence::new(), &x.whole()).await?)?;
            assert_eq!(values[1], 10 + 8 + 3, "{strategy:?}");
            Ok(())
        })?;
    }
    Ok(())
}

/// The dynamic shared memory a module declares for an entry point reaches every launch of it:
/// issued directly, replayed from a reusable command buffer, captured and launched as a graph;
/// an entry point without a declaration launches with none.
#[test]
fn declared_shared_memory_reaches_every_launch() -> Result<()> {
    use halcyon::{CommandBuffer, CommandBufferMode};
    let record = |args: &LaunchArgs<'_>| {
        // SAFETY: the only binding; blocks of one launch run one after another.
        let out = unsafe { args.binding_mut::<u32>(0) };
        out[args.block_id()[0] as usize] = args.shared_memory_bytes();
        Ok(())
    };
    let module = HostModule::new()
        .kernel(entry("tile", 1, 0), record)
        .kernel(entry("plain", 1, 0), record)
        .with_shared_memory("tile", 48 << 10)?;
    let missing = module.clone().with_shared_memory("tiles", 16).unwrap_err();
    assert_eq!(missing.code(), StatusCode::NotFound);
    assert!(missing.message().contains("[tile, plain]"), "{missing}");
    let api = HostStreamApi::new();
    let device = device(&api, CompletionStrategy::CompletionThread)?;
    let queue = device.queue(0)?;
    let executable = device.load_executable(&module.spec())?;
    block_on(async {
        let out = upload(&queue, BufferParams::DEVICE, &u32_bytes(&[7; 4])).await?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder.dispatch(
            &executable
                .kernel_at(0)?
                .launch([2, 1, 1])
                .binding(out.whole()),
        )?;
        builder.dispatch(
            &executable
                .kernel_at(1)?
                .launch([1, 1, 1])
                .binding(out.slice(8..16)?),
        )?;
        let list = builder.finish();
        for round in 0..3 {
            done("fill", queue.fill(Timepoints::default(), 7u8, &out.whole())).await?;
            done("execute", queue.execute(Timepoints::default(), &list, None)).await?;
            let values = bytes_u32(&download(&queue, Fence::new(), &out.whole()).await?)?;
            let filled = u32::from_ne_bytes([7; 4]);
            assert_eq!(values, [48 << 10, 48 << 10, 0, filled], "round {round}");
        }
        assert_eq!(stat(&device, keys::GRAPH_CAPTURES), 1);
        assert_eq!(stat(&device, keys::GRAPH_LAUNCHES), 2);
        Ok::<(), Error>(())
    })
}

/// A reusable list submitted with a new binding table each time keeps replaying its graph:
/// the graph's kernel is pointed at each submission's buffers in place, only when they moved,
/// with the right results in every buffer. A fill through a slot that moves sends that
/// submission to the stream instead (graphs update kernels only), leaving the graph as it was.
#[test]
fn a_graph_follows_its_binding_table() -> Result<()> {
    use halcyon::{Binding, BindingTable, CommandBuffer, CommandBufferMode};
    let api = HostStreamApi::new();
    let device = device(&api, CompletionStrategy::CompletionThread)?;
    let queue = device.queue(0)?;
    let module = add_one_module();
    let executable = device.load_executable(&module.spec())?;
    block_on(async {
        let a = upload(&queue, BufferParams::DEVICE, &u32_bytes(&[0; 4])).await?;
        let b = upload(&queue, BufferParams::DEVICE, &u32_bytes(&[100; 4])).await?;
        let c = upload(&queue, BufferParams::DEVICE, &u32_bytes(&[0; 4])).await?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder.dispatch(
            &executable
                .kernel_at(0)?
                .launch([1, 1, 1])
                .binding(Binding::slot(0, 0, 16)),
        )?;
        let add = builder.finish();
        let table = |buffer: &Buffer| -> Result<BindingTable> {
            let mut table = BindingTable::new();
            table.set(0, buffer.whole())?;
            Ok(table)
        };
        let (ta, tb) = (table(&a)?, table(&b)?);
        // Direct, capture, then the graph: updated whenever the buffer changes.
        let rounds = [&ta, &tb, &tb, &ta, &tb, &ta];
        let expected_updates = [0, 0, 0, 1, 2, 3];
        for (round, (table, updates)) in rounds.iter().zip(expected_updates).enumerate() {
            let run = queue.execute(Timepoints::default(), &add, Some(table));
            done("execute", run).await?;
            assert_eq!(
                stat(&device, keys::GRAPH_KERNEL_UPDATES),
                updates,
                "round {round}"
            );
        }
        assert_eq!(stat(&device, keys::GRAPH_CAPTURES), 1);
        assert_eq!(stat(&device, keys::GRAPH_LAUNCHES), 5);
        assert_eq!(stat(&device, keys::GRAPH_BYPASSES), 0);
        assert_eq!(
            bytes_u32(&download(&queue, Fence::new(), &a.whole()).await?)?,
            [3; 4]
        );
        assert_eq!(
            bytes_u32(&download(&queue, Fence::new(), &b.whole()).await?)?,
            [103; 4]
        );

        // A fill through a slot: moving it bypasses the graph, which stays valid.
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder.fill(0u32, Binding::slot(1, 0, 16))?;
        builder.dispatch(
            &executable
                .kernel_at(0)?
                .launch([1, 1, 1])
                .binding(Binding::slot(0, 0, 16)),
        )?;
        let clear_and_add = builder.finish();
        let both = |x: &Buffer, y: &Buffer| -> Result<BindingTable> {
            let mut table = BindingTable::new();
            table.set(0, x.whole())?.set(1, y.whole())?;
            Ok(table)
        };
        for table in [both(&a, &c)?, both(&a, &c)?, both(&a, &b)?, both(&b, &c)?] {
            done(
                "execute",
                queue.execute(Timepoints::default(), &clear_and_add, Some(&table)),
            )
            .await?;
        }
        // Direct, capture, bypass (the fill moved), graph with the kernel moved to b.
        assert_eq!(stat(&device, keys::GRAPH_CAPTURES), 2);
        assert_eq!(stat(&device, keys::GRAPH_BYPASSES), 1);
        assert_eq!(stat(&device, keys::GRAPH_LAUNCHES), 7);
        assert_eq!(stat(&device, keys::GRAPH_KERNEL_UPDATES), 4);
        assert_eq!(
            bytes_u32(&download(&queue, Fence::new(), &a.whole()).await?)?,
            [6; 4]
        );
        assert_eq!(
            bytes_u32(&download(&queue, Fence::new(), &b.whole()).await?)?,
            [1; 4]
        );
        assert_eq!(
            bytes_u32(&download(&queue, Fence::new(), &c.whole()).await?)?,
            [0; 4]
        );
        Ok::<(), Error>(())
    })
}

/// A capture the driver invalidates (CUDA does so when another thread synchronises the
/// context meanwhile) costs the submission nothing: its operations, which the capture took
/// without running, are issued directly, with the right results; the list starts over and is
/// captured again two submissions later.
#[test]
fn a_failed_capture_falls_back_to_direct_issue() -> Result<()> {
    use halcyon::{CommandBuffer, CommandBufferMode};
    let api = HostStreamApi::new();
    let device = device(&api, CompletionStrategy::CompletionThread)?;
    let queue = device.queue(0)?;
    let module = add_one_module();
    let executable = device.load_executable(&module.spec())?;
    block_on(async {
        let x = upload(&queue, BufferParams::DEVICE, &u32_bytes(&[0; 4])).await?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder.dispatch(
            &executable
                .kernel_at(0)?
                .launch([1, 1, 1])
                .binding(x.whole()),
        )?;
        let list = builder.finish();
        // Direct, capture (invalidated: direct), direct, capture, graph.
        let expected = [(0, 0, 0), (0, 1, 0), (0, 1, 0), (1, 1, 1), (1, 1, 2)];
        for (round, &(captures, failures, launches)) in (1..).zip(&expected) {
            if round == 2 {
                api.invalidate_next_capture();
            }
            done("execute", queue.execute(Timepoints::default(), &list, None)).await?;
            let values = bytes_u32(&download(&queue, Fence::new(), &x.whole()).await?)?;
            assert_eq!(values, [round; 4], "round {round}");
            let stats = (
                stat(&device, keys::GRAPH_CAPTURES),
                stat(&device, keys::GRAPH_CAPTURE_FAILURES),
                stat(&device, keys::GRAPH_LAUNCHES),
            );
            assert_eq!(stats, (captures, failures, launches), "round {round}");
        }
        Ok(())
    })
}

/// A graph launch re-resolves its buffers: after a queue `dealloca` released one, resubmitting
/// the list fails like a direct issue would, instead of launching on freed memory.
#[test]
fn a_graph_of_a_released_buffer_is_not_launched() -> Result<()> {
    use halcyon::{Binding, CommandBuffer, CommandBufferMode};
    let api = HostStreamApi::new();
    let device = device(&api, CompletionStrategy::CompletionThread)?;
    let queue = device.queue(0)?;
    block_on(async {
        let (buffer, allocated) = queue.alloca(Timepoints::default(), 64, BufferParams::DEVICE)?;
        done("alloca", allocated).await?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder.fill(3u8, Binding::from(buffer.whole()))?;
        let fill = builder.finish();
        for _ in 0..3 {
            done("fill", queue.execute(Timepoints::default(), &fill, None)).await?;
        }
        assert_eq!(stat(&device, keys::GRAPH_LAUNCHES), 2);
        done("dealloca", queue.dealloca(Timepoints::default(), &buffer)).await?;
        let error = within(
            "fill after dealloca",
            queue.execute(Timepoints::default(), &fill, None),
        )
        .await?
        .expect_err("the buffer's memory was released");
        eprintln!("{error}");
        assert_eq!(stat(&device, keys::GRAPH_LAUNCHES), 2);
        Ok(())
    })
}

/// Queue `alloca` of device memory uses the API's stream-ordered allocation on the queue's
/// stream, and the memory goes back with a stream-ordered free once the `dealloca` and every use
/// completed; host-visible `alloca`s use the core's pool; a buffer outliving its device is
/// still freed.
#[test]
fn alloca_uses_stream_ordered_allocation() -> Result<()> {
    let api = HostStreamApi::new();
    let device = device(&api, CompletionStrategy::CompletionThread)?;
    let queue = device.queue(1)?;
    let before = api.stats().allocations;
    block_on(async {
        let (buffer, allocated) = queue.alloca(Timepoints::default(), 256, BufferParams::DEVICE)?;
        done("alloca", allocated).await?;
        assert_eq!(stat(&device, keys::QUEUED_ALLOCATIONS), 1);
        assert_eq!(api.stats().allocations, before + 1);
        done(
            "fill",
            queue.fill(Timepoints::default(), 9u8, &buffer.whole()),
        )
        .await?;
        let bytes = download(&queue, Fence::new(), &buffer.whole()).await?;
        assert!(bytes.iter().all(|&b| b == 9));
        done("dealloca", queue.dealloca(Timepoints::default(), &buffer)).await?;
        // The read leased the device's pinned host memory, which stays pooled.
        assert_eq!(stat(&device, keys::PINNED_IDLE), 1);
        eventually("the stream-ordered free ran", || {
            api.stats().allocations == before + 1
        })
        .await?;

        let (host, allocated) = queue.alloca(Timepoints::default(), 256, BufferParams::HOST)?;
        done("host alloca", allocated).await?;
        assert_eq!(
            stat(&device, keys::QUEUED_ALLOCATIONS),
            1,
            "host-visible uses the pool"
        );
        drop(host);

        let (outliving, allocated) =
            queue.alloca(Timepoints::default(), 64, BufferParams::DEVICE)?;
        done("alloca", allocated).await?;
        Ok::<_, Error>(outliving)
    })
    .and_then(|outliving| {
        let allocations = api.stats().allocations;
        device.allocator().trim();
        drop(device);
        drop(outliving);
        wait_until("the outliving buffer was freed", || {
            api.stats().allocations < allocations
        })
    })
}
