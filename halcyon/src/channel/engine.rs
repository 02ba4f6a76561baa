//! What a collective engine (MPI, NCCL, RCCL) implements: the backend side of a [`Channel`](super::Channel).

use std::any::Any;
use std::fmt;

use crate::buffer::Buffer;
use crate::error::{Error, Result, StatusCode};

use super::CollectiveKind;

/// A communicator of some engine, seen from one rank: the backend behind a [`Channel`](super::Channel).
///
/// A device backend makes one in [`crate::backend::DeviceBackend::create_channel`] and runs
/// the [`crate::backend::Work::Collective`]s submitted on it: a backend over host memory hands
/// them to [`ChannelBackend::host`]; a GPU backend recognises its own engine's channels with
/// [`ChannelBackend::as_any`].
pub trait ChannelBackend: Send + Sync + 'static {
    /// This rank, in `0..count`.
    fn rank(&self) -> u32;

    /// How many ranks the channel spans.
    fn count(&self) -> u32;

    /// The engine's name (`"mpi"`, `"nccl"`).
    fn engine(&self) -> &str;

    /// Whether the engine can run `kind`: `Unimplemented`, saying why, for an element type or
    /// reduction it lacks. Checked when the collective is submitted.
    fn check(&self, kind: &CollectiveKind) -> Result<()> {
        let _ = kind;
        Ok(())
    }

    /// The engine's verdict on a collective its device completed: a stream engine's
    /// communicator can fail after the work was enqueued (NCCL's asynchronous error, an abort
    /// after the timeout), and the device's stream then completes the work without it having
    /// run. The device calls this once per completed collective of this channel, in
    /// completion order. `Ok` by default.
    fn outcome(&self) -> Result<()> {
        Ok(())
    }

    /// The engine over host memory, if this is one.
    fn host(&self) -> Option<&dyn HostEngine> {
        None
    }

    /// The object as [`Any`], so a backend can recognise its own engine's channels.
    fn as_any(&self) -> &dyn Any;
}

/// An engine whose collectives read and write host memory (MPI): what a device with host
/// memory (the CPU device) hands its collectives to.
pub trait HostEngine: Send + Sync {
    /// Starts `job` and returns without waiting for it: the engine runs it after every
    /// collective started before it on this channel, then reports through `job.done`.
    ///
    /// # Safety
    ///
    /// `job.send` must be valid for reads of `job.send_len` bytes and `job.recv` for writes of
    /// `job.recv_len` bytes (either may be the other, for an in-place collective), and nothing
    /// else may write them, or read what the job writes, until the engine reports: they stay
    /// so until [`CollectiveDone::complete`] (after which the engine must not touch them) and
    /// forever after [`CollectiveDone::abandon`].
    unsafe fn start(&self, job: HostJob);
}

/// A collective over host memory, handed to a [`HostEngine`].
pub struct HostJob {
    /// What to do.
    pub kind: CollectiveKind,
    /// The bytes read (null with length 0 for a receive).
    pub send: *const u8,
    /// How many bytes `send` holds.
    pub send_len: usize,
    /// The bytes written (null with length 0 for a send).
    pub recv: *mut u8,
    /// How many bytes `recv` holds.
    pub recv_len: usize,
    /// Where the outcome goes.
    pub done: CollectiveDone,
}

// SAFETY: the pointers are plain addresses whose validity `HostEngine::start`'s contract
// states for any thread; the rest is `Send`.
unsafe impl Send for HostJob {}

impl fmt::Debug for HostJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostJob")
            .field("kind", &self.kind)
            .field("send_len", &self.send_len)
            .field("recv_len", &self.recv_len)
            .finish()
    }
}

/// How an engine reports a collective's outcome to the device that submitted it.
///
/// [`CollectiveDone::complete`] is the normal end: the engine no longer touches the memory,
/// the device releases it and settles the collective's signal fence. An engine that gives up
/// on a collective still running ([`CollectiveDone::abandon`]: a lost peer, a timeout) cannot
/// take its memory back from the engine, so the memory is kept for the rest of the process and
/// its buffers refuse any further use, with an error naming the collective: the signal fence
/// fails at once, and nothing can race what the engine may still write. Dropped without
/// either, it completes with `Aborted`.
pub struct CollectiveDone {
    report: Option<Box<dyn FnOnce(Result<()>) + Send>>,
    hold: Option<Box<dyn Any + Send>>,
    buffers: Vec<Buffer>,
}

impl CollectiveDone {
    /// Wraps the device's side: `report` settles the collective, `hold` keeps its memory
    /// usable (the memory itself, and whatever guards the device keeps while work runs), and
    /// `buffers` are what an abandoned collective must make unusable.
    pub fn new(
        report: impl FnOnce(Result<()>) + Send + 'static,
        hold: impl Any + Send,
        buffers: Vec<Buffer>,
    ) -> CollectiveDone {
        CollectiveDone {
            report: Some(Box::new(report)),
            hold: Some(Box::new(hold)),
            buffers,
        }
    }

    /// The collective ended with `result` and the engine is done with its memory.
    pub fn complete(mut self, result: Result<()>) {
        drop(self.hold.take());
        if let Some(report) = self.report.take() {
            report(result);
        }
    }

    /// The engine gives up on a collective it may still be running (see the type's docs):
    /// fails it with `error`, keeps its memory for good and makes its buffers unusable.
    pub fn abandon(mut self, error: Error) {
        let reason = format!("a collective that was abandoned ({error})");
        for buffer in &self.buffers {
            buffer.quarantine(&reason);
        }
        // The engine may still write the memory: it must never be freed or reused.
        std::mem::forget(self.hold.take());
        if let Some(report) = self.report.take() {
            report(Err(error));
        }
    }
}

impl Drop for CollectiveDone {
    fn drop(&mut self) {
        if let Some(report) = self.report.take() {
            drop(self.hold.take());
            report(Err(Error::new(
                StatusCode::Aborted,
                "the collective engine dropped a collective without reporting it",
            )));
        }
    }
}

impl fmt::Debug for CollectiveDone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollectiveDone")
            .field("buffers", &self.buffers.len())
            .finish()
    }
}

impl fmt::Debug for dyn ChannelBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rank {} of {}",
            self.engine(),
            self.rank(),
            self.count()
        )
    }
}
