//! Transfers and dispatches with exact data: fill, update, copy, write, read, saxpy.

use halcyon::{BufferParams, Device, Fence, Result, Timepoints};

use crate::harness::{block_on, bytes_u32, done, download, pattern_bytes, upload};
use crate::kernels::{Kernels, StandardKernels};

const SIZE: usize = 1024;

/// Fills with 4-, 2- and 1-byte patterns (the last at an odd offset), an update, a copy into a
/// second buffer and a write, ordered on a timeline; both buffers read back exactly as a host
/// model of the same operations says.
pub fn fill_update_copy_round_trip(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let allocator = device.allocator();
        let a = allocator.allocate(SIZE as u64, BufferParams::DEVICE)?;
        let b = allocator.allocate(SIZE as u64, BufferParams::DEVICE)?;
        let update = pattern_bytes(32, 10);
        let written = pattern_bytes(512, 11);
        let timeline = queue.timeline()?;

        let submissions = [
            queue.fill(timeline.next(), 0x0102_0304u32, &a.whole()),
            queue.fill(timeline.next(), [0xABu8, 0xCD], &a.slice(256..512)?),
            queue.fill(timeline.next(), 0x5Eu8, &a.slice(513..517)?),
            queue.update(timeline.next(), &update, &a.slice(16..48)?),
            queue.copy(timeline.next(), &a.slice(0..512)?, &b.slice(512..1024)?),
            queue.write(timeline.next(), &written, &b.slice(0..512)?),
        ];
        let read_a = queue.read::<u8>(timeline.next(), &a.whole());
        let read_b = queue.read::<u8>(timeline.next(), &b.whole());

        let mut model_a: Vec<u8> = [4, 3, 2, 1].repeat(SIZE / 4);
        model_a[256..512].copy_from_slice(&[0xAB, 0xCD].repeat(128));
        model_a[513..517].fill(0x5E);
        model_a[16..48].copy_from_slice(&update);
        let mut model_b = written.clone();
        model_b.extend_from_slice(&model_a[..512]);

        assert_eq!(
            done("read a", read_a).await?,
            model_a,
            "buffer a differs from the model"
        );
        assert_eq!(
            done("read b", read_b).await?,
            model_b,
            "buffer b differs from the model"
        );
        for (i, submission) in submissions.into_iter().enumerate() {
            done(&format!("transfer {i}"), submission).await?;
        }
        Ok(())
    })
}

/// A write far above the inline update limit (256 KiB + 12 bytes) reads back exactly, whole
/// and as an unaligned subrange.
pub fn write_read_large_round_trip(device: &Device, _: &dyn Kernels) -> Result<()> {
    const LARGE: usize = 256 * 1024 + 12;
    block_on(async {
        let queue = device.queue(0)?;
        let data = pattern_bytes(LARGE, 12);
        let buffer = upload(&queue, BufferParams::DEVICE, &data).await?;
        let whole = download(&queue, Fence::new(), &buffer.whole()).await?;
        assert!(
            whole == data,
            "a {LARGE}-byte write did not read back exactly"
        );
        let part = download(&queue, Fence::new(), &buffer.slice(1001..70001)?).await?;
        assert!(
            part == data[1001..70001],
            "a subrange read returned the wrong bytes"
        );
        Ok(())
    })
}

/// A queue read of a subrange completes with exactly that range's bytes.
pub fn queue_read_returns_bytes(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(64, BufferParams::DEVICE)?;
        let timeline = queue.timeline()?;
        let fill = queue.fill(timeline.next(), [0x11u8, 0x22], &buffer.whole());
        let read = queue.read::<u8>(timeline.next(), &buffer.slice(6..16)?);
        let bytes = done("read", read).await?;
        assert_eq!(bytes, [0x11, 0x22].repeat(5), "read of bytes 6..16");
        done("fill", fill).await
    })
}

/// `Queue::write_shared` uploads the caller's `Arc<[u8]>` as is, and `Queue::read_into` puts
/// the bytes in the caller's vector, reusing its allocation (a read larger than a pinned
/// lease, 3 MiB, and a small one into a longer vector): the bytes round-trip, and the vector
/// handed back is the one handed in, now the source's length.
pub fn shared_write_and_read_into_round_trip(device: &Device, _: &dyn Kernels) -> Result<()> {
    use std::sync::Arc;
    const LARGE: usize = 3 << 20;
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device
            .allocator()
            .allocate(LARGE as u64, BufferParams::DEVICE)?;
        let data: Arc<[u8]> = pattern_bytes(LARGE, 41).into();
        done(
            "shared write",
            queue.write_shared(Timepoints::default(), data.clone(), &buffer.whole()),
        )
        .await?;
        let mut reused = Vec::with_capacity(LARGE);
        reused.push(9u8);
        let at = reused.as_ptr();
        let back = done(
            "read_into",
            queue.read_into(Timepoints::default(), &buffer.whole(), reused),
        )
        .await?;
        assert_eq!(back.len(), LARGE, "read_into returns the source's length");
        assert!(
            back == *data,
            "read_into returned other bytes than were written"
        );
        assert_eq!(
            back.as_ptr(),
            at,
            "read_into did not reuse the vector it was given"
        );
        let small = done(
            "small read_into",
            queue.read_into(Timepoints::default(), &buffer.slice(16..32)?, back),
        )
        .await?;
        assert_eq!(
            small,
            data[16..32],
            "a small read_into returned other bytes"
        );
        assert_eq!(
            small.as_ptr(),
            at,
            "a small read_into did not reuse the vector"
        );
        // A length mismatch is refused as for `write`.
        let short: Arc<[u8]> = data[..8].into();
        let refused = queue.write_shared(Timepoints::default(), short, &buffer.whole());
        assert!(
            refused.await.is_err(),
            "a shared write of the wrong length was accepted"
        );
        Ok(())
    })
}

/// `y = a * x + y` on 1000 elements (not a multiple of the workgroup size) with values whose
/// products and sums are exact, so every element is checked exactly; `x` is left untouched and
/// the element past `n` too.
pub fn saxpy_dispatch(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    const N: u32 = 1000;
    block_on(async {
        let kernels = StandardKernels::load(device, kernels)?;
        let queue = device.queue(0)?;
        let xs: Vec<f32> = (0..N).map(|i| i as f32).collect();
        let ys: Vec<f32> = (0..=N).map(|i| 0.5 * i as f32).collect();
        let x = upload(&queue, BufferParams::DEVICE, &xs).await?;
        let y = upload(&queue, BufferParams::DEVICE, &ys).await?;

        let saxpy = kernels.saxpy(
            &queue,
            Timepoints::default(),
            2.5,
            &x.whole(),
            &y.whole(),
            N,
        );
        done("saxpy", saxpy).await?;
        let floats = |bytes: Vec<u8>| -> Result<Vec<f32>> {
            Ok(bytes_u32(&bytes)?.into_iter().map(f32::from_bits).collect())
        };
        let y_after = floats(download(&queue, Fence::new(), &y.whole()).await?)?;
        let x_after = floats(download(&queue, Fence::new(), &x.whole()).await?)?;
        let mut expected: Vec<f32> = (0..N as usize).map(|i| 2.5 * xs[i] + ys[i]).collect();
        expected.push(ys[N as usize]);
        assert_eq!(y_after, expected, "saxpy computed wrong values");
        assert_eq!(x_after, xs, "saxpy modified x");
        Ok(())
    })
}
