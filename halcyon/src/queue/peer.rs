//! The direct path of [`Queue::copy_from`]: a copy between two devices that the target's
//! driver reaches by peer DMA ([`Reach::Direct`](crate::topology::Reach::Direct)) is one
//! operation on the target queue, [`Work::PeerCopy`], which the backend turns into one native
//! peer copy (`cuMemcpyPeerAsync`, `hipMemcpyPeerAsync`).
//!
//! It is ordered by the caller's fences alone, like any queue operation: the backend waits for
//! `timepoints.wait` (natively where it can, on the host for another device's semaphores) and
//! signals `timepoints.signal` once the bytes are in the target. The submission touches both
//! buffers, so both are tracked for host mapping (the source as read, the target as written)
//! and both are held until it completes: the source's memory stays alive under the copy even
//! if its buffer and device are dropped meanwhile.

use crate::buffer::{Access, BufferRef, BufferUsage};
use crate::command_buffer::check_usage;
use crate::device::{QueueCapabilities, Work};

use super::touched::Touched;
use super::{Queue, Submission, Timepoints};

impl Queue {
    /// Submits the peer copy of `source` (another device's range, as long as `target`) into
    /// `target` (this device's) once `timepoints.wait` is reached. A queue without transfers
    /// or a range without its transfer usage is `InvalidArgument`, refused in order.
    pub(super) fn copy_peer(
        &self,
        timepoints: Timepoints,
        source: &BufferRef,
        target: &BufferRef,
    ) -> Submission {
        if !self.capabilities().contains(QueueCapabilities::TRANSFER) {
            return self.reject(timepoints, self.cannot_run(QueueCapabilities::TRANSFER));
        }
        let checked = check_usage(source, BufferUsage::TRANSFER_SOURCE, "copy source")
            .and_then(|()| check_usage(target, BufferUsage::TRANSFER_TARGET, "copy target"));
        if let Err(error) = checked {
            return self.reject(timepoints, error);
        }
        let mut touched = Touched::default();
        touched.add(source.buffer(), Access::Read);
        touched.add(target.buffer(), Access::Write);
        let work = Work::PeerCopy {
            source: source.clone(),
            target: target.clone(),
        };
        self.submit(timepoints, touched, work, Box::new(|| Ok(())))
    }
}
