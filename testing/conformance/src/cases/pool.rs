//! Queue-ordered allocation: `alloca` / `dealloca` and the pool behind them.

use halcyon::{BufferParams, Device, Fence, Result, StatusCode, Timepoints};

use crate::harness::{
    assert_error, assert_failed, block_on, done, download, eventually, pattern_bytes, signals,
    within,
};
use crate::kernels::Kernels;

const SIZE: u64 = 4096;

/// `alloca`, use, `dealloca`, then `alloca` of the same size again: the second allocation
/// reuses the pooled block (the allocator's backend allocation count does not move) and the
/// reused memory holds exactly what is written to it. A backend serving `alloca` from its own
/// queue-ordered pool must give the memory back after the `dealloca`, and serve the next one.
pub fn alloca_dealloca_reuses_memory(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let allocator = device.allocator();
        let timeline = queue.timeline()?;
        let before = allocator.stats();

        let (buffer, alloca) = queue.alloca(timeline.next(), SIZE, BufferParams::DEVICE)?;
        let first = pattern_bytes(SIZE as usize, 6);
        let write = queue.write(timeline.next(), &first, &buffer.whole());
        let read = queue.read::<u8>(timeline.next(), &buffer.whole());
        assert_eq!(done("read of the first alloca", read).await?, first);
        done("alloca", alloca).await?;
        done("write", write).await?;
        done("dealloca", queue.dealloca(timeline.next(), &buffer)).await?;
        assert!(
            buffer.is_released(),
            "dealloca completed but the buffer still has memory"
        );
        drop(buffer);

        if allocator.stats().queue_ordered_allocations > before.queue_ordered_allocations {
            // The backend serves alloca from its own queue-ordered pool (stream-ordered
            // allocation), which reuses memory itself: check that the memory went back and that
            // a new alloca of the size works.
            eventually("the deallocated memory going back", || {
                allocator.stats().bytes_in_use <= before.bytes_in_use
            })
            .await?;
            let (again, alloca) = queue.alloca(timeline.next(), SIZE, BufferParams::DEVICE)?;
            let second = pattern_bytes(SIZE as usize, 7);
            let write = queue.write(timeline.next(), &second, &again.whole());
            let wait = Fence::at(timeline.semaphore(), timeline.last());
            assert_eq!(download(&queue, wait, &again.whole()).await?, second);
            done("second alloca", alloca).await?;
            done("write into the new alloca", write).await?;
            return Ok(());
        }

        let freed = allocator.stats();
        assert_eq!(
            freed.allocations,
            before.allocations + 1,
            "one alloca should make exactly one backend allocation"
        );
        eventually("the deallocated block returning to the pool", || {
            allocator.stats().bytes_pooled >= SIZE
        })
        .await?;

        let (again, alloca) = queue.alloca(timeline.next(), SIZE, BufferParams::DEVICE)?;
        assert_eq!(
            allocator.stats().allocations,
            freed.allocations,
            "an alloca of a size just deallocated made a new backend allocation instead of \
             reusing the pooled block"
        );
        let second = pattern_bytes(SIZE as usize, 7);
        let write = queue.write(timeline.next(), &second, &again.whole());
        let wait = Fence::at(timeline.semaphore(), timeline.last());
        assert_eq!(download(&queue, wait, &again.whole()).await?, second);
        done("second alloca", alloca).await?;
        done("write into reused memory", write).await?;
        Ok(())
    })
}

/// Once a `dealloca` completed, using the buffer in a submission is refused with
/// `FailedPrecondition` naming the buffer, and the submission's signal fence fails.
pub fn deallocated_buffer_is_refused(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let timeline = queue.timeline()?;
        let (buffer, alloca) = queue.alloca(timeline.next(), SIZE, BufferParams::DEVICE)?;
        done("alloca", alloca).await?;
        done("dealloca", queue.dealloca(timeline.next(), &buffer)).await?;

        let signal = device.create_semaphore(0)?;
        let fill = queue.fill(signals(&signal, 1), 0u8, &buffer.whole());
        let id = buffer.id().to_string();
        assert_error(
            within("fill", fill).await?,
            StatusCode::FailedPrecondition,
            &[&id],
        );
        assert_failed(&signal, StatusCode::FailedPrecondition, &id);
        let read = queue.read::<u8>(Timepoints::default(), &buffer.whole());
        assert_error(
            within("read", read).await?,
            StatusCode::FailedPrecondition,
            &[&id],
        );
        Ok(())
    })
}
