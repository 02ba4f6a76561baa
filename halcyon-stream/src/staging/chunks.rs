//! Staged copies: a copy between pageable host memory and the device, enqueued on one stream
//! as device copies through a leased pinned buffer and host functions around them.
//!
//! A copy that fits the buffer (and a chunk) is one chunk: copied into the buffer at enqueue
//! (a write) or out of it by one host function (a read). A larger one is double-buffered: the
//! buffer's two halves take turns, and the [staging thread](super::stager) copies each chunk on
//! the host while the device copies the one before or after it, host functions in stream order
//! handing chunks over and waiting for them. Without the thread (the system refused one) the
//! chunks take turns through the whole buffer, each host copy made by a host function.

use std::sync::Arc;

use super::stager::{Pipeline, SendPtr, Stager};
use super::{Lease, StagingPool, CHUNK_BYTES};
use crate::api::HostFunc;
use halcyon::{Error, Result, StatusCode};

/// Held by a double-buffered copy's host function: dropped without having run (the stream
/// failed, and the driver drops what it will not run), it abandons the copy, waiting for the
/// chunks already handed to the staging thread, so that none is copied after the caller, told
/// of the stream's failure, lets go of its memory.
struct Unran(Option<Arc<Pipeline>>);

impl Unran {
    fn new(pipeline: &Arc<Pipeline>) -> Unran {
        Unran(Some(pipeline.clone()))
    }

    /// The host function runs: nothing to abandon.
    fn ran(mut self) {
        self.0 = None;
    }
}

impl Drop for Unran {
    fn drop(&mut self) {
        if let Some(pipeline) = self.0.take() {
            pipeline.abort();
        }
    }
}

/// How a staged copy of `len` (non-zero) bytes moves through its lease's buffer.
struct Chunks {
    len: usize,
    /// Bytes per chunk (the last may be shorter).
    size: usize,
    count: usize,
    /// Where even chunks go (the buffer's start) and odd ones (its second half when
    /// double-buffered, else its start too).
    halves: [*mut u8; 2],
}

impl Chunks {
    /// The half (or the whole buffer) chunk `k` goes through.
    fn half(&self, k: usize) -> *mut u8 {
        self.halves[k % 2]
    }

    /// Chunk `k`'s offset in the copy and length.
    fn span(&self, k: usize) -> (usize, usize) {
        let offset = k * self.size;
        (offset, self.size.min(self.len - offset))
    }
}

/// How a staged copy of `len` (non-zero) bytes through `lease` moves, and the staging thread
/// if its chunks go through the buffer's two halves.
fn plan(lease: &Lease, len: usize) -> Result<(Chunks, Option<&Stager>)> {
    let capacity = lease.capacity();
    if capacity == 0 {
        return Err(Error::new(
            StatusCode::Internal,
            "a staged copy was given an empty staging buffer",
        ));
    }
    let (size, stager) = if len <= capacity.min(CHUNK_BYTES) {
        (len, None)
    } else {
        match lease.pool.stager() {
            Some(stager) if capacity >= 2 => ((capacity / 2).min(CHUNK_BYTES), Some(stager)),
            _ => (capacity.min(CHUNK_BYTES), None),
        }
    };
    let start = lease.ptr();
    let second = match stager {
        // SAFETY: with two halves, `size <= capacity / 2`: the second starts in the buffer.
        Some(_) => unsafe { start.add(size) },
        None => start,
    };
    let chunks = Chunks {
        len,
        size,
        count: len.div_ceil(size),
        halves: [start, second],
    };
    Ok((chunks, stager))
}

/// Enqueues a copy of `len` bytes from host memory at `src` to the device, through the pinned
/// buffer of `lease` (see the [module docs](crate::staging)).
///
/// `copy(staging, offset, n)` enqueues the device's copy of `n` bytes from `staging` to the
/// destination's byte `offset`; `enqueue` enqueues a host function, on the same stream. The
/// first chunk is copied into the buffer now, on the calling thread. Each later one is copied
/// before the device's copy of it, which waits for a host function: double-buffered, that host
/// function hands the chunk after it to the staging thread (its half was freed by the device's
/// copy before) and waits for its own chunk, copied meanwhile; otherwise it copies its chunk
/// itself. A last host function returns the buffer to its pool. Host functions call no driver
/// function.
///
/// Failure: if the first device copy cannot be enqueued, nothing was, and the buffer goes back
/// to the pool. A later failure returns the error with the chunks enqueued so far left to run
/// (the destination is then partly written) and orphans the buffer, which they may still use;
/// before it returns, the staging thread has finished every chunk of this copy it was handed,
/// and is handed none after.
///
/// # Safety
/// `src..src+len` must be readable, and not be modified, until the stream has run everything
/// enqueued here (its host functions read it), and must not overlap the lease's buffer.
pub unsafe fn stage_to_device(
    lease: Lease,
    src: *const u8,
    len: usize,
    mut copy: impl FnMut(*const u8, usize, usize) -> Result<()>,
    mut enqueue: impl FnMut(HostFunc) -> Result<()>,
) -> Result<()> {
    if len == 0 {
        lease.release();
        return Ok(());
    }
    let (chunks, double) = plan(&lease, len)?;
    let (staging, count) = (chunks.half(0), chunks.count);
    // SAFETY: the caller keeps `src..src+len` readable; the buffer holds at least `chunk`
    // bytes that nothing else uses (the lease is this copy's).
    unsafe { std::ptr::copy_nonoverlapping(src, staging, chunks.span(0).1) };
    if let Err(error) = copy(staging, 0, chunks.span(0).1) {
        lease.release(); // nothing was enqueued
        return Err(error);
    }
    let pool = lease.pool.clone();
    let pipeline = double.map(|stager| {
        let pipeline = Pipeline::new(1);
        if count > 1 {
            let (offset, n) = chunks.span(1);
            // SAFETY: the caller keeps the source readable and unmodified until the stream ran
            // what is enqueued here, and no host function runs before the one waiting for this
            // chunk; the second half is the lease's and no device copy uses it before then.
            // Abandoned, the copy waits for the chunk before it returns.
            unsafe {
                pipeline.hand(
                    stager,
                    SendPtr(src.add(offset).cast_mut()),
                    SendPtr(chunks.half(1)),
                    n,
                )
            };
        }
        pipeline
    });
    let fail = |error: Error, lease: Lease| {
        if let Some(pipeline) = &pipeline {
            pipeline.abort();
        }
        drop(lease); // orphaned: chunks enqueued may still use it
        Err(error)
    };
    for k in 1..count {
        let (offset, n) = chunks.span(k);
        let step: HostFunc = match &pipeline {
            Some(pipeline) => {
                let next = (k + 1 < count).then(|| {
                    let (offset, n) = chunks.span(k + 1);
                    // SAFETY: `offset < len`, inside the caller's `src..src+len`.
                    (
                        SendPtr(unsafe { src.add(offset) }.cast_mut()),
                        SendPtr(chunks.half(k + 1)),
                        n,
                    )
                });
                let (pipeline, pool) = (pipeline.clone(), pool.clone());
                // Dropped unrun (a stream error, or refused below), it hands nothing over, and
                // its guard waits for what was handed over before.
                let guard = Unran::new(&pipeline);
                Box::new(move || {
                    guard.ran();
                    if let (Some((from, to, n)), Some(stager)) = (next, pool.stager()) {
                        // SAFETY: runs in stream order after the device's copy out of the half
                        // chunk `k + 1` goes through (chunk `k - 1`'s) completed, and the one
                        // into it waits for this copy to be counted; the caller keeps the
                        // source readable and unmodified until the stream ran this.
                        unsafe { pipeline.hand(stager, from, to, n) };
                    }
                    pipeline.wait_copied(k + 1);
                })
            }
            None => {
                // SAFETY: `offset < len`, inside the caller's `src..src+len`.
                let (from, to) = (
                    SendPtr(unsafe { src.add(offset) }.cast_mut()),
                    SendPtr(staging),
                );
                // Dropped unrun (a stream error, or refused below), it copies nothing.
                Box::new(move || {
                    let (from, to) = (from, to);
                    // SAFETY: runs in stream order after the device's copy of the previous
                    // chunk out of the buffer completed, and before the next one starts; the
                    // caller keeps the source readable and unmodified until the stream ran it;
                    // the buffer holds `n` bytes and is disjoint from the source.
                    unsafe { std::ptr::copy_nonoverlapping(from.0.cast_const(), to.0, n) };
                })
            }
        };
        if let Err(error) = enqueue(step) {
            return fail(error, lease);
        }
        if let Err(error) = copy(chunks.half(k), offset, n) {
            return fail(error, lease);
        }
    }
    // Dropped unrun, it orphans the buffer instead.
    enqueue(Box::new(move || lease.release())).inspect_err(|_| {
        if let Some(pipeline) = &pipeline {
            pipeline.abort();
        }
    })
}

/// Enqueues a copy of `len` bytes from the device to host memory at `dst`, through the pinned
/// buffer of `lease` (see the [module docs](crate::staging)).
///
/// `copy(staging, offset, n)` enqueues the device's copy of `n` bytes from the source's byte
/// `offset` into `staging`; `enqueue` enqueues a host function, on the same stream. After each
/// device copy a host function moves the chunk to `dst`: double-buffered, it hands the chunk to
/// the staging thread, which copies it out while the device copies the next chunk into the
/// other half, and waits until the chunk before it is out (so that the device's copy after it
/// finds its half free); otherwise it copies the chunk out itself. The last one waits for every
/// chunk and returns the buffer to its pool. Work enqueued on the stream afterwards runs after
/// it, so the bytes are all in place when an event recorded after this completes. Host
/// functions call no driver function.
///
/// Failure: if the first device copy cannot be enqueued, nothing was, and the buffer goes back
/// to the pool. A later failure returns the error with the chunks enqueued so far left to run
/// (`dst` is then partly written) and orphans the buffer, which they may still use; before it
/// returns, the staging thread has finished every chunk of this copy it was handed, and is
/// handed none after.
///
/// # Safety
/// `dst..dst+len` must be valid for writes, and not be accessed by anything else, until the
/// stream has run everything enqueued here, and must not overlap the lease's buffer.
pub unsafe fn stage_from_device(
    lease: Lease,
    dst: *mut u8,
    len: usize,
    mut copy: impl FnMut(*mut u8, usize, usize) -> Result<()>,
    mut enqueue: impl FnMut(HostFunc) -> Result<()>,
) -> Result<()> {
    if len == 0 {
        lease.release();
        return Ok(());
    }
    let (chunks, double) = plan(&lease, len)?;
    let count = chunks.count;
    let pool: Arc<StagingPool> = lease.pool.clone();
    let pipeline = double.map(|_| Pipeline::new(0));
    let mut lease = Some(lease);
    for k in 0..count {
        let (offset, n) = chunks.span(k);
        let last = k + 1 == count;
        if let Err(error) = copy(chunks.half(k), offset, n) {
            if let (0, Some(lease)) = (k, lease.take()) {
                lease.release(); // nothing was enqueued
            }
            if let Some(pipeline) = &pipeline {
                pipeline.abort();
            }
            return Err(error); // else the lease is dropped: orphaned
        }
        // SAFETY: `offset < len`, inside the caller's `dst..dst+len`.
        let (from, to) = (SendPtr(chunks.half(k)), SendPtr(unsafe { dst.add(offset) }));
        let done = if last { lease.take() } else { None };
        // Dropped unrun (a stream error, or refused below), it writes nothing and orphans the
        // buffer if it held the lease.
        let copy_out: HostFunc = match &pipeline {
            Some(pipeline) => {
                let (pipeline, pool) = (pipeline.clone(), pool.clone());
                let guard = Unran::new(&pipeline);
                Box::new(move || {
                    guard.ran();
                    if let Some(stager) = pool.stager() {
                        // SAFETY: runs in stream order after the device's copy of this chunk
                        // into its half completed; the device's next copy into that half waits
                        // (two host functions later) for this chunk to be counted; the caller
                        // keeps `dst..dst+len` valid and untouched until the stream ran this;
                        // the two do not overlap.
                        unsafe { pipeline.hand(stager, from, to, n) };
                    }
                    pipeline.wait_copied(if last { count } else { k });
                    if let Some(lease) = done {
                        lease.release();
                    }
                })
            }
            None => Box::new(move || {
                let (from, to) = (from, to);
                // SAFETY: runs in stream order after the device's copy of this chunk into the
                // buffer completed, and before the next one starts; the caller keeps
                // `dst..dst+len` valid and untouched until the stream ran it; the two do not
                // overlap.
                unsafe { std::ptr::copy_nonoverlapping(from.0.cast_const(), to.0, n) };
                if let Some(lease) = done {
                    lease.release();
                }
            }),
        };
        if let Err(error) = enqueue(copy_out) {
            if let Some(pipeline) = &pipeline {
                pipeline.abort();
            }
            return Err(error);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;
    use std::ptr::NonNull;

    /// What a staged copy enqueued on its simulated stream, run in order by [`Stream::run`].
    enum Op {
        /// A device copy: `(host, device offset, n, to_device)`.
        Copy(*mut u8, usize, usize, bool),
        Host(HostFunc),
    }

    /// A stream that records what is enqueued and runs it in order over a "device" of bytes,
    /// failing the `fail_copy`-th device copy or `fail_enqueue`-th host function (from 0).
    #[derive(Default)]
    struct Stream {
        ops: Vec<Op>,
        copies: usize,
        enqueued: usize,
        fail_copy: Option<usize>,
        fail_enqueue: Option<usize>,
    }

    impl Stream {
        fn copy(&mut self, host: *mut u8, offset: usize, n: usize, to_device: bool) -> Result<()> {
            self.copies += 1;
            if self.fail_copy == Some(self.copies - 1) {
                return Err(Error::new(StatusCode::Internal, "copy refused"));
            }
            self.ops.push(Op::Copy(host, offset, n, to_device));
            Ok(())
        }

        fn enqueue(&mut self, f: HostFunc) -> Result<()> {
            self.enqueued += 1;
            if self.fail_enqueue == Some(self.enqueued - 1) {
                return Err(Error::new(StatusCode::Internal, "host function refused"));
            }
            self.ops.push(Op::Host(f));
            Ok(())
        }

        /// Runs the operations in order; returns (device copies, host functions) run.
        fn run(self, device: &mut [u8]) -> (usize, usize) {
            let (mut copies, mut hosts) = (0, 0);
            for op in self.ops {
                match op {
                    Op::Copy(host, offset, n, true) => {
                        copies += 1;
                        // SAFETY: `host` is the test's staging buffer of at least `n` bytes.
                        let bytes = unsafe { std::slice::from_raw_parts(host, n) };
                        device[offset..offset + n].copy_from_slice(bytes);
                    }
                    Op::Copy(host, offset, n, false) => {
                        copies += 1;
                        // SAFETY: as above, and nothing else uses the buffer meanwhile.
                        let bytes = unsafe { std::slice::from_raw_parts_mut(host, n) };
                        bytes.copy_from_slice(&device[offset..offset + n]);
                    }
                    Op::Host(f) => {
                        hosts += 1;
                        f();
                    }
                }
            }
            (copies, hosts)
        }
    }

    /// A pool (with a staging thread if `double`) and a lease of a real `capacity`-byte buffer
    /// (freed by [`free`]).
    fn real_lease(capacity: usize, double: bool) -> (Arc<StagingPool>, Lease) {
        let bytes: Box<[u8]> = vec![0xEE; capacity].into_boxed_slice();
        let ptr = NonNull::new(Box::into_raw(bytes).cast::<u8>()).unwrap();
        let pool = Arc::new(match double {
            true => StagingPool::default(),
            false => StagingPool::without_staging_thread(),
        });
        let lease = Lease::new(PinnedBuffer { ptr, capacity }, pool.clone());
        (pool, lease)
    }

    fn free(pool: &StagingPool) {
        for p in pool.drain() {
            let slice = std::ptr::slice_from_raw_parts_mut(p.ptr.as_ptr(), p.capacity);
            // SAFETY: allocated as a boxed slice of `capacity` bytes by `real_lease`.
            drop(unsafe { Box::from_raw(slice) });
        }
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
    }

    /// What a staged copy returned, the bytes at its destination, the (device copies, host
    /// functions) its stream ran, and the pool's counts afterwards.
    type Staged = (Result<()>, Vec<u8>, (usize, usize), (usize, usize, usize));

    /// Writes `len` bytes through a `capacity`-byte buffer.
    fn write_staged(len: usize, capacity: usize, double: bool, mut stream: Stream) -> Staged {
        let (pool, lease) = real_lease(capacity, double);
        let src = pattern(len);
        let cell = std::cell::RefCell::new(&mut stream);
        // SAFETY: `src` outlives the simulated stream's run below and is not modified.
        let result = unsafe {
            stage_to_device(
                lease,
                src.as_ptr(),
                len,
                |staging, offset, n| cell.borrow_mut().copy(staging.cast_mut(), offset, n, true),
                |f| cell.borrow_mut().enqueue(f),
            )
        };
        let mut device = vec![0u8; len];
        let ran = stream.run(&mut device);
        let counts = pool.counts();
        free(&pool);
        (result, device, ran, counts)
    }

    /// Reads `len` bytes through a `capacity`-byte buffer.
    fn read_staged(len: usize, capacity: usize, double: bool, mut stream: Stream) -> Staged {
        let (pool, lease) = real_lease(capacity, double);
        let mut dst = vec![0u8; len];
        let cell = std::cell::RefCell::new(&mut stream);
        // SAFETY: `dst` outlives the simulated stream's run below and nothing else touches it.
        let result = unsafe {
            stage_from_device(
                lease,
                dst.as_mut_ptr(),
                len,
                |staging, offset, n| cell.borrow_mut().copy(staging, offset, n, false),
                |f| cell.borrow_mut().enqueue(f),
            )
        };
        let mut device = pattern(len);
        let ran = stream.run(&mut device);
        let counts = pool.counts();
        // The staging thread is done with this copy once its stream ran (nothing waits here).
        free(&pool);
        (result, dst, ran, counts)
    }

    /// 150 bytes through 64: three chunks of 64 taking turns, or five of 32 in two halves.
    const MODES: [(bool, usize); 2] = [(false, 3), (true, 5)];

    #[test]
    fn staged_writes_move_chunk_by_chunk_in_stream_order() {
        for (double, chunks) in MODES {
            // A device copy per chunk; a host function per chunk after the first (a fill, or
            // a hand-over and wait), and the release.
            let (result, device, ran, counts) = write_staged(150, 64, double, Stream::default());
            result.unwrap();
            assert_eq!(device, pattern(150), "every chunk arrives whole ({double})");
            assert_eq!(ran, (chunks, chunks), "{double}");
            assert_eq!(counts, (1, 0, 0), "the buffer is back in the pool");
            // One chunk: no fill on the stream, only the release.
            let (result, device, ran, counts) = write_staged(64, 64, double, Stream::default());
            result.unwrap();
            assert_eq!((device, ran, counts), (pattern(64), (1, 1), (1, 0, 0)));
        }
        assert_eq!(staging_len(3 * CHUNK_BYTES), 2 * CHUNK_BYTES);
        assert_eq!(staging_len(CHUNK_BYTES), CHUNK_BYTES);
        assert_eq!(staging_len(100), 100);
    }

    #[test]
    fn staged_reads_move_chunk_by_chunk_in_stream_order() {
        for (double, chunks) in MODES {
            let (result, dst, ran, counts) = read_staged(150, 64, double, Stream::default());
            result.unwrap();
            assert_eq!(dst, pattern(150), "every chunk arrives whole ({double})");
            assert_eq!(ran, (chunks, chunks), "one copy out per chunk");
            assert_eq!(counts, (1, 0, 0), "the last copy out returns the buffer");
            let (result, dst, ran, counts) = read_staged(10, 64, double, Stream::default());
            result.unwrap();
            assert_eq!((dst, ran, counts), (pattern(10), (1, 1), (1, 0, 0)));
        }
    }

    /// Double-buffered copies of many chunks, through a buffer of real size: the halves never
    /// mix up, whatever the staging thread's timing.
    #[test]
    fn double_buffered_copies_of_many_chunks_arrive_whole() {
        for len in [2 * 4096 + 1, 17 * 4096 + 5] {
            let (result, device, ran, _) = write_staged(len, 8192, true, Stream::default());
            result.unwrap();
            assert!(device == pattern(len), "a write of {len}");
            assert_eq!(ran.0, len.div_ceil(4096));
            let (result, dst, ran, _) = read_staged(len, 8192, true, Stream::default());
            result.unwrap();
            assert!(dst == pattern(len), "a read of {len}");
            assert_eq!(ran.0, len.div_ceil(4096));
        }
    }

    #[test]
    fn staged_copies_orphan_their_buffer_once_anything_was_enqueued() {
        let refuse = |copy: Option<usize>, enqueue: Option<usize>| Stream {
            fail_copy: copy,
            fail_enqueue: enqueue,
            ..Stream::default()
        };
        for (double, _) in MODES {
            // The first device copy refused: nothing enqueued, the buffer is reused.
            let (result, _, ran, counts) = write_staged(150, 64, double, refuse(Some(0), None));
            assert!(result.is_err());
            assert_eq!((ran, counts), ((0, 0), (1, 0, 0)));
            let (result, _, ran, counts) = read_staged(150, 64, double, refuse(Some(0), None));
            assert!(result.is_err());
            assert_eq!((ran, counts), ((0, 0), (1, 0, 0)));
            // A later device copy, a host function or the release refused: what was enqueued
            // still runs, and the buffer it may use is never reused.
            for (copy, enqueue) in [(Some(2), None), (None, Some(1)), (None, Some(2))] {
                let stream = refuse(copy, enqueue);
                let (result, device, _, counts) = write_staged(150, 64, double, stream);
                assert!(result.is_err());
                assert_eq!(
                    counts,
                    (0, 0, 1),
                    "orphaned ({copy:?}, {enqueue:?}, {double})"
                );
                assert_eq!(device[..64], pattern(64)[..], "the first chunks still ran");
                let stream = refuse(copy, enqueue);
                let (result, dst, _, counts) = read_staged(150, 64, double, stream);
                assert!(result.is_err());
                assert_eq!(
                    counts,
                    (0, 0, 1),
                    "orphaned ({copy:?}, {enqueue:?}, {double})"
                );
                assert_eq!(dst[..32], pattern(32)[..], "the first chunk still ran");
            }
            // Nothing to copy: the buffer goes straight back.
            let (result, _, ran, counts) = write_staged(0, 64, double, Stream::default());
            result.unwrap();
            assert_eq!((ran, counts), ((0, 0), (1, 0, 0)));
            let (result, _, ran, counts) = read_staged(0, 64, double, Stream::default());
            result.unwrap();
            assert_eq!((ran, counts), ((0, 0), (1, 0, 0)));
        }
    }
}
