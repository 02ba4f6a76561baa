//! Collectives on CPU devices, through a test engine over host memory that pairs two ranks in
//! this process: the core's channel order, refusals, failures travelling in order, and what
//! an engine that abandons or drops a collective leaves. MPI itself is tested in
//! `collectives/mpi` (two processes under `mpirun`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use halcyon::backend::{ChannelBackend, CollectiveKind, HostEngine, HostJob};
use halcyon::{
    Buffer, BufferParams, Channel, ChannelParams, ChannelProvider, Device, ElementType, Fence,
    Queue, ReduceOp, Result, Semaphore, StatusCode, Timepoints,
};

/// What the test engine does with the jobs it is handed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Pairs rank 0's and rank 1's n-th jobs and runs them (f32 sum, or a broadcast).
    Pair,
    /// Abandons every job (as a timeout would).
    Abandon,
    /// Drops every job unreported.
    Drop,
}

/// Two ranks' queues of started jobs, by rank; a job runs once its partner arrived.
#[derive(Default)]
struct Meeting {
    waiting: HashMap<u64, (u32, HostJob)>,
    started: [u64; 2],
    /// The kinds each rank's engine saw, in order.
    seen: [Vec<CollectiveKind>; 2],
}

struct TestEngine {
    rank: u32,
    mode: Mode,
    meeting: Arc<Mutex<Meeting>>,
}

impl ChannelBackend for TestEngine {
    fn rank(&self) -> u32 {
        self.rank
    }
    fn count(&self) -> u32 {
        2
    }
    fn engine(&self) -> &str {
        "test"
    }
    fn check(&self, kind: &CollectiveKind) -> Result<()> {
        match kind.reduction() {
            Some((_, ElementType::F32)) | None => Ok(()),
            Some((_, other)) => Err(halcyon::Error::new(
                StatusCode::Unimplemented,
                format!("the test engine reduces f32 only, not {other}"),
            )),
        }
    }
    fn host(&self) -> Option<&dyn HostEngine> {
        Some(self)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl HostEngine for TestEngine {
    unsafe fn start(&self, job: HostJob) {
        match self.mode {
            Mode::Abandon => {
                return job.done.abandon(halcyon::Error::new(
                    StatusCode::DeadlineExceeded,
                    "the test engine gave up",
                ))
            }
            Mode::Drop => return drop(job),
            Mode::Pair => {}
        }
        let mut meeting = self.meeting.lock().unwrap();
        let me = self.rank as usize;
        meeting.seen[me].push(job.kind);
        let n = meeting.started[me];
        meeting.started[me] += 1;
        let Some((_, other)) = meeting.waiting.remove(&n) else {
            meeting.waiting.insert(n, (self.rank, job));
            return;
        };
        drop(meeting);
        // SAFETY: both jobs' ranges are valid until they are completed (the contract).
        let result = unsafe { run(&job, &other) };
        job.done.complete(result.clone());
        other.done.complete(result);
    }
}

/// Runs a pair of jobs of the same kind (f32 sum or broadcast).
///
/// # Safety
///
/// Both jobs' ranges must be valid (as `HostEngine::start` requires).
unsafe fn run(a: &HostJob, b: &HostJob) -> Result<()> {
    if a.kind != b.kind {
        return Err(halcyon::Error::new(
            StatusCode::Internal,
            format!("mismatched collectives: {} and {}", a.kind, b.kind),
        ));
    }
    // SAFETY: each job's range is valid for its length (the contract), and holds f32s.
    let floats = |ptr: *const u8, len: usize| unsafe {
        std::slice::from_raw_parts(ptr.cast::<f32>(), len / 4).to_vec()
    };
    match a.kind {
        CollectiveKind::AllReduce { .. } => {
            let (x, y) = (floats(a.send, a.send_len), floats(b.send, b.send_len));
            let sum: Vec<f32> = x.iter().zip(&y).map(|(x, y)| x + y).collect();
            for job in [a, b] {
                // SAFETY: `recv` is valid for `recv_len` bytes, which `sum` holds.
                unsafe { std::ptr::copy(sum.as_ptr().cast::<u8>(), job.recv, job.recv_len) };
            }
            Ok(())
        }
        CollectiveKind::Broadcast { root } => {
            let (from, to) = if root == 0 { (a, b) } else { (b, a) };
            let bytes = floats(from.send, from.send_len);
            // SAFETY: as above: both ranks' ranges have the same length.
            unsafe { std::ptr::copy(bytes.as_ptr().cast::<u8>(), to.recv, to.recv_len) };
            Ok(())
        }
        other => Err(halcyon::Error::new(
            StatusCode::Unimplemented,
            format!("the test engine does not run {other}"),
        )),
    }
}

/// A provider for one of the two ranks.
struct TestProvider {
    rank: u32,
    mode: Mode,
    meeting: Arc<Mutex<Meeting>>,
}

impl ChannelProvider for TestProvider {
    fn name(&self) -> &str {
        "test"
    }
    fn rank(&self) -> u32 {
        self.rank
    }
    fn count(&self) -> u32 {
        2
    }
    fn exchange_id(&self, _: &mut [u8]) -> Result<()> {
        Ok(())
    }
    fn host_channel(&self, _: &ChannelParams) -> Result<Box<dyn ChannelBackend>> {
        Ok(Box::new(TestEngine {
            rank: self.rank,
            mode: self.mode,
            meeting: self.meeting.clone(),
        }))
    }
}

struct Rank {
    device: Device,
    queue: Queue,
    channel: Channel,
}

fn ranks(mode: Mode) -> ([Rank; 2], Arc<Mutex<Meeting>>) {
    let meeting = Arc::new(Mutex::new(Meeting::default()));
    let rank = |r| {
        let device = halcyon_cpu::default_device().unwrap();
        let provider = TestProvider {
            rank: r,
            mode,
            meeting: meeting.clone(),
        };
        let channel = device
            .channel(&provider, &ChannelParams::default())
            .unwrap();
        let queue = device.queue(0).unwrap();
        Rank {
            device,
            queue,
            channel,
        }
    };
    ([rank(0), rank(1)], meeting)
}

fn floats(rank: &Rank, values: &[f32]) -> Buffer {
    let buffer = (rank.device.allocator())
        .allocate(4 * values.len() as u64, BufferParams::HOST)
        .unwrap();
    buffer
        .map_write(..)
        .unwrap()
        .as_mut_slice::<f32>()
        .unwrap()
        .copy_from_slice(values);
    buffer
}

fn sum(rank: &Rank, wait: Fence, x: &Buffer) -> halcyon::Submission {
    let all = x.whole();
    (rank.queue).all_reduce(
        Timepoints::new(wait, Fence::new()),
        &rank.channel,
        ReduceOp::Sum,
        ElementType::F32,
        &all,
        &all,
    )
}

fn read(x: &Buffer) -> Vec<f32> {
    x.map_read(..).unwrap().as_slice::<f32>().unwrap().to_vec()
}

/// Collectives reach the engine in submission order, though the first one's wait is reached
/// last.
#[tokio::test]
async fn collectives_reach_the_engine_in_submission_order() {
    let ([a, b], meeting) = ranks(Mode::Pair);
    let (xa, ya, xb, yb) = (
        floats(&a, &[1.0, 2.0]),
        floats(&a, &[10.0]),
        floats(&b, &[3.0, 4.0]),
        floats(&b, &[20.0]),
    );
    let gate = Semaphore::new(0);
    let first = sum(&a, Fence::at(&gate, 1), &xa);
    let root = a
        .queue
        .broadcast(Timepoints::default(), &a.channel, 0, &ya.whole());
    let first_b = sum(&b, Fence::new(), &xb);
    let root_b = b
        .queue
        .broadcast(Timepoints::default(), &b.channel, 0, &yb.whole());
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        meeting.lock().unwrap().seen[0].is_empty(),
        "nothing overtakes the gated one"
    );
    gate.signal(1).unwrap();
    for s in [first, root, first_b, root_b] {
        s.await.unwrap();
    }
    assert_eq!(read(&xa), [4.0, 6.0]);
    assert_eq!(read(&xb), [4.0, 6.0]);
    assert_eq!(read(&yb), [10.0]);
    let seen = &meeting.lock().unwrap().seen;
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[0][1], CollectiveKind::Broadcast { root: 0 });
}

/// A collective whose wait fails does not run; the channel's later collectives on this rank
/// fail with that error, but one submitted before it and still waiting runs first.
#[tokio::test]
async fn a_failed_wait_fails_later_turns_in_order() {
    let ([a, b], _) = ranks(Mode::Pair);
    let (x, y, xb) = (floats(&a, &[1.0]), floats(&a, &[2.0]), floats(&b, &[5.0]));
    let (early, bad) = (Semaphore::new(0), Semaphore::new(0));
    let first = sum(&a, Fence::at(&early, 1), &x);
    let second = sum(&a, Fence::at(&bad, 1), &y);
    let third = sum(&a, Fence::new(), &y);
    bad.fail(halcyon::Error::new(
        StatusCode::DataLoss,
        "the input was lost",
    ));
    tokio::time::sleep(Duration::from_millis(20)).await;
    // The failure of the second turn waits for the first, which the peer then joins.
    early.signal(1).unwrap();
    sum(&b, Fence::new(), &xb).await.unwrap();
    first.await.unwrap();
    assert_eq!(read(&x), [6.0]);
    let second = second.await.unwrap_err();
    assert_eq!(second.code(), StatusCode::DataLoss, "{second}");
    let third = third.await.unwrap_err();
    assert!(third.to_string().contains("order"), "{third}");
    assert!(third.to_string().contains("input was lost"), "{third}");
}

/// Refusals name the problem, fail in order, and take the channel's later turns with them.
#[tokio::test]
async fn refused_collectives_fail_with_actionable_errors() {
    let ([a, b], _) = ranks(Mode::Pair);
    let x = floats(&a, &[1.0, 2.0]);
    let short = x.slice(0..4).unwrap();
    let code = |s: halcyon::Submission| async { s.await.unwrap_err().code() };
    let all = x.whole();
    let f32s = ElementType::F32;
    let (q, c) = (&a.queue, &a.channel);
    let lengths = q.all_reduce(Timepoints::default(), c, ReduceOp::Sum, f32s, &all, &short);
    assert_eq!(code(lengths).await, StatusCode::InvalidArgument);

    let ([a, _], _) = ranks(Mode::Pair);
    let x = floats(&a, &[1.0, 2.0]);
    let (all, (q, c)) = (x.whole(), (&a.queue, &a.channel));
    let f16 = q.all_reduce(
        Timepoints::default(),
        c,
        ReduceOp::Max,
        ElementType::F16,
        &all,
        &all,
    );
    let error = f16.await.unwrap_err();
    assert_eq!(error.code(), StatusCode::Unimplemented);
    assert!(error.to_string().contains("f32 only"), "{error}");

    let ([a, _], _) = ranks(Mode::Pair);
    let x = floats(&a, &[1.0, 2.0]);
    let peer = a
        .queue
        .send(Timepoints::default(), &a.channel, 0, &x.whole());
    assert!(peer.await.unwrap_err().to_string().contains("this rank"));

    let ([a, _], _) = ranks(Mode::Pair);
    let x = floats(&a, &[1.0, 2.0]);
    let root = a
        .queue
        .broadcast(Timepoints::default(), &a.channel, 2, &x.whole());
    assert_eq!(code(root).await, StatusCode::InvalidArgument);

    // A queue of another device than the channel's.
    let x = floats(&b, &[1.0]);
    let other = b
        .queue
        .broadcast(Timepoints::default(), &a.channel, 0, &x.whole());
    let error = other.await.unwrap_err();
    assert!(error.to_string().contains("another device"), "{error}");

    // A provider with no engine over host memory.
    struct Bare;
    impl ChannelProvider for Bare {
        fn name(&self) -> &str {
            "bare"
        }
        fn rank(&self) -> u32 {
            0
        }
        fn count(&self) -> u32 {
            1
        }
        fn exchange_id(&self, _: &mut [u8]) -> Result<()> {
            Ok(())
        }
    }
    let error = a
        .device
        .channel(&Bare, &ChannelParams::default())
        .unwrap_err();
    assert_eq!(error.code(), StatusCode::Unimplemented, "{error}");
}

/// An abandoned collective fails at once, and its buffer refuses every later use: mappings and
/// submissions alike.
#[tokio::test]
async fn an_abandoned_collective_quarantines_its_buffers() {
    let ([a, _], _) = ranks(Mode::Abandon);
    let x = floats(&a, &[1.0]);
    let error = sum(&a, Fence::new(), &x).await.unwrap_err();
    assert_eq!(error.code(), StatusCode::DeadlineExceeded, "{error}");
    let Err(mapping) = x.map_read(..) else {
        panic!("an abandoned collective's buffer must refuse mapping");
    };
    assert!(mapping.to_string().contains("abandoned"), "{mapping}");
    let fill = a.queue.fill(Timepoints::default(), 0u8, &x.whole());
    let error = fill.await.unwrap_err();
    assert_eq!(error.code(), StatusCode::FailedPrecondition, "{error}");
    // Waiting for the buffer to be idle does not hang: it is idle, and unusable.
    x.busy_fence().wait_all().await.unwrap();
}

/// An engine that drops a collective unreported fails it with `Aborted`, and nothing hangs.
#[tokio::test]
async fn a_dropped_collective_is_aborted() {
    let ([a, _], _) = ranks(Mode::Drop);
    let x = floats(&a, &[1.0]);
    let error = sum(&a, Fence::new(), &x).await.unwrap_err();
    assert_eq!(error.code(), StatusCode::Aborted, "{error}");
    assert_eq!(read(&x), [1.0]);
}
