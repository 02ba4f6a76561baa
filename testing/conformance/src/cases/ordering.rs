//! Ordering: submissions start when their wait fences are reached, and not before.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::poll;
use halcyon::{
    BufferParams, CommandBuffer, CommandBufferMode, Device, Error, Fence, Result, Semaphore,
    StatusCode, Timepoints,
};

use crate::harness::{
    block_on, bytes_u32, done, download, download_u32, join, link, pattern_u32, semaphores,
    signal_from_thread, u32_bytes, upload, upload_u32,
};
use crate::kernels::{workgroups, Kernels, StandardKernels};

/// A write waiting on a semaphore nobody has signalled yet stays pending (its signal fence is
/// not reached, its `Submission` is not ready); once another thread signals the semaphore, the
/// write runs, its fence is reached and the data lands.
pub fn wait_before_signal(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let data = pattern_u32(256, 1);
        let buffer = device.allocator().allocate(1024, BufferParams::DEVICE)?;
        let gate = device.create_semaphore(0)?;
        let signal = device.create_semaphore(0)?;

        let mut write = queue.write(link(&gate, &signal), &u32_bytes(&data), &buffer.whole());
        assert!(
            poll!(&mut write).is_pending(),
            "a write waiting on an unsignalled semaphore completed"
        );
        assert_eq!(
            signal.query()?,
            0,
            "a write waiting on an unsignalled semaphore signalled its fence"
        );

        let thread = signal_from_thread(&gate, 1);
        done("write released by another thread", write).await?;
        join(thread)?;
        assert_eq!(
            signal.query()?,
            1,
            "a completed write left its fence unsignalled"
        );
        let read = download_u32(&queue, Fence::at(&signal, 1), &buffer.whole()).await?;
        assert_eq!(read, data, "the released write stored the wrong data");
        Ok(())
    })
}

/// A write whose wait semaphore is already past the awaited value runs at once.
pub fn signal_before_wait(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let data = pattern_u32(256, 2);
        let buffer = device.allocator().allocate(1024, BufferParams::DEVICE)?;
        let gate = device.create_semaphore(0)?;
        let signal = device.create_semaphore(0)?;
        gate.signal(3)?;

        let write = queue.write(
            (Fence::at(&gate, 2), Fence::at(&signal, 1)),
            &u32_bytes(&data),
            &buffer.whole(),
        );
        done("write after its wait was signalled", write).await?;
        assert_eq!(signal.query()?, 1);
        let read = download_u32(&queue, Fence::at(&signal, 1), &buffer.whole()).await?;
        assert_eq!(read, data, "the write stored the wrong data");
        Ok(())
    })
}

/// 100 increments, each waiting on the previous one's semaphore (spread over every queue of
/// the device), all submitted before the first is released: each runs exactly once, in order
/// and not concurrently (a lost or repeated increment shows in the data).
pub fn chain_of_100_submissions(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    const LINKS: usize = 100;
    const N: u32 = 1000;
    block_on(async {
        let kernels = StandardKernels::load(device, kernels)?;
        let queues = device.queues(u64::MAX)?;
        let buffer = upload_u32(&queues[0], &vec![0; N as usize]).await?;
        let chain = semaphores(device, LINKS + 1)?;

        let submissions: Vec<_> = (0..LINKS)
            .map(|i| {
                let queue = &queues[i % queues.len()];
                kernels.add_one(queue, link(&chain[i], &chain[i + 1]), &buffer.whole(), N)
            })
            .collect();
        assert_eq!(
            chain[LINKS].query()?,
            0,
            "the chain ran before it was released"
        );

        chain[0].signal(1)?;
        for (i, submission) in submissions.into_iter().enumerate() {
            done(&format!("link {i} of the chain"), submission).await?;
        }
        let values = download_u32(&queues[0], Fence::at(&chain[LINKS], 1), &buffer.whole()).await?;
        let wrong = values.iter().position(|&v| v != LINKS as u32);
        assert_eq!(
            wrong,
            None,
            "after {LINKS} chained increments element {} is {} (expected {LINKS})",
            wrong.unwrap_or(0),
            values[wrong.unwrap_or(0)]
        );
        Ok(())
    })
}

/// Tasks on a multi-threaded runtime, each running its own chain of dispatches that hops from
/// queue to queue (every link waits on the previous link's value, signalled on another queue
/// where the device has several), all released by one host semaphore signalled once every task
/// submitted its first link. A task submits its links in batches of four before awaiting them,
/// and drops some `Submission`s instead of awaiting them (the work still runs and signals). The
/// links alternate `y = x + y` and `x = y + x` (saxpy with a = 1, exact in `f32` at these
/// sizes), which do not commute: a link that ran early, late or twice, or two that overlapped,
/// changes the result. No semaphore keeps a waiter.
pub fn concurrent_chains_across_queues(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    const TASKS: usize = 6;
    const LINKS: u64 = 30;
    const BATCH: u64 = 4;
    const N: u32 = 256;
    let floats = |bytes: Vec<u8>| -> Result<Vec<f32>> {
        Ok(bytes_u32(&bytes)?.into_iter().map(f32::from_bits).collect())
    };
    block_on(async move {
        let kernels = Arc::new(StandardKernels::load(device, kernels)?);
        let queues = device.queues(u64::MAX)?;
        let start = Semaphore::new(0);
        let arrived = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for task in 0..TASKS {
            let (kernels, queues, start) = (kernels.clone(), queues.clone(), start.clone());
            let (arrived, device) = (arrived.clone(), device.clone());
            tasks.push(tokio::spawn(async move {
                let seed = (1 + task) as f32;
                let f32s = |v: f32| vec![v; N as usize];
                let x = upload(&queues[0], BufferParams::DEVICE, &f32s(seed)).await?;
                let y = upload(&queues[0], BufferParams::DEVICE, &f32s(0.0)).await?;
                let chain = device.create_semaphore(0)?;
                let mut batch = Vec::new();
                for link in 0..LINKS {
                    let queue = &queues[(task + link as usize) % queues.len()];
                    let wait = if link == 0 {
                        Fence::at(&start, 1)
                    } else {
                        Fence::at(&chain, link)
                    };
                    let timepoints = Timepoints::new(wait, Fence::at(&chain, link + 1));
                    let (from, to) = if link % 2 == 0 { (&x, &y) } else { (&y, &x) };
                    let submission =
                        kernels.saxpy(queue, timepoints, 1.0, &from.whole(), &to.whole(), N);
                    if link % 5 == 2 {
                        drop(submission); // not awaited: it still runs and signals
                    } else {
                        batch.push((link, submission));
                    }
                    if link == 0 && arrived.fetch_add(1, Ordering::SeqCst) + 1 == TASKS {
                        start.signal(1)?; // the last task to submit its first link
                    }
                    if link % BATCH == BATCH - 1 || link == LINKS - 1 {
                        for (link, submission) in batch.drain(..) {
                            done(&format!("task {task}, link {link}"), submission).await?;
                        }
                    }
                }
                done("the last link", chain.wait(LINKS)).await?;
                let after = Fence::at(&chain, LINKS);
                let xs = floats(download(&queues[0], after.clone(), &x.whole()).await?)?;
                let ys = floats(download(&queues[0], after, &y.whole()).await?)?;
                let (mut ex, mut ey) = (seed, 0.0f32);
                for link in 0..LINKS {
                    if link % 2 == 0 {
                        ey += ex;
                    } else {
                        ex += ey;
                    }
                }
                let wrong = (0..N as usize).find(|&i| xs[i] != ex || ys[i] != ey);
                assert_eq!(
                    wrong,
                    None,
                    "task {task}: after {LINKS} alternating links element {} is (x {}, y {}), \
                     expected (x {ex}, y {ey})",
                    wrong.unwrap_or(0),
                    xs[wrong.unwrap_or(0)],
                    ys[wrong.unwrap_or(0)]
                );
                assert_eq!(
                    chain.waiter_count(),
                    0,
                    "task {task}: a waiter was left behind"
                );
                Ok::<_, Error>(())
            }));
        }
        for (task, handle) in tasks.into_iter().enumerate() {
            handle.await.map_err(|e| {
                Error::new(StatusCode::Internal, format!("task {task} panicked: {e}"))
            })??;
        }
        assert_eq!(
            start.waiter_count(),
            0,
            "a waiter on the start semaphore was left behind"
        );
        Ok(())
    })
}

/// A [`halcyon::Timeline`] orders a fill, three increments and a read; awaiting only the read
/// sees all of them, and the timeline semaphore ends at the last value handed out.
pub fn timeline_in_order(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    const N: u32 = 300;
    block_on(async {
        let kernels = StandardKernels::load(device, kernels)?;
        let queue = device.queue(0)?;
        let buffer = device
            .allocator()
            .allocate(N as u64 * 4, BufferParams::DEVICE)?;
        let timeline = queue.timeline()?;

        let fill = queue.fill(timeline.next(), 7u32, &buffer.whole());
        let adds: Vec<_> = (0..3)
            .map(|_| kernels.add_one(&queue, timeline.next(), &buffer.whole(), N))
            .collect();
        let read = queue.read(timeline.next(), &buffer.whole());

        let values = bytes_u32(&done("read at the end of the timeline", read).await?)?;
        assert!(
            values.iter().all(|&v| v == 10),
            "fill 7 then three increments should give 10 everywhere, got {:?}",
            &values[..8]
        );
        done("fill", fill).await?;
        for add in adds {
            done("increment", add).await?;
        }
        assert_eq!(timeline.last(), 5);
        assert_eq!(timeline.semaphore().query()?, timeline.last());
        Ok(())
    })
}

/// Host calls run in queue order, after the work before them: none runs before the timeline is
/// released, they run in order, and one that maps a buffer sees the write ordered before it
/// completed (mapping is allowed and shows the data).
pub fn host_call_in_queue_order(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let data = pattern_u32(64, 3);
        let buffer = device.allocator().allocate(256, BufferParams::HOST)?;
        let gate = device.create_semaphore(0)?;
        let timeline = queue.timeline()?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let push = |n: u32| {
            let log = log.clone();
            move || {
                log.lock().unwrap().push(n);
                Ok(())
            }
        };

        let mut first = timeline.next();
        first.wait.insert(&gate, 1);
        let mut submissions = vec![queue.host_call(first, push(1))];
        submissions.push(queue.write(timeline.next(), &u32_bytes(&data), &buffer.whole()));
        let (mapped, expected, log2) = (buffer.clone(), data.clone(), log.clone());
        submissions.push(queue.host_call(timeline.next(), move || {
            let guard = mapped.map_read(..)?;
            if guard.as_slice::<u32>()? != expected.as_slice() {
                return Err(Error::new(
                    StatusCode::DataLoss,
                    "a host call saw the buffer without the write ordered before it",
                ));
            }
            log2.lock().unwrap().push(2);
            Ok(())
        }));
        submissions.push(queue.host_call(timeline.next(), push(3)));
        assert!(
            log.lock().unwrap().is_empty(),
            "a host call ran before its wait was reached"
        );

        let thread = signal_from_thread(&gate, 1);
        for (i, submission) in submissions.into_iter().enumerate() {
            done(&format!("queue operation {i}"), submission).await?;
        }
        join(thread)?;
        assert_eq!(
            *log.lock().unwrap(),
            [1, 2, 3],
            "host calls ran out of order"
        );
        Ok(())
    })
}

/// A queue barrier waiting on two semaphores signals only once both are reached.
pub fn barrier_waits_for_every_semaphore(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let s = semaphores(device, 3)?;
        let wait: Fence = [(&s[0], 1), (&s[1], 2)].into_iter().collect();
        let mut barrier = queue.barrier(Timepoints::new(wait, Fence::at(&s[2], 1)));

        s[0].signal(1)?;
        s[1].signal(1)?;
        assert!(
            poll!(&mut barrier).is_pending(),
            "a barrier completed with one of its waits unreached"
        );
        assert_eq!(
            s[2].query()?,
            0,
            "a barrier signalled with a wait unreached"
        );

        let thread = signal_from_thread(&s[1], 2);
        done("barrier", barrier).await?;
        join(thread)?;
        assert_eq!(s[2].query()?, 1);
        Ok(())
    })
}

/// Within one command buffer, an execution barrier makes a fill complete before the dispatch
/// after it starts: every element ends at fill + 1.
pub fn command_buffer_barrier_orders_commands(
    device: &Device,
    kernels: &dyn Kernels,
) -> Result<()> {
    const N: u32 = 4096;
    block_on(async {
        let kernels = StandardKernels::load(device, kernels)?;
        let queue = device.queue(0)?;
        let buffer = upload(&queue, BufferParams::DEVICE, &vec![0u8; N as usize * 4]).await?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
        builder.fill(41u32, buffer.whole())?.barrier().dispatch(
            &kernels
                .add_one
                .launch(workgroups(N))
                .constant(N)
                .binding(buffer.whole()),
        )?;
        let command_buffer = builder.finish();

        done(
            "fill, barrier, increment",
            queue.execute(Timepoints::default(), &command_buffer, None),
        )
        .await?;
        let values = download_u32(&queue, Fence::new(), &buffer.whole()).await?;
        let wrong = values.iter().position(|&v| v != 42);
        assert_eq!(
            wrong,
            None,
            "element {} is {} after fill 41, barrier, +1 (expected 42)",
            wrong.unwrap_or(0),
            values[wrong.unwrap_or(0)]
        );
        Ok(())
    })
}

/// An operation refused at submission (a fill misaligned for its pattern) fails its signal in
/// order: while the operation before it on the same timeline is still waiting, the timeline is
/// not failed and the refusal has not completed; once that operation has run, it reports its
/// own success, the refusal reports its own error, and only then does the timeline fail.
pub fn refusal_fails_in_order(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(256, BufferParams::DEVICE)?;
        let gate = device.create_semaphore(0)?;
        let timeline = queue.timeline()?;
        let mut first = timeline.next();
        first.wait.insert(&gate, 1);
        let fill = queue.fill(first, 7u32, &buffer.whole());
        let mut refused = queue.fill(timeline.next(), 1u32, &buffer.slice(2..6)?);
        assert!(
            poll!(&mut refused).is_pending(),
            "a refused operation completed before the operation before it on its timeline"
        );
        assert_eq!(
            timeline.semaphore().query()?,
            0,
            "a refusal moved or failed its timeline while earlier work was pending"
        );

        let thread = signal_from_thread(&gate, 1);
        done("the fill before the refusal", fill).await?;
        let error = refused.await.unwrap_err();
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
        assert!(error.message().contains("multiples of 4"), "{error}");
        let failure = timeline.semaphore().wait(2).await.unwrap_err();
        assert_eq!(failure.code(), StatusCode::InvalidArgument, "{failure}");
        join(thread)?;
        let values = download_u32(&queue, Fence::new(), &buffer.whole()).await?;
        assert!(values.iter().all(|&v| v == 7), "{:?}", &values[..4]);
        Ok(())
    })
}

/// A timeline step dropped unsubmitted (its operation's arguments failed with `?` after
/// `next()` ran) does not stall the timeline: its value is passed on in order, so the next
/// operation on the timeline runs.
pub fn dropped_timeline_step_does_not_stall(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(16, BufferParams::DEVICE)?;
        let timeline = queue.timeline()?;
        let attempt = || -> Result<halcyon::Submission> {
            Ok(queue.fill(timeline.next(), 1u8, &buffer.slice(0..1000)?))
        };
        let error = attempt().unwrap_err();
        assert_eq!(error.code(), StatusCode::OutOfRange, "{error}");
        let fill = queue.fill(timeline.next(), 9u8, &buffer.whole());
        done("a fill after a dropped timeline step", fill).await?;
        assert_eq!(timeline.semaphore().query()?, 2);
        let values = download(&queue, Fence::new(), &buffer.whole()).await?;
        assert_eq!(values, vec![9; 16]);
        Ok(())
    })
}
