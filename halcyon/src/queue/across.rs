//! Copies between buffers of two devices ([`Queue::copy_from`]).
//!
//! A device's queue copies only its own device's memory, unless its driver reaches the other
//! device's memory directly. So a copy between two devices takes one of two paths, chosen by
//! [`Device::peer_reach`](crate::Device::peer_reach) of the target device for the source's:
//!
//! * **Peer DMA** ([`Reach::Direct`]: two GPUs of one driver with peer access, CUDA ↔ CUDA or
//!   HIP ↔ HIP, or two devices over one GPU): one operation on the target queue
//!   ([`Work::PeerCopy`](crate::device::Work::PeerCopy), see `peer.rs`), which the backend
//!   issues as one native peer copy (`cuMemcpyPeerAsync`, `hipMemcpyPeerAsync`) waiting on the
//!   caller's wait fence and signalling its signal fence. It holds and tracks both buffers.
//! * **Host staging** ([`Reach::Staged`]: the CPU device, Vulkan, drivers without peer access,
//!   devices of two drivers), in queue operations ordered by semaphores like any others: the
//!   source device copies the range into a host-visible staging buffer of its own; once that
//!   is reached, a host call on the target queue copies the bytes into a host-visible staging
//!   buffer of the target device and submits that device's copy of them into the target range;
//!   a barrier on the target queue, submitted with the copy, waits for that copy and signals
//!   the copy's signal fence. Each device keeps its staging for later copies
//!   (`host_staging.rs`), so a large copy does not pay for fresh memory every time. Each step
//!   waits for the one before, so a failure anywhere fails the steps after it and the signal,
//!   in order, with its error; a step that never runs (its device went away) fails them with
//!   `Aborted`. The target range's buffer is tracked (for mapping) from when its write is
//!   submitted.
//!
//! Both paths refuse the same bad input the same way: ranges of different lengths
//! (`InvalidArgument`, here), a source without `TRANSFER_SOURCE` or a target without
//! `TRANSFER_TARGET` (`InvalidArgument`, failing the signal in order).

use crate::buffer::BufferRef;
use crate::error::{Error, Result, StatusCode};
use crate::fence::Fence;
use crate::semaphore::Semaphore;
use crate::topology::Reach;

use super::{Queue, Submission, Timepoints};

impl Queue {
    /// Copies `source`, a range of a buffer of `source_queue`'s device, into `target`, a range
    /// of this queue's device, once `timepoints.wait` is reached; signals `timepoints.signal`
    /// once the bytes are in `target`. The source is read in `source_queue`'s order and the
    /// target written in this queue's order. On one device it is [`Queue::copy`].
    ///
    /// Between two devices whose driver has peer DMA (this device reaches the source's memory
    /// directly: [`Device::peer_reach`](crate::Device::peer_reach) is
    /// [`Reach::Direct`](crate::topology::Reach::Direct), CUDA ↔ CUDA or HIP ↔ HIP with peer
    /// access) the copy is one peer copy on this queue, waiting on `timepoints.wait` and
    /// signalling `timepoints.signal`; it holds and tracks both buffers until it completes.
    ///
    /// Otherwise the copy is staged through host memory: a device copy into a
    /// host-visible staging buffer of the source device, then a host call on this queue that
    /// copies the bytes into staging of this device and submits this device's copy of them
    /// into the target, then a barrier on this queue that signals `timepoints.signal` once
    /// that is done; each waits for the one before on a semaphore of its own. Both devices
    /// keep their staging for later copies (a few buffers, at most 256 MiB each). The target's buffer is tracked (for mapping) from when its write
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
        if self.device().peer_reach(source_queue.device()) == Reach::Direct {
            return self.copy_peer(timepoints, source, target);
        }
        self.copy_staged(timepoints, source_queue, source, target, None)
    }

    /// The staged path of [`Queue::copy_from`] (see its docs), also between queues of one
    /// device: the host step copies the bytes across, or, with `gather`, picks the elements
    /// of a strided view out of `source` (its layout's span) in row-major order into
    /// `target`, which is as long as they are packed.
    pub(crate) fn copy_staged(
        &self,
        timepoints: Timepoints,
        source_queue: &Queue,
        source: &BufferRef,
        target: &BufferRef,
        gather: Option<Gather>,
    ) -> Submission {
        let (len, out) = (source.len(), target.len());
        let stage = |queue: &Queue, len: u64| {
            queue
                .device()
                .host_staging()
                .take(queue.device(), len)
                .map_err(|e| {
                    e.context(format!(
                        "cannot allocate {len} bytes of host-visible staging on {} for a copy \
                     between devices",
                        queue.device().info().id
                    ))
                })
        };
        let (from, to) = match (stage(source_queue, len), stage(self, out)) {
            (Ok(from), Ok(to)) => (from, to),
            (Err(error), _) | (_, Err(error)) => return self.reject(timepoints, error),
        };
        let from_range = match from.slice(0..len) {
            Ok(range) => range,
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
            &from_range,
        ));
        // Weak: the step waits in this device's own action queue, and must not keep the
        // device alive (dropping it aborts its pending work, this step included).
        let step = HostStep {
            read: read.clone(),
            written: written.clone(),
            armed: true,
            from,
            to,
            lens: (len, out),
            gather,
            device: self.device().downgrade(),
            index: self.index(),
            target: target.clone(),
        };
        drop(self.host_call(
            Timepoints::new(Fence::at(&read, 1), Fence::new()),
            move || step.run(),
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
    /// The source device's staging, which its device copy reached.
    from: crate::Buffer,
    /// This device's staging, which nothing uses yet.
    to: crate::Buffer,
    /// How many bytes `from` holds, and how many go into `to` (the same, unless gathering).
    lens: (u64, u64),
    gather: Option<Gather>,
    device: crate::device::WeakDevice,
    /// The target queue's index.
    index: u32,
    target: BufferRef,
}

impl HostStep {
    /// Copies the first bytes of `from` into `to` (or gathers them there), then submits the
    /// copy of those into `target` on the queue, signalling `written`.
    fn run(mut self) -> Result<()> {
        let ((len, out), from, to) = (self.lens, &self.from, &self.to);
        let staged = (self.device.upgrade())
            .ok_or_else(|| Error::new(StatusCode::Aborted, "the target device was dropped"))
            .and_then(|device| device.queue(self.index))
            .and_then(|queue| {
                let source = from.map_read(..len)?;
                let mut staging = to.map_write(..out)?;
                let (source, staging) = (source.as_slice::<u8>()?, staging.as_mut_slice::<u8>()?);
                match &self.gather {
                    None => staging.copy_from_slice(source),
                    Some(gather) => gather.run(source, staging),
                }
                Ok((queue, to.slice(0..out)?))
            });
        match staged {
            Ok((queue, staging)) => {
                let to = Timepoints::new(Fence::new(), Fence::at(&self.written, 1));
                drop(queue.copy(to, &staging, &self.target));
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

/// How the host step of a strided view's copy picks its elements: `element` bytes each, at
/// the offsets `layout` gives (in elements, from its span's start), packed in row-major order.
pub(crate) struct Gather {
    pub(crate) layout: crate::view::Layout,
    pub(crate) element: usize,
}

impl Gather {
    fn run(&self, source: &[u8], target: &mut [u8]) {
        let size = self.element;
        let start = self.layout.span().map_or(0, |s| s.start);
        let chunks = target.chunks_exact_mut(size);
        for (to, at) in chunks.zip(self.layout.offsets()) {
            let at = ((at - start) as usize) * size;
            to.copy_from_slice(&source[at..at + size]);
        }
    }
}
