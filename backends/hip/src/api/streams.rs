//! The stream and event tables: `hipStream_t`s and `hipEvent_t`s registered by their
//! addresses, each destroyed when its last holder lets go (see [Handles](super#handles)).
//!
//! An event created with [`EventFlags::BLOCKING_SYNC`] is two HIP events, a shared one and a
//! private one only synchronisations wait on, because HIP holds an event's lock for the whole
//! of `hipEventSynchronize` (see [Events](super#events)): [`EventPair`] picks which one each
//! call uses.

use std::ffi::c_uint;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use halcyon::Result;
use halcyon_stream::{EventFlags, EventHandle, StreamHandle};

use super::{null_from, HipStreamApi};
use crate::result::Hip;
use crate::sys;

/// A `hipStream_t`, destroyed on drop.
pub(super) struct RawStream {
    pub(super) hip: Hip,
    pub(super) raw: sys::hipStream_t,
}

/// The HIP events behind one [`EventHandle`] (see [Events](super#events)), destroyed on drop.
pub(super) struct RawEvent {
    hip: Hip,
    events: EventPair<sys::hipEvent_t>,
}

/// Which HIP event each operation on an event uses: the shared one, and for
/// [`EventFlags::BLOCKING_SYNC`] a private one only synchronisations wait on (see
/// [Events](super#events)). Generic over the handle so that the logic is testable without HIP.
#[derive(Debug)]
pub(crate) struct EventPair<E> {
    /// Recorded, queried, and waited on by streams.
    shared: E,
    /// Recorded after `shared` on the same stream; only `synchronize_event` waits on it.
    private: Option<E>,
    /// Whether `private` holds the same record as `shared` (`false` once a record of `shared`
    /// succeeded and the one of `private` did not, until a record of both succeeds).
    in_step: AtomicBool,
}

impl<E: Copy> EventPair<E> {
    /// A single HIP event: everything uses `shared`.
    pub(crate) fn single(shared: E) -> Self {
        EventPair {
            shared,
            private: None,
            in_step: AtomicBool::new(true),
        }
    }

    /// `shared` plus `private`, neither recorded yet (both complete, so in step).
    pub(crate) fn paired(shared: E, private: E) -> Self {
        EventPair {
            private: Some(private),
            ..EventPair::single(shared)
        }
    }

    /// Every HIP event of the pair, shared first.
    pub(crate) fn all(&self) -> impl Iterator<Item = E> {
        std::iter::once(self.shared).chain(self.private)
    }

    /// The event queries and stream waits use.
    pub(crate) fn shared(&self) -> E {
        self.shared
    }

    /// The event a synchronisation waits on: the private one while it holds the most recent
    /// record, else the shared one.
    pub(crate) fn to_synchronize(&self) -> E {
        match self.private {
            Some(private) if self.in_step.load(Ordering::Acquire) => private,
            _ => self.shared,
        }
    }

    /// Records the pair with `record`: the shared event, then the private one. Fails with the
    /// first error; when only the private record fails, synchronisations fall back to the
    /// shared event until a later record of both succeeds.
    pub(crate) fn record(&self, mut record: impl FnMut(E) -> Result<()>) -> Result<()> {
        record(self.shared)?;
        let Some(private) = self.private else {
            return Ok(());
        };
        let recorded = record(private);
        self.in_step.store(recorded.is_ok(), Ordering::Release);
        recorded.map_err(|e| {
            e.context(
                "cannot record the event's private blocking-sync HIP event (the shared one was \
                 recorded; synchronisations wait on that until a record of both succeeds)",
            )
        })
    }
}

// SAFETY: HIP objects may be used and destroyed from any thread (the HIP runtime API is
// thread-safe); the wrappers only hold the handle and the `Copy` symbol table.
unsafe impl Send for RawStream {}
// SAFETY: as above; shared references only read the handle.
unsafe impl Sync for RawStream {}
// SAFETY: as for `RawStream`; the pair is handles and an atomic.
unsafe impl Send for RawEvent {}
// SAFETY: as for `RawStream`; shared references read the handles and the atomic only.
unsafe impl Sync for RawEvent {}

impl Drop for RawStream {
    fn drop(&mut self) {
        // SAFETY: the registry handed out the last holder; nothing uses the stream any more.
        // Work already enqueued still completes (hipStreamDestroy does not cancel it).
        let _ = unsafe { self.hip.stream_destroy(self.raw) };
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        for raw in self.events.all() {
            // SAFETY: the last holder, and each HIP event of the pair is destroyed once; a
            // record still pending completes harmlessly.
            let _ = unsafe { self.hip.event_destroy(raw) };
        }
    }
}

/// `hipEventCreateWithFlags` flags for an event created with `flags`: those of the shared
/// HIP event (never `hipEventBlockingSync`), and those of the private one, which only
/// [`EventFlags::BLOCKING_SYNC`] events have: `hipEventBlockingSync` alone (see
/// [Events](super#events)).
pub(crate) fn event_flags(flags: EventFlags) -> (c_uint, Option<c_uint>) {
    let mut shared = sys::hipEventDefault;
    if flags.contains(EventFlags::DISABLE_TIMING) {
        shared |= sys::hipEventDisableTiming;
    }
    let private = flags
        .contains(EventFlags::BLOCKING_SYNC)
        .then_some(sys::hipEventBlockingSync);
    (shared, private)
}

impl HipStreamApi {
    pub(super) fn stream(&self, handle: StreamHandle) -> Result<Arc<RawStream>> {
        self.streams.get(handle.0)
    }

    pub(super) fn event(&self, handle: EventHandle) -> Result<Arc<RawEvent>> {
        self.events.get(handle.0)
    }

    /// [`StreamApi::create_stream`](super::StreamApi::create_stream).
    pub(super) fn create_stream(&self) -> Result<StreamHandle> {
        let _bound = self.bind()?;
        let raw = self.hip.stream_create(sys::hipStreamNonBlocking)?;
        if raw.is_null() {
            return Err(null_from("hipStreamCreateWithFlags"));
        }
        let handle = raw as usize as u64;
        self.streams
            .insert(handle, RawStream { hip: self.hip, raw });
        Ok(StreamHandle(handle))
    }

    /// [`StreamApi::destroy_stream`](super::StreamApi::destroy_stream).
    pub(super) fn destroy_stream(&self, stream: StreamHandle) -> Result<()> {
        // hipStreamDestroy runs when the last call using the stream returns.
        self.streams.remove(stream.0).map(drop)
    }

    /// [`StreamApi::synchronize_stream`](super::StreamApi::synchronize_stream).
    pub(super) fn synchronize_stream(&self, stream: StreamHandle) -> Result<()> {
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        // SAFETY: a live stream, held for the call.
        let synchronized = unsafe { self.hip.stream_synchronize(stream.raw) };
        self.free_retired(); // this method may block
        synchronized
    }

    /// [`StreamApi::create_event`](super::StreamApi::create_event).
    pub(super) fn create_event(&self, flags: EventFlags) -> Result<EventHandle> {
        let _bound = self.bind()?;
        let (shared_flags, private_flags) = event_flags(flags);
        let shared = self.hip.event_create(shared_flags)?;
        if shared.is_null() {
            return Err(null_from("hipEventCreateWithFlags"));
        }
        // Owned from here: dropped on an error below, it destroys what it holds.
        let mut event = RawEvent {
            hip: self.hip,
            events: EventPair::single(shared),
        };
        if let Some(private_flags) = private_flags {
            let private = self.hip.event_create(private_flags)?;
            if private.is_null() {
                return Err(null_from("hipEventCreateWithFlags"));
            }
            event.events = EventPair::paired(shared, private);
        }
        let handle = shared as usize as u64;
        self.events.insert(handle, event);
        Ok(EventHandle(handle))
    }

    /// [`StreamApi::destroy_event`](super::StreamApi::destroy_event).
    pub(super) fn destroy_event(&self, event: EventHandle) -> Result<()> {
        self.events.remove(event.0).map(drop)
    }

    /// [`StreamApi::record_event`](super::StreamApi::record_event).
    pub(super) fn record_event(&self, event: EventHandle, stream: StreamHandle) -> Result<()> {
        let (event, stream) = (self.event(event)?, self.stream(stream)?);
        let _bound = self.bind()?;
        event.events.record(|raw| {
            // SAFETY: a HIP event of a live event and a live stream of this device, both held
            // for the call.
            unsafe { self.hip.event_record(raw, stream.raw) }
        })
    }

    /// [`StreamApi::query_event`](super::StreamApi::query_event).
    pub(super) fn query_event(&self, event: EventHandle) -> Result<bool> {
        let event = self.event(event)?;
        let _bound = self.bind()?;
        // SAFETY: a live event, held for the call. `hipErrorNotReady` is `Ok(false)`. The
        // shared HIP event: a completion thread blocked in `synchronize_event` holds only the
        // private one's lock.
        unsafe { self.hip.event_query(event.events.shared()) }
    }

    /// [`StreamApi::synchronize_event`](super::StreamApi::synchronize_event).
    pub(super) fn synchronize_event(&self, event: EventHandle) -> Result<()> {
        let event = self.event(event)?;
        let _bound = self.bind()?;
        // No staging is freed here (see the module docs): hipHostFree waits for every stream
        // of the device, and this runs on the completion threads.
        //
        // SAFETY: a live event, held for the call (a concurrent destroy_event only drops the
        // registry's reference).
        unsafe { self.hip.event_synchronize(event.events.to_synchronize()) }
    }

    /// [`StreamApi::event_elapsed_ms`](super::StreamApi::event_elapsed_ms).
    pub(super) fn event_elapsed_ms(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        let (start, end) = (self.event(start)?, self.event(end)?);
        let _bound = self.bind()?;
        // SAFETY: live events, held for the call. The shared HIP events: the ones recorded
        // first, and whose locks no synchronisation holds (HIP takes the lock of each).
        unsafe {
            self.hip
                .event_elapsed_time(start.events.shared(), end.events.shared())
        }
    }

    /// [`StreamApi::stream_wait_event`](super::StreamApi::stream_wait_event).
    pub(super) fn stream_wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<()> {
        let (stream, event) = (self.stream(stream)?, self.event(event)?);
        let _bound = self.bind()?;
        // SAFETY: a live stream and event, held for the call; HIP captures the event's most
        // recent record at the call, so it may be re-recorded or destroyed afterwards. The
        // shared HIP event, whose lock no synchronisation holds.
        unsafe {
            self.hip
                .stream_wait_event(stream.raw, event.events.shared())
        }
    }
}
