//! A CUDA device without a usable NCCL: channels are `Unavailable` with the reason, and
//! nothing panics. A process of its own: the NCCL a process loads is chosen once.

mod fake;

use fake::{fake_device, options};
use halcyon::channel::LocalGroup;
use halcyon::{ChannelParams, StatusCode};
use halcyon_cuda::nccl::Nccl;
use halcyon_stream::CompletionStrategy;

#[test]
fn nccl_missing_library_is_unavailable() {
    let device = match fake_device(options(CompletionStrategy::CompletionThread)) {
        Ok(device) => device,
        Err(e) => return eprintln!("skipped: {e}"),
    };
    // SAFETY: the file does not exist; nothing is loaded.
    let chosen = unsafe { Nccl::use_library("/nonexistent/libnccl.so.2") };
    let error = chosen.unwrap_err();
    assert_eq!(error.code(), StatusCode::Unavailable, "{error}");
    assert!(
        error.to_string().contains("/nonexistent/libnccl.so.2"),
        "{error}"
    );

    let group = LocalGroup::new(1);
    let error = device
        .channel(&group.rank(0).unwrap(), &ChannelParams::default())
        .unwrap_err();
    assert_eq!(error.code(), StatusCode::Unavailable, "{error}");
    assert!(error.to_string().contains("cuda://0"), "{error}");
    // The device goes on working.
    let buffer = device
        .allocator()
        .allocate(64, halcyon::BufferParams::DEVICE)
        .unwrap();
    let queue = device.queue(0).unwrap();
    halcyon_conformance::harness::block_on(queue.fill(
        halcyon::Timepoints::default(),
        7u8,
        &buffer.whole(),
    ))
    .unwrap();
    // A second choice is refused: the first stays.
    // SAFETY: as above.
    let again = unsafe { Nccl::use_library("/nonexistent/other.so") }.unwrap_err();
    assert_eq!(again.code(), StatusCode::FailedPrecondition, "{again}");
}
