//! The driver's state: the primary context and every handle, by value.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use cudarc::driver::sys::CUresult;

use crate::contract::{clear_fault, lock, sticky, violation};
use crate::kernels::{Kernel, Module};
use crate::memory::memory;
use crate::stream::{Event, Op, Stream};

/// The primary context's handle value (the only context there is).
pub(crate) const PRIMARY_CONTEXT: usize = 0xc0_0000;

/// Handles are unique for the process, so a stale one is never mistaken for a live one.
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(0x10_0000);

/// A fresh handle value (16-aligned, never 0).
pub(crate) fn next_handle() -> u64 {
    NEXT_HANDLE.fetch_add(16, Ordering::Relaxed)
}

/// Counters of what ran.
pub(crate) static KERNELS_RUN: AtomicU64 = AtomicU64::new(0);
pub(crate) static HOST_FUNCS_RUN: AtomicU64 = AtomicU64::new(0);
pub(crate) static GRAPH_LAUNCHES: AtomicU64 = AtomicU64::new(0);
pub(crate) static CONTEXTS_DESTROYED: AtomicU64 = AtomicU64::new(0);

/// The primary context's incarnation: work queued in an earlier one never runs.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// The current context incarnation.
pub(crate) fn epoch() -> u64 {
    EPOCH.load(Ordering::Acquire)
}

/// Everything the driver knows, under one lock (memory has its own: see [`crate::memory`]).
#[derive(Default)]
pub(crate) struct Driver {
    pub initialized: bool,
    /// References to the primary context.
    pub retains: u64,
    pub streams: HashMap<u64, Arc<Stream>>,
    pub events: HashMap<u64, Arc<Event>>,
    pub modules: HashMap<u64, Arc<Module>>,
    /// Functions by handle.
    pub functions: HashMap<u64, Arc<Kernel>>,
    /// Captured graphs, and instantiated ones, by handle.
    pub graphs: HashMap<u64, Arc<Vec<Op>>>,
    pub execs: HashMap<u64, Arc<Vec<Op>>>,
    pub pools: HashSet<u64>,
    /// Every handle destroyed so far, to tell "stale" from "garbage".
    pub retired: HashSet<u64>,
}

static DRIVER: LazyLock<Mutex<Driver>> = LazyLock::new(Mutex::default);

/// The driver's state, locked.
pub(crate) fn driver() -> MutexGuard<'static, Driver> {
    lock(&DRIVER)
}

impl Driver {
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

    /// Removes `handle` from the map `pick` chooses and retires it, or reports it as [`find`]
    /// does.
    pub(crate) fn remove<T>(
        &mut self,
        pick: impl Fn(&mut Driver) -> &mut HashMap<u64, T>,
        handle: u64,
        what: &str,
        call: &str,
    ) -> Result<T, CUresult> {
        if let Some(found) = pick(self).remove(&handle) {
            self.retired.insert(handle);
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

    /// The last primary-context reference went: the context and everything in it is destroyed.
    /// What is still alive was leaked by the caller (unless the device faulted: CUDA drops
    /// host functions, and what they hold, after a fault).
    pub(crate) fn destroy_context(&mut self) {
        let faulted = sticky().is_some();
        let freed = memory().free_all();
        let leaked = [
            ("streams", self.streams.len()),
            ("events", self.events.len()),
            ("modules", self.modules.len()),
            ("graphs", self.graphs.len() + self.execs.len()),
            ("memory pools", self.pools.len()),
            ("allocations", freed.len()),
        ];
        for stream in self.streams.values() {
            stream.destroy();
        }
        self.streams.clear();
        self.events.clear();
        self.modules.clear();
        self.functions.clear();
        self.graphs.clear();
        self.execs.clear();
        self.pools.clear();
        CONTEXTS_DESTROYED.fetch_add(1, Ordering::Relaxed);
        // Work still queued (on streams destroyed or not) belongs to the old context: it is
        // dropped, not run against the next one.
        EPOCH.fetch_add(1, Ordering::AcqRel);
        clear_fault();
        if !faulted && leaked.iter().any(|(_, n)| *n > 0) {
            let list: Vec<String> = leaked
                .iter()
                .filter(|(_, n)| *n > 0)
                .map(|(what, n)| format!("{n} {what}"))
                .collect();
            violation(format!(
                "the primary context was released by its last user with {} still alive \
                 (leaked: freed only because the context went; allocations: {})",
                list.join(", "),
                freed.join("; ")
            ));
        }
    }
}
