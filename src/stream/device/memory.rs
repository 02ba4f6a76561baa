//! Buffer memory of a stream device: one [`StreamApi::allocate`] allocation per buffer, freed
//! when the buffer (and every submission holding its memory) is gone.
//!
//! Queue `alloca` memory on an API with stream-ordered allocation is
//! [`StreamApi::allocate_async`] on the queue's stream instead, and is returned with
//! [`StreamApi::free_async`] on that stream: no synchronisation either way.
//!
//! Host-visible buffers are allocated [`MemoryPlacement::HostVisible`] and mapped through the
//! address [`StreamApi::host_pointer`] reports; an API that cannot give one refuses host-visible
//! buffers instead of pretending. Device-local buffers have no host mapping even where the API
//! could provide one, so the mapping rules cannot depend on the backend.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::buffer::{BufferMemory, BufferParams, MemoryType};
use crate::error::{Error, Result, StatusCode};
use crate::stream::api::{DevicePtr, MemoryPlacement, StreamApi, StreamHandle};

/// Device memory behind a buffer of a stream device.
pub(crate) struct StreamMemory<A: StreamApi> {
    api: Arc<A>,
    /// The device that allocated it (its buffers are refused by other devices).
    pub(crate) owner: u64,
    pub(crate) ptr: DevicePtr,
    len: u64,
    host: Option<NonNull<u8>>,
    /// The stream it was allocated on in stream order (freed on it in stream order too).
    stream: Option<StreamHandle>,
}

// SAFETY: `host` is the host address of device memory this value owns (freed only in `Drop`);
// handing it to other threads is what buffers are for, and host access to it goes through the
// core's mapping guards, which exclude in-flight device work.
unsafe impl<A: StreamApi> Send for StreamMemory<A> {}
// SAFETY: as above; `&StreamMemory` only reads immutable fields.
unsafe impl<A: StreamApi> Sync for StreamMemory<A> {}

impl<A: StreamApi> StreamMemory<A> {
    /// Allocates `size` bytes for a buffer with `params` on device `owner`.
    pub(crate) fn allocate(
        api: &Arc<A>,
        owner: u64,
        device: &str,
        size: u64,
        params: &BufferParams,
    ) -> Result<Self> {
        let host_visible = params.memory.contains(MemoryType::HOST_VISIBLE);
        let placement = if host_visible {
            MemoryPlacement::HostVisible
        } else {
            MemoryPlacement::Device
        };
        let ptr = api.allocate(size, placement)?;
        let host = if host_visible {
            match api.host_pointer(ptr) {
                Some(host) => Some(host),
                None => {
                    let _ = api.free(ptr);
                    return Err(Error::new(
                        StatusCode::Unavailable,
                        format!(
                            "{device} cannot map {size} bytes of host-visible memory: its stream \
                             API gave no host address for a host-visible allocation; allocate \
                             device memory and copy through queue reads and writes"
                        ),
                    ));
                }
            }
        } else {
            None
        };
        Ok(StreamMemory {
            api: api.clone(),
            owner,
            ptr,
            len: size,
            host,
            stream: None,
        })
    }

    /// Allocates `size` bytes of device memory in the order of `stream` (for a queue `alloca`).
    pub(crate) fn allocate_async(
        api: &Arc<A>,
        owner: u64,
        size: u64,
        stream: StreamHandle,
    ) -> Result<Self> {
        let ptr = api.allocate_async(size, stream)?;
        Ok(StreamMemory {
            api: api.clone(),
            owner,
            ptr,
            len: size,
            host: None,
            stream: Some(stream),
        })
    }
}

impl<A: StreamApi> BufferMemory for StreamMemory<A> {
    fn len(&self) -> u64 {
        self.len
    }

    fn host_ptr(&self) -> Option<NonNull<u8>> {
        self.host
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl<A: StreamApi> Drop for StreamMemory<A> {
    fn drop(&mut self) {
        // Every submission that used the memory holds it until its fence settled, so nothing
        // enqueued still addresses it. A failure cannot be reported from here.
        if let Some(stream) = self.stream {
            // In stream order: after what the stream holds now, without blocking.
            if self.api.free_async(self.ptr, stream).is_ok() {
                return;
            }
            // The stream is gone (the buffer outlived its device): free it directly, which
            // stream-ordered memory allows.
        }
        let _ = self.api.free(self.ptr);
    }
}
