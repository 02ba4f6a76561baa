//! Collectives on HIP devices: RCCL channels ([`crate::rccl`]) made and enqueued on this API's
//! device, through the stream layer's engine ([`halcyon_stream::collectives`]).

use halcyon::backend::{ChannelBackend, CollectiveKind};
use halcyon::{ChannelParams, ChannelProvider, Error, Result, StatusCode};
use halcyon_stream::collectives::StreamChannel;
use halcyon_stream::{DevicePtr, StreamHandle};

use super::HipStreamApi;
use crate::rccl::communicator::HipRccl;
use crate::rccl::Rccl;

impl HipStreamApi {
    /// This API's identity for its channels: its address, stable while the device holds it.
    fn channel_owner(&self) -> u64 {
        self as *const HipStreamApi as usize as u64
    }

    /// An RCCL channel on this device (see [`crate::rccl`]).
    pub(super) fn rccl_channel(
        &self,
        provider: &dyn ChannelProvider,
        params: &ChannelParams,
    ) -> Result<Box<dyn ChannelBackend>> {
        let made = Rccl::load().and_then(|rccl| {
            let table = HipRccl::new(rccl, self.hip, self.device);
            StreamChannel::join(table, provider, params, self.channel_owner())
        });
        let channel = made
            .map_err(|e| e.context(format!("making an RCCL channel on hip://{}", self.device)))?;
        Ok(Box::new(channel))
    }

    /// Enqueues `kind` of `channel`, which must be an RCCL channel of this API.
    ///
    /// # Safety
    ///
    /// As [`halcyon_stream::StreamApi::enqueue_collective`].
    pub(super) unsafe fn rccl_enqueue(
        &self,
        channel: &dyn ChannelBackend,
        kind: &CollectiveKind,
        send: Option<(DevicePtr, u64)>,
        recv: Option<(DevicePtr, u64)>,
        stream: StreamHandle,
    ) -> Result<()> {
        let rccl = channel
            .as_any()
            .downcast_ref::<StreamChannel<HipRccl>>()
            .filter(|c| c.belongs_to(self.channel_owner()))
            .ok_or_else(|| {
                Error::new(
                    StatusCode::InvalidArgument,
                    format!(
                        "a {} channel of another device than hip://{}: a HIP device runs the \
                         collectives of its own RCCL channels",
                        channel.engine(),
                        self.device
                    ),
                )
            })?;
        let _bound = self.bind()?;
        // SAFETY: the caller's contract; the device is current.
        unsafe { rccl.enqueue(kind, send, recv, stream) }
    }
}
