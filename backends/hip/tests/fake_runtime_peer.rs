//! Copies between two HIP devices on the fake runtime take the peer path: `Queue::copy_from`
//! from `hip://0` into `hip://1` is one `hipMemcpyPeerAsync` on the target's stream, after
//! `hipDeviceEnablePeerAccess` once, never one the runtime would have to stage (access not
//! enabled). Then, with peer access turned off in the fake (for this whole process, hence a
//! process of its own), new devices report `Staged` and the same copy goes through host
//! memory.

// Shared with the other fake-runtime processes; this one needs only the runtime.
#[allow(dead_code)]
mod fake;

use std::time::Duration;

use fake::{fake, hip};
use halcyon::topology::{Reach, Topology};
use halcyon::{BufferParams, Device, Fence, Timepoints};
use halcyon_conformance::harness::{block_on, download_u32, pattern_u32, upload_u32};
use halcyon_hip::{HipDeviceOptions, HipDriver};
use halcyon_stream::keys;

fn pair() -> (Device, Device) {
    let options = HipDeviceOptions::default()
        .with_queue_count(2)
        .with_probe_interval(Duration::from_millis(10));
    let driver = HipDriver::with_hip(hip());
    let a = driver.create_device_with(0, &options).expect("hip://0");
    let b = driver.create_device_with(1, &options).expect("hip://1");
    (a, b)
}

/// Copies words from `a` into `b` and back, checking they survive.
fn round_trip(a: &Device, b: &Device) {
    const N: usize = 4096;
    let data = pattern_u32(N, 21);
    let (qa, qb) = (a.queue(0).unwrap(), b.queue(0).unwrap());
    block_on(async {
        let on_a = upload_u32(&qa, &data).await?;
        let on_b = b.allocator().allocate(4 * N as u64, BufferParams::DEVICE)?;
        let back = a.allocator().allocate(4 * N as u64, BufferParams::DEVICE)?;
        let copy = qb.copy_from(Timepoints::default(), &qa, &on_a.whole(), &on_b.whole());
        copy.await?;
        let copy = qa.copy_from(Timepoints::default(), &qb, &on_b.whole(), &back.whole());
        copy.await?;
        let seen = download_u32(&qa, Fence::new(), &back.whole()).await?;
        assert!(seen == data, "the bytes did not survive the round trip");
        Ok(())
    })
    .unwrap()
}

#[test]
fn copies_between_two_gpus_are_peer_copies_where_the_runtime_allows() {
    let fake = fake();
    let before = fake.stats();
    let (a, b) = pair();
    assert_eq!(b.peer_reach(&a), Reach::Direct);
    assert_eq!(a.peer_reach(&b), Reach::Direct);
    let topology = Topology::of(&[a.clone(), b.clone()]);
    assert_eq!(
        topology.direct_pairs().collect::<Vec<_>>(),
        [(0, 1), (1, 0)]
    );
    round_trip(&a, &b);
    let peer = |d: &Device| d.query(keys::PEER_COPIES).unwrap();
    assert_eq!((peer(&a), peer(&b)), (1, 1), "one peer copy each way");
    let after = fake.stats();
    assert_eq!(after.peer_copies - before.peer_copies, 2);
    assert_eq!(after.peer_copies_unenabled, before.peer_copies_unenabled);
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    drop((a, b));

    fake.set_peer_access(false);
    let (a, b) = pair();
    assert_eq!(b.peer_reach(&a), Reach::Staged);
    round_trip(&a, &b);
    assert_eq!((peer(&a), peer(&b)), (0, 0));
    assert_eq!(fake.stats().peer_copies, after.peer_copies);
    fake.set_peer_access(true);
}
