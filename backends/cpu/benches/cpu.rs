//! Benchmarks of the CPU device (`halcyon-cpu`): submission latency of a tiny dispatch, memory
//! bandwidth of a large elementwise dispatch, and the per-submission cost of long semaphore
//! chains, each next to a plain-Rust baseline measured in the same run.
//!
//! Run with `cargo bench --bench cpu` (about two minutes). Groups:
//!
//! * `tiny_add`: `c = a + b` over 256 `f32` (one workgroup of 256 invocations, or four of 64),
//!   submitted and awaited once per iteration, in pool mode (a worker per core) and inline mode;
//!   plus the floor of a cross-thread round trip (the same loop handed to a plain `std` thread
//!   and back) and the loop alone.
//! * `fma_4mi`: `d = a * b + c` over 4 Mi `f32` in pool mode against plain Rust loops over the
//!   same buffers: `std::thread::scope` with one chunk per core (the reference), one thread, and
//!   threads spawned once. Throughput counts 64 MiB per iteration: three 16 MiB inputs read plus
//!   one 16 MiB output written (write-allocate reads of the output not counted).
//!
//! Cross-thread numbers depend heavily on the machine: where an idle core sleeps in the
//! hypervisor, waking a parked thread on it can cost tens of microseconds, and whether two
//! threads share a core is up to the scheduler, so `tiny_add/pool/*` and `tiny_add/raw/thread_*`
//! can vary between runs (compare them within one run).
//! * `chain_10k`: 10 000 queue operations chained by one timeline semaphore (operation `i`
//!   waits for value `i`, signals `i + 1`); one iteration is the whole chain, so the reported
//!   time divided by 10 000 (criterion's element throughput, inverted) is the cost per
//!   submission.
//!
//! Every timeline in these benchmarks is a plain host semaphore; devices are built with
//! `halcyon_cpu::create_device` and one queue.

// `criterion_group!` defines the group's function without a doc comment.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, Criterion, SamplingMode, Throughput,
};
use futures::executor::block_on;
use halcyon::{
    Buffer, BufferParams, BufferRef, CommandBuffer, CommandBufferMode, Device, EntryPoint,
    Executable, Fence, Queue, Semaphore, Timepoints,
};
use halcyon_cpu::{CpuDeviceOptions, ExecutionMode, RustKernels};

/// Elements of the tiny add.
const TINY: usize = 256;
/// Elements of the large `a * b + c`.
const LARGE: usize = 4 << 20;
/// Invocations (elements) per workgroup of the large dispatch: 256 workgroups in all.
const LARGE_WORKGROUP: u32 = 16 << 10;
/// Length of a semaphore chain.
const CHAIN: u64 = 10_000;

/// The two CPU execution modes, with the names used in benchmark ids.
const MODES: [(&str, ExecutionMode); 2] = [
    ("pool", ExecutionMode::Pool { workers: 0 }),
    ("inline", ExecutionMode::Inline),
];

fn create_device(mode: ExecutionMode) -> Device {
    halcyon_cpu::create_device(
        CpuDeviceOptions::default()
            .with_mode(mode)
            .with_queue_count(1),
    )
    .expect("create CPU device")
}

/// `c[i] = a[i] + b[i]`: the loop shared by the kernel and the raw baselines.
#[inline(always)]
fn add(a: &[f32], b: &[f32], c: &mut [f32]) {
    for ((c, a), b) in c.iter_mut().zip(a).zip(b) {
        *c = a + b;
    }
}

/// `d[i] = a[i] * b[i] + c[i]`: the loop shared by the kernel and the plain threaded baseline.
#[inline(always)]
fn fma(a: &[f32], b: &[f32], c: &[f32], d: &mut [f32]) {
    for (((d, a), b), c) in d.iter_mut().zip(a).zip(b).zip(c) {
        *d = a * b + c;
    }
}

/// Entry 0, `add`: bindings a, b, c; constant n; workgroups of 256 invocations, each handling
/// `workgroup_size[0]` consecutive elements. Entry 1, `fma`: bindings a, b, c, d; constant n;
/// same tiling with 16 Ki-invocation workgroups. Entry 2, `add64`: `add` with workgroups of 64.
fn kernels() -> RustKernels {
    fn range(ctx: &halcyon_cpu::WorkgroupContext<'_>) -> std::ops::Range<usize> {
        let n = ctx.constants()[0] as usize;
        let size = ctx.workgroup_size()[0] as usize;
        let start = (ctx.workgroup_id()[0] as usize * size).min(n);
        start..(start + size).min(n)
    }
    fn add_kernel(ctx: &halcyon_cpu::WorkgroupContext<'_>) -> Result<(), String> {
        let r = range(ctx);
        let size = ctx.workgroup_size()[0] as usize;
        let (a, b) = (ctx.binding::<f32>(0)?, ctx.binding::<f32>(1)?);
        let c = ctx.chunk_mut::<f32>(2, size)?;
        add(&a[r.clone()], &b[r.clone()], &mut c[..r.len()]);
        Ok(())
    }
    let add_entry = |name: &str, size: u32| EntryPoint {
        name: name.into(),
        workgroup_size: [size, 1, 1],
        binding_count: 3,
        constant_count: 1,
    };
    RustKernels::new()
        .entry(add_entry("add", TINY as u32), add_kernel)
        .entry(
            EntryPoint {
                name: "fma".into(),
                workgroup_size: [LARGE_WORKGROUP, 1, 1],
                binding_count: 4,
                constant_count: 1,
            },
            |ctx| {
                let r = range(ctx);
                let size = ctx.workgroup_size()[0] as usize;
                let (a, b, c) = (
                    ctx.binding::<f32>(0)?,
                    ctx.binding::<f32>(1)?,
                    ctx.binding::<f32>(2)?,
                );
                let d = ctx.chunk_mut::<f32>(3, size)?;
                fma(
                    &a[r.clone()],
                    &b[r.clone()],
                    &c[r.clone()],
                    &mut d[..r.len()],
                );
                Ok(())
            },
        )
        .entry(add_entry("add64", 64), add_kernel)
}

/// A device with the kernels loaded and f32 buffers of `len` elements filled with `values`.
struct Setup {
    queue: Queue,
    executable: Executable,
    buffers: Vec<Buffer>,
}

impl Setup {
    fn new(mode: ExecutionMode, len: usize, values: &[f32]) -> Setup {
        let device = create_device(mode);
        let queue = device.queue(0).expect("queue 0");
        let executable = device
            .load_executable(&kernels().spec())
            .expect("load kernels");
        let buffers = values
            .iter()
            .map(|&v| {
                let buffer = device
                    .allocator()
                    .allocate((len * 4) as u64, BufferParams::HOST)
                    .expect("allocate");
                let mut map = buffer.map_write(..).expect("map for init");
                map.as_mut_slice::<f32>().expect("f32 view").fill(v);
                drop(map);
                buffer
            })
            .collect();
        Setup {
            queue,
            executable,
            buffers,
        }
    }

    fn refs(&self) -> Vec<BufferRef> {
        self.buffers.iter().map(Buffer::whole).collect()
    }

    /// A reusable command buffer holding one dispatch of `entry` over `n` elements with
    /// direct (not binding-table) bindings to all buffers.
    fn reusable(&self, entry: u32, workgroups: u32, n: usize) -> CommandBuffer {
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder
            .dispatch(
                &(self.executable.kernel_at(entry).expect("kernel"))
                    .launch([workgroups, 1, 1])
                    .constant(n as u32)
                    .bindings(self.refs()),
            )
            .expect("record dispatch");
        builder.finish()
    }

    fn check(&self, index: usize, expected: f32) {
        let map = self.buffers[index].map_read(..).expect("map result");
        let values = map.as_slice::<f32>().expect("f32 view");
        assert!(
            values.iter().all(|&v| v == expected),
            "wrong result: {} (expected {expected})",
            values[0]
        );
    }
}

fn tiny_group(c: &mut Criterion) -> BenchmarkGroup<'_, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group("tiny_add");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_millis(700))
        .measurement_time(Duration::from_secs(2));
    group
}

/// `tiny_add/{pool,inline}/dispatch_block_on`: one iteration is `queue.dispatch` of the 256-element
/// add (one workgroup; a one-shot command list recorded, validated and resolved inside the call)
/// on a queue timeline (wait for the previous value, signal the next), then
/// `futures::executor::block_on` of the returned `Submission` on the bench thread. In pool mode
/// the workgroup runs on a pool worker and completion comes back through a semaphore wake (unless
/// the device runs such a small dispatch on the submitting thread); in inline mode it runs inside
/// the `dispatch` call and the await is ready at once.
///
/// `tiny_add/{pool,inline}/execute_block_on`: the same, but submitting a reusable command buffer
/// (recorded once, direct bindings, resolution precomputed) with `queue.execute`.
///
/// `tiny_add/{pool,inline}/execute_4x64_block_on`: `execute_block_on` with the add recorded as
/// four workgroups of 64 (entry `add64`); in pool mode that is four tiles, so the dispatch goes
/// to the pool even where a single small workgroup would not.
///
/// `tiny_add/{pool,inline}/execute_tokio`: the `execute` variant awaited inside one
/// `block_on` of a tokio `current_thread` runtime (no I/O or time driver) that runs the whole
/// timed loop, so each iteration is submit + `.await` from a tokio task context.
fn tiny_add(c: &mut Criterion) {
    let mut group = tiny_group(c);
    for (name, mode) in MODES {
        let setup = Setup::new(mode, TINY, &[1.0, 2.0, 0.0]);
        let queue = &setup.queue;
        let timeline = queue.timeline().expect("timeline");
        let refs = setup.refs();
        let cb = setup.reusable(0, 1, TINY);
        // Once outside the benchmarks, so the check below holds when a filter skips them.
        block_on(queue.execute(timeline.next(), &cb, None)).expect("execute");

        let launch = (setup.executable.kernel_at(0).expect("kernel"))
            .launch([1, 1, 1])
            .constant(TINY as u32)
            .bindings(&refs);
        group.bench_function(format!("{name}/dispatch_block_on"), |b| {
            b.iter(|| block_on(queue.dispatch(timeline.next(), &launch)).expect("dispatch"))
        });
        group.bench_function(format!("{name}/execute_block_on"), |b| {
            b.iter(|| block_on(queue.execute(timeline.next(), &cb, None)).expect("execute"))
        });
        let cb4 = setup.reusable(2, 4, TINY);
        group.bench_function(format!("{name}/execute_4x64_block_on"), |b| {
            b.iter(|| block_on(queue.execute(timeline.next(), &cb4, None)).expect("execute"))
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("tokio runtime");
        group.bench_function(format!("{name}/execute_tokio"), |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        queue
                            .execute(timeline.next(), &cb, None)
                            .await
                            .expect("execute");
                    }
                    start.elapsed()
                })
            })
        });
        setup.check(2, 3.0);
    }
    group.finish();
}

/// The three vectors of a raw round trip, moved between threads by value (no copies).
struct Vectors {
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl Vectors {
    fn new() -> Vectors {
        Vectors {
            a: vec![1.0; TINY],
            b: vec![2.0; TINY],
            c: vec![0.0; TINY],
        }
    }
}

/// `tiny_add/raw/thread_channel`: the floor of a cross-thread round trip. One iteration sends the
/// three 256-element vectors (by move, no copy) over a `std::sync::mpsc` channel to a persistent
/// plain `std` thread that blocks in `recv`, runs the same `c = a + b` loop the kernel runs, and
/// sends them back over a second channel; the bench thread blocks in `recv` until they return.
///
/// `tiny_add/raw/thread_park`: the same round trip with `thread::park`/`unpark` and two atomic
/// counters instead of channels (the leanest std handoff: one futex wake each way when the other
/// side is asleep).
///
/// `tiny_add/raw/same_thread`: the add alone on the bench thread, for scale.
fn tiny_raw(c: &mut Criterion) {
    let mut group = tiny_group(c);

    let (to_worker, worker_rx) = mpsc::channel::<Vectors>();
    let (worker_tx, from_worker) = mpsc::channel::<Vectors>();
    let worker = thread::spawn(move || {
        for mut v in worker_rx {
            add(&v.a, &v.b, &mut v.c);
            if worker_tx.send(v).is_err() {
                break;
            }
        }
    });
    let mut vectors = Some(Vectors::new());
    let mut round_trip = || {
        to_worker
            .send(vectors.take().expect("vectors"))
            .expect("send");
        vectors = Some(from_worker.recv().expect("recv"));
    };
    // Once outside the benchmark, so the check below holds when a filter skips it.
    round_trip();
    group.bench_function("raw/thread_channel", |b| b.iter(&mut round_trip));
    drop(to_worker);
    worker.join().expect("channel worker");
    assert!(vectors.expect("vectors").c.iter().all(|&x| x == 3.0));

    struct Handoff {
        requested: AtomicU64,
        completed: AtomicU64,
        stop: AtomicBool,
        vectors: Mutex<Vectors>,
    }
    let handoff = Arc::new(Handoff {
        requested: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        vectors: Mutex::new(Vectors::new()),
    });
    let bench_thread = thread::current();
    let worker = {
        let handoff = handoff.clone();
        thread::spawn(move || {
            let mut done = 0;
            loop {
                let requested = handoff.requested.load(Ordering::Acquire);
                if requested == done {
                    if handoff.stop.load(Ordering::Acquire) {
                        return;
                    }
                    thread::park();
                    continue;
                }
                {
                    let mut guard = handoff.vectors.lock().expect("lock");
                    let v = &mut *guard;
                    add(&v.a, &v.b, &mut v.c);
                }
                done = requested;
                handoff.completed.store(done, Ordering::Release);
                bench_thread.unpark();
            }
        })
    };
    let mut round = 0u64;
    let mut round_trip = || {
        round += 1;
        handoff.requested.store(round, Ordering::Release);
        worker.thread().unpark();
        while handoff.completed.load(Ordering::Acquire) != round {
            thread::park();
        }
    };
    round_trip();
    group.bench_function("raw/thread_park", |b| b.iter(&mut round_trip));
    handoff.stop.store(true, Ordering::Release);
    worker.thread().unpark();
    worker.join().expect("park worker");
    assert!(handoff
        .vectors
        .lock()
        .expect("lock")
        .c
        .iter()
        .all(|&x| x == 3.0));

    let mut v = Vectors::new();
    group.bench_function("raw/same_thread", |b| {
        b.iter(|| {
            let v = black_box(&mut v);
            add(&v.a, &v.b, &mut v.c);
        })
    });
    group.finish();
}

/// `fma_4mi/pool/dispatch`: `d = a * b + c` over 4 Mi `f32` as one reusable-command-buffer
/// dispatch of 256 workgroups (16 Ki elements each) on a pool device with a worker per core,
/// submitted with `queue.execute` and awaited with `futures::executor::block_on`.
///
/// `fma_4mi/plain/thread_scope`: the same loop (the same function) over the same four buffers
/// (host-mapped for the duration of the benchmark), split into one contiguous chunk per core;
/// `std::thread::scope` spawns a thread per chunk and the bench thread waits for them (like it
/// waits for the pool). Thread spawns are part of every iteration.
///
/// `fma_4mi/plain/single_thread`: the same loop over all 4 Mi elements on the bench thread.
///
/// `fma_4mi/plain/persistent_threads`: one thread per chunk, spawned once for the whole
/// benchmark; each iteration hands every thread its chunk over a channel and waits for all.
///
/// Throughput is 64 MiB per iteration (3 x 16 MiB read + 16 MiB written); criterion reports it in
/// GiB/s.
fn fma_4mi(c: &mut Criterion) {
    let mut group = c.benchmark_group("fma_4mi");
    group
        .sample_size(30)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Bytes((LARGE * 4 * 4) as u64));

    let setup = Setup::new(
        ExecutionMode::Pool { workers: 0 },
        LARGE,
        &[2.0, 3.0, 1.0, 0.0],
    );
    let timeline = setup.queue.timeline().expect("timeline");
    let cb = setup.reusable(1, LARGE.div_ceil(LARGE_WORKGROUP as usize) as u32, LARGE);
    // Once outside the benchmarks, so the checks hold when a filter skips them (and the
    // timed runs find the memory warm).
    block_on(setup.queue.execute(timeline.next(), &cb, None)).expect("execute");
    group.bench_function("pool/dispatch", |b| {
        b.iter(|| block_on(setup.queue.execute(timeline.next(), &cb, None)).expect("execute"))
    });
    setup.check(3, 7.0);

    // Reset the output so the plain loop's result is its own.
    setup.buffers[3]
        .map_write(..)
        .expect("map d")
        .as_mut_slice::<f32>()
        .expect("f32 view")
        .fill(0.0);
    {
        let maps: Vec<_> = setup.buffers[..3]
            .iter()
            .map(|buffer| buffer.map_read(..).expect("map input"))
            .collect();
        let mut out = setup.buffers[3].map_write(..).expect("map output");
        let [a, b_, c_] = [0, 1, 2].map(|i| maps[i].as_slice::<f32>().expect("f32 view"));
        let d = out.as_mut_slice::<f32>().expect("f32 view");
        let cores = thread::available_parallelism().map_or(1, |n| n.get());
        let chunk = LARGE.div_ceil(cores);
        let mut plain = || {
            thread::scope(|scope| {
                let parts = d
                    .chunks_mut(chunk)
                    .zip(a.chunks(chunk))
                    .zip(b_.chunks(chunk))
                    .zip(c_.chunks(chunk));
                for (((d, a), b), c) in parts {
                    scope.spawn(move || fma(a, b, c, d));
                }
            });
        };
        plain();
        group.bench_function("plain/thread_scope", |b| b.iter(&mut plain));

        group.bench_function("plain/single_thread", |b| b.iter(|| fma(a, b_, c_, d)));

        // Helpers spawned once (inside a scope spanning the benchmark); each iteration hands
        // every helper its chunk of `d` (a `&mut` moved through a channel and back) and waits.
        thread::scope(|scope| {
            let mut chunks: Vec<_> = d.chunks_mut(chunk).map(Some).collect();
            let (done_tx, done_rx) = mpsc::channel::<(usize, &mut [f32])>();
            let helpers: Vec<_> = (0..chunks.len())
                .map(|i| {
                    let (tx, rx) = mpsc::channel::<&mut [f32]>();
                    let done = done_tx.clone();
                    let range = i * chunk..((i + 1) * chunk).min(LARGE);
                    let (a, b, c) = (&a[range.clone()], &b_[range.clone()], &c_[range]);
                    scope.spawn(move || {
                        for d in rx {
                            fma(a, b, c, d);
                            if done.send((i, d)).is_err() {
                                break;
                            }
                        }
                    });
                    tx
                })
                .collect();
            let mut persistent = || {
                for (helper, d) in helpers.iter().zip(&mut chunks) {
                    helper.send(d.take().expect("chunk home")).expect("send");
                }
                for _ in 0..helpers.len() {
                    let (i, d) = done_rx.recv().expect("helper done");
                    chunks[i] = Some(d);
                }
            };
            group.bench_function("plain/persistent_threads", |b| b.iter(&mut persistent));
            drop(helpers);
        });
    }
    setup.check(3, 7.0);
    group.finish();
}

/// How a chain's operations are gated.
#[derive(Clone, Copy)]
enum Gate {
    /// Operation 0 waits for value 0 (already reached): each operation is submitted while its
    /// predecessor may still run, so whichever path the queue picks (issue inline, or park on the
    /// reactor) is measured together with the submission loop.
    Open,
    /// Every operation is submitted first, with operation 0 waiting for a value the host signals
    /// only after the loop: all 10 000 operations are parked on the device's reactor, then
    /// released one by one as each predecessor signals.
    Closed,
}

/// Runs one chain of [`CHAIN`] operations on a fresh semaphore and returns its wall time:
/// operation `i` waits for `i + offset` and signals `i + offset + 1` (`offset` is 1 when gated);
/// the time runs from before the first submission to the last signal being observed.
fn chain(gate: Gate, mut submit: impl FnMut(Timepoints)) -> Duration {
    let semaphore = Semaphore::new(0);
    let offset = match gate {
        Gate::Open => 0,
        Gate::Closed => 1,
    };
    let start = Instant::now();
    for i in 0..CHAIN {
        submit(Timepoints::new(
            Fence::at(&semaphore, i + offset),
            Fence::at(&semaphore, i + offset + 1),
        ));
    }
    if let Gate::Closed = gate {
        semaphore.signal(1).expect("open the gate");
    }
    block_on(semaphore.wait(CHAIN + offset)).expect("chain completed");
    start.elapsed()
}

/// `chain_10k/{pool,inline}/barrier`: 10 000 `queue.barrier` operations chained on one
/// semaphore (operation `i` waits for `i`, signals `i + 1`), submitted back to back from the
/// bench thread; the `Submission`s are dropped unawaited (that does not cancel them) and the
/// final value is awaited. A barrier has no commands, so each one completes inside its own
/// submit call (the previous value is always reached): this is the cost of the submit path
/// itself (fences, done semaphore, action queue, signal), identical in both modes.
///
/// `chain_10k/{pool,inline}/barrier_gated`: the same chain, but operation 0 waits for a value
/// the bench thread signals only after all 10 000 are submitted, so every operation is parked
/// on the reactor and released by its predecessor's signal: submit + park + reactor wake, poll
/// and issue, per operation.
///
/// `chain_10k/{pool,inline}/dispatch_gated`: the gated chain with the 256-element add dispatch
/// (one workgroup, reusable command buffer) as each operation; in pool mode each link also goes
/// to a pool worker and back, where the device sends single small workgroups to the pool. Every
/// operation tracks the same three buffers, so this also shows how buffer tracking scales with
/// 10 000 submissions in flight.
///
/// One iteration is the whole chain; time per submission = reported time / 10 000 (the element
/// throughput, inverted).
fn chain_10k(c: &mut Criterion) {
    let mut group = c.benchmark_group("chain_10k");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(CHAIN));
    for (name, mode) in MODES {
        let setup = Setup::new(mode, TINY, &[1.0, 2.0, 0.0]);
        let queue = &setup.queue;
        let cb = setup.reusable(0, 1, TINY);
        block_on(queue.execute(Timepoints::default(), &cb, None)).expect("execute");
        group.bench_function(format!("{name}/barrier"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| chain(Gate::Open, |t| drop(queue.barrier(t))))
                    .sum()
            })
        });
        group.bench_function(format!("{name}/barrier_gated"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| chain(Gate::Closed, |t| drop(queue.barrier(t))))
                    .sum()
            })
        });
        group.bench_function(format!("{name}/dispatch_gated"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| chain(Gate::Closed, |t| drop(queue.execute(t, &cb, None))))
                    .sum()
            })
        });
        setup.check(2, 3.0);
    }
    group.finish();
}

criterion_group!(benches, tiny_add, tiny_raw, fma_4mi, chain_10k);
criterion_main!(benches);
