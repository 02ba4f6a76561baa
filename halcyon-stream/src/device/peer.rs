//! Peer copies: a copy from another device's buffer into this device's
//! ([`Work::PeerCopy`](halcyon::backend::Work::PeerCopy)) as one native peer DMA on the queue's
//! stream, and the answer to "does this device reach that one's memory directly"
//! ([`StreamDevice::peer_reach`](halcyon::backend::DeviceBackend::peer_reach)).
//!
//! | core                                    | stream device                                  |
//! |-----------------------------------------|------------------------------------------------|
//! | `peer_reach` of another stream device of this API type | [`StreamApi::can_access_peer`], asked once per pair and remembered; `Direct` if it says so |
//! | `peer_reach` of anything else           | `Staged` (the core stages the copy through host memory) |
//! | the first peer copy from a device       | [`StreamApi::enable_peer_access`], once per pair |
//! | `Work::PeerCopy`                        | [`StreamApi::copy_peer_async`] on the queue's stream (a plain `copy_device_to_device_async` when the source is this device's own memory) |
//!
//! The submission's waits are resolved as for any work (`issue.rs`): this device's semaphores
//! by `stream_wait_event`, the source device's (and any other) on the host, by parking the
//! submission until they are reached. The source memory is kept in the submission's
//! timepoint with the target's, so it outlives the copy even if its buffer and device are
//! dropped meanwhile (the memory holds its API, and with it the peer device's context).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::api::{StreamApi, StreamHandle};
use crate::device::core::{lock, Core, Stats};
use crate::device::memory::StreamMemory;
use halcyon::backend::BufferMemory;
use halcyon::BufferRef;
use halcyon::{Error, Result, StatusCode};

/// What this device learnt about each peer device (by its stream device id).
#[derive(Default)]
pub(crate) struct Peers {
    known: Mutex<HashMap<u64, Known>>,
}

/// One peer's answers.
#[derive(Clone, Copy)]
struct Known {
    /// [`StreamApi::can_access_peer`]'s answer.
    reach: bool,
    /// Whether [`StreamApi::enable_peer_access`] succeeded.
    enabled: bool,
}

impl<A: StreamApi> Core<A> {
    /// Whether this device's streams copy directly from the memory of the device `peer` (its
    /// stream device id) whose API is `api`: asked once, remembered. An error counts as no.
    pub(crate) fn reaches(&self, peer: u64, api: &A) -> bool {
        if peer == self.id {
            return true;
        }
        let mut known = lock(&self.peers.known);
        known
            .entry(peer)
            .or_insert_with(|| Known {
                reach: self.api.can_access_peer(api).unwrap_or(false),
                enabled: false,
            })
            .reach
    }

    /// Enables this device's access to `peer`'s memory once (see [`Core::reaches`]).
    fn enable_peer(&self, peer: u64, api: &A) -> Result<()> {
        let mut known = lock(&self.peers.known);
        let entry = known.entry(peer).or_insert(Known {
            reach: false,
            enabled: false,
        });
        if entry.enabled {
            return Ok(());
        }
        if !entry.reach {
            entry.reach = self.api.can_access_peer(api)?;
        }
        if !entry.reach {
            return Err(Error::new(
                StatusCode::FailedPrecondition,
                format!(
                    "{} cannot reach the source device's memory directly (the driver reports \
                     no peer access); copy through Queue::copy_from, which stages through \
                     host memory between such devices",
                    self.name
                ),
            ));
        }
        self.api.enable_peer_access(api).map_err(|e| {
            e.context(format!(
                "{}: cannot enable peer access to another device's memory",
                self.name
            ))
        })?;
        entry.enabled = true;
        Ok(())
    }

    /// Enqueues the copy of `source` (another device's buffer range, of this API type) into
    /// `target` (this device's) on `stream`, keeping both memories in `keep`.
    pub(crate) fn enqueue_peer_copy(
        &self,
        stream: StreamHandle,
        source: &BufferRef,
        target: &BufferRef,
        keep: &mut Vec<Arc<dyn BufferMemory>>,
    ) -> Result<()> {
        let dst = self.address(target, keep)?;
        let memory = source.buffer().memory()?;
        let Some(peer) = memory.as_any().downcast_ref::<StreamMemory<A>>() else {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "buffer {} is not memory of a {} device, so {} cannot copy from it \
                     directly; copy it with Queue::copy_from from its own device's queue",
                    source.buffer().id(),
                    self.api.info().driver,
                    self.name
                ),
            ));
        };
        let (owner, src) = (peer.owner, peer.ptr.offset(source.offset()));
        let api = peer.api.clone();
        // Held by the submission before anything can read it.
        keep.push(memory);
        if owner == self.id {
            return self
                .api
                .copy_device_to_device_async(dst, src, target.len(), stream);
        }
        self.enable_peer(owner, &api)?;
        self.api
            .copy_peer_async(dst, &api, src, target.len(), stream)?;
        Stats::bump(&self.stats.peer_copies, 1);
        Ok(())
    }
}
