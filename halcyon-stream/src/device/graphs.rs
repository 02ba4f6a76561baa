//! Reusable command lists replayed as graphs.
//!
//! A command list submitted again unchanged (the same `Arc<[Command]>`: a reusable
//! [`halcyon::CommandBuffer`] executed without a binding table) is issued directly the first
//! time, captured into a graph the second time (`begin_capture`, the usual operations,
//! `end_capture`, then `launch_graph`), and launched as that graph from then on: one API call
//! per submission instead of one per command. Lists submitted with a binding table resolve to a
//! new list each time and are always issued directly (stream replay), as are lists on an API
//! without [`Capabilities::GRAPHS`](crate::Capabilities::GRAPHS).
//!
//! A graph holds the device addresses of the buffers the list used when it was captured. That
//! stays right: a buffer's memory never changes while the buffer lives, only released (a queue
//! `dealloca`), and every launch first resolves each buffer again, failing like a direct issue
//! would if one was released. The cache is keyed by the list's identity through a `Weak`, which
//! also keeps the allocation (and so the address) from being reused while cached; a graph whose
//! list is gone is destroyed at the next lookup, and at most [`MAX_GRAPHS`] are kept per queue.

use std::sync::{Arc, Mutex, Weak};

use crate::api::GraphHandle;
use crate::device::core::lock;
use halcyon::command_buffer::Command;

/// Graphs (or first sightings) a queue keeps; the least recently used are dropped.
pub(crate) const MAX_GRAPHS: usize = 64;

/// What to do with a command list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// First sighting: issue the commands directly.
    Direct,
    /// Second sighting: capture the commands into a graph, then launch it.
    Capture,
    /// Captured before: launch its graph.
    Launch(GraphHandle),
}

struct Entry {
    list: Weak<[Command]>,
    graph: Option<GraphHandle>,
}

/// One queue's graph cache.
#[derive(Default)]
pub(crate) struct GraphCache {
    entries: Mutex<Vec<Entry>>,
}

fn same(entry: &Entry, list: &Arc<[Command]>) -> bool {
    std::ptr::addr_eq(entry.list.as_ptr(), Arc::as_ptr(list))
}

impl GraphCache {
    /// The plan for `list`, and the graphs that fell out of the cache (the caller destroys
    /// them: their lists are gone, or they were the least recently used).
    pub(crate) fn plan(&self, list: &Arc<[Command]>) -> (Plan, Vec<GraphHandle>) {
        let mut entries = lock(&self.entries);
        let mut dropped = Vec::new();
        entries.retain(|e| {
            let live = e.list.strong_count() > 0;
            if !live {
                dropped.extend(e.graph);
            }
            live
        });
        let plan = match entries.iter().position(|e| same(e, list)) {
            Some(at) => {
                // Most recently used last.
                let entry = entries.remove(at);
                let plan = entry.graph.map_or(Plan::Capture, Plan::Launch);
                entries.push(entry);
                plan
            }
            None => {
                if entries.len() >= MAX_GRAPHS {
                    dropped.extend(entries.remove(0).graph);
                }
                entries.push(Entry {
                    list: Arc::downgrade(list),
                    graph: None,
                });
                Plan::Direct
            }
        };
        (plan, dropped)
    }

    /// Records the graph captured for `list`. `false` if the list is no longer cached (the
    /// caller destroys the graph after launching it once). Issues of one queue hold its issue
    /// lock from [`GraphCache::plan`] to here, so the entry is normally still there, unset.
    pub(crate) fn captured(&self, list: &Arc<[Command]>, graph: GraphHandle) -> bool {
        let mut entries = lock(&self.entries);
        match entries.iter_mut().find(|e| same(e, list)) {
            Some(entry) if entry.graph.is_none() => {
                entry.graph = Some(graph);
                true
            }
            _ => false,
        }
    }

    /// Forgets `list` (its capture failed), so its next submission starts over.
    pub(crate) fn forget(&self, list: &Arc<[Command]>) -> Option<GraphHandle> {
        let mut entries = lock(&self.entries);
        let at = entries.iter().position(|e| same(e, list))?;
        entries.remove(at).graph
    }

    /// Every cached graph (the device is going away).
    pub(crate) fn drain(&self) -> Vec<GraphHandle> {
        lock(&self.entries)
            .drain(..)
            .filter_map(|e| e.graph)
            .collect()
    }
}
