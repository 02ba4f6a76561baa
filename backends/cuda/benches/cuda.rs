//! Benchmarks of the CUDA device against the CUDA driver API used raw, in the same run (the
//! raw calls go through `halcyon_cuda::sys`: the driver's own functions, with the result read
//! as a number). Without libcuda or a device the benchmark prints why and exits successfully.
//!
//! Run with `cargo bench -p halcyon-cuda --bench cuda`. The kernel is `empty` from
//! `tests/kernels/standard.ptx` (one block of one thread, no parameters), so every figure is
//! launch and completion overhead.
//!
//! `cuda_calls/paired` (printed first): what `CudaApi` adds to a driver call (binding the
//! context, registry lookups of its handles, the allocation-table range check), as
//! `record_event` + `query_event` and `memset_async` against the same raw calls, interleaved
//! (see `calls`). With `HALCYON_CUDA_BENCH_FAKE=1` the benchmark loads the fake driver
//! (`testing/fake-gpu`) first and runs only this, which then measures halcyon's side against
//! the fake's calls on a machine without a GPU, `cuda_replay_table_100` (that it works: its
//! times mean nothing there), and `cuda_write_64m` and `cuda_read_64m`, whose host side
//! (staging, and its overlap with the fake's copies, which are host memcpys on the fake's
//! stream threads) is real.
//!
//! Group `cuda_round_trip` (one empty kernel, submitted and awaited):
//!
//! * `raw/launch_stream_sync`: `cuLaunchKernel` + `cuStreamSynchronize` (the driver's default
//!   scheduling: it spins, then yields, on a machine with more cores than GPUs).
//! * `raw/launch_record_event_sync`: `cuLaunchKernel` + `cuEventRecord` + `cuEventSynchronize`
//!   on a blocking-sync event: what a completion thread does, the floor for halcyon's default.
//! * `{completion_thread,completion_thread_spin,host_callback}/execute_block_on`:
//!   `queue.execute` of a reusable command buffer holding the empty dispatch on a queue
//!   timeline, then `futures::executor::block_on` of the submission: the whole halcyon path (a
//!   completion thread waking the awaiting thread, the same thread polling for up to 50 µs
//!   before it sleeps ([`CudaDeviceOptions::completion_spin`]), or a `cuLaunchHostFunc`
//!   callback on a callback stream posting to the reactor, which wakes it).
//!
//! * `flag_write/execute_block_on`: the same with [`CompletionStrategy::FlagWrite`]: the
//!   stream writes a word of pinned memory with `cuStreamWriteValue32` after the kernel, and
//!   the device's scanner thread (spinning 20 µs after its last progress) sees it with a plain
//!   load and wakes the awaiting thread.
//!
//! `cuda_round_trip/paired` (printed): the six round trips above interleaved, plus flag-write
//! and the spinning completion thread with a 20 µs spin in the awaiting future
//! ([`halcyon::Device::set_completion_spin`]: the executor thread watches for the completion
//! instead of sleeping), one of each per round for 5000 rounds, with medians and ratios to both raw forms; compare these, not
//! figures from separate criterion groups taken minutes apart.
//!
//! Group `cuda_replay_100` (100 empty kernels per iteration; divide by 100 for the cost per
//! dispatch, or read criterion's element throughput):
//!
//! * `raw/stream_launches`: 100 `cuLaunchKernel` + `cuStreamSynchronize`.
//! * `raw/graph`: the 100 launches captured once (`cuStreamBeginCapture` → launches →
//!   `cuStreamEndCapture` → `cuGraphInstantiateWithFlags`), then per iteration `cuGraphLaunch`
//!   + `cuStreamSynchronize`.
//! * `halcyon/execute_block_on`: a reusable command buffer of the 100 dispatches, executed and
//!   awaited (stream replay: 100 launches per submission).
//! * `halcyon_graphs/execute_block_on`: the same with [`CudaDeviceOptions::graphs`], where the
//!   stream layer captures the list into a graph on its second submission and launches that.
//!
//! Group `cuda_replay_table_100` (100 launches of `add_one_u32` with `n = 0`, each binding one
//! of two 256-byte buffers, the buffer alternating every iteration: a reusable command buffer
//! submitted with a new binding table each time):
//!
//! * `raw/graph_update`: the 100 launches captured once; per iteration
//!   `cuGraphExecKernelNodeSetParams` on each of the 100 kernel nodes (the other buffer), then
//!   `cuGraphLaunch` + `cuStreamSynchronize`: the floor for a graph that follows its buffers.
//! * `halcyon/execute_table_block_on`: the command buffer (one slot) executed with the
//!   iteration's table and awaited, stream replay (100 launches per submission).
//! * `halcyon_graphs/execute_table_block_on`: the same with graphs, where the graph captured
//!   from the recording has its 100 kernels pointed at the new buffer in place each time
//!   ([`halcyon_stream::StreamApi::update_graph_kernel`]).
//!
//! Group `cuda_read_4k` (4 KiB of device memory read back to the host, submitted and awaited):
//!
//! * `raw/pinned_async_stream_sync`: `cuMemcpyDtoHAsync` into a pinned buffer
//!   (`cuMemAllocHost`) + `cuStreamSynchronize`: the floor.
//! * `raw/pageable_sync`: `cuMemcpyDtoH` into a `Vec` (the driver stages and blocks).
//! * `completion_thread/read_block_on`: `queue.read` on a queue timeline, then
//!   `futures::executor::block_on`: the device copies into the submission's lease of the stream
//!   layer's pinned memory (no staging, no host function), and the bytes are copied out to the
//!   returned `Vec` on completion.
//! * `completion_thread/copy_to_host_buffer_block_on`: `queue.copy` into a buffer allocated
//!   with `BufferParams::HOST` (pinned host memory, `cuMemHostAlloc`), where the bytes stay:
//!   what a program that keeps its host data in pinned memory does, and the counterpart of the
//!   raw pinned copy.
//!
//! Group `cuda_read_64m`: the same three for 64 MiB, where halcyon's read goes through the API's
//! pinned staging in 8 MiB chunks, double-buffered: the staging thread copies one chunk out
//! while the device copies the next in (`halcyon_stream::staging`); `raw/pageable_sync`, which also ends in a `Vec`, is the
//! comparison that matters. Plus `completion_thread/read_into_block_on`: `queue.read_into`
//! handed the vector the previous read returned, so that no read touches fresh memory (a
//! fresh 64 MiB vector costs tens of milliseconds of page faults on some hosts).
//!
//! Group `cuda_write_64m` (64 MiB from a `Vec` to device memory, submitted and awaited):
//! `raw/pinned_async_stream_sync` (`cuMemcpyHtoDAsync` from pinned memory, the floor),
//! `raw/pageable_sync` (`cuMemcpyHtoD` from the `Vec`) and `completion_thread/write_block_on`
//! (`queue.write`: the first chunk copied into staging at submission, the rest by host
//! functions between the chunks' copies), and `completion_thread/write_shared_block_on`
//! (`queue.write_shared` of one `Arc<[u8]>`: no copy of the bytes at submission), and
//! `completion_thread/copy_from_host_buffer_block_on` (`queue.copy` from a `BufferParams::HOST`
//! buffer holding the bytes: one DMA from pinned memory, as the raw floor does).

use std::ffi::{c_uint, CString};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUevent_flags, CUfunction, CUgraph, CUgraphExec,
    CUgraphNode, CUmodule, CUstream, CUstreamCaptureMode, CUstream_flags, CUDA_KERNEL_NODE_PARAMS,
};
use futures::executor::block_on;
use halcyon::{
    Binding, BindingTable, Buffer, BufferParams, CommandBuffer, CommandBufferMode, Device,
    EntryPoint, Queue, Timeline,
};
use halcyon_cuda::sys::{self, Code};
use halcyon_cuda::{create_device_with, probe, CudaApi, CudaDeviceOptions, CudaModule};
use halcyon_stream::CompletionStrategy;

const STANDARD_PTX: &str = include_str!("../tests/kernels/standard.ptx");
const REPLAYED: usize = 100;

fn empty_entry() -> EntryPoint {
    EntryPoint {
        name: "empty".into(),
        workgroup_size: [1, 1, 1],
        binding_count: 0,
        constant_count: 0,
    }
}

/// Panics with the call's name on a CUDA error (a benchmark has nothing better to do).
fn ok(r: Code, call: &str) {
    assert!(r.is_success(), "{call} failed: {r:?}");
}

/// The driver API used directly: the primary context, a stream, a blocking-sync event and the
/// `empty` kernel.
struct Raw {
    device: CUdevice,
    stream: CUstream,
    event: CUevent,
    module: CUmodule,
    function: CUfunction,
    /// `add_one_u32(ptr, n)`.
    add_one: CUfunction,
}

impl Raw {
    fn new() -> Raw {
        let mut device = 0;
        let mut context: CUcontext = std::ptr::null_mut();
        // SAFETY: (this block and the ones below) the probe succeeded before any of this runs
        // (see main), every out-pointer is valid, every handle was created above and is live,
        // and the PTX is NUL-terminated.
        unsafe {
            ok(sys::cuDeviceGet(&mut device, 0), "cuDeviceGet");
            ok(
                sys::cuDevicePrimaryCtxRetain(&mut context, device),
                "cuDevicePrimaryCtxRetain",
            );
            ok(sys::cuCtxSetCurrent(context), "cuCtxSetCurrent");
        }
        let mut raw = Raw {
            device,
            stream: std::ptr::null_mut(),
            event: std::ptr::null_mut(),
            module: std::ptr::null_mut(),
            function: std::ptr::null_mut(),
            add_one: std::ptr::null_mut(),
        };
        let ptx = CString::new(STANDARD_PTX).expect("PTX without NULs");
        let name = CString::new("empty").expect("name");
        let non_blocking = CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint;
        let event_flags = CUevent_flags::CU_EVENT_BLOCKING_SYNC as c_uint
            | CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
        // SAFETY: as above.
        unsafe {
            ok(
                sys::cuStreamCreate(&mut raw.stream, non_blocking),
                "cuStreamCreate",
            );
            ok(
                sys::cuEventCreate(&mut raw.event, event_flags),
                "cuEventCreate",
            );
            ok(
                sys::cuModuleLoadData(&mut raw.module, ptx.as_ptr().cast()),
                "cuModuleLoadData",
            );
            ok(
                sys::cuModuleGetFunction(&mut raw.function, raw.module, name.as_ptr()),
                "cuModuleGetFunction",
            );
            ok(
                sys::cuModuleGetFunction(&mut raw.add_one, raw.module, c"add_one_u32".as_ptr()),
                "cuModuleGetFunction",
            );
        }
        raw
    }

    /// One empty kernel on the stream.
    fn launch(&self) {
        // SAFETY: as in `new`; the kernel takes no parameters (null kernelParams and extra).
        unsafe {
            ok(
                sys::cuLaunchKernel(
                    self.function,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    self.stream,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                ),
                "cuLaunchKernel",
            )
        }
    }

    fn stream_sync(&self) {
        ok(
            // SAFETY: a live stream.
            unsafe { sys::cuStreamSynchronize(self.stream) },
            "cuStreamSynchronize",
        );
    }

    fn event_sync(&self) {
        // SAFETY: a live event and stream.
        unsafe {
            ok(sys::cuEventRecord(self.event, self.stream), "cuEventRecord");
            ok(sys::cuEventSynchronize(self.event), "cuEventSynchronize");
        }
    }

    /// `REPLAYED` launches captured into an instantiated graph.
    fn graph(&self) -> CUgraphExec {
        let mut graph: CUgraph = std::ptr::null_mut();
        let mut exec: CUgraphExec = std::ptr::null_mut();
        let mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        // SAFETY: as in `new`; the graph is destroyed once instantiated (the executable graph
        // does not depend on it).
        unsafe {
            ok(
                sys::cuStreamBeginCapture_v2(self.stream, mode),
                "cuStreamBeginCapture",
            );
            for _ in 0..REPLAYED {
                self.launch();
            }
            ok(
                sys::cuStreamEndCapture(self.stream, &mut graph),
                "cuStreamEndCapture",
            );
            ok(
                sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0),
                "cuGraphInstantiateWithFlags",
            );
            ok(sys::cuGraphDestroy(graph), "cuGraphDestroy");
        }
        exec
    }

    fn launch_graph(&self, exec: CUgraphExec) {
        ok(
            // SAFETY: an instantiated graph and a live stream.
            unsafe { sys::cuGraphLaunch(exec, self.stream) },
            "cuGraphLaunch",
        );
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: handles created in `new`, idle (every iteration synchronised).
        unsafe {
            sys::cuModuleUnload(self.module);
            sys::cuEventDestroy_v2(self.event);
            sys::cuStreamDestroy_v2(self.stream);
            sys::cuDevicePrimaryCtxRelease_v2(self.device);
        }
    }
}

/// Device memory and a pinned host buffer of the same size, for the raw transfers of
/// `cuda_read_4k`, `cuda_read_64m` and `cuda_write_64m`.
struct RawTransfer {
    bytes: usize,
    device_memory: CUdeviceptr,
    pinned: *mut std::ffi::c_void,
}

impl RawTransfer {
    fn new(bytes: usize) -> RawTransfer {
        let mut transfer = RawTransfer {
            bytes,
            device_memory: 0,
            pinned: std::ptr::null_mut(),
        };
        // SAFETY: valid out-pointers; the context was made current by `Raw::new`.
        unsafe {
            ok(
                sys::cuMemAlloc_v2(&mut transfer.device_memory, bytes),
                "cuMemAlloc",
            );
            ok(
                sys::cuMemsetD8_v2(transfer.device_memory, 7, bytes),
                "cuMemsetD8",
            );
            ok(
                sys::cuMemAllocHost_v2(&mut transfer.pinned, bytes),
                "cuMemAllocHost",
            );
        }
        transfer
    }

    fn read_pinned_async(&self, raw: &Raw) {
        // SAFETY: `pinned` holds `bytes` bytes of pinned memory, untouched until the stream is
        // synchronised right after.
        unsafe {
            ok(
                sys::cuMemcpyDtoHAsync_v2(self.pinned, self.device_memory, self.bytes, raw.stream),
                "cuMemcpyDtoHAsync",
            );
        }
        raw.stream_sync();
    }

    fn read_pageable(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; self.bytes];
        ok(
            // SAFETY: `bytes` holds `self.bytes` writable bytes; the copy is synchronous.
            unsafe {
                sys::cuMemcpyDtoH_v2(bytes.as_mut_ptr().cast(), self.device_memory, self.bytes)
            },
            "cuMemcpyDtoH",
        );
        bytes
    }

    fn write_pinned_async(&self, raw: &Raw) {
        // SAFETY: `pinned` holds `bytes` bytes, unmodified until the stream is synchronised.
        unsafe {
            ok(
                sys::cuMemcpyHtoDAsync_v2(self.device_memory, self.pinned, self.bytes, raw.stream),
                "cuMemcpyHtoDAsync",
            );
        }
        raw.stream_sync();
    }

    fn write_pageable(&self, bytes: &[u8]) {
        ok(
            // SAFETY: `bytes` holds `self.bytes` readable bytes; the copy is synchronous.
            unsafe { sys::cuMemcpyHtoD_v2(self.device_memory, bytes.as_ptr().cast(), self.bytes) },
            "cuMemcpyHtoD",
        );
    }
}

impl Drop for RawTransfer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, idle (every copy synchronised).
        unsafe {
            sys::cuMemFree_v2(self.device_memory);
            sys::cuMemFreeHost(self.pinned);
        }
    }
}

/// A queue of `cuda://0` with a timeline and a device buffer of `bytes` bytes set to 7.
fn transfer_queue(bytes: usize) -> (Device, Queue, Timeline, halcyon::Buffer) {
    let device = create_device_with(0, options(CompletionStrategy::CompletionThread, false))
        .expect("cuda://0");
    let queue = device.queue(0).expect("queue");
    let timeline = queue.timeline().expect("timeline");
    let buffer = device
        .allocator()
        .allocate(bytes as u64, halcyon::BufferParams::DEVICE)
        .expect("buffer");
    block_on(queue.fill(timeline.next(), 7u8, &buffer.whole())).expect("fill");
    (device, queue, timeline, buffer)
}

/// Group `cuda_read_4k` or `cuda_read_64m` (see the module docs).
fn read(c: &mut Criterion, raw: &Raw, name: &str, bytes: usize, samples: usize) {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(samples)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Bytes(bytes as u64));
    let raw_read = RawTransfer::new(bytes);
    group.bench_function("raw/pinned_async_stream_sync", |b| {
        b.iter(|| raw_read.read_pinned_async(raw))
    });
    group.bench_function("raw/pageable_sync", |b| b.iter(|| raw_read.read_pageable()));
    let (device, queue, timeline, buffer) = transfer_queue(bytes);
    group.bench_function("completion_thread/read_block_on", |b| {
        b.iter(|| {
            let read = block_on(queue.read::<u8>(timeline.next(), &buffer.whole())).expect("read");
            assert_eq!(read[bytes - 1], 7);
        })
    });
    // Into a pinned host buffer (`BufferParams::HOST`), the data left where the device put it:
    // the counterpart of the raw pinned copy.
    let pinned = device
        .allocator()
        .allocate(bytes as u64, halcyon::BufferParams::HOST)
        .expect("host buffer");
    group.bench_function("completion_thread/copy_to_host_buffer_block_on", |b| {
        b.iter(|| {
            block_on(queue.copy(timeline.next(), &buffer.whole(), &pinned.whole())).expect("copy")
        })
    });
    let mut reused = Some(Vec::new());
    group.bench_function("completion_thread/read_into_block_on", |b| {
        b.iter(|| {
            let buffer_in = reused.take().expect("the last read's vector");
            let read = block_on(queue.read_into::<u8>(timeline.next(), &buffer.whole(), buffer_in))
                .expect("read");
            assert_eq!(read[bytes - 1], 7);
            reused = Some(read);
        })
    });
    println!(
        "{name} completion_thread/read_block_on: {} submissions leased pinned memory",
        device
            .query(halcyon_stream::keys::PINNED_LEASES)
            .map_or("?".to_string(), |v| v.to_string())
    );
    group.finish();
}

/// Group `cuda_write_64m` (see the module docs).
fn write(c: &mut Criterion, raw: &Raw) {
    const BYTES: usize = 64 << 20;
    let mut group = c.benchmark_group("cuda_write_64m");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Bytes(BYTES as u64));
    let raw_write = RawTransfer::new(BYTES);
    let data = vec![5u8; BYTES];
    group.bench_function("raw/pinned_async_stream_sync", |b| {
        b.iter(|| raw_write.write_pinned_async(raw))
    });
    group.bench_function("raw/pageable_sync", |b| {
        b.iter(|| raw_write.write_pageable(&data))
    });
    let (device, queue, timeline, buffer) = transfer_queue(BYTES);
    // From a pinned host buffer (`BufferParams::HOST`) the data was written into: the
    // counterpart of the raw pinned copy.
    let pinned = device
        .allocator()
        .allocate(BYTES as u64, halcyon::BufferParams::HOST)
        .expect("host buffer");
    pinned
        .map_write(..)
        .expect("map")
        .as_mut_slice::<u8>()
        .expect("bytes")
        .copy_from_slice(&data);
    group.bench_function("completion_thread/copy_from_host_buffer_block_on", |b| {
        b.iter(|| {
            block_on(queue.copy(timeline.next(), &pinned.whole(), &buffer.whole())).expect("copy")
        })
    });
    group.bench_function("completion_thread/write_block_on", |b| {
        b.iter(|| block_on(queue.write(timeline.next(), &data, &buffer.whole())).expect("write"))
    });
    let shared: std::sync::Arc<[u8]> = data.as_slice().into();
    group.bench_function("completion_thread/write_shared_block_on", |b| {
        b.iter(|| {
            block_on(queue.write_shared(timeline.next(), shared.clone(), &buffer.whole()))
                .expect("write")
        })
    });
    group.finish();
}

/// A queue of a CUDA device with the empty dispatch, `count` times, in a reusable command
/// buffer.
struct DeviceLoop {
    _device: Device,
    queue: Queue,
    timeline: Timeline,
    command_buffer: CommandBuffer,
}

impl DeviceLoop {
    fn new(options: CudaDeviceOptions, count: usize) -> DeviceLoop {
        let device = create_device_with(0, options).expect("cuda://0");
        let queue = device.queue(0).expect("queue");
        let module = CudaModule::ptx(STANDARD_PTX, vec![empty_entry()]);
        let executable = device.load_executable(&module.spec()).expect("executable");
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        for _ in 0..count {
            builder
                .dispatch(&executable.kernel_at(0).expect("kernel").launch([1, 1, 1]))
                .expect("record");
        }
        DeviceLoop {
            timeline: queue.timeline().expect("timeline"),
            queue,
            _device: device,
            command_buffer: builder.finish(),
        }
    }

    fn run(&self) {
        block_on(
            self.queue
                .execute(self.timeline.next(), &self.command_buffer, None),
        )
        .expect("run");
    }
}

fn options(completion: CompletionStrategy, graphs: bool) -> CudaDeviceOptions {
    CudaDeviceOptions::default()
        .with_queue_count(1)
        .with_completion(completion)
        .with_graphs(graphs)
}

/// The spin budget of the `completion_thread_spin` variants
/// ([`CudaDeviceOptions::completion_spin`]).
const SPIN: Duration = Duration::from_micros(50);

fn spinning() -> CudaDeviceOptions {
    options(CompletionStrategy::CompletionThread, false).with_completion_spin(SPIN)
}

/// The scanner's spin budget of the `flag_write` variants.
const FLAG_SPIN: Duration = Duration::from_micros(20);

/// The awaiting future's spin budget of the variants with one
/// ([`halcyon::Device::set_completion_spin`]).
const AWAIT_SPIN: Duration = Duration::from_micros(20);

fn flag_write() -> CudaDeviceOptions {
    options(CompletionStrategy::FlagWrite, false).with_completion_spin(FLAG_SPIN)
}

fn round_trip(c: &mut Criterion, raw: &Raw) {
    let mut group = c.benchmark_group("cuda_round_trip");
    group
        .sample_size(100)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    group.bench_function("raw/launch_stream_sync", |b| {
        b.iter(|| {
            raw.launch();
            raw.stream_sync();
        })
    });
    group.bench_function("raw/launch_record_event_sync", |b| {
        b.iter(|| {
            raw.launch();
            raw.event_sync();
        })
    });
    for (name, options) in [
        (
            "completion_thread",
            options(CompletionStrategy::CompletionThread, false),
        ),
        ("completion_thread_spin", spinning()),
        (
            "host_callback",
            options(CompletionStrategy::HostCallback, false),
        ),
        ("flag_write", flag_write()),
    ] {
        let device = DeviceLoop::new(options, 1);
        group.bench_function(format!("{name}/execute_block_on"), |b| {
            b.iter(|| device.run())
        });
    }
    group.finish();
}

/// The median of `samples`.
fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The round trips of `cuda_round_trip` interleaved, one of each per round, so that every
/// figure comes from the same minutes of the same machine; prints medians and ratios.
fn paired(raw: &Raw) {
    const ROUNDS: usize = 5000;
    let timed = |f: &dyn Fn()| {
        let start = Instant::now();
        f();
        start.elapsed()
    };
    let thread = DeviceLoop::new(options(CompletionStrategy::CompletionThread, false), 1);
    let spin = DeviceLoop::new(spinning(), 1);
    let callback = DeviceLoop::new(options(CompletionStrategy::HostCallback, false), 1);
    let flags = DeviceLoop::new(flag_write(), 1);
    let flags_await = DeviceLoop::new(flag_write(), 1);
    flags_await._device.set_completion_spin(AWAIT_SPIN);
    let spin_await = DeviceLoop::new(spinning(), 1);
    spin_await._device.set_completion_spin(AWAIT_SPIN);
    let rounds: [(&str, &dyn Fn()); 8] = [
        ("raw launch + cuStreamSynchronize", &|| {
            raw.launch();
            raw.stream_sync();
        }),
        ("raw launch + blocking-sync event", &|| {
            raw.launch();
            raw.event_sync();
        }),
        ("completion thread", &|| thread.run()),
        ("completion thread, 50 µs spin", &|| spin.run()),
        ("host callback", &|| callback.run()),
        ("flag write, 20 µs scanner spin", &|| flags.run()),
        ("flag write + 20 µs await spin", &|| flags_await.run()),
        ("completion thread spin + await spin", &|| spin_await.run()),
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); rounds.len()];
    for round in 0..ROUNDS + 500 {
        for ((_, f), samples) in rounds.iter().zip(&mut samples) {
            let sample = timed(*f);
            if round >= 500 {
                samples.push(sample);
            }
        }
    }
    let medians: Vec<f64> = samples
        .into_iter()
        .map(|s| median(s).as_secs_f64() * 1e6)
        .collect();
    println!("cuda_round_trip/paired ({ROUNDS} interleaved rounds), medians:");
    for ((name, _), median) in rounds.iter().zip(&medians) {
        println!(
            "  {name:<36} {median:>7.1} µs  {:.2}x stream sync  {:.2}x event sync",
            median / medians[0],
            median / medians[1]
        );
    }
}

fn replay(c: &mut Criterion, raw: &Raw) {
    let mut group = c.benchmark_group("cuda_replay_100");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(REPLAYED as u64));
    group.bench_function("raw/stream_launches", |b| {
        b.iter(|| {
            for _ in 0..REPLAYED {
                raw.launch();
            }
            raw.stream_sync();
        })
    });
    let exec = raw.graph();
    group.bench_function("raw/graph", |b| {
        b.iter(|| {
            raw.launch_graph(exec);
            raw.stream_sync();
        })
    });
    ok(
        // SAFETY: an instantiated graph whose launches were all synchronised.
        unsafe { sys::cuGraphExecDestroy(exec) },
        "cuGraphExecDestroy",
    );
    for (name, graphs) in [("halcyon", false), ("halcyon_graphs", true)] {
        let device = DeviceLoop::new(
            options(CompletionStrategy::CompletionThread, graphs),
            REPLAYED,
        );
        group.bench_function(format!("{name}/execute_block_on"), |b| {
            b.iter(|| device.run())
        });
        println!(
            "{name}: {} graph launches in {} submissions",
            device
                ._device
                .query(halcyon_stream::keys::GRAPH_LAUNCHES)
                .map_or("?".to_string(), |v| v.to_string()),
            device
                ._device
                .query(halcyon_stream::keys::SUBMISSIONS)
                .map_or("?".to_string(), |v| v.to_string())
        );
    }
    group.finish();
}

/// The cost `CudaApi` adds to a driver call (binding its context, looking its handles up in
/// the registries, checking a range against the allocation table), call against call:
/// `cuEventRecord` + `cuEventQuery` against `record_event` + `query_event`, and
/// `cuMemsetD8Async` of 256 bytes against `memset_async`, in batches of 100 interleaved over
/// 2000 rounds, with `cuCtxGetCurrent` (what binding an already-current context costs); prints
/// the median per call and the differences.
fn calls(raw: &Raw, probe: &'static probe::Probe) {
    use halcyon_stream::{EventFlags, MemoryPlacement, StreamApi};
    const ROUNDS: usize = 2000;
    const BATCH: u32 = 100;
    let api = CudaApi::new(probe, 0).expect("CudaApi");
    let stream = api.create_stream().expect("create_stream");
    let event = api
        .create_event(EventFlags::BLOCKING_SYNC | EventFlags::DISABLE_TIMING)
        .expect("create_event");
    let memory = api
        .allocate(256, MemoryPlacement::Device)
        .expect("allocate");
    let mut raw_memory: CUdeviceptr = 0;
    ok(
        // SAFETY: a valid out-pointer; Raw::new made the context current.
        unsafe { sys::cuMemAlloc_v2(&mut raw_memory, 256) },
        "cuMemAlloc",
    );
    let batches: [(&str, &dyn Fn()); 5] = [
        ("raw cuEventRecord + cuEventQuery", &|| {
            for _ in 0..BATCH {
                // SAFETY: a live event and stream of the current context.
                unsafe {
                    ok(sys::cuEventRecord(raw.event, raw.stream), "cuEventRecord");
                    let r = sys::cuEventQuery(raw.event);
                    assert!(
                        r.is_success() || r == Code::NOT_READY,
                        "cuEventQuery: {r:?}"
                    );
                }
            }
        }),
        ("CudaApi record_event + query_event", &|| {
            for _ in 0..BATCH {
                api.record_event(event, stream).expect("record_event");
                api.query_event(event).expect("query_event");
            }
        }),
        ("raw cuMemsetD8Async (256 B)", &|| {
            for _ in 0..BATCH {
                // SAFETY: 256 bytes of live device memory and a live stream.
                let r = unsafe { sys::cuMemsetD8Async(raw_memory, 0, 256, raw.stream) };
                ok(r, "cuMemsetD8Async");
            }
        }),
        ("CudaApi memset_async (256 B)", &|| {
            for _ in 0..BATCH {
                api.memset_async(memory, 0, 1, 256, stream)
                    .expect("memset_async");
            }
        }),
        // What binding the context costs every CudaApi call when it is already current.
        ("raw cuCtxGetCurrent", &|| {
            for _ in 0..BATCH {
                let mut current: CUcontext = std::ptr::null_mut();
                ok(
                    // SAFETY: a valid out-pointer.
                    unsafe { sys::cuCtxGetCurrent(&mut current) },
                    "cuCtxGetCurrent",
                );
            }
        }),
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); batches.len()];
    for round in 0..ROUNDS + 200 {
        for ((_, batch), samples) in batches.iter().zip(&mut samples) {
            let start = Instant::now();
            batch();
            let elapsed = start.elapsed();
            // Outside the timing: the stream drains before the next batch.
            raw.stream_sync();
            api.synchronize_stream(stream).expect("synchronize_stream");
            if round >= 200 {
                samples.push(elapsed);
            }
        }
    }
    let medians: Vec<f64> = samples
        .into_iter()
        .map(|s| median(s).as_secs_f64() * 1e9 / f64::from(BATCH))
        .collect();
    println!("cuda_calls/paired ({ROUNDS} interleaved rounds of {BATCH} calls), medians per call:");
    for ((name, _), median) in batches.iter().zip(&medians) {
        println!("  {name:<36} {median:>8.0} ns");
    }
    for (what, raw_ns, api_ns) in [
        ("event record + query", medians[0], medians[1]),
        ("memset", medians[2], medians[3]),
    ] {
        println!(
            "  CudaApi adds {:.0} ns per {what} ({:.2}x raw)",
            api_ns - raw_ns,
            api_ns / raw_ns
        );
    }
    api.free(memory).expect("free");
    api.destroy_event(event).expect("destroy_event");
    api.destroy_stream(stream).expect("destroy_stream");
    // SAFETY: allocated above; the stream that used it was synchronised.
    ok(unsafe { sys::cuMemFree_v2(raw_memory) }, "cuMemFree");
}

fn main() {
    // HALCYON_CUDA_BENCH_FAKE=1: on the fake driver (testing/fake-gpu), where only the call
    // overhead and the host side of transfers mean anything (its "device" is host threads).
    let fake = std::env::var_os("HALCYON_CUDA_BENCH_FAKE").is_some();
    if fake {
        if let Err(e) = halcyon_fake_gpu::client::Fake::load() {
            println!("skipping the CUDA benchmarks: cannot load the fake driver: {e}");
            return;
        }
    }
    let probe = match probe::probe() {
        Ok(probe) => probe,
        Err(e) => {
            println!("skipping the CUDA benchmarks: {e}");
            return;
        }
    };
    // A device must exist too (cuInit succeeds on a machine whose GPUs are all hidden).
    if let Err(e) = halcyon_cuda::CudaApi::new(probe, 0) {
        println!("skipping the CUDA benchmarks: {e}");
        return;
    }
    let raw = Raw::new();
    calls(&raw, probe);
    if fake {
        let mut criterion = Criterion::default().configure_from_args();
        // Only that the table replay works on the fake (its times mean nothing).
        replay_table(&mut criterion, &raw);
        read(&mut criterion, &raw, "cuda_read_64m", 64 << 20, 20);
        write(&mut criterion, &raw);
        criterion.final_summary();
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    round_trip(&mut criterion, &raw);
    paired(&raw);
    read(&mut criterion, &raw, "cuda_read_4k", 4 << 10, 100);
    read(&mut criterion, &raw, "cuda_read_64m", 64 << 20, 20);
    write(&mut criterion, &raw);
    replay(&mut criterion, &raw);
    replay_table(&mut criterion, &raw);
    criterion.final_summary();
}

/// 256 bytes, the `add_one_u32` launches' buffer in `cuda_replay_table_100`.
const TABLE_BYTES: u64 = 256;

/// `REPLAYED` launches of `add_one_u32(ptr, 0)`, for `cuda_replay_table_100`: the graph, its
/// executable graph and its kernel nodes (the graph is a chain: one stream's capture).
fn table_graph(raw: &Raw, ptr: CUdeviceptr) -> (CUgraph, CUgraphExec, Vec<CUgraphNode>) {
    let mut graph: CUgraph = std::ptr::null_mut();
    let mut exec: CUgraphExec = std::ptr::null_mut();
    let mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED; // as halcyon captures
                                                                    // SAFETY: as in `Raw::new`; the launches' parameters are a pointer and a u32, as the
                                                                    // kernel takes them, alive for each call.
    unsafe {
        ok(
            sys::cuStreamBeginCapture_v2(raw.stream, mode),
            "cuStreamBeginCapture",
        );
        for _ in 0..REPLAYED {
            with_add_one_params(ptr, |params| {
                ok(
                    sys::cuLaunchKernel(
                        raw.add_one,
                        1,
                        1,
                        1,
                        64,
                        1,
                        1,
                        0,
                        raw.stream,
                        params,
                        std::ptr::null_mut(),
                    ),
                    "cuLaunchKernel",
                )
            });
        }
        ok(
            sys::cuStreamEndCapture(raw.stream, &mut graph),
            "cuStreamEndCapture",
        );
        ok(
            sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0),
            "cuGraphInstantiateWithFlags",
        );
    }
    let mut nodes = Vec::new();
    let mut next: [CUgraphNode; 1] = [std::ptr::null_mut()];
    let mut count = 1;
    // SAFETY: a live graph; out-pointers valid for one node and a count.
    ok(
        unsafe { sys::cuGraphGetRootNodes(graph, next.as_mut_ptr(), &mut count) },
        "cuGraphGetRootNodes",
    );
    while count == 1 {
        nodes.push(next[0]);
        // SAFETY: a node of the live graph; as above.
        ok(
            unsafe { sys::cuGraphNodeGetDependentNodes(next[0], next.as_mut_ptr(), &mut count) },
            "cuGraphNodeGetDependentNodes",
        );
    }
    assert_eq!(nodes.len(), REPLAYED, "one kernel node per launch");
    (graph, exec, nodes)
}

/// Calls `f` with `kernelParams` for `add_one_u32(ptr, 0)`.
fn with_add_one_params<R>(ptr: CUdeviceptr, f: impl FnOnce(*mut *mut std::ffi::c_void) -> R) -> R {
    let n = 0u32;
    let mut params = [
        (&ptr as *const CUdeviceptr).cast_mut().cast(),
        (&n as *const u32).cast_mut().cast(),
    ];
    f(params.as_mut_ptr())
}

fn replay_table(c: &mut Criterion, raw: &Raw) {
    let mut group = c.benchmark_group("cuda_replay_table_100");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(REPLAYED as u64));
    let mut buffers: [CUdeviceptr; 2] = [0; 2];
    for buffer in &mut buffers {
        // SAFETY: a valid out-pointer; Raw::new made the context current.
        ok(
            unsafe { sys::cuMemAlloc_v2(buffer, TABLE_BYTES as usize) },
            "cuMemAlloc",
        );
    }
    let (graph, exec, nodes) = table_graph(raw, buffers[0]);
    let mut turn = 0;
    group.bench_function("raw/graph_update", |b| {
        b.iter(|| {
            turn ^= 1;
            for &node in &nodes {
                with_add_one_params(buffers[turn], |params| {
                    let update = CUDA_KERNEL_NODE_PARAMS {
                        func: raw.add_one,
                        gridDimX: 1,
                        gridDimY: 1,
                        gridDimZ: 1,
                        blockDimX: 64,
                        blockDimY: 1,
                        blockDimZ: 1,
                        sharedMemBytes: 0,
                        kernelParams: params,
                        extra: std::ptr::null_mut(),
                        kern: std::ptr::null_mut(),
                        ctx: std::ptr::null_mut(),
                    };
                    // SAFETY: a kernel node of the graph `exec` was instantiated from, both
                    // live; parameters as the kernel takes them, alive for the call.
                    ok(
                        unsafe { sys::cuGraphExecKernelNodeSetParams_v2(exec, node, &update) },
                        "cuGraphExecKernelNodeSetParams",
                    );
                });
            }
            raw.launch_graph(exec);
            raw.stream_sync();
        })
    });
    // SAFETY: handles made above, idle (every launch synchronised).
    unsafe {
        ok(sys::cuGraphExecDestroy(exec), "cuGraphExecDestroy");
        ok(sys::cuGraphDestroy(graph), "cuGraphDestroy");
        for buffer in buffers {
            ok(sys::cuMemFree_v2(buffer), "cuMemFree");
        }
    }
    for (name, graphs) in [("halcyon", false), ("halcyon_graphs", true)] {
        let device = TableLoop::new(options(CompletionStrategy::CompletionThread, graphs));
        group.bench_function(format!("{name}/execute_table_block_on"), |b| {
            b.iter(|| device.run())
        });
        let stat = |key: halcyon::device::Key<u64>| {
            device
                .device
                .query(key)
                .map_or("?".to_string(), |v| v.to_string())
        };
        use halcyon_stream::keys;
        println!(
            "{name}: {} graph launches, {} kernel updates, {} bypasses in {} submissions",
            stat(keys::GRAPH_LAUNCHES),
            stat(keys::GRAPH_KERNEL_UPDATES),
            stat(keys::GRAPH_BYPASSES),
            stat(keys::SUBMISSIONS)
        );
    }
    group.finish();
}

/// A reusable command buffer of `REPLAYED` `add_one_u32(slot 0, 0)` dispatches, executed with
/// one of two buffers in turn.
struct TableLoop {
    device: Device,
    queue: Queue,
    timeline: Timeline,
    command_buffer: CommandBuffer,
    tables: [BindingTable; 2],
    turn: std::cell::Cell<usize>,
    _buffers: [Buffer; 2],
}

impl TableLoop {
    fn new(options: CudaDeviceOptions) -> TableLoop {
        let device = create_device_with(0, options).expect("cuda://0");
        let queue = device.queue(0).expect("queue");
        let module = CudaModule::ptx(
            STANDARD_PTX,
            vec![halcyon_conformance::kernels::add_one_u32()],
        );
        let executable = device.load_executable(&module.spec()).expect("executable");
        let kernel = executable.kernel_at(0).expect("kernel");
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        for _ in 0..REPLAYED {
            let launch = kernel
                .launch([1, 1, 1])
                .constant(0u32)
                .binding(Binding::slot(0, 0, TABLE_BYTES));
            builder.dispatch(&launch).expect("record");
        }
        let allocate = || {
            device
                .allocator()
                .allocate(TABLE_BYTES, BufferParams::DEVICE)
                .expect("buffer")
        };
        let buffers = [allocate(), allocate()];
        let tables = [0, 1].map(|i| BindingTable::from_ranges([buffers[i].whole()]));
        TableLoop {
            timeline: queue.timeline().expect("timeline"),
            queue,
            device,
            command_buffer: builder.finish(),
            tables,
            turn: std::cell::Cell::new(0),
            _buffers: buffers,
        }
    }

    fn run(&self) {
        let turn = self.turn.get() ^ 1;
        self.turn.set(turn);
        block_on(self.queue.execute(
            self.timeline.next(),
            &self.command_buffer,
            Some(&self.tables[turn]),
        ))
        .expect("run");
    }
}
