//! Where a channel's ranks meet: the rendezvous behind [`crate::Device::channel`].

use std::time::Duration;

use crate::error::{Error, Result, StatusCode};

use super::ChannelBackend;

/// The rendezvous a channel is made through: which rank this process (or device) is, how many
/// ranks there are, and how rank 0's engine id (an `ncclUniqueId`) reaches the others.
/// `halcyon_mpi::Mpi` is one across processes and hosts, started by `mpirun`; an engine over
/// host memory ([`ChannelProvider::host_channel`]) comes with it.
///
/// Its calls block until every rank has made them: call them (and
/// [`crate::Device::channel`]) off the async executor (`tokio::task::spawn_blocking`).
pub trait ChannelProvider: Send + Sync {
    /// The provider's name (`"mpi"`).
    fn name(&self) -> &str;

    /// This rank, in `0..count()`.
    fn rank(&self) -> u32;

    /// How many ranks meet.
    fn count(&self) -> u32;

    /// Replaces `id` on every rank with rank 0's `id` (the same length on every rank): how
    /// rank 0's engine id reaches the others. Blocks until every rank has called it.
    fn exchange_id(&self, id: &mut [u8]) -> Result<()>;

    /// A channel over host memory spanning this provider's ranks, for a device whose
    /// collectives read and write host memory (the CPU device), or `Unimplemented` if the
    /// provider brings no engine of its own. Blocks until every rank has called it.
    fn host_channel(&self, params: &ChannelParams) -> Result<Box<dyn ChannelBackend>> {
        let _ = params;
        Err(Error::new(
            StatusCode::Unimplemented,
            format!(
                "the {} channel provider brings no engine over host memory",
                self.name()
            ),
        ))
    }
}

/// How a channel behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelParams {
    /// How long one collective may run before the engine gives up on it and fails it with
    /// `DeadlineExceeded` (a lost or stalled peer), leaving the channel unusable. Five minutes
    /// by default: long enough for any collective that makes progress, short enough that a
    /// rank whose peer is gone fails instead of hanging.
    pub timeout: Duration,
}

impl Default for ChannelParams {
    fn default() -> Self {
        ChannelParams {
            timeout: Duration::from_secs(300),
        }
    }
}

impl ChannelParams {
    /// These parameters with `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}
