//! The driver's state: the devices' primary contexts and every handle, by value, with the
//! device each handle belongs to.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use cudarc::driver::sys::CUresult;

use crate::model::contract::{clear_fault, lock, sticky, violation, Ret};
use crate::model::event::Event;
use crate::model::kernels::{Kernel, Module};
use crate::model::memory::memory;
use crate::model::ops::Op;
use crate::model::stream::Stream;

/// The most devices the fake can have.
pub(crate) const MAX_DEVICES: usize = 8;

/// How many devices there are: `HALCYON_FAKE_GPU_DEVICES` (1 to [`MAX_DEVICES`]), default 2,
/// so that a caller's per-device bookkeeping (which context or device is current on a thread,
/// which device owns a handle or an allocation) is checked even by tests that use device 0.
pub(crate) fn device_count() -> u32 {
    static COUNT: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *COUNT.get_or_init(|| {
        std::env::var("HALCYON_FAKE_GPU_DEVICES")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| (1..=MAX_DEVICES as u32).contains(n))
            .unwrap_or(2)
    })
}

/// Checks a device ordinal: the device's index (`CUDA_ERROR_INVALID_DEVICE` for none).
pub(crate) fn device(ordinal: std::ffi::c_int) -> Result<u32, CUresult> {
    u32::try_from(ordinal)
        .ok()
        .filter(|&d| d < device_count())
        .ok_or(CUresult::CUDA_ERROR_INVALID_DEVICE)
}

/// Initialises the driver (`cuInit`, `hipInit`): flags must be 0.
pub(crate) fn init(flags: std::ffi::c_uint) -> Ret {
    crate::ffi::no_flags(flags)?;
    driver().initialized = true;
    Ok(())
}

/// The handle value of device `device`'s primary context.
pub(crate) fn primary_context(device: u32) -> usize {
    0xc0_0000 + 0x100 * device as usize
}

/// The device whose primary context `context` is, if it is one.
pub(crate) fn context_device(context: usize) -> Option<u32> {
    let offset = context.checked_sub(primary_context(0))?;
    let device = (offset / 0x100) as u32;
    (offset % 0x100 == 0 && device < device_count()).then_some(device)
}

/// Handles are unique for the process, so a stale one is never mistaken for a live one.
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(0x10_0000);

/// A fresh handle value (16-aligned, never 0).
pub(crate) fn next_handle() -> u64 {
    NEXT_HANDLE.fetch_add(16, Ordering::Relaxed)
}

/// Counters of what ran.
pub(crate) static KERNELS_RUN: AtomicU64 = AtomicU64::new(0);
/// Records of timing events made (outside captures): `FakeStats::timed_records`.
pub(crate) static TIMED_RECORDS: AtomicU64 = AtomicU64::new(0);
pub(crate) static HOST_FUNCS_RUN: AtomicU64 = AtomicU64::new(0);
pub(crate) static GRAPH_LAUNCHES: AtomicU64 = AtomicU64::new(0);
pub(crate) static CONTEXTS_DESTROYED: AtomicU64 = AtomicU64::new(0);
/// NCCL operations that completed and wrote (each rank's part of a collective, each send
/// and each receive): `FakeStats::collectives_run`.
pub(crate) static COLLECTIVES_RUN: AtomicU64 = AtomicU64::new(0);
/// Captures invalidated by a call that synchronises the context (see `cuda::sync_context`).
pub(crate) static CAPTURES_INVALIDATED: AtomicU64 = AtomicU64::new(0);

/// Each primary context's incarnation: work queued in an earlier one never runs.
static EPOCHS: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];

/// The current incarnation of device `device`'s primary context.
pub(crate) fn epoch(device: u32) -> u64 {
    EPOCHS[device as usize].load(Ordering::Acquire)
}

/// Everything the driver knows, under one lock (memory has its own: see [`crate::model::memory`]).
#[derive(Default)]
pub(crate) struct Driver {
    pub initialized: bool,
    /// References to each device's primary context.
    pub retains: [u64; MAX_DEVICES],
    pub streams: HashMap<u64, Arc<Stream>>,
    pub events: HashMap<u64, Arc<Event>>,
    pub modules: HashMap<u64, Arc<Module>>,
    /// Functions by handle.
    pub functions: HashMap<u64, Arc<Kernel>>,
    /// Captured graphs, and instantiated ones, by handle.
    pub graphs: HashMap<u64, Arc<Vec<Op>>>,
    pub execs: HashMap<u64, Arc<Vec<Op>>>,
    /// The nodes of each captured graph, one per operation, in capture order (each depends on
    /// the one before).
    pub graph_nodes: HashMap<u64, Vec<u64>>,
    /// Each node's graph and position in it.
    pub nodes: HashMap<u64, (u64, usize)>,
    /// The graph each executable graph was instantiated from.
    pub exec_origins: HashMap<u64, u64>,
    pub pools: HashSet<u64>,
    /// NCCL communicators, by handle (see [`crate::nccl`]).
    pub comms: HashMap<u64, Arc<crate::nccl::communicator::Comm>>,
    /// The device of every live handle above (streams, events, modules, functions, graphs,
    /// executable graphs, pools and NCCL communicators).
    pub owners: HashMap<u64, u32>,
    /// Every handle destroyed so far, to tell "stale" from "garbage".
    pub retired: HashSet<u64>,
}

static DRIVER: LazyLock<Mutex<Driver>> = LazyLock::new(Mutex::default);

/// The driver's state, locked.
pub(crate) fn driver() -> MutexGuard<'static, Driver> {
    lock(&DRIVER)
}

impl Driver {
    /// Registers `ops`, captured on a stream of device `device`, as a graph with a node per
    /// operation; its handle.
    pub(crate) fn add_graph(&mut self, ops: Vec<Op>, device: u32) -> u64 {
        let h = next_handle();
        let nodes: Vec<u64> = (0..ops.len()).map(|_| next_handle()).collect();
        for (at, &node) in nodes.iter().enumerate() {
            self.nodes.insert(node, (h, at));
        }
        self.graph_nodes.insert(h, nodes);
        self.graphs.insert(h, Arc::new(ops));
        self.adopt(h, device);
        h
    }

    /// Forgets the nodes of graph `graph` (destroyed).
    pub(crate) fn forget_nodes(&mut self, graph: u64) {
        for node in self.graph_nodes.remove(&graph).unwrap_or_default() {
            self.nodes.remove(&node);
            self.retired.insert(node);
        }
    }

    /// Looks `handle` up in the map `pick` chooses: a destroyed or unknown handle is a
    /// violation and `CUDA_ERROR_INVALID_HANDLE`.
    pub(crate) fn find<T: Clone>(
        &self,
        pick: impl Fn(&Driver) -> &HashMap<u64, T>,
        handle: u64,
        what: &str,
        call: &str,
    ) -> Result<T, CUresult> {
        if let Some(found) = pick(self).get(&handle) {
            return Ok(found.clone());
        }
        let why = if handle == 0 && what == "stream" {
            "the legacy default stream (halcyon must use its own non-blocking streams)".into()
        } else if self.retired.contains(&handle) {
            format!("{what} {handle:#x}, which was destroyed")
        } else {
            format!("{handle:#x}, which is not a {what} this driver made")
        };
        violation(format!("{call} was passed {why}"));
        Err(CUresult::CUDA_ERROR_INVALID_HANDLE)
    }

    /// Removes `handle` from the map `pick` chooses and retires it, or reports it as [`Driver::find`]
    /// does.
    pub(crate) fn remove<T>(
        &mut self,
        pick: impl Fn(&mut Driver) -> &mut HashMap<u64, T>,
        handle: u64,
        what: &str,
        call: &str,
    ) -> Result<T, CUresult> {
        if let Some(found) = pick(self).remove(&handle) {
            self.retire(handle);
            return Ok(found);
        }
        let why = if self.retired.contains(&handle) {
            format!("{what} {handle:#x}, which was already destroyed")
        } else {
            format!("{handle:#x}, which is not a {what} this driver made")
        };
        violation(format!("{call} was passed {why}"));
        Err(CUresult::CUDA_ERROR_INVALID_HANDLE)
    }

    /// Records that `handle` belongs to device `device`.
    pub(crate) fn adopt(&mut self, handle: u64, device: u32) {
        self.owners.insert(handle, device);
    }

    /// The device a live handle belongs to.
    pub(crate) fn owner(&self, handle: u64) -> u32 {
        self.owners.get(&handle).copied().unwrap_or(0)
    }

    /// Forgets a destroyed handle's device and remembers it was destroyed.
    pub(crate) fn retire(&mut self, handle: u64) {
        self.owners.remove(&handle);
        self.retired.insert(handle);
    }

    /// The last reference to device `device`'s primary context went: the context and
    /// everything in it is destroyed (the other devices' contexts are untouched). What is
    /// still alive was leaked by the caller (unless the device faulted: CUDA drops host
    /// functions, and what they hold, after a fault).
    pub(crate) fn destroy_context(&mut self, device: u32) {
        let faulted = sticky(device).is_some();
        let freed = memory().free_all(device);
        let mine: Vec<u64> = self
            .owners
            .iter()
            .filter(|(_, &owner)| owner == device)
            .map(|(&h, _)| h)
            .collect();
        let count = |map: &dyn Fn(u64) -> bool| mine.iter().filter(|&&h| map(h)).count();
        let leaked = [
            ("streams", count(&|h| self.streams.contains_key(&h))),
            ("events", count(&|h| self.events.contains_key(&h))),
            ("modules", count(&|h| self.modules.contains_key(&h))),
            (
                "graphs",
                count(&|h| self.graphs.contains_key(&h) || self.execs.contains_key(&h)),
            ),
            ("memory pools", count(&|h| self.pools.contains(&h))),
            (
                "NCCL communicators",
                count(&|h| self.comms.contains_key(&h)),
            ),
            ("allocations", freed.len()),
        ];
        for h in mine {
            if let Some(stream) = self.streams.remove(&h) {
                stream.destroy();
            }
            self.events.remove(&h);
            self.modules.remove(&h);
            self.functions.remove(&h);
            if self.graphs.remove(&h).is_some() {
                self.forget_nodes(h);
            }
            self.execs.remove(&h);
            self.exec_origins.remove(&h);
            self.pools.remove(&h);
            if let Some(comm) = self.comms.remove(&h) {
                comm.leave(None);
            }
            self.retire(h);
        }
        CONTEXTS_DESTROYED.fetch_add(1, Ordering::Relaxed);
        // Work still queued (on streams destroyed or not) belongs to the old context: it is
        // dropped, not run against the next one.
        EPOCHS[device as usize].fetch_add(1, Ordering::AcqRel);
        clear_fault(device);
        crate::model::peer::forget(device);
        if !faulted && leaked.iter().any(|(_, n)| *n > 0) {
            let list: Vec<String> = leaked
                .iter()
                .filter(|(_, n)| *n > 0)
                .map(|(what, n)| format!("{n} {what}"))
                .collect();
            violation(format!(
                "the primary context of device {device} was released by its last user with {} \
                 still alive \
                 (leaked: freed only because the context went; allocations: {})",
                list.join(", "),
                freed.join("; ")
            ));
        }
    }
}
