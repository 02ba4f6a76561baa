//! Collectives on CUDA devices: NCCL channels ([`crate::nccl`]) made and enqueued in this
//! API's context, through the stream layer's engine ([`halcyon_stream::collectives`]).

use halcyon::backend::{ChannelBackend, CollectiveKind};
use halcyon::{ChannelParams, ChannelProvider, Error, Result, StatusCode};
use halcyon_stream::collectives::StreamChannel;
use halcyon_stream::{DevicePtr, StreamHandle};

use super::CudaApi;
use crate::nccl::communicator::CudaNccl;
use crate::nccl::Nccl;

impl CudaApi {
    /// An NCCL channel on this device (see [`crate::nccl`]).
    pub(super) fn nccl_channel(
        &self,
        provider: &dyn ChannelProvider,
        params: &ChannelParams,
    ) -> Result<Box<dyn ChannelBackend>> {
        let made = Nccl::load().and_then(|nccl| {
            let _bound = self.bind()?;
            let table = CudaNccl::new(nccl, self.device)?;
            StreamChannel::join(table, provider, params, self.id)
        });
        let channel = made
            .map_err(|e| e.context(format!("making an NCCL channel on cuda://{}", self.ordinal)))?;
        Ok(Box::new(channel))
    }

    /// Enqueues `kind` of `channel`, which must be an NCCL channel of this API.
    ///
    /// # Safety
    ///
    /// As [`halcyon_stream::StreamApi::enqueue_collective`].
    pub(super) unsafe fn nccl_enqueue(
        &self,
        channel: &dyn ChannelBackend,
        kind: &CollectiveKind,
        send: Option<(DevicePtr, u64)>,
        recv: Option<(DevicePtr, u64)>,
        stream: StreamHandle,
    ) -> Result<()> {
        let nccl = channel
            .as_any()
            .downcast_ref::<StreamChannel<CudaNccl>>()
            .filter(|c| c.belongs_to(self.id))
            .ok_or_else(|| {
                Error::new(
                    StatusCode::InvalidArgument,
                    format!(
                        "a {} channel of another device than cuda://{}: a CUDA device runs \
                         the collectives of its own NCCL channels",
                        channel.engine(),
                        self.ordinal
                    ),
                )
            })?;
        let _bound = self.bind()?;
        // SAFETY: the caller's contract; the context is bound.
        unsafe { nccl.enqueue(kind, send, recv, stream) }
    }
}
