//! Benchmarks of the Vulkan device (`halcyon-vulkan`) on `vulkan://0`, each next to raw `ash`
//! doing the same work in the same run (its own instance and device, the same SPIR-V).
//!
//! Run with `CARGO_TARGET_DIR=target/bench cargo bench --bench vulkan` (about two minutes). If
//! Vulkan is unavailable (no loader, no device) the benchmark says why and exits cleanly.
//!
//! * `tiny/*`: `b[i] += 1` over 256 `u32` (four workgroups of 64), submitted and awaited once
//!   per iteration:
//!   * `tiny/halcyon/dispatch`: `queue.dispatch` on a queue timeline, then
//!     `futures::executor::block_on` of the `Submission`;
//!   * `tiny/halcyon/execute`: the same with a reusable `CommandBuffer` and `queue.execute`;
//!   * `tiny/halcyon/dispatch_spin_20us`, `tiny/halcyon/dispatch_wait_1ms`: `dispatch` with a
//!     completion budget of 20 µs or 1 ms ([`Device::set_completion_spin`]; zero by default on
//!     Vulkan): the awaiting thread's first poll waits in `vkWaitSemaphores` itself for up to
//!     the budget and completes the submission there (`DeviceBackend::wait_native`), instead
//!     of being woken by the queue's completion thread;
//!   * `tiny/raw_ash`: a command buffer recorded once; `vkQueueSubmit` signalling the next value
//!     of a timeline semaphore, then `vkWaitSemaphores` for it.
//!   * `tiny/raw_ash_waiter_thread`: the same submissions awaited without blocking in Vulkan,
//!     the least any async await needs: a second thread waits in `vkWaitSemaphores` and unparks
//!     the submitting thread (one more thread hop than `raw_ash`, which blocks in the driver).
//! * `chain_10k/*`: 10 000 back-to-back submissions of that dispatch, each waiting for the
//!   previous value of a timeline and signalling the next; only the last is awaited. One
//!   iteration is the whole chain (divide by 10 000 for the cost per submission).
//! * `idle`: the process's CPU time (`/proc/self/stat`) over one idle second with a live device
//!   whose reactor has parked after work (printed, not a criterion benchmark).
//!
//! At the end a table of criterion's median estimates and the halcyon / raw ratios is printed,
//! then `paired`: the tiny dispatch with no budget, with a 1 ms budget, and raw ash, one block
//! of each in turn (`PAIRED_ROUNDS`, default 300, blocks of 50), medians and ratios from one
//! interleaved run (criterion's groups run minutes apart on a machine whose speed drifts).

use std::ffi::CStr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;
use criterion::{Criterion, SamplingMode};
use futures::executor::block_on;
use halcyon::{
    Buffer, BufferParams, CommandBuffer, CommandBufferMode, Device, EntryPoint, Executable, Queue,
    StatusCode,
};
use halcyon_vulkan::SpirvModule;

/// Elements of the tiny dispatch.
const TINY: u32 = 256;
/// Invocations per workgroup.
const WORKGROUP: u32 = 64;
/// Submissions in a chain.
const CHAIN: u64 = 10_000;

const WGSL: &str = r#"
struct Constants { n: u32 }
var<push_constant> constants: Constants;
@group(0) @binding(0) var<storage, read_write> data: array<u32>;

@compute @workgroup_size(64, 1, 1)
fn add_one(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < constants.n) {
        data[i] = data[i] + 1u;
    }
}
"#;

/// The halcyon side: device, queue, executable, one host-visible buffer.
struct Halcyon {
    device: Device,
    queue: Queue,
    executable: Executable,
    buffer: Buffer,
}

impl Halcyon {
    fn new(device: Device, module: SpirvModule) -> Halcyon {
        let queue = device.queue(0).expect("queue 0");
        assert_eq!(
            module.entry_points(),
            [EntryPoint {
                name: "add_one".into(),
                workgroup_size: [WORKGROUP, 1, 1],
                binding_count: 1,
                constant_count: 1,
            }]
        );
        let executable = device
            .load_executable(&module.spec())
            .expect("load executable");
        let buffer = device
            .allocator()
            .allocate(TINY as u64 * 4, BufferParams::HOST)
            .expect("allocate");
        buffer
            .map_write(..)
            .expect("map")
            .as_mut_slice::<u32>()
            .expect("u32 view")
            .fill(0);
        Halcyon {
            device,
            queue,
            executable,
            buffer,
        }
    }

    fn reusable(&self) -> CommandBuffer {
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder
            .dispatch(
                &self
                    .executable
                    .kernel_at(0)
                    .expect("kernel")
                    .launch([TINY / WORKGROUP, 1, 1])
                    .constant(TINY)
                    .binding(self.buffer.whole()),
            )
            .expect("record dispatch");
        builder.finish()
    }

    fn value(&self) -> u32 {
        self.buffer
            .map_read(..)
            .expect("map")
            .as_slice::<u32>()
            .expect("u32 view")[0]
    }
}

/// The raw ash side: everything created once, one command buffer recorded once.
struct Raw {
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    queue: vk::Queue,
    timeline: vk::Semaphore,
    value: u64,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    mapped: *const u32,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    module: vk::ShaderModule,
    pipeline: vk::Pipeline,
    descriptor_pool: vk::DescriptorPool,
    command_pool: vk::CommandPool,
    command_buffer: vk::CommandBuffer,
}

fn check(what: &str, result: Result<(), vk::Result>) {
    if let Err(r) = result {
        panic!("raw ash: {what} failed: {r:?}");
    }
}

impl Raw {
    fn new(words: &[u32]) -> Result<Raw, String> {
        // SAFETY: loading the system Vulkan loader (what every Vulkan application does); `entry`
        // keeps it open while the instance and device live (dropped last, in `Drop`).
        let entry = unsafe { ash::Entry::load() }.map_err(|e| format!("no Vulkan loader: {e}"))?;
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
        let info = vk::InstanceCreateInfo::default().application_info(&app);
        // SAFETY: the create info lives across the call.
        let instance = unsafe { entry.create_instance(&info, None) }
            .map_err(|r| format!("vkCreateInstance: {r:?}"))?;
        // SAFETY: the instance is live; every call below uses objects created from it (and,
        // later, from `device`), with infos that live across each call. Objects are destroyed in
        // reverse order in `Drop`.
        unsafe {
            let physical = *instance
                .enumerate_physical_devices()
                .map_err(|r| format!("vkEnumeratePhysicalDevices: {r:?}"))?
                .first()
                .ok_or("no physical device")?;
            let family = instance
                .get_physical_device_queue_family_properties(physical)
                .iter()
                .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
                .ok_or("no compute queue family")? as u32;
            let priorities = [1.0f32];
            let queues = [vk::DeviceQueueCreateInfo::default()
                .queue_family_index(family)
                .queue_priorities(&priorities)];
            let mut features12 =
                vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
            let info = vk::DeviceCreateInfo::default()
                .queue_create_infos(&queues)
                .push_next(&mut features12);
            let device = instance
                .create_device(physical, &info, None)
                .map_err(|r| format!("vkCreateDevice: {r:?}"))?;
            let queue = device.get_device_queue(family, 0);
            let mut kind = vk::SemaphoreTypeCreateInfo::default()
                .semaphore_type(vk::SemaphoreType::TIMELINE)
                .initial_value(0);
            let timeline = device
                .create_semaphore(
                    &vk::SemaphoreCreateInfo::default().push_next(&mut kind),
                    None,
                )
                .expect("timeline semaphore");

            let size = TINY as u64 * 4;
            let buffer = device
                .create_buffer(
                    &vk::BufferCreateInfo::default()
                        .size(size)
                        .usage(vk::BufferUsageFlags::STORAGE_BUFFER),
                    None,
                )
                .expect("buffer");
            let requirements = device.get_buffer_memory_requirements(buffer);
            let properties = instance.get_physical_device_memory_properties(physical);
            let wanted =
                vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
            let type_index = (0..properties.memory_type_count)
                .find(|&i| {
                    requirements.memory_type_bits & (1 << i) != 0
                        && properties.memory_types[i as usize]
                            .property_flags
                            .contains(wanted)
                })
                .ok_or("no host-visible coherent memory type")?;
            let memory = device
                .allocate_memory(
                    &vk::MemoryAllocateInfo::default()
                        .allocation_size(requirements.size)
                        .memory_type_index(type_index),
                    None,
                )
                .expect("memory");
            device.bind_buffer_memory(buffer, memory, 0).expect("bind");
            let mapped = device
                .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
                .expect("map") as *mut u32;
            std::ptr::write_bytes(mapped, 0, TINY as usize);

            let bindings = [vk::DescriptorSetLayoutBinding::default()
                .binding(0)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)];
            let set_layout = device
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                    None,
                )
                .expect("set layout");
            let set_layouts = [set_layout];
            let ranges = [vk::PushConstantRange {
                stage_flags: vk::ShaderStageFlags::COMPUTE,
                offset: 0,
                size: 4,
            }];
            let layout = device
                .create_pipeline_layout(
                    &vk::PipelineLayoutCreateInfo::default()
                        .set_layouts(&set_layouts)
                        .push_constant_ranges(&ranges),
                    None,
                )
                .expect("pipeline layout");
            let module = device
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None)
                .expect("shader module");
            let name: &CStr = c"add_one";
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(name);
            let pipeline = device
                .create_compute_pipelines(
                    vk::PipelineCache::null(),
                    &[vk::ComputePipelineCreateInfo::default()
                        .stage(stage)
                        .layout(layout)],
                    None,
                )
                .map_err(|(_, r)| format!("vkCreateComputePipelines: {r:?}"))?[0];
            let sizes = [vk::DescriptorPoolSize {
                ty: vk::DescriptorType::STORAGE_BUFFER,
                descriptor_count: 1,
            }];
            let descriptor_pool = device
                .create_descriptor_pool(
                    &vk::DescriptorPoolCreateInfo::default()
                        .max_sets(1)
                        .pool_sizes(&sizes),
                    None,
                )
                .expect("descriptor pool");
            let set = device
                .allocate_descriptor_sets(
                    &vk::DescriptorSetAllocateInfo::default()
                        .descriptor_pool(descriptor_pool)
                        .set_layouts(&set_layouts),
                )
                .expect("descriptor set")[0];
            let buffer_info = [vk::DescriptorBufferInfo {
                buffer,
                offset: 0,
                range: size,
            }];
            device.update_descriptor_sets(
                &[vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(0)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(&buffer_info)],
                &[],
            );
            let command_pool = device
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default().queue_family_index(family),
                    None,
                )
                .expect("command pool");
            let command_buffer = device
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(command_pool)
                        .level(vk::CommandBufferLevel::PRIMARY)
                        .command_buffer_count(1),
                )
                .expect("command buffer")[0];
            device
                .begin_command_buffer(
                    command_buffer,
                    &vk::CommandBufferBeginInfo::default()
                        .flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE),
                )
                .expect("begin");
            device.cmd_bind_pipeline(command_buffer, vk::PipelineBindPoint::COMPUTE, pipeline);
            device.cmd_bind_descriptor_sets(
                command_buffer,
                vk::PipelineBindPoint::COMPUTE,
                layout,
                0,
                &[set],
                &[],
            );
            device.cmd_push_constants(
                command_buffer,
                layout,
                vk::ShaderStageFlags::COMPUTE,
                0,
                &TINY.to_le_bytes(),
            );
            device.cmd_dispatch(command_buffer, TINY / WORKGROUP, 1, 1);
            let barrier = vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
                .dst_access_mask(vk::AccessFlags::HOST_READ | vk::AccessFlags::HOST_WRITE);
            device.cmd_pipeline_barrier(
                command_buffer,
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            );
            device.end_command_buffer(command_buffer).expect("end");
            Ok(Raw {
                _entry: entry,
                instance,
                device,
                queue,
                timeline,
                value: 0,
                buffer,
                memory,
                mapped,
                set_layout,
                layout,
                module,
                pipeline,
                descriptor_pool,
                command_pool,
                command_buffer,
            })
        }
    }

    /// Submits the command buffer: waits for the current timeline value, signals the next.
    fn submit(&mut self) {
        let wait = [self.value];
        self.value += 1;
        let signal = [self.value];
        let mut timeline = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait)
            .signal_semaphore_values(&signal);
        let semaphores = [self.timeline];
        let stages = [vk::PipelineStageFlags::ALL_COMMANDS];
        let command_buffers = [self.command_buffer];
        let submit = vk::SubmitInfo::default()
            .wait_semaphores(&semaphores)
            .wait_dst_stage_mask(&stages)
            .command_buffers(&command_buffers)
            .signal_semaphores(&semaphores)
            .push_next(&mut timeline);
        // SAFETY: one thread submits; every handle is live; the command buffer was recorded with
        // SIMULTANEOUS_USE, so resubmitting it while an earlier submission is pending is valid.
        check("vkQueueSubmit", unsafe {
            self.device
                .queue_submit(self.queue, &[submit], vk::Fence::null())
        });
    }

    /// Blocks until the last submission finished.
    fn wait(&self) {
        let semaphores = [self.timeline];
        let values = [self.value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        // SAFETY: the semaphore is a live timeline semaphore of `device`.
        check("vkWaitSemaphores", unsafe {
            self.device.wait_semaphores(&info, u64::MAX)
        });
    }

    fn first(&self) -> u32 {
        // SAFETY: the mapping holds `TINY` u32; the caller waited for every submission (and the
        // recorded barrier made the device writes host-visible).
        unsafe { self.mapped.read_volatile() }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: after waiting idle no submission uses any object; each is destroyed once, in
        // reverse creation order, the instance last.
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_command_pool(self.command_pool, None);
            self.device
                .destroy_descriptor_pool(self.descriptor_pool, None);
            self.device.destroy_pipeline(self.pipeline, None);
            self.device.destroy_shader_module(self.module, None);
            self.device.destroy_pipeline_layout(self.layout, None);
            self.device
                .destroy_descriptor_set_layout(self.set_layout, None);
            self.device.unmap_memory(self.memory);
            self.device.destroy_buffer(self.buffer, None);
            self.device.free_memory(self.memory, None);
            self.device.destroy_semaphore(self.timeline, None);
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

fn tiny(c: &mut Criterion, halcyon: &Halcyon, raw: &mut Raw) {
    let mut group = c.benchmark_group("tiny");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_millis(700))
        .measurement_time(Duration::from_secs(3));
    let queue = &halcyon.queue;
    let timeline = queue.timeline().expect("timeline");
    let cb = halcyon.reusable();
    let launch = (halcyon.executable.kernel_at(0).expect("kernel"))
        .launch([TINY / WORKGROUP, 1, 1])
        .constant(TINY)
        .binding(halcyon.buffer.whole());
    let before = halcyon.value();
    let mut submitted = 0u32;
    group.bench_function("halcyon/dispatch", |b| {
        b.iter(|| {
            submitted += 1;
            block_on(queue.dispatch(timeline.next(), &launch)).expect("dispatch")
        })
    });
    group.bench_function("halcyon/execute", |b| {
        b.iter(|| {
            submitted += 1;
            block_on(queue.execute(timeline.next(), &cb, None)).expect("execute")
        })
    });
    // The A/B of the completion budget (zero by default here): the same dispatch, its awaiting
    // thread waiting in vkWaitSemaphores itself, for up to 20 µs (less than the dispatch takes
    // on lavapipe: it then sleeps as usual) and up to 1 ms (enough).
    let spin = halcyon.device.completion_spin();
    for (name, budget) in [
        ("halcyon/dispatch_spin_20us", Duration::from_micros(20)),
        ("halcyon/dispatch_wait_1ms", Duration::from_millis(1)),
    ] {
        halcyon.device.set_completion_spin(budget);
        group.bench_function(name, |b| {
            b.iter(|| {
                submitted += 1;
                block_on(queue.dispatch(timeline.next(), &launch)).expect("dispatch")
            })
        });
    }
    halcyon.device.set_completion_spin(spin);
    let raw_before = raw.first();
    let mut raw_submitted = 0u32;
    group.bench_function("raw_ash", |b| {
        b.iter(|| {
            raw_submitted += 1;
            raw.submit();
            raw.wait();
        })
    });
    // The least any non-blocking await needs: a thread waits in vkWaitSemaphores (for the next
    // value, before it is submitted, as halcyon's completion threads do) and wakes the awaiting
    // thread, which parks meanwhile. The same submissions as `raw_ash`, one more thread hop.
    let reached = Arc::new(AtomicU64::new(raw.value));
    let stop = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (device, timeline) = (raw.device.clone(), raw.timeline);
        let (reached, stop) = (reached.clone(), stop.clone());
        let main = std::thread::current();
        let mut next = raw.value + 1;
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let (semaphores, values) = ([timeline], [next]);
                let info = vk::SemaphoreWaitInfo::default()
                    .semaphores(&semaphores)
                    .values(&values);
                // SAFETY: the timeline outlives this thread (joined before `Raw` is dropped).
                if unsafe { device.wait_semaphores(&info, 100_000_000) }.is_ok() {
                    reached.store(next, Ordering::Release);
                    main.unpark();
                    next += 1;
                }
            }
        })
    };
    group.bench_function("raw_ash_waiter_thread", |b| {
        b.iter(|| {
            raw_submitted += 1;
            raw.submit();
            while reached.load(Ordering::Acquire) < raw.value {
                std::thread::park();
            }
        })
    });
    stop.store(true, Ordering::Release);
    waiter.join().expect("waiter thread");
    group.finish();
    assert_eq!(
        halcyon.value(),
        before.wrapping_add(submitted),
        "halcyon result"
    );
    assert_eq!(
        raw.first(),
        raw_before.wrapping_add(raw_submitted),
        "raw result"
    );
}

fn chain(c: &mut Criterion, halcyon: &Halcyon, raw: &mut Raw) {
    let mut group = c.benchmark_group("chain_10k");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(8));
    let queue = &halcyon.queue;
    let cb = halcyon.reusable();
    group.bench_function("halcyon/execute", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let timeline = queue.timeline().expect("timeline");
                let start = Instant::now();
                for _ in 1..CHAIN {
                    drop(queue.execute(timeline.next(), &cb, None));
                }
                block_on(queue.execute(timeline.next(), &cb, None)).expect("chain");
                total += start.elapsed();
            }
            total
        })
    });
    group.bench_function("raw_ash", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                for _ in 0..CHAIN {
                    raw.submit();
                }
                raw.wait();
            }
            start.elapsed()
        })
    });
    group.finish();
}

fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // After the command name (in parentheses): utime is field 14, stime 15 (1-based).
    let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0, // USER_HZ
        _ => f64::NAN,
    }
}

/// CPU milliseconds the whole process used per idle second with `device` live.
fn idle_cpu(halcyon: &Halcyon) -> f64 {
    let timeline = halcyon.queue.timeline().expect("timeline");
    block_on(
        halcyon
            .queue
            .execute(timeline.next(), &halcyon.reusable(), None),
    )
    .expect("work");
    std::thread::sleep(Duration::from_millis(200));
    let (cpu, wall) = (cpu_seconds(), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    (cpu_seconds() - cpu) * 1000.0 / wall.elapsed().as_secs_f64()
}

/// Criterion's median estimate (ns) of benchmark `id`, from its `estimates.json`.
fn median_ns(dir: &std::path::Path, id: &str) -> Option<f64> {
    let text = std::fs::read_to_string(dir.join(id).join("new/estimates.json")).ok()?;
    let median = &text[text.find("\"median\"")?..];
    let point = &median[median.find("\"point_estimate\":")? + "\"point_estimate\":".len()..];
    let end = point.find([',', '}'])?;
    point[..end].trim().parse().ok()
}

fn main() {
    let device = match halcyon_vulkan::create_device(0) {
        Ok(device) => device,
        Err(error)
            if error.code() == StatusCode::Unavailable || error.code() == StatusCode::NotFound =>
        {
            println!("vulkan bench skipped: vulkan://0 is unavailable: {error}");
            return;
        }
        Err(error) => panic!("cannot create vulkan://0: {error}"),
    };
    // Both sides run the SPIR-V naga writes for halcyon's checked path.
    let module = SpirvModule::from_wgsl(WGSL).expect("WGSL compiles");
    let mut raw = match Raw::new(module.words()) {
        Ok(raw) => raw,
        Err(why) => {
            println!("vulkan bench skipped: raw ash setup failed: {why}");
            return;
        }
    };
    println!("device: {}", device.info().name);
    let halcyon = Halcyon::new(device, module);
    let output = PathBuf::from(std::env::var_os("CARGO_TARGET_DIR").unwrap_or("target".into()))
        .join("criterion");
    let mut c = Criterion::default()
        .output_directory(&output)
        .configure_from_args();
    tiny(&mut c, &halcyon, &mut raw);
    chain(&mut c, &halcyon, &mut raw);
    paired(&halcyon, &mut raw);
    let idle = idle_cpu(&halcyon);
    c.final_summary();

    let stats = |key: &str| halcyon.device.query_raw(key).unwrap_or(-1);
    println!(
        "\nhalcyon-vulkan counters: submits {}, completed {}, reactor parks {}, reactor wakeups {}, \
         pending-action polls {}, watch interrupts {}, host waits {}, native waits {}",
        stats("vulkan.submits"),
        stats("vulkan.completed"),
        stats("vulkan.reactor_parks"),
        stats("vulkan.reactor_wakeups"),
        stats("vulkan.reactor_polls"),
        stats("vulkan.watch_interrupts"),
        stats("vulkan.host_waits"),
        stats("vulkan.native_waits"),
    );
    println!(
        "\n{:<28} {:>14} {:>14} {:>8}",
        "benchmark (median)", "halcyon", "raw ash", "ratio"
    );
    let row = |name: &str, ours: &str, theirs: &str, per: f64, unit: &str| {
        let (Some(a), Some(b)) = (median_ns(&output, ours), median_ns(&output, theirs)) else {
            println!("{name:<28} (not measured in this run)");
            return;
        };
        println!(
            "{name:<28} {:>11.1} {unit} {:>11.1} {unit} {:>7.2}x",
            a / per,
            b / per,
            a / b
        );
    };
    row(
        "tiny dispatch round trip",
        "tiny/halcyon_dispatch",
        "tiny/raw_ash",
        1e3,
        "us",
    );
    row(
        "tiny dispatch, 20 us spin",
        "tiny/halcyon_dispatch_spin_20us",
        "tiny/raw_ash",
        1e3,
        "us",
    );
    row(
        "tiny dispatch, 1 ms wait",
        "tiny/halcyon_dispatch_wait_1ms",
        "tiny/raw_ash",
        1e3,
        "us",
    );
    row(
        "tiny execute round trip",
        "tiny/halcyon_execute",
        "tiny/raw_ash",
        1e3,
        "us",
    );
    row(
        "tiny execute vs raw + waiter",
        "tiny/halcyon_execute",
        "tiny/raw_ash_waiter_thread",
        1e3,
        "us",
    );
    row(
        "raw + waiter vs raw",
        "tiny/raw_ash_waiter_thread",
        "tiny/raw_ash",
        1e3,
        "us",
    );
    row(
        "chain_10k per submission",
        "chain_10k/halcyon_execute",
        "chain_10k/raw_ash",
        1e3 * CHAIN as f64,
        "us",
    );
    println!("idle process CPU with a live device: {idle:.2} ms per second");
}

/// The tiny dispatch with no completion budget, with a 1 ms budget (the awaiting thread waits
/// in `vkWaitSemaphores`), and raw ash, in interleaved blocks: medians per round trip and
/// ratios to raw ash.
fn paired(halcyon: &Halcyon, raw: &mut Raw) {
    const BLOCK: u32 = 50;
    let rounds: usize = std::env::var("PAIRED_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(300);
    let queue = &halcyon.queue;
    let timeline = queue.timeline().expect("timeline");
    let launch = (halcyon.executable.kernel_at(0).expect("kernel"))
        .launch([TINY / WORKGROUP, 1, 1])
        .constant(TINY)
        .binding(halcyon.buffer.whole());
    let spin = halcyon.device.completion_spin();
    let mut times: [Vec<f64>; 3] = Default::default();
    for _ in 0..rounds {
        for (i, budget) in [Duration::ZERO, Duration::from_millis(1)]
            .into_iter()
            .enumerate()
        {
            halcyon.device.set_completion_spin(budget);
            let start = Instant::now();
            for _ in 0..BLOCK {
                block_on(queue.dispatch(timeline.next(), &launch)).expect("dispatch");
            }
            times[i].push(start.elapsed().as_secs_f64() * 1e6 / f64::from(BLOCK));
        }
        let start = Instant::now();
        for _ in 0..BLOCK {
            raw.submit();
            raw.wait();
        }
        times[2].push(start.elapsed().as_secs_f64() * 1e6 / f64::from(BLOCK));
    }
    halcyon.device.set_completion_spin(spin);
    let medians = times.map(|mut t| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    });
    println!("\npaired ({rounds} rounds of {BLOCK} each, interleaved), median per round trip:");
    println!(
        "  halcyon dispatch            {:8.1} us  {:.2}x raw",
        medians[0],
        medians[0] / medians[2]
    );
    println!(
        "  halcyon dispatch, 1 ms wait {:8.1} us  {:.2}x raw",
        medians[1],
        medians[1] / medians[2]
    );
    println!("  raw ash                     {:8.1} us", medians[2]);
}
