//! Rust kernels: a binding read as a type it is not aligned for fails the dispatch with an
//! error naming the binding and the type, instead of the kernel silently seeing nothing.

use halcyon::{BufferParams, EntryPoint, StatusCode, Timepoints};
use halcyon_cpu::{CpuDeviceOptions, RustKernels};

#[test]
fn a_misaligned_binding_fails_the_dispatch() {
    let device = halcyon_cpu::create_device(CpuDeviceOptions::default()).unwrap();
    let entry = EntryPoint {
        name: "sum_u64".into(),
        workgroup_size: [1, 1, 1],
        binding_count: 1,
        constant_count: 0,
    };
    let spec = RustKernels::new()
        .entry(entry, |ctx| {
            let values = ctx.binding::<u64>(0)?;
            let _sum: u64 = values.iter().sum();
            Ok(())
        })
        .spec();
    let executable = device.load_executable(&spec).unwrap();
    let buffer = device
        .allocator()
        .allocate(64, BufferParams::DEVICE)
        .unwrap();
    let queue = device.queue(0).unwrap();
    futures::executor::block_on(async {
        let aligned = buffer.slice(8..64).unwrap();
        queue
            .dispatch(
                Timepoints::default(),
                &executable
                    .kernel("sum_u64")
                    .unwrap()
                    .launch([1, 1, 1])
                    .binding(aligned),
            )
            .await
            .unwrap();
        let misaligned = buffer.slice(4..60).unwrap();
        let error = queue
            .dispatch(
                Timepoints::default(),
                &executable
                    .kernel("sum_u64")
                    .unwrap()
                    .launch([1, 1, 1])
                    .binding(misaligned),
            )
            .await
            .unwrap_err();
        assert_eq!(error.code(), StatusCode::KernelFailed, "{error}");
        let message = error.to_string();
        assert!(
            message.contains("binding 0") && message.contains("u64") && message.contains('8'),
            "{message}"
        );
    });
}

// The binding views: these run under Miri too (`scripts/miri.sh`), which checks that the
// views hand concurrent workgroups no aliasing `&mut` (the old `binding_mut` pattern, a
// `&mut [T]` over the whole binding in every workgroup, is a data race Miri reports).

fn device(workers: usize) -> halcyon::Device {
    halcyon_cpu::create_device(
        CpuDeviceOptions::default()
            .with_mode(halcyon_cpu::ExecutionMode::Pool { workers })
            .with_queue_count(1),
    )
    .unwrap()
}

fn entry(name: &str, binding_count: u32) -> EntryPoint {
    EntryPoint {
        name: name.into(),
        workgroup_size: [1, 1, 1],
        binding_count,
        constant_count: 0,
    }
}

fn run(
    device: &halcyon::Device,
    kernels: RustKernels,
    workgroups: u32,
    bindings: &[halcyon::BufferRef],
) -> halcyon::Result<()> {
    let executable = device.load_executable(&kernels.spec())?;
    let queue = device.queue(0)?;
    futures::executor::block_on(
        queue.dispatch(
            Timepoints::default(),
            &executable
                .kernel_at(0)?
                .launch([workgroups, 1, 1])
                .bindings(bindings),
        ),
    )
}

fn read_u32(device: &halcyon::Device, buffer: &halcyon::Buffer) -> Vec<u32> {
    let queue = device.queue(0).unwrap();
    let bytes =
        futures::executor::block_on(queue.read(Timepoints::default(), &buffer.whole())).unwrap();
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Two workgroups on two workers each write their half through `chunk_mut`, reading a shared
/// input through `binding`: both halves arrive, and (under Miri) nothing races.
#[test]
fn workgroups_write_their_own_chunks_concurrently() {
    let device = device(2);
    let allocator = device.allocator();
    let input = allocator.allocate(8 * 4, BufferParams::DEVICE).unwrap();
    let output = allocator.allocate(8 * 4, BufferParams::DEVICE).unwrap();
    let kernels = RustKernels::new().entry(entry("double", 2), |ctx| {
        let start = ctx.workgroup_index() as usize * 4;
        let input = ctx.binding::<u32>(0)?;
        let out = ctx.chunk_mut::<u32>(1, 4)?;
        for (i, o) in out.iter_mut().enumerate() {
            *o = 2 * input[start + i] + 1;
        }
        Ok(())
    });
    run(&device, kernels, 2, &[input.whole(), output.whole()]).unwrap();
    assert_eq!(read_u32(&device, &output), [1; 8]);
}

/// Chunks past the binding's end are empty and the last one is cut short; a workgroup cannot
/// take the same chunk twice.
#[test]
fn chunks_are_cut_at_the_end_and_taken_once() {
    let device = device(2);
    let buffer = device
        .allocator()
        .allocate(10 * 4, BufferParams::DEVICE)
        .unwrap();
    let kernels = RustKernels::new().entry(entry("lengths", 1), |ctx| {
        let chunk = ctx.chunk_mut::<u32>(0, 4)?;
        let expected = [4, 4, 2, 0][ctx.workgroup_index() as usize];
        if chunk.len() != expected {
            return Err(format!(
                "chunk of {} elements, expected {expected}",
                chunk.len()
            ));
        }
        chunk.fill(ctx.workgroup_index() as u32 + 1);
        match ctx.chunk_mut::<u32>(0, 4) {
            Err(message) if message.contains("already holds a chunk") => Ok(()),
            other => Err(format!("a second chunk: {other:?}")),
        }
    });
    run(&device, kernels, 4, &[buffer.whole()]).unwrap();
    assert_eq!(read_u32(&device, &buffer), [1, 1, 1, 1, 2, 2, 2, 2, 3, 3]);
}

/// Two bindings over overlapping ranges of one buffer: chunks of them would alias, so
/// `chunk_mut` refuses and the dispatch fails naming both; reading both is fine.
#[test]
fn aliasing_bindings_cannot_be_chunked() {
    let device = device(2);
    let buffer = device
        .allocator()
        .allocate(16 * 4, BufferParams::DEVICE)
        .unwrap();
    let (first, second) = (buffer.slice(0..48).unwrap(), buffer.slice(16..64).unwrap());
    let write = RustKernels::new().entry(entry("write", 2), |ctx| {
        ctx.chunk_mut::<u32>(1, 4)?.fill(9);
        Ok(())
    });
    let error = run(&device, write, 3, &[first.clone(), second.clone()]).unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("binding 1 overlaps bindings [0]"),
        "{message}"
    );
    assert!(read_u32(&device, &buffer).iter().all(|&v| v == 0));

    let read = RustKernels::new().entry(entry("read", 2), |ctx| {
        let (a, b) = (ctx.binding::<u32>(0)?, ctx.binding::<u32>(1)?);
        if a.len() + b.len() == 24 {
            Ok(())
        } else {
            Err("wrong lengths".into())
        }
    });
    run(&device, read, 3, &[first, second]).unwrap();
}

/// Every workgroup must use a binding the same way: one reading what another writes fails the
/// dispatch instead of racing.
#[test]
fn mixed_views_of_one_binding_fail_the_dispatch() {
    let device = device(2);
    let buffer = device
        .allocator()
        .allocate(8 * 4, BufferParams::DEVICE)
        .unwrap();
    let kernels = RustKernels::new().entry(entry("mixed", 1), |ctx| {
        if ctx.workgroup_index() == 0 {
            ctx.chunk_mut::<u32>(0, 4)?.fill(1);
        } else {
            let _ = ctx.binding::<u32>(0)?;
        }
        Ok(())
    });
    let error = run(&device, kernels, 2, &[buffer.whole()]).unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("every workgroup of a dispatch must access a binding the same way"),
        "{message}"
    );
}

/// Scattered writes through atomics: every workgroup adds to every counter.
#[test]
fn atomics_take_scattered_writes_from_every_workgroup() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let device = device(2);
    let buffer = device
        .allocator()
        .allocate(4 * 4, BufferParams::DEVICE)
        .unwrap();
    let kernels = RustKernels::new().entry(entry("count", 1), |ctx| {
        for (i, counter) in ctx.atomics::<AtomicU32>(0)?.iter().enumerate() {
            counter.fetch_add(i as u32 + 1, Ordering::Relaxed);
        }
        Ok(())
    });
    run(&device, kernels, 6, &[buffer.whole()]).unwrap();
    assert_eq!(read_u32(&device, &buffer), [6, 12, 18, 24]);
}

/// Two dispatches of one kernel that nothing orders run at the same time on the pool: the
/// second may not chunk memory the first is writing; its dispatch fails naming the conflict,
/// and the first completes.
#[test]
fn concurrent_dispatches_cannot_write_the_same_memory() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Arc;
    let device = device(2);
    let buffer = device
        .allocator()
        .allocate(4 * 4, BufferParams::DEVICE)
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let release = Arc::new(AtomicBool::new(false));
    let (kernel_calls, kernel_release) = (calls.clone(), release.clone());
    let kernels = RustKernels::new().entry(entry("hold", 1), move |ctx| {
        let chunk = ctx.chunk_mut::<u32>(0, 4)?;
        if kernel_calls.fetch_add(1, Ordering::SeqCst) == 0 {
            while !kernel_release.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        }
        chunk.fill(5);
        Ok(())
    });
    let executable = device.load_executable(&kernels.spec()).unwrap();
    let queue = device.queue(0).unwrap();
    let dispatch = || {
        queue.dispatch(
            Timepoints::default(),
            &executable
                .kernel("hold")
                .unwrap()
                .launch([1, 1, 1])
                .binding(buffer.whole()),
        )
    };
    let first = dispatch();
    while calls.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    let second = futures::executor::block_on(dispatch());
    release.store(true, Ordering::SeqCst);
    futures::executor::block_on(first).unwrap();
    let message = second.unwrap_err().to_string();
    assert!(message.contains("another dispatch"), "{message}");
    // Once the first is done, its memory is free again.
    futures::executor::block_on(dispatch()).unwrap();
    assert_eq!(read_u32(&device, &buffer), [5; 4]);
}

/// Queue transfers and reads are checked against running dispatches like dispatches are: a
/// fill, update or copy that nothing orders against a dispatch's views of the same bytes is
/// refused with `FailedPrecondition` instead of writing under a `&[T]` (a data race), a queue
/// read of bytes a dispatch writes likewise; copying *from* memory a dispatch only reads is
/// fine, and once the dispatch is done the same transfers run.
#[test]
fn unordered_transfers_cannot_race_a_running_dispatch() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Arc;
    let device = device(2);
    let alloc = |n: u64| {
        device
            .allocator()
            .allocate(n, BufferParams::DEVICE)
            .unwrap()
    };
    let (input, output, spare) = (alloc(16), alloc(16), alloc(16));
    let started = Arc::new(AtomicU32::new(0));
    let release = Arc::new(AtomicBool::new(false));
    let (kernel_started, kernel_release) = (started.clone(), release.clone());
    let kernels = RustKernels::new().entry(entry("hold", 2), move |ctx| {
        let input = ctx.binding::<u32>(0)?;
        let output = ctx.chunk_mut::<u32>(1, 4)?;
        kernel_started.fetch_add(1, Ordering::SeqCst);
        while !kernel_release.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        for (o, i) in output.iter_mut().zip(input) {
            *o = i + 1;
        }
        Ok(())
    });
    let executable = device.load_executable(&kernels.spec()).unwrap();
    let queue = device.queue(0).unwrap();
    let held = queue.dispatch(
        Timepoints::default(),
        &executable
            .kernel("hold")
            .unwrap()
            .launch([1, 1, 1])
            .binding(input.whole())
            .binding(output.whole()),
    );
    while started.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    use futures::executor::block_on;
    let refused = |result: halcyon::Result<()>, what: &str| {
        let error = result.unwrap_err();
        assert_eq!(
            error.code(),
            StatusCode::FailedPrecondition,
            "{what}: {error}"
        );
        let message = error.to_string();
        assert!(
            message.contains("of another dispatch running at the same time"),
            "{what}: {message}"
        );
    };
    refused(
        block_on(queue.fill(Timepoints::default(), 7u8, &input.whole())),
        "fill under a shared view",
    );
    refused(
        block_on(queue.update(Timepoints::default(), &[1u8; 16], &output.whole())),
        "update under a chunked write",
    );
    refused(
        block_on(queue.copy(Timepoints::default(), &spare.whole(), &input.whole())),
        "copy into a shared view",
    );
    refused(
        block_on(queue.copy(Timepoints::default(), &output.whole(), &spare.whole())),
        "copy out of a chunked write",
    );
    refused(
        block_on(queue.read::<u8>(Timepoints::default(), &output.whole())).map(drop),
        "read of a chunked write",
    );
    // Reading what the dispatch only reads races nothing.
    block_on(queue.copy(Timepoints::default(), &input.whole(), &spare.whole())).unwrap();
    release.store(true, Ordering::SeqCst);
    block_on(held).unwrap();
    assert_eq!(read_u32(&device, &output), [1; 4]);
    // Ordered after the dispatch (it is done), the same transfers run.
    block_on(queue.fill(Timepoints::default(), 7u8, &input.whole())).unwrap();
    block_on(queue.copy(Timepoints::default(), &spare.whole(), &output.whole())).unwrap();
    assert_eq!(read_u32(&device, &input), [0x0707_0707; 4]);
    assert_eq!(read_u32(&device, &output), [0; 4]);
}

/// A launch reuses the command its first dispatch built; appending to a copy of it builds
/// anew (here: one binding too many, refused).
#[test]
fn a_changed_launch_is_checked_again() {
    let device = halcyon_cpu::create_device(
        halcyon_cpu::CpuDeviceOptions::default().with_mode(halcyon_cpu::ExecutionMode::Inline),
    )
    .expect("device");
    let kernels = halcyon_cpu::RustKernels::new().entry(
        halcyon::EntryPoint {
            name: "touch".into(),
            workgroup_size: [1, 1, 1],
            binding_count: 1,
            constant_count: 0,
        },
        |ctx| {
            ctx.chunk_mut::<u32>(0, 1)?[0] += 1;
            Ok(())
        },
    );
    let touch = (device.load_executable(&kernels.spec()))
        .and_then(|e| e.kernel("touch"))
        .expect("kernel");
    let buffer = (device.allocator())
        .allocate(4, halcyon::BufferParams::DEVICE)
        .expect("allocate");
    let queue = device.queue(0).expect("queue");
    let launch = touch.launch([1, 1, 1]).binding(buffer.whole());
    for _ in 0..3 {
        futures::executor::block_on(queue.dispatch(halcyon::Timepoints::default(), &launch))
            .expect("dispatch");
    }
    let two = launch.clone().binding(buffer.whole());
    let error = futures::executor::block_on(queue.dispatch(halcyon::Timepoints::default(), &two))
        .unwrap_err();
    assert_eq!(
        error.code(),
        halcyon::StatusCode::InvalidArgument,
        "{error}"
    );
    futures::executor::block_on(queue.dispatch(halcyon::Timepoints::default(), &launch.clone()))
        .expect("again");
    let read: Vec<u32> =
        futures::executor::block_on(queue.read(halcyon::Timepoints::default(), &buffer.whole()))
            .expect("read");
    assert_eq!(read, [4]);
}

/// Pooled dispatches reuse their jobs' allocations (`pool::KeptJobs`), but a kept job holds
/// nothing of its submission: once every dispatch completed and the buffers are dropped, their
/// memory is freed, and a kernel failure still fails its dispatch after many reuses. Under
/// Miri this also checks the tiles' shared reads against `done` taking them.
#[test]
fn reused_dispatch_jobs_let_go_of_their_buffers() {
    let device = device(2);
    let allocator = device.allocator();
    let kernels = RustKernels::new()
        .entry(entry("inc", 1), |ctx| {
            for x in ctx.chunk_mut::<u32>(0, 1)? {
                *x += 1;
            }
            Ok(())
        })
        .entry(entry("fail", 1), |_| Err("fails on purpose".into()));
    let executable = device.load_executable(&kernels.spec()).unwrap();
    let queue = device.queue(0).unwrap();
    let rounds = if cfg!(miri) { 12 } else { 40 };
    for round in 0..rounds {
        let buffer = allocator.allocate(4 * 4, BufferParams::DEVICE).unwrap();
        let kernel = executable.kernel_at(round % 2).unwrap();
        let outcome = futures::executor::block_on(queue.dispatch(
            Timepoints::default(),
            &kernel.launch([4, 1, 1]).binding(buffer.whole()),
        ));
        if round % 2 == 0 {
            outcome.unwrap();
            assert_eq!(read_u32(&device, &buffer), [1; 4], "round {round}");
        } else {
            let error = outcome.unwrap_err();
            assert_eq!(error.code(), StatusCode::KernelFailed, "{error}");
            assert!(error.message().contains("fails on purpose"), "{error}");
        }
    }
    // Every buffer was dropped: their memory goes once the runs holding them ended (just
    // after their signals, so allow a moment).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while allocator.stats().bytes_in_use > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} bytes still in use: a kept job holds a buffer",
            allocator.stats().bytes_in_use
        );
        std::thread::yield_now();
    }
}
