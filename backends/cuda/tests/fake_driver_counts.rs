//! Tests on the fake CUDA driver (see `tests/fake_driver.rs`) that assert on the fake's
//! process-wide counters (host functions run, the largest pinned allocation): other tests
//! running alongside would move them, so these run one at a time, in a process of their own.

mod fake;

use std::sync::Mutex;

use fake::{fake_device, options, prepare_driver};
use halcyon_stream::CompletionStrategy;

/// One test at a time: the counters are the whole process's.
static SERIAL: Mutex<()> = Mutex::new(());

/// With flag-write completion every submission is settled by the scanner from the word its
/// stream wrote (`cuStreamWriteValue32`), not by a host function or a completion thread, and
/// the words' pinned slab goes with the device.
#[test]
fn flag_write_completions_come_from_the_words() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    use halcyon::BufferParams;
    use halcyon_conformance::harness::block_on;
    use halcyon_stream::keys;

    let fake = match prepare_driver() {
        Ok(fake) => fake,
        Err(e) => return eprintln!("skipped: {e}"),
    };
    let device = fake_device(options(CompletionStrategy::FlagWrite)).unwrap();
    assert!(
        device.info().name.contains("flag-write"),
        "{}",
        device.info().name
    );
    let queue = device.queue(1).unwrap();
    let buffer = device
        .allocator()
        .allocate(256, BufferParams::DEVICE)
        .unwrap();
    let timeline = queue.timeline().unwrap();
    let before = fake.stats();
    block_on(async {
        for value in 0..20u8 {
            queue.fill(timeline.next(), value, &buffer.whole()).await?;
        }
        Ok(())
    })
    .unwrap();
    let stat = |key| device.query(key).unwrap();
    assert_eq!(
        stat(keys::FLAG_COMPLETIONS) + stat(keys::PROBE_COMPLETIONS),
        20
    );
    assert!(stat(keys::FLAG_COMPLETIONS) > 0);
    assert_eq!(
        stat(keys::THREAD_COMPLETIONS) + stat(keys::CALLBACK_COMPLETIONS),
        0
    );
    assert_eq!(fake.stats().host_funcs_run, before.host_funcs_run);
    // (A contract violation, such as a word written after its slab was freed, would have
    // aborted the process.)
}

/// A host-visible buffer that is not device-local (`BufferParams::HOST`) is pinned host memory
/// (`cuMemHostAlloc`, the fake's largest pinned allocation grows to its size): written through
/// its mapping and copied to device memory with `Queue::copy`, it moves as a plain DMA, with no
/// staging and no host function, and arrives whole.
#[test]
fn host_buffers_are_pinned_and_copied_without_staging() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    use halcyon::{BufferParams, Fence, Timepoints};
    use halcyon_conformance::harness::{block_on, download_u32};

    // Larger than any staging chunk or pinned lease the stream layer makes.
    const WORDS: usize = 5 << 20; // 20 MiB
    let fake = match prepare_driver() {
        Ok(fake) => fake,
        Err(e) => return eprintln!("skipped: {e}"),
    };
    let device = fake_device(options(CompletionStrategy::CompletionThread)).unwrap();
    let queue = device.queue(0).unwrap();
    let bytes = (WORDS * 4) as u64;
    let host = device
        .allocator()
        .allocate(bytes, BufferParams::HOST)
        .unwrap();
    let target = device
        .allocator()
        .allocate(bytes, BufferParams::DEVICE)
        .unwrap();
    assert!(
        fake.stats().largest_pinned >= bytes,
        "the host buffer is pinned: {:?}",
        fake.stats()
    );
    {
        let mut mapped = host.map_write(..).unwrap();
        for (i, word) in mapped.as_mut_slice::<u32>().unwrap().iter_mut().enumerate() {
            *word = (i as u32).wrapping_mul(2_654_435_761);
        }
    }
    let host_funcs = fake.stats().host_funcs_run;
    block_on(queue.copy(Timepoints::default(), &host.whole(), &target.whole())).unwrap();
    assert_eq!(
        fake.stats().host_funcs_run,
        host_funcs,
        "the copy from pinned memory ran a host function (staging)"
    );
    let back = block_on(download_u32(&queue, Fence::new(), &target.whole())).unwrap();
    assert!(back
        .iter()
        .enumerate()
        .all(|(i, &w)| w == (i as u32).wrapping_mul(2_654_435_761)));
}
