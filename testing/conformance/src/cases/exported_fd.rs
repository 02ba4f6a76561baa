//! Semaphores the OS can wait on: a semaphore's value exported as a file descriptor
//! (`Semaphore::export_fd`) follows the device work that signals it.

use std::os::fd::AsRawFd;
use std::time::Duration;

use halcyon::{BufferParams, Device, Error, Fence, Result, SemaphoreFd, StatusCode, Timepoints};

use crate::harness::{block_on, bytes_u32, done};
use crate::kernels::Kernels;

/// Whether `fd` becomes readable within `timeout` (`poll(2)`).
fn readable(fd: &SemaphoreFd, timeout: Duration) -> bool {
    let mut pollfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd for the call.
    let n = unsafe { libc::poll(&mut pollfd, 1, ms) };
    n == 1 && pollfd.revents & libc::POLLIN != 0
}

/// A fill gated by a device semaphore signals another; that one's value exported as a file
/// descriptor stays unreadable until the gate opens, then becomes readable once the fill ran
/// (a thread blocked in `poll(2)` sees it), with the bytes in place. A descriptor on the
/// value a submission that fails was to signal becomes readable with the failure.
pub fn semaphore_exported_fd_follows_device_work(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(1024, BufferParams::DEVICE)?;
        let (gate, filled) = (device.create_semaphore(0)?, device.create_semaphore(0)?);
        let fd = filled.export_fd(1)?;
        let fill = queue.fill(
            Timepoints::new(Fence::at(&gate, 1), Fence::at(&filled, 1)),
            7u32,
            &buffer.whole(),
        );
        assert!(
            !readable(&fd, Duration::from_millis(20)),
            "readable before the gate opened"
        );
        let blocked = std::thread::spawn(move || (readable(&fd, Duration::from_secs(30)), fd));
        gate.signal(1)?;
        let (seen, fd) = blocked.join().expect("the polling thread");
        assert!(seen, "not readable within 30 s of the gate opening");
        assert!(matches!(fd.result(), Some(Ok(()))), "{:?}", fd.result());
        done("the fill", fill).await?;
        let bytes = done("read", queue.read(Timepoints::default(), &buffer.whole())).await?;
        assert!(bytes_u32(&bytes)?.iter().all(|&v| v == 7));

        let (upstream, out) = (device.create_semaphore(0)?, device.create_semaphore(0)?);
        let fd = out.export_fd(1)?;
        let doomed = queue.fill(
            Timepoints::new(Fence::at(&upstream, 1), Fence::at(&out, 1)),
            1u32,
            &buffer.whole(),
        );
        upstream.fail(Error::new(StatusCode::Internal, "upstream failed"));
        assert!(
            readable(&fd, Duration::from_secs(30)),
            "not readable after the failure"
        );
        let error = fd.result().expect("settled").expect_err("failed");
        assert!(error.message().contains("upstream failed"), "{error}");
        assert!(doomed.await.is_err());
        Ok(())
    })
}
