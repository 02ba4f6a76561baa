//! Copies between two devices (`Queue::copy_from`): staged through host memory, ordered by the
//! semaphores given.

use futures::poll;
use halcyon::{
    BufferParams, BufferUsage, Device, Fence, MemoryType, Result, Semaphore, StatusCode, Timepoints,
};

use crate::harness::{block_on, done, download_u32, pattern_u32, upload_u32, within};
use crate::kernels::Kernels;

/// A range of one device's buffer copied into a range of the other's and back
/// (`Queue::copy_from`): nothing moves before the copy's wait is reached; the bytes arrive
/// whole, at the target range's offset, with the rest of the target untouched; a read waiting
/// on the copy's signal sees them. A source without `TRANSFER_SOURCE` fails the copy and its
/// signal with the reason, in order; ranges of different lengths are `InvalidArgument`; a copy
/// pending when its target device is dropped fails with `Aborted` instead of hanging. Needs no
/// kernels, so it also runs across drivers.
pub fn copy_between_devices(a: Device, b: Device, _: &dyn Kernels) -> Result<()> {
    const N: usize = 3000;
    const PAD: u64 = 64;
    block_on(async {
        let (qa, qb) = (a.queue(0)?, b.queue(0)?);
        let data = pattern_u32(N, 31);
        let on_a = upload_u32(&qa, &data).await?;
        let bytes = 4 * N as u64;
        let on_b = b.allocator().allocate(bytes + PAD, BufferParams::DEVICE)?;
        done("clear", qb.fill(Timepoints::default(), 7u32, &on_b.whole())).await?;

        let (gate, copied) = (Semaphore::new(0), b.create_semaphore(0)?);
        let mut copy = qb.copy_from(
            Timepoints::new(Fence::at(&gate, 1), Fence::at(&copied, 1)),
            &qa,
            &on_a.whole(),
            &on_b.slice(PAD..PAD + bytes)?,
        );
        assert!(
            poll!(&mut copy).is_pending(),
            "the copy completed before its wait was reached"
        );
        let whole_b = on_b.whole();
        let read = download_u32(&qb, Fence::at(&copied, 1), &whole_b);
        gate.signal(1)?;
        done("copy A to B", copy).await?;
        let seen = read.await?;
        let pad = (PAD / 4) as usize;
        assert!(
            seen[..pad].iter().all(|&v| v == 7),
            "the bytes before the range moved"
        );
        assert!(seen[pad..] == data[..], "the bytes did not arrive whole");

        let again = a.allocator().allocate(bytes, BufferParams::DEVICE)?;
        let back = qa.copy_from(
            Timepoints::default(),
            &qb,
            &on_b.slice(PAD..PAD + bytes)?,
            &again.whole(),
        );
        done("copy B to A", back).await?;
        let returned = download_u32(&qa, Fence::new(), &again.whole()).await?;
        assert!(returned == data, "the round trip changed the bytes");

        // A source the device may not copy from: the copy and its signal fail with the reason.
        let sealed = a.allocator().allocate(
            16,
            BufferParams {
                memory: MemoryType::DEVICE_LOCAL,
                usage: BufferUsage::TRANSFER_TARGET,
            },
        )?;
        let failed = b.create_semaphore(0)?;
        let refused = qb.copy_from(
            Timepoints::new(Fence::new(), Fence::at(&failed, 1)),
            &qa,
            &sealed.whole(),
            &on_b.slice(0..16)?,
        );
        let error = refused
            .await
            .expect_err("a copy from a buffer without TRANSFER_SOURCE");
        assert!(
            error.message().contains("TRANSFER_SOURCE"),
            "the reason is lost: {error}"
        );
        assert!(failed.wait(1).await.is_err(), "the signal was not failed");

        let mismatch = qb
            .copy_from(Timepoints::default(), &qa, &on_a.whole(), &on_b.whole())
            .await
            .expect_err("ranges of different lengths");
        assert_eq!(mismatch.code(), StatusCode::InvalidArgument, "{mismatch}");

        // The target device dropped while a copy into it waits: the copy fails, it does not
        // hang (its pending steps must not keep the device alive).
        let gate = Semaphore::new(0);
        let pending = qb.copy_from(
            Timepoints::new(Fence::at(&gate, 1), Fence::new()),
            &qa,
            &on_a.whole(),
            &on_b.slice(PAD..PAD + bytes)?,
        );
        drop((qb, on_b, b, copied, failed));
        gate.signal(1)?;
        let outcome = within("a copy into a dropped device", pending).await?;
        let error = outcome.expect_err("a copy into a dropped device succeeded");
        assert_eq!(error.code(), StatusCode::Aborted, "{error}");
        Ok(())
    })
}
