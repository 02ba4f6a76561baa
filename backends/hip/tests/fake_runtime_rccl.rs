//! RCCL channels on the fake runtime's two HIP devices, through the fake's NCCL API (RCCL's):
//! an all-reduce and a broadcast across `hip://0` and `hip://1`, and a stalled peer aborted by
//! the watchdog. A process of its own: the RCCL a process loads is chosen once.

// Shared with the other fake-runtime processes; this one needs only the runtime.
#[allow(dead_code)]
mod fake;

use std::time::Duration;

use fake::{fake, hip};
use halcyon::channel::LocalGroup;
use halcyon::{BufferParams, ChannelParams, Device, ElementType, ReduceOp, StatusCode, Timepoints};
use halcyon_conformance::harness::{block_on, download_u32, upload_u32};
use halcyon_hip::rccl::Rccl;
use halcyon_hip::{HipDeviceOptions, HipDriver};

/// One test at a time: the fake's counters are the whole process's.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn devices() -> Vec<Device> {
    let driver = HipDriver::with_hip(hip());
    (0..2)
        .map(|i| {
            driver
                .create_device_with(i, &HipDeviceOptions::default())
                .unwrap()
        })
        .collect()
}

fn choose_fake() {
    // SAFETY: the fake runtime exports NCCL's API, which is RCCL's. The first test to get
    // here chooses it; the other finds it chosen.
    let _ = unsafe { Rccl::use_library(fake().path()) };
    Rccl::load().expect("the fake's RCCL");
}

#[test]
fn rccl_collectives_on_two_fake_devices() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    choose_fake();
    let devices = devices();
    let channels = LocalGroup::channels(&devices, &ChannelParams::default()).unwrap();
    assert_eq!(channels[0].engine(), "rccl");
    let queues: Vec<_> = devices.iter().map(|d| d.queue(0).unwrap()).collect();
    let buffers: Vec<_> = (0..2)
        .map(|r| block_on(upload_u32(&queues[r], &[r as u32 + 1, 10])).unwrap())
        .collect();
    let subs: Vec<_> = (0..2)
        .map(|r| {
            let all = buffers[r].whole();
            queues[r].all_reduce(
                Timepoints::default(),
                &channels[r],
                ReduceOp::Sum,
                ElementType::U32,
                &all,
                &all,
            )
        })
        .collect();
    subs.into_iter().for_each(|s| block_on(s).unwrap());
    for r in 0..2 {
        assert_eq!(
            block_on(download_u32(
                &queues[r],
                halcyon::Fence::new(),
                &buffers[r].whole()
            ))
            .unwrap(),
            [3, 20]
        );
    }
    let subs: Vec<_> = (0..2)
        .map(|r| {
            block_on(queues[r].fill(Timepoints::default(), r as u32 + 5, &buffers[r].whole()))
                .unwrap();
            queues[r].broadcast(Timepoints::default(), &channels[r], 0, &buffers[r].whole())
        })
        .collect();
    subs.into_iter().for_each(|s| block_on(s).unwrap());
    assert_eq!(
        block_on(download_u32(
            &queues[1],
            halcyon::Fence::new(),
            &buffers[1].whole()
        ))
        .unwrap(),
        [5, 5]
    );
    drop((channels, buffers));
    assert_eq!(fake().stats().nccl_comms, 0);
    assert_eq!(fake().stats().violations, 0);
}

#[test]
fn rccl_stalled_peer_is_aborted_not_hung() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    choose_fake();
    let devices = devices();
    let params = ChannelParams::default().timeout(Duration::from_millis(300));
    let channels = LocalGroup::channels(&devices, &params).unwrap();
    let queue = devices[0].queue(0).unwrap();
    let x = devices[0]
        .allocator()
        .allocate(16, BufferParams::DEVICE)
        .unwrap();
    let all = x.whole();
    let stalled = queue.all_reduce(
        Timepoints::default(),
        &channels[0],
        ReduceOp::Max,
        ElementType::F32,
        &all,
        &all,
    );
    let error = block_on(stalled).unwrap_err();
    assert_eq!(error.code(), StatusCode::DeadlineExceeded, "{error}");
    drop(channels);
    assert_eq!(fake().stats().violations, 0);
}
