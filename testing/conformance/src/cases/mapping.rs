//! Mapping rules: host mappings and in-flight device work exclude each other.

use futures::poll;
use halcyon::{Buffer, BufferParams, Device, Fence, Result, StatusCode, Timepoints};

use crate::harness::{
    assert_error, assert_failed, block_on, done, join, signal_from_thread, signals, upload, within,
};
use crate::kernels::{Kernels, StandardKernels};

const SIZE: u64 = 1024;

fn host_buffer(device: &Device) -> Result<Buffer> {
    device.allocator().allocate(SIZE, BufferParams::HOST)
}

/// While a fill of the buffer waits on an unsignalled semaphore (so is in flight), `map_write`
/// and `map_read` are refused with `FailedPrecondition` naming the buffer; `map_read_async`
/// stays pending, and once another thread releases the fill it maps and shows the fill's data.
pub fn map_refused_while_device_writes(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = host_buffer(device)?;
        let id = buffer.id().to_string();
        let gate = device.create_semaphore(0)?;
        let fill = queue.fill(
            Timepoints::new(Fence::at(&gate, 1), Fence::new()),
            0xA5u8,
            &buffer.whole(),
        );

        let write = buffer.map_write(..).map(|g| g.len());
        assert_error(write, StatusCode::FailedPrecondition, &[&id]);
        let read = buffer.map_read(..).map(|g| g.len());
        assert_error(read, StatusCode::FailedPrecondition, &[&id]);

        let mut mapping = Box::pin(buffer.map_read_async(..));
        assert!(
            poll!(mapping.as_mut()).is_pending(),
            "map_read_async completed while a device write was in flight"
        );
        let thread = signal_from_thread(&gate, 1);
        let guard = done("map_read_async", mapping).await?;
        join(thread)?;
        assert!(
            guard.iter().all(|&b| b == 0xA5),
            "the mapping does not show the completed fill"
        );
        drop(guard);
        done("the fill", fill).await?;
        Ok(())
    })
}

/// While a read guard lives, a submission writing the buffer is refused with
/// `FailedPrecondition` (its signal fails too) but a queue read is allowed; while a write guard
/// lives, even a read is refused; once the guards are gone, writes are accepted again.
pub fn submission_refused_while_mapped(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = host_buffer(device)?;
        let id = buffer.id().to_string();
        done(
            "fill",
            queue.fill(Timepoints::default(), 1u8, &buffer.whole()),
        )
        .await?;

        let guard = buffer.map_read(..)?;
        let signal = device.create_semaphore(0)?;
        let fill = queue.fill(signals(&signal, 1), 2u8, &buffer.whole());
        let outcome = within("fill while mapped for reading", fill).await?;
        assert_error(outcome, StatusCode::FailedPrecondition, &[&id]);
        assert_failed(&signal, StatusCode::FailedPrecondition, &id);
        let read = queue.read::<u8>(Timepoints::default(), &buffer.slice(0..16)?);
        let bytes = done("read while mapped for reading", read).await?;
        assert_eq!(bytes, [1; 16]);
        drop(guard);

        let mut guard = buffer.map_write(..)?;
        guard.fill(3);
        let read = queue.read::<u8>(Timepoints::default(), &buffer.whole());
        let outcome = within("read while mapped for writing", read).await?;
        assert_error(outcome, StatusCode::FailedPrecondition, &[&id]);
        drop(guard);

        let read = queue.read::<u8>(Timepoints::default(), &buffer.whole());
        let bytes = done("read after the guards dropped", read).await?;
        assert!(
            bytes.iter().all(|&b| b == 3),
            "host writes through the guard were lost"
        );
        Ok(())
    })
}

/// As soon as a dispatch's signal semaphore is reached, the dispatch is no longer in flight:
/// `map_read` right after awaiting the semaphore (not the `Submission`) succeeds and shows the
/// data. Repeated, since a backend that signals the caller's semaphore before the core's
/// completion marker fails this only sometimes.
pub fn map_after_signal_reached(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    const ROUNDS: u32 = 100;
    const N: u32 = 256;
    block_on(async {
        let kernels = StandardKernels::load(device, kernels)?;
        let queue = device.queue(0)?;
        let buffer = upload(&queue, BufferParams::HOST, &[0u8; N as usize * 4]).await?;
        let signal = device.create_semaphore(0)?;
        let mut submissions = Vec::new();
        for round in 1..=ROUNDS {
            let timepoints = signals(&signal, round.into());
            let add = kernels.add_one(&queue, timepoints, &buffer.whole(), N);
            done("the increment's signal", signal.wait(round.into())).await?;
            let guard = buffer.map_read(..).map_err(|e| {
                e.context(format!(
                    "round {round}: map_read after the dispatch's signal"
                ))
            })?;
            assert!(
                guard.as_slice::<u32>()?.iter().all(|&v| v == round),
                "round {round}: the mapping shows stale data"
            );
            drop(guard);
            submissions.push(add);
        }
        for add in submissions {
            done("increment", add).await?;
        }
        Ok(())
    })
}

/// A failure does not overtake earlier work on its timeline: a fill of a mappable buffer waits
/// on a closed gate and signals `s` to 1; a barrier waits on `s` at 1 and on a semaphore the host
/// then fails, and signals `s` to 2. While the gate is closed `s` must not fail (the fill is
/// still to run) and mapping the buffer is refused; once the gate opens the fill runs and
/// completes successfully, the mapping shows it, and only then does `s` fail, with the host's
/// error, as does the barrier.
pub fn later_failure_waits_for_earlier_work(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = host_buffer(device)?;
        let id = buffer.id().to_string();
        let (gate, s, doomed) = (
            device.create_semaphore(0)?,
            device.create_semaphore(0)?,
            device.create_semaphore(0)?,
        );
        let fill = queue.fill(
            Timepoints::new(Fence::at(&gate, 1), Fence::at(&s, 1)),
            0x5Au8,
            &buffer.whole(),
        );
        let mut wait = Fence::at(&s, 1);
        wait.insert(&doomed, 1);
        let barrier = queue.barrier(Timepoints::new(wait, Fence::at(&s, 2)));
        let cancelled = halcyon::Error::new(StatusCode::Aborted, "cancelled by the host");
        doomed.fail(cancelled.clone());
        let write = buffer.map_write(..).map(|g| g.len());
        assert_error(write, StatusCode::FailedPrecondition, &[&id]);
        assert_eq!(
            s.query()?,
            0,
            "the barrier's failure overtook the fill it waits for"
        );
        gate.signal(1)?;
        done("the fill before the failure", fill).await?;
        let outcome = within("the barrier", barrier).await?;
        assert_error(outcome, StatusCode::Aborted, &[cancelled.message()]);
        assert_failed(&s, StatusCode::Aborted, cancelled.message());
        let guard = buffer.map_read(..)?;
        assert!(guard.iter().all(|&b| b == 0x5A), "the fill did not run");
        Ok(())
    })
}

/// A failure waits for earlier work on its timeline even when it reaches that timeline through
/// another semaphore, the shape of an `alloca` .. `dealloca` chain: a fill behind a closed gate
/// signals `s` to 1; a barrier waits on `s` at 1 and on a semaphore the host fails, and signals a
/// private `chain`; a second barrier waits only on `chain` and signals `s` to 2. The first
/// barrier fails `chain` at once, but `s` must not fail while the fill is still to run: the
/// fill then completes successfully, and only then does `s` fail, with the host's error.
pub fn failure_through_another_semaphore_waits_for_earlier_work(
    device: &Device,
    _: &dyn Kernels,
) -> Result<()> {
    block_on(async {
        let (queue, other) = (device.queue(0)?, device.queue(device.queue_count() - 1)?);
        let buffer = host_buffer(device)?;
        let [gate, s, doomed, chain] = [(); 4].map(|()| device.create_semaphore(0));
        let (gate, s, doomed, chain) = (gate?, s?, doomed?, chain?);
        let fill = queue.fill(
            Timepoints::new(Fence::at(&gate, 1), Fence::at(&s, 1)),
            0x3Cu8,
            &buffer.whole(),
        );
        let mut wait = Fence::at(&s, 1);
        wait.insert(&doomed, 1);
        let first = other.barrier(Timepoints::new(wait, Fence::at(&chain, 1)));
        let second = queue.barrier(Timepoints::new(Fence::at(&chain, 1), Fence::at(&s, 2)));
        let cancelled = halcyon::Error::new(StatusCode::Aborted, "cancelled by the host");
        doomed.fail(cancelled.clone());
        let outcome = within("the barrier on the failed semaphore", first).await?;
        assert_error(outcome, StatusCode::Aborted, &[cancelled.message()]);
        assert_failed(&chain, StatusCode::Aborted, cancelled.message());
        assert!(
            matches!(s.query(), Ok(0)),
            "the failure reached `s` through `chain` before the fill that signals `s` to 1 ran: \
             {:?}",
            s.query()
        );
        gate.signal(1)?;
        done("the fill before the failure", fill).await?;
        let outcome = within("the barrier after the chain", second).await?;
        assert_error(outcome, StatusCode::Aborted, &[cancelled.message()]);
        assert_failed(&s, StatusCode::Aborted, cancelled.message());
        let guard = buffer.map_read(..)?;
        assert!(guard.iter().all(|&b| b == 0x3C), "the fill did not run");
        Ok(())
    })
}
