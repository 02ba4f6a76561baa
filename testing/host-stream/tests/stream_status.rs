//! Status words on the stream device, through the host stream API: kernels that take one more
//! parameter after their constants, a `u32` they set to fail their dispatch (the convention in
//! `halcyon_stream::api`, what CUDA and HIP kernels use). Each dispatch gets its own zeroed
//! word; a nonzero word fails the submission naming the entry point and the value; dependents
//! on other queues stay parked until the host checked the words; lists with such dispatches are
//! replayed on the stream, never captured into graphs; the words' device memory is pooled.
//!
//! The checking kernel used throughout reads the first `u32` of its binding and writes it to its
//! status word when it is nonzero, so a test decides each dispatch's outcome with the buffer's
//! contents.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use halcyon::{
    BufferParams, CommandBuffer, CommandBufferMode, Device, EntryPoint, Executable, Fence, Result,
    StatusCode, Timepoints,
};
use halcyon_conformance::harness::{
    assert_error, assert_failed, block_on, bytes_u32, done, download, eventually, signals,
    u32_bytes, upload, within,
};
use halcyon_host_stream::{HostModule, HostStreamApi, LaunchArgs};
use halcyon_stream::{
    create_device, keys, CompletionStrategy, DevicePtr, KernelParams, LaunchConfig,
    MemoryPlacement, StreamApi, StreamDeviceOptions,
};

const STRATEGIES: [CompletionStrategy; 3] = [
    CompletionStrategy::HostCallback,
    CompletionStrategy::CompletionThread,
    CompletionStrategy::FlagWrite,
];

/// Entry point indices of [`Kernels::load`]'s executable.
const CHECK_A: u32 = 0;
const CHECK_B: u32 = 1;
const ADD_ONE: u32 = 2;

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

fn entry(name: &str, bindings: u32) -> EntryPoint {
    EntryPoint {
        name: name.into(),
        workgroup_size: [1, 1, 1],
        binding_count: bindings,
        constant_count: 0,
    }
}

/// Sets the status word to the first `u32` of binding 0 if that is nonzero.
fn check(args: &LaunchArgs<'_>) -> std::result::Result<(), String> {
    // SAFETY: binding 0 is only read; the status word is never part of a binding.
    let value = unsafe { args.binding::<u32>(0) }
        .first()
        .copied()
        .ok_or("binding 0 is empty")?;
    let word = args.status_word().ok_or("no status word was passed")?;
    if value != 0 {
        word.store(value, Ordering::Relaxed);
    }
    Ok(())
}

/// The test kernels, and how many times `add_one` ran.
struct Kernels {
    executable: Executable,
    add_one_runs: Arc<AtomicUsize>,
}

impl Kernels {
    /// `check_a` and `check_b` ([`check`], with a status word), and `add_one` (no status
    /// word: increments every `u32` of its binding, and counts its runs).
    fn load(device: &Device) -> Result<Kernels> {
        let add_one_runs = Arc::new(AtomicUsize::new(0));
        let runs = add_one_runs.clone();
        let module = HostModule::new()
            .kernel_with_status_word(entry("check_a", 1), check)
            .kernel_with_status_word(entry("check_b", 1), check)
            .kernel(entry("add_one", 1), move |args: &LaunchArgs<'_>| {
                runs.fetch_add(1, Ordering::SeqCst);
                // SAFETY: the only binding; blocks of one launch run one after another.
                let data = unsafe { args.binding_mut::<u32>(0) };
                data.iter_mut().for_each(|x| *x += 1);
                Ok(())
            });
        Ok(Kernels {
            executable: device.load_executable(&module.spec())?,
            add_one_runs,
        })
    }
}

/// A dispatch that sets its status word fails its submission with `KernelFailed`, naming the
/// device, the entry point and the value; its signal semaphore fails with the same error. With
/// two status-word dispatches in one submission, each has its own word: the error names the
/// one that set it, and a word left at zero fails nothing.
#[test]
fn a_set_status_word_fails_the_submission_naming_entry_and_value() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        let kernels = Kernels::load(&device)?;
        let id = device.info().id.clone();
        block_on(async {
            let fails = upload(&queue, BufferParams::DEVICE, &u32_bytes(&[42])).await?;
            let passes = upload(&queue, BufferParams::DEVICE, &u32_bytes(&[0])).await?;
            let nine = upload(&queue, BufferParams::DEVICE, &u32_bytes(&[9])).await?;
            let signal = device.create_semaphore(0)?;

            let failing = queue.dispatch(
                signals(&signal, 1),
                &kernels
                    .executable
                    .kernel_at(CHECK_A)?
                    .launch([1, 1, 1])
                    .binding(fails.whole()),
            );
            let outcome = within("the failing dispatch", failing).await?;
            let error = assert_error(
                outcome,
                StatusCode::KernelFailed,
                &["'check_a'", &id, "status word", "to 42"],
            );
            assert_eq!(
                error.message(),
                format!(
                    "a dispatch of kernel 'check_a' on {id} failed: it set its status word to 42"
                ),
                "{strategy:?}"
            );
            assert_failed(&signal, StatusCode::KernelFailed, error.message());

            let passing = queue.dispatch(
                Timepoints::default(),
                &kernels
                    .executable
                    .kernel_at(CHECK_A)?
                    .launch([1, 1, 1])
                    .binding(passes.whole()),
            );
            done("a dispatch leaving its word at zero", passing).await?;

            // One submission, two words: check_a's stays zero, check_b's is set to 9.
            let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
            builder.dispatch(
                &kernels
                    .executable
                    .kernel_at(CHECK_A)?
                    .launch([1, 1, 1])
                    .binding(passes.whole()),
            )?;
            builder.dispatch(
                &kernels
                    .executable
                    .kernel_at(CHECK_B)?
                    .launch([1, 1, 1])
                    .binding(nine.whole()),
            )?;
            let both = builder.finish();
            let outcome = within(
                "two dispatches",
                queue.execute(Timepoints::default(), &both, None),
            )
            .await?;
            let error = assert_error(outcome, StatusCode::KernelFailed, &["'check_b'", "to 9"]);
            assert!(!error.message().contains("check_a"), "{error}");
            assert!(!error.message().contains("more"), "{error}");

            // Both set: the first (in command order) is named, the other counted.
            let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
            builder.dispatch(
                &kernels
                    .executable
                    .kernel_at(CHECK_B)?
                    .launch([1, 1, 1])
                    .binding(nine.whole()),
            )?;
            builder.dispatch(
                &kernels
                    .executable
                    .kernel_at(CHECK_A)?
                    .launch([1, 1, 1])
                    .binding(fails.whole()),
            )?;
            let both = builder.finish();
            let outcome = within(
                "two failing dispatches",
                queue.execute(Timepoints::default(), &both, None),
            )
            .await?;
            assert_error(
                outcome,
                StatusCode::KernelFailed,
                &[
                    "'check_b'",
                    "to 9 (1 more of the submission's dispatches set theirs too)",
                ],
            );
            Ok(())
        })?;
        assert_eq!(stat(&device, keys::FAILED), 3, "{strategy:?}");
    }
    Ok(())
}

/// A submission with a status word does not schedule its signal on the device: work on another
/// queue waiting on it, submitted while it is in flight, is parked (no stream wait) until the
/// host checked the word. A set word fails the parked work with the same error and it never
/// runs; a zero word releases it, and it runs after the check.
#[test]
fn dependents_on_another_queue_wait_for_the_check() -> Result<()> {
    for strategy in STRATEGIES {
        for value in [5u32, 0] {
            let api = HostStreamApi::new();
            let device = device(&api, strategy)?;
            let (q0, q1) = (device.queue(0)?, device.queue(1)?);
            let kernels = Kernels::load(&device)?;
            let (a, b) = (device.create_semaphore(0)?, device.create_semaphore(0)?);
            block_on(async {
                let verdict = upload(&q0, BufferParams::DEVICE, &u32_bytes(&[value])).await?;
                let data = upload(&q1, BufferParams::DEVICE, &u32_bytes(&[10; 4])).await?;

                let hold = api.hold();
                let checked = q0.dispatch(
                    signals(&a, 1),
                    &kernels
                        .executable
                        .kernel_at(CHECK_A)?
                        .launch([1, 1, 1])
                        .binding(verdict.whole()),
                );
                let dependent = q1.dispatch(
                    Timepoints::new(Fence::at(&a, 1), Fence::at(&b, 1)),
                    &kernels
                        .executable
                        .kernel_at(ADD_ONE)?
                        .launch([1, 1, 1])
                        .binding(data.whole()),
                );
                // Issued and held on queue 0's stream; the dependent is parked, not handed to
                // queue 1's stream with a wait on the dispatch's event.
                assert_eq!(stat(&device, keys::IN_FLIGHT), 1, "{strategy:?} {value}");
                assert_eq!(
                    stat(&device, keys::DEFERRED_WAITS),
                    1,
                    "{strategy:?} {value}"
                );
                assert_eq!(stat(&device, keys::NATIVE_WAITS), 0, "{strategy:?} {value}");
                drop(hold);

                let outcome = within("the checked dispatch", checked).await?;
                let dependent = within("the dependent", dependent).await?;
                if value == 0 {
                    outcome?;
                    dependent?;
                    assert_eq!(b.query()?, 1);
                    assert_eq!(kernels.add_one_runs.load(Ordering::SeqCst), 1);
                    let bytes = download(&q1, Fence::new(), &data.whole()).await?;
                    assert_eq!(bytes_u32(&bytes)?, [11; 4], "{strategy:?}");
                } else {
                    let error =
                        assert_error(outcome, StatusCode::KernelFailed, &["'check_a'", "to 5"]);
                    assert_error(dependent, StatusCode::KernelFailed, &[error.message()]);
                    assert_failed(&b, StatusCode::KernelFailed, error.message());
                    assert_eq!(
                        kernels.add_one_runs.load(Ordering::SeqCst),
                        0,
                        "{strategy:?}: the dependent ran"
                    );
                    let bytes = download(&q1, Fence::new(), &data.whole()).await?;
                    assert_eq!(bytes_u32(&bytes)?, [10; 4], "{strategy:?}");
                }
                // It never waited on the device for the checked dispatch's event.
                assert_eq!(stat(&device, keys::NATIVE_WAITS), 0, "{strategy:?} {value}");
                Ok(())
            })?;
        }
    }
    Ok(())
}

/// A reusable command buffer with a status-word dispatch, submitted again and again, is never
/// captured into a graph (every submission is replayed on the stream) and reports each
/// submission's outcome: failing, passing, failing, passing, as its binding says. A passing
/// round after a failing one shows the word was zeroed again (the words live in the device's
/// pooled pinned host memory: one buffer, reused by every submission, nothing allocated per
/// submission). The rest of the list runs every time.
#[test]
fn reusable_lists_with_status_words_are_replayed_not_captured() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        let kernels = Kernels::load(&device)?;
        block_on(async {
            let verdict = upload(&queue, BufferParams::DEVICE, &u32_bytes(&[0])).await?;
            let data = upload(&queue, BufferParams::DEVICE, &u32_bytes(&[0; 4])).await?;
            let buffers = api.stats().allocations;
            let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
            builder.dispatch(
                &kernels
                    .executable
                    .kernel_at(CHECK_A)?
                    .launch([1, 1, 1])
                    .binding(verdict.whole()),
            )?;
            builder.dispatch(
                &kernels
                    .executable
                    .kernel_at(ADD_ONE)?
                    .launch([1, 1, 1])
                    .binding(data.whole()),
            )?;
            let list = builder.finish();

            let rounds = [3u32, 0, 7, 0, 0, 11];
            for (round, &value) in rounds.iter().enumerate() {
                done(
                    "set the verdict",
                    queue.write(
                        Timepoints::default(),
                        &u32_bytes(&[value]),
                        &verdict.whole(),
                    ),
                )
                .await?;
                let outcome = within(
                    "the list",
                    queue.execute(Timepoints::default(), &list, None),
                )
                .await?;
                if value == 0 {
                    outcome.unwrap_or_else(|e| panic!("round {round}, {strategy:?}: {e}"));
                } else {
                    assert_error(
                        outcome,
                        StatusCode::KernelFailed,
                        &["'check_a'", &format!("to {value}")],
                    );
                }
                // The words live in the device's one pooled pinned buffer (the uploads leased it
                // already), kept between submissions.
                assert_eq!(
                    api.stats().allocations,
                    buffers,
                    "round {round}, {strategy:?}: pinned memory is not pooled"
                );
                assert_eq!(stat(&device, keys::PINNED_IDLE), 1, "round {round}");
            }
            let bytes = download(&queue, Fence::new(), &data.whole()).await?;
            assert_eq!(bytes_u32(&bytes)?, [rounds.len() as u32; 4], "{strategy:?}");
            Ok(())
        })?;
        assert_eq!(stat(&device, keys::GRAPH_CAPTURES), 0, "{strategy:?}");
        assert_eq!(stat(&device, keys::GRAPH_LAUNCHES), 0, "{strategy:?}");
        assert_eq!(api.stats().graph_launches, 0, "{strategy:?}");
        assert_eq!(stat(&device, keys::FAILED), 3, "{strategy:?}");
        assert_eq!(stat(&device, keys::STATUS_CHECKS), 6, "{strategy:?}");
    }
    Ok(())
}

/// The host API's side of the convention: `load_module` reports which kernels take a word; a
/// kernel with a word is launched only with one and one without only without; the word must
/// be aligned, live and outside the launch's bindings; the kernel sees it at its address.
#[test]
fn host_api_passes_status_words_to_the_kernels_that_take_them() -> Result<()> {
    let api = HostStreamApi::new();
    let module = HostModule::new()
        .kernel_with_status_word(entry("check", 1), check)
        .kernel(entry("plain", 1), |_: &LaunchArgs<'_>| Ok(()));
    let loaded = api.load_module(&module.spec())?;
    assert_eq!(loaded.status_words, [true, false]);
    assert!(loaded.takes_status_word(0));
    assert!(!loaded.takes_status_word(1));
    assert!(!loaded.takes_status_word(2));
    let check_fn = api.get_function(loaded.module, "check")?;
    let plain = api.get_function(loaded.module, "plain")?;
    let stream = api.create_stream()?;
    let input = api.allocate(256, MemoryPlacement::Device)?;
    let words = api.allocate(256, MemoryPlacement::Device)?;
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_memory_bytes: 0,
    };
    let bindings = [input];
    let params = |status: Option<DevicePtr>| KernelParams {
        bindings: &bindings,
        constants: &[],
        status,
    };
    let invalid = |result: Result<()>, mentions: &[&str]| {
        assert_error(result, StatusCode::InvalidArgument, mentions);
    };
    invalid(
        api.launch_kernel(check_fn, &config, &params(None), stream),
        &["'check' takes a status word", "KernelParams::status"],
    );
    invalid(
        api.launch_kernel(plain, &config, &params(Some(words)), stream),
        &["'plain' takes no status word"],
    );
    invalid(
        api.launch_kernel(check_fn, &config, &params(Some(words.offset(2))), stream),
        &["not 4-byte aligned"],
    );
    invalid(
        api.launch_kernel(check_fn, &config, &params(Some(input.offset(128))), stream),
        &["lies within a binding"],
    );
    invalid(
        api.launch_kernel(check_fn, &config, &params(Some(DevicePtr(8))), stream),
        &["do not lie within one live allocation"],
    );

    // The kernel writes the input's first word to word 3 of the array.
    let seventy_seven = u32_bytes(&[77]);
    // SAFETY: `seventy_seven` outlives the copy (the stream is synchronised below).
    unsafe { api.copy_host_to_device_async(input, seventy_seven.as_ptr(), 4, stream)? };
    api.launch_kernel(check_fn, &config, &params(Some(words.offset(12))), stream)?;
    let mut out = [0u32; 4];
    // SAFETY: `out` outlives the copy (the stream is synchronised below).
    unsafe { api.copy_device_to_host_async(out.as_mut_ptr().cast(), words, 16, stream)? };
    api.synchronize_stream(stream)?;
    assert_eq!(out, [0, 0, 0, 77]);
    api.launch_kernel(plain, &config, &params(None), stream)?;
    api.synchronize_stream(stream)?;
    api.destroy_stream(stream)?;
    Ok(())
}

/// Status words and the lists around them: a list whose status-word dispatch has an empty grid
/// launches nothing and checks nothing (its signal is scheduled on the device as usual: a
/// dependent on another queue waits on its event instead of being parked).
#[test]
fn empty_status_word_dispatches_check_nothing() -> Result<()> {
    let api = HostStreamApi::new();
    let device = device(&api, CompletionStrategy::CompletionThread)?;
    let (q0, q1) = (device.queue(0)?, device.queue(1)?);
    let kernels = Kernels::load(&device)?;
    let (a, b) = (device.create_semaphore(0)?, device.create_semaphore(0)?);
    block_on(async {
        let verdict = upload(&q0, BufferParams::DEVICE, &u32_bytes(&[1])).await?;
        let target = device.allocator().allocate(16, BufferParams::DEVICE)?;
        let buffers = api.stats().allocations;
        let hold = api.hold();
        let empty = q0.dispatch(
            signals(&a, 1),
            &kernels
                .executable
                .kernel_at(CHECK_A)?
                .launch([0, 1, 1])
                .binding(verdict.whole()),
        );
        let dependent = q1.fill(
            Timepoints::new(Fence::at(&a, 1), Fence::at(&b, 1)),
            3u8,
            &target.whole(),
        );
        eventually("both issued", || stat(&device, keys::IN_FLIGHT) == 2).await?;
        assert_eq!(stat(&device, keys::NATIVE_WAITS), 1);
        drop(hold);
        done("the empty dispatch", empty).await?;
        done("the dependent", dependent).await?;
        assert_eq!(api.stats().allocations, buffers, "pinned memory was leased");
        assert_eq!(stat(&device, keys::STATUS_CHECKS), 0);
        Ok(())
    })
}
