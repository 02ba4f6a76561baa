//! Direct tests of the translation table ([`halcyon_cuda::CudaApi`]) and a device, shared by
//! `tests/cuda.rs` (whatever driver the machine has) and `tests/fake_driver.rs` (the fake
//! driver). Each test first calls the including crate's `prepare_driver`, and prints why and
//! passes when there is no usable CUDA device.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use halcyon::{BufferParams, Fence, StatusCode, Timepoints};
use halcyon_conformance::harness::{block_on, download_u32, upload_u32};
use halcyon_conformance::kernels;
use halcyon_cuda::{probe, CudaApi, CudaModule};
use halcyon_stream::{
    Capabilities, DevicePtr, EventFlags, EventHandle, FunctionHandle, GraphHandle, KernelParams,
    LaunchConfig, MemoryPlacement, ModuleHandle, StreamApi, StreamHandle,
};

use super::common;

mod graph_update;
mod timing;

/// The including crate's driver preparation: `false` (the reason printed) to skip.
fn prepared(test: &str) -> bool {
    match super::prepare_driver() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipped {test}: {e}");
            false
        }
    }
}

fn api_or_skip(test: &str) -> Option<CudaApi> {
    if !prepared(test) {
        return None;
    }
    let probe = match probe::probe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("skipped {test}: {e}");
            return None;
        }
    };
    match CudaApi::new(probe, 0) {
        Ok(api) => Some(api),
        Err(e) if e.code() == StatusCode::Unavailable => {
            eprintln!("skipped {test}: {e}");
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

/// The context current on the calling thread (`cuCtxGetCurrent`).
fn current_context() -> cudarc::driver::sys::CUcontext {
    let mut context = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the probe initialised the driver.
    let code = unsafe { halcyon_cuda::sys::cuCtxGetCurrent(&mut context) };
    assert!(code.is_success(), "cuCtxGetCurrent: {code:?}");
    context
}

/// Streams, events, copies, fills, host functions, a kernel and a captured graph, through
/// the raw table.
#[test]
fn translation_table_round_trip() {
    let Some(api) = api_or_skip("translation_table_round_trip") else {
        return;
    };
    let info = api.info();
    println!("{info:?}");
    assert!(info.capabilities.contains(Capabilities::HOST_FUNC));
    assert!(!info.capabilities.contains(Capabilities::GRAPHS));
    let s = api.create_stream().unwrap();
    let e = api
        .create_event(EventFlags::DISABLE_TIMING | EventFlags::BLOCKING_SYNC)
        .unwrap();
    assert!(
        api.query_event(e).unwrap(),
        "a new event counts as complete"
    );

    const N: u32 = 1000;
    let bytes = u64::from(N) * 4;
    let buf = api.allocate(bytes, MemoryPlacement::Device).unwrap();
    assert!(api.host_pointer(buf).is_none());
    api.memset_async(buf, 7, 4, bytes, s).unwrap();
    let module = api.load_module(&common::standard_module().spec()).unwrap();
    let add_one = api.get_function(module.module, "add_one_u32").unwrap();
    let config = LaunchConfig {
        grid: [N.div_ceil(64), 1, 1],
        block: [64, 1, 1],
        shared_memory_bytes: 0,
    };
    let bindings = [buf];
    let constants = [N - 1]; // the last element stays 7
    let params = KernelParams {
        bindings: &bindings,
        constants: &constants,
        status: None,
    };
    // A launch must pass exactly the entry point's signature: nothing reaches the driver.
    for wrong in [
        KernelParams {
            constants: &[],
            ..params
        },
        KernelParams {
            status: Some(buf),
            ..params
        },
    ] {
        let err = api.launch_kernel(add_one, &config, &wrong, s).unwrap_err();
        assert_eq!(err.code(), StatusCode::InvalidArgument, "{err}");
        assert!(
            err.message().contains("takes 1 bindings and 1 constants"),
            "{err}"
        );
    }
    api.launch_kernel(add_one, &config, &params, s).unwrap();

    // Two more increments in a captured graph, launched twice.
    api.begin_capture(s).unwrap();
    api.launch_kernel(add_one, &config, &params, s).unwrap();
    api.launch_kernel(add_one, &config, &params, s).unwrap();
    // One-shot host functions (and reads, which use one) cannot be replayed by a graph.
    let err = api.launch_host_func(s, Box::new(|| {})).unwrap_err();
    assert_eq!(err.code(), StatusCode::FailedPrecondition, "{err}");
    let graph = api.end_capture(s).unwrap();
    // SAFETY: the graph's kernels use `buf`, live until after the stream is synchronised.
    unsafe {
        api.launch_graph(graph, s).unwrap();
        api.launch_graph(graph, s).unwrap();
    }

    let ran = Arc::new(AtomicU32::new(0));
    let flag = ran.clone();
    api.launch_host_func(
        s,
        Box::new(move || {
            flag.fetch_add(1, Ordering::SeqCst);
        }),
    )
    .unwrap();
    let mut out = vec![0u32; N as usize];
    // SAFETY: `out` lives, untouched, until the stream is synchronised below.
    unsafe {
        api.copy_device_to_host_async(out.as_mut_ptr().cast(), buf, bytes, s)
            .unwrap()
    };
    api.record_event(e, s).unwrap();
    api.synchronize_event(e).unwrap();
    assert!(api.query_event(e).unwrap());
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(
        out[..N as usize - 1].iter().all(|&v| v == 12),
        "{:?}",
        &out[..8]
    );
    assert_eq!(out[N as usize - 1], 7);
    assert_eq!(api.pending_host_funcs(), 0);

    // Host to device, device to device, 1- and 2-byte fills.
    let other = api.allocate(bytes, MemoryPlacement::Device).unwrap();
    let input: Vec<u32> = (0..N).collect();
    // SAFETY: `input` lives, unmodified, until the stream is synchronised.
    unsafe {
        api.copy_host_to_device_async(other, input.as_ptr().cast(), bytes, s)
            .unwrap()
    };
    api.copy_device_to_device_async(buf, other, bytes, s)
        .unwrap();
    api.memset_async(buf, 0xab, 1, 4, s).unwrap();
    api.memset_async(buf.offset(4), 0xcdef, 2, 4, s).unwrap();
    let mut back = vec![0u32; N as usize];
    // SAFETY: as above.
    unsafe {
        api.copy_device_to_host_async(back.as_mut_ptr().cast(), buf, bytes, s)
            .unwrap()
    };
    api.synchronize_stream(s).unwrap();
    assert_eq!(back[0], 0xabab_abab);
    assert_eq!(back[1], 0xcdef_cdef);
    assert_eq!(&back[2..], &input[2..]);
    let err = api.memset_async(buf.offset(2), 1, 4, 4, s).unwrap_err();
    assert_eq!(err.code(), StatusCode::InvalidArgument);

    // Stream-ordered allocation, where the device has memory pools.
    if info
        .capabilities
        .contains(Capabilities::STREAM_ORDERED_ALLOC)
    {
        let p = api.allocate_async(4096, s).unwrap();
        api.memset_async(p, 0, 4, 4096, s).unwrap();
        api.free_async(p, s).unwrap();
        api.synchronize_stream(s).unwrap();
    }

    // Managed memory has one address for host and device.
    if let Ok(managed) = api.allocate(4096, MemoryPlacement::HostVisible) {
        let host = api
            .host_pointer(managed)
            .expect("managed memory has a host address");
        assert_eq!(host.as_ptr() as u64, managed.0);
        api.free(managed).unwrap();
    }

    api.destroy_graph(graph).unwrap();
    api.unload_module(module.module).unwrap();
    api.free(buf).unwrap();
    api.free(other).unwrap();
    api.destroy_event(e).unwrap();
    api.destroy_stream(s).unwrap();
}

/// Every handle is checked before it reaches the driver, which would dereference it
/// unchecked: a destroyed one, a made-up one, and another API's (two `CudaApi`s of one device
/// share its context) are `InvalidArgument` errors naming it, and both APIs stay usable. (The
/// fake driver aborts the process when a destroyed or unknown handle reaches it.)
#[test]
fn stale_made_up_and_foreign_handles_are_refused() {
    let Some(api) = api_or_skip("stale_made_up_and_foreign_handles_are_refused") else {
        return;
    };
    let other = CudaApi::new(probe::probe().unwrap(), 0).unwrap();
    let s = api.create_stream().unwrap();
    let e = api.create_event(EventFlags::DISABLE_TIMING).unwrap();
    let buf = api.allocate(64, MemoryPlacement::Device).unwrap();
    let loaded = api.load_module(&common::standard_module().spec()).unwrap();
    let f = api.get_function(loaded.module, "add_one_u32").unwrap();
    api.begin_capture(s).unwrap();
    api.memset_async(buf, 0, 4, 64, s).unwrap();
    let graph = api.end_capture(s).unwrap();
    let (foreign_s, foreign_e) = (
        other.create_stream().unwrap(),
        other.create_event(EventFlags::DISABLE_TIMING).unwrap(),
    );
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [16, 1, 1],
        shared_memory_bytes: 0,
    };
    let params = KernelParams {
        bindings: &[buf],
        constants: &[16],
        status: None,
    };
    let refused = |result: halcyon::Result<()>, what: &str| {
        let err = result.expect_err(what);
        assert_eq!(err.code(), StatusCode::InvalidArgument, "{what}: {err}");
        assert!(
            err.message().contains("is not a live CUDA"),
            "{what}: {err}"
        );
    };

    let (bogus_s, bogus_e) = (StreamHandle(0xdead_0000), EventHandle(0xdead_0040));
    let mut host = [0u8; 64];
    let checks: Vec<(&str, halcyon::Result<()>)> = vec![
        ("a made-up stream", api.record_event(e, bogus_s)),
        ("a made-up event", api.record_event(bogus_e, s)),
        ("another API's stream", api.record_event(e, foreign_s)),
        ("another API's event", api.stream_wait_event(s, foreign_e)),
        ("query", api.query_event(bogus_e).map(drop)),
        ("event sync", api.synchronize_event(foreign_e)),
        ("stream sync", api.synchronize_stream(bogus_s)),
        ("fill", api.memset_async(buf, 0, 4, 64, bogus_s)),
        (
            "copy",
            api.copy_device_to_device_async(buf, buf, 0x20, bogus_s),
        ),
        // SAFETY: refused before anything is enqueued.
        ("upload", unsafe {
            api.copy_host_to_device_async(buf, host.as_ptr(), 64, bogus_s)
        }),
        // SAFETY: as above.
        ("download", unsafe {
            api.copy_device_to_host_async(host.as_mut_ptr(), buf, 64, foreign_s)
        }),
        (
            "host function",
            api.launch_host_func(bogus_s, Box::new(|| {})),
        ),
        ("launch", api.launch_kernel(f, &config, &params, bogus_s)),
        (
            "a made-up function",
            api.launch_kernel(FunctionHandle(0xdead_0080), &config, &params, s),
        ),
        (
            "a made-up module",
            api.get_function(ModuleHandle(0xdead_00c0), "add_one_u32")
                .map(drop),
        ),
        (
            "a made-up graph",
            // SAFETY: a made-up graph is refused before anything runs.
            unsafe { api.launch_graph(GraphHandle(0xdead_0100), s) },
        ),
        ("capture", api.begin_capture(foreign_s)),
        ("end of a capture", api.end_capture(bogus_s).map(drop)),
        ("destroy", api.destroy_stream(foreign_s)),
    ];
    for (what, result) in checks {
        refused(result, what);
    }
    let err = api.get_function(loaded.module, "nope").unwrap_err();
    assert_eq!(err.code(), StatusCode::NotFound, "{err}");
    assert!(
        err.message().contains("add_one_u32"),
        "names the entry points: {err}"
    );

    // Destroyed handles, each after its destroy succeeded.
    api.destroy_graph(graph).unwrap();
    // SAFETY: a destroyed graph is refused before anything runs.
    refused(unsafe { api.launch_graph(graph, s) }, "a destroyed graph");
    refused(api.destroy_graph(graph), "a graph destroyed twice");
    api.unload_module(loaded.module).unwrap();
    refused(
        api.launch_kernel(f, &config, &params, s),
        "a function of an unloaded module",
    );
    refused(
        api.get_function(loaded.module, "add_one_u32").map(drop),
        "an unloaded module",
    );
    refused(api.unload_module(loaded.module), "a module unloaded twice");
    api.destroy_event(e).unwrap();
    refused(api.record_event(e, s), "a destroyed event");
    refused(api.destroy_event(e), "an event destroyed twice");
    api.destroy_stream(s).unwrap();
    refused(api.synchronize_stream(s), "a destroyed stream");
    refused(api.free_async(buf, s), "a free on a destroyed stream");
    refused(api.destroy_stream(s), "a stream destroyed twice");

    // Nothing was lost: both APIs still work, the other one's objects untouched.
    other.record_event(foreign_e, foreign_s).unwrap();
    other.synchronize_event(foreign_e).unwrap();
    other.destroy_event(foreign_e).unwrap();
    other.destroy_stream(foreign_s).unwrap();
    let s = api.create_stream().unwrap();
    api.memset_async(buf, 0, 4, 64, s).unwrap();
    api.synchronize_stream(s).unwrap();
    api.destroy_stream(s).unwrap();
    api.free(buf).unwrap();
}

/// Every address is checked against the API's live allocations before the driver sees it: a
/// free must name the base of one (and frees it once, with the call of its allocator), and a
/// copy or fill must lie within one. A range running past its allocation would otherwise write
/// whatever lies next to it (for pinned memory, the process's own), and a freed address may
/// belong to a newer allocation.
#[test]
fn frees_and_ranges_are_checked_against_live_allocations() {
    let Some(api) = api_or_skip("frees_and_ranges_are_checked_against_live_allocations") else {
        return;
    };
    let s = api.create_stream().unwrap();
    let buf = api.allocate(256, MemoryPlacement::Device).unwrap();
    let other = api.allocate(256, MemoryPlacement::Device).unwrap();
    let mut host = [0u8; 512];
    let refused = |result: halcyon::Result<()>, what: &str, says: &str| {
        let err = result.expect_err(what);
        assert_eq!(err.code(), StatusCode::InvalidArgument, "{what}: {err}");
        assert!(err.message().contains(says), "{what}: {err}");
    };
    let outside = "do not lie within one live allocation";
    refused(
        api.memset_async(buf.offset(128), 0, 4, 256, s),
        "a fill past the end",
        outside,
    );
    refused(
        api.copy_device_to_device_async(other, buf.offset(8), 256, s),
        "a copy from past the end",
        outside,
    );
    refused(
        api.copy_device_to_device_async(DevicePtr(0x1000), buf, 16, s),
        "a copy to an address nobody allocated",
        outside,
    );
    refused(
        // SAFETY: refused before anything is enqueued.
        unsafe { api.copy_host_to_device_async(buf.offset(1), host.as_ptr(), 256, s) },
        "an upload past the end",
        outside,
    );
    refused(
        // SAFETY: as above.
        unsafe { api.copy_device_to_host_async(host.as_mut_ptr(), buf, 512, s) },
        "a download past the end",
        outside,
    );
    refused(
        api.free(buf.offset(16)),
        "a free inside an allocation",
        "is not the start",
    );
    refused(
        api.free_async(buf, s),
        "a stream-ordered free of device memory",
        "free it with free()",
    );
    assert_eq!(api.host_pointer(buf), None, "device memory");

    // Within bounds everything works, up to the last byte.
    api.memset_async(buf, 0x0101_0101, 4, 256, s).unwrap();
    api.copy_device_to_device_async(other.offset(255), buf.offset(255), 1, s)
        .unwrap();
    // SAFETY: `host` outlives the copy (the stream is synchronised below).
    unsafe { api.copy_device_to_host_async(host.as_mut_ptr(), other.offset(255), 1, s) }.unwrap();
    api.synchronize_stream(s).unwrap();
    assert_eq!(host[0], 1);

    api.free(buf).unwrap();
    refused(api.free(buf), "a second free", "is not the start");
    refused(
        api.memset_async(buf, 0, 4, 4, s),
        "a fill of freed memory",
        outside,
    );

    if let Ok(pinned) = api.allocate(64, MemoryPlacement::Pinned) {
        assert_eq!(
            api.host_pointer(pinned.offset(8))
                .map(|p| p.as_ptr() as u64),
            Some(pinned.0 + 8)
        );
        api.free(pinned).unwrap();
        assert_eq!(api.host_pointer(pinned), None, "freed");
    }
    if api
        .info()
        .capabilities
        .contains(Capabilities::STREAM_ORDERED_ALLOC)
    {
        let p = api.allocate_async(128, s).unwrap();
        api.memset_async(p, 0, 4, 128, s).unwrap();
        api.free_async(p, s).unwrap();
        refused(
            api.free_async(p, s),
            "a second stream-ordered free",
            "is not the start",
        );
        refused(
            api.free(p),
            "a free after a stream-ordered one",
            "is not the start",
        );
        api.synchronize_stream(s).unwrap();
    }
    api.free(other).unwrap();
    api.destroy_stream(s).unwrap();
}

/// Other CUDA code on the same thread (the CUDA runtime, cudarc's safe layer, a second
/// device) may leave no context current between two calls: each call makes its own context
/// current again, and with nothing to give back leaves it current (giving another context
/// back: `calls_give_another_current_context_back`).
#[test]
fn calls_bind_their_context_whatever_is_current() {
    let Some(api) = api_or_skip("calls_bind_their_context_whatever_is_current") else {
        return;
    };
    let s = api.create_stream().unwrap();
    assert_eq!(
        current_context(),
        api.context(),
        "the API made its context current"
    );
    let buf = api.allocate(16, MemoryPlacement::Device).unwrap();
    for round in 0..2u8 {
        // SAFETY: making no context current is always allowed; the API binds its own again.
        let code = unsafe { halcyon_cuda::sys::cuCtxSetCurrent(std::ptr::null_mut()) };
        assert!(code.is_success(), "cuCtxSetCurrent(null): {code:?}");
        api.memset_async(buf, u32::from(round) + 1, 1, 16, s)
            .unwrap();
        assert_eq!(current_context(), api.context(), "round {round}");
        let mut out = [0u8; 16];
        // SAFETY: nothing current again before a call that must bind first.
        let code = unsafe { halcyon_cuda::sys::cuCtxSetCurrent(std::ptr::null_mut()) };
        assert!(code.is_success(), "cuCtxSetCurrent(null): {code:?}");
        // SAFETY: `out` outlives the copy: the stream is synchronised before it is read.
        unsafe { api.copy_device_to_host_async(out.as_mut_ptr(), buf, 16, s) }.unwrap();
        api.synchronize_stream(s).unwrap();
        assert_eq!(out, [round + 1; 16], "round {round}");
    }
    api.free(buf).unwrap();
    api.destroy_stream(s).unwrap();
}

/// A call on a thread where another context is current (the CUDA runtime's after
/// `cudaSetDevice`, a library's, another device's) makes that context current again before it
/// returns, so halcyon never moves other CUDA code on a shared thread to its device; on a
/// thread with no context current, the API's own stays current for the next call. Needs a
/// second device (the fake driver has two); skipped with one.
#[test]
fn calls_give_another_current_context_back() {
    const TEST: &str = "calls_give_another_current_context_back";
    let Some(api) = api_or_skip(TEST) else {
        return;
    };
    let other = match probe::probe().and_then(|probe| CudaApi::new(probe, 1)) {
        Ok(other) => other,
        Err(e) => {
            eprintln!("skipped {TEST}: no second device: {e}");
            return;
        }
    };
    // A fresh thread: nothing is current on it yet.
    std::thread::spawn(move || {
        assert!(
            current_context().is_null(),
            "a new thread starts with no context"
        );
        let s = api.create_stream().unwrap();
        assert_eq!(
            current_context(),
            api.context(),
            "on a thread with none, the API's stays"
        );
        // SAFETY: the other device's retained primary context, alive while `other` is.
        let code = unsafe { halcyon_cuda::sys::cuCtxSetCurrent(other.context()) };
        assert!(code.is_success(), "cuCtxSetCurrent(other): {code:?}");
        let buf = api.allocate(16, MemoryPlacement::Device).unwrap();
        assert_eq!(current_context(), other.context(), "after allocate");
        api.memset_async(buf, 7, 1, 16, s).unwrap();
        assert_eq!(current_context(), other.context(), "after memset_async");
        let mut out = [0u8; 16];
        // SAFETY: `out` outlives the copy: the stream is synchronised before it is read.
        unsafe { api.copy_device_to_host_async(out.as_mut_ptr(), buf, 16, s) }.unwrap();
        api.synchronize_stream(s).unwrap();
        assert_eq!(
            current_context(),
            other.context(),
            "after a copy and a synchronisation"
        );
        assert_eq!(out, [7; 16], "the work ran on the API's own device");
        // The other device's API finds its context current and keeps it.
        let t = other.create_stream().unwrap();
        other.destroy_stream(t).unwrap();
        assert_eq!(
            current_context(),
            other.context(),
            "after the other API's calls"
        );
        api.free(buf).unwrap();
        api.destroy_stream(s).unwrap();
        assert_eq!(
            current_context(),
            other.context(),
            "after free and destroy_stream"
        );
    })
    .join()
    .unwrap();
}

/// A context a dropped `CudaApi` left current on a thread is still given back by another
/// device's calls while someone else retains it (here the first API, standing for the CUDA
/// runtime or the application sharing the device's primary context): code on the thread may
/// go on using it without making it current again. Needs a second device; skipped with one.
#[test]
fn a_context_a_dropped_api_left_is_given_back_while_someone_retains_it() {
    const TEST: &str = "a_context_a_dropped_api_left_is_given_back_while_someone_retains_it";
    let Some(api) = api_or_skip(TEST) else {
        return;
    };
    let other = match probe::probe().and_then(|probe| CudaApi::new(probe, 1)) {
        Ok(other) => other,
        Err(e) => {
            eprintln!("skipped {TEST}: no second device: {e}");
            return;
        }
    };
    std::thread::spawn(move || {
        // A second API on device 0 (`api`'s), used and dropped on this thread: its context
        // stays current, and `api` still retains it.
        let second = CudaApi::new(api.probe(), 0).unwrap();
        assert_eq!(second.context(), api.context(), "one primary context");
        let s = second.create_stream().unwrap();
        second.destroy_stream(s).unwrap();
        assert_eq!(current_context(), api.context());
        drop(second);
        assert_eq!(current_context(), api.context(), "dropping binds nothing");
        for round in 0..2 {
            let t = other.create_stream().unwrap();
            assert_eq!(
                current_context(),
                api.context(),
                "round {round}: the other device's call gave the retained context back"
            );
            other.destroy_stream(t).unwrap();
            assert_eq!(current_context(), api.context(), "round {round}");
        }
        // The first device's own API finds its context current and keeps it.
        let s = api.create_stream().unwrap();
        api.destroy_stream(s).unwrap();
        assert_eq!(current_context(), api.context());
    })
    .join()
    .unwrap();
}

/// Pinned memory: one address for host and device, read and written by kernels over the
/// bus, and copied to and from device memory as a plain DMA (no staging, no host function):
/// pinned → device → pinned → device, then read back through ordinary (staged) memory.
#[test]
fn pinned_memory_round_trip() {
    let Some(api) = api_or_skip("pinned_memory_round_trip") else {
        return;
    };
    let err = api.allocate(0, MemoryPlacement::Pinned).unwrap_err();
    assert_eq!(err.code(), StatusCode::InvalidArgument, "{err}");

    const N: u32 = 1024;
    let bytes = u64::from(N) * 4;
    // Two halves: the source of the first copy, then the destination of the second.
    let pinned = match api.allocate(2 * bytes, MemoryPlacement::Pinned) {
        Ok(pinned) => pinned,
        Err(e) if e.code() == StatusCode::Unimplemented => {
            eprintln!("skipped pinned_memory_round_trip: {e}");
            return;
        }
        Err(e) => panic!("pinned_memory_round_trip: {e}"),
    };
    let host = api
        .host_pointer(pinned)
        .expect("pinned memory has a host address");
    assert_eq!(host.as_ptr() as u64, pinned.0, "the same address");
    assert_eq!(
        api.host_pointer(pinned.offset(bytes + 4))
            .map(|p| p.as_ptr() as u64),
        Some(pinned.0 + bytes + 4),
        "inside the allocation too"
    );
    let words = host.as_ptr().cast::<u32>();
    let input: Vec<u32> = (0..N).map(|i| i * 3).collect();
    // SAFETY: the allocation holds 2 * N words, 4-byte aligned (page-aligned); no device
    // work uses it yet.
    unsafe {
        std::ptr::copy_nonoverlapping(input.as_ptr(), words, N as usize);
        std::ptr::write_bytes(words.add(N as usize), 0, N as usize);
    }

    let s = api.create_stream().unwrap();
    let buf = api.allocate(bytes, MemoryPlacement::Device).unwrap();
    let other = api.allocate(bytes, MemoryPlacement::Device).unwrap();
    let module = api.load_module(&common::standard_module().spec()).unwrap();
    let add_one = api.get_function(module.module, "add_one_u32").unwrap();
    let config = LaunchConfig {
        grid: [N.div_ceil(64), 1, 1],
        block: [64, 1, 1],
        shared_memory_bytes: 0,
    };
    let constants = [N];

    let host_funcs = api.host_funcs_enqueued();
    // SAFETY: the first half of `pinned` stays valid and unmodified until the stream is
    // synchronised below; the second half is touched by nothing else until then.
    unsafe {
        api.copy_host_to_device_async(buf, host.as_ptr(), bytes, s)
            .unwrap();
    }
    let bindings = [buf];
    let params = KernelParams {
        bindings: &bindings,
        constants: &constants,
        status: None,
    };
    api.launch_kernel(add_one, &config, &params, s).unwrap();
    // A kernel reads and writes the pinned memory itself, at its host address.
    let bindings = [pinned];
    let params = KernelParams {
        bindings: &bindings,
        constants: &constants,
        status: None,
    };
    api.launch_kernel(add_one, &config, &params, s).unwrap();
    // SAFETY: as above.
    unsafe {
        api.copy_device_to_host_async(host.as_ptr().add(bytes as usize), buf, bytes, s)
            .unwrap();
        api.copy_host_to_device_async(other, host.as_ptr().add(bytes as usize), bytes, s)
            .unwrap();
    }
    assert_eq!(
        api.host_funcs_enqueued(),
        host_funcs,
        "copies to and from pinned memory enqueue no host function"
    );
    api.synchronize_stream(s).unwrap();
    let expected: Vec<u32> = input.iter().map(|v| v + 1).collect();
    // SAFETY: every copy and kernel using `pinned` completed (synchronised above).
    let (first, second) = unsafe {
        (
            std::slice::from_raw_parts(words, N as usize).to_vec(),
            std::slice::from_raw_parts(words.add(N as usize), N as usize).to_vec(),
        )
    };
    assert_eq!(first, expected, "the kernel incremented the pinned memory");
    assert_eq!(second, expected, "device to pinned");
    // Pinned to device: read back through ordinary (pageable, so staged) memory.
    let mut back = vec![0u32; N as usize];
    // SAFETY: `back` lives, untouched, until the stream is synchronised.
    unsafe {
        api.copy_device_to_host_async(back.as_mut_ptr().cast(), other, bytes, s)
            .unwrap();
    }
    api.synchronize_stream(s).unwrap();
    assert_eq!(back, expected, "pinned to device");

    // While capturing, a read is refused even into pinned memory.
    api.begin_capture(s).unwrap();
    api.memset_async(buf, 0, 4, bytes, s).unwrap();
    // SAFETY: refused before anything is enqueued.
    let err =
        unsafe { api.copy_device_to_host_async(host.as_ptr().add(bytes as usize), buf, bytes, s) }
            .unwrap_err();
    assert_eq!(err.code(), StatusCode::FailedPrecondition, "{err}");
    let graph = api.end_capture(s).unwrap();
    api.destroy_graph(graph).unwrap();

    api.free(pinned).unwrap();
    // One left for the API to free when it drops.
    let kept = api.allocate(4096, MemoryPlacement::Pinned).unwrap();
    assert!(api.host_pointer(kept).is_some());
    api.unload_module(module.module).unwrap();
    api.free(buf).unwrap();
    api.free(other).unwrap();
    api.destroy_stream(s).unwrap();
}

/// Loading reports bad PTX with the JIT log, a signature that does not match the
/// metadata, and a missing kernel.
#[test]
fn module_load_errors() {
    let Some(api) = api_or_skip("module_load_errors") else {
        return;
    };
    let bad = CudaModule::ptx(
        ".version 8.0\n.target sm_52\n.address_size 64\n.visible .entry empty()\n{\n\tbogus;\n}\n",
        vec![common::empty()],
    );
    let e = api.load_module(&bad.spec()).unwrap_err();
    assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
    assert!(e.message().contains("CUDA_ERROR_INVALID_PTX"), "{e}");
    println!("{e}");

    // A kernel limited to 64 threads per block (`.maxntid`; registers can limit it the same
    // way) cannot run a 128-thread workgroup: refused at load, naming the limit, instead of
    // failing every dispatch with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES. 64 threads load.
    let limited = ".version 8.0\n.target sm_52\n.address_size 64\n\
                   .visible .entry empty()\n.maxntid 64, 1, 1\n{\n\tret;\n}\n";
    let mut too_wide = common::empty();
    too_wide.workgroup_size = [32, 4, 1];
    let e = api
        .load_module(&CudaModule::ptx(limited, vec![too_wide]).spec())
        .unwrap_err();
    assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
    assert!(e.message().contains("at most 64 threads per block"), "{e}");
    let mut fits = common::empty();
    fits.workgroup_size = [64, 1, 1];
    let loaded = api
        .load_module(&CudaModule::ptx(limited, vec![fits]).spec())
        .unwrap();
    api.unload_module(loaded.module).unwrap();

    // add_one_u32 takes (pointer, u32); declaring two bindings is refused on every driver:
    // the PTX's `.param`s say so (and cuFuncGetParamInfo, on CUDA 12.4+ drivers).
    let mut wrong = kernels::add_one_u32();
    wrong.binding_count = 2;
    wrong.constant_count = 0;
    let wrong = CudaModule::ptx(common::STANDARD_PTX, vec![wrong]).spec();
    let e = api.load_module(&wrong).unwrap_err();
    assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
    assert!(
        e.message().contains("takes 2 parameters of sizes [8, 4]"),
        "{e}"
    );

    // The standard kernels: only `fail` takes a status word, in PTX and as the driver
    // reports it where it can (CUDA 12.4+).
    let mut entry_points = common::standard_entry_points();
    entry_points.push(common::empty());
    let loaded = api
        .load_module(&CudaModule::ptx(common::STANDARD_PTX, entry_points).spec())
        .unwrap();
    assert_eq!(loaded.status_words, [false, false, true, false]);

    // `fail` writes 1 to the word it is launched with, and nothing else.
    let fail = api.get_function(loaded.module, "fail").unwrap();
    let s = api.create_stream().unwrap();
    let words = api.allocate(16, MemoryPlacement::Device).unwrap();
    api.memset_async(words, 0, 4, 16, s).unwrap();
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_memory_bytes: 0,
    };
    let params = KernelParams {
        bindings: &[],
        constants: &[],
        status: Some(words.offset(8)),
    };
    // The word must be 4 aligned bytes of the API's own live memory: the kernel stores to it.
    for (word, expected) in [
        (DevicePtr(0x10), "status word: 4 bytes at"),
        (words.offset(6), "not 4-byte aligned"),
        (words.offset(16), "status word: 4 bytes at"),
    ] {
        let wrong = KernelParams {
            status: Some(word),
            ..params
        };
        let e = api.launch_kernel(fail, &config, &wrong, s).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        assert!(e.message().contains(expected), "{expected}: {e}");
    }
    api.launch_kernel(fail, &config, &params, s).unwrap();
    let mut out = [7u32; 4];
    // SAFETY: `out` outlives the copy (the stream is synchronised below).
    unsafe {
        api.copy_device_to_host_async(out.as_mut_ptr().cast(), words, 16, s)
            .unwrap()
    };
    api.synchronize_stream(s).unwrap();
    assert_eq!(out, [0, 0, 1, 0]);
    api.free(words).unwrap();
    api.destroy_stream(s).unwrap();
    api.unload_module(loaded.module).unwrap();

    let loaded = api.load_module(&common::standard_module().spec()).unwrap();
    let e = api.get_function(loaded.module, "nope").unwrap_err();
    assert_eq!(e.code(), StatusCode::NotFound, "{e}");
    api.unload_module(loaded.module).unwrap();
}

/// A kernel using dynamic shared memory gets what its entry point declares: 64 KiB, above the
/// 48 KiB a kernel may use without opting in, through direct dispatches and a reusable command
/// buffer executed three times (issued, captured into a graph, launched as the graph). A
/// declaration no block of the device can have is refused at load, naming the limit.
#[test]
fn dynamic_shared_memory_reaches_the_kernel() {
    use halcyon::{Binding, CommandBuffer, CommandBufferMode};
    if !prepared("dynamic_shared_memory_reaches_the_kernel") {
        return;
    }
    let options = halcyon_cuda::CudaDeviceOptions::default().with_graphs(true);
    let device = match halcyon_cuda::create_device_with(0, options) {
        Ok(device) => device,
        Err(e) if e.code() == StatusCode::Unavailable => {
            eprintln!("skipped dynamic_shared_memory_reaches_the_kernel: {e}");
            return;
        }
        Err(e) => panic!("cuda://0: {e}"),
    };
    // The kernel's PTX targets sm_75 (NVRTC 13 targets nothing older).
    let name = device.info().name.clone();
    let sm = name
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .find_map(|word| word.strip_prefix("sm_")?.parse::<u32>().ok());
    if sm.is_some_and(|sm| sm < 75) {
        eprintln!("skipped dynamic_shared_memory_reaches_the_kernel: {name} predates sm_75");
        return;
    }
    const WORDS: u32 = 16 << 10; // 64 KiB
    let executable = device
        .load_executable(&common::shared_module(4 * WORDS).spec())
        .unwrap();
    let queue = device.queue(0).unwrap();
    const N: u32 = 1000;
    let blocks = N.div_ceil(64);
    let data: Vec<u32> = (0..N).map(|i| i * 7 + 1).collect();
    let expected: Vec<u32> = data.chunks(64).map(|c| c.iter().sum()).collect();
    block_on(async {
        let x = upload_u32(&queue, &data).await?;
        let out = upload_u32(&queue, &vec![0; blocks as usize]).await?;
        queue
            .dispatch(
                Timepoints::default(),
                &executable
                    .kernel_at(0)?
                    .launch([blocks, 1, 1])
                    .constant(N)
                    .constant(WORDS)
                    .binding(x.whole())
                    .binding(out.whole()),
            )
            .await?;
        assert_eq!(
            download_u32(&queue, Fence::new(), &out.whole()).await?,
            expected
        );
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder.fill(0u8, out.whole())?;
        let bindings = [Binding::from(x.whole()), Binding::from(out.whole())];
        builder.dispatch(
            &executable
                .kernel_at(0)?
                .launch([blocks, 1, 1])
                .constant(N)
                .constant(WORDS)
                .bindings(bindings),
        )?;
        let list = builder.finish();
        for round in 0..3 {
            queue.execute(Timepoints::default(), &list, None).await?;
            let sums = download_u32(&queue, Fence::new(), &out.whole()).await?;
            assert_eq!(sums, expected, "round {round}");
        }
        Ok::<(), halcyon::Error>(())
    })
    .unwrap();
    let launches = device.query(halcyon_stream::keys::GRAPH_LAUNCHES).unwrap();
    assert!(launches >= 1, "the third execution launches the graph");

    let Err(e) = device.load_executable(&common::shared_module(1 << 30).spec()) else {
        panic!("1 GiB of shared memory per block is refused");
    };
    assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
    assert!(
        e.message().contains("may have at most") && e.message().contains("declare less"),
        "{e}"
    );
}

/// The device end to end: upload, dispatch with a parked wait released by the host,
/// download; and host-visible buffers mapped by the host.
#[test]
fn device_dispatch_and_mapping() {
    if !prepared("device_dispatch_and_mapping") {
        return;
    }
    let Some(device) = common::device_or_skip("device_dispatch_and_mapping") else {
        return;
    };
    println!("{}", device.info().name);
    let executable = device
        .load_executable(&common::standard_module().spec())
        .unwrap();
    let add_one = executable.kernel("add_one_u32").unwrap();
    let queue = device.queue(0).unwrap();
    block_on(async {
        let data: Vec<u32> = (0..4096).collect();
        let buffer = upload_u32(&queue, &data).await?;
        let gate = device.create_semaphore(0)?;
        let mut wait = Fence::new();
        wait.insert(&gate, 1);
        let dispatch = queue.dispatch(
            Timepoints::new(wait, Fence::new()),
            &add_one
                .launch([64, 1, 1])
                .constant(4096u32)
                .binding(buffer.whole()),
        );
        gate.signal(1)?;
        dispatch.await?;
        let out = download_u32(&queue, Fence::new(), &buffer.whole()).await?;
        assert_eq!(out, data.iter().map(|v| v + 1).collect::<Vec<_>>());
        Ok(())
    })
    .unwrap();
    // Host-visible (managed) memory: written by the host, incremented by the device, read
    // back by the host.
    let buffer = match device.allocator().allocate(256 * 4, BufferParams::HOST) {
        Ok(buffer) => buffer,
        Err(e) => {
            println!("no host-visible buffers: {e}");
            return;
        }
    };
    {
        let mut map = buffer.map_write(..).unwrap();
        for (i, chunk) in map.chunks_exact_mut(4).enumerate() {
            chunk.copy_from_slice(&(i as u32 * 3).to_le_bytes());
        }
    }
    block_on(
        queue.dispatch(
            Timepoints::default(),
            &add_one
                .launch([4, 1, 1])
                .constant(256u32)
                .binding(buffer.whole()),
        ),
    )
    .unwrap();
    let map = buffer.map_read(..).unwrap();
    let values: &[u32] = map.as_slice().unwrap();
    assert!(values
        .iter()
        .enumerate()
        .all(|(i, &v)| v == i as u32 * 3 + 1));
}

/// One thread begins and ends captures on a stream while another enqueues fills and host
/// functions on it: the driver crashed in `cuMemsetD8Async` or `cuLaunchHostFunc` within half
/// a second on an H200 when a capture began or ended under such an enqueue, and a capture
/// beginning between a host function's capture check and its `cuLaunchHostFunc` took the
/// one-shot function into the graph. Each enqueue now either reaches the stream outside any
/// capture or into one it is allowed in, or is refused (`FailedPrecondition`, a host function
/// during a capture); every host function enqueued runs or is counted as captured.
#[test]
fn captures_and_enqueues_on_one_stream_from_two_threads() {
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};
    let Some(mut api) = api_or_skip("captures_and_enqueues_on_one_stream_from_two_threads") else {
        return;
    };
    api.enable_graphs();
    let api = Arc::new(api);
    let s = api.create_stream().unwrap();
    let len = 4096u64;
    let d = api.allocate(len, MemoryPlacement::Device).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let capturer = {
        let (api, stop) = (api.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut captures = 0;
            while !stop.load(Ordering::Relaxed) {
                api.begin_capture(s).unwrap();
                std::thread::yield_now();
                let graph = api.end_capture(s).unwrap();
                api.destroy_graph(graph).unwrap();
                captures += 1;
            }
            captures
        })
    };
    let ran = Arc::new(AtomicU32::new(0));
    let (mut fills, mut funcs, mut refused) = (0u32, 0u32, 0u32);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(800) {
        api.memset_async(d, 1, 1, len, s).unwrap();
        fills += 1;
        let counter = ran.clone();
        match api.launch_host_func(
            s,
            Box::new(move || {
                counter.fetch_add(1, Ordering::SeqCst);
            }),
        ) {
            Ok(()) => funcs += 1,
            Err(e) if e.code() == StatusCode::FailedPrecondition => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let captures = capturer.join().unwrap();
    api.synchronize_stream(s).unwrap();
    // Host functions accepted were enqueued outside every capture: they all ran.
    assert_eq!(ran.load(Ordering::SeqCst), funcs, "refused {refused}");
    println!(
        "{fills} fills, {funcs} host functions ({refused} refused) beside {captures} captures"
    );
    api.free(d).unwrap();
    api.destroy_stream(s).unwrap();
}

/// The pinned copy a captured host-to-device update needs lives as long as its graph: the
/// graph replays it (twice here, after the source changed), and once the graph is destroyed
/// the next call that may wait for the device (`synchronize_stream`) frees it. (A capture that
/// makes no graph retires its copies the same way; destroying a stream mid-capture to show it
/// would leave the fake driver a capturing stream that invalidates other tests' captures.)
#[test]
fn captured_update_copies_live_as_long_as_their_graph() {
    let Some(mut api) = api_or_skip("captured_update_copies_live_as_long_as_their_graph") else {
        return;
    };
    api.enable_graphs();
    let s = api.create_stream().unwrap();
    const BYTES: usize = 4096;
    let d = api.allocate(BYTES as u64, MemoryPlacement::Device).unwrap();
    let mut source = vec![3u8; BYTES];
    api.begin_capture(s).unwrap();
    // SAFETY: `source` is readable for the call (the captured copy takes a pinned copy of it).
    unsafe {
        api.copy_host_to_device_async(d, source.as_ptr(), BYTES as u64, s)
            .unwrap()
    };
    let graph = api.end_capture(s).unwrap();
    assert_eq!(api.captured_copy_bytes(), BYTES);
    // The graph replays the bytes as captured, not the source's later contents.
    source.fill(9);
    api.memset_async(d, 0, 1, BYTES as u64, s).unwrap();
    // SAFETY: the graph writes `d`, live until it is freed below after a synchronisation.
    unsafe { api.launch_graph(graph, s).unwrap() };
    let mut back = vec![0u8; BYTES];
    // SAFETY: `back` outlives the copy (synchronised below).
    unsafe {
        api.copy_device_to_host_async(back.as_mut_ptr(), d, BYTES as u64, s)
            .unwrap()
    };
    api.synchronize_stream(s).unwrap();
    assert!(
        back.iter().all(|&b| b == 3),
        "the graph replays the captured bytes"
    );
    assert_eq!(
        api.captured_copy_bytes(),
        BYTES,
        "kept while the graph lives"
    );
    api.destroy_graph(graph).unwrap();
    assert_eq!(api.captured_copy_bytes(), BYTES, "retired, not yet freed");
    api.synchronize_stream(s).unwrap();
    assert_eq!(
        api.captured_copy_bytes(),
        0,
        "freed by a call that may wait"
    );

    api.free(d).unwrap();
    api.destroy_stream(s).unwrap();
}
