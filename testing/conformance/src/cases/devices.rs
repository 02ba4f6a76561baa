//! Two devices: work on one device waiting on the other's semaphores, failures crossing the
//! boundary, both devices driven from the same executor threads, resources of one device used
//! on the other, and one device dropped while the other waits on it.
//!
//! Each case is a [`crate::PairCase`]: it gets two devices of one driver and loads the
//! backend's kernels on each (an executable belongs to the device that loaded it).

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::poll;
use halcyon::{Device, Error, Fence, Queue, Result, Semaphore, StatusCode, Submission, Timepoints};

use super::failure::{assert_chain_failed, downstream, N as CHAIN_LEN};
use crate::harness::{
    assert_error, assert_failed, block_on, bytes_u32, done, download_u32, join, link, pattern_u32,
    semaphores, signal_from_thread, signals, u32_bytes, upload_u32, within,
};
use crate::kernels::{Kernels, StandardKernels};

/// One device of the pair with its queue 0 and its own load of the standard kernels.
#[derive(Clone)]
struct Side {
    device: Device,
    queue: Queue,
    kernels: StandardKernels,
}

impl Side {
    fn new(device: Device, kernels: &dyn Kernels) -> Result<Side> {
        Ok(Side {
            queue: device.queue(0)?,
            kernels: StandardKernels::load(&device, kernels)?,
            device,
        })
    }

    /// The device's id, for messages.
    fn id(&self) -> &str {
        &self.device.info().id
    }
}

/// `values` each plus `n` (wrapping, as the increment kernel does).
fn plus(values: &[u32], n: u32) -> Vec<u32> {
    values.iter().map(|v| v.wrapping_add(n)).collect()
}

/// Asserts that `actual` is `expected`, naming the first differing element.
#[track_caller]
fn assert_values(actual: &[u32], expected: &[u32], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: wrong length");
    let wrong = (0..actual.len()).find(|&i| actual[i] != expected[i]);
    if let Some(i) = wrong {
        panic!(
            "{what}: element {i} is {}, expected {}",
            actual[i], expected[i]
        );
    }
}

/// What host calls saw: who ran, and the values of two semaphores.
type Log = Arc<Mutex<Vec<(&'static str, u64, u64)>>>;

/// A host call that records `who` with the values of `first` and `second` it sees.
fn record(
    log: &Log,
    who: &'static str,
    first: &Semaphore,
    second: &Semaphore,
) -> impl FnOnce() -> Result<()> + Send + 'static {
    let (log, first, second) = (log.clone(), first.clone(), second.clone());
    move || {
        let seen = (who, first.query()?, second.query()?);
        log.lock().unwrap().push(seen);
        Ok(())
    }
}

/// Everything is submitted before a host gate (a semaphore of device A) is signalled from
/// another thread: A increments its buffer behind the gate and signals its semaphore `sa`; B
/// increments its own buffer waiting on `sa` and signals its semaphore `sb`; a host call on B
/// waiting on `sb` records the values of `sa` and `sb` it sees and signals `sb` to 2; then A
/// reads its buffer, and a host call on A records what it sees and signals `sa` to 2, both
/// waiting on B's `sb` at 2. Before the gate nothing runs (every submission pending, both
/// semaphores at 0, no host call ran). Afterwards B's host call saw `sa` at 1 and `sb` at 1, A's
/// saw `sa` at 1 and `sb` at 2 (each device ran only once the other's semaphore was reached,
/// never before), both buffers were incremented exactly once, and no semaphore keeps a waiter.
/// Waits on another device's semaphore whose signal is not yet scheduled are parked and
/// released; none hangs.
pub fn cross_device_wait(a: Device, b: Device, kernels: &dyn Kernels) -> Result<()> {
    const N: u32 = 1000;
    block_on(async {
        let (a, b) = (Side::new(a, kernels)?, Side::new(b, kernels)?);
        let (data_a, data_b) = (pattern_u32(N as usize, 21), pattern_u32(N as usize, 22));
        let buffer_a = upload_u32(&a.queue, &data_a).await?;
        let buffer_b = upload_u32(&b.queue, &data_b).await?;
        let gate = a.device.create_semaphore(0)?;
        let sa = a.device.create_semaphore(0)?;
        let sb = b.device.create_semaphore(0)?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let at = |semaphore: &Semaphore, value: u64| Fence::at(semaphore, value);

        let mut submissions = vec![
            (
                "A's increment behind the gate",
                a.kernels
                    .add_one(&a.queue, link(&gate, &sa), &buffer_a.whole(), N),
            ),
            (
                "B's increment waiting on A's semaphore",
                b.kernels
                    .add_one(&b.queue, link(&sa, &sb), &buffer_b.whole(), N),
            ),
            (
                "B's host call",
                b.queue
                    .host_call((at(&sb, 1), at(&sb, 2)), record(&log, "B", &sa, &sb)),
            ),
            (
                "A's host call waiting on B's semaphore",
                a.queue
                    .host_call((at(&sb, 2), at(&sa, 2)), record(&log, "A", &sa, &sb)),
            ),
        ];
        let mut read_a = a.queue.read((at(&sb, 2), Fence::new()), &buffer_a.whole());
        for (what, submission) in &mut submissions {
            assert!(
                poll!(submission).is_pending(),
                "{what} completed before the gate was signalled"
            );
        }
        assert!(
            poll!(&mut read_a).is_pending(),
            "A's read waiting on B's semaphore completed before the gate was signalled"
        );
        assert_eq!(
            (sa.query()?, sb.query()?),
            (0, 0),
            "a semaphore moved before the gate"
        );
        assert!(
            log.lock().unwrap().is_empty(),
            "a host call ran before the gate"
        );

        let thread = signal_from_thread(&gate, 1);
        for (what, submission) in submissions {
            done(what, submission).await?;
        }
        let read_a = bytes_u32(&done("A's read waiting on B's semaphore", read_a).await?)?;
        join(thread)?;

        assert_eq!(
            *log.lock().unwrap(),
            [("B", 1, 1), ("A", 1, 2)],
            "the host calls ran out of order, or saw the other device's semaphore at the wrong \
             value (entries: who, sa, sb)"
        );
        assert_values(&read_a, &plus(&data_a, 1), "A's buffer after one increment");
        let read_b = download_u32(&b.queue, at(&sb, 2), &buffer_b.whole()).await?;
        assert_values(&read_b, &plus(&data_b, 1), "B's buffer after one increment");
        assert_eq!((sa.query()?, sb.query()?), (2, 2));
        for (name, semaphore) in [("the gate", &gate), ("sa", &sa), ("sb", &sb)] {
            assert_eq!(
                semaphore.waiter_count(),
                0,
                "a waiter on {name} was left behind"
            );
        }
        Ok(())
    })
}

/// Twenty rounds alternating between the devices (A for even rounds, B for odd), all submitted
/// from one thread before a host gate releases the first. Round `r` is an increment of its
/// device's own buffer waiting on the other device's semaphore at the value the other's last
/// round left (round 0 waits on the gate) and signalling its own semaphore, then a host call on
/// the same device that logs the round with the values of both semaphores it sees and signals
/// its own semaphore again, which the next round waits on. The log must list every round once,
/// in order, each seeing its own increment done and the other device exactly one round behind
/// (a round released early, late or twice, or two rounds overlapping, shows there); each buffer
/// is incremented once per round of its device, and the semaphores end at their last values.
pub fn cross_device_ping_pong(a: Device, b: Device, kernels: &dyn Kernels) -> Result<()> {
    const ROUNDS: u64 = 20;
    const N: u32 = 500;
    block_on(async {
        let sides = [Side::new(a, kernels)?, Side::new(b, kernels)?];
        let data = [pattern_u32(N as usize, 31), pattern_u32(N as usize, 32)];
        let mut buffers = Vec::new();
        for (side, data) in sides.iter().zip(&data) {
            buffers.push(upload_u32(&side.queue, data).await?);
        }
        let own = [
            sides[0].device.create_semaphore(0)?,
            sides[1].device.create_semaphore(0)?,
        ];
        let gate = sides[0].device.create_semaphore(0)?;
        let log = Arc::new(Mutex::new(Vec::new()));

        let mut submissions = Vec::new();
        for round in 0..ROUNDS {
            let (this, other) = ((round % 2) as usize, ((round + 1) % 2) as usize);
            let side = &sides[this];
            // This device's k-th round (from 1) signals 2k - 1, its host call 2k; the other
            // device has run round.div_ceil(2) rounds before this one.
            let k = round / 2 + 1;
            let wait = match round {
                0 => Fence::at(&gate, 1),
                _ => Fence::at(&own[other], 2 * round.div_ceil(2)),
            };
            let increment = side.kernels.add_one(
                &side.queue,
                (wait, Fence::at(&own[this], 2 * k - 1)),
                &buffers[this].whole(),
                N,
            );
            let (log, mine, theirs) = (log.clone(), own[this].clone(), own[other].clone());
            let logged = side.queue.host_call(
                (
                    Fence::at(&own[this], 2 * k - 1),
                    Fence::at(&own[this], 2 * k),
                ),
                move || {
                    let seen = (round, mine.query()?, theirs.query()?);
                    log.lock().unwrap().push(seen);
                    Ok(())
                },
            );
            submissions.push((round, increment));
            submissions.push((round, logged));
        }
        assert_eq!(
            (own[0].query()?, own[1].query()?),
            (0, 0),
            "a round ran before the gate"
        );
        assert!(
            log.lock().unwrap().is_empty(),
            "a round ran before the gate"
        );

        gate.signal(1)?;
        for (round, submission) in submissions {
            done(&format!("round {round}"), submission).await?;
        }
        let expected: Vec<(u64, u64, u64)> = (0..ROUNDS)
            .map(|round| (round, 2 * (round / 2 + 1) - 1, 2 * round.div_ceil(2)))
            .collect();
        assert_eq!(
            *log.lock().unwrap(),
            expected,
            "rounds ran out of order or overlapped (entries: round, own semaphore, other \
             device's semaphore)"
        );
        let per_device = [ROUNDS.div_ceil(2), ROUNDS / 2];
        for i in 0..2 {
            assert_eq!(
                own[i].query()?,
                2 * per_device[i],
                "device {} ended at the wrong semaphore value",
                sides[i].id()
            );
            let values = download_u32(&sides[i].queue, Fence::new(), &buffers[i].whole()).await?;
            assert_values(
                &values,
                &plus(&data[i], per_device[i] as u32),
                &format!(
                    "the buffer of {} after {} rounds",
                    sides[i].id(),
                    per_device[i]
                ),
            );
            assert_eq!(own[i].waiter_count(), 0, "a waiter was left behind");
        }
        Ok(())
    })
}

/// Checks that an operation failing on A (`fail` submits it on A's queue behind a gate, with
/// the timepoints it is given) fails B's chain waiting on it and comes back to A, and that both
/// devices work afterwards. `expected`: the error the operation must fail with, if known.
async fn failure_crosses(
    a: &Side,
    b: &Side,
    what: &str,
    seed: u32,
    fail: impl FnOnce(&Side, Timepoints) -> Submission,
    expected: Option<&Error>,
) -> Result<()> {
    let data_a = pattern_u32(CHAIN_LEN as usize, seed);
    let data_b = pattern_u32(CHAIN_LEN as usize, seed + 1);
    let buffer_a = upload_u32(&a.queue, &data_a).await?;
    let buffer_b = upload_u32(&b.queue, &data_b).await?;
    let gate = a.device.create_semaphore(0)?;
    // chain[0] is A's, signalled by the failing operation; chain[1..5] are B's.
    let mut chain = vec![a.device.create_semaphore(0)?];
    chain.extend(semaphores(&b.device, 4)?);
    let back = a.device.create_semaphore(0)?;
    let ran = Arc::new(AtomicBool::new(false));

    let failing = fail(a, link(&gate, &chain[0]));
    let mut submissions = downstream(&b.queue, &b.kernels, &buffer_b, &chain, &ran);
    submissions.push(a.queue.barrier(link(&chain[4], &back)));
    chain.push(back);
    gate.signal(1)?;

    let outcome = within(&format!("{what} on A"), failing).await?;
    let Err(error) = outcome else {
        panic!("{what} on {} succeeded", a.id());
    };
    if let Some(expected) = expected {
        assert_error::<()>(Err(error.clone()), expected.code(), &[expected.message()]);
    }
    // Submitted after the failure, an operation on B waiting on A's failed semaphore fails too.
    let late = b.device.create_semaphore(0)?;
    submissions.push(b.kernels.add_one(
        &b.queue,
        link(&chain[0], &late),
        &buffer_b.whole(),
        CHAIN_LEN,
    ));
    chain.push(late);
    assert_chain_failed(submissions, &chain, &error).await?;
    assert!(
        !ran.load(Ordering::SeqCst),
        "a host call on B downstream of {what} on A ran"
    );

    // The failure stayed in its chain: both devices run fresh work, across the boundary too.
    let read_b = download_u32(&b.queue, Fence::new(), &buffer_b.whole()).await?;
    assert_values(
        &read_b,
        &data_b,
        &format!("B's buffer after work downstream of {what} on A failed"),
    );
    let (fresh_a, fresh_b) = (a.device.create_semaphore(0)?, b.device.create_semaphore(0)?);
    let add_a = a
        .kernels
        .add_one(&a.queue, signals(&fresh_a, 1), &buffer_a.whole(), CHAIN_LEN);
    let add_b = b.kernels.add_one(
        &b.queue,
        link(&fresh_a, &fresh_b),
        &buffer_b.whole(),
        CHAIN_LEN,
    );
    done(&format!("an increment on A after {what}"), add_a).await?;
    done(&format!("an increment on B after {what}"), add_b).await?;
    let read_a = download_u32(&a.queue, Fence::at(&fresh_a, 1), &buffer_a.whole()).await?;
    assert_values(
        &read_a,
        &plus(&data_a, 1),
        &format!("A's buffer incremented after {what}"),
    );
    let read_b = download_u32(&b.queue, Fence::at(&fresh_b, 1), &buffer_b.whole()).await?;
    assert_values(
        &read_b,
        &plus(&data_b, 1),
        &format!("B's buffer incremented after {what}"),
    );
    Ok(())
}

/// A host call on A returning an error, released after everything downstream was submitted,
/// fails B's chain waiting on A's semaphore (a write, an increment, a barrier and a host call on
/// B) with that error, every signal semaphore of the chain failing the same way; a barrier on A
/// waiting on the end of B's chain fails with it too, and so does an increment on B submitted
/// after the failure. Nothing downstream runs (B's host call does not, B's buffer keeps
/// its data). The failure stays in its chain: afterwards A and B both run fresh work correctly,
/// B waiting on A. Where the kernels can fail a dispatch, the same again with a dispatch of the
/// failing kernel on A.
pub fn cross_device_failure_propagates(a: Device, b: Device, kernels: &dyn Kernels) -> Result<()> {
    let can_fail = kernels.can_fail();
    block_on(async {
        let (a, b) = (Side::new(a, kernels)?, Side::new(b, kernels)?);
        let error = Error::new(
            StatusCode::DataLoss,
            "host call 517 on device A lost its data",
        );
        let returned = error.clone();
        failure_crosses(
            &a,
            &b,
            "a failing host call",
            41,
            move |a, timepoints| a.queue.host_call(timepoints, move || Err(returned)),
            Some(&error),
        )
        .await?;
        if can_fail {
            failure_crosses(
                &a,
                &b,
                "a dispatch of the failing kernel",
                43,
                |a, timepoints| a.kernels.fail(&a.queue, timepoints),
                None,
            )
            .await?;
        } else {
            eprintln!(
                "cross_device_failure_propagates on {}: its kernels cannot fail a dispatch, so \
                 only the failing host call was checked",
                a.id()
            );
        }
        Ok(())
    })
}

/// Eight tokio tasks on the two-thread runtime, each running ten rounds that alternate which
/// device goes first: upload a fresh pattern to each device, submit an increment on one
/// device and then one on the other, back to back, and read both back. Every read must show its own pattern plus one. Calls for both devices interleave on
/// each executor thread; a completion routed to the wrong device or semaphore, a lost wake or
/// buffers mixed up show as a wrong value or a hang.
pub fn concurrent_devices(a: Device, b: Device, kernels: &dyn Kernels) -> Result<()> {
    const TASKS: u32 = 8;
    const ROUNDS: u32 = 10;
    const N: u32 = 300;
    block_on(async {
        let sides = Arc::new([Side::new(a, kernels)?, Side::new(b, kernels)?]);
        let mut tasks = Vec::new();
        for task in 0..TASKS {
            let sides = sides.clone();
            tasks.push(tokio::spawn(async move {
                for round in 0..ROUNDS {
                    let first = ((task + round) % 2) as usize;
                    let order = [&sides[first], &sides[1 - first]];
                    let seed = 1000 + task * ROUNDS * 2 + round * 2;
                    let data = [
                        pattern_u32(N as usize, seed),
                        pattern_u32(N as usize, seed + 1),
                    ];
                    let (x, y) = futures::try_join!(
                        upload_u32(&order[0].queue, &data[0]),
                        upload_u32(&order[1].queue, &data[1])
                    )?;
                    let buffers = [x, y];
                    let signal = [
                        order[0].device.create_semaphore(0)?,
                        order[1].device.create_semaphore(0)?,
                    ];
                    let increments: Vec<_> = (0..2)
                        .map(|i| {
                            order[i].kernels.add_one(
                                &order[i].queue,
                                signals(&signal[i], 1),
                                &buffers[i].whole(),
                                N,
                            )
                        })
                        .collect();
                    for (i, increment) in increments.into_iter().enumerate() {
                        done(
                            &format!("task {task}, round {round}: increment on {}", order[i].id()),
                            increment,
                        )
                        .await?;
                    }
                    let ranges = [buffers[0].whole(), buffers[1].whole()];
                    let (x, y) = futures::try_join!(
                        download_u32(&order[0].queue, Fence::at(&signal[0], 1), &ranges[0]),
                        download_u32(&order[1].queue, Fence::at(&signal[1], 1), &ranges[1])
                    )?;
                    for (i, values) in [x, y].iter().enumerate() {
                        assert_values(
                            values,
                            &plus(&data[i], 1),
                            &format!(
                                "task {task}, round {round}: the buffer on {}",
                                order[i].id()
                            ),
                        );
                    }
                }
                Ok::<_, Error>(())
            }));
        }
        for (task, handle) in tasks.into_iter().enumerate() {
            handle.await.map_err(|e| {
                Error::new(StatusCode::Internal, format!("task {task} panicked: {e}"))
            })??;
        }
        Ok(())
    })
}

/// Awaits `submission`, an operation on one device that uses a resource of the other and
/// signals `signal` to 1. `Some(output)` if the backend accepted it (its signal is reached);
/// `None` if it refused it, which must be with `InvalidArgument` and `signal` failed with the
/// same error. Anything else (another error, a hang) fails the case.
async fn foreign<T: Debug>(
    what: &str,
    submission: Submission<T>,
    signal: &Semaphore,
) -> Result<Option<T>> {
    match within(what, submission).await? {
        Ok(output) => {
            assert_eq!(
                signal.query()?,
                1,
                "{what} completed but its signal is not reached"
            );
            Ok(Some(output))
        }
        Err(error) => {
            assert_eq!(
                error.code(),
                StatusCode::InvalidArgument,
                "{what} must either run correctly or be refused with INVALID_ARGUMENT, but it \
                 failed with: {error}"
            );
            assert_failed(signal, error.code(), error.message());
            Ok(None)
        }
    }
}

/// Resources of device A used on device B: a copy on B from A's buffer, a fill on B of A's
/// buffer, a dispatch on B (of B's executable) binding A's buffer, a dispatch on B of the
/// executable A loaded, a queue read on B of A's buffer and a queue write on B into A's buffer.
/// The backend may refuse each one: then the submission fails with `InvalidArgument`, its
/// signal semaphore fails with the same error, and the buffers involved keep their data. Or it
/// may accept it: then the operation must have its full effect (read back on the device that
/// owns the buffer). Nothing may hang or fail otherwise, and B still runs its own work
/// correctly afterwards.
pub fn foreign_resources(a: Device, b: Device, kernels: &dyn Kernels) -> Result<()> {
    const N: u32 = 256;
    block_on(async {
        let (a, b) = (Side::new(a, kernels)?, Side::new(b, kernels)?);
        let data = pattern_u32(N as usize, 51);
        let zeros = vec![0u32; N as usize];
        let fresh = || b.device.create_semaphore(0);

        // A copy on B from A's buffer into B's.
        let (source, target) = (
            upload_u32(&a.queue, &data).await?,
            upload_u32(&b.queue, &zeros).await?,
        );
        let s = fresh()?;
        let copy = b
            .queue
            .copy(signals(&s, 1), &source.whole(), &target.whole());
        let expected = match foreign("a copy on B from A's buffer", copy, &s).await? {
            Some(()) => &data,
            None => &zeros,
        };
        let read = download_u32(&b.queue, Fence::new(), &target.whole()).await?;
        assert_values(&read, expected, "B's buffer after a copy from A's buffer");

        // A fill on B of A's buffer.
        let target = upload_u32(&a.queue, &data).await?;
        let s = fresh()?;
        let fill = b.queue.fill(signals(&s, 1), 7u32, &target.whole());
        let (expected, after) = match foreign("a fill on B of A's buffer", fill, &s).await? {
            Some(()) => (vec![7; N as usize], Fence::at(&s, 1)),
            None => (data.clone(), Fence::new()),
        };
        let read = download_u32(&a.queue, after, &target.whole()).await?;
        assert_values(&read, &expected, "A's buffer after a fill on B");

        // A dispatch on B, of B's executable, binding A's buffer.
        let target = upload_u32(&a.queue, &data).await?;
        let s = fresh()?;
        let dispatch = b
            .kernels
            .add_one(&b.queue, signals(&s, 1), &target.whole(), N);
        let (expected, after) =
            match foreign("a dispatch on B binding A's buffer", dispatch, &s).await? {
                Some(()) => (plus(&data, 1), Fence::at(&s, 1)),
                None => (data.clone(), Fence::new()),
            };
        let read = download_u32(&a.queue, after, &target.whole()).await?;
        assert_values(&read, &expected, "A's buffer after a dispatch on B");

        // A dispatch on B of the executable A loaded, binding B's buffer.
        let target = upload_u32(&b.queue, &data).await?;
        let s = fresh()?;
        let dispatch = a
            .kernels
            .add_one(&b.queue, signals(&s, 1), &target.whole(), N);
        let expected = match foreign("a dispatch on B of A's executable", dispatch, &s).await? {
            Some(()) => plus(&data, 1),
            None => data.clone(),
        };
        let read = download_u32(&b.queue, Fence::new(), &target.whole()).await?;
        assert_values(
            &read,
            &expected,
            "B's buffer after a dispatch of A's executable",
        );

        // A queue read on B of A's buffer.
        let source = upload_u32(&a.queue, &data).await?;
        let s = fresh()?;
        let read = b.queue.read(signals(&s, 1), &source.whole());
        if let Some(bytes) = foreign("a queue read on B of A's buffer", read, &s).await? {
            assert_values(
                &bytes_u32(&bytes)?,
                &data,
                "a queue read on B of A's buffer",
            );
        }

        // A queue write on B into A's buffer.
        let target = upload_u32(&a.queue, &zeros).await?;
        let s = fresh()?;
        let write = b
            .queue
            .write(signals(&s, 1), &u32_bytes(&data), &target.whole());
        let (expected, after) =
            match foreign("a queue write on B into A's buffer", write, &s).await? {
                Some(()) => (&data, Fence::at(&s, 1)),
                None => (&zeros, Fence::new()),
            };
        let read = download_u32(&a.queue, after, &target.whole()).await?;
        assert_values(&read, expected, "A's buffer after a queue write on B");

        // B still runs its own work.
        let own = upload_u32(&b.queue, &data).await?;
        let s = fresh()?;
        done(
            "an increment on B of its own buffer",
            b.kernels.add_one(&b.queue, signals(&s, 1), &own.whole(), N),
        )
        .await?;
        let read = download_u32(&b.queue, Fence::at(&s, 1), &own.whole()).await?;
        assert_values(
            &read,
            &plus(&data, 1),
            "B's own buffer after refused foreign work",
        );
        Ok(())
    })
}

/// B waits on two semaphores of A: one signalled by an increment A issued at once (its waits
/// were reached when it was submitted), one by work on A still pending behind a gate (an
/// increment, then a host call). Then every handle of A (device, queue, kernels, buffer) is
/// dropped, and the gate is signalled. What the design says (`halcyon::queue`): work a device
/// already issued completes and signals even when the device is dropped, and its queue actions
/// still pending fail their signals with `Aborted` when its reactor shuts down, so nothing
/// waiting on them hangs. So: A's issued increment succeeds and B's increment waiting on it
/// completes; A's pending work fails with `Aborted` and never runs (the host call does not,
/// even once the gate is signalled, and the gate keeps no waiter), B's increment waiting on it
/// fails with the same error (and its signal semaphore too); B's buffer shows exactly the one
/// increment, and B keeps working.
pub fn device_dropped_while_other_waits(a: Device, b: Device, kernels: &dyn Kernels) -> Result<()> {
    const N: u32 = 700;
    block_on(async {
        let (a, b) = (Side::new(a, kernels)?, Side::new(b, kernels)?);
        let (data_a, data_b) = (pattern_u32(N as usize, 61), pattern_u32(N as usize, 62));
        let buffer_a = upload_u32(&a.queue, &data_a).await?;
        let buffer_b = upload_u32(&b.queue, &data_b).await?;
        let gate = a.device.create_semaphore(0)?;
        let issued_signal = a.device.create_semaphore(0)?;
        let pending_signal = a.device.create_semaphore(0)?;
        let b_signals = semaphores(&b.device, 2)?;
        let ran = Arc::new(AtomicBool::new(false));

        let issued = a
            .kernels
            .add_one(&a.queue, signals(&issued_signal, 1), &buffer_a.whole(), N);
        let pending_increment = a.kernels.add_one(
            &a.queue,
            (Fence::at(&gate, 1), Fence::at(&pending_signal, 1)),
            &buffer_a.whole(),
            N,
        );
        let flag = ran.clone();
        let pending_call = a.queue.host_call(
            (Fence::at(&pending_signal, 1), Fence::at(&pending_signal, 2)),
            move || {
                flag.store(true, Ordering::SeqCst);
                Ok(())
            },
        );
        let after_issued = b.kernels.add_one(
            &b.queue,
            link(&issued_signal, &b_signals[0]),
            &buffer_b.whole(),
            N,
        );
        let wait: Fence = [(&pending_signal, 2), (&b_signals[0], 1)]
            .into_iter()
            .collect();
        let mut after_pending = b.kernels.add_one(
            &b.queue,
            (wait, Fence::at(&b_signals[1], 1)),
            &buffer_b.whole(),
            N,
        );
        assert!(
            poll!(&mut after_pending).is_pending(),
            "B's increment waiting on A's gated work completed before the gate"
        );

        let a_id = a.id().to_string();
        drop((a, buffer_a));

        done(
            &format!("the increment {a_id} issued before it was dropped"),
            issued,
        )
        .await?;
        done(
            "B's increment waiting on the work A issued before it was dropped",
            after_issued,
        )
        .await?;
        let outcome = within(
            "A's pending increment after A was dropped",
            pending_increment,
        )
        .await?;
        let error = assert_error(outcome, StatusCode::Aborted, &[]);
        let outcome = within("A's pending host call after A was dropped", pending_call).await?;
        assert_error(outcome, StatusCode::Aborted, &[]);
        assert_failed(&pending_signal, error.code(), error.message());
        assert_eq!(
            gate.waiter_count(),
            0,
            "the dropped device's pending work still waits on its gate"
        );
        gate.signal(1)?;
        let outcome = within("B's increment waiting on A's aborted work", after_pending).await?;
        assert_error(outcome, error.code(), &[error.message()]);
        assert_failed(&b_signals[1], error.code(), error.message());
        assert!(
            !ran.load(Ordering::SeqCst),
            "a host call pending on a dropped device ran"
        );

        let read = download_u32(&b.queue, Fence::at(&b_signals[0], 1), &buffer_b.whole()).await?;
        assert_values(
            &read,
            &plus(&data_b, 1),
            "B's buffer after its increment waiting on the dropped device's issued work",
        );
        let s = b.device.create_semaphore(0)?;
        done(
            "an increment on B after A was dropped",
            b.kernels
                .add_one(&b.queue, signals(&s, 1), &buffer_b.whole(), N),
        )
        .await?;
        let read = download_u32(&b.queue, Fence::at(&s, 1), &buffer_b.whole()).await?;
        assert_values(
            &read,
            &plus(&data_b, 2),
            "B's buffer after a fresh increment",
        );
        Ok(())
    })
}
