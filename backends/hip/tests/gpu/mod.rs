//! Tests of a HIP runtime with a device, shared by `tests/hip.rs` (the machine's runtime, on
//! an AMD GPU) and `tests/fake_runtime.rs` (the fake runtime, on every machine). Each includer
//! defines `runtime_with_a_device() -> Option<Hip>`: the runtime to test, or `None` (said why
//! on stderr) to skip.

use std::sync::Arc;
use std::time::{Duration, Instant};

use halcyon::{Driver, StatusCode};
use halcyon_hip::{HipDriver, HipStreamApi, HostVisibleMemory};
use halcyon_stream::{EventFlags, MemoryPlacement, StreamApi};

mod timing;

#[test]
fn devices_are_listed_and_created() {
    let Some(hip) = super::runtime_with_a_device() else {
        return;
    };
    let driver = HipDriver::with_hip(hip);
    let devices = driver.enumerate_devices().unwrap();
    assert!(!devices.is_empty());
    for d in &devices {
        println!("{}: {}", d.uri, d.name);
    }
    let device = driver.create_device(0).unwrap();
    assert_eq!(device.info().id, "hip://0");
    assert_eq!(device.info().driver, "hip");
    assert!(
        device.info().name.contains("completion threads"),
        "{:?}",
        device.info()
    );
    assert_eq!(device.supported_formats(), [halcyon_hip::FORMAT_HSACO]);
    let err = driver.create_device(devices.len() as u32).unwrap_err();
    assert_eq!(err.code(), StatusCode::NotFound, "{err}");
}

/// A `HipStreamApi` call works on its own device whatever is current on the calling thread,
/// and makes the thread's previous device current again before it returns, so other HIP code
/// sharing the thread keeps the device it chose (HIP allocates and creates streams on the
/// thread's current device). Needs two devices.
#[test]
fn calls_use_their_device_and_give_the_current_one_back() {
    let Some(hip) = super::runtime_with_a_device() else {
        return;
    };
    if hip.device_count().unwrap() < 2 {
        eprintln!("skipped: one HIP device");
        return;
    }
    // A fresh thread, whose device no earlier test changed.
    std::thread::spawn(move || {
        assert_eq!(
            hip.get_device().unwrap(),
            0,
            "a new thread starts on device 0"
        );
        let api = HipStreamApi::new(hip, 1, HostVisibleMemory::Auto).unwrap();
        assert_eq!(hip.get_device().unwrap(), 0, "after new");
        let stream = api.create_stream().unwrap();
        assert_eq!(hip.get_device().unwrap(), 0, "after create_stream");
        let buf = api.allocate(64, MemoryPlacement::Device).unwrap();
        assert_eq!(hip.get_device().unwrap(), 0, "after allocate");
        api.memset_async(buf, 9, 1, 64, stream).unwrap();
        let mut out = [0u8; 64];
        // SAFETY: `out` outlives the copy: the stream is synchronised before it is read.
        unsafe { api.copy_device_to_host_async(out.as_mut_ptr(), buf, 64, stream) }.unwrap();
        api.synchronize_stream(stream).unwrap();
        assert_eq!(out, [9; 64], "the work ran on the API's device");
        assert_eq!(
            hip.get_device().unwrap(),
            0,
            "after a copy and a synchronisation"
        );
        // Another device chosen by other code comes back the same way.
        hip.set_device(1).unwrap();
        let api0 = HipStreamApi::new(hip, 0, HostVisibleMemory::Auto).unwrap();
        let other = api0.create_stream().unwrap();
        api0.destroy_stream(other).unwrap();
        assert_eq!(
            hip.get_device().unwrap(),
            1,
            "after the device-0 API's calls"
        );
        hip.set_device(0).unwrap();
        api.free(buf).unwrap();
        api.destroy_stream(stream).unwrap();
        assert_eq!(
            hip.get_device().unwrap(),
            0,
            "after free and destroy_stream"
        );
        // On a thread the stream layer runs for the API, its device stays current.
        let api = Arc::new(api);
        let adopted = api.clone();
        std::thread::spawn(move || {
            adopted.adopt_thread();
            assert_eq!(adopted.hip().get_device().unwrap(), 1, "adopted");
            let s = adopted.create_stream().unwrap();
            adopted.destroy_stream(s).unwrap();
            assert_eq!(
                adopted.hip().get_device().unwrap(),
                1,
                "kept on an adopted thread"
            );
        })
        .join()
        .unwrap();
    })
    .join()
    .unwrap();
}

/// Pinned memory (`hipHostMalloc(hipHostMallocMapped)`, whatever the host-visible allocator):
/// one address for host and device, and copied to and from device memory straight, without
/// staging: pinned → device → pinned.
#[test]
fn pinned_memory_round_trips() {
    let Some(hip) = super::runtime_with_a_device() else {
        return;
    };
    let api = HipStreamApi::new(hip, 0, HostVisibleMemory::Auto).unwrap();
    const N: usize = 1024;
    let bytes = (N * 4) as u64;
    let pinned = match api.allocate(2 * bytes, MemoryPlacement::Pinned) {
        Ok(pinned) => pinned,
        Err(e) if e.code() == StatusCode::Unimplemented => {
            eprintln!("skipped: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let host = api
        .host_pointer(pinned)
        .expect("pinned memory has a host address");
    assert_eq!(host.as_ptr() as u64, pinned.0, "the same address");
    let words = host.as_ptr().cast::<u32>();
    let input: Vec<u32> = (0..N as u32).map(|i| i * 3 + 1).collect();
    // SAFETY: the allocation holds 2 * N words, 4-byte aligned (page-aligned); no device work
    // uses it yet.
    unsafe {
        std::ptr::copy_nonoverlapping(input.as_ptr(), words, N);
        std::ptr::write_bytes(words.add(N), 0, N);
    }
    let stream = api.create_stream().unwrap();
    let buf = api.allocate(bytes, MemoryPlacement::Device).unwrap();
    // SAFETY: the first half of `pinned` stays valid and unmodified, and the second half is
    // touched by nothing else, until the stream is synchronised below.
    unsafe {
        api.copy_host_to_device_async(buf, host.as_ptr(), bytes, stream)
            .unwrap();
        api.copy_device_to_host_async(host.as_ptr().add(N * 4), buf, bytes, stream)
            .unwrap();
    }
    api.synchronize_stream(stream).unwrap();
    // SAFETY: the copies using `pinned` completed (synchronised above).
    let back = unsafe { std::slice::from_raw_parts(words.add(N), N).to_vec() };
    assert_eq!(back, input);
    api.free(buf).unwrap();
    api.free(pinned).unwrap();
    assert!(api.free(pinned).is_err(), "freed once");
    api.destroy_stream(stream).unwrap();
}

/// A stream wait and a query on an event return at once while another thread is blocked in
/// `synchronize_event` on it. HIP holds an event's lock for the whole of `hipEventSynchronize`,
/// so this holds only because a blocking-sync event synchronises on a private HIP event (see
/// `HipStreamApi`'s docs, "Events"). The event stays pending behind a host function that the
/// test releases; it lets go by itself after `HOLD`, so the test cannot hang.
#[test]
fn stream_waits_and_queries_do_not_wait_for_a_synchronize() {
    let Some(hip) = super::runtime_with_a_device() else {
        return;
    };
    const HOLD: Duration = Duration::from_secs(10);
    const PROMPT: Duration = Duration::from_secs(2);
    let api = Arc::new(HipStreamApi::new(hip, 0, HostVisibleMemory::Auto).unwrap());
    let (busy, other) = (api.create_stream().unwrap(), api.create_stream().unwrap());
    let event = api
        .create_event(EventFlags::BLOCKING_SYNC | EventFlags::DISABLE_TIMING)
        .unwrap();
    let (release, released) = std::sync::mpsc::channel::<()>();
    api.launch_host_func(
        busy,
        Box::new(move || {
            let _ = released.recv_timeout(HOLD);
        }),
    )
    .unwrap();
    api.record_event(event, busy).unwrap();
    assert!(
        !api.query_event(event).unwrap(),
        "pending behind the host function"
    );

    let synchronizing = {
        let api = api.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            (api.synchronize_event(event), start.elapsed())
        })
    };
    // Give the thread time to block in hipEventSynchronize.
    std::thread::sleep(Duration::from_millis(300));
    let blocked = !synchronizing.is_finished();

    let start = Instant::now();
    let waited = api.stream_wait_event(other, event);
    let wait_took = start.elapsed();
    let start = Instant::now();
    let queried = api.query_event(event);
    let query_took = start.elapsed();

    let _ = release.send(()); // fails only if the host function already gave up
    let (synchronized, synchronize_took) = synchronizing.join().unwrap();
    eprintln!("stream wait {wait_took:?}, query {query_took:?}, synchronize {synchronize_took:?}");
    synchronized.unwrap();
    assert!(
        api.query_event(event).unwrap(),
        "complete after the synchronisation"
    );
    api.synchronize_stream(other).unwrap();
    api.synchronize_stream(busy).unwrap();

    assert!(
        blocked,
        "synchronize_event returned while the event was pending"
    );
    waited.unwrap();
    assert!(
        wait_took < PROMPT,
        "stream_wait_event took {wait_took:?} while a synchronisation was blocked"
    );
    assert!(!queried.unwrap(), "pending until released");
    assert!(
        query_took < PROMPT,
        "query_event took {query_took:?} while a synchronisation was blocked"
    );
    assert!(
        synchronize_took < HOLD,
        "the host function was never released"
    );
    api.destroy_event(event).unwrap();
    api.destroy_stream(busy).unwrap();
    api.destroy_stream(other).unwrap();
}

/// Copies between device memory and pageable host memory (a `Vec`), in both directions, go
/// through pinned staging (from pageable memory `hipMemcpyAsync` would wait for the stream on
/// the host), on a stream with other work queued ahead of them, and arrive intact.
#[test]
fn pageable_copies_round_trip_through_staging() {
    let Some(hip) = super::runtime_with_a_device() else {
        return;
    };
    let api = HipStreamApi::new(hip, 0, HostVisibleMemory::Auto).unwrap();
    let stream = api.create_stream().unwrap();
    const LEN: usize = (3 << 20) + 5; // past the stream layer's 1 MiB leases
    let input: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 4093) as u8).collect();
    let mut output = vec![0u8; LEN];
    let buf = api.allocate(LEN as u64, MemoryPlacement::Device).unwrap();
    api.memset_async(buf, 0xa5, 1, LEN as u64, stream).unwrap();
    // SAFETY: `input` and `output` outlive the stream's synchronisation below, and nothing
    // else touches `output` until then.
    unsafe {
        api.copy_host_to_device_async(buf, input.as_ptr(), LEN as u64, stream)
            .unwrap();
        api.copy_device_to_host_async(output.as_mut_ptr(), buf, LEN as u64, stream)
            .unwrap();
    }
    api.synchronize_stream(stream).unwrap();
    assert!(output == input, "the bytes came back changed");
    api.free(buf).unwrap();
    api.destroy_stream(stream).unwrap();
}

/// On a runtime older than ROCm 6.3, which ignores an event's `hipEventBlockingSync`, a device
/// with completion threads makes waits on its device sleep (`hipDeviceScheduleBlockingSync`),
/// so its completion threads do not poll a CPU core each; newer runtimes are left alone.
#[test]
fn completion_threads_sleep_on_runtimes_that_ignore_the_event_flag() {
    let Some(hip) = super::runtime_with_a_device() else {
        return;
    };
    let version = hip.runtime_version().unwrap();
    let device = HipDriver::with_hip(hip).create_device(0).unwrap();
    std::thread::spawn(move || {
        hip.set_device(0).unwrap();
        let flags = match hip.device_flags() {
            Ok(flags) => flags,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        let schedule = flags & halcyon_hip::sys::hipDeviceScheduleMask;
        if version < 60_300_000 {
            assert_eq!(
                schedule,
                halcyon_hip::sys::hipDeviceScheduleBlockingSync,
                "HIP {version}: device flags {flags:#x}"
            );
        } else {
            println!("HIP {version} honours the event flag; device flags {flags:#x}");
        }
    })
    .join()
    .unwrap();
    drop(device);
}
