//! Failure propagation: a failed operation or wait fails every operation downstream of it, with
//! the same error, and nothing downstream runs or hangs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use halcyon::{
    Buffer, Device, Error, Fence, Queue, Result, Semaphore, StatusCode, Submission, Timepoints,
};

use crate::harness::{
    assert_error, assert_failed, block_on, bytes_u32, download_u32, link, pattern_u32, semaphores,
    signals, u32_bytes, upload_u32, within,
};
use crate::kernels::{Kernels, StandardKernels};

/// Elements of the buffer [`downstream`] works on.
pub(crate) const N: u32 = 256;

/// Work downstream of `first`: a write, an increment, a barrier and a host call, each waiting on
/// the previous semaphore of `chain` (`chain[0]` is `first`'s signal). The host call sets `ran`.
pub(crate) fn downstream(
    queue: &Queue,
    kernels: &StandardKernels,
    buffer: &Buffer,
    chain: &[Semaphore],
    ran: &Arc<AtomicBool>,
) -> Vec<Submission> {
    let ran = ran.clone();
    vec![
        queue.write(
            link(&chain[0], &chain[1]),
            &u32_bytes(&[0; N as usize]),
            &buffer.whole(),
        ),
        kernels.add_one(queue, link(&chain[1], &chain[2]), &buffer.whole(), N),
        queue.barrier(link(&chain[2], &chain[3])),
        queue.host_call(link(&chain[3], &chain[4]), move || {
            ran.store(true, Ordering::SeqCst);
            Ok(())
        }),
    ]
}

/// Awaits every submission and checks each failed with `error`'s code and message, and that
/// every semaphore of `chain` failed the same way.
pub(crate) async fn assert_chain_failed(
    submissions: Vec<Submission>,
    chain: &[Semaphore],
    error: &Error,
) -> Result<()> {
    for (i, submission) in submissions.into_iter().enumerate() {
        let outcome = within(&format!("downstream operation {i}"), submission).await?;
        assert_error(outcome, error.code(), &[error.message()]);
    }
    for semaphore in chain {
        assert_failed(semaphore, error.code(), error.message());
    }
    Ok(())
}

/// A dispatch of the failing kernel, released after a whole chain was submitted behind it,
/// fails its own submission; every later signal fails with its error; nothing downstream runs
/// (the host call does not, the buffer keeps its data).
pub fn failing_dispatch_fails_the_chain(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    if !kernels.can_fail() {
        eprintln!(
            "skipping failing_dispatch_fails_the_chain on {}: its kernels cannot fail a dispatch",
            device.info().id
        );
        return Ok(());
    }
    block_on(async {
        let kernels = StandardKernels::load(device, kernels)?;
        let queue = device.queue(0)?;
        let data = pattern_u32(N as usize, 4);
        let buffer = upload_u32(&queue, &data).await?;
        let gate = device.create_semaphore(0)?;
        let chain = semaphores(device, 5)?;
        let ran = Arc::new(AtomicBool::new(false));

        let failing = kernels.fail(&queue, link(&gate, &chain[0]));
        let submissions = downstream(&queue, &kernels, &buffer, &chain, &ran);
        gate.signal(1)?;

        let outcome = within("the failing dispatch", failing).await?;
        let Err(error) = outcome else {
            panic!(
                "a dispatch of the '{}' kernel succeeded",
                crate::kernels::FAIL
            );
        };
        assert_chain_failed(submissions, &chain, &error).await?;
        assert!(
            !ran.load(Ordering::SeqCst),
            "a host call downstream of a failure ran"
        );
        let after = download_u32(&queue, Fence::new(), &buffer.whole()).await?;
        assert_eq!(
            after, data,
            "work downstream of a failure modified the buffer"
        );
        Ok(())
    })
}

/// A wait semaphore failed by the host fails the chain waiting on it, both for operations
/// submitted before the failure (pending) and after it (rejected at once), with the host's error.
pub fn failed_wait_semaphore_fails_the_chain(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    block_on(async {
        let kernels = StandardKernels::load(device, kernels)?;
        let queue = device.queue(0)?;
        let data = pattern_u32(N as usize, 5);
        let buffer = upload_u32(&queue, &data).await?;
        let injected = Error::new(StatusCode::Aborted, "injected failure 4242");
        let ran = Arc::new(AtomicBool::new(false));

        let before = semaphores(device, 5)?;
        let pending = downstream(&queue, &kernels, &buffer, &before, &ran);
        before[0].fail(injected.clone());
        assert_chain_failed(pending, &before, &injected).await?;

        let after = semaphores(device, 5)?;
        after[0].fail(injected.clone());
        let rejected = downstream(&queue, &kernels, &buffer, &after, &ran);
        assert_chain_failed(rejected, &after, &injected).await?;

        assert!(
            !ran.load(Ordering::SeqCst),
            "a host call downstream of a failure ran"
        );
        let read = download_u32(&queue, Fence::new(), &buffer.whole()).await?;
        assert_eq!(
            read, data,
            "work downstream of a failure modified the buffer"
        );
        Ok(())
    })
}

/// A host call returning an error fails its submission and its signal semaphore with that
/// error, and a barrier waiting on it fails the same way.
pub fn failing_host_call_fails_the_chain(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let s = semaphores(device, 2)?;
        let error = Error::new(StatusCode::DataLoss, "host call 99 lost its data");
        let returned = error.clone();
        let call = queue.host_call(signals(&s[0], 1), move || Err(returned));
        let barrier = queue.barrier(Timepoints::new(Fence::at(&s[0], 1), Fence::at(&s[1], 1)));
        assert_chain_failed(vec![call, barrier], &s, &error).await
    })
}

/// A submission reports its own outcome however late it is awaited: on a queue [`Timeline`],
/// a read (signalling 1), then a host call failing (waiting 1, signalling 2). Awaited after
/// the failure, the read still completes with its bytes, since its signal was reached before
/// the timeline failed; a wait on the timeline semaphore gets the failure, whatever the value
/// (a failed semaphore fails every waiter).
///
/// [`Timeline`]: halcyon::Timeline
pub fn submission_outlives_a_later_failure(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let data = pattern_u32(N as usize, 6);
        let buffer = upload_u32(&queue, &data).await?;
        let timeline = queue.timeline()?;
        let error = Error::new(StatusCode::DataLoss, "host call 77 lost its data");
        let returned = error.clone();
        let read = queue.read(timeline.next(), &buffer.whole());
        let call = queue.host_call(timeline.next(), move || Err(returned));
        let outcome = within("the failing host call", call).await?;
        assert_error(outcome, error.code(), &[error.message()]);
        let bytes = within("the read before the failure", read)
            .await?
            .map_err(|e| e.context("a read completed before a later failure reported it"))?;
        assert_eq!(
            bytes_u32(&bytes)?,
            data,
            "the read returned the wrong bytes"
        );
        let late = within(
            "a wait on the failed timeline",
            timeline.semaphore().wait(1),
        )
        .await?;
        assert_error(late, error.code(), &[error.message()]);
        Ok(())
    })
}
