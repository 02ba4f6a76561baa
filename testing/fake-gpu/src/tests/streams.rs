//! What the CUDA side models: streams, events and graphs, PTX modules and kernel launches.

use super::*;

#[test]
fn events_order_streams_and_graphs_replay() {
    let session = Session::new();
    let (a, b) = (session.stream(), session.stream());
    let (module, add_one) = session.add_one();
    let x = alloc(256);
    let mut e = null_mut();
    // SAFETY: live handles of this driver; valid out-pointers.
    unsafe {
        assert_eq!(cuEventCreate(&mut e, 0), CUresult::CUDA_SUCCESS);
        assert_eq!(
            cuEventQuery(e),
            CUresult::CUDA_SUCCESS,
            "never recorded: complete"
        );
        // a (held at the gate): +1, record; b waits for the record, then +1 again.
        gate(a);
        assert_eq!(
            session.launch_add_one(add_one, x, 64, a),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuEventRecord(e, a), CUresult::CUDA_SUCCESS);
        assert_eq!(cuEventQuery(e), CUresult::CUDA_ERROR_NOT_READY);
        assert_eq!(cuStreamWaitEvent(b, e, 0), CUresult::CUDA_SUCCESS);
        assert_eq!(
            session.launch_add_one(add_one, x, 64, b),
            CUresult::CUDA_SUCCESS
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(read_u32s(x, 64), vec![0; 64], "b waits for a's record");
        open_gate();
        assert_eq!(cuStreamSynchronize(b), CUresult::CUDA_SUCCESS);
        assert_eq!(cuEventQuery(e), CUresult::CUDA_SUCCESS);
    }
    assert_eq!(read_u32s(x, 64), vec![2; 64]);
    // Captured once, launched twice: +2 per launch. An event recorded in the capture is a
    // captured event (no graph node; querying it is an error until it is recorded again).
    let (mut graph, mut exec) = (null_mut(), null_mut());
    // SAFETY: as above.
    unsafe {
        assert_eq!(cuStreamBeginCapture_v2(a, 2), CUresult::CUDA_SUCCESS);
        assert_eq!(
            session.launch_add_one(add_one, x, 64, a),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuEventRecord(e, a), CUresult::CUDA_SUCCESS);
        assert_eq!(
            cuStreamWaitEvent(a, e, 0),
            CUresult::CUDA_SUCCESS,
            "within the capture"
        );
        assert_eq!(
            session.launch_add_one(add_one, x, 64, a),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuStreamEndCapture(a, &mut graph), CUresult::CUDA_SUCCESS);
        assert_eq!(cuEventQuery(e), CUresult::CUDA_ERROR_CAPTURED_EVENT);
        assert_eq!(
            cuGraphInstantiateWithFlags(&mut exec, graph, 0),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuGraphDestroy(graph), CUresult::CUDA_SUCCESS);
        for _ in 0..2 {
            assert_eq!(cuGraphLaunch(exec, a), CUresult::CUDA_SUCCESS);
        }
        assert_eq!(cuEventRecord(e, a), CUresult::CUDA_SUCCESS);
        assert_eq!(cuEventSynchronize(e), CUresult::CUDA_SUCCESS);
        assert_eq!(cuGraphExecDestroy(exec), CUresult::CUDA_SUCCESS);
        // Waiting in a capture on work outside it invalidates the capture.
        assert_eq!(cuStreamBeginCapture_v2(b, 2), CUresult::CUDA_SUCCESS);
        assert_eq!(
            cuStreamWaitEvent(b, e, 0),
            CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION
        );
        assert_eq!(
            cuStreamEndCapture(b, &mut graph),
            CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        );
        assert!(graph.is_null());
    }
    assert_eq!(read_u32s(x, 64), vec![6; 64]);
    // SAFETY: live handles, each destroyed once.
    unsafe {
        assert_eq!(cuEventDestroy_v2(e), CUresult::CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(x), CUresult::CUDA_SUCCESS);
        assert_eq!(cuModuleUnload(module), CUresult::CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(a), CUresult::CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(b), CUresult::CUDA_SUCCESS);
    }
    assert!(
        session.new_violations().is_empty(),
        "{:?}",
        session.new_violations()
    );
}

/// A captured graph's nodes form a chain in capture order, each typed by its operation; a
/// kernel node of an executable graph pointed at new arguments changes later launches only,
/// and a node that is not a kernel cannot be set so.
#[test]
fn graph_nodes_chain_and_kernel_updates() {
    use cudarc::driver::sys::{CUgraphNodeType, CUDA_KERNEL_NODE_PARAMS};
    let session = Session::new();
    let a = session.stream();
    let (module, add_one) = session.add_one();
    let (x, y) = (alloc(256), alloc(256));
    let (mut graph, mut exec) = (null_mut(), null_mut());
    let mut nodes = Vec::new();
    // SAFETY: live handles of this driver; valid out-pointers, arrays with the room they say.
    unsafe {
        assert_eq!(cuMemsetD32Async(x, 0, 64, a), CUresult::CUDA_SUCCESS);
        assert_eq!(cuStreamBeginCapture_v2(a, 2), CUresult::CUDA_SUCCESS);
        assert_eq!(
            session.launch_add_one(add_one, x, 64, a),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuMemsetD32Async(y, 5, 64, a), CUresult::CUDA_SUCCESS);
        assert_eq!(
            session.launch_add_one(add_one, x, 64, a),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuStreamEndCapture(a, &mut graph), CUresult::CUDA_SUCCESS);
        let mut count = 0;
        assert_eq!(
            cuGraphGetRootNodes(graph, null_mut(), &mut count),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(count, 1);
        let mut next = [null_mut(); 2];
        let mut room = 2;
        assert_eq!(
            cuGraphGetRootNodes(graph, next.as_mut_ptr(), &mut room),
            CUresult::CUDA_SUCCESS
        );
        while room == 1 {
            nodes.push(next[0]);
            room = 2;
            assert_eq!(
                cuGraphNodeGetDependentNodes(next[0], next.as_mut_ptr(), &mut room),
                CUresult::CUDA_SUCCESS
            );
        }
        assert_eq!(room, 0, "a chain");
        let kinds: Vec<u32> = nodes
            .iter()
            .map(|&node| {
                let mut kind = u32::MAX;
                assert_eq!(cuGraphNodeGetType(node, &mut kind), CUresult::CUDA_SUCCESS);
                kind
            })
            .collect();
        let (kernel, memset) = (
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL as u32,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMSET as u32,
        );
        assert_eq!(kinds, [kernel, memset, kernel]);
        assert_eq!(
            cuGraphInstantiateWithFlags(&mut exec, graph, 0),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuGraphLaunch(exec, a), CUresult::CUDA_SUCCESS); // x: 2, y: 5
                                                                    // The second kernel now adds to y: later launches only.
        let mut captured: CUDA_KERNEL_NODE_PARAMS = std::mem::zeroed();
        assert_eq!(
            cuGraphKernelNodeGetParams_v2(nodes[2], &mut captured),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(captured.func.cast(), add_one);
        assert_eq!((captured.gridDimX, captured.blockDimX), (1, 64));
        let n = 64u32;
        let mut args = [
            (&y as *const u64).cast_mut().cast::<c_void>(),
            (&n as *const u32).cast_mut().cast(),
        ];
        let update = CUDA_KERNEL_NODE_PARAMS {
            kernelParams: args.as_mut_ptr(),
            ..captured
        };
        assert_eq!(
            cuGraphExecKernelNodeSetParams_v2(exec, nodes[2], &update),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            cuGraphExecKernelNodeSetParams_v2(exec, nodes[1], &update),
            CUresult::CUDA_ERROR_INVALID_VALUE,
            "a memset node"
        );
        assert_eq!(cuGraphLaunch(exec, a), CUresult::CUDA_SUCCESS); // x: 3, y: 6
        assert_eq!(cuStreamSynchronize(a), CUresult::CUDA_SUCCESS);
        assert_eq!(cuGraphDestroy(graph), CUresult::CUDA_SUCCESS);
        assert_eq!(cuGraphExecDestroy(exec), CUresult::CUDA_SUCCESS);
    }
    assert_eq!(read_u32s(x, 64), vec![3; 64]);
    assert_eq!(read_u32s(y, 64), vec![6; 64]);
    // SAFETY: live handles, each destroyed once.
    unsafe {
        assert_eq!(cuMemFree_v2(x), CUresult::CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(y), CUresult::CUDA_SUCCESS);
        assert_eq!(cuModuleUnload(module), CUresult::CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(a), CUresult::CUDA_SUCCESS);
    }
    assert!(
        session.new_violations().is_empty(),
        "{:?}",
        session.new_violations()
    );
}

#[test]
fn ptx_is_read_for_entry_points_and_rejected_with_a_log() {
    let session = Session::new();
    let (module, add_one) = session.add_one();
    let (mut offset, mut size) = (0, 0);
    // SAFETY: a live function; valid out-pointers.
    unsafe {
        assert_eq!(
            cuFuncGetParamInfo(add_one, 1, &mut offset, &mut size),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!((offset, size), (8, 4));
        assert_eq!(
            cuFuncGetParamInfo(add_one, 2, &mut offset, &mut size),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuModuleUnload(module), CUresult::CUDA_SUCCESS);
    }
    let bad = ".version 8.0\n.target sm_52\n.visible .entry k()\n{\n\tbogus.u32 %r1;\n}\n\0";
    let mut log = vec![0u8; 256];
    let mut options = [5u32, 6]; // CU_JIT_ERROR_LOG_BUFFER, its size
    let mut values = [
        log.as_mut_ptr().cast::<c_void>(),
        std::ptr::without_provenance_mut(log.len()),
    ];
    let mut m = null_mut();
    // SAFETY: NUL-terminated text; option arrays of 2 entries; the log holds 256 bytes.
    let code = unsafe {
        cuModuleLoadDataEx(
            &mut m,
            bad.as_ptr().cast(),
            2,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    assert_eq!(code, CUresult::CUDA_ERROR_INVALID_PTX);
    let log =
        String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap()]).to_string();
    assert!(log.contains("Unknown instruction 'bogus.u32'"), "{log}");
    assert!(session.new_violations().is_empty());
}

/// `.maxntid` caps a kernel's block size: `cuFuncGetAttribute` reports the cap, a launch of a
/// larger block is refused as a driver refuses one too large for a kernel's registers, and a
/// malformed directive is a PTX error.
#[test]
fn maxntid_limits_the_block_size() {
    let session = Session::new();
    let ptx = ".version 8.0\n.target sm_52\n.visible .entry empty()\n.maxntid 16, 2\n\
               .minnctapersm 1\n{\n\tret;\n}\n\0";
    let (mut module, mut empty) = (null_mut(), null_mut());
    let mut max = 0;
    // SAFETY: NUL-terminated PTX and name; valid out-pointers.
    unsafe {
        assert_eq!(
            cuModuleLoadData(&mut module, ptx.as_ptr().cast()),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            cuModuleGetFunction(&mut empty, module, c"empty".as_ptr()),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            cuFuncGetAttribute(&mut max, 0, empty),
            CUresult::CUDA_SUCCESS
        );
    }
    assert_eq!(max, 32);
    let s = session.stream();
    let launch = |block_x: u32| {
        // SAFETY: a live function without parameters and a live stream.
        unsafe { cuLaunchKernel(empty, 1, 1, 1, block_x, 1, 1, 0, s, null_mut(), null_mut()) }
    };
    assert_eq!(launch(33), CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    assert_eq!(launch(32), CUresult::CUDA_SUCCESS);
    // SAFETY: live handles, destroyed once, after the launch completed.
    unsafe {
        assert_eq!(cuStreamSynchronize(s), CUresult::CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(s), CUresult::CUDA_SUCCESS);
        assert_eq!(cuModuleUnload(module), CUresult::CUDA_SUCCESS);
    }
    let bad = ".version 8.0\n.target sm_52\n.visible .entry k()\n.maxntid 0\n{\n\tret;\n}\n\0";
    // SAFETY: NUL-terminated PTX; a valid out-pointer.
    let code = unsafe { cuModuleLoadData(&mut module, bad.as_ptr().cast()) };
    assert_eq!(code, CUresult::CUDA_ERROR_INVALID_PTX);
    assert!(session.new_violations().is_empty());
}

#[test]
fn a_kernel_whose_module_was_unloaded_before_it_ran_is_a_violation() {
    let session = Session::new();
    let (s, module, x) = session.queued_add_one();
    // SAFETY: the module is live (unloaded under a queued launch: the case under test).
    assert_eq!(unsafe { cuModuleUnload(module) }, CUresult::CUDA_SUCCESS);
    open_gate();
    // SAFETY: live handles.
    unsafe {
        assert_eq!(cuStreamSynchronize(s), CUresult::CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuMemFree_v2(x), CUresult::CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuStreamDestroy_v2(s), CUresult::CUDA_ERROR_INVALID_HANDLE);
    }
    let found = session.new_violations();
    assert!(
        found.len() == 1 && found[0].contains("module was unloaded"),
        "{found:?}"
    );
}

/// `cuEventElapsedTime` answers the time between two completed timing events in 0.5 µs steps,
/// and refuses what CUDA refuses: an event created with `CU_EVENT_DISABLE_TIMING` or never
/// recorded (`CUDA_ERROR_INVALID_HANDLE`), a record still pending (`CUDA_ERROR_NOT_READY`).
/// Only records of timing events count as timed records.
#[test]
fn elapsed_time_measures_completed_timing_events_only() {
    use crate::model::driver::TIMED_RECORDS;
    use crate::model::event::TIMER_RESOLUTION_NS;

    let session = Session::new();
    let s = session.stream();
    let (module, add_one) = session.add_one();
    let x = alloc(256);
    let (mut start, mut end, mut untimed) = (null_mut(), null_mut(), null_mut());
    let mut ms = f32::NAN;
    // SAFETY: live handles of this driver; valid out-pointers.
    unsafe {
        assert_eq!(cuEventCreate(&mut start, 0), CUresult::CUDA_SUCCESS);
        assert_eq!(
            cuEventCreate(&mut end, 1),
            CUresult::CUDA_SUCCESS,
            "blocking sync"
        );
        assert_eq!(cuEventCreate(&mut untimed, 2), CUresult::CUDA_SUCCESS);
        assert_eq!(
            cuEventElapsedTime(&mut ms, start, end),
            CUresult::CUDA_ERROR_INVALID_HANDLE,
            "never recorded"
        );
        let timed = TIMED_RECORDS.load(Ordering::Relaxed);
        gate(s);
        assert_eq!(cuEventRecord(start, s), CUresult::CUDA_SUCCESS);
        assert_eq!(
            session.launch_add_one(add_one, x, 64, s),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuEventRecord(end, s), CUresult::CUDA_SUCCESS);
        assert_eq!(cuEventRecord(untimed, s), CUresult::CUDA_SUCCESS);
        assert_eq!(TIMED_RECORDS.load(Ordering::Relaxed), timed + 2);
        assert_eq!(
            cuEventElapsedTime(&mut ms, start, end),
            CUresult::CUDA_ERROR_NOT_READY
        );
        open_gate();
        assert_eq!(cuEventSynchronize(untimed), CUresult::CUDA_SUCCESS);
        assert_eq!(
            cuEventElapsedTime(&mut ms, start, end),
            CUresult::CUDA_SUCCESS
        );
        // The kernel took its latency (100 µs unless HALCYON_FAKE_GPU_KERNEL_US says less).
        assert!(ms >= 0.0, "{ms}");
        let ns = f64::from(ms) * 1e6;
        let steps = ns / TIMER_RESOLUTION_NS as f64;
        assert!(
            (steps - steps.round()).abs() < 1e-3,
            "{ns} ns: whole timer ticks"
        );
        let mut back = f32::NAN;
        assert_eq!(
            cuEventElapsedTime(&mut back, end, start),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(back, -ms);
        for (a, b) in [(untimed, end), (start, untimed)] {
            assert_eq!(
                cuEventElapsedTime(&mut ms, a, b),
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                "timing disabled"
            );
        }
        for e in [start, end, untimed] {
            assert_eq!(cuEventDestroy_v2(e), CUresult::CUDA_SUCCESS);
        }
        assert_eq!(cuMemFree_v2(x), CUresult::CUDA_SUCCESS);
        assert_eq!(cuModuleUnload(module), CUresult::CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(s), CUresult::CUDA_SUCCESS);
    }
    assert!(session.new_violations().is_empty());
}
