//! Benchmarks of the stream layer on this machine, through the host stream API (a thread per
//! stream): the round trip of an empty kernel from submit to await through the stream device,
//! against the same host API used raw in the same run, for both completion strategies.
//!
//! Run with `cargo bench --bench stream` (about half a minute). Group `stream_round_trip`:
//!
//! * `raw/launch_record_sync`: the floor. One iteration is `launch_kernel` of an empty kernel
//!   (one block of one thread, no parameters) on a stream, `record_event` after it and
//!   `synchronize_event` on the bench thread (a blocking-sync event: the thread sleeps on a
//!   condition variable until the stream's thread completes the record). Two cross-thread
//!   wakes: bench thread → stream thread → bench thread.
//! * `{host_callback,completion_thread}/execute_block_on`: one iteration is `queue.execute` of a
//!   reusable command buffer holding the empty dispatch (recorded once), on a queue timeline
//!   (wait for the previous value, signal the next: a wait the stream satisfies with no event
//!   wait, since the previous value is reached), then `futures::executor::block_on` of the
//!   `Submission`. The launch and the event record go to the queue's stream; then
//!   * with host callbacks, the queue's callback stream waits on the event and runs a host
//!     function that posts to the reactor, which settles the fence and wakes the bench thread:
//!     four cross-thread wakes (stream, callback stream, reactor, bench thread);
//!   * with a completion thread, that thread, blocked in `synchronize_event`, settles the fence
//!     and wakes the bench thread: three wakes (stream, completion thread, bench thread).
//! * `{host_callback,completion_thread}/dispatch_block_on`: the same with `queue.dispatch`, which
//!   records, validates and resolves a one-shot command list inside the call.
//! * `flag_write/{execute,dispatch}_block_on`: the same with flag-write completion: the stream
//!   writes a word of pinned memory after the kernel, and the device's scanner thread (spinning
//!   50 µs after its last progress) sees it and settles the fence.
//!
//! * `paired` (printed, not a criterion measurement): the round trips above
//!   (`raw/launch_record_sync` and each strategy's `execute_block_on`), plus the raw loop
//!   polling `query_event` instead of sleeping, a completion-thread device with a 50 µs spin
//!   budget (`StreamDeviceOptions::completion_spin`), and flag-write and the spinning
//!   completion thread with a 20 µs spin in the awaiting future too
//!   (`Device::set_completion_spin`), 3000 round trips each in interleaved blocks of 60 (the
//!   first 10 of each block not counted: a device whose threads spin after its last round trip
//!   would take a CPU from the next one's first), with the median of each and the ratios to
//!   raw. On a shared 2-core
//!   VM the cost of a cross-thread wake swings between about 2 µs and tens of µs depending on
//!   whether the woken thread's CPU was idle (other load changes that from minute to minute), so
//!   only measurements taken in the same time window compare; this one is. Pinning the process
//!   to one CPU (`taskset -c 0 target/release/deps/stream-* --bench`) makes every wake a
//!   same-CPU wake and the figures stable from run to run.
//!
//! * `replay_100`: a reusable command buffer of 100 empty dispatches (launched as a graph from
//!   its second submission on) against the host API's 100 launches and its graph of them.
//!
//! * `registry_get`: the lookup every CUDA and HIP call makes per handle
//!   (`halcyon_stream::registry::Registry::get`: read lock, hash, `Arc` clone), among 64 live
//!   handles spaced like driver addresses, against the same table with the standard library's
//!   SipHash (`std_siphash`), the hasher the registry used before `HandleHasher`.
//!
//! * `allocations_check`: the range check every CUDA and HIP copy and fill makes
//!   (`Allocations::check`, whose guard keeps the allocation live until the driver call
//!   returned) against the unguarded `Allocations::within` it replaced, among 64 allocations.
//!
//! The number of cross-thread wakes on the critical path dominates every figure here.

// `criterion_group!` defines the group's function without a doc comment.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use futures::executor::block_on;
use halcyon::{CommandBuffer, CommandBufferMode, Device, EntryPoint, Queue, Timeline};
use halcyon_host_stream::{HostModule, HostStreamApi};
use halcyon_stream::{
    create_device, CompletionStrategy, EventFlags, KernelParams, LaunchConfig, StreamApi,
    StreamDeviceOptions,
};

fn empty_module() -> HostModule {
    HostModule::new().kernel(
        EntryPoint {
            name: "empty".into(),
            workgroup_size: [1, 1, 1],
            binding_count: 0,
            constant_count: 0,
        },
        |_| Ok(()),
    )
}

fn round_trip(c: &mut Criterion) {
    let mut group = c.benchmark_group("stream_round_trip");
    group
        .sample_size(60)
        .warm_up_time(Duration::from_millis(700))
        .measurement_time(Duration::from_secs(3));

    {
        let api = HostStreamApi::new();
        let stream = api.create_stream().expect("stream");
        let event = api
            .create_event(EventFlags::BLOCKING_SYNC | EventFlags::DISABLE_TIMING)
            .expect("event");
        let module = api.load_module(&empty_module().spec()).expect("module");
        let function = api.get_function(module.module, "empty").expect("function");
        let config = LaunchConfig {
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_memory_bytes: 0,
        };
        let params = KernelParams {
            bindings: &[],
            constants: &[],
            status: None,
        };
        group.bench_function("raw/launch_record_sync", |b| {
            b.iter(|| {
                api.launch_kernel(function, &config, &params, stream)
                    .expect("launch");
                api.record_event(event, stream).expect("record");
                api.synchronize_event(event).expect("sync");
            })
        });
        api.destroy_event(event).expect("destroy event");
        api.destroy_stream(stream).expect("destroy stream");
    }

    for (name, completion, spin) in [
        (
            "host_callback",
            CompletionStrategy::HostCallback,
            Duration::ZERO,
        ),
        (
            "completion_thread",
            CompletionStrategy::CompletionThread,
            Duration::ZERO,
        ),
        ("flag_write", CompletionStrategy::FlagWrite, SPIN),
    ] {
        let device = create_device(
            HostStreamApi::new(),
            StreamDeviceOptions::default()
                .with_completion(completion)
                .with_completion_spin(spin),
        )
        .expect("device");
        let queue = device.queue(0).expect("queue");
        let executable = device
            .load_executable(&empty_module().spec())
            .expect("executable");
        let timeline = queue.timeline().expect("timeline");
        let empty = executable.kernel_at(0).expect("kernel").launch([1, 1, 1]);
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder.dispatch(&empty).expect("record");
        let command_buffer = builder.finish();

        group.bench_function(format!("{name}/execute_block_on"), |b| {
            b.iter(|| block_on(queue.execute(timeline.next(), &command_buffer, None)).expect("run"))
        });
        group.bench_function(format!("{name}/dispatch_block_on"), |b| {
            b.iter(|| block_on(queue.dispatch(timeline.next(), &empty)).expect("run"))
        });
    }
    group.finish();
}

/// One queue of a stream device with the empty dispatch recorded in a reusable command buffer.
struct DeviceLoop {
    _device: Device,
    queue: Queue,
    timeline: Timeline,
    command_buffer: CommandBuffer,
}

impl DeviceLoop {
    /// `completion_spin` is the stream device's (completion thread or flag scanner);
    /// `await_spin` the awaiting future's ([`Device::set_completion_spin`]).
    fn new(
        completion: CompletionStrategy,
        completion_spin: Duration,
        await_spin: Duration,
    ) -> DeviceLoop {
        let device = create_device(
            HostStreamApi::new(),
            StreamDeviceOptions::default()
                .with_completion(completion)
                .with_completion_spin(completion_spin),
        )
        .expect("device");
        device.set_completion_spin(await_spin);
        let queue = device.queue(0).expect("queue");
        let executable = device
            .load_executable(&empty_module().spec())
            .expect("executable");
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder
            .dispatch(&executable.kernel_at(0).expect("kernel").launch([1, 1, 1]))
            .expect("record");
        DeviceLoop {
            timeline: queue.timeline().expect("timeline"),
            queue,
            _device: device,
            command_buffer: builder.finish(),
        }
    }

    fn round_trip(&self) -> Duration {
        let start = Instant::now();
        block_on(
            self.queue
                .execute(self.timeline.next(), &self.command_buffer, None),
        )
        .expect("run");
        start.elapsed()
    }
}

fn median(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e6
}

/// The interleaved comparison (see the module docs); prints its medians.
fn paired(_: &mut Criterion) {
    const ROUNDS: usize = 3000;
    const BLOCK: usize = 60;
    const SETTLE: usize = 10;
    let api = HostStreamApi::new();
    let stream = api.create_stream().expect("stream");
    let event = api
        .create_event(EventFlags::BLOCKING_SYNC | EventFlags::DISABLE_TIMING)
        .expect("event");
    let module = api.load_module(&empty_module().spec()).expect("module");
    let function = api.get_function(module.module, "empty").expect("function");
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_memory_bytes: 0,
    };
    let params = KernelParams {
        bindings: &[],
        constants: &[],
        status: None,
    };
    let raw = || {
        let start = Instant::now();
        api.launch_kernel(function, &config, &params, stream)
            .expect("launch");
        api.record_event(event, stream).expect("record");
        api.synchronize_event(event).expect("sync");
        start.elapsed()
    };
    let raw_spin = || {
        let start = Instant::now();
        api.launch_kernel(function, &config, &params, stream)
            .expect("launch");
        api.record_event(event, stream).expect("record");
        while !api.query_event(event).expect("query") {
            std::hint::spin_loop();
        }
        start.elapsed()
    };
    let zero = Duration::ZERO;
    let callback = DeviceLoop::new(CompletionStrategy::HostCallback, zero, zero);
    let thread = DeviceLoop::new(CompletionStrategy::CompletionThread, zero, zero);
    let spinning = DeviceLoop::new(CompletionStrategy::CompletionThread, SPIN, zero);
    let flags = DeviceLoop::new(CompletionStrategy::FlagWrite, SPIN, zero);
    let flags_await = DeviceLoop::new(CompletionStrategy::FlagWrite, SPIN, AWAIT_SPIN);
    let thread_await = DeviceLoop::new(CompletionStrategy::CompletionThread, SPIN, AWAIT_SPIN);
    let loops: [&dyn Fn() -> Duration; 8] = [
        &raw,
        &raw_spin,
        &|| callback.round_trip(),
        &|| thread.round_trip(),
        &|| spinning.round_trip(),
        &|| flags.round_trip(),
        &|| flags_await.round_trip(),
        &|| thread_await.round_trip(),
    ];
    let mut samples: [Vec<Duration>; 8] = Default::default();
    // Blocks of BLOCK round trips per loop, loops taken in turn: a device whose threads spin
    // after its last round trip would take a CPU from the next one's first round trips (this
    // machine has two), so the first SETTLE of each block are not counted.
    for round in 0..ROUNDS / BLOCK + 2 {
        for (samples, round_trip) in samples.iter_mut().zip(loops) {
            for i in 0..BLOCK {
                let sample = round_trip();
                // The first two rounds are warm-up.
                if round >= 2 && i >= SETTLE {
                    samples.push(sample);
                }
            }
        }
    }
    let [r, rs, c, t, ts, f, fa, ta] = samples.map(median);
    println!(
        "stream_round_trip/paired ({ROUNDS} round trips each, interleaved in blocks of \
         {BLOCK}), medians: raw {r:.1} µs, \
         raw polling {rs:.1} µs; host_callback {c:.1} µs ({:.2}x raw), completion_thread \
         {t:.1} µs ({:.2}x raw), completion_thread with a {} µs spin {ts:.1} µs ({:.2}x raw, \
         {:.2}x raw polling), flag_write (the same scanner spin) {f:.1} µs ({:.2}x raw, {:.2}x \
         raw polling); with a {} µs await spin: flag_write {fa:.1} µs ({:.2}x raw, {:.2}x raw \
         polling), completion_thread {ta:.1} µs ({:.2}x raw, {:.2}x raw polling)",
        c / r,
        t / r,
        SPIN.as_micros(),
        ts / r,
        ts / rs,
        f / r,
        f / rs,
        AWAIT_SPIN.as_micros(),
        fa / r,
        fa / rs,
        ta / r,
        ta / rs,
    );
}

/// The awaiting future's spin budget of the `paired` comparison's devices that have one.
const AWAIT_SPIN: Duration = Duration::from_micros(20);

/// The completion-thread spin budget of the `paired` comparison's spinning device.
const SPIN: Duration = Duration::from_micros(50);

/// Dispatches in the replayed command buffer of group `replay_100`.
const REPLAYED: usize = 100;

/// A reusable command buffer of 100 empty dispatches, submitted and awaited per iteration
/// (halcyon launches it as one graph from its second submission on), against the host API used
/// raw: the same 100 launches enqueued one by one, and a graph of them captured once and
/// launched, each followed by an event record and synchronisation. Divide by 100 for the cost
/// per dispatch.
fn replay(c: &mut Criterion) {
    let mut group = c.benchmark_group("replay_100");
    group
        .sample_size(40)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    {
        let api = HostStreamApi::new();
        let stream = api.create_stream().expect("stream");
        let event = api
            .create_event(EventFlags::BLOCKING_SYNC | EventFlags::DISABLE_TIMING)
            .expect("event");
        let module = api.load_module(&empty_module().spec()).expect("module");
        let function = api.get_function(module.module, "empty").expect("function");
        let config = LaunchConfig {
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_memory_bytes: 0,
        };
        let params = KernelParams {
            bindings: &[],
            constants: &[],
            status: None,
        };
        let launch_all = || {
            for _ in 0..REPLAYED {
                api.launch_kernel(function, &config, &params, stream)
                    .expect("launch");
            }
        };
        group.bench_function("raw/launches", |b| {
            b.iter(|| {
                launch_all();
                api.record_event(event, stream).expect("record");
                api.synchronize_event(event).expect("sync");
            })
        });
        api.begin_capture(stream).expect("capture");
        launch_all();
        let graph = api.end_capture(stream).expect("graph");
        group.bench_function("raw/graph", |b| {
            b.iter(|| {
                // SAFETY: the graph's launches use no memory.
                unsafe { api.launch_graph(graph, stream) }.expect("launch graph");
                api.record_event(event, stream).expect("record");
                api.synchronize_event(event).expect("sync");
            })
        });
        api.destroy_graph(graph).expect("destroy graph");
        api.destroy_event(event).expect("destroy event");
        api.destroy_stream(stream).expect("destroy stream");
    }
    let device = create_device(
        HostStreamApi::new(),
        StreamDeviceOptions::default().with_completion(CompletionStrategy::CompletionThread),
    )
    .expect("device");
    let queue = device.queue(0).expect("queue");
    let executable = device
        .load_executable(&empty_module().spec())
        .expect("executable");
    let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
    for _ in 0..REPLAYED {
        builder
            .dispatch(&executable.kernel_at(0).expect("kernel").launch([1, 1, 1]))
            .expect("record");
    }
    let command_buffer = builder.finish();
    group.bench_function("completion_thread/execute_block_on", |b| {
        b.iter(|| {
            block_on(queue.execute(halcyon::Timepoints::default(), &command_buffer, None))
                .expect("run")
        })
    });
    group.finish();
    println!(
        "replay_100: graph launches {} of {} submissions",
        device
            .query(halcyon_stream::keys::GRAPH_LAUNCHES)
            .map_or("?".to_string(), |v| v.to_string()),
        device
            .query(halcyon_stream::keys::SUBMISSIONS)
            .map_or("?".to_string(), |v| v.to_string())
    );
}

fn registry_get(c: &mut Criterion) {
    use std::collections::HashMap;
    use std::hint::black_box;
    use std::sync::{Arc, RwLock};
    const LIVE: u64 = 64;
    let handle = |i: u64| 0x7f3a_1000_0000 + (i % LIVE) * 0x200;
    let registry = halcyon_stream::registry::Registry::new("CUDA", "event");
    let siphash: RwLock<HashMap<u64, Arc<u64>>> = RwLock::default();
    for i in 0..LIVE {
        registry.insert(handle(i), i);
        siphash
            .write()
            .expect("lock")
            .insert(handle(i), Arc::new(i));
    }
    let mut group = c.benchmark_group("registry_get");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let mut i = 0u64;
    group.bench_function("handle_hasher", |b| {
        b.iter(|| {
            i += 1;
            black_box(registry.get(black_box(handle(i))).expect("live"))
        })
    });
    group.bench_function("std_siphash", |b| {
        b.iter(|| {
            i += 1;
            let live = siphash.read().expect("lock");
            black_box(live.get(&black_box(handle(i))).expect("live").clone())
        })
    });
    group.finish();
}

/// The range check every CUDA and HIP copy and fill makes: `Allocations::check`, whose guard
/// keeps the allocation live across the driver call (two lock round trips), against
/// `Allocations::within`, the unguarded check it replaced (one), among 64 live allocations.
fn allocations_check(c: &mut Criterion) {
    use halcyon_stream::allocations::Allocations;
    use halcyon_stream::DevicePtr;
    use std::hint::black_box;
    const LIVE: u64 = 64;
    let base = |i: u64| 0x7f3a_0000_0000 + (i % LIVE) * 0x10_0000;
    let memory = Allocations::new("CUDA");
    for i in 0..LIVE {
        memory.insert(base(i), 0x10_0000, ());
    }
    let mut group = c.benchmark_group("allocations_check");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let mut i = 0u64;
    group.bench_function("check_guarded", |b| {
        b.iter(|| {
            i += 1;
            let pinned = memory
                .check(DevicePtr(black_box(base(i) + 0x100)), 256, "fill")
                .expect("live");
            drop(black_box(pinned));
        })
    });
    group.bench_function("within_unguarded", |b| {
        b.iter(|| {
            i += 1;
            black_box(memory.within(black_box(base(i) + 0x100), 256, |_| true))
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    round_trip,
    paired,
    replay,
    registry_get,
    allocations_check
);
criterion_main!(benches);
