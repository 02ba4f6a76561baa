//! Executing a submission's work on the host: the translation of core commands to memory
//! operations and kernel calls.
//!
//! A [`Run`] walks a submission's commands in order. Small transfers (updates, fills and copies
//! under twice [`SPLIT_BYTES`]) run on the thread that reaches them; dispatches and large transfers
//! become pool [`Job`]s whose last tile continues the walk, so commands separated by a barrier
//! (or simply following each other) never overlap. In inline mode everything runs on the thread
//! that issued the submission. When the walk ends the signal fence is signalled (or failed), and
//! the run, which holds every buffer, executable and command list of the submission, is dropped.
//!
//! A run is a value, not shared: it moves into the pool job that continues it, and the job's
//! last tile takes it out to go on walking, so at any time exactly one thread owns it. A
//! dispatch's job is built in the allocation of an earlier one that is idle ([`KeptJobs`]), so
//! a pooled dispatch allocates nothing once a few have run.

/// The device's pool, and the dispatch jobs it keeps for reuse.
pub(crate) struct Workers {
    pool: Pool,
    dispatches: KeptJobs<Continue<Workgroups>>,
}

impl Workers {
    pub(crate) fn new(pool: Pool) -> Workers {
        Workers {
            pool,
            dispatches: KeptJobs::new(),
        }
    }
}

use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use halcyon::backend::{BufferMemory, OperationTrace, ReadSink, Work};
use halcyon::command_buffer::{Command, Dispatch};
use halcyon::{BufferRef, Error, Fence, Result, StatusCode};

use crate::access::Access;
use crate::kernel::{CpuExecutable, DispatchState, Kernel, PerBinding};
use crate::pool::{Job, KeptJobs, Pool, Tiles};

/// Transfers at least this large are split into pool tiles of this size.
pub(crate) const SPLIT_BYTES: u64 = 256 * 1024;

/// One submission being executed.
pub(crate) struct Run {
    commands: Arc<[Command]>,
    /// Also carries the operation's profile record while its device profiles
    /// ([`OperationTrace::of`]): the run's first command or tile starts its device range, the
    /// end of the walk ends it.
    signal: Fence,
    pool: Option<Arc<Workers>>,
    /// Released right after the signal fence is signalled or failed.
    issued: Option<Issued>,
}

/// A command [`Run::step`] handed to the pool instead of running it: its tiles.
// Moved once per pooled command into its job's allocation; boxing the large variant would
// allocate per dispatch.
#[allow(clippy::large_enum_variant)]
enum Pooled {
    Transfer(Claimed),
    Dispatch(Workgroups),
}

/// Counts the work a device issued that has not reported its outcome yet, and keeps the
/// device's teardown (its reactor, whose shutdown aborts the actions still pending) until none
/// is left.
///
/// Why: an action pending on the reactor may wait for running work (a later operation on the
/// same timeline). Shutting the reactor down fails that action's signal with `Aborted`, and a
/// semaphore's failure covers its earlier values too, so the running work's own signal would
/// report `Aborted` although it completed. Holding the shutdown until issued work has signalled
/// lets issued work report its own outcome; only actions never issued are aborted. The device
/// handle's drop never blocks on it (it may run on a worker, inside the very work it would wait
/// for: a `host_call` holding the last handle).
#[derive(Default)]
pub(crate) struct Inflight {
    state: Mutex<InflightState>,
}

#[derive(Default)]
struct InflightState {
    running: usize,
    teardown: Option<Box<dyn Send>>,
}

impl Inflight {
    /// Counts one piece of issued work until the returned token drops.
    pub(crate) fn begin(self: &Arc<Self>) -> Issued {
        self.lock().running += 1;
        Issued(self.clone())
    }

    /// Drops `teardown` now if no issued work is running, else when the last of it ends.
    pub(crate) fn retire(&self, teardown: Box<dyn Send>) {
        let mut state = self.lock();
        if state.running == 0 {
            drop(state);
            drop(teardown);
        } else {
            state.teardown = Some(teardown);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InflightState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One piece of issued work, counted in [`Inflight`] until dropped.
pub(crate) struct Issued(Arc<Inflight>);

impl Drop for Issued {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.running -= 1;
        let teardown = if state.running == 0 {
            state.teardown.take()
        } else {
            None
        };
        drop(state);
        // Outside the lock: the reactor's shutdown may issue actions, which count themselves.
        drop(teardown);
    }
}

/// A buffer range resolved to host memory, keeping the memory alive.
pub(crate) struct Host {
    _memory: Arc<dyn BufferMemory>,
    pub(crate) ptr: NonNull<u8>,
    pub(crate) len: usize,
}

// SAFETY: a view of buffer memory (itself Send + Sync) kept alive by `_memory`.
unsafe impl Send for Host {}
// SAFETY: as above.
unsafe impl Sync for Host {}

pub(crate) fn host(range: &BufferRef) -> Result<Host> {
    let memory = range.buffer().memory()?;
    let base = memory.host_ptr().ok_or_else(|| {
        Error::new(
            StatusCode::InvalidArgument,
            format!(
                "buffer {} has no host memory, so the CPU device cannot reach it (it belongs to \
                 another device); allocate it on this device, or copy it through a \
                 host-visible buffer",
                range.buffer().id()
            ),
        )
    })?;
    // SAFETY: `BufferRef` ranges always lie within their buffer, whose memory is at least the
    // buffer's size.
    let ptr = unsafe { NonNull::new_unchecked(base.as_ptr().add(range.offset() as usize)) };
    Ok(Host {
        _memory: memory,
        ptr,
        len: range.len() as usize,
    })
}

/// Starts executing `work`, then signals `signal` (or fails it), then drops `issued`.
pub(crate) fn start(work: Work, signal: Fence, pool: Option<Arc<Workers>>, issued: Issued) {
    match work {
        Work::Commands { commands, .. } => {
            let run = Run {
                commands,
                signal,
                pool,
                issued: Some(issued),
            };
            run.walk(0);
        }
        Work::Read { source, sink } => {
            started(&signal, true);
            let result = read(&source, &sink);
            ended(&signal);
            finish(&signal, result);
            drop(issued);
        }
        // The CPU device answers `Reach::Staged` for every other device, so the core never
        // sends it a peer copy; one arriving anyway fails, it is not run.
        Work::PeerCopy { .. } => {
            let error = halcyon::Error::new(
                halcyon::StatusCode::Internal,
                "the CPU device was sent a peer copy, which it does not offer",
            );
            finish(&signal, Err(error));
            drop(issued);
        }
        Work::HostCall(call) => match pool {
            Some(workers) => workers.pool.push(Job::new(HostCall {
                call: Mutex::new(Some((call, issued))),
                signal,
            })),
            None => {
                started(&signal, true);
                let result = catch(call);
                ended(&signal);
                finish(&signal, result);
                drop(issued);
            }
        },
        Work::Collective(collective) => crate::collective::start(collective, signal, issued),
    }
}

/// The device (this host) starts the work of `signal`'s operation; nothing if it is not
/// profiled ([`OperationTrace`]).
///
/// Work run on the thread that issued it started at its issue (one clock read for both); a
/// pool worker's tile reads the clock, unless an earlier tile recorded the start already.
pub(crate) fn started(signal: &Fence, on_issuing_thread: bool) {
    match OperationTrace::of(signal) {
        Some(trace) if on_issuing_thread => trace.device_started_at_issue(),
        Some(trace) => trace.device_starting(),
        None => {}
    }
}

/// The device ends the work of `signal`'s operation now, and [`finish`] signals it next on this
/// thread: one clock read stands for both.
pub(crate) fn ended(signal: &Fence) {
    if let Some(trace) = OperationTrace::of(signal) {
        trace.device_ended_completing();
    }
}

fn catch(call: Call) -> Result<()> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).unwrap_or_else(|_| {
        Err(Error::new(
            StatusCode::Internal,
            "a queue host_call panicked",
        ))
    })
}

pub(crate) fn finish(signal: &Fence, result: Result<()>) {
    let result = result.and_then(|()| signal.signal());
    if let Err(error) = result {
        signal.fail(error);
    }
}

fn read(source: &BufferRef, sink: &ReadSink) -> Result<()> {
    let source = host(source)?;
    // A read that nothing orders against a running writer over its bytes is refused.
    let _access = Access::read(source.ptr.as_ptr(), source.len as u64)
        .map_err(|m| Error::new(StatusCode::FailedPrecondition, m))?;
    // SAFETY: `source` is live buffer memory of `len` bytes; the access table holds no
    // concurrent writer of it (checked just above, registered until `access` drops).
    sink.deliver_copy(unsafe { std::slice::from_raw_parts(source.ptr.as_ptr(), source.len) });
    Ok(())
}

impl Run {
    /// The run's device range starts here, on the thread walking it: the issuing thread
    /// without a pool (see [`started`]).
    fn started(&self) {
        started(&self.signal, self.pool.is_none());
    }

    /// Executes commands from `index` on until one goes to the pool (whose last tile walks on
    /// from the next one) or the end.
    fn walk(self, mut index: usize) {
        // The list is shared, the run moves: iterate over a handle of its own.
        let commands = self.commands.clone();
        while let Some(command) = commands.get(index) {
            index += 1;
            match self.step(command) {
                Ok(None) => {}
                Ok(Some(pooled)) => return self.hand_over(pooled, index),
                Err(error) => return self.end(Err(error)),
            }
        }
        self.end(Ok(()));
    }

    /// Moves the run into a pool job of `pooled`'s tiles, which walks on from command `next`.
    fn hand_over(self, pooled: Pooled, next: usize) {
        let Some(pool) = self.pool.clone() else {
            // `step` pools nothing without a pool.
            return self.end(Err(Error::new(
                StatusCode::Internal,
                "a command was handed to the pool of a device without one",
            )));
        };
        // The tiles start the device range (the first start recorded wins).
        let trace = OperationTrace::of(&self.signal).cloned();
        let run = Mutex::new(Some(self));
        match pooled {
            Pooled::Transfer(tiles) => pool.pool.push(Job::new(Continue::new(
                tiles,
                trace,
                What::Transfer,
                run,
                next,
            ))),
            Pooled::Dispatch(tiles) => {
                let what = What::Dispatch(tiles.name.clone());
                let job = Continue::new(tiles, trace, what, run, next);
                pool.pool.push(pool.dispatches.job(job))
            }
        }
    }

    /// Reports the run's outcome, then stops counting it as issued work.
    fn end(mut self, result: Result<()>) {
        self.started(); // a run of barriers only starts and ends here
        ended(&self.signal);
        finish(&self.signal, result);
        drop(self.issued.take());
    }

    /// Runs one command here (`Ok(None)`) or returns the tiles to hand to the pool.
    fn step(&self, command: &Command) -> Result<Option<Pooled>> {
        match command {
            Command::Barrier => Ok(None),
            Command::Update { target, data } => {
                let update = Copy {
                    source: Source::Bytes(data.clone()),
                    target: host(target)?,
                };
                self.transfer(Box::new(update), target.len())
            }
            Command::Fill {
                target,
                pattern,
                pattern_len,
            } => {
                let fill = Fill {
                    target: host(target)?,
                    pattern: *pattern,
                    pattern_len: *pattern_len as usize,
                };
                self.transfer(Box::new(fill), target.len())
            }
            Command::Copy { source, target } => {
                let copy = Copy {
                    source: Source::Buffer(host(source)?),
                    target: host(target)?,
                };
                self.transfer(Box::new(copy), target.len())
            }
            Command::Gather {
                source,
                target,
                element_size,
                layout,
            } => {
                let gather = Gather {
                    source: host(source)?,
                    target: host(target)?,
                    element: *element_size as usize,
                    layout: layout.clone(),
                };
                self.transfer(Box::new(gather), target.len())
            }
            Command::Dispatch(dispatch) => self.dispatch(dispatch),
        }
    }

    /// Runs a transfer here if small (or inline mode), else returns it split for the pool.
    /// First registers its ranges with the access table ([`Access::transfer`]): one that
    /// nothing orders against a running dispatch or transfer over the same bytes is refused
    /// with `FailedPrecondition` instead of racing it.
    fn transfer(&self, chunks: Box<dyn Transfer>, bytes: u64) -> Result<Option<Pooled>> {
        let (target, source) = chunks.ranges();
        let access = Access::transfer(target, source)
            .map_err(|m| Error::new(StatusCode::FailedPrecondition, m))?;
        let chunks = Claimed { chunks, access };
        if self.pool.is_some() && bytes >= 2 * SPLIT_BYTES {
            return Ok(Some(Pooled::Transfer(chunks)));
        }
        self.started();
        let outcome = (0..chunks.count()).try_for_each(|i| chunks.run(i));
        chunks.finished();
        outcome.map_err(|m| Error::new(StatusCode::Internal, m))?;
        Ok(None)
    }

    fn dispatch(&self, dispatch: &Dispatch<BufferRef>) -> Result<Option<Pooled>> {
        let total: u64 = dispatch.workgroups.iter().map(|&n| n as u64).product();
        if total == 0 {
            return Ok(None);
        }
        let executable = dispatch
            .executable
            .backend()
            .as_any()
            .downcast_ref::<CpuExecutable>()
            .ok_or_else(|| {
                Error::new(
                    StatusCode::InvalidArgument,
                    format!(
                        "{} (format '{}') was not loaded by a CPU device",
                        dispatch.executable,
                        dispatch.executable.format()
                    ),
                )
            })?;
        let index = dispatch.entry_point as usize;
        let entry = &executable.entry_points[index];
        // A loop, not `collect::<Result<_>>()`: a fallible iterator has no exact size, and
        // filling a `SmallVec` from one cost several times more per binding.
        let (mut hosts, mut ptrs, mut lengths) =
            (PerBinding::new(), PerBinding::new(), PerBinding::new());
        for binding in dispatch.bindings.iter() {
            let host = host(binding)?;
            ptrs.push(host.ptr.as_ptr());
            lengths.push(host.len as u64);
            hosts.push(host);
        }
        let state = DispatchState::new(
            dispatch.workgroups,
            entry.workgroup_size,
            dispatch.constants.clone(),
            ptrs,
            lengths,
        );
        if let Some(workers) = &self.pool {
            // A few tiles per worker balances uneven workgroups without many claims.
            let per_tile = total.div_ceil(workers.pool.workers() as u64 * 4).max(1);
            return Ok(Some(Pooled::Dispatch(Workgroups {
                kernel: executable.kernels[index].clone(),
                state,
                _hosts: hosts,
                total,
                per_tile,
                name: (dispatch.executable.entry_name(dispatch.entry_point))
                    .unwrap_or_else(|| Arc::from(entry.name.as_str())),
            })));
        }
        // Here, in one go: the kernel and its name are borrowed, nothing is shared.
        self.started();
        let kernel = &*executable.kernels[index];
        let outcome = run_workgroups(kernel, &state, 0..total, &entry.name);
        state.access.release();
        drop(hosts);
        outcome.map_err(|m| {
            Error::new(
                StatusCode::KernelFailed,
                format!("dispatch of '{}' failed: {m}", entry.name),
            )
        })?;
        Ok(None)
    }
}

/// How many [`SPLIT_BYTES`] chunks cover `len` bytes (at least one, so empty ranges still run).
fn chunk_count(len: usize) -> u32 {
    (len as u64).div_ceil(SPLIT_BYTES).max(1) as u32
}

/// The byte range of chunk `index` of `len` bytes, or `None` if it is empty.
fn chunk_range(index: u32, len: usize) -> Option<std::ops::Range<usize>> {
    let start = index as usize * SPLIT_BYTES as usize;
    let end = (start + SPLIT_BYTES as usize).min(len);
    (start < end).then_some(start..end)
}

/// Work split into independent chunks.
trait Chunked: Send + Sync + 'static {
    fn count(&self) -> u32;
    fn run(&self, index: u32) -> std::result::Result<(), String>;
    /// Called once every chunk has run (or failed), before anything after the work runs.
    fn finished(&self) {}
}

/// A transfer's chunks, and the host ranges it writes and reads (for [`Access::transfer`]).
trait Transfer: Chunked {
    /// The target (written) and the source if it is buffer memory (read).
    #[allow(clippy::type_complexity)]
    fn ranges(&self) -> ((*mut u8, u64), Option<(*const u8, u64)>);
}

/// A transfer with its access-table registration, released once every chunk has run.
struct Claimed {
    chunks: Box<dyn Transfer>,
    access: Access,
}

impl Chunked for Claimed {
    fn count(&self) -> u32 {
        self.chunks.count()
    }
    fn run(&self, index: u32) -> std::result::Result<(), String> {
        self.chunks.run(index)
    }
    fn finished(&self) {
        self.chunks.finished();
        self.access.release();
    }
}

/// A pool job that continues its run when its last tile is done.
/// A pooled command's tiles, and the run that its last tile walks on (from command `next`).
///
/// What the tiles use (buffers, the kernel, the profile record) is taken out and dropped by
/// [`Tiles::done`], so a job kept for reuse ([`KeptJobs`]) holds nothing of its submission.
struct Continue<C> {
    /// Read by the tiles while they run, taken by `done` once they all returned: see the
    /// `Sync` impl.
    payload: UnsafeCell<Option<Payload<C>>>,
    /// Taken once, by the thread that finishes the last tile.
    run: Mutex<Option<Run>>,
    next: usize,
}

struct Payload<C> {
    tiles: C,
    /// The operation's profile record while its device profiles: tiles start its device range.
    trace: Option<OperationTrace>,
    what: What,
}

// SAFETY: the payload is only read (`&`) by `Tiles::run`, from any number of workers, and taken
// (`&mut`) only by `Tiles::done`, which `Job::work` calls once, on the thread whose decrement of
// the job's remaining tiles reached zero (acquire-release), so after every `run` returned and
// before none can start (every tile index was claimed). `C` is `Send + Sync` (`Chunked`).
unsafe impl<C: Chunked> Sync for Continue<C> {}

impl<C: Chunked> Continue<C> {
    fn new(
        tiles: C,
        trace: Option<OperationTrace>,
        what: What,
        run: Mutex<Option<Run>>,
        next: usize,
    ) -> Self {
        Continue {
            payload: UnsafeCell::new(Some(Payload { tiles, trace, what })),
            run,
            next,
        }
    }

    /// The payload, while tiles run.
    fn payload(&self) -> Option<&Payload<C>> {
        // SAFETY: see the `Sync` impl: shared reads only until `done` takes it.
        unsafe { (*self.payload.get()).as_ref() }
    }
}

/// What a pooled command is, for its failure.
enum What {
    Transfer,
    /// A dispatch of this entry point.
    Dispatch(Arc<str>),
}

impl<C: Chunked> Tiles for Continue<C> {
    fn count(&self) -> u32 {
        self.payload().map_or(0, |p| p.tiles.count())
    }
    fn run(&self, index: u32) -> std::result::Result<(), String> {
        let Some(payload) = self.payload() else {
            return Err("a tile ran after its job was done".into());
        };
        // The first tile of the run's first pooled command starts its device range (the first
        // start recorded wins).
        if let Some(trace) = &payload.trace {
            trace.device_starting();
        }
        payload.tiles.run(index)
    }
    fn done(&self, failure: Option<String>) {
        // SAFETY: see the `Sync` impl: every tile returned, and `done` runs once.
        let Some(payload) = (unsafe { (*self.payload.get()).take() }) else {
            return;
        };
        payload.tiles.finished();
        let what = payload.what;
        drop(payload.trace);
        drop(payload.tiles); // the buffers and kernel, before the walk goes on
        let run = self.run.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(run) = run else {
            return; // `done` is called once
        };
        match failure {
            None => run.walk(self.next),
            // A kernel's failure is its own outcome; a transfer's can only be a bug.
            Some(message) => run.end(Err(match &what {
                What::Transfer => {
                    Error::new(StatusCode::Internal, format!("transfer failed: {message}"))
                }
                What::Dispatch(name) => Error::new(
                    StatusCode::KernelFailed,
                    format!("dispatch of '{name}' failed: {message}"),
                ),
            })),
        }
    }
}

/// A queue `host_call` closure.
type Call = Box<dyn FnOnce() -> Result<()> + Send>;

struct HostCall {
    call: Mutex<Option<(Call, Issued)>>,
    signal: Fence,
}

impl Tiles for HostCall {
    fn count(&self) -> u32 {
        1
    }
    fn run(&self, _index: u32) -> std::result::Result<(), String> {
        Ok(())
    }
    fn done(&self, _failure: Option<String>) {
        let call = self.call.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((call, issued)) = call {
            // The call may drop the last handle of its device: the device's teardown then
            // waits for `issued`, released only once the call's outcome is reported.
            started(&self.signal, false);
            let result = catch(call);
            ended(&self.signal);
            finish(&self.signal, result);
            drop(issued);
        }
    }
}

struct Workgroups {
    kernel: Arc<dyn Kernel>,
    state: DispatchState,
    _hosts: PerBinding<Host>,
    total: u64,
    per_tile: u64,
    name: Arc<str>,
}

impl Chunked for Workgroups {
    fn count(&self) -> u32 {
        u32::try_from(self.total.div_ceil(self.per_tile)).unwrap_or(u32::MAX)
    }

    fn run(&self, index: u32) -> std::result::Result<(), String> {
        let start = index as u64 * self.per_tile;
        let end = (start + self.per_tile).min(self.total);
        run_workgroups(&*self.kernel, &self.state, start..end, &self.name)
    }

    fn finished(&self) {
        // The next dispatch may use this one's memory differently: unregister now, not when
        // the job is dropped, which may be later.
        self.state.access.release();
    }
}

/// Runs the workgroups of `state`'s dispatch whose linear indices are in `linear`, stopping at
/// the first failure, whose message names the kernel `name` and the workgroup.
fn run_workgroups(
    kernel: &dyn Kernel,
    state: &DispatchState,
    linear: std::ops::Range<u64>,
    name: &str,
) -> std::result::Result<(), String> {
    let [x, y, _] = state.workgroup_count.map(u64::from);
    for linear in linear {
        let id = [
            (linear % x) as u32,
            ((linear / x) % y) as u32,
            (linear / (x * y)) as u32,
        ];
        kernel.run(state, id).map_err(|m| {
            if m.contains(name) {
                m
            } else {
                format!("kernel '{name}' workgroup {id:?}: {m}")
            }
        })?;
    }
    Ok(())
}

struct Fill {
    target: Host,
    pattern: u32,
    pattern_len: usize,
}

impl Chunked for Fill {
    fn count(&self) -> u32 {
        chunk_count(self.target.len)
    }

    fn run(&self, index: u32) -> std::result::Result<(), String> {
        let Some(range) = chunk_range(index, self.target.len) else {
            return Ok(());
        };
        // SAFETY: `range` lies within the target range (live memory); chunks are disjoint, and
        // semaphores order the fill against other accesses.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(self.target.ptr.as_ptr().add(range.start), range.len())
        };
        let pattern = self.pattern.to_le_bytes();
        match self.pattern_len {
            1 => bytes.fill(pattern[0]),
            n => {
                // Chunk starts are multiples of SPLIT_BYTES, and the range offset and length are
                // multiples of the pattern length (checked at record time), so whole patterns fit.
                for chunk in bytes.chunks_exact_mut(n) {
                    chunk.copy_from_slice(&pattern[..n]);
                }
            }
        }
        Ok(())
    }
}

impl Transfer for Fill {
    fn ranges(&self) -> ((*mut u8, u64), Option<(*const u8, u64)>) {
        ((self.target.ptr.as_ptr(), self.target.len as u64), None)
    }
}

/// Where a copy reads from: a buffer range, or bytes captured by an update or queue write.
enum Source {
    Buffer(Host),
    Bytes(Arc<[u8]>),
}

impl Source {
    fn ptr(&self) -> *const u8 {
        match self {
            Source::Buffer(host) => host.ptr.as_ptr(),
            Source::Bytes(bytes) => bytes.as_ptr(),
        }
    }
}

impl Transfer for Copy {
    fn ranges(&self) -> ((*mut u8, u64), Option<(*const u8, u64)>) {
        let source = match &self.source {
            Source::Buffer(host) => Some((host.ptr.as_ptr().cast_const(), host.len as u64)),
            Source::Bytes(_) => None,
        };
        ((self.target.ptr.as_ptr(), self.target.len as u64), source)
    }
}

/// Packs the elements of a strided view (`layout`, over `source`) into `target`, in
/// row-major order; each chunk of the target is a run of elements, found from its first.
struct Gather {
    source: Host,
    target: Host,
    element: usize,
    layout: Arc<halcyon::view::Layout>,
}

impl Chunked for Gather {
    fn count(&self) -> u32 {
        chunk_count(self.target.len)
    }

    fn run(&self, index: u32) -> std::result::Result<(), String> {
        let Some(range) = chunk_range(index, self.target.len) else {
            return Ok(());
        };
        let size = self.element;
        // Chunks are a multiple of every element size (SPLIT_BYTES is).
        let (first, count) = (range.start / size, range.len() / size);
        let offsets = self.layout.offsets_from(first as u64).take(count);
        for (i, at) in (first..).zip(offsets) {
            let at = at as usize * size;
            if at + size > self.source.len {
                return Err(format!(
                    "a gather's element at byte {at} lies outside its {} source bytes",
                    self.source.len
                ));
            }
            // SAFETY: `at + size` lies within the source (checked above) and `i * size + size`
            // within the target (`i` < the target's elements); source and target are live
            // buffer memory, disjoint (`Queue::copy_view` refuses overlapping views), and
            // chunks write disjoint parts of the target.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.source.ptr.as_ptr().add(at),
                    self.target.ptr.as_ptr().add(i * size),
                    size,
                )
            };
        }
        Ok(())
    }
}

impl Transfer for Gather {
    fn ranges(&self) -> ((*mut u8, u64), Option<(*const u8, u64)>) {
        let source = (
            self.source.ptr.as_ptr().cast_const(),
            self.source.len as u64,
        );
        (
            (self.target.ptr.as_ptr(), self.target.len as u64),
            Some(source),
        )
    }
}

/// Copies a buffer range or captured bytes into a target range of the same length.
struct Copy {
    source: Source,
    target: Host,
}

impl Chunked for Copy {
    fn count(&self) -> u32 {
        chunk_count(self.target.len)
    }

    fn run(&self, index: u32) -> std::result::Result<(), String> {
        let Some(range) = chunk_range(index, self.target.len) else {
            return Ok(());
        };
        let (start, len) = (range.start, range.len());
        // SAFETY: source and target are live memory of the same length (checked when recorded;
        // `source` keeps the buffer memory or captured bytes alive) and chunks are disjoint.
        // Recording rejects overlapping direct ranges, but binding-table slots are only known
        // at submit, so use `copy` (memmove), which is defined for overlap too.
        unsafe {
            std::ptr::copy(
                self.source.ptr().add(start),
                self.target.ptr.as_ptr().add(start),
                len,
            )
        };
        Ok(())
    }
}
