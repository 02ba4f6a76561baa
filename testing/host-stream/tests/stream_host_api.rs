//! The host stream API on its own (the emulated device the stream layer is tested on): event
//! generations and stream waits, address and fill checks, host functions, kernels and their
//! parameters, stream-ordered frees, sticky faults, shutdown during a hold; and a stream device
//! over an API without host functions.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use halcyon::{BufferParams, EntryPoint, Result, StatusCode, Timepoints};
use halcyon_conformance::harness::{assert_error, block_on, done};
use halcyon_host_stream::{HostModule, HostStreamApi, LaunchArgs};
use halcyon_stream::{
    create_device, CompletionStrategy, DevicePtr, EventFlags, KernelParams, LaunchConfig,
    MemoryPlacement, StreamApi, StreamDeviceOptions,
};

fn entry(name: &str, bindings: u32, constants: u32) -> EntryPoint {
    EntryPoint {
        name: name.into(),
        workgroup_size: [1, 1, 1],
        binding_count: bindings,
        constant_count: constants,
    }
}

/// The host API on its own: event records are generations (a stream wait captures the record it
/// saw, so re-recording does not change it), bad addresses and fills are refused synchronously,
/// host functions run in stream order, kernels get bindings then constants, and stream-ordered
/// frees happen when the stream reaches them.
#[test]
fn host_api_semantics() -> Result<()> {
    let api = HostStreamApi::new();
    let (s0, s1) = (api.create_stream()?, api.create_stream()?);
    let event = api.create_event(EventFlags::BLOCKING_SYNC)?;
    assert!(api.query_event(event)?, "a new event counts as complete");

    // s1 waits for the record of `event` on s0, made after a slow host function on s0.
    let hold = api.hold();
    let first_done = Arc::new(AtomicUsize::new(0));
    let done_flag = first_done.clone();
    api.launch_host_func(
        s0,
        Box::new(move || {
            std::thread::sleep(Duration::from_millis(20));
            done_flag.store(1, Ordering::SeqCst);
        }),
    )?;
    api.record_event(event, s0)?;
    assert!(!api.query_event(event)?);
    api.stream_wait_event(s1, event)?;
    // Re-recording after the wait was enqueued does not change what s1 waits for.
    api.record_event(event, s0)?;
    let seen = Arc::new(AtomicUsize::new(usize::MAX));
    let (flag, s) = (first_done.clone(), seen.clone());
    api.launch_host_func(
        s1,
        Box::new(move || s.store(flag.load(Ordering::SeqCst), Ordering::SeqCst)),
    )?;
    drop(hold);
    api.synchronize_stream(s1)?;
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "s1 ran past its wait before s0 reached the record"
    );
    api.synchronize_event(event)?;
    assert!(api.query_event(event)?);

    // Memory: bad addresses and misaligned fills are refused when enqueued.
    let ptr = api.allocate(64, MemoryPlacement::Device)?;
    let error = api.memset_async(ptr.offset(60), 0, 1, 8, s0).unwrap_err();
    assert_eq!(error.code(), StatusCode::InvalidArgument);
    let error = api.memset_async(ptr.offset(2), 0, 4, 8, s0).unwrap_err();
    assert_eq!(error.code(), StatusCode::InvalidArgument);
    let error = api
        .copy_device_to_device_async(DevicePtr(8), ptr, 4, s0)
        .unwrap_err();
    assert!(error.message().contains("illegal address"), "{error}");

    // A kernel with bindings (pointers) then constants.
    let module = HostModule::new().kernel(entry("store", 1, 2), |args: &LaunchArgs<'_>| {
        // SAFETY: the only binding.
        let out = unsafe { args.binding_mut::<u32>(0) };
        let i = args.block_id()[0] as usize;
        out[i] = args.constants()[0] * 10 + args.constants()[1] + i as u32;
        Ok(())
    });
    let loaded = api.load_module(&module.spec())?;
    let function = api.get_function(loaded.module, "store")?;
    assert_eq!(
        api.get_function(loaded.module, "nope").unwrap_err().code(),
        StatusCode::NotFound
    );
    api.launch_kernel(
        function,
        &LaunchConfig {
            grid: [4, 1, 1],
            block: [1, 1, 1],
            shared_memory_bytes: 0,
        },
        &KernelParams {
            bindings: &[ptr],
            constants: &[3, 4],
            status: None,
        },
        s0,
    )?;
    let mut out = [0u32; 4];
    // SAFETY: `out` outlives the copy (the stream is synchronised below).
    unsafe { api.copy_device_to_host_async(out.as_mut_ptr().cast(), ptr, 16, s0)? };
    api.synchronize_stream(s0)?;
    assert_eq!(out, [34, 35, 36, 37]);

    // Stream-ordered free: the allocation lives until the stream reaches the free.
    let hold = api.hold();
    let before = api.stats().allocations;
    api.free_async(ptr, s0)?;
    assert_eq!(api.stats().allocations, before);
    drop(hold);
    api.synchronize_stream(s0)?;
    assert_eq!(api.stats().allocations, before - 1);
    api.unload_module(loaded.module)?;
    api.destroy_event(event)?;
    api.destroy_stream(s0)?;
    api.destroy_stream(s1)?;
    assert!(api.synchronize_stream(s0).is_err());
    Ok(())
}

/// A stream wait gets the outcome of the record it captured, not of a later record of the same
/// event: the stream layer returns events to its pool (and re-records them) while waits on their
/// previous record may still be queued. Both ways round: a later failed record must not fail the
/// waiting stream, and a later successful one must not hide the awaited record's failure.
#[test]
fn a_stream_wait_gets_the_outcome_of_its_own_record() -> Result<()> {
    let api = HostStreamApi::new();
    let module = HostModule::new()
        .kernel(entry("fail", 0, 0), |_: &LaunchArgs<'_>| {
            Err("failed on purpose".into())
        })
        .kernel(entry("count", 1, 0), |args: &LaunchArgs<'_>| {
            // SAFETY: the only binding, one u32.
            unsafe { args.binding_mut::<u32>(0)[0] += 1 };
            Ok(())
        });
    let loaded = api.load_module(&module.spec())?;
    let fail = api.get_function(loaded.module, "fail")?;
    let count = api.get_function(loaded.module, "count")?;
    let one = LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_memory_bytes: 0,
    };
    let counter = api.allocate(4, MemoryPlacement::Device)?;
    // Enqueues `record` on a new stream, after `work` (failing or not), once `gate` opens.
    let gated_record = |event, failing: bool| -> Result<std::sync::mpsc::Sender<()>> {
        let stream = api.create_stream()?;
        let (open, gate) = std::sync::mpsc::channel::<()>();
        api.launch_host_func(
            stream,
            Box::new(move || {
                let _ = gate.recv();
            }),
        )?;
        if failing {
            let params = KernelParams {
                bindings: &[],
                constants: &[],
                status: None,
            };
            api.launch_kernel(fail, &one, &params, stream)?;
        }
        api.record_event(event, stream)?;
        Ok(open)
    };
    for first_fails in [false, true] {
        let event = api.create_event(EventFlags::BLOCKING_SYNC)?;
        let first = gated_record(event, first_fails)?;
        // The waiter: blocked behind its own gate, then waits on the first record, then counts.
        let waiter = api.create_stream()?;
        let (open_waiter, gate) = std::sync::mpsc::channel::<()>();
        api.launch_host_func(
            waiter,
            Box::new(move || {
                let _ = gate.recv();
            }),
        )?;
        api.stream_wait_event(waiter, event)?;
        let params = KernelParams {
            bindings: &[counter],
            constants: &[],
            status: None,
        };
        api.launch_kernel(count, &one, &params, waiter)?;
        let observed = api.create_event(EventFlags::BLOCKING_SYNC)?;
        api.record_event(observed, waiter)?;
        // The first record completes, then the event is re-recorded after the opposite outcome
        // and that completes too, all before the waiter reaches its wait.
        first.send(()).expect("the gated stream waits for this");
        while !matches!(api.query_event(event), Ok(true) | Err(_)) {
            std::thread::yield_now();
        }
        let second = gated_record(event, !first_fails)?;
        second.send(()).expect("the gated stream waits for this");
        assert_eq!(api.synchronize_event(event).is_err(), !first_fails);
        open_waiter.send(()).expect("the waiter waits for this");
        let outcome = api.synchronize_event(observed);
        assert_eq!(
            outcome.is_err(),
            first_fails,
            "the waiter got the outcome of the later record ({outcome:?})"
        );
    }
    let mut value = 0u32;
    let copy = api.create_stream()?;
    // SAFETY: `value` outlives the copy; the stream is synchronised right after.
    unsafe { api.copy_device_to_host_async((&mut value as *mut u32).cast(), counter, 4, copy)? };
    api.synchronize_stream(copy)?;
    assert_eq!(value, 1, "the count ran only after the successful record");
    Ok(())
}

/// After a fault, synchronising and querying return the fault at once (no hang), event waits
/// blocked before the fault are woken, and host functions do not run.
#[test]
fn host_api_fault_is_sticky_and_wakes_waiters() -> Result<()> {
    let api = HostStreamApi::new();
    let (s0, s1) = (api.create_stream()?, api.create_stream()?);
    let event = api.create_event(EventFlags::BLOCKING_SYNC)?;
    let hold = api.hold();
    api.record_event(event, s0)?;
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    api.launch_host_func(
        s0,
        Box::new(move || {
            r.fetch_add(1, Ordering::SeqCst);
        }),
    )?;
    let waiter = {
        let api = api.clone();
        std::thread::spawn(move || api.synchronize_event(event))
    };
    api.inject_fault("injected by the test");
    drop(hold);
    let error = waiter.join().expect("the waiter panicked").unwrap_err();
    assert!(error.message().contains("injected by the test"), "{error}");
    for result in [
        api.query_event(event).map(drop),
        api.synchronize_stream(s1),
        api.record_event(event, s1),
        api.create_stream().map(drop),
    ] {
        assert_error(result, StatusCode::Aborted, &["injected by the test"]);
    }
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "a host function ran after the fault"
    );
    api.inject_fault("a second fault");
    assert!(api
        .fault()
        .unwrap()
        .message()
        .contains("injected by the test"));
    Ok(())
}

/// Dropping the last API handle while a hold keeps a stream from starting its next operation
/// ends the stream threads anyway (the held operation is dropped unrun) instead of hanging.
#[test]
fn dropping_the_api_during_a_hold_does_not_hang() -> Result<()> {
    let api = HostStreamApi::new();
    let stream = api.create_stream()?;
    let hold = api.hold();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    api.launch_host_func(
        stream,
        Box::new(move || {
            r.fetch_add(1, Ordering::SeqCst);
        }),
    )?;
    drop(api);
    drop(hold);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    Ok(())
}

/// A device without host functions cannot use host callbacks; the error says what to use.
#[test]
fn host_callbacks_need_host_functions() {
    struct NoHostFunc(HostStreamApi);
    // Delegate everything but the capability (and so `launch_host_func` keeps its default).
    // SAFETY: see the trait's contract; every method forwards to a `HostStreamApi`.
    unsafe impl StreamApi for NoHostFunc {
        fn info(&self) -> halcyon_stream::ApiInfo {
            let mut info = self.0.info();
            info.capabilities -= halcyon_stream::Capabilities::HOST_FUNC;
            info
        }
        fn create_stream(&self) -> Result<halcyon_stream::StreamHandle> {
            self.0.create_stream()
        }
        fn destroy_stream(&self, s: halcyon_stream::StreamHandle) -> Result<()> {
            self.0.destroy_stream(s)
        }
        fn synchronize_stream(&self, s: halcyon_stream::StreamHandle) -> Result<()> {
            self.0.synchronize_stream(s)
        }
        fn create_event(&self, f: EventFlags) -> Result<halcyon_stream::EventHandle> {
            self.0.create_event(f)
        }
        fn destroy_event(&self, e: halcyon_stream::EventHandle) -> Result<()> {
            self.0.destroy_event(e)
        }
        fn record_event(
            &self,
            e: halcyon_stream::EventHandle,
            s: halcyon_stream::StreamHandle,
        ) -> Result<()> {
            self.0.record_event(e, s)
        }
        fn query_event(&self, e: halcyon_stream::EventHandle) -> Result<bool> {
            self.0.query_event(e)
        }
        fn synchronize_event(&self, e: halcyon_stream::EventHandle) -> Result<()> {
            self.0.synchronize_event(e)
        }
        fn stream_wait_event(
            &self,
            s: halcyon_stream::StreamHandle,
            e: halcyon_stream::EventHandle,
        ) -> Result<()> {
            self.0.stream_wait_event(s, e)
        }
        fn allocate(&self, size: u64, p: MemoryPlacement) -> Result<DevicePtr> {
            self.0.allocate(size, p)
        }
        fn free(&self, ptr: DevicePtr) -> Result<()> {
            self.0.free(ptr)
        }
        fn host_pointer(&self, ptr: DevicePtr) -> Option<std::ptr::NonNull<u8>> {
            self.0.host_pointer(ptr)
        }
        unsafe fn copy_host_to_device_async(
            &self,
            d: DevicePtr,
            s: *const u8,
            n: u64,
            st: halcyon_stream::StreamHandle,
        ) -> Result<()> {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { self.0.copy_host_to_device_async(d, s, n, st) }
        }
        unsafe fn copy_device_to_host_async(
            &self,
            d: *mut u8,
            s: DevicePtr,
            n: u64,
            st: halcyon_stream::StreamHandle,
        ) -> Result<()> {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { self.0.copy_device_to_host_async(d, s, n, st) }
        }
        fn copy_device_to_device_async(
            &self,
            d: DevicePtr,
            s: DevicePtr,
            n: u64,
            st: halcyon_stream::StreamHandle,
        ) -> Result<()> {
            self.0.copy_device_to_device_async(d, s, n, st)
        }
        fn memset_async(
            &self,
            d: DevicePtr,
            p: u32,
            l: u8,
            n: u64,
            st: halcyon_stream::StreamHandle,
        ) -> Result<()> {
            self.0.memset_async(d, p, l, n, st)
        }
        fn module_formats(&self) -> Vec<String> {
            self.0.module_formats()
        }
        fn load_module(
            &self,
            spec: &halcyon::ExecutableSpec,
        ) -> Result<halcyon_stream::LoadedModule> {
            self.0.load_module(spec)
        }
        fn unload_module(&self, m: halcyon_stream::ModuleHandle) -> Result<()> {
            self.0.unload_module(m)
        }
        fn get_function(
            &self,
            m: halcyon_stream::ModuleHandle,
            name: &str,
        ) -> Result<halcyon_stream::FunctionHandle> {
            self.0.get_function(m, name)
        }
        fn launch_kernel(
            &self,
            f: halcyon_stream::FunctionHandle,
            c: &LaunchConfig,
            p: &KernelParams<'_>,
            s: halcyon_stream::StreamHandle,
        ) -> Result<()> {
            self.0.launch_kernel(f, c, p, s)
        }
    }
    let error = create_device(
        NoHostFunc(HostStreamApi::new()),
        StreamDeviceOptions::default().with_completion(CompletionStrategy::HostCallback),
    )
    .map(|d| d.info().id.clone())
    .unwrap_err();
    assert_eq!(error.code(), StatusCode::Unimplemented);
    assert!(error.message().contains("CompletionThread"), "{error}");
    let device = create_device(
        NoHostFunc(HostStreamApi::new()),
        StreamDeviceOptions::default().with_completion(CompletionStrategy::CompletionThread),
    )
    .expect("completion threads need no host functions");
    let buffer = device.allocator().allocate(16, BufferParams::HOST).unwrap();
    block_on(async {
        let queue = device.queue(0)?;
        done(
            "fill",
            queue.fill(Timepoints::default(), 4u8, &buffer.whole()),
        )
        .await
    })
    .unwrap();
    assert!(buffer.map_read(..).unwrap().iter().all(|&b| b == 4));
}

/// The host stream API's elapsed time refuses what CUDA refuses: events created with
/// `DISABLE_TIMING` or never recorded (`InvalidArgument`), records still pending
/// (`Unavailable`); between completed timing events it is signed.
#[test]
fn elapsed_time_needs_completed_timing_events() -> Result<()> {
    let api = HostStreamApi::new();
    let stream = api.create_stream()?;
    let untimed = api.create_event(EventFlags::DISABLE_TIMING)?;
    let (first, second) = (
        api.create_event(EventFlags::empty())?,
        api.create_event(EventFlags::BLOCKING_SYNC)?,
    );
    assert_error(
        api.event_elapsed_ms(first, second),
        StatusCode::InvalidArgument,
        &["never recorded"],
    );
    api.record_event(untimed, stream)?;
    api.synchronize_event(untimed)?;
    assert_error(
        api.event_elapsed_ms(untimed, untimed),
        StatusCode::InvalidArgument,
        &["DISABLE_TIMING"],
    );
    {
        let _hold = api.hold();
        api.record_event(first, stream)?;
        api.record_event(second, stream)?;
        assert_error(
            api.event_elapsed_ms(first, second),
            StatusCode::Unavailable,
            &["not completed"],
        );
    }
    api.synchronize_event(second)?;
    let forward = api.event_elapsed_ms(first, second)?;
    let backward = api.event_elapsed_ms(second, first)?;
    assert!(
        forward >= 0.0 && backward == -forward,
        "{forward} {backward}"
    );
    assert_eq!(api.event_elapsed_ms(first, first)?, 0.0);
    for event in [untimed, first, second] {
        api.destroy_event(event)?;
    }
    api.destroy_stream(stream)
}
