//! The Vulkan backend's memory: buffers sub-allocated from shared `VkDeviceMemory` blocks,
//! dedicated allocations for large buffers, the non-coherent flush/invalidate path (forced with
//! `VulkanDeviceOptions::force_non_coherent` where the driver has none, as on lavapipe), and
//! fresh buffers that read as zero even in reused memory.
//!
//! The statistics come from the device queries `vulkan.memory_blocks`,
//! `vulkan.memory_block_bytes`, `vulkan.dedicated_allocations` and `vulkan.suballocations`.

use std::sync::Arc;

use halcyon::{
    Buffer, BufferParams, BufferUsage, Device, MemoryType, Result, StatusCode, Submission,
    Timepoints,
};
use halcyon_conformance::harness::{block_on, done, eventually, pattern_bytes};
use halcyon_vulkan::VulkanDeviceOptions;

/// Device `vulkan://0` with `force_non_coherent` as given, or `None` (reason printed) without
/// Vulkan.
fn device_or_skip(test: &str, force_non_coherent: bool) -> Option<Device> {
    let options = VulkanDeviceOptions::default().with_force_non_coherent(force_non_coherent);
    match halcyon_vulkan::create_device_with(0, options) {
        Ok(device) => Some(device),
        Err(error) if error.code() == StatusCode::Unavailable => {
            eprintln!("skipping {test}: no Vulkan: {error}");
            None
        }
        Err(error) => panic!("{test}: cannot create vulkan://0: {error}"),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stats {
    blocks: i64,
    block_bytes: i64,
    dedicated: i64,
    suballocations: i64,
}

fn stats(device: &Device) -> Stats {
    let get = |key: &str| device.query_raw(key).unwrap();
    Stats {
        blocks: get("vulkan.memory_blocks"),
        block_bytes: get("vulkan.memory_block_bytes"),
        dedicated: get("vulkan.dedicated_allocations"),
        suballocations: get("vulkan.suballocations"),
    }
}

/// Host-visible memory as the driver offers it (cached if possible), mappable.
const HOST_CACHED: BufferParams = BufferParams {
    memory: MemoryType::HOST_VISIBLE.union(MemoryType::HOST_CACHED),
    usage: BufferUsage::all(),
};

/// The host address of a mapped buffer's byte 0.
fn address(buffer: &Buffer) -> usize {
    buffer.memory().unwrap().host_ptr().unwrap().as_ptr() as usize
}

fn allocate(device: &Device, sizes: &[u64], params: BufferParams) -> Result<Vec<Buffer>> {
    sizes
        .iter()
        .map(|&size| device.allocator().allocate(size, params))
        .collect()
}

/// Awaits every submission.
async fn all(what: &str, submissions: Vec<Submission>) -> Result<()> {
    for submission in submissions {
        done(what, submission).await?;
    }
    Ok(())
}

/// Every buffer's mapped bytes equal `expected`.
fn assert_mapped(buffers: &[Buffer], expected: &[Vec<u8>], what: &str) -> Result<()> {
    for (i, (buffer, want)) in buffers.iter().zip(expected).enumerate() {
        let guard = buffer.map_read(..)?;
        if guard[..] != want[..] {
            let at = guard.iter().zip(want).position(|(a, b)| a != b).unwrap();
            panic!(
                "{what}: buffer {i} differs at byte {at}: {} instead of {}",
                guard[at], want[at]
            );
        }
    }
    Ok(())
}

/// 2000 small buffers share a block or two; their bytes, written through mappings, fills and
/// copies, stay their own; dropping them gives the ranges back and leaves one spare block.
#[test]
fn small_buffers_share_blocks() {
    let Some(device) = device_or_skip("small_buffers_share_blocks", false) else {
        return;
    };
    const N: usize = 2000;
    const SIZE: usize = 256;
    block_on(async {
        let fresh = stats(&device);
        assert_eq!(fresh.suballocations, 0, "{fresh:?}");
        assert_eq!(fresh.dedicated, 0, "{fresh:?}");
        let buffers = allocate(&device, &[SIZE as u64; N], BufferParams::HOST)?;
        let full = stats(&device);
        eprintln!("{N} buffers of {SIZE} bytes: {full:?}");
        assert_eq!(full.suballocations, N as i64, "{full:?}");
        assert_eq!(full.dedicated, 0, "{full:?}");
        assert!(
            (1..=2).contains(&full.blocks),
            "{N} x {SIZE} bytes took {} blocks",
            full.blocks
        );
        // The buffers lie side by side without overlapping.
        let mut addresses: Vec<usize> = buffers.iter().map(address).collect();
        addresses.sort_unstable();
        assert!(addresses.windows(2).all(|w| w[1] - w[0] >= SIZE));

        let mut expected: Vec<Vec<u8>> =
            (0..N).map(|i| pattern_bytes(SIZE, i as u32 + 1)).collect();
        for (buffer, bytes) in buffers.iter().zip(&expected) {
            buffer.map_write(..)?.copy_from_slice(bytes);
        }
        assert_mapped(&buffers, &expected, "after mapped writes")?;

        // Fills with unaligned edges (staging copies) and copies between neighbours.
        let queue = device.queue(0)?;
        let timeline = queue.timeline()?;
        let mut submissions = Vec::new();
        for i in (0..N - 2).step_by(37) {
            submissions.push(queue.fill(timeline.next(), 0xA5u8, &buffers[i].slice(1..255)?));
            expected[i][1..255].fill(0xA5);
            submissions.push(queue.copy(
                timeline.next(),
                &buffers[i + 1].slice(0..128)?,
                &buffers[i + 2].slice(64..192)?,
            ));
            let copied = expected[i + 1][..128].to_vec();
            expected[i + 2][64..192].copy_from_slice(&copied);
        }
        all("fills and copies", submissions).await?;
        assert_mapped(&buffers, &expected, "after fills and copies")?;
        for i in [0, 1, 2, 37, 38, 39, N - 1] {
            let bytes = done(
                "read",
                queue.read::<u8>(timeline.next(), &buffers[i].whole()),
            )
            .await?;
            assert_eq!(bytes, expected[i], "queue read of buffer {i}");
        }

        // Besides the buffers, staging buffers of finished submissions may still be held
        // (recordings kept for reuse hold theirs); with nothing submitted any more, their
        // number can only fall.
        let before_drop = stats(&device).suballocations;
        assert!(before_drop >= N as i64);
        drop(buffers);
        eventually("the buffers' ranges to return", || {
            stats(&device).suballocations <= before_drop - N as i64
        })
        .await?;
        let after = stats(&device);
        eprintln!("after dropping them: {after:?}");
        assert_eq!(after.dedicated, 0, "{after:?}");
        assert!(
            after.blocks <= full.blocks.max(1),
            "blocks grew after the buffers were dropped: {full:?} -> {after:?}"
        );
        Ok(())
    })
    .unwrap();
}

/// Blocks are added when full and freed when empty, but for one spare per memory type; a
/// buffer over half a block gets a dedicated allocation.
#[test]
fn blocks_come_and_go_and_large_buffers_are_dedicated() {
    let Some(device) = device_or_skip("blocks_come_and_go_and_large_buffers_are_dedicated", false)
    else {
        return;
    };
    let params = BufferParams::HOST;
    let small = device.allocator().allocate(256, params).unwrap();
    let first = stats(&device);
    assert_eq!(first.blocks, 1, "{first:?}");
    assert_eq!(first.suballocations, 1, "{first:?}");
    let block = first.block_bytes as u64;
    assert!(
        block.is_power_of_two() || block.is_multiple_of(64 << 10),
        "{block}"
    );
    eprintln!("block size {} MiB", block >> 20);

    // Half a block is still sub-allocated: one fits beside `small`, then two per block.
    let halves = allocate(&device, &[block / 2; 6], params).unwrap();
    let full = stats(&device);
    assert_eq!(full.dedicated, 0, "{full:?}");
    assert_eq!(full.suballocations, 7, "{full:?}");
    assert_eq!(full.blocks, 4, "{full:?}");
    assert_eq!(full.block_bytes as u64, 4 * block, "{full:?}");
    for (i, half) in halves.iter().enumerate() {
        half.map_write(..).unwrap().fill(i as u8 + 1);
    }
    small.map_write(..).unwrap().fill(0xEE);
    for (i, half) in halves.iter().enumerate() {
        let guard = half.map_read(..).unwrap();
        let want = i as u8 + 1;
        assert!(
            guard[0] == want && guard[guard.len() - 1] == want && guard[guard.len() / 2] == want,
            "half {i} was overwritten"
        );
    }
    assert!(small.map_read(..).unwrap().iter().all(|&b| b == 0xEE));

    // Emptied blocks are freed but for one spare; `small`'s block stays.
    let mut halves: Vec<Option<Buffer>> = halves.into_iter().map(Some).collect();
    for i in [5, 1, 3, 0, 4, 2] {
        halves[i] = None;
    }
    let emptied = stats(&device);
    assert_eq!(emptied.suballocations, 1, "{emptied:?}");
    assert_eq!(
        emptied.blocks, 2,
        "one block for `small`, one spare: {emptied:?}"
    );
    drop(small);
    let empty = stats(&device);
    assert_eq!(empty.suballocations, 0, "{empty:?}");
    assert_eq!(empty.blocks, 1, "one spare: {empty:?}");
    assert_eq!(empty.block_bytes as u64, block, "{empty:?}");

    // The spare is used again before any new block.
    let again = allocate(&device, &[block / 2; 2], params).unwrap();
    assert_eq!(stats(&device).blocks, 1);
    drop(again);

    // Over half a block: a dedicated allocation, mapped like the rest.
    let large = device.allocator().allocate(block / 2 + 1, params).unwrap();
    let dedicated = stats(&device);
    assert_eq!(dedicated.dedicated, 1, "{dedicated:?}");
    assert_eq!(dedicated.blocks, 1, "{dedicated:?}");
    assert_eq!(dedicated.suballocations, 0, "{dedicated:?}");
    {
        let mut guard = large.map_write(..).unwrap();
        let last = guard.len() - 1;
        guard[last] = 0x5A;
    }
    assert_eq!(large.map_read(block / 2..).unwrap()[0], 0x5A);
    drop(large);
    assert_eq!(stats(&device).dedicated, 0);
}

/// With `force_non_coherent`, every mapping flushes and invalidates in atom steps: buffers of
/// odd sizes side by side in one block start at atom multiples and never share an atom, and
/// data written by the host, copied by the device and read back at odd offsets is exact.
#[test]
fn non_coherent_round_trips_at_odd_offsets() {
    let Some(device) = device_or_skip("non_coherent_round_trips_at_odd_offsets", true) else {
        return;
    };
    let atom = device
        .query_raw("vulkan.non_coherent_atom_size")
        .unwrap()
        .max(1) as usize;
    eprintln!("nonCoherentAtomSize {atom}");
    const SIZES: [u64; 7] = [1029, 3, 77, 4099, 1, 333, 2053];
    block_on(async {
        for params in [BufferParams::HOST, HOST_CACHED] {
            let buffers = allocate(&device, &SIZES, params)?;
            // Side by side at atom multiples, each owning whole atoms.
            let mut placed: Vec<(usize, usize)> = buffers
                .iter()
                .zip(SIZES)
                .map(|(b, size)| (address(b), size as usize))
                .collect();
            placed.sort_unstable();
            let base = placed[0].0;
            for w in placed.windows(2) {
                let ((a, size), (b, _)) = (w[0], w[1]);
                assert_eq!((a - base) % atom, 0, "a buffer starts inside an atom");
                assert!(
                    b - a >= size.div_ceil(atom) * atom,
                    "buffers at {a:#x} ({size} bytes) and {b:#x} share an atom"
                );
            }

            let mut expected: Vec<Vec<u8>> = SIZES
                .iter()
                .enumerate()
                .map(|(i, &size)| pattern_bytes(size as usize, 100 + i as u32))
                .collect();
            for (buffer, bytes) in buffers.iter().zip(&expected) {
                buffer.map_write(..)?.copy_from_slice(bytes);
            }
            // Host writes at odd offsets of a mapped range.
            {
                let mut guard = buffers[3].map_write(3..1024)?;
                for (i, b) in guard.iter_mut().enumerate() {
                    *b = (i * 7 + 1) as u8;
                }
            }
            for i in 0..1021 {
                expected[3][3 + i] = (i * 7 + 1) as u8;
            }

            // Device copies: 1021 bytes from offset 3 of buffer 3 into offset 5 of buffer 6,
            // and the 3-byte buffer into the middle of buffer 0.
            let queue = device.queue(0)?;
            let timeline = queue.timeline()?;
            let submissions = vec![
                queue.copy(
                    timeline.next(),
                    &buffers[3].slice(3..1024)?,
                    &buffers[6].slice(5..1026)?,
                ),
                queue.copy(
                    timeline.next(),
                    &buffers[1].whole(),
                    &buffers[0].slice(511..514)?,
                ),
                queue.fill(timeline.next(), 0x3Cu8, &buffers[5].slice(1..332)?),
            ];
            all("copies", submissions).await?;
            let copied = expected[3][3..1024].to_vec();
            expected[6][5..1026].copy_from_slice(&copied);
            let small = expected[1].clone();
            expected[0][511..514].copy_from_slice(&small);
            expected[5][1..332].fill(0x3C);

            // Read back through mappings at odd offsets and lengths, and whole.
            assert_eq!(&buffers[6].map_read(5..1026)?[..], &expected[6][5..1026]);
            assert_eq!(
                &buffers[6].map_read(1027..1029)?[..],
                &expected[6][1027..1029]
            );
            assert_eq!(&buffers[0].map_read(510..515)?[..], &expected[0][510..515]);
            assert_mapped(&buffers, &expected, "after device copies")?;
            for (i, buffer) in buffers.iter().enumerate() {
                let bytes =
                    done("read", queue.read::<u8>(timeline.next(), &buffer.whole())).await?;
                assert_eq!(bytes, expected[i], "queue read of buffer {i}");
            }

            // A neighbour's invalidate does not discard host writes not yet flushed: map the
            // 1-byte buffer for writing and, while the write is unflushed, map every other
            // buffer (each mapping invalidates).
            {
                let mut guard = buffers[4].map_write(..)?;
                guard[0] = 0xC3;
                assert_mapped(
                    &buffers[..4],
                    &expected[..4],
                    "neighbours while one is mapped",
                )?;
                assert_mapped(
                    &buffers[5..],
                    &expected[5..],
                    "neighbours while one is mapped",
                )?;
            }
            expected[4][0] = 0xC3;
            let bytes = done(
                "read",
                queue.read::<u8>(timeline.next(), &buffers[4].whole()),
            )
            .await?;
            assert_eq!(bytes, expected[4]);
            assert_mapped(&buffers, &expected, "at the end")?;
        }
        Ok(())
    })
    .unwrap();
}

/// A buffer placed in memory another buffer used reads as zero, through its mapping and
/// through a queue read, coherent or not.
#[test]
fn reused_memory_reads_as_zero() {
    for force_non_coherent in [false, true] {
        let Some(device) = device_or_skip("reused_memory_reads_as_zero", force_non_coherent) else {
            return;
        };
        block_on(async {
            let queue = device.queue(0)?;
            let keep = device.allocator().allocate(100, BufferParams::HOST)?;
            let old = device.allocator().allocate(4093, BufferParams::HOST)?;
            let at = address(&old);
            old.map_write(..)?.fill(0xFF);
            done(
                "fill",
                queue.fill(Timepoints::default(), 0xEEu8, &old.slice(8..4000)?),
            )
            .await?;
            drop(old);
            // The fill's recording lets go of the buffer's memory just after it completes.
            eventually("the old buffer to be freed", || {
                stats(&device).suballocations == 1
            })
            .await?;
            let new = device.allocator().allocate(4093, BufferParams::HOST)?;
            assert_eq!(address(&new), at, "the freed range was not reused");
            assert!(
                new.map_read(..)?.iter().all(|&b| b == 0),
                "reused memory is not zero (force_non_coherent {force_non_coherent})"
            );
            let bytes = done(
                "read",
                queue.read::<u8>(Timepoints::default(), &new.whole()),
            )
            .await?;
            assert!(bytes.iter().all(|&b| b == 0));
            drop(keep);
            Ok(())
        })
        .unwrap();
    }
}

/// Threads allocating, writing, checking and dropping buffers at once never get overlapping
/// ranges, and every range comes back.
#[test]
fn concurrent_allocations_stay_apart() {
    let Some(device) = device_or_skip("concurrent_allocations_stay_apart", true) else {
        return;
    };
    let device = Arc::new(device);
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let device = device.clone();
            std::thread::spawn(move || {
                let mut live: Vec<(Buffer, u8)> = Vec::new();
                for round in 0..400usize {
                    let size = 1 + (round * 37 + t as usize * 101) % 3000;
                    let buffer = device
                        .allocator()
                        .allocate(size as u64, BufferParams::HOST)
                        .unwrap();
                    let tag = (round as u8).wrapping_mul(4).wrapping_add(t);
                    assert!(buffer.map_read(..).unwrap().iter().all(|&b| b == 0));
                    buffer.map_write(..).unwrap().fill(tag);
                    live.push((buffer, tag));
                    if round % 3 == 2 {
                        let (buffer, tag) = live.swap_remove(round % live.len());
                        assert!(
                            buffer.map_read(..).unwrap().iter().all(|&b| b == tag),
                            "another thread's buffer overlapped this one"
                        );
                    }
                }
                for (buffer, tag) in &live {
                    assert!(buffer.map_read(..).unwrap().iter().all(|&b| b == *tag));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let after = stats(&device);
    assert_eq!(after.suballocations, 0, "{after:?}");
    assert_eq!(after.dedicated, 0, "{after:?}");
    assert!(after.blocks <= 1, "{after:?}");
}
