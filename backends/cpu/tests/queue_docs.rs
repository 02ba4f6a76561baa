//! The queue documentation's examples that need a device, run on the CPU device (the core's
//! doctests have no backend to run on).

use halcyon::{BufferParams, Error, Fence, StatusCode, Timepoints};

/// `halcyon::queue`'s "Cancelling queued work": failing the semaphore a queued fill waits on
/// cancels it, and its submission reports the cancellation.
#[test]
fn cancelling_queued_work() {
    let device = halcyon_cpu::default_device().unwrap();
    let queue = device.queue(0).unwrap();
    let buffer = device.allocator().allocate(4, BufferParams::HOST).unwrap();

    let go = queue.device().create_semaphore(0).unwrap();
    let done = queue.device().create_semaphore(0).unwrap();
    let fill = queue.fill(
        Timepoints::new(Fence::at(&go, 1), Fence::at(&done, 1)),
        7u8,
        &buffer.whole(),
    );
    go.fail(Error::new(StatusCode::Cancelled, "the user pressed stop"));
    let error = futures::executor::block_on(fill).unwrap_err();
    assert_eq!(error.code(), StatusCode::Cancelled);
    // Nothing was written.
    assert_eq!(&*buffer.map_read(..).unwrap(), &[0; 4]);
}
