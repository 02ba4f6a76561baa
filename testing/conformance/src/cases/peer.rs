//! What every copy between two devices keeps, whichever path it takes (peer DMA where the
//! target's driver reaches the source's memory, host staging otherwise), and the topology
//! query that says which path that is.

use futures::poll;
use halcyon::topology::{Reach, Topology};
use halcyon::{BufferParams, Device, Error, Fence, Result, Semaphore, StatusCode, Timepoints};

use crate::harness::{block_on, done, download_u32, pattern_u32, upload_u32};
use crate::kernels::Kernels;

/// `Topology::of` answers every pair: `Same` on the diagonal, `Direct` or `Staged` between the
/// two devices (as `Device::peer_reach` does), and `direct_pairs` lists exactly the `Direct`
/// ones. Then a copy from A to B (`Queue::copy_from`) waiting on a host semaphore moves nothing
/// until it is signalled, and the bytes arrive even though the source buffer was dropped
/// meanwhile (the copy holds it); a copy waiting on a semaphore that fails does not run and
/// fails, with its signal, with that error, leaving the target untouched. Needs no kernels.
pub fn copy_between_devices_keeps_order(a: Device, b: Device, _: &dyn Kernels) -> Result<()> {
    const N: usize = 2048;
    let topology = Topology::of(&[a.clone(), b.clone()]);
    assert_eq!(topology.reach(0, 0), Some(Reach::Same));
    assert_eq!(topology.reach(1, 1), Some(Reach::Same));
    assert_eq!(topology.reach(1, 0), Some(b.peer_reach(&a)));
    assert_eq!(topology.reach(0, 1), Some(a.peer_reach(&b)));
    assert_ne!(b.peer_reach(&a), Reach::Same, "two devices answered Same");
    let direct: Vec<(usize, usize)> = topology.direct_pairs().collect();
    for (target, source) in [(1, 0), (0, 1)] {
        let is_direct = topology.reach(target, source) == Some(Reach::Direct);
        assert_eq!(direct.contains(&(target, source)), is_direct, "{topology}");
    }
    assert_eq!(topology.reach(2, 0), None);
    block_on(async {
        let (qa, qb) = (a.queue(0)?, b.queue(0)?);
        let data = pattern_u32(N, 77);
        let bytes = 4 * N as u64;
        let on_b = b.allocator().allocate(bytes, BufferParams::DEVICE)?;
        done("clear", qb.fill(Timepoints::default(), 5u32, &on_b.whole())).await?;

        // Ordered by a host semaphore signalled later; the source dropped meanwhile.
        let on_a = upload_u32(&qa, &data).await?;
        let (gate, copied) = (Semaphore::new(0), b.create_semaphore(0)?);
        let mut copy = qb.copy_from(
            Timepoints::new(Fence::at(&gate, 1), Fence::at(&copied, 1)),
            &qa,
            &on_a.whole(),
            &on_b.whole(),
        );
        drop(on_a);
        assert!(
            poll!(&mut copy).is_pending(),
            "the copy completed before its wait was reached"
        );
        let early = download_u32(&qb, Fence::new(), &on_b.whole()).await?;
        assert!(early.iter().all(|&v| v == 5), "bytes moved before the wait");
        gate.signal(1)?;
        done("copy A to B", copy).await?;
        let seen = download_u32(&qb, Fence::at(&copied, 1), &on_b.whole()).await?;
        assert!(seen == data, "the bytes did not arrive whole");

        // A failed wait fails the copy and its signal, with the wait's error; nothing moves.
        let fresh = upload_u32(&qa, &pattern_u32(N, 3)).await?;
        let (gate, signalled) = (Semaphore::new(0), b.create_semaphore(0)?);
        let failing = qb.copy_from(
            Timepoints::new(Fence::at(&gate, 1), Fence::at(&signalled, 1)),
            &qa,
            &fresh.whole(),
            &on_b.whole(),
        );
        gate.fail(Error::new(StatusCode::Cancelled, "the producer gave up"));
        let error = failing
            .await
            .expect_err("a copy whose wait failed succeeded");
        assert_eq!(error.code(), StatusCode::Cancelled, "{error}");
        assert!(error.message().contains("the producer gave up"), "{error}");
        let error = signalled
            .wait(1)
            .await
            .expect_err("the copy's signal was not failed");
        assert_eq!(error.code(), StatusCode::Cancelled, "{error}");
        let after = download_u32(&qb, Fence::new(), &on_b.whole()).await?;
        assert!(after == data, "a copy whose wait failed moved bytes");
        Ok(())
    })
}
