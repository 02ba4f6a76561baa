//! A property test of one queue against a byte-exact model: random transfers at byte
//! granularity through a [`halcyon::Timeline`], with refusals mixed in.
//!
//! Where [`crate::cases::random_programs`] checks ordering and failure propagation across
//! queues with `u32`-sized operations, this case checks the bytes: 1-, 2- and 4-byte fill
//! patterns, writes, reads and copies at any byte offset and length (empty ones included),
//! buffers of odd sizes, and command buffers (one-shot, and a reusable one replayed through
//! binding tables), every byte compared with a `Vec<u8>` model. A seeded generator
//! (`HALCYON_CONFORMANCE_SEED`, printed with every failure) picks the program.

use std::fmt;

use halcyon::{
    Binding, BindingTable, Buffer, BufferParams, BufferRef, CommandBuffer, CommandBufferMode,
    Device, Fence, Queue, QueueCapabilities, Result, Semaphore, StatusCode, Submission, Timeline,
    Timepoints,
};

use crate::harness::{block_on, within};
use crate::kernels::Kernels;

/// Operations in one program (checkpoints not counted).
const OPERATIONS: usize = 300;

/// A small deterministic generator (xorshift64*), so that a seed names a program.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // Never zero: xorshift stays at zero.
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True once in `n` times.
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// A range of `len` bytes at a multiple of `align` within `size` bytes (`len <= size`).
    fn at(&mut self, size: u64, len: u64, align: u64) -> u64 {
        self.below((size - len) / align + 1) * align
    }

    /// A length that is a multiple of `align`, at most `max`: empty one time in twenty.
    fn len(&mut self, max: u64, align: u64) -> u64 {
        if self.one_in(20) {
            0
        } else {
            self.below(max / align + 1) * align
        }
    }
}

/// The seed: `HALCYON_CONFORMANCE_SEED` or a fixed one.
fn seed() -> u64 {
    std::env::var("HALCYON_CONFORMANCE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xB17E)
}

/// A byte range of buffer `buffer`.
#[derive(Clone, Copy, Debug)]
struct Span {
    buffer: usize,
    at: u64,
    len: u64,
}

/// One primitive transfer (a queue operation of its own, or a command of a command buffer).
#[derive(Clone, Debug)]
enum Transfer {
    Fill { target: Span, pattern: Vec<u8> },
    Update { target: Span, data: Vec<u8> },
    Copy { source: Span, target: Span },
}

impl Transfer {
    /// Applies it to the model.
    fn apply(&self, model: &mut [Vec<u8>]) {
        let range = |s: &Span| s.at as usize..(s.at + s.len) as usize;
        match self {
            Transfer::Fill { target, pattern } => {
                for (i, byte) in model[target.buffer][range(target)].iter_mut().enumerate() {
                    *byte = pattern[i % pattern.len()];
                }
            }
            Transfer::Update { target, data } => {
                model[target.buffer][range(target)].copy_from_slice(data)
            }
            Transfer::Copy { source, target } => {
                let bytes = model[source.buffer][range(source)].to_vec();
                model[target.buffer][range(target)].copy_from_slice(&bytes);
            }
        }
    }
}

/// What a refused operation gets wrong.
#[derive(Clone, Copy, Debug)]
enum Refusal {
    /// A 4-byte fill at an offset or length that is not a multiple of 4.
    MisalignedFill,
    /// A 3-byte fill pattern.
    PatternOf3,
    /// An update at an offset that is not a multiple of 4.
    MisalignedUpdate,
    /// An update with more data than its target.
    UpdateLength,
    /// A copy between overlapping ranges of one buffer.
    OverlappingCopy,
    /// A copy from 8 bytes to 4.
    CopyLength,
    /// The reusable command buffer with a slot range shorter than it accesses.
    ShortSlot,
    /// A range past the end of its buffer: the caller's slice fails, the timeline step it
    /// took is dropped unsubmitted (and becomes a barrier).
    PastTheEnd,
}

/// One operation of the program.
#[derive(Clone, Debug)]
enum Op {
    /// A queue fill, update or copy.
    One(Transfer),
    /// A queue write of any length at any offset.
    Write { target: Span, data: Vec<u8> },
    /// A queue read (`read_into` a vector `reuse` bytes long, where given).
    Read { source: Span, reuse: Option<usize> },
    /// A one-shot command buffer: the transfers with a barrier between each.
    Recorded(Vec<Transfer>),
    /// The reusable command buffer with `slot0` and `slot1` in its table (see [`replay`]).
    Replay { slot0: Span, slot1: Span },
    /// An operation the queue (or the caller's slice) refuses.
    Refused(Refusal),
    /// Reads every buffer back, then waits for everything submitted so far.
    Checkpoint,
}

/// The reusable command buffer: copy 16 bytes from slot 0 to bytes 4..20 of slot 1, then fill
/// bytes 0..4 of slot 1 with the 2-byte pattern `0x5AA5`.
fn replay() -> Result<CommandBuffer> {
    let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
    builder
        .copy(Binding::slot(0, 0, 16), Binding::slot(1, 4, 16))?
        .barrier()
        .fill([0xA5u8, 0x5A], Binding::slot(1, 0, 4))?;
    Ok(builder.finish())
}

/// [`replay`]'s effect on the model.
fn replay_transfers(slot0: Span, slot1: Span) -> [Transfer; 2] {
    [
        Transfer::Copy {
            source: Span { len: 16, ..slot0 },
            target: Span {
                at: slot1.at + 4,
                len: 16,
                ..slot1
            },
        },
        Transfer::Fill {
            target: Span { len: 4, ..slot1 },
            pattern: vec![0xA5, 0x5A],
        },
    ]
}

/// The program's buffers and their model.
struct State {
    buffers: Vec<Buffer>,
    model: Vec<Vec<u8>>,
    /// Whether buffer `i` is host-mappable (checked through a mapping at checkpoints too).
    mappable: Vec<bool>,
}

impl State {
    fn size(&self, buffer: usize) -> u64 {
        self.buffers[buffer].size()
    }

    /// A random span of a random buffer, aligned to `align`, at most `max` bytes long.
    fn span(&self, rng: &mut Rng, align: u64, max: u64) -> Span {
        let buffer = rng.below(self.buffers.len() as u64) as usize;
        self.span_in(rng, buffer, align, max)
    }

    fn span_in(&self, rng: &mut Rng, buffer: usize, align: u64, max: u64) -> Span {
        let size = self.size(buffer);
        let len = rng.len(max.min(size), align);
        Span {
            buffer,
            at: rng.at(size, len, align),
            len,
        }
    }

    fn range(&self, span: Span) -> Result<BufferRef> {
        self.buffers[span.buffer].slice(span.at..span.at + span.len)
    }

    /// A random transfer that the queue accepts.
    fn transfer(&self, rng: &mut Rng) -> Transfer {
        match rng.below(3) {
            0 => {
                let pattern_len = [1, 2, 4][rng.below(3) as usize];
                Transfer::Fill {
                    target: self.span(rng, pattern_len, u64::MAX),
                    pattern: rng.bytes(pattern_len as usize),
                }
            }
            1 => {
                let target = self.span(rng, 4, 1024);
                Transfer::Update {
                    target,
                    data: rng.bytes(target.len as usize),
                }
            }
            _ => {
                let buffers = self.buffers.len() as u64;
                let (a, b) = (rng.below(buffers) as usize, rng.below(buffers) as usize);
                let (size_a, size_b) = (self.size(a), self.size(b));
                // Within one buffer the ranges must not overlap: at most half of it.
                let max = if a == b {
                    size_a / 2
                } else {
                    size_a.min(size_b)
                };
                let len = rng.len(max, 1);
                let mut source = Span {
                    buffer: a,
                    at: rng.at(size_a, len, 1),
                    len,
                };
                let mut target = Span {
                    buffer: b,
                    at: rng.at(size_b, len, 1),
                    len,
                };
                if overlap(source, target) {
                    // Both halves of the buffer, in a random order.
                    (source.at, target.at) = (0, size_a - len);
                    if rng.one_in(2) {
                        (source.at, target.at) = (target.at, source.at);
                    }
                }
                Transfer::Copy { source, target }
            }
        }
    }
}

fn overlap(a: Span, b: Span) -> bool {
    a.buffer == b.buffer && a.at < b.at + b.len && b.at < a.at + a.len
}

/// A random operation.
fn random_op(rng: &mut Rng, state: &State) -> Op {
    match rng.below(100) {
        0..=39 => Op::One(state.transfer(rng)),
        40..=49 => {
            let target = state.span(rng, 1, u64::MAX);
            Op::Write {
                target,
                data: rng.bytes(target.len as usize),
            }
        }
        50..=64 => Op::Read {
            source: state.span(rng, 1, u64::MAX),
            reuse: rng.one_in(2).then(|| rng.below(600) as usize),
        },
        65..=74 => {
            let n = 1 + rng.below(3) as usize;
            Op::Recorded((0..n).map(|_| state.transfer(rng)).collect())
        }
        75..=81 => {
            // Slot 0: 16 bytes anywhere; slot 1: 20 bytes at an even offset of another buffer
            // (the 2-byte fill lands at its start).
            let buffers = state.buffers.len() as u64;
            let a = rng.below(buffers) as usize;
            let b = (a + 1 + rng.below(buffers - 1) as usize) % buffers as usize;
            let slot0 = Span {
                buffer: a,
                at: rng.at(state.size(a), 16, 1),
                len: 16 + rng.below(8),
            };
            let slot0 = Span {
                len: slot0.len.min(state.size(a) - slot0.at),
                ..slot0
            };
            let slot1 = Span {
                buffer: b,
                at: rng.at(state.size(b), 20, 2),
                len: 20,
            };
            Op::Replay { slot0, slot1 }
        }
        82..=95 => Op::Refused(
            [
                Refusal::MisalignedFill,
                Refusal::PatternOf3,
                Refusal::MisalignedUpdate,
                Refusal::UpdateLength,
                Refusal::OverlappingCopy,
                Refusal::CopyLength,
                Refusal::ShortSlot,
                Refusal::PastTheEnd,
            ][rng.below(8) as usize],
        ),
        _ => Op::Checkpoint,
    }
}

/// A submitted operation's pending outcome.
enum Pending {
    /// Must succeed.
    Done(Submission),
    /// Must succeed with these bytes.
    Bytes(Submission<Vec<u8>>, Vec<u8>),
    /// Must fail with `code`, as must `signal`, and only once `timeline` reached `after`.
    Refused {
        submission: Submission,
        code: StatusCode,
        signal: Semaphore,
        after: u64,
    },
    /// A host mapping of buffer `buffer` must show the model's bytes once everything before
    /// it completed.
    Mapped { buffer: usize, bytes: Vec<u8> },
}

/// Where a failure happened, for the messages.
struct At<'a> {
    seed: u64,
    index: usize,
    op: &'a dyn fmt::Debug,
}

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "byte-model program (seed {}; rerun with HALCYON_CONFORMANCE_SEED={}), operation {} \
             ({:?})",
            self.seed, self.seed, self.index, self.op
        )
    }
}

/// The first differing byte of `got` and `want`, if any, for a message.
fn first_difference(got: &[u8], want: &[u8]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} bytes, expected {}", got.len(), want.len()));
    }
    let i = (0..got.len()).find(|&i| got[i] != want[i])?;
    let end = (i + 8).min(got.len());
    Some(format!(
        "byte {i} differs: got {:02x?}, the model says {:02x?}",
        &got[i..end],
        &want[i..end]
    ))
}

/// Settles the pending operations in submission order, checking each.
async fn settle(
    pending: &mut Vec<(usize, String, Pending)>,
    state: &State,
    timeline: &Timeline,
    seed: u64,
) -> Result<()> {
    for (index, what, outcome) in pending.drain(..) {
        let at = At {
            seed,
            index,
            op: &what,
        };
        match outcome {
            Pending::Done(submission) => {
                if let Err(error) = within("an operation", submission).await? {
                    panic!("{at} failed: {error}");
                }
            }
            Pending::Bytes(submission, want) => match within("a read", submission).await? {
                Ok(got) => {
                    if let Some(difference) = first_difference(&got, &want) {
                        panic!("{at} read the wrong bytes: {difference}");
                    }
                }
                Err(error) => panic!("{at} failed: {error}"),
            },
            Pending::Refused {
                submission,
                code,
                signal,
                after,
            } => {
                let error = match within("a refused operation", submission).await? {
                    Ok(()) => panic!("{at} succeeded, but must be refused with {code}"),
                    Err(error) => error,
                };
                assert_eq!(error.code(), code, "{at} was refused with the wrong error");
                // The refusal failed its signal in order: only after its wait (the timeline
                // at `after`) was reached.
                let reached = timeline.semaphore().query()?;
                assert!(
                    reached >= after,
                    "{at} was refused before the work it waits on (timeline at {reached}, \
                     it waits on {after})"
                );
                let failure = within("the refused operation's signal", signal.wait(1)).await?;
                match failure {
                    Ok(()) => panic!("{at}: the refused operation's signal was reached"),
                    Err(failure) => assert_eq!(failure.code(), code, "{at}: {failure}"),
                }
            }
            Pending::Mapped { buffer, bytes } => {
                let mapped = state.buffers[buffer].map_read(..)?;
                if let Some(difference) = first_difference(&mapped, &bytes) {
                    panic!("{at}: the host mapping of buffer {buffer} differs: {difference}");
                }
            }
        }
    }
    Ok(())
}

/// Calls `$call` with `$pattern`'s bytes as one fill value of as many bytes: `u8`, `[u8; 2]`,
/// `[u8; 3]` (which the fill refuses) or `[u8; 4]`.
macro_rules! with_pattern {
    ($pattern:expr, |$value:ident| $call:expr) => {
        match *$pattern.as_slice() {
            [a] => {
                let $value = a;
                $call
            }
            [a, b] => {
                let $value = [a, b];
                $call
            }
            [a, b, c] => {
                let $value = [a, b, c];
                $call
            }
            [a, b, c, d] => {
                let $value = [a, b, c, d];
                $call
            }
            _ => unreachable!("fill patterns are 1 to 4 bytes"),
        }
    };
}

/// Submits `transfer` as one queue operation.
fn submit_one(
    queue: &Queue,
    state: &State,
    timepoints: impl Into<Timepoints>,
    transfer: &Transfer,
) -> Result<Submission> {
    Ok(match transfer {
        Transfer::Fill { target, pattern } => {
            let target = state.range(*target)?;
            with_pattern!(pattern, |value| queue.fill(timepoints, value, &target))
        }
        Transfer::Update { target, data } => queue.update(timepoints, data, &state.range(*target)?),
        Transfer::Copy { source, target } => {
            queue.copy(timepoints, &state.range(*source)?, &state.range(*target)?)
        }
    })
}

/// Records `transfer` into `builder`.
fn record(
    builder: &mut halcyon::CommandBufferBuilder,
    state: &State,
    transfer: &Transfer,
) -> Result<()> {
    match transfer {
        Transfer::Fill { target, pattern } => {
            let target = state.range(*target)?;
            with_pattern!(pattern, |value| builder.fill(value, target))?
        }
        Transfer::Update { target, data } => builder.update(data, state.range(*target)?)?,
        Transfer::Copy { source, target } => {
            builder.copy(state.range(*source)?, state.range(*target)?)?
        }
    };
    Ok(())
}

async fn run_program(device: &Device, seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    let queue = device
        .queues(device.queue_affinity(QueueCapabilities::TRANSFER))?
        .into_iter()
        .next()
        .expect("a device has a transfer queue");
    let timeline = queue.timeline()?;
    let replay = replay()?;

    // Four buffers of 24 to 700 bytes (odd sizes too), the last one host-mappable, each
    // written whole with random bytes first.
    let mut state = State {
        buffers: Vec::new(),
        model: Vec::new(),
        mappable: Vec::new(),
    };
    let mut pending = Vec::new();
    for i in 0..4 {
        let size = 24 + rng.below(677);
        let mappable = i == 3;
        let params = if mappable {
            BufferParams::HOST
        } else {
            BufferParams::DEVICE
        };
        let buffer = device.allocator().allocate(size, params)?;
        let bytes = rng.bytes(size as usize);
        let write = queue.write(timeline.next(), &bytes, &buffer.whole());
        pending.push((
            0,
            format!("initial write of buffer {i}"),
            Pending::Done(write),
        ));
        state.buffers.push(buffer);
        state.model.push(bytes);
        state.mappable.push(mappable);
    }

    let mut ops: Vec<Op> = (0..OPERATIONS)
        .map(|_| random_op(&mut rng, &state))
        .collect();
    ops.push(Op::Checkpoint);
    let (mut refusals, mut checkpoints, mut bytes_read) = (0, 0, 0u64);
    for (index, op) in ops.iter().enumerate() {
        let what = format!("{op:?}");
        let what = if what.len() > 300 {
            format!("{}...", &what[..300])
        } else {
            what
        };
        match op {
            Op::One(transfer) => {
                let submission = submit_one(&queue, &state, timeline.next(), transfer)?;
                transfer.apply(&mut state.model);
                pending.push((index, what, Pending::Done(submission)));
            }
            Op::Write { target, data } => {
                let submission = queue.write(timeline.next(), data, &state.range(*target)?);
                Transfer::Update {
                    target: *target,
                    data: data.clone(),
                }
                .apply(&mut state.model);
                pending.push((index, what, Pending::Done(submission)));
            }
            Op::Read { source, reuse } => {
                let range = state.range(*source)?;
                let submission = match reuse {
                    Some(len) => queue.read_into(timeline.next(), &range, vec![0xEE; *len]),
                    None => queue.read(timeline.next(), &range),
                };
                let want = state.model[source.buffer]
                    [source.at as usize..(source.at + source.len) as usize]
                    .to_vec();
                bytes_read += source.len;
                pending.push((index, what, Pending::Bytes(submission, want)));
            }
            Op::Recorded(transfers) => {
                let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
                for transfer in transfers {
                    record(&mut builder, &state, transfer)?;
                    builder.barrier();
                    transfer.apply(&mut state.model);
                }
                let submission = queue.execute(timeline.next(), &builder.finish(), None);
                pending.push((index, what, Pending::Done(submission)));
            }
            Op::Replay { slot0, slot1 } => {
                let table = BindingTable::from_ranges([state.range(*slot0)?, state.range(*slot1)?]);
                let submission = queue.execute(timeline.next(), &replay, Some(&table));
                for transfer in replay_transfers(*slot0, *slot1) {
                    transfer.apply(&mut state.model);
                }
                pending.push((index, what, Pending::Done(submission)));
            }
            Op::Refused(refusal) => {
                refusals += 1;
                // `refuse` cannot touch the model; the checkpoints' reads show that the device
                // did not touch the bytes either.
                refuse(
                    &queue,
                    &state,
                    &timeline,
                    &replay,
                    *refusal,
                    &mut rng,
                    &mut pending,
                    (index, what),
                )?;
            }
            Op::Checkpoint => {
                checkpoints += 1;
                for (buffer, model) in state.model.iter().enumerate() {
                    let read = queue.read(timeline.next(), &state.buffers[buffer].whole());
                    let what = format!("checkpoint read of buffer {buffer}");
                    pending.push((index, what, Pending::Bytes(read, model.clone())));
                }
                // Waiting here lets host mappings look (nothing is in flight afterwards).
                settle(&mut pending, &state, &timeline, seed).await?;
                for buffer in (0..state.buffers.len()).filter(|&b| state.mappable[b]) {
                    let bytes = state.model[buffer].clone();
                    let what = format!("checkpoint mapping of buffer {buffer}");
                    pending.push((index, what, Pending::Mapped { buffer, bytes }));
                }
                settle(&mut pending, &state, &timeline, seed).await?;
            }
        }
    }
    // Every value the timeline handed out was signalled (dropped steps included).
    assert_eq!(
        timeline.semaphore().query()?,
        timeline.last(),
        "byte-model program (seed {seed}): the timeline stopped short"
    );
    eprintln!(
        "byte-model program (seed {seed}): {} operations, {refusals} refused, {checkpoints} \
         checkpoints, {bytes_read} bytes read back, buffers of {:?} bytes",
        ops.len(),
        state.buffers.iter().map(Buffer::size).collect::<Vec<_>>()
    );
    Ok(())
}

/// Submits an operation the queue must refuse, waiting on the timeline's last value and
/// signalling a semaphore of its own, so that the timeline carries on.
#[allow(clippy::too_many_arguments)]
fn refuse(
    queue: &Queue,
    state: &State,
    timeline: &Timeline,
    replay: &CommandBuffer,
    refusal: Refusal,
    rng: &mut Rng,
    pending: &mut Vec<(usize, String, Pending)>,
    (index, what): (usize, String),
) -> Result<()> {
    let buffer = rng.below(state.buffers.len() as u64) as usize;
    let size = state.size(buffer);
    let whole = state.buffers[buffer].whole();
    let part = |at: u64, len: u64| state.buffers[buffer].slice(at..at + len);
    if let Refusal::PastTheEnd = refusal {
        // The caller's slice fails after `next()` handed out a step: the dropped step becomes
        // a barrier, so the timeline does not stall.
        let len = 1 + rng.below(8);
        let attempt = || -> Result<Submission> {
            Ok(queue.fill(timeline.next(), 1u8, &part(size + 1 - len, len)?))
        };
        let error = attempt().err().unwrap_or_else(|| {
            panic!("operation {index} ({what}): a range past the end of buffer {buffer} was sliced")
        });
        assert_eq!(error.code(), StatusCode::OutOfRange, "{error}");
        return Ok(());
    }
    let signal = queue.device().create_semaphore(0)?;
    let after = timeline.last();
    let timepoints = Timepoints::new(
        Fence::at(timeline.semaphore(), after),
        Fence::at(&signal, 1),
    );
    let (submission, code) = match refusal {
        Refusal::MisalignedFill => {
            let (at, len) = if rng.one_in(2) {
                (1 + 4 * rng.below((size - 5) / 4), 4)
            } else {
                (0, 4 * rng.below(size / 4) + 2)
            };
            let fill = queue.fill(timepoints, [1u8, 2, 3, 4], &part(at, len)?);
            (fill, StatusCode::InvalidArgument)
        }
        Refusal::PatternOf3 => (
            queue.fill(timepoints, [1u8, 2, 3], &whole),
            StatusCode::InvalidArgument,
        ),
        Refusal::MisalignedUpdate => {
            let at = 2 + 4 * rng.below((size - 6) / 4);
            let update = queue.update(timepoints, &[7u8; 4], &part(at, 4)?);
            (update, StatusCode::InvalidArgument)
        }
        Refusal::UpdateLength => (
            queue.update(timepoints, &[7u8; 12], &part(0, 8)?),
            StatusCode::InvalidArgument,
        ),
        Refusal::OverlappingCopy => {
            let len = 2 + rng.below(size / 2 - 1);
            let shift = 1 + rng.below(len - 1);
            let at = rng.below(size - len - shift + 1);
            let copy = queue.copy(timepoints, &part(at, len)?, &part(at + shift, len)?);
            (copy, StatusCode::InvalidArgument)
        }
        Refusal::CopyLength => (
            queue.copy(timepoints, &part(0, 8)?, &part(size - 4, 4)?),
            StatusCode::InvalidArgument,
        ),
        Refusal::ShortSlot => {
            // Slot 1 is accessed up to byte 20; give it 19.
            let other = (buffer + 1) % state.buffers.len();
            let table =
                BindingTable::from_ranges([part(0, 16)?, state.buffers[other].slice(0..19)?]);
            (
                queue.execute(timepoints, replay, Some(&table)),
                StatusCode::OutOfRange,
            )
        }
        Refusal::PastTheEnd => unreachable!("handled above"),
    };
    pending.push((
        index,
        what,
        Pending::Refused {
            submission,
            code,
            signal,
            after,
        },
    ));
    Ok(())
}

/// Random byte-granular queue operations against a byte-exact model, on one queue through a
/// timeline (see the module docs): 300 operations over four buffers of 24 to 700 bytes (one
/// host-mappable), fills with 1-, 2- and 4-byte patterns, updates, writes and copies at any
/// valid offset and length (empty ones included), reads (some into a reused vector of another
/// length), one-shot command buffers and a reusable one replayed with new binding tables. Each
/// read returns the model's bytes at its place in the program; at random checkpoints and at
/// the end every buffer is read back (and the mappable one mapped) and compared byte for byte.
/// About one operation in seven is one the queue must refuse (a misaligned fill or update, a
/// 3-byte pattern, mismatched lengths, overlapping copy ranges, a binding-table slot too short:
/// `InvalidArgument` or `OutOfRange`) or whose range the caller cannot slice: each fails with
/// its code, only after the work it waits on, failing its own signal; the model is unchanged,
/// and every later operation still succeeds. The seed (`HALCYON_CONFORMANCE_SEED`) is printed
/// with every failure.
pub fn queue_ops_match_byte_model(device: &Device, _: &dyn Kernels) -> Result<()> {
    let seed = seed();
    block_on(run_program(device, seed))
        .map_err(|e| e.context(format!("byte-model program (seed {seed})")))
}
