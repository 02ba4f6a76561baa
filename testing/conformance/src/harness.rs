//! What the cases share: a runtime, hang guards, error assertions and buffer helpers.
//!
//! Nothing here asserts on elapsed time: [`HANG`] only turns a hang into a failure.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use bytemuck::Pod;

use halcyon::{
    Buffer, BufferParams, BufferRef, Device, Error, Fence, Queue, Result, Semaphore, StatusCode,
    Timepoints,
};

/// How long any single await may take before the case calls it a hang.
pub const HANG: Duration = Duration::from_secs(10);

/// Runs `future` to completion on a fresh multi-threaded tokio runtime.
pub fn block_on<T>(future: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .map_err(|e| Error::with_source(StatusCode::Internal, "cannot build a tokio runtime", e))?
        .block_on(future)
}

/// Awaits `future`; `DeadlineExceeded` naming `what` if it does not finish within [`HANG`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> Result<T> {
    tokio::time::timeout(HANG, future).await.map_err(|_| {
        Error::new(
            StatusCode::DeadlineExceeded,
            format!("{what} did not complete within {HANG:?}: it hangs"),
        )
    })
}

/// Awaits a fallible `future` (a submission, a wait) that must succeed; a failure or a hang
/// comes back as an error naming `what`.
pub async fn done<T>(what: &str, future: impl Future<Output = Result<T>>) -> Result<T> {
    within(what, future)
        .await?
        .map_err(|e| e.context(format!("{what} failed")))
}

/// Polls `condition` until it holds; `DeadlineExceeded` naming `what` if it does not within
/// [`HANG`]. For effects that may trail a completion (memory returning to a pool).
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) -> Result<()> {
    within(what, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
}

/// Asserts that `result` is an error with `code` whose message mentions every string in
/// `mentions`; returns the error.
#[track_caller]
pub fn assert_error<T: Debug>(result: Result<T>, code: StatusCode, mentions: &[&str]) -> Error {
    let error = match result {
        Ok(value) => panic!("expected a {code} error, but the operation succeeded with {value:?}"),
        Err(error) => error,
    };
    assert_eq!(error.code(), code, "expected a {code} error, got: {error}");
    for mention in mentions {
        assert!(
            error.message().contains(mention),
            "the {code} error should mention '{mention}' but says: {}",
            error.message()
        );
    }
    error
}

/// Asserts that `semaphore` has failed with `code` and a message containing `message`.
///
/// A refused operation fails its signal in order (after its waits and the earlier work on its
/// timelines), perhaps on another thread: this waits for the failure, up to the suite's hang
/// timeout.
#[track_caller]
pub fn assert_failed(semaphore: &Semaphore, code: StatusCode, message: &str) {
    let settled = semaphore.wait_blocking(Semaphore::MAX_VALUE, Some(HANG));
    assert_error(settled, code, &[message]);
}

/// Timepoints waiting on nothing and signalling `semaphore` to `value`.
pub fn signals(semaphore: &Semaphore, value: u64) -> Timepoints {
    Timepoints::new(Fence::new(), Fence::at(semaphore, value))
}

/// Timepoints waiting on `wait` reaching 1 and signalling `signal` to 1.
pub fn link(wait: &Semaphore, signal: &Semaphore) -> Timepoints {
    Timepoints::new(Fence::at(wait, 1), Fence::at(signal, 1))
}

/// Signals `semaphore` to `value` from a new thread (the "other thread" of the ordering cases).
pub fn signal_from_thread(
    semaphore: &Semaphore,
    value: u64,
) -> std::thread::JoinHandle<Result<()>> {
    let semaphore = semaphore.clone();
    std::thread::spawn(move || semaphore.signal(value))
}

/// Joins a [`signal_from_thread`] thread, passing on its result.
pub fn join(thread: std::thread::JoinHandle<Result<()>>) -> Result<()> {
    thread
        .join()
        .map_err(|_| Error::new(StatusCode::Internal, "the signalling thread panicked"))?
}

/// Little-endian bytes of `values`.
pub fn u32_bytes(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `values` read from little-endian bytes (a trailing partial value is an error).
pub fn bytes_u32(bytes: &[u8]) -> Result<Vec<u32>> {
    if !bytes.len().is_multiple_of(4) {
        return Err(Error::new(
            StatusCode::Internal,
            format!("{} bytes are not a whole number of u32s", bytes.len()),
        ));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// `n` deterministic, varied `u32`s (xorshift from `seed`).
pub fn pattern_u32(n: usize, seed: u32) -> Vec<u32> {
    let mut state = seed.max(1);
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        })
        .collect()
}

/// `n` deterministic, varied bytes.
pub fn pattern_bytes(n: usize, seed: u32) -> Vec<u8> {
    pattern_u32(n.div_ceil(4), seed)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .take(n)
        .collect()
}

/// Allocates a buffer with `params` holding `data`, uploaded with a queue write (awaited).
pub async fn upload<T: Pod>(queue: &Queue, params: BufferParams, data: &[T]) -> Result<Buffer> {
    let buffer = queue
        .device()
        .allocator()
        .allocate(std::mem::size_of_val(data) as u64, params)?;
    done(
        "upload",
        queue.write(Timepoints::default(), data, &buffer.whole()),
    )
    .await?;
    Ok(buffer)
}

/// [`upload`] of `u32`s into [`BufferParams::DEVICE`] memory.
pub async fn upload_u32(queue: &Queue, data: &[u32]) -> Result<Buffer> {
    upload(queue, BufferParams::DEVICE, data).await
}

/// Reads `source` once `after` is reached (queue read, awaited).
pub async fn download(queue: &Queue, after: Fence, source: &BufferRef) -> Result<Vec<u8>> {
    done(
        "download",
        queue.read::<u8>(Timepoints::new(after, Fence::new()), source),
    )
    .await
}

/// [`download`] as `u32`s.
pub async fn download_u32(queue: &Queue, after: Fence, source: &BufferRef) -> Result<Vec<u32>> {
    let read = queue.read(Timepoints::new(after, Fence::new()), source);
    done("download", read).await
}

/// `count` fresh device semaphores at 0.
pub fn semaphores(device: &Device, count: usize) -> Result<Vec<Semaphore>> {
    (0..count).map(|_| device.create_semaphore(0)).collect()
}

/// Submits an operation that validation must reject: `submit` gets timepoints signalling a
/// fresh semaphore; the `Submission` must fail with `code` mentioning every string of
/// `mentions`, and the semaphore must fail with the same error.
pub async fn assert_rejected<T: Debug>(
    device: &Device,
    what: &str,
    submit: impl FnOnce(Timepoints) -> halcyon::Submission<T>,
    code: StatusCode,
    mentions: &[&str],
) -> Result<Error> {
    let signal = device.create_semaphore(0)?;
    let outcome = within(what, submit(signals(&signal, 1))).await?;
    let error = assert_error(outcome, code, mentions);
    assert_failed(&signal, code, error.message());
    Ok(error)
}
