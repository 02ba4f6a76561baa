//! Timeline semaphores shared as file descriptors (`VK_KHR_external_semaphore_fd`): exported
//! from one device, imported into another, signalled and waited on both sides; where the
//! device cannot share them (lavapipe), both calls fail with `Unimplemented`, saying so.

mod common;

use std::os::fd::AsFd;
use std::time::Duration;

use halcyon::{BufferParams, Fence, Semaphore, StatusCode, Timepoints};
use halcyon_conformance::harness::block_on;
use halcyon_vulkan::{export_semaphore_fd, import_semaphore_fd};

use common::device_or_skip;

#[test]
fn exported_fd_of_another_backend_semaphore_is_refused() {
    let error = export_semaphore_fd(&Semaphore::new(0)).unwrap_err();
    assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
    assert!(error.message().contains("create_semaphore"), "{error}");
}

#[test]
fn exported_fd_shares_a_timeline_between_two_devices() {
    let Some(a) = device_or_skip("exported_fd_shares_a_timeline_between_two_devices") else {
        return;
    };
    let Some(b) = device_or_skip("exported_fd_shares_a_timeline_between_two_devices") else {
        return;
    };
    let on_a = a.create_semaphore(0).unwrap();
    let fd = match export_semaphore_fd(&on_a) {
        Ok(fd) => fd,
        Err(error) if error.code() == StatusCode::Unimplemented => {
            eprintln!("{}: {error}", a.info().name);
            assert!(
                error.message().contains("VK_KHR_external_semaphore_fd"),
                "{error}"
            );
            // The import is refused the same way, before the driver sees the descriptor.
            let eventfd = Semaphore::new(0).export_fd(1).unwrap();
            let stand_in = eventfd.as_fd().try_clone_to_owned().unwrap();
            // SAFETY: the device cannot import (its export was just refused), so the
            // descriptor is closed without reaching the driver.
            let refused = unsafe { import_semaphore_fd(&b, stand_in) }.unwrap_err();
            assert_eq!(refused.code(), StatusCode::Unimplemented, "{refused}");
            return;
        }
        Err(error) => panic!("export: {error}"),
    };
    // SAFETY: exported just above from a timeline semaphore of the same physical device.
    let on_b = unsafe { import_semaphore_fd(&b, fd) }.unwrap();
    let wait = |semaphore: &Semaphore, value: u64| {
        semaphore
            .wait_blocking(value, Some(Duration::from_secs(30)))
            .unwrap_or_else(|e| panic!("{value}: {e}"));
    };
    // Signalled on A's side, seen on B's.
    on_a.signal(3).unwrap();
    wait(&on_b, 3);
    // B's queue waits on the shared timeline, then signals it: A sees that.
    let queue = b.queue(0).unwrap();
    let buffer = b.allocator().allocate(256, BufferParams::DEVICE).unwrap();
    let fill = queue.fill(
        Timepoints::new(Fence::at(&on_b, 5), Fence::at(&on_b, 7)),
        1u32,
        &buffer.whole(),
    );
    on_a.signal(5).unwrap();
    block_on(fill).unwrap();
    wait(&on_a, 7);
}
