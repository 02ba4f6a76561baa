//! Copies between two CUDA devices on the fake driver take the peer path: `Queue::copy_from`
//! from `cuda://0` into `cuda://1` is one `cuMemcpyPeerAsync` on the target's stream, after
//! `cuCtxEnablePeerAccess` once, and never a copy the driver would have to stage (access
//! not enabled). Then, with peer access turned off in the fake (for this whole process,
//! hence a process of its own), new devices report `Staged` and the same copy goes through
//! host memory.

mod fake;

use fake::{fake_device, options, prepare_driver};
use halcyon::topology::{Reach, Topology};
use halcyon::{BufferParams, Device, Fence, Timepoints};
use halcyon_conformance::harness::{block_on, download_u32, pattern_u32, upload_u32};
use halcyon_cuda::create_device_with;
use halcyon_stream::{keys, CompletionStrategy};

fn pair() -> (Device, Device) {
    let options = options(CompletionStrategy::CompletionThread);
    let a = fake_device(options).expect("cuda://0 on the fake");
    let b = create_device_with(1, options).expect("cuda://1 on the fake");
    (a, b)
}

/// Copies `N` words from `a` into `b` and back; what arrived.
fn round_trip(a: &Device, b: &Device) -> Vec<u32> {
    const N: usize = 4096;
    let data = pattern_u32(N, 12);
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
        Ok(seen)
    })
    .unwrap()
}

#[test]
fn copies_between_two_gpus_are_peer_copies_where_the_driver_allows() {
    let fake = match prepare_driver() {
        Ok(fake) => fake,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
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
    assert_eq!(
        after.peer_copies_unenabled, before.peer_copies_unenabled,
        "a peer copy before peer access was enabled"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    drop((a, b));

    // Without peer access (a driver that says no): staged through host memory.
    fake.set_peer_access(false);
    let (a, b) = pair();
    assert_eq!(b.peer_reach(&a), Reach::Staged);
    assert_eq!(
        Topology::of(&[a.clone(), b.clone()]).direct_pairs().count(),
        0
    );
    round_trip(&a, &b);
    assert_eq!((peer(&a), peer(&b)), (0, 0));
    assert_eq!(fake.stats().peer_copies, after.peer_copies);
    fake.set_peer_access(true);
}
