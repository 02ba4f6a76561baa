//! # halcyon-host-stream
//!
//! [`HostStreamApi`]: a real [`StreamApi`](halcyon_stream::StreamApi) on host threads, so the
//! whole stream layer ([`halcyon_stream`]) runs and is tested without a GPU. For tests only:
//! this crate is not published and is part of no release API (its fault injection,
//! [`HostStreamApi::panic_in_next_record`] and the like, exists for the stream layer's tests).
//!
//! | stream API            | host implementation                                           |
//! |-----------------------|---------------------------------------------------------------|
//! | stream                | a thread with an in-order operation queue                     |
//! | event                 | record/completion generations and a condition variable; without `DISABLE_TIMING`, the `Instant` its newest record completed |
//! | event elapsed time    | the difference of two such `Instant`s, in `f32` milliseconds    |
//! | stream waits event    | an operation blocking that stream's thread on the event       |
//! | host function         | an operation calling the closure on the stream's thread        |
//! | device memory         | zeroed, 256-byte aligned heap allocations; pointer = address (every placement, `Pinned` included, is host memory) |
//! | copies and fills      | operations doing `memmove` / pattern fills                     |
//! | module / function     | a [`HostModule`] of named Rust kernels / one of its kernels    |
//! | kernel launch         | an operation calling the kernel once per block of the grid     |
//! | status word           | the word's host address, as an `AtomicU32` ([`LaunchArgs::status_word`]), for kernels added with [`HostModule::kernel_with_status_word`] |
//! | stream-ordered alloc  | allocate at once; free when the stream reaches the free       |
//! | graph capture         | a capturing stream collects its memory and kernel operations  |
//! | graph launch          | enqueues the captured operations again, in order              |
//! | sticky device error   | [`HostStreamApi::inject_fault`]                                |
//!
//! Every device address is checked against the live allocations when an operation is enqueued,
//! so a bad pointer is an error, never a wild host access. Waits block on condition variables;
//! nothing spins.
//!
//! Two test hooks make device states reproducible: [`HostStreamApi::hold`] keeps every stream
//! from starting operations until the hold is dropped (work stays in flight), and
//! [`HostStreamApi::inject_fault`] is a sticky device error: afterwards every call that touches
//! the device fails with it, no operation runs, and enqueued host functions never run, exactly
//! the situation the stream layer's fault probe exists for.
//!
//! The primitives here are `std`'s (this is the emulated device, not the concurrency core the
//! loom models check).
//!
//! A device over it runs the whole stream layer ([`halcyon_stream::create_device`]):
//!
//! ```
//! use halcyon_host_stream::{HostModule, HostStreamApi};
//! use halcyon_stream::{create_device, StreamDeviceOptions};
//! use halcyon::{BufferParams, EntryPoint};
//!
//! # fn main() -> halcyon::Result<()> {
//! futures::executor::block_on(async {
//!     let device = create_device(HostStreamApi::new(), StreamDeviceOptions::default())?;
//!     let queue = device.queue(0)?;
//!     let module = HostModule::new().kernel(
//!         EntryPoint { name: "add_one".into(), workgroup_size: [64, 1, 1], binding_count: 1, constant_count: 0 },
//!         |args| {
//!             // SAFETY: the only binding; blocks run one after another.
//!             let data = unsafe { args.binding_mut::<u32>(0) };
//!             let start = args.block_id()[0] as usize * 64;
//!             data.iter_mut().skip(start).take(64).for_each(|x| *x += 1);
//!             Ok(())
//!         },
//!     );
//!     let add_one = device.load_executable(&module.spec())?.kernel("add_one")?;
//!     let buffer = device.allocator().allocate(256 * 4, BufferParams::DEVICE)?;
//!
//!     let timeline = queue.timeline()?;
//!     queue.fill(timeline.next(), 41u32, &buffer.whole()).await?;
//!     queue.dispatch(timeline.next(), &add_one.launch([4, 1, 1]).binding(buffer.whole())).await?;
//!     let words = queue.read::<u32>(timeline.next(), &buffer.whole()).await?;
//!     assert!(words.iter().all(|&x| x == 42));
//!     Ok(())
//! })
//! # }
//! ```

mod control;
mod event;
mod graph;
mod memory;
mod module;
mod table;
mod worker;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use halcyon::{Error, Result, StatusCode};
use halcyon_stream::api::{DevicePtr, EventHandle, StreamHandle};

use self::control::Control;
use self::event::HostEvent;
use self::memory::Registry;
use self::worker::{Op, Stream};

pub use self::module::{HostKernel, HostModule, LaunchArgs, FORMAT_HOST_KERNELS};

/// The driver id of devices over the host stream API (`host-stream://0`).
pub const DRIVER_ID: &str = "host-stream";

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counters of what the host API did.
#[derive(Default)]
pub(crate) struct Counters {
    executed: AtomicU64,
    skipped: AtomicU64,
    discarded: AtomicU64,
    host_funcs: AtomicU64,
    records: AtomicU64,
    timed_records: AtomicU64,
    stream_waits: AtomicU64,
    launches: AtomicU64,
    graph_launches: AtomicU64,
}

impl Counters {
    fn bump(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A snapshot of what a [`HostStreamApi`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostApiStats {
    /// Memory and kernel operations run.
    pub executed: u64,
    /// Memory and kernel operations skipped because earlier work on their stream failed.
    pub skipped: u64,
    /// Operations dropped unrun because the device faulted (host functions included).
    pub discarded: u64,
    /// Host functions run.
    pub host_funcs: u64,
    /// Event records enqueued.
    pub records: u64,
    /// Of those, records of events created without `EventFlags::DISABLE_TIMING` (timing
    /// events).
    pub timed_records: u64,
    /// Stream-waits-event enqueued.
    pub stream_waits: u64,
    /// Kernel launches enqueued.
    pub launches: u64,
    /// Graph launches enqueued.
    pub graph_launches: u64,
    /// Streams alive (created and not destroyed).
    pub streams: u64,
    /// Events alive.
    pub events: u64,
    /// Allocations alive.
    pub allocations: u64,
    /// Modules loaded and not unloaded.
    pub modules: u64,
}

/// Function id → (module id, module, kernel index).
type Functions = HashMap<u64, (u64, Arc<HostModule>, usize)>;
/// Stream id → (stream, its thread until joined).
type Streams = HashMap<u64, (Arc<Stream>, Option<std::thread::JoinHandle<()>>)>;

/// What the stream threads share with the API.
pub(crate) struct Shared {
    next_id: AtomicU64,
    streams: Mutex<Streams>,
    events: Mutex<HashMap<u64, Arc<HostEvent>>>,
    modules: Mutex<HashMap<u64, Arc<HostModule>>>,
    functions: Mutex<Functions>,
    /// Streams being captured → the operations captured so far.
    captures: Mutex<HashMap<u64, graph::Graph>>,
    /// Instantiated graphs → their operations.
    graphs: Mutex<HashMap<u64, Arc<graph::Graph>>>,
    memory: Registry,
    pub(crate) control: Control,
    pub(crate) closing: AtomicBool,
    /// Set by [`HostStreamApi::refuse_pinned_memory`].
    pub(crate) refuse_pinned: AtomicBool,
    /// Set by [`HostStreamApi::invalidate_next_capture`]; taken by the next `end_capture`.
    pub(crate) invalidate_capture: AtomicBool,
    /// Set by [`HostStreamApi::fail_next_read_after_enqueue`]; taken by the next
    /// device-to-host copy.
    pub(crate) fail_read_after_enqueue: AtomicBool,
    /// Set by [`HostStreamApi::panic_in_next_record`]; taken by the next `record_event`.
    pub(crate) panic_in_record: AtomicBool,
    /// Set by [`HostStreamApi::delay_frees`], in microseconds.
    pub(crate) free_delay_us: AtomicU64,
    /// Set by [`HostStreamApi::modules_take_memory`], in bytes.
    pub(crate) module_bytes: AtomicU64,
    /// The memory each loaded module takes (with [`HostStreamApi::modules_take_memory`]).
    pub(crate) module_memory: Mutex<HashMap<u64, DevicePtr>>,
    pub(crate) stats: Counters,
}

impl Shared {
    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn stream(&self, handle: StreamHandle) -> Result<Arc<Stream>> {
        lock(&self.streams)
            .get(&handle.0)
            .map(|(s, _)| s.clone())
            .ok_or_else(|| invalid(format!("{handle:?} is not a live stream")))
    }

    fn event(&self, handle: EventHandle) -> Result<Arc<HostEvent>> {
        lock(&self.events)
            .get(&handle.0)
            .cloned()
            .ok_or_else(|| invalid(format!("{handle:?} is not a live event")))
    }

    /// Wakes every thread blocked on an event or a stream to re-check the fault and shutdown.
    fn wake_all(&self) {
        let events: Vec<_> = lock(&self.events).values().cloned().collect();
        events.iter().for_each(|e| e.wake_all());
        let streams: Vec<_> = lock(&self.streams)
            .values()
            .map(|(s, _)| s.clone())
            .collect();
        streams.iter().for_each(|s| s.wake_all());
    }
}

fn invalid(message: String) -> Error {
    Error::new(
        StatusCode::InvalidArgument,
        format!("host stream API: {message}"),
    )
}

/// Ends the stream threads when the last [`HostStreamApi`] clone goes.
struct Owner {
    shared: Arc<Shared>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Release);
        self.shared.control.close();
        self.shared.wake_all();
        let threads: Vec<_> = lock(&self.shared.streams)
            .drain()
            .filter_map(|(_, (_, thread))| thread)
            .collect();
        for thread in threads {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

/// The host stream API (see the [module docs](self)). Clones share one emulated device; its
/// threads end when the last clone is dropped.
#[derive(Clone)]
pub struct HostStreamApi {
    owner: Arc<Owner>,
}

/// Keeps every stream of a [`HostStreamApi`] from starting operations while it lives.
#[must_use = "the hold ends when this guard is dropped"]
pub struct StreamHold {
    shared: Arc<Shared>,
}

impl Drop for StreamHold {
    fn drop(&mut self) {
        self.shared.control.release();
    }
}

impl Default for HostStreamApi {
    fn default() -> Self {
        Self::new()
    }
}

/// A host pointer moved into an operation (see the `unsafe` copy methods' contracts).
struct HostPtr(*mut u8);

// SAFETY: the caller of the unsafe copy method guarantees the memory stays valid and otherwise
// untouched until the stream ran the copy; the pointer is only used by that copy.
unsafe impl Send for HostPtr {}
// SAFETY: only the pointer value is shared; the copy that uses it runs in stream order (a
// captured copy once per graph launch), under the same contract.
unsafe impl Sync for HostPtr {}

impl HostPtr {
    fn get(&self) -> *mut u8 {
        self.0
    }
}

impl HostStreamApi {
    /// A new emulated device with no streams yet.
    pub fn new() -> Self {
        HostStreamApi {
            owner: Arc::new(Owner {
                shared: Arc::new(Shared {
                    next_id: AtomicU64::new(1),
                    streams: Mutex::default(),
                    events: Mutex::default(),
                    modules: Mutex::default(),
                    functions: Mutex::default(),
                    captures: Mutex::default(),
                    graphs: Mutex::default(),
                    memory: Registry::default(),
                    control: Control::default(),
                    closing: AtomicBool::new(false),
                    refuse_pinned: AtomicBool::new(false),
                    fail_read_after_enqueue: AtomicBool::new(false),
                    panic_in_record: AtomicBool::new(false),
                    invalidate_capture: AtomicBool::new(false),
                    free_delay_us: AtomicU64::new(0),
                    module_bytes: AtomicU64::new(0),
                    module_memory: Mutex::default(),
                    stats: Counters::default(),
                }),
            }),
        }
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.owner.shared
    }

    /// Injects a sticky device fault caused by `cause`: stops every stream before its next
    /// operation, waits for the running operations to finish (all but the caller's own, if a
    /// kernel or host function calls this), then makes every later call that touches the device
    /// fail with an `Aborted` error naming `cause`; enqueued host functions never run. The first
    /// fault stays; later calls change nothing.
    pub fn inject_fault(&self, cause: &str) {
        let fault = Error::new(
            StatusCode::Aborted,
            format!(
                "host stream device fault: {cause}; after a device fault every call fails and \
                 enqueued host functions never run (a sticky CUDA/HIP error): recreate the device"
            ),
        );
        if self.shared().control.inject_fault(fault) {
            self.shared().wake_all();
        }
    }

    /// The published fault, if the device faulted.
    pub fn fault(&self) -> Option<Error> {
        self.shared().control.fault()
    }

    /// Holds every stream before its next operation until the returned guard is dropped
    /// (operations already running finish). Tests use it to keep work in flight.
    pub fn hold(&self) -> StreamHold {
        self.shared().control.hold();
        StreamHold {
            shared: self.shared().clone(),
        }
    }

    /// From now on answers `Unimplemented` to [`MemoryPlacement::Pinned`] allocations, like an
    /// API that cannot map host memory into the device, so tests reach the stream layer's
    /// paths without pinned memory.
    ///
    /// [`MemoryPlacement::Pinned`]: halcyon_stream::MemoryPlacement::Pinned
    pub fn refuse_pinned_memory(&self) {
        self.shared().refuse_pinned.store(true, Ordering::Relaxed);
    }

    /// Makes the next graph capture fail: its `end_capture` answers `Aborted` and makes no
    /// graph, and the operations enqueued while it captured never run, as when CUDA
    /// invalidates a capture (an operation it cannot capture, a call that synchronises the
    /// context meanwhile).
    pub fn invalidate_next_capture(&self) {
        self.shared()
            .invalidate_capture
            .store(true, Ordering::Relaxed);
    }

    /// Makes the next device-to-host copy enqueue its copy and then fail, as a copy staged in
    /// chunks does when a later chunk cannot be enqueued: the chunks already enqueued still run
    /// and write the destination, so the caller must keep it alive until the stream reached
    /// them although the call failed.
    pub fn fail_next_read_after_enqueue(&self) {
        self.shared()
            .fail_read_after_enqueue
            .store(true, Ordering::Relaxed);
    }

    /// Makes the next `record_event` panic, as a backend with a bug might, after the
    /// operations before it were enqueued: the stream layer must keep what they use alive.
    pub fn panic_in_next_record(&self) {
        self.shared().panic_in_record.store(true, Ordering::Relaxed);
    }

    /// From now on makes every `free` take `delay` before it frees (a GPU free waits for the
    /// device), so tests can see frees that are still pending.
    pub fn delay_frees(&self, delay: std::time::Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared().free_delay_us.store(micros, Ordering::Relaxed);
    }

    /// From now on makes every module loaded take `bytes` of device memory until it is
    /// unloaded, as a GPU's code and globals do, so loading can run out of memory too.
    pub fn modules_take_memory(&self, bytes: u64) {
        self.shared().module_bytes.store(bytes, Ordering::Relaxed);
    }

    /// From now on refuses (`ResourceExhausted`) an allocation that would take the bytes of
    /// live allocations above `bytes`, like a device whose memory is full.
    pub fn limit_memory(&self, bytes: u64) {
        self.shared().memory.set_limit(bytes);
    }

    /// What the API did so far.
    pub fn stats(&self) -> HostApiStats {
        let shared = self.shared();
        let stat = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let s = &shared.stats;
        HostApiStats {
            executed: stat(&s.executed),
            skipped: stat(&s.skipped),
            discarded: stat(&s.discarded),
            host_funcs: stat(&s.host_funcs),
            records: stat(&s.records),
            timed_records: stat(&s.timed_records),
            stream_waits: stat(&s.stream_waits),
            launches: stat(&s.launches),
            graph_launches: stat(&s.graph_launches),
            streams: lock(&shared.streams).len() as u64,
            events: lock(&shared.events).len() as u64,
            allocations: shared.memory.len() as u64,
            modules: lock(&shared.modules).len() as u64,
        }
    }

    /// Enqueues a memory or kernel operation, or adds it to the graph `stream` is capturing.
    fn exec(&self, stream: StreamHandle, exec: worker::Exec) -> Result<()> {
        let shared = self.shared();
        let target = shared.stream(stream)?;
        if let Some(captured) = lock(&shared.captures).get_mut(&stream.0) {
            captured.push(exec);
            return Ok(());
        }
        target.push(|| Op::Exec(exec))
    }

    /// [`HostStreamApi::exec`] for a launch of `function` with `config`, which a graph it is
    /// captured into remembers as a kernel launch.
    fn exec_kernel(
        &self,
        stream: StreamHandle,
        exec: worker::Exec,
        function: halcyon_stream::FunctionHandle,
        config: halcyon_stream::LaunchConfig,
    ) -> Result<()> {
        let shared = self.shared();
        let target = shared.stream(stream)?;
        if let Some(captured) = lock(&shared.captures).get_mut(&stream.0) {
            captured.push_kernel(exec, function, config);
            return Ok(());
        }
        target.push(|| Op::Exec(exec))
    }

    /// `InvalidArgument` if `stream` is capturing: only memory and kernel operations can be
    /// captured here (events, waits and host functions cannot).
    fn not_capturing(&self, stream: StreamHandle, what: &str) -> Result<()> {
        if lock(&self.shared().captures).contains_key(&stream.0) {
            return Err(invalid(format!(
                "{what} on {stream:?} while it captures a graph: only memory operations and \
                 kernel launches can be captured"
            )));
        }
        Ok(())
    }
}
