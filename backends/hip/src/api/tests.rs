//! Unit tests of the HIP stream API's pure parts: events, grid and shared-memory checks,
//! fills, kernel arguments, host-visible copies, staging and host-function trampolines.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use halcyon_stream::staging::{stage_from_device, stage_to_device, Lease, PinnedBuffer};

use super::host_funcs::{host_fn, host_func_user_data, settle_host_func, stream_callback};
use super::launch::{check_grid, KernelArgs};
use super::memory::{host_resident, pool_props};
use super::streams::{event_flags, EventPair};
use super::*;

#[test]
fn event_flags_map_to_hip_flags() {
    assert_eq!(
        event_flags(EventFlags::empty()),
        (sys::hipEventDefault, None)
    );
    assert_eq!(
        event_flags(EventFlags::DISABLE_TIMING),
        (sys::hipEventDisableTiming, None)
    );
    // The shared event never blocks; the private one has the blocking-sync flag alone,
    // the only way the newest clr honours it.
    assert_eq!(
        event_flags(EventFlags::DISABLE_TIMING | EventFlags::BLOCKING_SYNC),
        (sys::hipEventDisableTiming, Some(sys::hipEventBlockingSync))
    );
    assert_eq!(
        event_flags(EventFlags::BLOCKING_SYNC),
        (sys::hipEventDefault, Some(sys::hipEventBlockingSync))
    );
}

/// A fake HIP: records which events were recorded, and fails the ones in `failing`.
fn recorder<'a>(
    log: &'a Mutex<Vec<u32>>,
    failing: &'a [u32],
) -> impl FnMut(u32) -> Result<()> + 'a {
    move |event| {
        log.lock().unwrap().push(event);
        if failing.contains(&event) {
            Err(Error::new(
                StatusCode::Internal,
                format!("record {event} fails"),
            ))
        } else {
            Ok(())
        }
    }
}

#[test]
fn single_events_use_one_hip_event_for_everything() {
    let pair = EventPair::single(1u32);
    assert_eq!(pair.all().collect::<Vec<_>>(), [1]);
    let log = Mutex::default();
    pair.record(recorder(&log, &[])).unwrap();
    assert_eq!(*log.lock().unwrap(), [1]);
    assert_eq!((pair.shared(), pair.to_synchronize()), (1, 1));
    let e = pair.record(recorder(&log, &[1])).unwrap_err();
    assert_eq!(e.message(), "record 1 fails");
    assert_eq!(pair.to_synchronize(), 1);
}

#[test]
fn paired_events_record_both_and_synchronize_on_the_private_one() {
    let pair = EventPair::paired(1u32, 2u32);
    assert_eq!(pair.all().collect::<Vec<_>>(), [1, 2]);
    // Never recorded: both complete, so the private one stands for the shared one.
    assert_eq!((pair.shared(), pair.to_synchronize()), (1, 2));
    let log = Mutex::default();
    pair.record(recorder(&log, &[])).unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        [1, 2],
        "shared first, then private, each once"
    );
    assert_eq!((pair.shared(), pair.to_synchronize()), (1, 2));
}

#[test]
fn a_failed_private_record_falls_back_to_the_shared_event_until_both_record() {
    let pair = EventPair::paired(1u32, 2u32);
    let log = Mutex::default();
    // The shared record fails: nothing changed, nothing else is recorded.
    let e = pair.record(recorder(&log, &[1])).unwrap_err();
    assert_eq!(e.message(), "record 1 fails");
    assert_eq!(*log.lock().unwrap(), [1]);
    assert_eq!(pair.to_synchronize(), 2);
    // Only the private record fails: the call fails, saying which, and synchronisations
    // wait on the shared event, which holds the newest record.
    log.lock().unwrap().clear();
    let e = pair.record(recorder(&log, &[2])).unwrap_err();
    assert_eq!(e.code(), StatusCode::Internal);
    assert!(e.message().contains("private blocking-sync"), "{e}");
    assert!(e.message().ends_with("record 2 fails"), "{e}");
    assert_eq!(*log.lock().unwrap(), [1, 2]);
    assert_eq!((pair.shared(), pair.to_synchronize()), (1, 1));
    // A failed shared record leaves it so.
    assert!(pair.record(recorder(&log, &[1])).is_err());
    assert_eq!(pair.to_synchronize(), 1);
    // A record of both puts the private event back in step.
    pair.record(recorder(&log, &[])).unwrap();
    assert_eq!(pair.to_synchronize(), 2);
}

#[test]
fn grids_are_checked_against_the_limits_and_32_bit_work_items() {
    let max = DEFAULT_MAX_GRID;
    check_grid("k", [1, 1, 1], [64, 1, 1], max).unwrap();
    check_grid("k", [i32::MAX as u32, 1, 1], [1, 1, 1], max).unwrap();
    check_grid("k", [(1 << 22) - 1, 1 << 16, 1 << 16], [1024, 1, 1], max).unwrap();
    // x: u32::MAX work-items exactly is fine, one block more is not.
    check_grid("k", [(u32::MAX / 1024), 1, 1], [1024, 1, 1], max).unwrap();
    let e = check_grid("k", [u32::MAX / 1024 + 1, 1, 1], [1024, 1, 1], max).unwrap_err();
    assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
    assert!(e.message().contains("kernel 'k'"), "{e}");
    assert!(
        e.message().contains("in x are 4294967296 work-items"),
        "{e}"
    );
    assert!(e.message().contains("4294967295 (u32::MAX)"), "{e}");
    for (grid, axis) in [
        ([i32::MAX as u32 + 1, 1, 1], "X"),
        ([1, 65537, 1], "Y"),
        ([1, 1, 65537], "Z"),
    ] {
        let e = check_grid("k", grid, [1, 1, 1], max).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        assert!(
            e.message()
                .contains(&format!("(hipDeviceAttributeMaxGridDim{axis})")),
            "{e}"
        );
    }
    // HIP 5.2 reports INT32_MAX blocks in y and z: then the work-item bound applies there.
    let wide = [i32::MAX as u32; 3];
    check_grid("k", [1, 1 << 20, 1 << 20], [1, 1024, 1024], wide).unwrap();
    for grid in [[1, 1 << 23, 1], [1, 1, 1 << 23]] {
        let e = check_grid("k", grid, [1, 1024, 1024], wide).unwrap_err();
        assert!(e.message().contains("work-items"), "{e}");
    }
}

#[test]
fn kernel_args_point_at_each_binding_then_each_constant() {
    let bindings = [DevicePtr(0x7000_0000_1000), DevicePtr(0x7000_0000_2040)];
    let constants = [42u32, 1.5f32.to_bits()];
    let params = KernelParams {
        bindings: &bindings,
        constants: &constants,
        status: None,
    };
    let mut args = KernelArgs::new(&params);
    let pointers = args.pointers();
    assert_eq!(pointers.len(), 4);
    // SAFETY: each pointer addresses a live u64 slot of `args`, read as HIP would read an
    // argument of that size.
    unsafe {
        assert_eq!(*pointers[0].cast::<u64>(), 0x7000_0000_1000);
        assert_eq!(*pointers[1].cast::<u64>(), 0x7000_0000_2040);
        assert_eq!(*pointers[2].cast::<u32>(), 42);
        assert_eq!(f32::from_bits(*pointers[3].cast::<u32>()), 1.5);
    }
    let empty = KernelParams {
        bindings: &[],
        constants: &[],
        status: None,
    };
    assert!(KernelArgs::new(&empty).pointers().is_empty());
    // The status word comes last, after the constants.
    let mut args = KernelArgs::new(&KernelParams {
        status: Some(DevicePtr(0x7000_0000_3000)),
        ..params
    });
    let pointers = args.pointers();
    assert_eq!(pointers.len(), 5);
    // SAFETY: as above.
    unsafe {
        assert_eq!(*pointers[2].cast::<u32>(), 42);
        assert_eq!(*pointers[4].cast::<u64>(), 0x7000_0000_3000);
    }
    let mut args = KernelArgs::new(&KernelParams {
        status: Some(DevicePtr(0x7000_0000_3000)),
        ..empty
    });
    let pointers = args.pointers();
    assert_eq!(pointers.len(), 1);
    // SAFETY: as above.
    assert_eq!(unsafe { *pointers[0].cast::<u64>() }, 0x7000_0000_3000);
}

#[test]
fn only_copies_within_host_visible_allocations_skip_staging() {
    let memory = Allocations::new("HIP");
    memory.insert(0x1000, 0x100, AllocKind::Device);
    // Mapped host memory: MemoryPlacement::Pinned, or HostVisibleMemory::MappedHost.
    memory.insert(0x2000, 0x100, AllocKind::MappedHost);
    memory.insert(0x3000, 0x100, AllocKind::Managed);
    // Adjacent to the mapped allocation above, but another allocation.
    memory.insert(0x2100, 0x100, AllocKind::MappedHost);
    memory.insert(0x5000, 0x100, AllocKind::StreamOrdered);
    let at = |a: usize| a as *const u8;
    assert!(host_resident(&memory, at(0x2000), 0x100));
    assert!(
        host_resident(&memory, at(0x2010), 0x20),
        "inside a mapped allocation"
    );
    assert!(host_resident(&memory, at(0x20ff), 1), "its last byte");
    assert!(host_resident(&memory, at(0x3080), 0x80));
    assert!(
        !host_resident(&memory, at(0x2080), 0x81),
        "runs past the end"
    );
    assert!(
        !host_resident(&memory, at(0x20f0), 0x20),
        "spans two allocations"
    );
    assert!(!host_resident(&memory, at(0x1000), 0x10), "device memory");
    assert!(
        !host_resident(&memory, at(0x5000), 0x10),
        "stream-ordered memory"
    );
    assert!(
        !host_resident(&memory, at(0x4000), 1),
        "not this API's memory"
    );
    assert!(!host_resident(&memory, at(0xfff), 2), "starts before one");
    assert!(!host_resident(&memory, at(0x2000), u64::MAX));
}

#[test]
fn the_own_pool_is_pinned_unexportable_device_memory() {
    let props = pool_props(3);
    assert_eq!(props.allocType, sys::hipMemAllocationTypePinned);
    assert_eq!(props.handleTypes, sys::hipMemHandleTypeNone);
    assert_eq!(
        props.location,
        sys::hipMemLocation {
            type_: sys::hipMemLocationTypeDevice,
            id: 3
        }
    );
    assert!(props.win32SecurityAttributes.is_null());
    assert_eq!(props.maxSize, 0, "reserved before ROCm 6.2: must stay zero");
    assert_eq!(props.reserved, [0; 56]);
}

/// A heap buffer standing in for pinned memory (never given to HIP).
fn fake_pinned(capacity: usize, fill: u8) -> PinnedBuffer {
    let buffer = vec![fill; capacity].into_boxed_slice();
    let ptr = NonNull::new(Box::into_raw(buffer).cast::<u8>()).unwrap();
    PinnedBuffer { ptr, capacity }
}

fn free_fake(pool: &StagingPool) -> usize {
    let all = pool.drain();
    let n = all.len();
    for p in all {
        // SAFETY: made by `fake_pinned` with this capacity, freed once.
        drop(unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                p.ptr.as_ptr(),
                p.capacity,
            ))
        });
    }
    n
}

/// Hands a host function to a trampoline as HIP would; `status` None: `hipLaunchHostFunc`.
fn deliver(func: HostFunc, status: Option<sys::hipError_t>) {
    let (_cell, user_data) = host_func_user_data(func);
    // SAFETY: a fresh cell's user data, consumed once.
    unsafe {
        match status {
            Some(status) => stream_callback(std::ptr::null_mut(), status, user_data),
            None => host_fn(user_data),
        }
    }
}

/// The one host function a staged read of `dst.len()` bytes (at most the buffer) enqueues,
/// its device copy left out (the buffer keeps what `fake_pinned` put there).
///
/// # Safety
/// `dst` must outlive the host function and be disjoint from the buffer.
unsafe fn copy_out_of_staging(lease: Lease, dst: *mut u8, len: usize) -> HostFunc {
    let mut funcs = Vec::new();
    // SAFETY: forwarded from the caller.
    unsafe {
        stage_from_device(
            lease,
            dst,
            len,
            |_, _, _| Ok(()),
            |f| {
                funcs.push(f);
                Ok(())
            },
        )
        .unwrap()
    };
    assert_eq!(funcs.len(), 1);
    funcs.remove(0)
}

/// The host function a staged write of one chunk enqueues (the buffer's release).
fn release_staging(lease: Lease) -> HostFunc {
    let src = [1u8; 4];
    let mut funcs = Vec::new();
    // SAFETY: `src` is read at once (one chunk), before this returns.
    unsafe {
        stage_to_device(
            lease,
            src.as_ptr(),
            4,
            |_, _, _| Ok(()),
            |f| {
                funcs.push(f);
                Ok(())
            },
        )
        .unwrap()
    };
    assert_eq!(funcs.len(), 1);
    funcs.remove(0)
}

#[test]
fn reads_copy_out_of_staging_then_reuse_it_unless_the_stream_failed() {
    let pool = Arc::new(StagingPool::default());
    for status in [None, Some(sys::hipSuccess)] {
        let mut dst = [0u8; 5];
        let lease = Lease::new(fake_pinned(16, 7), pool.clone());
        // SAFETY: the fake buffer holds 16 bytes; `dst` is 5 bytes, alive and disjoint.
        let func = unsafe { copy_out_of_staging(lease, dst.as_mut_ptr(), dst.len()) };
        deliver(func, status);
        assert_eq!(dst, [7; 5]);
        assert_eq!(pool.counts(), (1, 0, 0), "back among the idle buffers");
        free_fake(&pool);
    }
    let mut dst = [0u8; 5];
    let lease = Lease::new(fake_pinned(16, 7), pool.clone());
    // SAFETY: as above.
    let func = unsafe { copy_out_of_staging(lease, dst.as_mut_ptr(), dst.len()) };
    deliver(func, Some(sys::hipErrorLaunchFailure));
    assert_eq!(dst, [0; 5], "not written after a stream error");
    assert_eq!(
        pool.counts(),
        (0, 0, 1),
        "orphaned: the device may still write it"
    );
    assert_eq!(free_fake(&pool), 1);
}

#[test]
fn writes_return_staging_after_the_copy_unless_the_stream_failed() {
    let pool = Arc::new(StagingPool::default());
    deliver(
        release_staging(Lease::new(fake_pinned(8, 0), pool.clone())),
        None,
    );
    deliver(
        release_staging(Lease::new(fake_pinned(8, 0), pool.clone())),
        Some(sys::hipSuccess),
    );
    assert_eq!(pool.counts(), (2, 0, 0));
    deliver(
        release_staging(Lease::new(fake_pinned(8, 0), pool.clone())),
        Some(sys::hipErrorLaunchFailure),
    );
    assert_eq!(pool.counts(), (2, 0, 1));
    assert_eq!(free_fake(&pool), 3);
}

/// Counts drops, to see that a host function is released exactly once.
struct Guard(Arc<AtomicUsize>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn host_func(ran: &Arc<AtomicUsize>, dropped: &Arc<AtomicUsize>) -> *mut c_void {
    let (ran, guard) = (ran.clone(), Guard(dropped.clone()));
    let func: HostFunc = Box::new(move || {
        let _guard = guard;
        ran.fetch_add(1, Ordering::SeqCst);
    });
    host_func_user_data(func).1
}

#[test]
fn trampolines_run_on_success_and_drop_unrun_on_error() {
    let (ran, dropped) = (Arc::default(), Arc::default());
    // SAFETY: each call consumes a fresh cell's user data, as HIP would.
    unsafe {
        stream_callback(
            std::ptr::null_mut(),
            sys::hipSuccess,
            host_func(&ran, &dropped),
        );
        assert_eq!(
            (ran.load(Ordering::SeqCst), dropped.load(Ordering::SeqCst)),
            (1, 1)
        );
        stream_callback(
            std::ptr::null_mut(),
            sys::hipErrorLaunchFailure,
            host_func(&ran, &dropped),
        );
        assert_eq!(
            (ran.load(Ordering::SeqCst), dropped.load(Ordering::SeqCst)),
            (1, 2)
        );
        host_fn(host_func(&ran, &dropped));
        assert_eq!(
            (ran.load(Ordering::SeqCst), dropped.load(Ordering::SeqCst)),
            (2, 3)
        );
    }
}

#[test]
fn a_panicking_host_func_does_not_unwind_into_hip() {
    let func: HostFunc = Box::new(|| panic!("host function panics"));
    let (_cell, user_data) = host_func_user_data(func);
    // SAFETY: a fresh cell's user data, consumed once.
    unsafe { stream_callback(std::ptr::null_mut(), sys::hipSuccess, user_data) };
    /// A panic payload whose own drop panics.
    struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("the payload's drop panics too");
        }
    }
    let func: HostFunc = Box::new(|| std::panic::panic_any(Bomb));
    let (_cell, user_data) = host_func_user_data(func);
    // SAFETY: as above.
    unsafe { host_fn(user_data) };
}

/// An enqueue HIP refused may still have queued the callback: the enqueuing thread takes
/// the function (dropped unrun), and a callback that comes anyway finds the cell empty and
/// only lets go of HIP's reference, so nothing runs twice or is freed twice.
#[test]
fn a_callback_after_a_failed_enqueue_runs_nothing() {
    let (ran, dropped): (Arc<AtomicUsize>, Arc<AtomicUsize>) = Default::default();
    let (ran2, guard) = (Arc::clone(&ran), Guard(Arc::clone(&dropped)));
    let func: HostFunc = Box::new(move || {
        let _guard = guard;
        ran2.fetch_add(1, Ordering::SeqCst);
    });
    let (cell, user_data) = host_func_user_data(func);
    settle_host_func(&cell, false);
    assert_eq!(
        (ran.load(Ordering::SeqCst), dropped.load(Ordering::SeqCst)),
        (0, 1)
    );
    assert_eq!(Arc::strong_count(&cell), 2, "HIP's reference is kept");
    // SAFETY: HIP's reference, handed back once.
    unsafe { stream_callback(std::ptr::null_mut(), sys::hipSuccess, user_data) };
    assert_eq!(
        (ran.load(Ordering::SeqCst), dropped.load(Ordering::SeqCst)),
        (0, 1)
    );
    assert_eq!(Arc::strong_count(&cell), 1, "HIP's reference is let go");
}
