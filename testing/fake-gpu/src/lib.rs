#![deny(unsafe_op_in_unsafe_fn)]
//! A fake GPU driver: a shared library that runs the CUDA driver API (`cu*`, as
//! `libcuda.so.1`) and the HIP runtime API (`hip*`, loaded by path) on host threads and checks
//! that its caller keeps each API's contract, so halcyon-cuda's and halcyon-hip's translation
//! tables (`halcyon_cuda::CudaApi`, `halcyon_hip::HipStreamApi`) and everything above them run
//! in CI on machines without a GPU.
//!
//! Both APIs share one model (streams, events, memory, kernels); HIP is a translation of CUDA,
//! and its error numbers are CUDA's for every error the fake returns. Where HIP's rules differ
//! (no context, a current device per thread, an event lock held through
//! `hipEventSynchronize`, `hipMemcpyAsync` blocking on pageable memory, frees that synchronise,
//! stream callbacks, AMDGPU code objects), the `hip` module's exports follow and check HIP's:
//! see `src/hip/`. The rest of these docs describe the CUDA side (`src/cuda/`).
//!
//! It is a test instrument, not a CUDA or HIP implementation. What it is for:
//!
//! * **Every call halcyon-cuda makes runs.** Streams are worker threads executing their
//!   operations in order; events are record generations; `cuStreamWaitEvent` makes a worker
//!   wait; host functions run on the worker; memory is host memory behind an allocation table;
//!   stream capture records operations into graphs that launch again. PTX modules are parsed
//!   for their entry points and parameters (`.entry`, `.param`); kernels whose name and
//!   parameters match one of halcyon's standard kernels (`add_one_u32`, `saxpy_f32`, `fail`,
//!   `empty`, and `trap`, which faults the device) run natively. An sm_90 cubin is read for
//!   its kernels' names (`.text.<kernel>` sections), each taking the parameters of the
//!   standard kernel of that name. A fatbin, or launching any other kernel, is
//!   `CUDA_ERROR_NOT_SUPPORTED`.
//! * **The contract is checked where CUDA would not say.** On a real driver a broken rule is
//!   undefined behaviour that may pass by luck; here each one is a *violation*:
//!   - a call on a thread with no current context, or with the primary context released;
//!   - work enqueued on a stream of another device than the current context's, and a call
//!     that combines two devices' handles (a function or an event or a pool with another
//!     device's stream) or reaches another device's memory without peer access enabled
//!     (`cuCtxEnablePeerAccess`; managed and pinned host memory are reachable from every
//!     device). Every pair of devices can access each other (`cuDeviceCanAccessPeer`) unless
//!     a test turns it off ([`client::Fake::set_peer_access`]); `cuMemcpyPeerAsync` checks
//!     each range against its own context's device;
//!   - any call from inside a host function (CUDA forbids it);
//!   - a destroyed or unknown stream, event, module, function, graph or pool handle, or the
//!     legacy default stream (halcyon only uses its own non-blocking streams; the one exception
//!     is `hipFreeAsync` of pool memory, which HIP allows on the null stream and the HIP backend
//!     uses to free such memory outside stream order, a free the fake makes at once);
//!   - device memory a queued kernel, copy or fill reaches that was freed before the device got
//!     to it (memory must outlive the work using it), a double free;
//!   - resources still alive when the last primary-context reference goes (a leak), unless the
//!     device faulted in that context (after a fault, CUDA drops host functions with what they
//!     hold, by design).
//!
//!   A violation is printed to stderr with a backtrace and aborts the process, unless
//!   `HALCYON_FAKE_GPU_RECORD_ONLY` is set or [`client::Fake::record_only`] was called, in which
//!   case it is only recorded ([`client::Fake::violations`]).
//! * **What it does not model** (each answers `CUDA_ERROR_NOT_SUPPORTED`, so a caller that
//!   starts needing it fails loudly): capture modes other than relaxed, memory allocation and
//!   free nodes in a capture, joining a capture by waiting on a captured event, fatbin images,
//!   kernels other than the ones above. Memory freed is quarantined (64 MiB)
//!   before its address can be reused, so late work finds it freed rather than reallocated.
//! * **Faults.** [`client::Fake::fault_next_kernel`] (or a `trap` kernel) makes a kernel fault
//!   the device: from then on every call in the context returns that error (a *sticky* error,
//!   as in CUDA), queued work and host functions are dropped, and event waits return the
//!   error, until the primary context is released by everyone.
//!
//! Loading: the library's `SONAME` is `libcuda.so.1`. [`client::Fake::load`] opens it by path
//! before anything else in the process opens libcuda; later `dlopen("libcuda.so.1")` calls (the
//! probe's, and cudarc's, which reaches that name on a machine without a `libcuda.so`) match
//! the loaded library by `SONAME` and get it. [`client::Fake::load`] checks that cudarc's
//! library is the fake (a real `libcuda.so` on the loader path would come first).
//!
//! ```
//! // In a test of a crate that depends on halcyon-fake-gpu (cargo builds the library next to
//! // the test executables); anywhere else `load` says why not.
//! match halcyon_fake_gpu::client::Fake::load() {
//!     Ok(fake) => println!("the fake driver stands in for libcuda: {:?}", fake.stats()),
//!     Err(why) => println!("no fake driver here: {why}"),
//! }
//! ```
//!
//! The devices: two by default (`HALCYON_FAKE_GPU_DEVICES`, 1 to 8), so that a caller's
//! per-device bookkeeping is checked even where it uses only `cuda://0`: which context is
//! current on a thread, which device owns a handle or an allocation. Each has its own primary
//! context, whose release destroys (and checks for leaks) only what was made in it, and its
//! own sticky error. Each is compute capability 9.0 with 1 GiB of device memory, memory
//! pools and concurrent managed access; the driver version is 13.0 (so halcyon takes its
//! CUDA 12.4+ paths, such as `cuFuncGetParamInfo`).
//!
//! **NCCL.** The library also exports NCCL's API (`ncclCommInitRank`, `ncclAllReduce`,
//! `ncclSend`, `ncclGroupStart`, ..., version 2.23.5), so halcyon-cuda's NCCL engine, which
//! opens libnccl by path, can be pointed at [`client::Fake::path`]. Its ranks are the fake's
//! devices in this process, one per thread (or several per thread with `ncclCommInitAll` or a
//! group); collectives run on the streams' workers and rendezvous there, the last rank to
//! arrive computing every rank's result through the memory model. Its contract is checked as
//! the driver's is: a null or destroyed communicator, a stream of another device than the
//! communicator's, ranks calling mismatched collectives, a communicator destroyed with work
//! queued or leaked past its context are violations. A rank whose peers never come waits until
//! `ncclCommAbort` (then its stream moves on, and the peers' async error is
//! `ncclRemoteError`), and at most 60 s, a violation. See `src/nccl/` for what is modelled and
//! what is not.
//!
//! For HIP, open the library with [`client::Fake::open`] and hand its [`client::Fake::path`]
//! to halcyon-hip as the runtime's name (`HipDriver::with_sonames`, `Hip::load`): its devices
//! are `hip://0` and `hip://1` (as many as on the CUDA side), each a gfx900 (compute 9.0, wavefronts of 64) with managed memory and memory
//! pools, HIP 6.2.0. One process should use one of the two APIs: they share the model's
//! handles and counts.

mod controls;
mod cubin;
mod cuda;
mod ffi;
mod hip;
mod hsaco;
mod model;
mod nccl;

pub mod client;

#[cfg(test)]
mod tests;

/// Counts of what is alive in the fake driver and what it ran, from
/// [`client::Fake::stats`] (`halcyon_fake_gpu_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FakeStats {
    /// References to the primary context (`cuDevicePrimaryCtxRetain` minus releases).
    pub context_retains: u64,
    /// Times the primary context was destroyed (its last reference released).
    pub contexts_destroyed: u64,
    /// Streams created and not destroyed.
    pub streams: u64,
    /// Events created and not destroyed.
    pub events: u64,
    /// Modules loaded and not unloaded.
    pub modules: u64,
    /// Graphs and executable graphs not destroyed.
    pub graphs: u64,
    /// Memory pools created and not destroyed.
    pub pools: u64,
    /// Allocations (device, managed, pinned, stream-ordered) not freed.
    pub allocations: u64,
    /// The largest pinned host allocation made so far, in bytes (`cuMemAllocHost`,
    /// `cuMemHostAlloc`, `hipHostMalloc`).
    pub largest_pinned: u64,
    /// Kernels run.
    pub kernels_run: u64,
    /// Records of timing events (created without `CU_EVENT_DISABLE_TIMING` /
    /// `hipEventDisableTiming`) made outside captures.
    pub timed_records: u64,
    /// Host functions run.
    pub host_funcs_run: u64,
    /// Graphs launched.
    pub graph_launches: u64,
    /// Graph captures invalidated because another call synchronised their context meanwhile
    /// (`cuMemFree`, `cuMemFreeHost`, `cuModuleUnload` while a stream of the device captured).
    pub captures_invalidated: u64,
    /// Peer copies run (`cuMemcpyPeerAsync`, `hipMemcpyPeerAsync`).
    pub peer_copies: u64,
    /// Peer copies enqueued while the destination's device had no access to the source's
    /// enabled (the driver stages those; halcyon enables access first).
    pub peer_copies_unenabled: u64,
    /// Contract violations so far.
    pub violations: u64,
    /// NCCL communicators alive (initialised and not destroyed or aborted).
    pub nccl_comms: u64,
    /// NCCL operations that completed and wrote their results: each rank's part of a
    /// collective, each send and each receive.
    pub collectives_run: u64,
}
