//! `ncclGroupStart` / `ncclGroupEnd`: a thread's group defers the waits of the communicators
//! it initialises and the operations it enqueues to the outermost `ncclGroupEnd`, which waits
//! for every rank of those communicators to join, then enqueues the operations in call
//! order, sends first. Sends never wait for their receives in the fake, so enqueuing them
//! first lets a group of sends and receives in any order complete, as NCCL's fused group does.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use cudarc::nccl::sys::ncclResult_t;

use super::collective::live;
use super::communicator::{wait_limit, Comm, INIT_WAIT};
use super::{fail, NRet};
use crate::model::ops::Op;
use crate::model::stream::Stream;

#[derive(Default)]
struct Group {
    /// How many `ncclGroupStart`s are open.
    depth: u32,
    /// Communicators initialised in the group, whose ranks must all join by its end.
    inits: Vec<Arc<Comm>>,
    /// Operations (each an [`Op::Nccl`]) to enqueue at its end, with their streams.
    ops: Vec<(Arc<Stream>, Op)>,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::default();
}

/// Whether the calling thread is inside `ncclGroupStart` / `ncclGroupEnd`.
pub(crate) fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// `ncclGroupStart`.
pub(crate) fn start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// Keeps `comm`'s wait for its clique until the group ends.
pub(crate) fn defer_init(comm: Arc<Comm>) {
    GROUP.with(|g| g.borrow_mut().inits.push(comm));
}

/// Keeps `op` for `stream` until the group ends.
pub(crate) fn defer(stream: Arc<Stream>, op: Op) {
    GROUP.with(|g| g.borrow_mut().ops.push((stream, op)));
}

/// `ncclGroupEnd`: `ncclInvalidUsage` without a group. Ending the outermost group waits for
/// the communicators initialised in it (`ncclSystemError` if a clique does not fill within the
/// fake's bound: those communicators are destroyed, and their operations dropped), then
/// enqueues its operations.
pub(crate) fn end() -> NRet {
    let (inits, ops) = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(fail(
                ncclResult_t::ncclInvalidUsage,
                "ncclGroupEnd without ncclGroupStart",
            ));
        }
        g.depth -= 1;
        if g.depth > 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        Ok((std::mem::take(&mut g.inits), std::mem::take(&mut g.ops)))
    })?;
    let deadline = Instant::now() + wait_limit(INIT_WAIT);
    let mut result = Ok(());
    let mut failed = HashSet::new();
    for comm in &inits {
        if let Err(why) = comm.wait_ready(deadline) {
            failed.insert(comm.handle);
            result = result.and(Err(why));
        }
    }
    let (sends, others): (Vec<_>, Vec<_>) = ops
        .into_iter()
        .filter(|(_, op)| match op {
            Op::Nccl(task) => {
                let handle = task.comm().handle;
                !failed.contains(&handle) && live(handle)
            }
            _ => true,
        })
        .partition(|(_, op)| matches!(op, Op::Nccl(task) if task.is_send()));
    for (stream, op) in sends.into_iter().chain(others) {
        stream.enqueue(op);
    }
    result
}
