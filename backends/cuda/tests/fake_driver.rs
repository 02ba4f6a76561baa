//! halcyon-cuda on the fake CUDA driver (`testing/fake-gpu`): a `libcuda.so.1` that
//! runs the driver API on host threads and aborts the process, with a backtrace, when the
//! caller breaks the API's contract (a call without the context current, any call from a host
//! function, a destroyed handle, memory freed before the device got to work using it, a
//! resource leaked into the context's destruction; see the crate's docs). It is loaded before
//! anything opens libcuda, so every driver call in this process reaches it.
//!
//! On it run, unchanged: the conformance suite under the configurations `tests/conformance.rs`
//! uses on a GPU (flag-write completion included), and the direct translation-table and device tests of
//! `tests/gpu/mod.rs`. That executes every line of `CudaApi` that does not depend on a real
//! GPU's behaviour, in CI. What it cannot show: that CUDA itself behaves as the fake models it
//! (the GPU run still decides that), or anything about speed.
//!
//! Faults are sticky for the context every test shares, so they are tested in
//! `tests/fake_driver_faults.rs`, a process of their own.

mod common;
mod fake;
mod gpu;

use std::time::Duration;

use common::CudaKernels;
use fake::{fake_device, options, prepare_driver};
use halcyon::{Device, Error, StatusCode};
use halcyon_cuda::{create_device_with, CudaDeviceOptions, CudaModule};
use halcyon_stream::CompletionStrategy;

/// Completion threads blocked in `cuEventSynchronize` (the default).
mod completion_thread {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || fake_device(options(CompletionStrategy::CompletionThread)),
        CudaKernels
    );
}

/// Completion threads that poll `cuEventQuery` before they sleep.
mod completion_thread_spin {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || fake_device(
            options(CompletionStrategy::CompletionThread)
                .with_completion_spin(Duration::from_micros(100))
        ),
        CudaKernels
    );
}

/// `cuLaunchHostFunc` callbacks posting to the reactor.
mod host_callback {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || fake_device(options(CompletionStrategy::HostCallback)),
        CudaKernels
    );
}

/// `cuStreamWriteValue32` into pinned words, read by one scanner thread (spinning 20 µs).
mod flag_write {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || fake_device(
            options(CompletionStrategy::FlagWrite).with_completion_spin(Duration::from_micros(20))
        ),
        CudaKernels
    );
}

/// Reusable command lists replayed as CUDA graphs.
mod graphs {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || fake_device(options(CompletionStrategy::CompletionThread).with_graphs(true)),
        CudaKernels
    );
}

/// `cuda://0` and `cuda://1` on the fake driver (two devices, each with its own primary
/// context), with the same options.
fn fake_devices(options: CudaDeviceOptions) -> halcyon::Result<(Device, Device)> {
    Ok((fake_device(options)?, create_device_with(1, options)?))
}

/// The multi-device cases on `cuda://0` and `cuda://1` with completion threads: each call
/// binds its own device's context on whichever thread makes it (the fake checks that work is
/// enqueued under the stream's own context and never reaches the other device's memory).
mod completion_thread_pair {
    use super::*;

    halcyon_conformance::multi_device_tests!(
        || fake_devices(options(CompletionStrategy::CompletionThread)),
        CudaKernels
    );
}

/// The multi-device cases on `cuda://0` and `cuda://1` with flag-write completion.
mod flag_write_pair {
    use super::*;

    halcyon_conformance::multi_device_tests!(
        || fake_devices(options(CompletionStrategy::FlagWrite)),
        CudaKernels
    );
}

/// The multi-device cases on `cuda://0` and `cuda://1` with host callbacks.
mod host_callback_pair {
    use super::*;

    halcyon_conformance::multi_device_tests!(
        || fake_devices(options(CompletionStrategy::HostCallback)),
        CudaKernels
    );
}

/// The multi-device cases on two halcyon devices over `cuda://0`: one primary context shared
/// by two `CudaApi`s, whose handles and buffers are still each device's own.
mod one_gpu_pair {
    use super::*;

    halcyon_conformance::multi_device_tests!(
        || Ok((
            fake_device(options(CompletionStrategy::CompletionThread))?,
            fake_device(options(CompletionStrategy::HostCallback))?
        )),
        CudaKernels
    );
}

/// Frees on another thread never invalidate a graph capture: `cuMemFree` may synchronise the
/// context, which CUDA calls invalid while a stream captures (the fake invalidates the capture
/// then), so halcyon-cuda holds such calls back until the device's captures end. A thread
/// allocates and frees buffers without pause while the test captures 60 lists of 32 fills;
/// every capture succeeds and every list gives the right bytes.
#[test]
fn frees_on_other_threads_wait_for_graph_captures() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use halcyon::{BufferParams, CommandBuffer, CommandBufferMode, Fence, Timepoints};
    use halcyon_conformance::harness::{block_on, download_u32, upload_u32};
    use halcyon_stream::keys;

    let fake = match prepare_driver() {
        Ok(fake) => fake,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let before = fake.stats();
    let device =
        fake_device(options(CompletionStrategy::CompletionThread).with_graphs(true)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let freer = {
        let (device, stop) = (device.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut frees = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let buffer = device.allocator().allocate(4096, BufferParams::DEVICE);
                drop(buffer.expect("a 4 KiB buffer"));
                frees += 1;
            }
            frees
        })
    };
    let queue = device.queue(0).unwrap();
    const ROUNDS: u32 = 60;
    block_on(async {
        let buffer = upload_u32(&queue, &[0; 32]).await?;
        for round in 1..=ROUNDS {
            let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
            for i in 0..32u64 {
                builder.fill(round, buffer.slice(4 * i..4 * i + 4)?)?;
            }
            let list = builder.finish();
            for _ in 0..2 {
                queue.execute(Timepoints::default(), &list, None).await?;
            }
            let out = download_u32(&queue, Fence::new(), &buffer.whole()).await?;
            assert_eq!(out, [round; 32], "round {round}");
        }
        Ok::<(), Error>(())
    })
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    let frees = freer.join().unwrap();
    assert!(frees > 0);
    let stat = |key| device.query(key).unwrap();
    assert_eq!(stat(keys::GRAPH_CAPTURE_FAILURES), 0, "{frees} frees");
    assert_eq!(stat(keys::GRAPH_CAPTURES), u64::from(ROUNDS));
    let after = fake.stats();
    assert_eq!(
        after.captures_invalidated, before.captures_invalidated,
        "{frees} frees"
    );
}

/// A reusable list executed with a new binding table each time keeps its CUDA graph: the
/// graph's kernel node is pointed at each table's buffer in place
/// (`cuGraphExecKernelNodeSetParams`), found by its position in the captured chain, with the
/// right results although every submission is made before any completes.
#[test]
fn graphs_follow_binding_tables_in_place() {
    use halcyon::{Binding, BindingTable, CommandBuffer, CommandBufferMode, Fence};
    use halcyon_conformance::harness::{block_on, download_u32, upload_u32};
    use halcyon_conformance::kernels::{workgroups, StandardKernels};
    use halcyon_stream::keys;

    if let Err(e) = prepare_driver() {
        eprintln!("skipped: {e}");
        return;
    }
    let device =
        fake_device(options(CompletionStrategy::CompletionThread).with_graphs(true)).unwrap();
    let queue = device.queue(0).unwrap();
    const N: u32 = 64;
    block_on(async {
        let kernels = StandardKernels::load(&device, &CudaKernels)?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder.fill(0u32, Binding::slot(1, 0, 4))?;
        builder.dispatch(
            &kernels
                .add_one
                .launch(workgroups(N))
                .constant(N)
                .binding(Binding::slot(0, 0, u64::from(N) * 4)),
        )?;
        let add = builder.finish();
        let a = upload_u32(&queue, &[0; N as usize]).await?;
        let b = upload_u32(&queue, &[100; N as usize]).await?;
        let scratch = upload_u32(&queue, &[7; 1]).await?;
        let timeline = queue.timeline()?;
        let mut runs = Vec::new();
        for buffer in [&a, &b, &b, &a, &b, &a, &b, &a] {
            let table = BindingTable::from_ranges([buffer.whole(), scratch.whole()]);
            runs.push(queue.execute(timeline.next(), &add, Some(&table)));
        }
        for run in runs {
            run.await?;
        }
        let end = Fence::at(timeline.semaphore(), timeline.last());
        let a = download_u32(&queue, end.clone(), &a.whole()).await?;
        let b = download_u32(&queue, end, &b.whole()).await?;
        assert_eq!(a, [4; N as usize]);
        assert_eq!(b, [104; N as usize]);
        Ok::<(), Error>(())
    })
    .unwrap();
    let stat = |key| device.query(key).unwrap();
    // Direct, captured (b), then launched six times, the kernel moved five times; the fill's
    // slot never moved, so nothing bypassed the graph.
    assert_eq!(stat(keys::GRAPH_CAPTURES), 1);
    assert_eq!(stat(keys::GRAPH_LAUNCHES), 7);
    assert_eq!(stat(keys::GRAPH_KERNEL_UPDATES), 5);
    assert_eq!(stat(keys::GRAPH_BYPASSES), 0);
}

/// The fake really is the driver here: kernels, host functions and graph launches reach it.
#[test]
fn work_reaches_the_fake_driver() {
    let fake = match prepare_driver() {
        Ok(fake) => fake,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    use halcyon::{CommandBuffer, CommandBufferMode};
    use halcyon_conformance::harness::{block_on, download_u32, upload_u32};

    let before = fake.stats();
    let device = fake_device(options(CompletionStrategy::HostCallback).with_graphs(true)).unwrap();
    // cuDeviceTotalMem answers the fake's 1 GiB.
    let memory = device.query(halcyon::device::keys::MEMORY_BYTES).unwrap();
    assert_eq!(memory, 1 << 30);
    let executable = device
        .load_executable(&common::standard_module().spec())
        .unwrap();
    let add_one = executable.kernel("add_one_u32").unwrap();
    let queue = device.queue(0).unwrap();
    block_on(async {
        let buffer = upload_u32(&queue, &[1, 2, 3, 4]).await?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder.dispatch(
            &add_one
                .launch([1, 1, 1])
                .constant(4u32)
                .binding(buffer.whole()),
        )?;
        let commands = builder.finish();
        let timeline = queue.timeline()?;
        for _ in 0..3 {
            queue.execute(timeline.next(), &commands, None).await?;
        }
        let out = download_u32(&queue, halcyon::Fence::new(), &buffer.whole()).await?;
        assert_eq!(out, [4, 5, 6, 7]);
        Ok(())
    })
    .unwrap();
    drop(queue);
    drop(executable);
    drop(device);
    let after = fake.stats();
    assert!(
        after.kernels_run >= before.kernels_run + 3,
        "{before:?} → {after:?}"
    );
    assert!(
        after.host_funcs_run > before.host_funcs_run,
        "{before:?} → {after:?}"
    );
    assert!(
        after.graph_launches >= before.graph_launches + 2,
        "{before:?} → {after:?}"
    );
    // (A contract violation would have aborted the process.)
}

/// A write and a read larger than a staging chunk go through pinned staging of at most
/// two chunks (`staging_len` of an unbounded copy: the halves the chunks take turns through), and arrive whole; the staging comes back to the pool.
#[test]
fn large_transfers_stage_in_bounded_chunks() {
    use halcyon_conformance::harness::{block_on, download_u32, upload_u32};
    // The staging one copy needs at most: two chunks.
    let chunk_bytes = halcyon_stream::staging::staging_len(usize::MAX);

    let fake = match prepare_driver() {
        Ok(fake) => fake,
        Err(e) => return eprintln!("skipped: {e}"),
    };
    let before = fake.stats();
    let device = fake_device(options(CompletionStrategy::CompletionThread)).unwrap();
    let queue = device.queue(0).unwrap();
    // Two and a half chunks, and a few words more.
    let words = 5 * chunk_bytes / 8 + 3;
    let data: Vec<u32> = (0..words as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    for _ in 0..2 {
        let buffer = block_on(upload_u32(&queue, &data)).unwrap();
        let back = block_on(download_u32(&queue, halcyon::Fence::new(), &buffer.whole())).unwrap();
        assert!(back == data, "the bytes arrive whole");
    }
    drop(queue);
    drop(device);
    let after = fake.stats();
    assert!(
        after.largest_pinned <= chunk_bytes as u64,
        "staging of at most two chunks: {after:?}"
    );
    // Per round: two hand-overs and a release for the write, three copies out for the read.
    assert!(
        after.host_funcs_run >= before.host_funcs_run + 12,
        "{before:?} → {after:?}"
    );
}

/// Runs `add_one_u32` (entry point `index` of `executable`) over four words on `device`.
fn add_one(device: &Device, executable: &halcyon::Executable) -> halcyon::Result<Vec<u32>> {
    use halcyon_conformance::harness::{block_on, download_u32, upload_u32};

    let index = executable.kernel("add_one_u32")?;
    let queue = device.queue(0)?;
    block_on(async {
        let buffer = upload_u32(&queue, &[1, 2, 3, 4]).await?;
        queue
            .dispatch(
                halcyon::Timepoints::default(),
                &index
                    .launch([1, 1, 1])
                    .constant(4u32)
                    .binding(buffer.whole()),
            )
            .await?;
        download_u32(&queue, halcyon::Fence::new(), &buffer.whole()).await
    })
}

/// ptxas's sm_90 cubin of the standard kernels (the fake device is sm_90).
const CUBIN: &[u8] = include_bytes!("kernels/standard.sm_90.cubin");

/// The trust boundary at a device's door: bytes of a packed cubin load only from an unchecked
/// spec, packed PTX from a checked one; the refusal comes before the driver sees the image.
#[test]
fn packed_binaries_load_only_from_unchecked_specs() {
    if let Err(e) = prepare_driver() {
        return eprintln!("skipped: {e}");
    }
    let device = fake_device(options(CompletionStrategy::CompletionThread)).unwrap();
    // SAFETY: CUBIN is ptxas's unmodified output for sm_90 (the fake device's architecture),
    // and its kernels take the parameters the standard entry points declare.
    let cubin = unsafe { CudaModule::binary(CUBIN, common::standard_entry_points()) };
    let packed = cubin.to_packed();

    let e = device.load_executable(&packed.spec()).unwrap_err();
    assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
    assert!(
        e.message().contains("ExecutableSpec::bytes_unchecked")
            && e.message().contains("PackedExecutable::spec_unchecked"),
        "{e}"
    );

    // SAFETY: as above.
    let executable = device
        .load_executable(&unsafe { packed.spec_unchecked() })
        .unwrap();
    assert_eq!(add_one(&device, &executable).unwrap(), [2, 3, 4, 5]);
    // The native spec of the unsafely made module loads the same.
    let executable = device.load_executable(&cubin.spec()).unwrap();
    assert_eq!(add_one(&device, &executable).unwrap(), [2, 3, 4, 5]);

    let executable = device
        .load_executable(&common::standard_module().to_packed().spec())
        .unwrap();
    assert_eq!(add_one(&device, &executable).unwrap(), [2, 3, 4, 5]);
}

/// A kernel taking more or larger parameters than halcyon passes would make `cuLaunchKernel`
/// read past the argument array: loading refuses it, for PTX from its text and for a binary
/// from the driver's `cuFuncGetParamInfo`.
#[test]
fn kernels_taking_more_parameters_than_declared_are_refused() {
    if let Err(e) = prepare_driver() {
        return eprintln!("skipped: {e}");
    }
    let device = fake_device(options(CompletionStrategy::CompletionThread)).unwrap();
    // saxpy_f32 takes (f32*, f32*, u32, u32): declared as one binding and one constant.
    let narrow = halcyon::EntryPoint {
        binding_count: 1,
        constant_count: 1,
        ..halcyon_conformance::kernels::saxpy_f32()
    };
    let ptx = CudaModule::ptx(common::STANDARD_PTX, vec![narrow.clone()]);
    for spec in [ptx.to_packed().spec(), ptx.spec()] {
        let e = device.load_executable(&spec).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        assert!(e.message().contains("takes 4 parameters"), "{e}");
    }
    // SAFETY: deliberately breaks the metadata half of the contract, which the fake driver's
    // cuFuncGetParamInfo catches before any launch (the test never dispatches).
    let cubin = unsafe { CudaModule::binary(CUBIN, vec![narrow]) };
    let e = device.load_executable(&cubin.spec()).unwrap_err();
    assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
    assert!(e.message().contains("takes 4 parameters"), "{e}");
}
