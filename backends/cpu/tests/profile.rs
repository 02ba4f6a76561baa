//! Profiles on the CPU device: what the records mean, not just that the exports parse.

use futures::executor::block_on;
use halcyon::profile::{Operation, OperationKind, Profile};
use halcyon::{BufferParams, Device, EntryPoint, Fence, StatusCode, Timepoints};
use halcyon_cpu::{CpuDeviceOptions, ExecutionMode, RustKernels};

/// Elements per buffer: fewer under Miri, which runs the same checks a thousand times slower.
const N: usize = if cfg!(miri) { 1 << 10 } else { 1 << 16 };

fn device(queues: u32) -> Device {
    halcyon_cpu::create_device(
        CpuDeviceOptions::default()
            .with_mode(ExecutionMode::Pool { workers: 2 })
            .with_queue_count(queues),
    )
    .unwrap()
}

/// `y[i] = y[i] * 2 + 1`, a few times over, so a dispatch takes measurable time.
fn kernels() -> RustKernels {
    RustKernels::new().entry(
        EntryPoint {
            name: "twice_plus_one".into(),
            workgroup_size: [256, 1, 1],
            binding_count: 1,
            constant_count: 0,
        },
        |ctx| {
            for y in ctx.chunk_mut::<f32>(0, 256)? {
                for _ in 0..16 {
                    *y = *y * 2.0 + 1.0;
                }
            }
            Ok(())
        },
    )
}

/// submitted ≤ issued ≤ device start ≤ device end ≤ completed, all present.
fn check_stages(op: &Operation) {
    let issued = op
        .issued_ns
        .unwrap_or_else(|| panic!("{op:?} never issued"));
    let (start, end) = op
        .device_ns
        .unwrap_or_else(|| panic!("{op:?}: no device range"));
    let completed = op
        .completed_ns
        .unwrap_or_else(|| panic!("{op:?} never completed"));
    assert!(op.submitted_ns <= issued, "{op:?}");
    assert!(issued <= start, "{op:?}");
    assert!(start <= end, "{op:?}");
    assert!(end <= completed, "{op:?}");
}

/// Two queues in parallel, one consumer waiting across them: every range lies between its
/// submission and its completion, a queue's timeline runs in semaphore order, and the consumer
/// starts after its producer ended.
#[test]
fn records_follow_the_semaphores() -> halcyon::Result<()> {
    let device = device(2);
    assert!(!device.profiler().is_enabled(), "off by default");
    device.profiler().enable();
    let executable = device.load_executable(&kernels().spec())?;
    let kernel = executable.kernel("twice_plus_one")?;
    let (q0, q1) = (device.queue(0)?, device.queue(1)?);
    let bytes = (N * 4) as u64;
    let a = device.allocator().allocate(bytes, BufferParams::DEVICE)?;
    let b = device.allocator().allocate(bytes, BufferParams::DEVICE)?;
    let (t0, t1) = (q0.timeline()?, q1.timeline()?);
    let groups = [(N / 256) as u32, 1, 1];
    block_on(async {
        let produce = [
            q0.fill(t0.next(), 1.0f32, &a.whole()),
            q0.dispatch(t0.next(), &kernel.launch(groups).binding(a.whole())),
            q0.dispatch(t0.next(), &kernel.launch(groups).binding(a.whole())),
        ];
        // Queue 1 works on its own buffer meanwhile, then copies queue 0's result once
        // queue 0's timeline reaches 3.
        let own = [
            q1.fill(t1.next(), 2.0f32, &b.whole()),
            q1.dispatch(t1.next(), &kernel.launch(groups).binding(b.whole())),
        ];
        let mut step = t1.next();
        step.wait.insert(t0.semaphore(), 3);
        let consume = q1.copy(step, &a.whole(), &b.whole());
        for s in produce.into_iter().chain(own) {
            s.await?;
        }
        consume.await
    })?;
    let profile = device.profiler().take();
    assert_eq!(profile.operations.len(), 6, "{:#?}", profile.operations);
    for op in &profile.operations {
        check_stages(op);
        assert!(op.error.is_none(), "{op:?}");
    }
    let on = |queue: u32| -> Vec<&Operation> {
        let mut ops: Vec<_> = profile
            .operations
            .iter()
            .filter(|op| op.queue == queue)
            .collect();
        // Semaphore order: by the value each signals on its queue's timeline.
        ops.sort_by_key(|op| op.signals[0].1);
        ops
    };
    for queue in [0, 1] {
        let ops = on(queue);
        for pair in ops.windows(2) {
            assert!(
                pair[0].device_ns.unwrap().1 <= pair[1].device_ns.unwrap().0,
                "queue {queue} out of order: {:?} then {:?}",
                pair[0],
                pair[1]
            );
        }
    }
    let (q0_ops, q1_ops) = (on(0), on(1));
    let producer = q0_ops.last().unwrap();
    let consumer = q1_ops.last().unwrap();
    assert_eq!(consumer.kind, OperationKind::Copy);
    assert!(consumer.waits.contains(&(t0.semaphore().id(), 3)));
    assert!(producer.signals.contains(&(t0.semaphore().id(), 3)));
    assert!(consumer.device_ns.unwrap().0 >= producer.device_ns.unwrap().1);
    assert_eq!(q0_ops[1].kind, OperationKind::Dispatch);
    assert_eq!(q0_ops[1].name, "dispatch twice_plus_one");
    assert_eq!(q0_ops[1].bytes, bytes);

    // Taken records are gone; the counters stay.
    assert!(device.profiler().take().operations.is_empty());
    let counters = device.profiler().counters();
    assert_eq!(counters[0].submissions, 3);
    assert_eq!(counters[1].submissions, 3);
    assert!(counters[0].by_kind.contains(&(OperationKind::Dispatch, 2)));
    Ok(())
}

/// The Chrome trace is JSON with one complete event per operation on its queue's track, one
/// track per queue plus the host's, flows that start, step and finish, and the counters.
#[test]
fn chrome_trace_holds_ranges_instants_and_flows() -> halcyon::Result<()> {
    let device = device(2);
    device.profiler().enable();
    let buffer = device.allocator().allocate(4096, BufferParams::DEVICE)?;
    let (q0, q1) = (device.queue(0)?, device.queue(1)?);
    let done = device.create_semaphore(0)?;
    block_on(async {
        q0.fill(
            Timepoints::new(Fence::new(), Fence::at(&done, 1)),
            7u8,
            &buffer.whole(),
        )
        .await?;
        q1.read::<u8>(
            Timepoints::new(Fence::at(&done, 1), Fence::new()),
            &buffer.whole(),
        )
        .await
        .map(drop)
    })?;
    let profile = Profile::from(device.profiler().take());
    let trace: serde_json::Value = serde_json::from_str(&profile.to_chrome_trace()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let of = |ph: &'static str| events.iter().filter(move |e| e["ph"] == ph);
    let ranges: Vec<_> = of("X").collect();
    assert_eq!(ranges.len(), 2);
    assert_eq!(ranges[0]["tid"], 1);
    assert_eq!(ranges[0]["cat"], "fill");
    assert_eq!(ranges[1]["tid"], 2);
    assert_eq!(ranges[1]["cat"], "read");
    assert_eq!(ranges[1]["args"]["bytes"], 4096);
    assert_eq!(ranges[1]["args"]["device_times"], true);
    let threads: Vec<_> = of("M")
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(threads, ["host", "queue 0", "queue 1"]);
    for ph in ["s", "t", "f"] {
        assert_eq!(of(ph).count(), 2, "flow phase {ph}");
    }
    assert_eq!(
        of("i").count(),
        4,
        "a submit and a done instant per operation"
    );
    let queues = &trace["otherData"]["cpu://0"]["queues"];
    assert_eq!(queues[1]["by_kind"]["read"], 1);
    let counters = &trace["otherData"]["cpu://0"]["counters"];
    assert_eq!(counters["allocations"], 1);
    assert_eq!(counters["bytes_in_use"], 4096);
    assert_eq!(counters["pending_actions"], 0);
    assert!(counters["reactor_wakeups"].is_u64());

    // JSONL: an operation per line, then each queue's counters, then the device's.
    let lines: Vec<serde_json::Value> = profile
        .to_jsonl()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[0]["type"], "operation");
    assert_eq!(lines[1]["kind"], "read");
    assert!(
        lines[1]["device_start_ns"].as_u64().unwrap()
            >= lines[0]["device_end_ns"].as_u64().unwrap()
    );
    assert_eq!(lines[3]["type"], "counters");
    assert_eq!(lines[4]["type"], "device_counters");
    assert_eq!(lines[4]["allocations"], 1);

    // SVG: a lane per queue and a bar per operation.
    let svg = profile.to_svg();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<title>").count(), 2);
    assert!(svg.contains("cpu://0 q0") && svg.contains("cpu://0 q1"));
    Ok(())
}

/// A failure is recorded with its error and still has its stages; a refused operation too.
#[test]
fn failures_are_recorded() -> halcyon::Result<()> {
    let device = device(1);
    device.profiler().enable();
    let queue = device.queue(0)?;
    let buffer = device.allocator().allocate(64, BufferParams::DEVICE)?;
    let failed = block_on(queue.host_call(Timepoints::default(), || {
        Err(halcyon::Error::new(
            StatusCode::Aborted,
            "the host call says no",
        ))
    }));
    assert!(failed.is_err());
    // A fill with a 3-byte pattern is refused at submission, and fails in order.
    let refused = block_on(queue.fill(Timepoints::default(), [1u8; 3], &buffer.whole()));
    assert_eq!(refused.unwrap_err().code(), StatusCode::InvalidArgument);
    let profile = device.profiler().take();
    assert_eq!(profile.operations.len(), 2);
    let error = profile.operations[0].error.as_deref().unwrap();
    assert!(error.contains("the host call says no"), "{error}");
    assert!(profile.operations[1].error.is_some());
    for op in &profile.operations {
        assert_eq!(op.kind, OperationKind::HostCall);
        assert!(op.completed_ns.is_some());
    }
    assert!(Profile::from(profile).to_svg().contains("failed:"));
    Ok(())
}

/// Off, nothing is recorded but the counters; a limit drops the oldest records.
#[test]
fn off_records_nothing_and_the_limit_holds() -> halcyon::Result<()> {
    let device = device(1);
    let queue = device.queue(0)?;
    let buffer = device.allocator().allocate(64, BufferParams::DEVICE)?;
    block_on(queue.fill(Timepoints::default(), 0u8, &buffer.whole()))?;
    assert!(device.profiler().take().operations.is_empty());
    assert_eq!(device.profiler().counters()[0].submissions, 1);

    device.profiler().enable();
    device.profiler().set_limit(3);
    let timeline = queue.timeline()?;
    for value in 0..5u8 {
        block_on(queue.fill(timeline.next(), value, &buffer.whole()))?;
    }
    let profile = device.profiler().take();
    assert_eq!(profile.operations.len(), 3);
    assert_eq!(profile.dropped, 2);
    let ids: Vec<u64> = profile.operations.iter().map(|op| op.id).collect();
    assert_eq!(ids, [3, 4, 5], "the newest kept");
    // Lowering the limit below what is kept drops the surplus with the next record.
    for value in 0..3u8 {
        block_on(queue.fill(timeline.next(), value, &buffer.whole()))?;
    }
    device.profiler().set_limit(1);
    block_on(queue.fill(timeline.next(), 9u8, &buffer.whole()))?;
    let profile = device.profiler().take();
    let ids: Vec<u64> = profile.operations.iter().map(|op| op.id).collect();
    assert_eq!((ids, profile.dropped), (vec![9], 5));
    device.profiler().disable();
    block_on(queue.fill(Timepoints::default(), 0u8, &buffer.whole()))?;
    assert!(device.profiler().take().operations.is_empty());
    Ok(())
}

/// Two devices record on one clock: work on the second that waits for the first starts after
/// it ended, in both devices' records.
#[test]
fn two_devices_share_one_clock() -> halcyon::Result<()> {
    let (first, second) = (device(1), device(1));
    first.profiler().enable();
    second.profiler().enable();
    let a = first.allocator().allocate(1 << 20, BufferParams::DEVICE)?;
    let b = second.allocator().allocate(1 << 20, BufferParams::DEVICE)?;
    let handoff = halcyon::Semaphore::new(0);
    block_on(async {
        let second_fill = second.queue(0)?.fill(
            Timepoints::new(Fence::at(&handoff, 1), Fence::new()),
            2u8,
            &b.whole(),
        );
        first
            .queue(0)?
            .fill(
                Timepoints::new(Fence::new(), Fence::at(&handoff, 1)),
                1u8,
                &a.whole(),
            )
            .await?;
        second_fill.await
    })?;
    let (p1, p2) = (first.profiler().take(), second.profiler().take());
    let (op1, op2) = (&p1.operations[0], &p2.operations[0]);
    check_stages(op1);
    check_stages(op2);
    assert!(op2.device_ns.unwrap().0 >= op1.device_ns.unwrap().1);
    let both: Profile = [p1, p2].into_iter().collect();
    let trace: serde_json::Value = serde_json::from_str(&both.to_chrome_trace()).unwrap();
    let pids: std::collections::BTreeSet<u64> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids.into_iter().collect::<Vec<_>>(), [1, 2]);
    Ok(())
}

/// Labels name queues, buffers, semaphores, command buffers and executables in the exports and
/// in error messages.
#[test]
fn labels_name_objects_in_traces_and_errors() -> halcyon::Result<()> {
    use halcyon::{CommandBuffer, CommandBufferMode};

    let device = device(1);
    device.profiler().enable();
    let queue = device.queue(0)?;
    queue.set_label("upload");
    assert_eq!(queue.to_string(), "queue 0 'upload' of cpu://0");
    let weights = device.allocator().allocate(256, BufferParams::DEVICE)?;
    weights.set_label("weights");
    assert_eq!(
        weights.to_string(),
        format!("buffer {} 'weights'", weights.id())
    );
    let gate = device.create_semaphore(0)?;
    gate.set_label("gate");
    let executable = device.load_executable(&kernels().spec())?;
    executable.set_label("kernels");
    assert!(executable.to_string().ends_with(" 'kernels'"));
    let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
    builder.fill(0u8, weights.whole())?;
    builder.fill(1u8, &weights.slice(0..4)?)?;
    let frame = builder.finish();
    frame.set_label("frame");
    block_on(async {
        queue
            .fill(
                Timepoints::new(Fence::new(), Fence::at(&gate, 1)),
                7u8,
                &weights.whole(),
            )
            .await?;
        queue
            .execute(
                Timepoints::new(Fence::at(&gate, 1), Fence::new()),
                &frame,
                None,
            )
            .await
    })?;
    let profile = Profile::from(device.profiler().take());
    let names: Vec<&str> = profile.devices[0]
        .operations
        .iter()
        .map(|op| op.name.as_str())
        .collect();
    assert_eq!(names, ["fill weights", "execute frame"]);
    assert_eq!(profile.devices[0].queue_labels, [Some("upload".to_owned())]);
    assert_eq!(
        profile.devices[0].semaphores,
        [(gate.id(), "gate".to_owned())]
    );
    let trace: serde_json::Value = serde_json::from_str(&profile.to_chrome_trace()).unwrap();
    assert!(trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "thread_name" && e["args"]["name"] == "queue 0 'upload'"));
    assert_eq!(
        trace["otherData"]["cpu://0"]["semaphores"][gate.id().to_string()],
        "gate"
    );
    assert!(profile.to_jsonl().contains(r#""type":"semaphore""#));
    assert!(profile.to_svg().contains("cpu://0 q0 'upload'"));

    // Error messages name the labelled objects.
    let unmappable = device.allocator().allocate(64, BufferParams::DEVICE)?;
    unmappable.set_label("scratch");
    let error = unmappable.map_read(..).unwrap_err();
    assert!(error.message().contains("'scratch'"), "{error}");
    gate.fail(halcyon::Error::new(StatusCode::Cancelled, "stop"));
    let mut step = queue.timeline()?.next();
    step.wait.insert(&gate, 2);
    let error = block_on(queue.fill(step, 0u8, &weights.whole())).unwrap_err();
    assert!(
        error.message().contains("a failed semaphore 'gate'"),
        "{error}"
    );
    Ok(())
}

/// Device counters are queryable at any time: parked actions, allocations, reactor wake-ups.
#[test]
fn device_counters_count_parked_actions_and_allocations() -> halcyon::Result<()> {
    use halcyon::device::keys;

    let device = device(1);
    let counter = |name: &str| {
        device
            .profiler()
            .device_counters()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    };
    let queue = device.queue(0)?;
    let buffer = device.allocator().allocate(64, BufferParams::DEVICE)?;
    let gate = halcyon::Semaphore::new(0);
    let parked = queue.fill(
        Timepoints::new(Fence::at(&gate, 1), Fence::new()),
        1u8,
        &buffer.whole(),
    );
    assert_eq!(counter("pending_actions"), Some(1));
    assert_eq!(device.query(keys::PENDING_ACTIONS)?, 1);
    assert_eq!(counter("allocations"), Some(1));
    // Whether the release needs a wake-up depends on whether the reactor slept in between:
    // only the counter's presence is certain.
    assert!(counter("reactor_wakeups").is_some());
    gate.signal(1)?;
    block_on(parked)?;
    // The reactor stops counting the release just after issuing it, which may be after the
    // fill already completed on a worker: the count reaches 0 soon, not necessarily now.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while counter("pending_actions") != Some(0) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(counter("pending_actions"), Some(0));
    assert_eq!(
        counter("graph_replays"),
        None,
        "the CPU device has no graphs"
    );
    Ok(())
}
