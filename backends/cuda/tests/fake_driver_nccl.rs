//! NCCL channels on the fake CUDA driver's two devices, through the fake's NCCL: every
//! collective, ordering against compute on another queue, a stalled peer aborted by the
//! watchdog, and nothing left behind. A process of its own: the NCCL a process loads is
//! chosen once, and the fake's counters are the whole process's.

// Shared with the other fake-driver processes; this one does not use all of it.
#[allow(dead_code)]
mod fake;

use std::time::{Duration, Instant};

use fake::{options, prepare_driver};
use halcyon::channel::LocalGroup;
use halcyon::{
    Buffer, BufferParams, Channel, ChannelParams, Device, ElementType, Fence, Queue, ReduceOp,
    Semaphore, StatusCode, Timepoints,
};
use halcyon_conformance::harness::block_on;
use halcyon_cuda::create_device_with;
use halcyon_cuda::nccl::Nccl;
use halcyon_stream::CompletionStrategy;

/// One test at a time: the fake's counters are the whole process's.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Rank {
    device: Device,
    queue: Queue,
    channel: Channel,
}

fn ranks(params: &ChannelParams) -> Vec<Rank> {
    let devices: Vec<Device> = (0..2)
        .map(|i| create_device_with(i, options(CompletionStrategy::CompletionThread)).unwrap())
        .collect();
    let channels = LocalGroup::channels(&devices, params).expect("NCCL channels on the fake");
    (devices.into_iter().zip(channels))
        .map(|(device, channel)| Rank {
            queue: device.queue(0).unwrap(),
            device,
            channel,
        })
        .collect()
}

fn upload<T: bytemuck::Pod>(rank: &Rank, data: &[T]) -> Buffer {
    let bytes = std::mem::size_of_val(data) as u64;
    let buffer = rank
        .device
        .allocator()
        .allocate(bytes, BufferParams::DEVICE)
        .unwrap();
    block_on(
        rank.queue
            .write(Timepoints::default(), data, &buffer.whole()),
    )
    .unwrap();
    buffer
}

fn download<T: bytemuck::Pod + Send>(rank: &Rank, buffer: &Buffer) -> Vec<T> {
    block_on(rank.queue.read(Timepoints::default(), &buffer.whole())).unwrap()
}

#[test]
fn nccl_collectives_on_two_fake_devices() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let fake = match prepare_driver() {
        Ok(fake) => fake,
        Err(e) => return eprintln!("skipped: {e}"),
    };
    // SAFETY: the fake GPU driver exports NCCL's API. The first test to get here chooses it;
    // the other finds it chosen.
    let _ = unsafe { Nccl::use_library(fake.path()) };
    let nccl = Nccl::load().expect("the fake's NCCL");
    assert_eq!(nccl.version(), 22305);
    let ranks = ranks(&ChannelParams::default());
    assert_eq!(ranks[1].channel.rank(), 1);
    assert_eq!(ranks[0].channel.engine(), "nccl");
    let before = fake.stats().collectives_run;

    // all_reduce: f32 sum (in place on rank 1), i32 max.
    let x: Vec<Buffer> = (0..2)
        .map(|r| upload(&ranks[r], &[1.0f32 + r as f32, 10.0 * (r + 1) as f32]))
        .collect();
    let out = ranks[0]
        .device
        .allocator()
        .allocate(8, BufferParams::DEVICE)
        .unwrap();
    let f32s = ElementType::F32;
    let sum = ReduceOp::Sum;
    let r0 = ranks[0].queue.all_reduce(
        Timepoints::default(),
        &ranks[0].channel,
        sum,
        f32s,
        &x[0].whole(),
        &out.whole(),
    );
    let all1 = x[1].whole();
    let r1 = ranks[1].queue.all_reduce(
        Timepoints::default(),
        &ranks[1].channel,
        sum,
        f32s,
        &all1,
        &all1,
    );
    block_on(r0).unwrap();
    block_on(r1).unwrap();
    assert_eq!(download::<f32>(&ranks[0], &out), [3.0, 30.0]);
    assert_eq!(download::<f32>(&ranks[1], &x[1]), [3.0, 30.0]);

    // all_gather, reduce_scatter (f16 as bits: 1.0 + 2.0), broadcast, send/recv.
    let mine: Vec<Buffer> = (0..2)
        .map(|r| upload(&ranks[r], &[r as u32 + 7; 3]))
        .collect();
    let gathered: Vec<Buffer> = (0..2)
        .map(|r| {
            ranks[r]
                .device
                .allocator()
                .allocate(24, BufferParams::DEVICE)
                .unwrap()
        })
        .collect();
    let subs: Vec<_> = (0..2)
        .map(|r| {
            ranks[r].queue.all_gather(
                Timepoints::default(),
                &ranks[r].channel,
                &mine[r].whole(),
                &gathered[r].whole(),
            )
        })
        .collect();
    subs.into_iter().for_each(|s| block_on(s).unwrap());
    for r in 0..2 {
        assert_eq!(download::<u32>(&ranks[r], &gathered[r]), [7, 7, 7, 8, 8, 8]);
    }
    let half = |v: f32| -> u16 {
        // 1.0 = 0x3c00, 2.0 = 0x4000, 3.0 = 0x4200 in IEEE half precision.
        match v as u32 {
            1 => 0x3c00,
            2 => 0x4000,
            _ => 0x4200,
        }
    };
    let halves: Vec<Buffer> = (0..2)
        .map(|r| upload(&ranks[r], &[half(r as f32 + 1.0); 4]))
        .collect();
    let blocks: Vec<Buffer> = (0..2).map(|r| upload(&ranks[r], &[0u16; 2])).collect();
    let subs: Vec<_> = (0..2)
        .map(|r| {
            ranks[r].queue.reduce_scatter(
                Timepoints::default(),
                &ranks[r].channel,
                ReduceOp::Sum,
                ElementType::F16,
                &halves[r].whole(),
                &blocks[r].whole(),
            )
        })
        .collect();
    subs.into_iter().for_each(|s| block_on(s).unwrap());
    for r in 0..2 {
        assert_eq!(download::<u16>(&ranks[r], &blocks[r]), [0x4200, 0x4200]);
    }
    let subs: Vec<_> = (0..2)
        .map(|r| {
            ranks[r].queue.broadcast(
                Timepoints::default(),
                &ranks[r].channel,
                1,
                &mine[r].whole(),
            )
        })
        .collect();
    subs.into_iter().for_each(|s| block_on(s).unwrap());
    assert_eq!(download::<u32>(&ranks[0], &mine[0]), [8, 8, 8]);
    let sent = upload(&ranks[0], &[42u32; 3]);
    let send = ranks[0]
        .queue
        .send(Timepoints::default(), &ranks[0].channel, 1, &sent.whole());
    let recv = ranks[1].queue.recv(
        Timepoints::default(),
        &ranks[1].channel,
        0,
        &mine[1].whole(),
    );
    block_on(send).unwrap();
    block_on(recv).unwrap();
    assert_eq!(download::<u32>(&ranks[1], &mine[1]), [42, 42, 42]);

    // Ordered against compute on another queue by a semaphore: rank 0's all-reduce on queue 1
    // waits for a fill on queue 0, which waits for a host signal.
    let gate = Semaphore::new(0);
    let filled = Semaphore::new(0);
    let q1 = ranks[0].device.queue(1).unwrap();
    let fill = ranks[0].queue.fill(
        Timepoints::new(Fence::at(&gate, 1), Fence::at(&filled, 1)),
        2.0f32,
        &x[0].whole(),
    );
    let after = q1.all_reduce(
        Timepoints::new(Fence::at(&filled, 1), Fence::new()),
        &ranks[0].channel,
        sum,
        f32s,
        &x[0].whole(),
        &out.whole(),
    );
    let peer = ranks[1].queue.all_reduce(
        Timepoints::default(),
        &ranks[1].channel,
        sum,
        f32s,
        &all1,
        &all1,
    );
    std::thread::sleep(Duration::from_millis(20));
    gate.signal(1).unwrap();
    block_on(fill).unwrap();
    block_on(after).unwrap();
    block_on(peer).unwrap();
    assert_eq!(download::<f32>(&ranks[0], &out), [5.0, 32.0]);
    // 2 ranks × (all-reduce, all-gather, reduce-scatter, broadcast, the ordered all-reduce),
    // a send and a receive.
    assert_eq!(fake.stats().collectives_run - before, 12);

    drop(ranks);
    assert_eq!(fake.stats().nccl_comms, 0, "every communicator destroyed");
    assert_eq!(fake.stats().violations, 0);
}

/// Rank 1 never joins: rank 0's all-reduce fails with `DeadlineExceeded` once the channel's
/// timeout passes (the watchdog aborts the communicator, and the stream moves on), later
/// collectives on the channel fail with `Unavailable`, and the device goes on working.
#[test]
fn nccl_stalled_peer_is_aborted_not_hung() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let fake = match prepare_driver() {
        Ok(fake) => fake,
        Err(e) => return eprintln!("skipped: {e}"),
    };
    // SAFETY: as above (the first test to get here chooses it; the other finds it chosen).
    let _ = unsafe { Nccl::use_library(fake.path()) };
    let params = ChannelParams::default().timeout(Duration::from_millis(300));
    let ranks = ranks(&params);
    let x = upload(&ranks[0], &[1.0f32; 4]);
    let all = x.whole();
    let start = Instant::now();
    let stalled = ranks[0].queue.all_reduce(
        Timepoints::default(),
        &ranks[0].channel,
        ReduceOp::Sum,
        ElementType::F32,
        &all,
        &all,
    );
    let error = block_on(stalled).unwrap_err();
    assert_eq!(error.code(), StatusCode::DeadlineExceeded, "{error}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let later = ranks[0].queue.all_reduce(
        Timepoints::default(),
        &ranks[0].channel,
        ReduceOp::Sum,
        ElementType::F32,
        &all,
        &all,
    );
    let error = block_on(later).unwrap_err();
    assert!(
        matches!(error.code(), StatusCode::Unavailable | StatusCode::Aborted),
        "{error}"
    );
    // The aborted collective wrote nothing, and the buffer is usable again.
    assert_eq!(download::<f32>(&ranks[0], &x), [1.0; 4]);
    drop(ranks);
    assert_eq!(fake.stats().violations, 0);
}
