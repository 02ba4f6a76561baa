//! The stream device's own pinned host memory, through the host stream API: queue updates and
//! reads copy through one lease per submission of pooled `MemoryPlacement::Pinned` memory
//! (so a GPU API needs no staging and no host function for them), status words live in it,
//! lists captured into graphs take none, an API without pinned memory still copies correctly
//! (and fails status-word submissions with a clear error), and nothing is left allocated once
//! the device is gone, after a fault too.

use std::sync::atomic::Ordering;

use halcyon::{
    Binding, BufferParams, CommandBuffer, CommandBufferMode, EntryPoint, Fence, Result, StatusCode,
    Timepoints,
};
use halcyon_conformance::harness::{
    assert_error, block_on, bytes_u32, done, download, eventually, u32_bytes, upload, within,
};
use halcyon_host_stream::{HostModule, HostStreamApi, LaunchArgs};
use halcyon_stream::{keys, CompletionStrategy};

#[path = "common/stream.rs"]
mod stream_device;

use stream_device::{device, stat, STRATEGIES};

/// Several updates of odd sizes in one list share one lease (each piece at its own offset:
/// an overlap would corrupt the data), a read lands in one, and sequential submissions reuse
/// a single pooled buffer: nothing is allocated per submission. A read larger than the pooled
/// buffer gets a larger one.
#[test]
fn updates_and_reads_share_one_pooled_pinned_buffer() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        block_on(async {
            let x = upload(&queue, BufferParams::DEVICE, &[0u8; 4096]).await?;
            assert_eq!(
                stat(&device, keys::PINNED_LEASES),
                1,
                "{strategy:?}: the upload"
            );
            let allocations = api.stats().allocations;
            for round in 0..8u8 {
                let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
                let a: Vec<u8> = (0..12).map(|i| round ^ i).collect();
                let b: Vec<u8> = (0..100).map(|i| round.wrapping_mul(3) ^ i).collect();
                let c: Vec<u8> = (0..2000).map(|i| (i % 251) as u8 ^ round).collect();
                builder.update(&a, x.slice(0..12)?)?;
                builder.update(&b, x.slice(100..200)?)?;
                builder.update(&c, x.slice(1000..3000)?)?;
                let list = builder.finish();
                done("updates", queue.execute(Timepoints::default(), &list, None)).await?;
                let bytes = download(&queue, Fence::new(), &x.whole()).await?;
                assert_eq!(&bytes[0..12], &a[..], "round {round}, {strategy:?}");
                assert_eq!(&bytes[100..200], &b[..], "round {round}, {strategy:?}");
                assert_eq!(&bytes[1000..3000], &c[..], "round {round}, {strategy:?}");
                assert!(bytes[3000..].iter().all(|&v| v == 0));
                assert_eq!(
                    api.stats().allocations,
                    allocations,
                    "round {round}, {strategy:?}: a submission allocated pinned memory"
                );
                assert_eq!(stat(&device, keys::PINNED_IDLE), 1, "round {round}");
            }
            assert_eq!(stat(&device, keys::PINNED_LEASES), 1 + 16, "{strategy:?}");

            let big = upload(&queue, BufferParams::DEVICE, &vec![7u8; 200 << 10]).await?;
            let bytes = download(&queue, Fence::new(), &big.whole()).await?;
            assert!(bytes.len() == 200 << 10 && bytes.iter().all(|&v| v == 7));
            assert_eq!(stat(&device, keys::PINNED_IDLE), 2, "{strategy:?}");
            Ok(())
        })?;
    }
    Ok(())
}

/// A reusable list is issued directly the first time (with a lease for its update), then
/// captured and launched as a graph: those submissions take no lease, because the graph's copy
/// must find its bytes at every launch (the API keeps them), not in a lease that goes back to
/// the pool.
#[test]
fn lists_captured_into_graphs_take_no_lease() -> Result<()> {
    let api = HostStreamApi::new();
    let device = device(&api, CompletionStrategy::CompletionThread)?;
    let queue = device.queue(0)?;
    block_on(async {
        let x = upload(&queue, BufferParams::DEVICE, &u32_bytes(&[0; 4])).await?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder.update(&u32_bytes(&[42]), x.slice(4..8)?)?;
        builder.fill(1u8, Binding::from(x.slice(8..16)?))?;
        let list = builder.finish();
        for round in 0..4 {
            let leases = stat(&device, keys::PINNED_LEASES);
            done(
                "fill x[0]",
                queue.fill(Timepoints::default(), 0u8, &x.slice(0..4)?),
            )
            .await?;
            done("list", queue.execute(Timepoints::default(), &list, None)).await?;
            let expected = i64::from(round == 0);
            assert_eq!(
                stat(&device, keys::PINNED_LEASES) - leases,
                expected,
                "round {round}"
            );
            let values = bytes_u32(&download(&queue, Fence::new(), &x.whole()).await?)?;
            assert_eq!(values, [0, 42, 0x0101_0101, 0x0101_0101], "round {round}");
        }
        assert_eq!(stat(&device, keys::GRAPH_CAPTURES), 1);
        assert_eq!(stat(&device, keys::GRAPH_LAUNCHES), 3);
        Ok(())
    })
}

fn status_kernel() -> HostModule {
    let entry = EntryPoint {
        name: "verdict".into(),
        workgroup_size: [1, 1, 1],
        binding_count: 0,
        constant_count: 1,
    };
    HostModule::new().kernel_with_status_word(entry, |args: &LaunchArgs<'_>| {
        let word = args.status_word().ok_or("no status word")?;
        let value = args.constants().first().copied().unwrap_or(0);
        if value != 0 {
            word.store(value, Ordering::Relaxed);
        }
        Ok(())
    })
}

/// Without pinned memory (an API that cannot map host memory), updates and reads go through
/// the API's own copies and stay correct; a submission whose kernel takes a status word fails
/// with `Unimplemented` naming the missing pinned memory, and the device goes on working.
#[test]
fn without_pinned_memory_copies_work_and_status_words_fail_clearly() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        api.refuse_pinned_memory();
        if strategy == CompletionStrategy::FlagWrite {
            // Its words live in pinned memory: no device, and an error that says why.
            let Err(error) = device(&api, strategy) else {
                panic!("a flag-write device was created without pinned memory");
            };
            assert_eq!(error.code(), StatusCode::Unimplemented, "{error}");
            assert!(error.message().contains("flag-write"), "{error}");
            continue;
        }
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        let executable = device.load_executable(&status_kernel().spec())?;
        block_on(async {
            let x = upload(&queue, BufferParams::DEVICE, &u32_bytes(&[1, 2, 3])).await?;
            let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
            builder.update(&u32_bytes(&[20]), x.slice(4..8)?)?;
            done(
                "update",
                queue.execute(Timepoints::default(), &builder.finish(), None),
            )
            .await?;
            let values = bytes_u32(&download(&queue, Fence::new(), &x.whole()).await?)?;
            assert_eq!(values, [1, 20, 3], "{strategy:?}");

            let run = queue.dispatch(
                Timepoints::default(),
                &executable.kernel_at(0)?.launch([1, 1, 1]).constant(0u32),
            );
            let outcome = within("the checked dispatch", run).await?;
            assert_error(
                outcome,
                StatusCode::Unimplemented,
                &["status words", "pinned host memory"],
            );
            let values = bytes_u32(&download(&queue, Fence::new(), &x.whole()).await?)?;
            assert_eq!(values, [1, 20, 3], "{strategy:?}: the device works on");
            Ok(())
        })?;
        assert_eq!(stat(&device, keys::PINNED_LEASES), 0, "{strategy:?}");
        assert_eq!(stat(&device, keys::PINNED_IDLE), 0, "{strategy:?}");
    }
    Ok(())
}

/// Status words in pinned memory: a failing dispatch fails its submission with its value, the
/// next one (reusing the same buffer, zeroed again) passes.
#[test]
fn status_words_live_in_the_pinned_lease() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        let executable = device.load_executable(&status_kernel().spec())?;
        block_on(async {
            for (round, value) in [5u32, 0, 9, 0].into_iter().enumerate() {
                let run = queue.dispatch(
                    Timepoints::default(),
                    &executable.kernel_at(0)?.launch([1, 1, 1]).constant(value),
                );
                let outcome = within("the checked dispatch", run).await?;
                match value {
                    0 => outcome.unwrap_or_else(|e| panic!("round {round}, {strategy:?}: {e}")),
                    _ => {
                        assert_error(
                            outcome,
                            StatusCode::KernelFailed,
                            &["'verdict'", &format!("to {value}")],
                        );
                    }
                }
                assert_eq!(stat(&device, keys::PINNED_IDLE), 1, "round {round}");
            }
            Ok(())
        })?;
        assert_eq!(stat(&device, keys::STATUS_CHECKS), 4, "{strategy:?}");
        assert_eq!(stat(&device, keys::PINNED_LEASES), 4, "{strategy:?}");
    }
    Ok(())
}

/// A read in flight when the device faults fails, and its lease is orphaned: after an event
/// error the stream layer cannot tell that the stream stopped, so the lease is never reused, and
/// when the device is dropped (its streams failing to synchronise) it stays allocated rather
/// than freed under a stream that might still write it. Everything else is freed.
#[test]
fn a_fault_orphans_the_leases_in_flight_and_frees_the_rest() -> Result<()> {
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        block_on(async {
            let x = upload(&queue, BufferParams::DEVICE, &[3u8; 1024]).await?;
            let hold = api.hold();
            let read = queue.read::<u8>(Timepoints::default(), &x.whole());
            eventually("the read is in flight", || {
                stat(&device, keys::IN_FLIGHT) == 1
            })
            .await?;
            api.inject_fault("a test fault");
            drop(hold);
            let outcome = within("the read", read).await?;
            assert_error(outcome, StatusCode::Aborted, &["a test fault"]);
            // The read reused the upload's buffer, which is now orphaned.
            assert_eq!(stat(&device, keys::PINNED_IDLE), 0, "{strategy:?}");
            Ok(())
        })?;
        drop(queue);
        drop(device);
        // With flag-write completion the words' slab stays too: a stream that did not
        // synchronise might still write into it.
        let kept = 1 + u64::from(strategy == CompletionStrategy::FlagWrite);
        eventually_blocking(|| api.stats().allocations == kept, strategy)?;
    }
    Ok(())
}

/// Many submissions in flight at once, each with its own lease (64 here, beyond any small
/// count limit), reach a steady state: after the first round nothing is allocated or freed,
/// every lease is back in the pool, and no lease is reused while its submission is in flight
/// (each read returns exactly what the write before it put there).
#[test]
fn a_deep_pipeline_reaches_a_steady_state_without_reusing_leases_in_flight() -> Result<()> {
    const DEPTH: usize = 32;
    const SLICE: u64 = 256;
    for strategy in STRATEGIES {
        let api = HostStreamApi::new();
        let device = device(&api, strategy)?;
        let queue = device.queue(0)?;
        block_on(async {
            let x = upload(
                &queue,
                BufferParams::DEVICE,
                &vec![0u8; DEPTH * SLICE as usize],
            )
            .await?;
            let mut allocations = None;
            for round in 0..4u8 {
                let hold = api.hold();
                let mut writes = Vec::new();
                let mut reads = Vec::new();
                for i in 0..DEPTH {
                    let slice = x.slice(i as u64 * SLICE..(i as u64 + 1) * SLICE)?;
                    let value = round.wrapping_mul(64).wrapping_add(i as u8);
                    // One queue, no waits: issued in order onto one in-order stream.
                    writes.push(queue.write(
                        Timepoints::default(),
                        &[value; SLICE as usize],
                        &slice,
                    ));
                    reads.push(queue.read::<u8>(Timepoints::default(), &slice));
                }
                assert_eq!(
                    stat(&device, keys::IN_FLIGHT),
                    2 * DEPTH as i64,
                    "round {round}: every submission holds its lease"
                );
                drop(hold);
                for write in writes {
                    done("write", write).await?;
                }
                for (i, read) in reads.into_iter().enumerate() {
                    let bytes = done("read", read).await?;
                    let value = round.wrapping_mul(64).wrapping_add(i as u8);
                    assert!(
                        bytes.iter().all(|&b| b == value),
                        "round {round}, read {i}, {strategy:?}: {:?}",
                        &bytes[..4]
                    );
                }
                assert_eq!(
                    stat(&device, keys::PINNED_IDLE),
                    2 * DEPTH as i64,
                    "round {round}, {strategy:?}"
                );
                let now = (
                    api.stats().allocations,
                    stat(&device, keys::PINNED_ALLOCATED),
                );
                assert_eq!(
                    *allocations.get_or_insert(now),
                    now,
                    "round {round}, {strategy:?}: pinned memory was allocated or freed"
                );
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// Transfers above the lease limit (1 MiB) copy through the API's own staging, and take no
/// lease.
#[test]
fn large_transfers_take_no_lease() -> Result<()> {
    let api = HostStreamApi::new();
    let device = device(&api, CompletionStrategy::CompletionThread)?;
    let queue = device.queue(0)?;
    block_on(async {
        let data: Vec<u8> = (0..(2usize << 20)).map(|i| (i % 253) as u8).collect();
        let x = upload(&queue, BufferParams::DEVICE, &data).await?;
        let bytes = download(&queue, Fence::new(), &x.whole()).await?;
        assert!(bytes == data);
        assert_eq!(stat(&device, keys::PINNED_LEASES), 0);
        let small = download(&queue, Fence::new(), &x.slice(0..(1 << 20))?).await?;
        assert!(small[..] == data[..1 << 20]);
        assert_eq!(
            stat(&device, keys::PINNED_LEASES),
            1,
            "1 MiB still takes one"
        );
        Ok(())
    })
}

fn eventually_blocking(condition: impl Fn() -> bool, strategy: CompletionStrategy) -> Result<()> {
    block_on(async move {
        eventually(&format!("{strategy:?}: every allocation freed"), condition).await
    })
}

/// Idle pinned buffers beyond the pool's limit (64 MiB) are handed to the device's reclaimer
/// thread to be freed, not freed on the issuing thread: after 70 reads of 1 MiB in flight at
/// once, the next lease leaves 64 MiB idle besides itself and the reclaimer frees the rest.
#[test]
fn idle_pinned_memory_beyond_the_limit_goes_to_the_reclaimer() -> Result<()> {
    const MIB: usize = 1 << 20;
    let api = HostStreamApi::new();
    let device = device(&api, CompletionStrategy::CompletionThread)?;
    let queue = device.queue(0)?;
    block_on(async {
        let x = upload(&queue, BufferParams::DEVICE, &vec![5u8; MIB]).await?;
        let hold = api.hold();
        let reads: Vec<_> = (0..70)
            .map(|_| queue.read::<u8>(Timepoints::default(), &x.whole()))
            .collect();
        drop(hold);
        for read in reads {
            assert!(done("read", read).await?.iter().all(|&b| b == 5));
        }
        assert_eq!(stat(&device, keys::PINNED_IDLE), 70);
        assert_eq!(stat(&device, keys::DEFERRED_FREES), 0);
        let live = api.stats().allocations;
        // The next lease takes one of the 70 and trims the other 69 to 64: five go.
        download(&queue, Fence::new(), &x.whole()).await?;
        assert_eq!(
            stat(&device, keys::PINNED_IDLE),
            65,
            "64 and the lease back"
        );
        assert_eq!(stat(&device, keys::DEFERRED_FREES), 5);
        eventually("the reclaimer freed them", || {
            api.stats().allocations == live - 5
        })
        .await
    })
}
