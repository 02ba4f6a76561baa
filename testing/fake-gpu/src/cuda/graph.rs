//! CUDA graphs: instantiation, launch and destruction, the nodes of a captured graph (in
//! capture order, each depending on the one before: a single stream's capture is a chain), and
//! a kernel node of an executable graph pointed at new parameters.

use std::ffi::{c_uint, c_ulonglong, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cudarc::driver::sys::{CUgraphNodeType, CUresult, CUDA_KERNEL_NODE_PARAMS};
use CUresult::CUDA_ERROR_INVALID_VALUE;

use super::call;
use super::cuda_stream;
use super::module::LIMITS;
use crate::ffi::{as_ptr, handle, no_flags, put};
use crate::model::contract::{check_same_device, violation, Needs, Ret};
use crate::model::driver::{driver, next_handle, GRAPH_LAUNCHES};
use crate::model::launch::{prepare, Shape};
use crate::model::module::function;
use crate::model::ops::Op;

/// `cuGraphInstantiateWithFlags`: flags must be 0.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    out: *mut *mut c_void,
    graph: *mut c_void,
    flags: c_ulonglong,
) -> CUresult {
    call("cuGraphInstantiate", Needs::Context, || {
        let ops = driver().find(|d| &d.graphs, handle(graph), "graph", "cuGraphInstantiate")?;
        no_flags(flags)?;
        if out.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = next_handle();
        let mut driver = driver();
        let dev = driver.owner(handle(graph));
        driver.execs.insert(h, Arc::new(ops.to_vec()));
        driver.exec_origins.insert(h, handle(graph));
        driver.adopt(h, dev);
        drop(driver);
        // SAFETY: CUDA's contract: `out` is valid for one CUgraphExec.
        unsafe { put(out, as_ptr(h)) }
    })
}

/// `cuGraphDestroy`: the graph and its nodes (graphs instantiated from it live on).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGraphDestroy(graph: *mut c_void) -> CUresult {
    call("cuGraphDestroy", Needs::ContextEvenFaulted, || {
        let mut driver = driver();
        driver
            .remove(|d| &mut d.graphs, handle(graph), "graph", "cuGraphDestroy")
            .map(drop)?;
        driver.forget_nodes(handle(graph));
        Ok(())
    })
}

/// `cuGraphLaunch`: enqueues the graph's operations, together.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(exec: *mut c_void, s: *mut c_void) -> CUresult {
    call("cuGraphLaunch", Needs::Context, || {
        let ops = driver().find(
            |d| &d.execs,
            handle(exec),
            "executable graph",
            "cuGraphLaunch",
        )?;
        let stream = cuda_stream(s, "cuGraphLaunch")?;
        let exec_device = driver().owner(handle(exec));
        check_same_device(
            "cuGraphLaunch",
            ("an executable graph", exec_device),
            ("a stream", stream.device),
        )?;
        stream.enqueue_all(&ops);
        GRAPH_LAUNCHES.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
}

/// `cuGraphExecDestroy`: launches in flight still complete.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: *mut c_void) -> CUresult {
    call("cuGraphExecDestroy", Needs::ContextEvenFaulted, || {
        let mut driver = driver();
        driver.exec_origins.remove(&handle(exec));
        driver
            .remove(
                |d| &mut d.execs,
                handle(exec),
                "executable graph",
                "cuGraphExecDestroy",
            )
            .map(drop)
    })
}

/// Writes the nodes in `found` through CUDA's "count, then array" convention: with `nodes`
/// null, `*count` becomes how many there are; otherwise up to `*count` are written and `*count`
/// becomes how many were.
///
/// # Safety
/// `count` valid for a read and a write; `nodes`, if not null, valid for `*count` handles.
unsafe fn put_nodes(found: &[u64], nodes: *mut *mut c_void, count: *mut usize) -> Ret {
    if count.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if nodes.is_null() {
        // SAFETY: non-null; the caller's contract.
        return unsafe { put(count, found.len()) };
    }
    // SAFETY: non-null; the caller's contract.
    let room = unsafe { count.read() };
    let written = room.min(found.len());
    for (i, &node) in found.iter().take(written).enumerate() {
        // SAFETY: `i < *count`, for which the caller's array is valid.
        unsafe { nodes.add(i).write(as_ptr(node)) };
    }
    // SAFETY: as above.
    unsafe { put(count, written) }
}

/// `cuGraphGetRootNodes`: the first node of a captured graph (none if it is empty).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGraphGetRootNodes(
    graph: *mut c_void,
    nodes: *mut *mut c_void,
    count: *mut usize,
) -> CUresult {
    call("cuGraphGetRootNodes", Needs::Context, || {
        let driver = driver();
        driver.find(|d| &d.graphs, handle(graph), "graph", "cuGraphGetRootNodes")?;
        let all = driver.graph_nodes.get(&handle(graph));
        let root: Vec<u64> = all.and_then(|n| n.first()).copied().into_iter().collect();
        drop(driver);
        // SAFETY: CUDA's contract for the call.
        unsafe { put_nodes(&root, nodes, count) }
    })
}

/// `cuGraphNodeGetDependentNodes`: the node captured after `node` (none for the last).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetDependentNodes(
    node: *mut c_void,
    nodes: *mut *mut c_void,
    count: *mut usize,
) -> CUresult {
    call("cuGraphNodeGetDependentNodes", Needs::Context, || {
        let driver = driver();
        let (graph, at) = driver.find(
            |d| &d.nodes,
            handle(node),
            "graph node",
            "cuGraphNodeGetDependentNodes",
        )?;
        let next: Vec<u64> = driver
            .graph_nodes
            .get(&graph)
            .and_then(|n| n.get(at + 1))
            .copied()
            .into_iter()
            .collect();
        drop(driver);
        // SAFETY: CUDA's contract for the call.
        unsafe { put_nodes(&next, nodes, count) }
    })
}

/// The operation `node` stands for.
fn node_op(node: *mut c_void, call: &str) -> Result<Op, CUresult> {
    let driver = driver();
    let (graph, at) = driver.find(|d| &d.nodes, handle(node), "graph node", call)?;
    let ops = driver.find(|d| &d.graphs, graph, "graph", call)?;
    ops.get(at).cloned().ok_or(CUDA_ERROR_INVALID_VALUE)
}

/// `cuGraphNodeGetType`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetType(node: *mut c_void, kind: *mut c_uint) -> CUresult {
    call("cuGraphNodeGetType", Needs::Context, || {
        let kind_of = match node_op(node, "cuGraphNodeGetType")? {
            Op::Kernel(_) | Op::Nccl(_) => CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL,
            Op::Copy { .. } | Op::PeerCopy { .. } => CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMCPY,
            Op::Memset { .. } => CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMSET,
            Op::Host { .. } | Op::Callback { .. } => CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST,
            Op::Wait { .. } => CUgraphNodeType::CU_GRAPH_NODE_TYPE_WAIT_EVENT,
            Op::Record { .. } => CUgraphNodeType::CU_GRAPH_NODE_TYPE_EVENT_RECORD,
            Op::WriteValue { .. } => CUgraphNodeType::CU_GRAPH_NODE_TYPE_BATCH_MEM_OP,
            Op::FreeAsync { .. } => CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE,
        };
        // SAFETY: CUDA's contract: `kind` is valid for one CUgraphNodeType.
        unsafe { put(kind, kind_of as c_uint) }
    })
}

/// `cuGraphKernelNodeGetParams` (`_v2`): the function and shape of a captured kernel node.
/// `kernelParams` and `extra` come back null (the fake keeps argument values, not CUDA's
/// parameter buffer).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGraphKernelNodeGetParams_v2(
    node: *mut c_void,
    params: *mut CUDA_KERNEL_NODE_PARAMS,
) -> CUresult {
    call("cuGraphKernelNodeGetParams", Needs::Context, || {
        let Op::Kernel(launch) = node_op(node, "cuGraphKernelNodeGetParams")? else {
            return Err(CUDA_ERROR_INVALID_VALUE);
        };
        let value = CUDA_KERNEL_NODE_PARAMS {
            func: as_ptr(launch.kernel.function),
            gridDimX: launch.grid[0],
            gridDimY: launch.grid[1],
            gridDimZ: launch.grid[2],
            blockDimX: launch.block[0],
            blockDimY: launch.block[1],
            blockDimZ: launch.block[2],
            sharedMemBytes: launch.shared_memory_bytes,
            kernelParams: std::ptr::null_mut(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        // SAFETY: CUDA's contract: `params` is valid for one struct.
        unsafe { put(params, value) }
    })
}

/// `cuGraphExecKernelNodeSetParams` (`_v2`): the kernel node `node` of the graph `exec` was
/// instantiated from runs with `params` in every later launch of `exec` (launches enqueued
/// before keep what they had). The launch is checked as `cuLaunchKernel` checks one; `func`
/// must be set (`kern` is not modelled).
///
/// # Safety
/// CUDA's contract for the call: `params` valid, and its `kernelParams` as for
/// `cuLaunchKernel`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecKernelNodeSetParams_v2(
    exec: *mut c_void,
    node: *mut c_void,
    params: *const CUDA_KERNEL_NODE_PARAMS,
) -> CUresult {
    const CALL: &str = "cuGraphExecKernelNodeSetParams";
    call(CALL, Needs::Context, || {
        if params.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: CUDA's contract: a valid struct.
        let p = unsafe { params.read() };
        let (graph, at) = driver().find(|d| &d.nodes, handle(node), "graph node", CALL)?;
        let origin = driver().exec_origins.get(&handle(exec)).copied();
        if origin != Some(graph) {
            violation(format!(
                "{CALL}: node {:#x} is not of the graph executable graph {:#x} was \
                 instantiated from",
                handle(node),
                handle(exec)
            ));
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let kernel = function(handle(p.func), CALL)?;
        let device = driver().owner(handle(exec));
        let shape = Shape {
            grid: [p.gridDimX, p.gridDimY, p.gridDimZ],
            block: [p.blockDimX, p.blockDimY, p.blockDimZ],
            shared_memory_bytes: p.sharedMemBytes,
        };
        // SAFETY: CUDA's contract for `kernelParams`.
        let launch = unsafe {
            prepare(
                CALL,
                &kernel,
                device,
                shape,
                p.kernelParams,
                p.extra,
                &LIMITS,
            )
        }?;
        let mut driver = driver();
        let ops = driver.execs.get_mut(&handle(exec)).ok_or_else(|| {
            violation(format!(
                "{CALL}: {:#x} is not a live executable graph",
                handle(exec)
            ));
            CUDA_ERROR_INVALID_VALUE
        })?;
        // Launches already enqueued hold their operations: only later ones see the change.
        match Arc::make_mut(ops).get_mut(at) {
            Some(op @ Op::Kernel(_)) => {
                *op = Op::Kernel(Arc::new(launch));
                Ok(())
            }
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}
