//! `update_graph_kernel` on the translation table: the kernels of a captured graph pointed at
//! other buffers in place (`cuGraphExecKernelNodeSetParams`), launches enqueued before an
//! update unaffected, and what an update refuses.

use halcyon::StatusCode;
use halcyon_stream::{Capabilities, KernelParams, LaunchConfig, MemoryPlacement, StreamApi};

use super::{api_or_skip, common};

#[test]
fn graph_kernels_are_pointed_at_new_buffers_in_place() {
    let Some(mut api) = api_or_skip("graph_kernels_are_pointed_at_new_buffers_in_place") else {
        return;
    };
    api.enable_graphs();
    assert!(
        api.info().capabilities.contains(Capabilities::GRAPH_UPDATE),
        "CUDA 12 drivers have cuGraphExecKernelNodeSetParams_v2"
    );
    let s = api.create_stream().unwrap();
    const N: u32 = 256;
    let bytes = u64::from(N) * 4;
    let a = api.allocate(bytes, MemoryPlacement::Device).unwrap();
    let b = api.allocate(bytes, MemoryPlacement::Device).unwrap();
    api.memset_async(a, 0, 4, bytes, s).unwrap();
    api.memset_async(b, 100, 4, bytes, s).unwrap();
    let module = api.load_module(&common::standard_module().spec()).unwrap();
    let add_one = api.get_function(module.module, "add_one_u32").unwrap();
    let config = LaunchConfig {
        grid: [N.div_ceil(64), 1, 1],
        block: [64, 1, 1],
        shared_memory_bytes: 0,
    };
    let constants = [N];
    let (on_a, on_b) = ([a], [b]);
    let params = |bindings| KernelParams {
        bindings,
        constants: &constants,
        status: None,
    };

    // Kernel 0 and kernel 1, with a fill between them (a memset node, not counted).
    api.begin_capture(s).unwrap();
    api.launch_kernel(add_one, &config, &params(&on_a), s)
        .unwrap();
    api.memset_async(b.offset(bytes - 4), 0, 4, 4, s).unwrap();
    api.launch_kernel(add_one, &config, &params(&on_a), s)
        .unwrap();
    let graph = api.end_capture(s).unwrap();
    api.memset_async(b, 100, 4, bytes, s).unwrap();
    // The graph's kernels and fill use `a` and `b`, freed only after the stream is
    // synchronised below.
    // SAFETY: as just said.
    unsafe { api.launch_graph(graph, s) }.unwrap(); // a += 2
    api.update_graph_kernel(graph, 1, add_one, &config, &params(&on_b))
        .unwrap();
    // SAFETY: as above.
    unsafe { api.launch_graph(graph, s) }.unwrap(); // a += 1, b += 1
    api.update_graph_kernel(graph, 0, add_one, &config, &params(&on_b))
        .unwrap();
    // SAFETY: as above.
    unsafe { api.launch_graph(graph, s) }.unwrap(); // b += 2

    // Refused, the graph unchanged: a kernel it does not have, another shape, parameters that
    // do not fit the kernel.
    let refused = |kernel, config: &LaunchConfig, params: &KernelParams<'_>| {
        api.update_graph_kernel(graph, kernel, add_one, config, params)
            .unwrap_err()
    };
    let err = refused(2, &config, &params(&on_a));
    assert_eq!(err.code(), StatusCode::InvalidArgument, "{err}");
    let wider = LaunchConfig {
        grid: [N.div_ceil(32), 1, 1],
        block: [32, 1, 1],
        ..config
    };
    let err = refused(0, &wider, &params(&on_a));
    assert_eq!(err.code(), StatusCode::FailedPrecondition, "{err}");
    let no_constants = KernelParams {
        constants: &[],
        ..params(&on_a)
    };
    let err = refused(0, &config, &no_constants);
    assert_eq!(err.code(), StatusCode::InvalidArgument, "{err}");

    let mut out = vec![0u32; 2 * N as usize];
    // SAFETY: `out` lives, untouched, until the stream is synchronised below.
    unsafe {
        api.copy_device_to_host_async(out.as_mut_ptr().cast(), a, bytes, s)
            .unwrap();
        api.copy_device_to_host_async(out.as_mut_ptr().add(N as usize).cast(), b, bytes, s)
            .unwrap();
    }
    api.synchronize_stream(s).unwrap();
    let (on_a, on_b) = out.split_at(N as usize);
    assert!(on_a.iter().all(|&v| v == 3), "{:?}", &on_a[..4]);
    // The fill zeroes b's last word before each launch's second kernel.
    assert!(
        on_b[..N as usize - 1].iter().all(|&v| v == 103),
        "{:?}",
        &on_b[..4]
    );
    assert_eq!(on_b[N as usize - 1], 1);

    api.destroy_graph(graph).unwrap();
    let err = api
        .update_graph_kernel(graph, 0, add_one, &config, &params(&[a]))
        .unwrap_err();
    assert_eq!(err.code(), StatusCode::InvalidArgument, "{err}");
    api.unload_module(module.module).unwrap();
    api.free(a).unwrap();
    api.free(b).unwrap();
    api.destroy_stream(s).unwrap();
}
