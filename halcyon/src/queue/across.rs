//! Copies between buffers of two devices ([`Queue::copy_from`]).
//!
//! A device's queue copies only its own device's memory, so a copy between two devices (two
//! GPUs, a GPU and the CPU device, devices of two drivers) is staged through host memory, in
//! queue operations ordered by semaphores like any others: the source device copies the range
//! into a host-visible buffer of its own; once that is reached, a host call on the target
//! queue takes the bytes out and submits their write into the target range (a queue write,
//! staged as writes are on that device); a barrier on the target queue, submitted with the
//! copy, waits for the write and signals the copy's signal fence. Each step waits for the one
//! before, so a failure anywhere fails the steps after it and the signal, in order, with its
//! error; a step that never runs (its device went away) fails them with `Aborted`. The target
//! range's buffer is tracked (for mapping) from when its write is submitted.
//!
//! Peer DMA between two GPUs of one driver (CUDA's `cuMemcpyPeerAsync`) would skip the host;
//! halcyon does not use it yet, so every pair of distinct devices takes this path.

use crate::buffer::{BufferParams, BufferRef};
use crate::error::{Error, Result, StatusCode};
use crate::fence::Fence;
use crate::semaphore::Semaphore;

use super::{Queue, Submission, Timepoints};

impl Queue {
    /// Copies `source`, a range of a buffer of `source_queue`'s device, into `target`, a range
    /// of this queue's device, once `timepoints.wait` is reached; signals `timepoints.signal`
    /// once the bytes are in `target`. The source is read in `source_queue`'s order and the
    /// target written in this queue's order. On one device it is [`Queue::copy`].
    ///
    /// Between two devices the copy is staged through host memory: a device copy into a
    /// host-visible staging buffer of the source device, then a host call on this queue that
    /// submits a queue write of those bytes into the target, then a barrier on this queue that
    /// signals `timepoints.signal` once the write is done; each waits for the one before on a
    /// semaphore of its own. The target's buffer is tracked (for mapping) from when its write
    /// is submitted. Both
    /// ranges must have the same length (`InvalidArgument` otherwise), the source
    /// [`TRANSFER_SOURCE`](crate::BufferUsage::TRANSFER_SOURCE) usage and the target
    /// [`TRANSFER_TARGET`](crate::BufferUsage::TRANSFER_TARGET); a refused or failed step
    /// fails the steps after it and the signal fence in order, with its error. The
    /// submission holds both ranges' buffers until it completes.
    ///
    /// ```
    /// use halcyon::{Buffer, Queue, Timepoints};
    ///
    /// /// Moves `weights` from the GPU queue's device to the CPU queue's.
    /// async fn to_host(gpu: &Queue, cpu: &Queue, weights: &Buffer, on_cpu: &Buffer) -> halcyon::Result<()> {
    ///     cpu.copy_from(Timepoints::default(), gpu, &weights.whole(), &on_cpu.whole()).await
    /// }
    /// ```
    pub fn copy_from(
        &self,
        timepoints: impl Into<Timepoints>,
        source_queue: &Queue,
        source: &BufferRef,
        target: &BufferRef,
    ) -> Submission {
        let timepoints = timepoints.into();
        if source_queue.device().ptr_eq(self.device()) {
            return self.copy(timepoints, source, target);
        }
        if source.len() != target.len() {
            let error = Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "a copy between devices of {} bytes into {} bytes: the ranges must have \
                     the same length",
                    source.len(),
                    target.len()
                ),
            );
            return self.reject(timepoints, error);
        }
        if source.is_empty() {
            // Nothing to move: ordered like any operation, with both queues' checks skipped.
            return self.barrier(timepoints);
        }
        let staging = source_queue
            .device()
            .allocator()
            .allocate(source.len(), BufferParams::HOST)
            .map_err(|e| {
                e.context(format!(
                    "cannot allocate {} bytes of host-visible staging on {} for a copy between \
                     devices",
                    source.len(),
                    source_queue.device().info().id
                ))
            });
        let staging = match staging {
            Ok(staging) => staging,
            Err(error) => return self.reject(timepoints, error),
        };
        let Timepoints { wait, signal } = timepoints;
        let (read, written) = (Semaphore::new(0), Semaphore::new(0));
        // The read's failure reaches the host step through `read`, and every failure reaches
        // the returned submission through `written`: the steps' own submissions report nothing
        // more.
        drop(source_queue.copy(
            Timepoints::new(wait, Fence::at(&read, 1)),
            source,
            &staging.whole(),
        ));
        let step = HostStep {
            read: read.clone(),
            written: written.clone(),
            armed: true,
        };
        // Weak: the step waits in this device's own action queue, and must not keep the
        // device alive (dropping it aborts its pending work, this step included).
        let (device, index, target_range) =
            (self.device().downgrade(), self.index(), target.clone());
        drop(self.host_call(
            Timepoints::new(Fence::at(&read, 1), Fence::new()),
            move || step.run(&staging, &device, index, &target_range),
        ));
        self.barrier(Timepoints::new(Fence::at(&written, 1), signal))
    }
}

/// The host's step: submitted on the target queue once the source device's copy reached
/// `read`, it takes the bytes out of the source device's staging and submits their write into
/// the target range, which signals `written`. Dropped without running (its wait failed, or
/// its device went away), or failing, it fails `written` so that nothing waits forever.
struct HostStep {
    read: Semaphore,
    written: Semaphore,
    armed: bool,
}

impl HostStep {
    fn run(
        mut self,
        staging: &crate::Buffer,
        device: &crate::device::WeakDevice,
        index: u32,
        target: &BufferRef,
    ) -> Result<()> {
        let queue = device
            .upgrade()
            .ok_or_else(|| Error::new(StatusCode::Aborted, "the target device was dropped"))
            .and_then(|device| device.queue(index));
        let bytes = queue.and_then(|queue| {
            let mapped = staging.map_read(..)?;
            let bytes = std::sync::Arc::<[u8]>::from(mapped.as_slice::<u8>()?);
            Ok((queue, bytes))
        });
        match bytes {
            Ok((queue, bytes)) => {
                let to = Timepoints::new(Fence::new(), Fence::at(&self.written, 1));
                drop(queue.write_shared(to, bytes, target));
                // Only now: a panic above leaves the step armed, and its drop fails `written`.
                self.armed = false;
                Ok(())
            }
            Err(error) => {
                self.armed = false;
                self.written.fail(error.clone());
                Err(error)
            }
        }
    }
}

impl Drop for HostStep {
    fn drop(&mut self) {
        if self.armed {
            let error = self.read.failure_before(1).unwrap_or_else(|| {
                Error::new(
                    StatusCode::Aborted,
                    "the host step of a copy between devices did not run (its device went away)",
                )
            });
            self.written.fail(error);
        }
    }
}
